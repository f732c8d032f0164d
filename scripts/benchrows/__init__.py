"""Shared pieces of the bench rows: samples, paired timing, whole-command runs, the table.

Every row times ours and a baseline that does the same work, side by side in one run: the two are
run in pairs, alternating which goes first (ABBA), so drift on a shared machine lands on both. A
row keeps every sample; the table shows min / median / max of each side and of the per-pair ratio
(never a best-of). Whole commands are timed as processes, start-up and output included, with their
output written to a file (a baseline whose output goes nowhere, or that stops at its first match,
measures nothing).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


#: pairs a row whose noise needs many asks for, when given (``bench.py --pairs N``); None: its own
PAIRS: int | None = None


def pairs(default: int) -> int:
    """The number of pairs for a noisy row: ``--pairs`` when given, else the row's own."""
    return PAIRS if PAIRS is not None else default


@dataclasses.dataclass(frozen=True)
class Samples:
    """Wall times (seconds) of repeated runs of one side."""

    values: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def max(self) -> float:
        return max(self.values)

    def fmt(self, unit: str = "s") -> str:
        scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
        if len(self.values) == 1:
            return f"{self.values[0] * scale:.3g}{unit}"
        return (f"{self.median * scale:.3g}{unit} "
                f"({self.min * scale:.3g}-{self.max * scale:.3g})")


@dataclasses.dataclass(frozen=True)
class Row:
    capability: str
    #: what "ours" measures and what the baseline measures, in a few words each
    ours: str
    baseline: str
    ours_t: Samples | None
    base_t: Samples | None
    goal: str
    note: str = ""
    #: the goal as a ratio bound (ours / baseline <= goal_ratio), when the goal is one
    goal_ratio: float | None = None
    #: an absolute goal in seconds for ours (median), when the goal is one
    goal_s: float | None = None

    @property
    def ratios(self) -> Samples | None:
        """Per-pair ratios ours / baseline (pairs are run back to back)."""
        if self.ours_t is None or self.base_t is None:
            return None
        pairs = [o / b for o, b in zip(self.ours_t.values, self.base_t.values) if b > 0]
        return Samples(tuple(pairs)) if pairs else None

    @property
    def met(self) -> str:
        if self.ours_t is None:
            return "-"
        checks = []
        if self.goal_ratio is not None and self.ratios is not None:
            checks.append(self.ratios.median <= self.goal_ratio)
        if self.goal_s is not None:
            checks.append(self.ours_t.median <= self.goal_s)
        if not checks:
            return "-"
        return "yes" if all(checks) else "NO"


def paired(ours: Callable[[], object], baseline: Callable[[], object], repeat: int = 5,
           warmup: int = 1) -> tuple[Samples, Samples]:
    """Run ours and the baseline ``repeat`` times each, in pairs, alternating which goes first.

    ``warmup`` untimed pairs go first (page cache, imports compiled to .pyc). Returns every
    sample of each side, pair i of one side belonging with pair i of the other.
    """
    for _ in range(warmup):
        baseline()
        ours()
    o_t: list[float] = []
    b_t: list[float] = []
    for i in range(repeat):
        first, second = ((ours, o_t), (baseline, b_t)) if i % 2 else ((baseline, b_t), (ours, o_t))
        for fn, out in (first, second):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return Samples(tuple(o_t)), Samples(tuple(b_t))


def command(argv: Sequence[str], *, out: Path | None = None, cwd: Path | str | None = None,
            env: Mapping[str, str] | None = None, ok: Sequence[int] = (0,),
            stdin: Path | None = None) -> Callable[[], subprocess.CompletedProcess[bytes]]:
    """A callable that runs ``argv`` as a user would: a fresh process, its stdout into ``out``.

    ``out`` None sends stdout to /dev/null (only for commands whose output is not the work).
    An exit status outside ``ok`` raises: a failing command must not be timed as a fast one.
    """
    full_env = None if env is None else {**os.environ, **env}

    def run() -> subprocess.CompletedProcess[bytes]:
        fin = open(stdin, "rb") if stdin is not None else subprocess.DEVNULL  # noqa: SIM115
        fout = open(out, "wb") if out is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            proc = subprocess.run(list(argv), stdout=fout, stdin=fin, stderr=subprocess.PIPE,
                                  cwd=cwd, env=full_env, check=False)
        finally:
            for fh in (fin, fout):
                if fh is not subprocess.DEVNULL:
                    fh.close()  # type: ignore[union-attr]
        if proc.returncode not in ok:
            raise subprocess.CalledProcessError(proc.returncode, proc.args,
                                                stderr=proc.stderr)
        return proc

    return run


def run_cmd(argv: Sequence[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(argv), check=True, stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]


def format_table(rows: Sequence[Row]) -> str:
    head = ("capability", "ours", "baseline", "ours med (min-max)", "base med (min-max)",
            "ratio med (min-max)", "goal", "met", "note")
    body = []
    for r in rows:
        ratios = r.ratios
        ratio = "-" if ratios is None else (
            f"{ratios.median:.2f}x ({ratios.min:.2f}-{ratios.max:.2f})")
        body.append((r.capability, r.ours, r.baseline,
                     "-" if r.ours_t is None else r.ours_t.fmt(),
                     "-" if r.base_t is None else r.base_t.fmt(), ratio, r.goal, r.met, r.note))
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(head), line(["-" * w for w in widths])]
    out += [line(b) for b in body]
    return "\n".join(out)
