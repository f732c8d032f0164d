"""Shared pieces of the bench rows: the row record, timing, the table."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Callable, Sequence


@dataclasses.dataclass(frozen=True)
class Row:
    capability: str
    #: what "ours" measures and what the baseline measures, in a few words each
    ours: str
    baseline: str
    ours_s: float | None
    baseline_s: float | None
    goal: str
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.ours_s is None or not self.baseline_s:
            return None
        return self.ours_s / self.baseline_s


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls (seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def side_by_side(ours: Callable[[], object], baseline: Callable[[], object],
                 repeat: int = 3) -> tuple[float, float]:
    """Interleave ours and the baseline ``repeat`` times; best time of each."""
    best_o = best_b = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter(); baseline(); best_b = min(best_b, time.perf_counter() - t0)
        t0 = time.perf_counter(); ours(); best_o = min(best_o, time.perf_counter() - t0)
    return best_o, best_b


def run_cmd(argv: Sequence[str], **kw: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(argv), check=True, stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]


def _fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}s"


def format_table(rows: Sequence[Row]) -> str:
    head = ("capability", "ours", "baseline", "ours s", "base s", "ratio", "goal", "note")
    body = [
        (r.capability, r.ours, r.baseline, _fmt_s(r.ours_s), _fmt_s(r.baseline_s),
         "-" if r.ratio is None else f"{r.ratio:.2f}x", r.goal, r.note)
        for r in rows
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(head), line(["-" * w for w in widths])]
    out += [line(b) for b in body]
    return "\n".join(out)
