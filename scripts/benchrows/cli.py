"""Start-up rows: ``faulthunt --version`` and ``faulthunt --help`` against ``python -c pass``.

Both run as processes of the same interpreter and environment (the console script, the editable
install's import hook and all), paired and interleaved. What is left over the baseline is
faulthunt's own start-up: the CLI module, argparse, and (before the command table) every
subcommand module. Goal: at most 2x.
"""

from __future__ import annotations

import shutil
import sys

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


ROWS = [startup_version, startup_help]
