"""Start-up rows: ``faulthunt --version`` and ``faulthunt --help`` against ``python -c pass``.

Both run as processes of the same interpreter and environment (the console script, the editable
install's import hook and all), paired and interleaved. What is left over the baseline is
faulthunt's own start-up: the CLI module, argparse, and (before the command table) every
subcommand module. Goal: at most 2x.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from benchrows import Row, command, paired

#: as a user's install has them: compiled modules cached (this machine's environment sets
#: PYTHONDONTWRITEBYTECODE, which would make every run compile faulthunt's sources anew)
ENV = {"PYTHONDONTWRITEBYTECODE": ""}


def _faulthunt() -> str:
    exe = shutil.which("faulthunt")
    if exe is None:
        raise SystemExit("faulthunt is not on PATH: pip install -e . in this environment")
    return exe


def _row(flag: str, quick: bool) -> Row:
    ours = command([_faulthunt(), flag], env=ENV)
    base = command([sys.executable, "-c", "pass"], env=ENV)
    ours_t, base_t = paired(ours, base, repeat=5 if quick else 21, warmup=2)
    return Row(capability=f"cli: start-up, faulthunt {flag}", ours=f"faulthunt {flag}", baseline="python -c pass",
               ours_t=ours_t, base_t=base_t, goal="<= 2x", goal_ratio=2.0,
               note="same interpreter and venv, compiled modules cached; output to /dev/null")


def startup_version(quick: bool) -> Row:
    return _row("--version", quick)


def startup_help(quick: bool) -> Row:
    return _row("--help", quick)


_CONSOLE = ("import sys, faulthunt.cli as cli; {patch}sys.argv[0] = 'faulthunt'; sys.exit(cli.console_main())")


def exit_settled(quick: bool) -> Row:
    """console_main's collect-and-freeze before exit (cli._settle_heap) against the same
    command without it: the interpreter's exit scans the whole heap for cycles otherwise."""
    log = Path(__file__).resolve().parents[2] / "tests" / "data" / "kernlog" / "era_450_pid_dmesg.log"
    argv = ["xid", "parse", "--source", f"file:{log}"]
    ours = command([sys.executable, "-c", _CONSOLE.format(patch=""), *argv], env=ENV)
    base = command([sys.executable, "-c", _CONSOLE.format(patch="cli._settle_heap = lambda: None; "), *argv],
                   env=ENV)
    ours_t, base_t = paired(ours, base, repeat=5 if quick else 41, warmup=2)
    return Row(capability="cli: exit, heap collected and frozen", ours="xid parse (small log), settled",
               baseline="the same, exit as Python does", ours_t=ours_t, base_t=base_t, goal="< 1x",
               goal_ratio=1.0, note="paired; a short command's exit: ~2-3 ms of CPU saved (docs/performance.md)")


ROWS = [startup_version, startup_help, exit_settled]
