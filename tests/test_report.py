"""Report: golden Markdown of the constructed sample run, JSON content, tolerance (HTML: test_report_html.py).

Regenerate the golden file with ``FAULTHUNT_REGEN_GOLDEN=1 python -m pytest tests/test_report.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.report import build_model, render

DATA = Path(__file__).parent / "data" / "report"
SAMPLE = DATA / "sample_run"


def test_markdown_golden(monkeypatch: pytest.MonkeyPatch) -> None:
    """(Asked for by its path from its parent directory, as the commands it suggests name it:
    the golden text holds no checkout's absolute path.)"""
    monkeypatch.chdir(DATA)
    text = render(build_model(Path(SAMPLE.name)), "md")
    golden = DATA / "sample_report.md"
    if os.environ.get("FAULTHUNT_REGEN_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


H200 = DATA / "h200_stress_run"


def test_h200_markdown_golden(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real H200 Xid 31 run (tests/data/report/PROVENANCE.md) renders to its golden report
    (asked for by its path from its parent directory, as the commands it suggests name it)."""
    monkeypatch.chdir(DATA)
    text = render(build_model(Path(H200.name)), "md")
    golden = DATA / "h200_report.md"
    if os.environ.get("FAULTHUNT_REGEN_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_h200_evidence_and_environment() -> None:
    m = build_model(H200)
    # recorded before worker slots were: counted in worker processes (restarted ones included)
    assert m.headline.startswith("fails 4 of 6 worker processes on their second, fourth, seventh "
                                 "or 17th test (4 failed)")
    assert [x["xid"] for x in m.xids] == [31] * 5
    assert all(x["engine"] == "GRAPHICS" for x in m.xids)
    assert all(f["device"] == "0 (from Xid)" for f in m.failures)
    e = m.environment
    assert e["driver"] == "580.159.04" and e["driver_module"] == "open" and e["cuda"] == "13.0"
    assert e["gpus"][0]["name"] == "NVIDIA H200" and e["gpus"][0]["cc"] == "9.0"
    assert e["packages"]["cupy-cuda13x"] == "14.2.0"
    assert m.reproduce.startswith("faulthunt stress -n 4 --count 20")
    env_md = render(m, "md").split("## Environment")[1].split("## What to try next")[0]
    assert "| - |" not in env_md
    assert "580.159.04 (open kernel module)" in env_md and "NVIDIA H200 (cc 9.0, 140 GiB" in env_md


@pytest.mark.slow
def test_h200_report_command_all_formats(tmp_path: Path) -> None:
    """`faulthunt report --run DIR --format all` on the real run writes all three files."""
    run = tmp_path / H200.name
    shutil.copytree(H200, run)
    p = subprocess.run([sys.executable, "-m", "faulthunt", "report", "--run", H200.name, "--format", "all"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (run / "report.md").read_text() == (DATA / "h200_report.md").read_text()
    doc = json.loads((run / "report.json").read_text())
    assert doc["rate"]["failures"] == 4 and doc["rate"]["runs"] == 40
    assert "<svg" in (run / "report.html").read_text()


@pytest.mark.parametrize("positions, plural, want", [
    ([1], False, " on its first test"),
    ([2, 1], False, " on its first or second test"),
    ([2, 4, 7, 17], True, " on their second, fourth, seventh or 17th test"),
    ([1, 2, 3, 21, 22, 112], True, " anywhere from their first to their 112th test"),
    ([], False, ""),
])
def test_position_text(positions, plural, want) -> None:
    from faulthunt.report.model import _position_text
    assert _position_text(positions, plural) == want


@pytest.mark.parametrize("procs, bad, want", [
    (8, 1, ("1 worker in 8", False)), (16, 2, ("1 worker in 8", False)),
    (6, 4, ("4 of 6 workers", True)), (4, 3, ("3 of 4 workers", True)), (4, 4, ("4 of 4 workers", True)),
])
def test_who(procs, bad, want) -> None:
    from faulthunt.report.model import _who
    assert _who(procs, bad) == want


def test_headline_counts_worker_slots_and_says_restarts() -> None:
    """-n 4 with 10 restarts: "of 4 workers", not "of 14"; restarts and lost tests said apart."""
    from faulthunt.report.model import model_from_parts

    slot_of = {f"gw{i}": f"gw{i % 4}" for i in range(14)}
    failures = [{"nodeid": f"t.py::test_a[{i}-20]", "base_nodeid": "t.py::test_a", "outcome": "crashed",
                 "worker": f"gw{w}", "pid": 100 + w} for i, w in enumerate((0, 4, 8, 1, 5))]
    failures.append({"nodeid": "t.py::test_b[3-20]", "outcome": "lost", "worker": "gw9", "pid": 109})
    summary = {"tests_run": 80, "failures": failures,
               "workers": {"processes": 14, "slots": 4, "restarts": 10, "slot_of": slot_of},
               "collection_errors": [{"nodeid": "t2.py", "message": "ImportError: x"}]}
    m = model_from_parts(run_id="r", run={}, identity={}, summary=summary, mapping=[],
                         sanitizer=None, events=[], controller=[], xids=[], hang_texts={}, notes=[])
    assert m.headline == ("crashes 1 worker in 2 (5 crashed); 5 of 80 runs, 95% interval 2.7%-13.8%;"
                          " 10 worker restarts; 1 test lost (worker died before it started);"
                          " 1 module failed to import (their tests never ran)")


def test_headline_of_failures_in_every_run_says_not_intermittent() -> None:
    """Two tests that fail in each of their 3 runs: the headline read "fails 2 of 2 workers
    anywhere from their 12th to their 20th test", a worker/position pattern where there is none."""
    from faulthunt.report.model import model_from_parts

    failures = [{"nodeid": f"t.py::test_{name}[{i}-3]", "base_nodeid": f"t.py::test_{name}",
                 "outcome": "failed", "worker": f"gw{i % 2}", "pid": 100 + i % 2}
                for name in ("a", "b") for i in range(1, 4)]
    by_test = [{"base_nodeid": "t.py::test_a", "runs": 3, "failures": 3, "collateral": 0},
               {"base_nodeid": "t.py::test_b", "runs": 3, "failures": 3, "collateral": 0},
               {"base_nodeid": "t.py::test_c", "runs": 3, "failures": 0, "collateral": 0}]
    summary = {"tests_run": 9, "failures": failures, "by_test": by_test,
               "workers": {"processes": 2, "slots": 2, "restarts": 0}}

    def headline(summary: dict) -> str:
        return model_from_parts(run_id="r", run={}, identity={}, summary=summary, mapping=[],
                                sanitizer=None, events=[], controller=[], xids=[], hang_texts={},
                                notes=[]).headline

    assert headline(summary) == ("fails in every run of 2 tests (6 failed): not intermittent; "
                                 "6 of 9 runs, 95% interval 35.4%-87.9%")
    # one of them passed once: intermittent, said by workers as before
    by_test[1] = {**by_test[1], "failures": 2}
    assert headline({**summary, "failures": failures[:5]}).startswith("fails 2 of 2 workers (5 failed)")
    # a test that ran once says nothing either way
    one = [{"base_nodeid": "t.py::test_a", "runs": 1, "failures": 1, "collateral": 0}]
    assert "every run" not in headline({**summary, "failures": failures[:1], "by_test": one})


def test_a_stopped_run_says_so_in_the_headline_and_the_steps() -> None:
    """Ctrl-C or a CI timeout's SIGTERM: the report read "0 of 2 runs failed" and "Nothing failed
    in this run: raise --count", as if the run had ended; summary.json said stopped_by."""
    from faulthunt.report.model import model_from_parts

    summary = {"tests_run": 2, "failures": [], "stopped_by": "SIGINT", "exit_status": 130,
               "interrupted": ["t.py::test_h[1-4]", "t.py::test_h[<b>-3-4]"]}
    m = model_from_parts(run_id="r", run={}, identity={}, summary=summary, mapping=[],
                         sanitizer=None, events=[], controller=[], xids=[], hang_texts={}, notes=[])
    assert m.headline.endswith("; stopped by SIGINT while 2 test runs were running "
                               "(t.py::test_h[1-4], t.py::test_h[<b>-3-4])")
    assert m.next_steps[0].startswith("The run was stopped by SIGINT while 2 test runs were running:")
    assert not any("Nothing failed" in s for s in m.next_steps)
    md = render(m, "md")
    assert "t.py::test_h[&lt;b&gt;-3-4]" in md and "<b>" not in md


def test_headline_and_evidence() -> None:
    m = build_model(SAMPLE)
    assert m.headline.startswith("fails 3 of 4 worker processes")
    assert m.rate["failures"] == 4 and m.rate["runs"] == 21
    assert m.xids[0]["verdict"] == "freed" and m.xids[0]["engine"] == "GRAPHICS"
    assert any("use-after-free" in s for s in m.next_steps)
    assert any("CUDA_LAUNCH_BLOCKING" in s for s in m.next_steps)
    assert m.hangs[0]["stack_source"] == "py-spy" and "cuStreamSynchronize" in m.hangs[0]["stack"]


def test_json_same_content() -> None:
    obj = json.loads(render(build_model(SAMPLE), "json"))
    assert obj["schema"] == "faulthunt.report/1"
    assert obj["headline"] == build_model(SAMPLE).headline
    assert len(obj["lanes"]) == 4


def test_no_sanitizer_suggests_sanitize(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    shutil.rmtree(run / "sanitizer")
    m = build_model(run)
    assert not m.sanitizer_ran
    assert any("faulthunt sanitize" in s for s in m.next_steps)


@pytest.mark.parametrize("remove", ["run.json", "identity.json", "summary.json", "mapping.json",
                                    "xid.jsonl", "controller.jsonl", "events"])
def test_tolerates_missing(tmp_path: Path, remove: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    target = run / remove
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    text = render(build_model(run), "md")
    assert text.startswith("# faulthunt report")


def test_damaged_files(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    (run / "summary.json").write_text("{not json")
    with open(run / "events" / "gw0-4300.jsonl", "a") as fh:
        fh.write('{"event": "start", "nodeid": "torn')
    m = build_model(run)
    assert any("summary.json unreadable" in n for n in m.notes)
    assert any("malformed" in n for n in m.notes)


def test_empty_dir(tmp_path: Path) -> None:
    m = build_model(tmp_path)
    assert m.rate["runs"] == 0 and m.lanes == ()
    assert "No test ran" in render(m, "md")


# The HTML page in headless Chromium: tests/test_report_html.py.


def test_output_into_a_directory_and_bad_outputs(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: `report --format html -o DIR` must not fail on DIR; bad -o says the fix."""
    from faulthunt.cli import main

    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    out = tmp_path / "out"
    out.mkdir()
    assert main(["report", "--run", str(run), "--format", "html", "-o", str(out)]) == 0
    assert "<svg" in (out / "report.html").read_text()
    assert main(["report", "--run", str(run), "--format", "all", "-o", str(tmp_path / "all")]) == 0
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == ["report.html", "report.json", "report.md"]
    capsys.readouterr()
    afile = tmp_path / "f.txt"
    afile.write_text("keep")
    assert main(["report", "--run", str(run), "--format", "all", "-o", str(afile)]) == 2
    assert main(["report", "--run", str(run), "--format", "md", "-o", str(afile / "r.md")]) == 3
    err = capsys.readouterr().err
    assert err.count("fix:") == 2 and "Traceback" not in err and afile.read_text() == "keep"


def test_reproduce_command_pastes_as_a_new_run() -> None:
    """The run's own --run-dir holds this run (stress refuses to mix a new one into it), and a
    timeout the run took from its environment is not in a new shell: the command drops the one
    and passes the other."""
    from faulthunt.report.model import _reproduce

    run = {"argv": ["/venv/bin/faulthunt", "stress", "-n", "1", "--run-dir", "/r/x", "--run-dir=/r/y",
                    "t.py", "--", "--run-dir", "kept"]}
    assert _reproduce(run) == "faulthunt stress -n 1 t.py -- --run-dir kept"
    env = {"seconds": 2.0, "from": "PYTEST_TIMEOUT"}
    assert _reproduce(run, env) == "faulthunt stress --timeout 2 -n 1 t.py -- --run-dir kept"
    off = {"seconds": None, "from": "PYTEST_TIMEOUT"}  # PYTEST_TIMEOUT=0: no timeout
    assert _reproduce(run, off) == "faulthunt stress --timeout 0 -n 1 t.py -- --run-dir kept"
    suite = {"seconds": 2.0, "from": "pytest.ini"}  # the file travels with the suite
    assert _reproduce(run, suite) == "faulthunt stress -n 1 t.py -- --run-dir kept"
    own = {"argv": ["faulthunt", "stress", "--timeout=5", "t.py"]}
    assert _reproduce(own, {"seconds": 5.0, "from": "PYTEST_ADDOPTS"}) == (
        "faulthunt stress --timeout=5 t.py")
    assert _reproduce({"argv": ["faulthunt", "demo", "--run-dir", "d"]}) == "faulthunt demo --run-dir d"


def test_report_takes_the_run_as_its_argument(capsys: pytest.CaptureFixture[str]) -> None:
    """`faulthunt report RUN`, as one types it after stress printed "run directory: RUN"
    (it was refused: unrecognized arguments); naming two runs is refused with the fix."""
    from faulthunt.cli import main

    assert main(["report", str(SAMPLE)]) == 0
    assert capsys.readouterr().out == render(build_model(SAMPLE), "md")
    assert main(["report", "--run", str(SAMPLE), str(SAMPLE)]) == 2
    err = capsys.readouterr().err
    assert "two runs named" in err and "fix: name one run" in err
