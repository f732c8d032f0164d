"""``faulthunt sanitize`` end to end on CPU, with a stand-in compute-sanitizer.

The stand-in (tests/data/sanitizer/standin_compute_sanitizer.py) is NOT the real tool: it answers
``--help`` with the H200's real compute-sanitizer 2025.3.1 help text, rejects options that text does
not list, really runs the target (the real pytest with the real faulthunt plugin), and replays a real
H200 capture when the test fails. So the command construction, the test selection, the files written
and the parsing are exercised for real; only "the GPU had a memory error" is simulated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.cli import main
from faulthunt.cli.sanitize import exit_status, show
from faulthunt.errors import ToolMissingError
from faulthunt.rundir import create_run_dir, read_json, read_jsonl_dir, write_json_atomic
from faulthunt.sanitizer import parse_text, parse_xml, run_sanitize
from faulthunt.sanitizer import run as srun
from faulthunt.records.documents import Summary
from faulthunt.sanitizer.plan import base_of, read_last_failed

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200"
STANDIN = DATA / "sanitizer" / "standin_compute_sanitizer.py"

SUITE = '''
import time

def test_oob():
    assert False, "checksum of out[] is off by one element"

def test_streamrace():
    assert False, "scale() read stale data"

def test_ok():
    pass

def test_hang():
    time.sleep(120)
'''

@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "test_k.py").write_text(SUITE)
    return proj


def standin_env(tmp_path: Path, help_file: Path = H200 / "compute-sanitizer-help.txt") -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "compute-sanitizer"
    exe.write_text(f"#!{sys.executable}\n" + STANDIN.read_text())
    exe.chmod(0o755)
    env = dict(os.environ)
    env.pop("FAULTHUNT_COMPUTE_SANITIZER", None)
    env.pop("FAULTHUNT_RUN_DIR", None)
    env.update({
        "PATH": f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        "STANDIN_HELP": str(help_file),
        "STANDIN_ARGV_LOG": str(tmp_path / "argv.jsonl"),
        "STANDIN_REPLAY": json.dumps({
            "test_oob": {"text": str(H200 / "san_memcheck_oob1.txt"), "xml": str(H200 / "xml_memcheck_oob1.xml")},
            "test_streamrace": {"text": str(H200 / "san_memcheck_streamrace.txt"),
                                "xml": str(H200 / "xml_memcheck_streamrace.xml")},
        }),
    })
    return env


def invocations(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "argv.jsonl").read_text().splitlines()]


def stress_run(tmp_path: Path, project: Path) -> Path:
    run = create_run_dir(tmp_path / "runs" / "r1")
    write_json_atomic(run / "run.json", {"id": "r1", "cwd": str(project), "pytest_args": ["test_k.py"]})
    write_json_atomic(run / "summary.json", {
        "tests_run": 20, "passed": 16, "exit_status": 1,
        "failures": [
            {"nodeid": "test_k.py::test_oob[2-5]", "base_nodeid": "test_k.py::test_oob", "outcome": "failed"},
            {"nodeid": "test_k.py::test_oob[4-5]", "base_nodeid": "test_k.py::test_oob", "outcome": "failed"},
            {"nodeid": "test_k.py::test_streamrace[1-5]", "base_nodeid": "test_k.py::test_streamrace",
             "outcome": "crashed"},
            {"nodeid": "test_k.py::test_ok[3-5]", "base_nodeid": "test_k.py::test_ok", "outcome": "collateral"},
        ],
        "xids": [], "by_test": [],
    })
    return run


@pytest.mark.slow
def test_reruns_recorded_failures_and_writes_everything(tmp_path, project, capsys):
    run = stress_run(tmp_path, project)
    result = run_sanitize(run, env=standin_env(tmp_path), timeout=120)
    out_dir = run / "sanitizer"
    assert result.out_dir == out_dir and exit_status(result) == 1
    # exactly the recorded failing runs, collateral left out: the first recorded repeat step of
    # each, with the stress run's --count so that pytest-repeat makes that id
    assert [t["nodeid"] for t in result.tests] == ["test_k.py::test_oob[2-5]", "test_k.py::test_streamrace[1-5]"]
    assert [t["base"] for t in result.tests] == ["test_k.py::test_oob", "test_k.py::test_streamrace"]
    head = result.findings[0]
    assert (head.kernel, head.file, head.line, head.nodeid) == ("max_reduce_off_by_one", "faults.cu", 18, "test_k.py::test_oob[2-5]")
    race = [f for f in result.findings if f.nodeid == "test_k.py::test_streamrace[1-5]"]
    assert race[0].kernel == "scale" and race[0].line == 26 and race[0].count == 20
    assert race[0].error == "Invalid __global__ read (potentially accessed before it is allocated)"
    assert [(o.nodeid, o.outcome, o.found_in_run, o.id_mode, o.count) for o in result.outcomes] == [
        ("test_k.py::test_oob", "found", 1, "exact", 5), ("test_k.py::test_streamrace", "found", 1, "exact", 5)]

    # the command: only options the 2025.3.1 help lists, and the defaults
    for argv in invocations(tmp_path):
        cs = argv[: argv.index(sys.executable)]
        target = argv[argv.index(sys.executable):]
        for opt in (["--target-processes", "all"], ["--error-exitcode", "86"], ["--print-limit", "1000"],
                    ["--report-api-errors", "no"], ["--track-stream-ordered-races", "all"], ["--tool", "memcheck"]):
            assert cs[cs.index(opt[0]):][:2] == opt
        assert "--xml" in cs and cs[cs.index("--save") + 1].endswith(".xml")
        assert target[1:5] == ["-m", "pytest", "-p", "faulthunt"]
        assert target[target.index("--count") + 1] == "5" and target[target.index("-n") + 1] == "0"
        # the id is data behind --faulthunt-id=, the collection root after "--", last
        assert target[-2] == "--" and target[-1] in ("test_k.py::test_oob", "test_k.py::test_streamrace")
        assert f"--faulthunt-id={target[-1]}[" in " ".join(target)

    # the files of the run directory
    log = (out_dir / "sanitizer.log").read_text()
    assert "# faulthunt sanitize: test test_k.py::test_oob[2-5] tool memcheck run 1 exit 86" in log
    assert len(parse_text(log)) == 2 + 20
    assert len(parse_xml((out_dir / "sanitizer.xml").read_text())) == 2 + 100
    doc = read_json(out_dir / "sanitizer.json")
    assert doc["records"] == 22 and doc["complete"] is True
    assert [o["outcome"] for o in doc["outcomes"]] == ["found", "found"]
    assert doc["collateral"] == ["test_k.py::test_ok"]
    assert doc["findings"][0]["kernel"] == "max_reduce_off_by_one"
    assert {"tool", "kind", "kernel", "file", "line", "access", "size", "address_range", "count", "threads",
            "blocks", "example", "host_stack", "nodeid"} <= set(doc["findings"][0])
    assert [t["sanitizer_errors"] for t in doc["tests"]] == [True, True]
    assert [t["tests"] for t in doc["tests"]] == [[["test_k.py::test_oob[2-5]", "failed"]],
                                                  [["test_k.py::test_streamrace[1-5]", "failed"]]]
    summary = (out_dir / "sanitizer_summary.txt").read_text()
    assert "Offending kernel: Invalid __global__ write (out of bounds) in kernel max_reduce_off_by_one at faults.cu:18" in summary
    assert "test_k.py::test_oob  [memcheck]  found" in summary
    # the rerun ran with the faulthunt plugin on: its own spans are in sanitizer/run/events
    spans = read_jsonl_dir(out_dir / "run" / "events").records
    assert {s["nodeid"] for s in spans if s.get("event") == "start"} == {"test_k.py::test_oob[2-5]",
                                                                         "test_k.py::test_streamrace[1-5]"}
    # the user's own pytest cache is not touched by the rerun
    assert not (project / ".pytest_cache").exists()
    # the terminal shows the outcome and findings tables (the CLI prints them)
    show(result)
    shown = capsys.readouterr().out
    assert "max_reduce_off_by_one" in shown and "offending kernel:" in shown and "found in run 1:" in shown


@pytest.mark.slow
def test_last_failed_without_a_run(tmp_path, project):
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:faulthunt", "--count", "2",
                    "-k", "not hang", "test_k.py"], cwd=project, capture_output=True, check=False)
    cached = sorted(read_last_failed(project), key=lambda r: r.base)
    assert [(r.base, r.exact) for r in cached] == [
        ("test_k.py::test_oob", ("test_k.py::test_oob[1-2]", "test_k.py::test_oob[2-2]")),
        ("test_k.py::test_streamrace", ("test_k.py::test_streamrace[1-2]", "test_k.py::test_streamrace[2-2]"))]
    result = run_sanitize(None, cwd=project, env=standin_env(tmp_path), quiet=True)
    # the cache's exact ids, rerun with the --count they were made with (pytest --lf would find none)
    assert sorted(t["nodeid"] for t in result.tests) == ["test_k.py::test_oob[1-2]", "test_k.py::test_streamrace[1-2]"]
    assert {o.outcome for o in result.outcomes} == {"found"}
    assert result.out_dir.parent.parent == project / ".faulthunt" / "runs"
    assert "no faulthunt run found" in result.notes[0]
    assert (result.out_dir / "sanitizer.json").is_file()


@pytest.mark.slow
def test_timeout_kills_the_test_and_keeps_the_log(tmp_path, project):
    run = stress_run(tmp_path, project)
    result = run_sanitize(run, tests=["test_k.py::test_hang"], timeout=3, env=standin_env(tmp_path), quiet=True)
    (t,) = result.tests
    assert t["timed_out"] and exit_status(result) == 1
    (o,) = result.outcomes
    assert o.outcome == "timed_out" and "raise --timeout" in o.text
    assert (run / t["output"]).is_file()


@pytest.mark.slow
def test_all_tools_and_memcheck_only_options(tmp_path, project):
    run = stress_run(tmp_path, project)
    # every tool with its own runs: two each, four processes at once
    result = run_sanitize(run, tool="all", tests=["test_k.py::test_ok"], padding=32, count=2, parallel=4,
                          env=standin_env(tmp_path), quiet=True)
    assert sorted(t["tool"] for t in result.tests) == sorted(["memcheck", "racecheck", "initcheck", "synccheck"] * 2)
    assert exit_status(result) == 0 and result.findings == []
    assert [(o.tool, o.outcome, o.runs) for o in result.outcomes] == [
        (t, "not_reproduced", 2) for t in ("memcheck", "racecheck", "initcheck", "synccheck")]
    for argv in invocations(tmp_path):
        tool = argv[argv.index("--tool") + 1]
        assert ("--padding" in argv) == (tool == "memcheck")
        assert ("--track-stream-ordered-races" in argv) == (tool == "memcheck")


@pytest.mark.slow
def test_old_sanitizer_gets_only_what_it_supports(tmp_path, project):
    run = stress_run(tmp_path, project)
    env = standin_env(tmp_path, DATA / "sanitizer" / "help" / "help-2020.1.0-built-from-docs.txt")
    result = run_sanitize(run, tests=["test_k.py::test_oob"], padding=16, env=env, quiet=True)
    # the stand-in rejects options its help does not list, so the run working proves none was passed
    assert result.findings[0].kernel == "max_reduce_off_by_one"
    assert any(d.startswith("--track-stream-ordered-races: not supported by compute-sanitizer 2020.1.0") for d in result.dropped)
    assert any(d.startswith("--padding") for d in result.dropped)


@pytest.mark.slow
def test_missing_compute_sanitizer(tmp_path, project, capsys):
    run = stress_run(tmp_path, project)
    env = dict(os.environ, FAULTHUNT_COMPUTE_SANITIZER=str(tmp_path / "no-such-tool"))
    with pytest.raises(ToolMissingError) as err:
        run_sanitize(run, env=env, quiet=True)
    assert "nvidia-cuda-sanitizer-api" in str(err.value)
    os.environ["FAULTHUNT_COMPUTE_SANITIZER"] = str(tmp_path / "no-such-tool")
    try:
        assert main(["sanitize", "--run", str(run)]) == 4
    finally:
        del os.environ["FAULTHUNT_COMPUTE_SANITIZER"]
    assert "pip install 'faulthunt[sanitizer]'" in capsys.readouterr().err


# --- test selection (pure) ------------------------------------------------------------------------

@pytest.mark.parametrize("nodeid,base", [
    ("t.py::test_a[3-50]", "t.py::test_a"),
    ("t.py::test_a[float32-3-50]", "t.py::test_a[float32]"),
    ("t.py::test_a[1-1]", "t.py::test_a"),
    ("t.py::test_a[float32]", "t.py::test_a[float32]"),
    ("t.py::test_a[9-3]", "t.py::test_a[9-3]"),   # not a repeat id: step > count
    ("t.py::test_a", "t.py::test_a"),
])
def test_base_of(nodeid, base):
    assert base_of(nodeid) == base


def test_selection_from_summary_and_events(tmp_path):
    # a summary.json with junk in it does not read at all (RunDir.summary() is None, and the
    # selection falls back to the events): tests_from_summary sees only valid summaries
    wanted, collateral = srun.tests_from_summary(msgspec.convert({
        "failures": [{"nodeid": "a[1-2]", "base_nodeid": "a", "outcome": "failed"},
                     {"nodeid": "b[1-2]", "outcome": "hung"},
                     {"nodeid": "c", "base_nodeid": "c", "outcome": "collateral"}],
        "xids": [{"xid": 31, "base_nodeid": "d"}, {"xid": 43}]}, Summary))
    assert wanted == ["a", "b", "d"] and collateral == ["c"]
    run = create_run_dir(tmp_path / "r")
    ev = run / "events" / "gw0-1.jsonl"
    ev.write_text("\n".join(json.dumps(r) for r in [
        {"event": "start", "nodeid": "x[1-2]", "base_nodeid": "x", "pid": 1},
        {"event": "end", "nodeid": "x[1-2]", "base_nodeid": "x", "pid": 1, "outcome": "passed"},
        {"event": "start", "nodeid": "y[1-2]", "base_nodeid": "y", "pid": 1},
        {"event": "end", "nodeid": "y[1-2]", "base_nodeid": "y", "pid": 1, "outcome": "failed"},
        {"event": "start", "nodeid": "z[2-2]", "base_nodeid": "z", "pid": 1},
    ]) + '\n{"event": "end", "nodeid": "z[2-2]", "outc')  # a worker killed mid-write
    assert srun.tests_from_events(run) == ["y", "z"]


@pytest.mark.slow
def test_nothing_to_rerun(tmp_path, project, capsys):
    run = create_run_dir(tmp_path / "runs" / "clean")
    write_json_atomic(run / "summary.json", {"tests_run": 3, "passed": 3, "failures": [], "xids": [], "exit_status": 0})
    result = run_sanitize(run, cwd=project, env=standin_env(tmp_path))
    assert exit_status(result) == 0 and result.tests == [] and result.findings == []
    doc = read_json(run / "sanitizer" / "sanitizer.json")
    assert doc["complete"] and doc["findings"] == [] and doc["tests"] == []
    show(result)
    assert "nothing to rerun" in capsys.readouterr().out


@pytest.mark.slow
def test_sanitizer_that_cannot_run_is_not_a_clean_result(tmp_path, project, capsys):
    run = stress_run(tmp_path, project)
    env = standin_env(tmp_path)
    env["STANDIN_TOOL_FAILS"] = str(DATA / "sanitizer" / "text" / "cpu_only_machine_2026.4.txt")
    result = run_sanitize(run, tests=["test_k.py::test_oob"], env=env)
    assert exit_status(result) == 4 and result.findings == []
    assert "Target application terminated before first instrumented API call" in result.tests[0]["tool_error"]
    assert result.outcomes[0].outcome == "not_checked"
    show(result)
    assert "could not check any test" in capsys.readouterr().out


def test_merged_xml_survives_a_cut_off_file():
    whole = (H200 / "xml_memcheck_oob1.xml").read_text()
    cut = (H200 / "xml_memcheck_uaf.xml").read_text()[:50_000]
    doc = srun.merged_xml([({"nodeid": 'a.py::t["x"]', "tool": "memcheck", "exit_status": 86}, whole),
                           ({"nodeid": "b.py::t", "tool": "initcheck", "exit_status": None}, cut),
                           ({"nodeid": "c.py::t", "tool": "memcheck", "exit_status": 0}, "junk <<<")])
    recs, intact = srun.parse_xml_stream(doc)
    assert intact  # one well-formed document whatever its parts were
    n_cut = len(srun.parse_xml_stream(cut)[0])
    assert 0 < n_cut < 100 and len(recs) == 2 + n_cut
    assert {r.tool for r in recs[2:]} == {"initcheck"}  # the <test tool=...> wins
    assert 'faulthunt_truncated="true"' in doc


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_base_of_never_raises(nodeid):
    assert isinstance(base_of(nodeid), str)


@pytest.mark.slow
def test_a_test_that_no_longer_exists(tmp_path, project):
    run = stress_run(tmp_path, project)
    result = run_sanitize(run, tests=["test_k.py::test_renamed"], env=standin_env(tmp_path), quiet=True)
    assert result.tests[0]["exit_status"] == 4 and exit_status(result) == 4
    assert "not checked: pytest could not run the test (exit 4" in result.outcomes[0].text


@pytest.mark.slow
def test_a_tool_that_cannot_check_says_where_it_said_why(tmp_path, project, capsys, monkeypatch):
    """compute-sanitizer failing before it checks anything (here: the stand-in missing its
    environment; on a machine without a GPU, the real one cannot start its target's CUDA): each
    test's line names the log holding what the tool printed, the verdict no longer points at
    "the notes" that were empty, and no GPU is said up front with what to do."""
    run = stress_run(tmp_path, project)
    env = standin_env(tmp_path)
    del env["STANDIN_ARGV_LOG"]  # the stand-in dies with a traceback, as a broken tool would
    env["CUDA_VISIBLE_DEVICES"] = ""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("STANDIN_ARGV_LOG", raising=False)
    assert main(["sanitize", "--run", str(run), "--count", "1", "--tool", "memcheck"]) == 4
    out, err = capsys.readouterr()
    assert "see the notes" not in out
    assert "each test's line says why, and names the log holding the tool's own output" in out
    summary = (run / "sanitizer" / "sanitizer_summary.txt").read_text()
    assert "no compute-sanitizer output (what it printed: sanitizer/logs/001-memcheck.pytest.log" in summary
    assert "KeyError: 'STANDIN_ARGV_LOG'" in (run / "sanitizer" / "logs" / "001-memcheck.pytest.log").read_text()
    assert ("CUDA_VISIBLE_DEVICES='' hides every GPU: compute-sanitizer checks GPU work only" in err
            and "run `faulthunt sanitize` on the GPU machine" in err)


@pytest.mark.slow
def test_a_secret_the_rerun_prints_is_redacted_in_its_log(tmp_path, project):
    """The reruns' pytest output (sanitizer/logs/*.pytest.log) holds what the test printed and
    its assertion: a token there stayed in the run directory (an uploaded artifact) unredacted."""
    token = "ghp_" + "a1B2c3D4e5" * 4
    (project / "test_leak.py").write_text(
        "import os\n\ndef test_leak():\n    print('token', os.environ['U6_TOKEN'])\n"
        "    assert False, 'leak ' + os.environ['U6_TOKEN']\n")
    env = dict(standin_env(tmp_path), U6_TOKEN=token)
    result = run_sanitize(None, env=env, tests=["test_leak.py::test_leak"], count=1, quiet=True,
                          cwd=project)
    logs = list((result.out_dir / "logs").glob("*.pytest.log"))
    assert logs and result.outcomes[0].outcome == "reproduced_silent"
    for path in result.out_dir.rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path
    assert "token <redacted>" in logs[0].read_text()
