"""The kit against crafted run directories (issue 18) and parametrized ids with a count (issue 13).

A run directory is data that may have been edited: an id that reads as a pytest option
(``--basetemp=/victim`` empties /victim, ``--junitxml=/victim`` overwrites it) must be refused
when the kit is staged, and whatever the kit accepts must reach pytest as data only. The kits
here are run for real (``run_reproducer.sh`` through ``faulthunt stress``, ``repro_*.py``).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.cli import main
from faulthunt.errors import UsageError
from faulthunt.rundir import write_json_atomic
from faulthunt.stage import stage

SUITE = '''
import os
import pytest


def _record(request):
    with open(os.path.join(os.path.dirname(__file__), "ran.txt"), "a") as f:
        f.write(request.node.nodeid + "\\n")


@pytest.mark.parametrize("p", ["a b", "x/y", "bold"])
def test_odd(p, request):
    _record(request)


def test_h(request, tmp_path):  # tmp_path: what --basetemp would empty
    _record(request)
'''


@pytest.fixture()
def world(tmp_path: Path) -> dict[str, Path]:
    """A project, a victim directory and file, and the sentinel an executed id would create."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "test_s.py").write_text(SUITE)
    (project / "evil.py").write_text("open('pwned', 'w').close()\n")  # what `-p evil` would run
    victim_dir = tmp_path / "victim_dir"
    victim_dir.mkdir()
    (victim_dir / "precious.txt").write_text("keep me")
    victim_file = tmp_path / "victim.txt"
    victim_file.write_text("keep me too")
    return {"tmp": tmp_path, "project": project, "victim_dir": victim_dir, "victim_file": victim_file}


def crafted_run(world: dict[str, Path], ids: list[str], name: str = "run") -> Path:
    """A run directory whose summary names ``ids`` as its failing tests."""
    run = world["tmp"] / name
    (run / "events").mkdir(parents=True)
    write_json_atomic(run / "run.json", {
        "id": "20261203-120000-feed", "argv": ["faulthunt", "stress"], "pytest_args": ["test_s.py"],
        "pytest_argv": [sys.executable, "-m", "pytest"], "cwd": str(world["project"]),
        "options": {"count": 1, "workers": 0}})
    write_json_atomic(run / "summary.json", {
        "tests_run": len(ids), "failures": [
            {"nodeid": i, "base_nodeid": i, "outcome": "failed", "worker": "gw0", "pid": 1}
            for i in ids],
        "by_test": [{"base_nodeid": i, "runs": 1, "failures": 1} for i in ids], "exit_status": 1})
    return run


def untouched(world: dict[str, Path]) -> None:
    assert (world["victim_dir"] / "precious.txt").read_text() == "keep me"
    assert world["victim_file"].read_text() == "keep me too"
    assert not list(world["tmp"].rglob("pwned")), "an id was executed"


def ran(world: dict[str, Path]) -> list[str]:
    path = world["project"] / "ran.txt"
    return path.read_text().splitlines() if path.exists() else []


def refused_ids(world: dict[str, Path]) -> list[str]:
    return [f"--basetemp={world['victim_dir']}", f"--junitxml={world['victim_file']}", "-p evil",
            "-pevil", f"test_s.py::test_h\n--junitxml={world['victim_file']}", "", "::test_h"]


@pytest.mark.parametrize("which", range(7))
def test_stage_refuses_an_id_that_is_not_a_node_id(world: dict[str, Path], which: int) -> None:
    bad = refused_ids(world)[which]
    run = crafted_run(world, ["test_s.py::test_h", bad])
    kit = world["tmp"] / "kit"
    with pytest.raises(UsageError) as err:
        stage(run, kit)
    assert repr(bad) in err.value.message and "summary.json" in err.value.message
    assert err.value.fix
    assert not kit.exists()  # refused before anything was written
    untouched(world)


def test_cli_stage_refuses_with_exit_2(world: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run = crafted_run(world, [f"--basetemp={world['victim_dir']}"])
    assert main(["stage", "--run", str(run), str(world["tmp"] / "kit")]) == 2
    err = capsys.readouterr().err
    assert "is not a test node id" in err and "starts with '-'" in err and "fix:" in err
    assert main(["stage", "--run", str(run), f"--test=--junitxml={world['victim_file']}",
                 str(world["tmp"] / "kit")]) == 2
    untouched(world)


def run_kit(world: dict[str, Path], kit: Path) -> subprocess.CompletedProcess[str]:
    """``run_reproducer.sh 1`` and every ``repro_*.py`` of ``kit``, for real; the reproducer's result."""
    proc = subprocess.run(["bash", str(kit / "run_reproducer.sh"), "1", "-q"], capture_output=True,
                          text=True, timeout=300, cwd=world["tmp"])
    for script in sorted(kit.glob("repro_*.py")):
        subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       cwd=world["tmp"])
    return proc


@pytest.mark.slow
def test_accepted_hostile_ids_run_nothing_harmful(world: dict[str, Path]) -> None:
    """Ids that are path-shaped but carry shell syntax, and node ids with option text in their
    parameters: staged, then every script of the kit run for real."""
    victim = world["victim_dir"]
    shell = ["$(touch pwned)", "`touch pwned`", "x;touch pwned;y", "q'\"' && touch pwned #"]
    kit = world["tmp"] / "kit"
    stage(crafted_run(world, shell), kit)
    proc = run_kit(world, kit)
    untouched(world)
    (first,) = (kit / "runs").iterdir()  # pytest took them as paths, and found none
    assert "not found: $(touch pwned)" in (first / "reproducer.log").read_text(), proc.stdout
    assert ran(world) == []
    options = [f"test_s.py::test_h[ --basetemp={victim}]",
               f"test_s.py::test_odd[-p evil] --junitxml={world['victim_file']}", "test_s.py::test_h"]
    stage(crafted_run(world, options, "run2"), kit)
    proc = run_kit(world, kit)
    untouched(world)
    # the others match no test, which the reproducer's stress says (a usage error naming them, as
    # pytest's own "not found"), so the real test ran once, by its repro script
    second = next(r for r in (kit / "runs").iterdir() if r != first)
    assert "match no collected test" in (second / "reproducer.log").read_text(), proc.stdout
    assert ran(world) == ["test_s.py::test_h"], proc.stdout + proc.stderr
    sanitizer = (kit / "run_sanitizer.sh").read_text()
    assert "--test=" in sanitizer and "--test '" not in sanitizer


def test_kit_scripts_select_with_faulthunt_id(world: dict[str, Path]) -> None:
    run = crafted_run(world, ["test_s.py::test_odd[a b]"])
    kit = world["tmp"] / "kit"
    stage(run, kit)
    script = (kit / "run_reproducer.sh").read_text()
    assert "'--faulthunt-id=test_s.py::test_odd[a b]'" in script
    assert script.rstrip().endswith('"${SELECTION[@]}"')  # the selection is last on the line
    repro = next(kit.glob("repro_*.py")).read_text()
    assert "['--faulthunt-id=test_s.py::test_odd[a b]', '--', 'test_s.py::test_odd']" in repro


@pytest.mark.slow
def test_reproducer_runs_a_parametrized_id_count_times(world: dict[str, Path]) -> None:
    ids = ["test_s.py::test_odd[a b]", "test_s.py::test_odd[x/y]"]
    kit = world["tmp"] / "kit"
    stage(crafted_run(world, ids), kit)
    proc = subprocess.run(["bash", str(kit / "run_reproducer.sh"), "3", "-q", "--", "-p", "no:randomly"],
                          capture_output=True, text=True, timeout=300, cwd=world["tmp"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = ran(world)
    assert sorted(got) == sorted(f"test_s.py::test_odd[{p}-{i}-3]" for p in ("a b", "x/y")
                                 for i in (1, 2, 3)), proc.stdout + proc.stderr
    (run,) = (kit / "runs").iterdir()
    assert json.loads((run / "summary.json").read_text())["tests_run"] == 6


@pytest.mark.slow
def test_repro_script_runs_a_parametrized_id_count_times(world: dict[str, Path]) -> None:
    kit = world["tmp"] / "kit"
    stage(crafted_run(world, ["test_s.py::test_odd[x/y]"]), kit)
    (script,) = kit.glob("repro_*.py")
    proc = subprocess.run([sys.executable, str(script), "2"], capture_output=True, text=True,
                          timeout=120, cwd=world["tmp"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ran(world) == ["test_s.py::test_odd[x/y-1-2]", "test_s.py::test_odd[x/y-2-2]"]
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=world["tmp"])
    assert proc.returncode == 0 and ran(world)[2:] == ["test_s.py::test_odd[x/y]"]


def test_stage_into_a_path_under_a_file_says_so(world: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = crafted_run(world, ["test_s.py::test_h"])
    assert main(["stage", "--run", str(run), str(world["victim_file"] / "kit")]) == 2
    err = capsys.readouterr().err
    assert "cannot create the kit directory" in err and "fix:" in err and "Traceback" not in err
    assert world["victim_file"].read_text() == "keep me too"


def test_workers_from_a_crafted_run_json_are_not_options(world: dict[str, Path]) -> None:
    run = crafted_run(world, ["test_s.py::test_h"])
    info = json.loads((run / "run.json").read_text())
    info["options"]["workers"] = f"--basetemp={world['victim_dir']}"
    write_json_atomic(run / "run.json", info)
    kit = world["tmp"] / "kit"
    stage(run, kit)
    assert "-n 1 " in (kit / "run_reproducer.sh").read_text()
