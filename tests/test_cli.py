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


def test_stress_drops_its_own_double_dash_before_pytest() -> None:
    """pytest reads what follows a ``--`` as paths: `-- -p no:cacheprovider` after a faulthunt
    option (`-k`) reached pytest behind a literal `--`, and the run collected nothing."""
    from faulthunt.cli import build_parser
    from faulthunt.cli.stress import _pytest_args

    parser = build_parser()
    for argv, want in [
        (["stress", "t.py", "-k", "a or b", "--", "-p", "no:x"], ("t.py", "-p", "no:x")),
        (["stress", "-n", "2", "--", "t.py", "-q"], ("t.py", "-q")),
    ]:
        args, extra = parser.parse_known_args(argv)
        args.extra = extra
        assert _pytest_args(args, None) == want, argv
