"""Output to a full disk (issue 18): "disk full writing the output", exit 3, never a traceback.

``/dev/full`` fails every write with ENOSPC, as a full filesystem does. Each command runs as the
console script does (a process), buffered and unbuffered (PYTHONUNBUFFERED makes every write fail
at once, inside argparse's own printing of --help). The status is the one stress gives a full
disk (ExitCode.BAD_INPUT, 3).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.cli import DISK_FULL_STATUS
from faulthunt.errors import ExitCode
from faulthunt.stress.analyse import exit_status_for

DATA = Path(__file__).parent / "data"
KERNLOG = DATA / "kernlog" / "era_450_pid_dmesg.log"
SANITIZER_TEXT = DATA / "sanitizer" / "text" / "ci_timestamped_oob1.txt"
RUN = DATA / "report" / "h200_stress_run"

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


def _faulthunt(args: list[str], *, stdout: str = "/dev/full", stderr: str | None = None,
               unbuffered: bool = False, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    code = "import sys; from faulthunt.cli import console_main; sys.argv[0] = 'faulthunt'; console_main()"
    with open(stdout, "w") as out, open(stderr or os.devnull, "w") as err:
        proc = subprocess.run([sys.executable, "-c", code, *args], stdout=out,
                              stderr=subprocess.PIPE if stderr is None else err, text=True,
                              env=env, cwd=cwd, timeout=120)
    return proc


def test_the_status_is_the_one_stress_gives_a_full_disk() -> None:
    assert DISK_FULL_STATUS == exit_status_for(0, False, disk_full=True) == ExitCode.BAD_INPUT == 3


@pytest.mark.slow
@pytest.mark.parametrize("unbuffered", [False, True])
@pytest.mark.parametrize("args", [
    ["xid", "parse", "--json", "--source", f"file:{KERNLOG}"],
    ["xid", "parse", "--source", f"file:{KERNLOG}"],
    ["sanitize", "parse", str(SANITIZER_TEXT)],
    ["sanitize", "parse", "--json", str(SANITIZER_TEXT)],
    ["report", "--run", "RUN", "-o", "-"],
    ["report", "--run", "RUN", "--format", "json", "-o", "-"],
    ["--help"], ["--version"], ["xid", "--help"],
], ids=lambda a: " ".join(x.rsplit("/", 1)[-1] for x in a) if isinstance(a, list) else None)
def test_stdout_on_a_full_disk(args: list[str], unbuffered: bool, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    args = [str(run) if a == "RUN" else a for a in args]
    proc = _faulthunt(args, unbuffered=unbuffered)
    assert proc.returncode == 3, proc.stderr
    assert "disk full writing the output: No space left on device" in proc.stderr
    assert "fix:" in proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert proc.stderr.count("disk full") == 1  # said once, not again at exit


@pytest.mark.slow
@pytest.mark.parametrize("args, status", [(["xid"], 2), (["xid", "parse", "--source", "file:MISSING"], 3)])
def test_stderr_on_a_full_disk_keeps_the_commands_status(args: list[str], status: int,
                                                         tmp_path: Path) -> None:
    # its message cannot be told; the status still says what happened, and nothing breaks at exit
    out = tmp_path / "out.txt"
    args = [a.replace("MISSING", str(tmp_path / "missing.log")) for a in args]
    assert _faulthunt(args, stdout=str(out)).returncode == status
    assert _faulthunt(args, stdout=str(out), stderr="/dev/full").returncode == status


@pytest.mark.slow
def test_output_that_fits_is_unchanged(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    proc = _faulthunt(["xid", "parse", "--source", f"file:{KERNLOG}"], stdout=str(out))
    assert proc.returncode == 0, proc.stderr
    assert "application memory fault" in out.read_text() and proc.stderr == ""
