"""Records of a stress run: a test span (one test run in one worker) and a worker crash.

Spans are assembled from the worker's ``start``/``end`` lines in ``events/*.jsonl``
(docs/rundir.md); a span with a start and no end is a test that took its worker down.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

#: outcomes a span can end with (``crashed`` comes from the controller, never from the worker)
OUTCOMES = ("passed", "failed", "skipped", "error", "hung", "collateral", "crashed", "incomplete")
#: outcomes that count as a failing run of a test
FAILING = frozenset({"failed", "error", "hung", "crashed", "collateral"})


@dataclasses.dataclass(frozen=True)
class TestSpan:
    """One run of one test in one worker process."""

    __test__ = False  # not a pytest test class

    nodeid: str
    base_nodeid: str
    worker: str
    pid: int | None
    t0: float | None
    t0_mono: float | None
    t1: float | None = None
    t1_mono: float | None = None
    outcome: str = "incomplete"
    longrepr: str | None = None
    sticky_cuda_error: Mapping[str, Any] | None = None
    device: str | None = None

    @property
    def ended(self) -> bool:
        return self.t1 is not None

    def contains_mono(self, t: float, grace: float = 0.0) -> bool:
        """Whether monotonic time ``t`` falls in this span (open spans extend forever)."""
        if self.t0_mono is None:
            return False
        end = self.t1_mono if self.t1_mono is not None else float("inf")
        return self.t0_mono - grace <= t <= end + grace


@dataclasses.dataclass(frozen=True)
class WorkerCrash:
    """A worker process that died, as the controller saw it."""

    worker: str
    pid: int | None
    nodeid: str | None
    #: "crashed", "hung" or "recycled" (a deliberate exit after a sticky CUDA error)
    kind: str
    signal: int | None = None
    exit_status: int | None = None
    faulthandler: str | None = None
    message: str | None = None
