"""Instruction counts from valgrind's cachegrind, for differences too small for a clock.

On a shared machine the CPU time of a whole process moves by more than a few microseconds per
test from run to run; the instructions it executes (user space, every thread) do not depend on
the load. ``count`` runs one command under ``valgrind --tool=cachegrind --cache-sim=no`` and
returns its instruction count, read from the ``summary:`` line of cachegrind's output file.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def available() -> bool:
    return shutil.which("valgrind") is not None


def instructions(text: str) -> int:
    """The total instructions executed (``Ir``) in the text of a cachegrind output file.

    The ``events:`` line names the counters, the ``summary:`` line gives their totals in the same
    order (``Ir`` alone with ``--cache-sim=no``; ``Ir I1mr ... DLmw`` with the cache simulation).
    """
    events: list[str] | None = None
    summary: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            summary = line.split()[1:]
    if events is None or summary is None or "Ir" not in events or len(summary) != len(events):
        raise ValueError("not a cachegrind output file: no 'events:' line with Ir and a "
                         "'summary:' line of as many counts")
    return int(summary[events.index("Ir")])


def _command(argv: Sequence[str], out: Path, *options: str) -> list[str]:
    """``argv`` under cachegrind, instructions only, each process's file ``out`` + ``.<pid>``."""
    return ["valgrind", "--tool=cachegrind", "--cache-sim=no", *options,
            f"--cachegrind-out-file={out}.%p", *argv]


def count(argv: Sequence[str], *, out: Path, cwd: Path, env: Mapping[str, str],
          stdout: Path) -> int:
    """Instructions executed by the process ``argv`` starts (its children are not followed, and a
    child it forks writes a file of its own), its stdout written to ``stdout``; cachegrind's file
    is ``out`` with the process id after a dot, removed once read. A failing command raises."""
    cmd = _command(argv, out)
    with open(stdout, "wb") as fout:
        proc = subprocess.Popen(cmd, cwd=cwd, env=dict(env), stdout=fout, stderr=subprocess.PIPE)
        _, err = proc.communicate()
    mine = out.parent / f"{out.name}.{proc.pid}"
    try:
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, cmd, stderr=err)
        return instructions(mine.read_text(errors="replace"))
    finally:
        for written in out.parent.glob(f"{out.name}.*"):
            written.unlink()


def count_tree(argv: Sequence[str], *, out: Path, cwd: Path, env: Mapping[str, str],
               stdout: Path) -> tuple[list[tuple[str, int]], int]:
    """Instructions of the process ``argv`` starts and of every process started under it
    (followed through ``exec``: pytest's xdist workers, a tool it runs). Returns each process's
    command line (cachegrind's ``cmd:``) with its count, and the exit status. A process killed
    before it exits writes no file, so a caller checks that every process it expects is there.
    Each writes ``out`` with its id after a dot, removed once read."""
    cmd = _command(argv, out, "--trace-children=yes")
    with open(stdout, "wb") as fout:
        proc = subprocess.run(cmd, cwd=cwd, env=dict(env), stdout=fout, stderr=subprocess.PIPE,
                              check=False)
    files = sorted(out.parent.glob(f"{out.name}.*"))
    got = []
    try:
        for f in files:
            text = f.read_text(errors="replace")
            line = next((ln for ln in text.splitlines() if ln.startswith("cmd:")), "cmd:")
            got.append((line[4:].strip(), instructions(text)))
    finally:
        for written in files:
            written.unlink()
    return got, proc.returncode
