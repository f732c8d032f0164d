"""Every command that reads a run refuses an empty or foreign directory given as --run (exit 2,
the fix), and writes nothing into it: map used to answer "no Xid 31 ..." and leave mapping.json
there, stage "no failing tests", merge merged it as a run of nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from faulthunt.cli import main


@pytest.fixture(params=["empty", "foreign"])
def foreign(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    where = tmp_path / "somebodys_folder"
    where.mkdir()
    if request.param == "foreign":
        (where / "notes.txt").write_text("not a run")
    return where


@pytest.mark.parametrize("argv", [
    ["map", "--run", "{run}"],
    ["map", "--run", "{run}", "0x7f7ddbe00000"],
    ["stage", "--run", "{run}", "{tmp}/kit"],
    ["session", "--run", "{run}", "--kit", "{tmp}/kit", "--timeout", "1"],
    ["isolate", "--run", "{run}", "t.py::test_a"],
    ["sanitize", "--run", "{run}"],
    ["report", "--run", "{run}", "--format", "all"],
    ["merge", "-o", "{tmp}/merged", "{run}"],
])
def test_a_directory_that_is_no_run_is_refused(foreign: Path, tmp_path: Path, argv: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    before = sorted(p.name for p in foreign.iterdir())
    args = [a.format(run=foreign, tmp=tmp_path) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{foreign} is not a faulthunt run directory" in err and "fix:" in err
    assert sorted(p.name for p in foreign.iterdir()) == before
    assert not (tmp_path / "kit").exists() and not (tmp_path / "merged").exists()


def test_a_run_holding_only_its_folders_is_a_run(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """What create_run_dir makes before anything is recorded (a run killed at once) still reads."""
    from faulthunt.rundir import create_run_dir

    run = create_run_dir(tmp_path / "r")
    assert main(["map", "--run", str(run)]) == 0
    assert "no Xid 31" in capsys.readouterr().out
