from __future__ import annotations

import subprocess
import sys

from faulthunt.cli import ExitCode, main


def test_no_command_prints_help(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([]) == ExitCode.USAGE
    assert "faulthunt" in capsys.readouterr().err


def test_python_dash_m_version() -> None:
    out = subprocess.run([sys.executable, "-m", "faulthunt", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("faulthunt ")
