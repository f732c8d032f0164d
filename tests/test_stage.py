"""faulthunt stage: hostile test ids round-trip through the generated scripts, run for real."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from faulthunt.cli import main
from faulthunt.errors import UsageError
from faulthunt.rundir import write_json_atomic
from faulthunt.records.documents import Summary
from faulthunt.stage import KIT_MARKER, failing_tests, plan_kit, script_name, stage

# Each id would run `touch pwned` (in whatever directory) if a script ever let a shell or Python
# evaluate it. The scripts cd into the project dir, so that is where `pwned` would appear.
HOSTILE_IDS = [
    "a b$(touch pwned)",
    "`touch pwned`",
    "x;touch pwned;y",
    "q'\"' && touch pwned #",
    "p|touch pwned&",
]
SENTINEL = "pwned"


def make_project(root: Path) -> Path:
    project = root / "proj $(touch pwned) 'dir'"
    project.mkdir()
    (project / "test_hostile.py").write_text(textwrap.dedent(f'''
        import os
        import pytest

        IDS = {HOSTILE_IDS!r}

        @pytest.mark.parametrize("val", IDS, ids=IDS)
        def test_h(val, request):
            with open(os.path.join(os.path.dirname(__file__), "ran.txt"), "a") as f:
                f.write(request.node.nodeid + "\\n")
            assert False, "planted failure"
    '''))
    return project


def make_run(root: Path, project: Path, nodeids: list[str], *, workers: int = 0) -> Path:
    run = root / "run"
    (run / "events").mkdir(parents=True)
    write_json_atomic(run / "run.json", {
        "id": "20261202-150000-beef", "argv": ["faulthunt", "stress"], "pytest_args": ["test_hostile.py"],
        "pytest_argv": [sys.executable, "-m", "pytest"], "cwd": str(project),
        "options": {"count": 1, "workers": workers}})
    write_json_atomic(run / "summary.json", {
        "tests_run": len(nodeids), "passed": 0,
        "failures": [{"nodeid": n, "base_nodeid": n, "outcome": "failed", "worker": "gw0", "pid": 1,
                      "message": "planted"} for n in nodeids],
        "by_test": [{"base_nodeid": n, "runs": 1, "failures": 1} for n in nodeids],
        "xids": [], "exit_status": 1})
    write_json_atomic(run / "env.json", {"GITHUB_TOKEN": "ghp_" + "s" * 36, "CUDA_VISIBLE_DEVICES": "0"})
    (run / "reproducer.log").write_text("pytest output\n")
    return run


def no_sentinel(*dirs: Path) -> None:
    for d in dirs:
        hits = [p for p in d.rglob(SENTINEL)]
        assert not hits, f"a hostile id was executed: {hits}"


@pytest.fixture()
def hostile(tmp_path: Path):  # type: ignore[no-untyped-def]
    project = make_project(tmp_path)
    nodeids = [f"test_hostile.py::test_h[{i}]" for i in HOSTILE_IDS]
    run = make_run(tmp_path, project, nodeids)
    kit = tmp_path / "kit $(touch pwned); `x` dir"
    return tmp_path, project, run, kit, nodeids


def read_ran(project: Path) -> list[str]:
    path = project / "ran.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_kit_files_and_static_checks(hostile) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    result = stage(run, kit)
    names = set(os.listdir(kit))
    for expected in ("run_reproducer.sh", "run_sanitizer.sh", "pyspy_workers.sh", "xid_since.sh",
                     "xid_watch.sh", "README.md", "system_identity.txt", "run", "runs", KIT_MARKER):
        assert expected in names, expected
    repros = sorted(n for n in names if n.startswith("repro_"))
    assert len(repros) == len(HOSTILE_IDS)
    for name in names:
        path = kit / name
        if name.endswith(".sh"):
            subprocess.run(["bash", "-n", str(path)], check=True)
            assert os.access(path, os.X_OK)
        elif name.endswith(".py"):
            subprocess.run([sys.executable, "-m", "py_compile", str(path)], check=True)
    identity = (kit / "system_identity.txt").read_text()
    assert "ghp_" not in identity and "GITHUB_TOKEN=<redacted>" in identity
    assert (kit / "run" / "reproducer.log").read_text() == "pytest output\n"
    assert json.loads((run / "stage" / "kit.json").read_text())["kit"] == str(kit.resolve())
    assert [json.loads(line) for line in (kit / "tests.txt").read_text().splitlines()] == nodeids
    no_sentinel(tmp)
    assert result["copy_problems"] == []


@pytest.mark.slow
def test_hostile_ids_round_trip_through_the_reproducer(hostile) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    stage(run, kit)
    proc = subprocess.run(["bash", str(kit / "run_reproducer.sh"), "1", "-q"], capture_output=True,
                          text=True, timeout=300, cwd=tmp)
    no_sentinel(tmp)
    # every hostile test ran, under its own id, and failed as planted
    assert sorted(read_ran(project)) == sorted(nodeids), proc.stdout + proc.stderr
    assert proc.returncode == 1, proc.stdout + proc.stderr
    runs = list((kit / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "summary.json").exists()
    failed = {f["base_nodeid"] for f in json.loads((runs[0] / "summary.json").read_text())["failures"]}
    assert failed == set(nodeids)


@pytest.mark.slow
def test_hostile_ids_round_trip_through_repro_scripts(hostile) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    stage(run, kit)
    for script in sorted(kit.glob("repro_*.py")):
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120, cwd=tmp)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "repro pid " in proc.stdout and "py-spy dump --native --locals --pid" in proc.stdout
    no_sentinel(tmp)
    assert sorted(read_ran(project)) == sorted(nodeids)


#: a Python process to dump: it says so once its interpreter is up (py-spy attached during
#: start-up fails: "Failed to find python version from target process")
SLEEPER = "import time; print('sleeping', flush=True); time.sleep(60)"


def _started(proc: subprocess.Popen) -> None:
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"sleeping"


@pytest.mark.slow
def test_sanitizer_xid_and_pyspy_scripts_run(hostile) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    stage(run, kit)
    env = {**os.environ, "PATH": os.environ["PATH"]}
    san = subprocess.run(["bash", str(kit / "run_sanitizer.sh")], capture_output=True, text=True,
                         timeout=300, cwd=tmp, env=env)
    # without a GPU/compute-sanitizer the command refuses with its fix; with one it runs the tests
    assert san.returncode in (0, 1, 4), san.stdout + san.stderr
    xid = subprocess.run(["bash", str(kit / "xid_since.sh")], capture_output=True, text=True, timeout=60)
    assert xid.returncode == 0, xid.stderr
    if shutil.which("py-spy"):
        sleeper = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE)
        try:
            _started(sleeper)
            spy = subprocess.run(["bash", str(kit / "pyspy_workers.sh"), str(sleeper.pid)],
                                 capture_output=True, text=True, timeout=60)
        finally:
            sleeper.kill()
            sleeper.wait()
        assert f"=== pid {sleeper.pid}" in spy.stdout
        assert spy.returncode == 0, spy.stderr  # root here: py-spy attaches
        assert "time.sleep" in spy.stdout or "<module>" in spy.stdout
    no_sentinel(tmp)


def test_reproducer_rejects_a_bad_count(hostile) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    stage(run, kit)
    proc = subprocess.run(["bash", str(kit / "run_reproducer.sh"), "$(touch pwned)"],
                          capture_output=True, text=True, timeout=30, cwd=tmp)
    assert proc.returncode == 2 and "usage" in proc.stderr
    no_sentinel(tmp)


def test_refuses_a_foreign_directory_and_restages_a_kit(hostile) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    other = tmp / "home"
    other.mkdir()
    (other / "precious.txt").write_text("keep")
    with pytest.raises(UsageError) as info:
        stage(run, other)
    assert info.value.fix and "--force" in info.value.fix
    stage(run, kit)
    (kit / "runs" / "old").mkdir()
    (kit / "continue").touch()
    stage(run, kit)  # restaging a kit is fine, keeps the reproducer's runs, drops a stale continue
    assert (kit / "runs" / "old").is_dir() and not (kit / "continue").exists()


def test_failing_tests_prefers_primary_over_collateral() -> None:
    # junk in summary.json makes RunDir.summary() None (the summary is recomputed from the
    # events), so failing_tests sees only valid summaries
    summary = msgspec.convert({"failures": [
        {"nodeid": "t.py::a[1-3]", "base_nodeid": "t.py::a", "outcome": "collateral"},
        {"nodeid": "t.py::b[2-3]", "base_nodeid": "t.py::b", "outcome": "crashed"},
        {"nodeid": "t.py::b[3-3]", "base_nodeid": "t.py::b", "outcome": "failed"}],
        "by_test": [{"base_nodeid": "t.py::b", "runs": 3}]}, Summary)
    tests = failing_tests(summary)
    assert [t.base_nodeid for t in tests] == ["t.py::b"]
    assert tests[0].failures == 2 and tests[0].runs == 3 and tests[0].outcomes == ("crashed", "failed")
    only_collateral = failing_tests(msgspec.structs.replace(summary, failures=summary.failures[:1]))
    assert [t.base_nodeid for t in only_collateral] == ["t.py::a"]


def test_no_failures_is_a_clear_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_json_atomic(run / "summary.json", {"failures": [], "tests_run": 3})
    with pytest.raises(UsageError) as info:
        plan_kit(run, identity_text="")
    assert "--test" in (info.value.fix or "")


def test_script_names_are_safe_and_unique() -> None:
    taken: set[str] = set()
    a = script_name("a/test_x.py::test_h[$(rm -rf /)]", taken)
    b = script_name("b/test_x.py::test_h[$(rm -rf /)]", taken)
    assert a != b and all(c.isalnum() or c in "_." for c in a + b)


def test_script_names_keep_the_test_name_of_a_parameter_with_colons() -> None:
    """`test_ids[a::b]` was staged as repro_b.py (the id split at the parameter's `::`)."""
    taken: set[str] = set()
    assert script_name("t.py::test_ids[a::b]", taken) == "repro_test_ids_a_b.py"
    assert script_name("t.py::TestK::test_m[x/y::z]", taken) == "repro_test_m_x_y_z.py"
    assert script_name("t.py::TestK::test_m", taken) == "repro_test_m.py"


def test_cli_stage(hostile, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    assert main(["stage", "--run", str(run), str(kit)]) == 0
    out = capsys.readouterr().out
    assert f"staged {len(nodeids)} failing test(s)" in out
    assert main(["stage", "--run", str(tmp / "nope"), str(kit)]) == 3


def test_kit_reproducer_keeps_the_runs_timeout_and_options(tmp_path: Path) -> None:
    """A hang in the kit ends as it did in the run: run_reproducer.sh passes the run's
    --timeout, its other stress options and its own pytest options (not its paths)."""
    (tmp_path / "test_h.py").write_text("import time\n\ndef test_hang():\n    time.sleep(120)\n")
    run, kit = tmp_path / "run", tmp_path / "kit"
    stress = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-q", "--xid-source",
                             "none", "--timeout", "1", "--no-recycle", "--run-dir", str(run), "--",
                             "-p", "no:randomly", "test_h.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert stress.returncode == 1, stress.stdout + stress.stderr
    plan = plan_kit(run, identity_text="")
    assert plan.stress_options == ("--timeout", "1", "--no-recycle", "--max-worker-restart", "1000")
    assert plan.pytest_options == ("-p", "no:randomly")
    stage(run, kit)
    again = subprocess.run([str(kit / "run_reproducer.sh"), "1", "-q"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode == 1, again.stdout + again.stderr
    summary = json.loads(next((kit / "runs").glob("*/summary.json")).read_text())
    assert summary["outcomes"].get("hung") == 1 and summary["timeout"]["seconds"] == 1


def test_run_pytest_options_keep_options_and_drop_selection() -> None:
    from faulthunt.stage import run_pytest_options

    assert run_pytest_options(["tests/", "-p", "no:randomly", "-k", "x", "a.py::t[1]", "-x",
                               "--deselect", "a.py::t", "-o", "a=b", "--", "-weird"]) \
        == ("-p", "no:randomly", "-x", "-o", "a=b")


def test_kit_readme_keeps_ids_exact_in_markdown(hostile) -> None:  # type: ignore[no-untyped-def]
    """`|` and backticks in ids are escaped for Markdown, never swapped for look-alikes: the id
    read back from the README's table (the fence stripped, `\\|` unescaped) is the id."""
    import re

    tmp, project, run, kit, nodeids = hostile
    stage(run, kit)
    readme = (kit / "README.md").read_text()
    assert "\u00a6" not in readme and "\u02bc" not in readme  # the look-alikes used before
    ids = []
    for line in readme.splitlines():
        if line.startswith("| `") and "repro_" in line:
            cell = line[2:].split(" | ")[0]
            fence = re.match(r"`+", cell).group(0)  # type: ignore[union-attr]
            ids.append(cell[len(fence):-len(fence)].replace("\\|", "|"))
    assert sorted(ids) == sorted(nodeids)


def test_a_damaged_run_json_is_said_and_marked_in_the_kit(hostile, capsys) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    (run / "run.json").write_text('{"id": "x", "cwd": ')  # torn
    assert main(["stage", "--run", str(run), str(kit)]) == 0
    err = capsys.readouterr().err
    assert "warning: damaged run: run.json: not valid JSON" in err
    assert "the run's directory is unknown" in err
    readme = (kit / "README.md").read_text()
    assert "## Damaged run: check before trusting this kit" in readme
    assert "the run's options are unknown" in readme
    assert (kit / "run_reproducer.sh").is_file()  # what can be staged is staged


def test_a_whole_run_has_no_damage_section(hostile) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    stage(run, kit)
    assert "Damaged run" not in (kit / "README.md").read_text()


@pytest.mark.skipif(not shutil.which("py-spy"), reason="py-spy is not installed")
def test_pyspy_workers_dumps_only_this_kits_processes(hostile) -> None:  # type: ignore[no-untyped-def]
    tmp, project, run, kit, nodeids = hostile
    stage(run, kit)
    sleep = SLEEPER + "  # pytest"
    ours = subprocess.Popen([sys.executable, "-c", sleep], stdout=subprocess.PIPE,
                            env={**os.environ, "FAULTHUNT_RUN_DIR": str(kit / "runs" / "r1")})
    other = subprocess.Popen([sys.executable, "-c", sleep],  # someone else's pytest
                             stdout=subprocess.PIPE,
                             env={**os.environ, "FAULTHUNT_RUN_DIR": str(tmp / "elsewhere")})
    (kit / "repro_sleep.py").write_text(SLEEPER.replace("; ", "\n") + "\n")
    repro = subprocess.Popen([sys.executable, str(kit / "repro_sleep.py")], cwd=tmp,
                             stdout=subprocess.PIPE)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        for p in (ours, other, repro):
            _started(p)
        spy = subprocess.run(["bash", str(kit / "pyspy_workers.sh")], capture_output=True,
                             text=True, timeout=60)
        dead = subprocess.run(["bash", str(kit / "pyspy_workers.sh"), str(gone.pid)],
                              capture_output=True, text=True, timeout=60)
    finally:
        for p in (ours, other, repro):
            p.kill()
            p.wait()
    assert spy.returncode == 0, spy.stderr
    assert f"=== pid {ours.pid}:" in spy.stdout and f"pid {other.pid}" not in spy.stdout
    assert f"=== pid {repro.pid}:" in spy.stdout  # this kit's repro script, by its path
    assert dead.returncode == 0 and dead.stderr == ""
    assert dead.stdout.strip() == f"=== pid {gone.pid}: exited before it could be dumped"


def test_repro_scripts_usage_names_the_script(hostile) -> None:  # type: ignore[no-untyped-def]
    """The docstring's usage line is the script's own name (it read `{sys.argv[0]}` literally)."""
    import ast

    tmp, project, run, kit, nodeids = hostile
    stage(run, kit)
    scripts = sorted(kit.glob("repro_*.py"))
    assert scripts
    for script in scripts:
        doc = ast.get_docstring(ast.parse(script.read_text())) or ""
        assert f"Usage: python3 {script.name} [count] [pytest options...]" in doc, doc
        assert "{" not in doc


def test_an_option_that_held_a_secret_is_said_not_silently_replayed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The kit replays the run's pytest options, scrubbed: a credential becomes `<redacted>`, which
    the kit used to pass on without a word (a rerun against `https://bob:<redacted>@host`)."""
    project = make_project(tmp_path)
    run = make_run(tmp_path, project, ["test_hostile.py::test_h[plain]"])
    info = json.loads((run / "run.json").read_text())
    info["pytest_args"] = ["test_hostile.py", "-o", "db_url=https://bob:hunter2pw@db.example/x"]
    write_json_atomic(run / "run.json", info)
    kit = tmp_path / "kit"
    assert main(["stage", "--run", str(run), str(kit)]) == 0
    err = capsys.readouterr().err
    assert "'db_url=https://bob:<redacted>@db.example/x' held a secret" in err
    readme = (kit / "README.md").read_text()
    assert "## Secrets left out" in readme and "db_url=https://bob:&lt;redacted&gt;@db.example/x" in readme
    assert "hunter2pw" not in readme + (kit / "run_reproducer.sh").read_text()
