"""Test spans: one run of one test in one worker process, assembled from the worker's events.

Spans are paired from the ``start``/``end`` lines of ``events/*.jsonl`` (docs/rundir.md); a span
with a start and no end is a test that took its worker down. A repeated test's runs stay distinct:
a span is known by :attr:`TestSpan.key`, its pid, node id and start time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from faulthunt.records.events import (ChildProcess, Crash, StickyError, SubtestFailure, TestEnd,
                                      TestStart)

#: outcomes a span can end with (``crashed`` and ``lost`` come from the controller, never from
#: the worker)
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed", "error", "hung", "collateral",
            "crashed", "lost", "incomplete")
#: outcomes that count as a failing run of a test
FAILING = frozenset({"failed", "error", "hung", "crashed", "collateral"})
#: a test that never started: its worker died between two tests and xdist blamed it. Not a run
#: of the test (nothing of it ran) and not its failure, but the run lost it: counted and shown.
LOST = "lost"


class TestSpan(msgspec.Struct, frozen=True):
    """One run of one test in one worker process.

    (A Struct, not a dataclass: `faulthunt stress` reads the spans after every run, and the
    dataclasses module brings inspect, ast, dis and tokenize into its process, and making a
    dataclass compiles its methods: ~35 M instructions of a process that has no other use for
    them.)"""

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
    sticky_cuda_error: StickyError | None = None
    device: str | None = None
    #: the exception line (pytest's crash line); None for older records: read it from longrepr
    message: str | None = None
    reruns: int = 0
    subtests: dict[str, int] | None = None
    subtests_failed: tuple[SubtestFailure, ...] = ()
    #: the processes this run started (or, for a child seen between tests, the run after it)
    children: tuple[ChildProcess, ...] = ()

    @property
    def key(self) -> tuple[int | None, str, float | None]:
        """What tells this run from every other run of the same test: pid, node id, start."""
        return (self.pid, self.nodeid, self.t0)

    @property
    def ended(self) -> bool:
        return self.t1 is not None

    def contains_mono(self, t: float, grace: float = 0.0) -> bool:
        """Whether monotonic time ``t`` falls in this span (open spans extend forever)."""
        if self.t0_mono is None:
            return False
        end = self.t1_mono if self.t1_mono is not None else float("inf")
        return self.t0_mono - grace <= t <= end + grace


def assemble_spans(events: Iterable[Any], controller: Iterable[Any] = ()) -> list[TestSpan]:
    """Pair worker ``start``/``end`` events into spans (pure); an unpaired start is ``crashed``
    (``hung`` when the controller says so). Other kinds of event are passed over.

    Events may come from many files in any order; within one pid they are in write order, so a
    start pairs with the next end of the same node id in the same pid.
    """
    crashes = [c for c in controller if isinstance(c, Crash)]
    crash_by_key = {(c.worker, c.nodeid): c for c in crashes}
    open_: dict[tuple[int | None, str], TestStart] = {}
    spans: list[TestSpan] = []
    children: list[ChildProcess] = []
    for ev in events:
        if isinstance(ev, TestStart):
            open_[(ev.pid, ev.nodeid)] = ev
        elif isinstance(ev, TestEnd):
            spans.append(_ended(ev, open_.pop((ev.pid, ev.nodeid), None)))
        elif isinstance(ev, ChildProcess):
            children.append(ev)
    for start in open_.values():
        spans.append(_unended(start, crash_by_key.get((start.worker, start.nodeid))))
    spans.extend(_lost(c) for c in crashes if c.started is False)
    # stable: spans without a start time keep the order they were written in
    spans.sort(key=lambda s: s.t0 if s.t0 is not None else float("inf"))
    return label_collateral(_with_children(spans, children))


def _with_children(spans: list[TestSpan], children: list[ChildProcess]) -> list[TestSpan]:
    """Each span with the child processes its worker recorded while it ran; a child seen between
    tests goes with the next run of that worker process (else its last)."""
    if not children:
        return spans
    index = {(s.pid, s.nodeid): i for i, s in enumerate(spans) if s.outcome != LOST}
    by_span: dict[int, list[ChildProcess]] = {}
    for child in children:
        i = index.get((child.pid, child.nodeid)) if child.nodeid is not None else None
        if i is None:
            i = _nearest_run(spans, child)
        if i is not None:
            by_span.setdefault(i, []).append(child)
    return [msgspec.structs.replace(s, children=tuple(by_span[i])) if i in by_span else s
            for i, s in enumerate(spans)]


def _nearest_run(spans: list[TestSpan], child: ChildProcess) -> int | None:
    mine = [i for i, s in enumerate(spans) if s.pid == child.pid and s.outcome != LOST]
    if not mine:
        return None
    t = child.t_mono if child.t_mono is not None else float("-inf")
    later = [i for i in mine if (spans[i].t0_mono or float("-inf")) >= t]
    return later[0] if later else mine[-1]


def _ended(end: TestEnd, start: TestStart | None) -> TestSpan:
    return TestSpan(
        nodeid=end.nodeid, base_nodeid=end.base_nodeid or end.nodeid,
        worker=end.worker or (start.worker if start else None) or "?", pid=end.pid,
        t0=start.t if start else None, t0_mono=start.t_mono if start else None, t1=end.t,
        t1_mono=end.t_mono, outcome=end.outcome or "incomplete", longrepr=end.longrepr,
        sticky_cuda_error=end.sticky_cuda_error, device=start.device if start else None,
        message=end.message, reruns=end.reruns, subtests=end.subtests,
        subtests_failed=tuple(end.subtests_failed))


def _unended(start: TestStart, crash: Crash | None) -> TestSpan:
    outcome = "hung" if crash is not None and crash.kind == "hung" else "crashed"
    if crash is not None:
        how = crash.signal_name or (f"exit status {crash.exit_status}"
                                    if crash.exit_status is not None else None)
        msg = f"worker {crash.worker} died while running the test" + (f" ({how})" if how else "")
    else:
        msg = "the process ended while the test was running (no controller record)"
    return TestSpan(
        nodeid=start.nodeid, base_nodeid=start.base_nodeid or start.nodeid,
        worker=start.worker or "?", pid=start.pid, t0=start.t, t0_mono=start.t_mono,
        outcome=outcome, longrepr=msg, device=start.device)


def _lost(crash: Crash) -> TestSpan:
    """The test xdist blamed for a worker that died between two tests: it never started."""
    how = crash.signal_name or (f"exit status {crash.exit_status}"
                                if crash.exit_status is not None else "exit status unknown")
    after = f", after {crash.previous}" if crash.previous else ""
    return TestSpan(
        nodeid=crash.nodeid, base_nodeid=crash.base_nodeid or crash.nodeid,
        worker=crash.worker or "?", pid=crash.pid, t0=crash.t, t0_mono=crash.t_mono,
        t1=crash.t, t1_mono=crash.t_mono, outcome=LOST, device=crash.device,
        longrepr=f"lost: worker {crash.worker} died before it started ({how}{after})")


def label_collateral(spans: list[TestSpan]) -> list[TestSpan]:
    """Failures after a sticky CUDA error in the same process are collateral."""
    poisoned: set[int | None] = set()
    out: list[TestSpan] = []
    for span in spans:
        if span.pid in poisoned and span.outcome in ("failed", "error"):
            span = msgspec.structs.replace(span, outcome="collateral")
        if span.sticky_cuda_error and span.outcome in ("failed", "error"):
            poisoned.add(span.pid)
        out.append(span)
    return out
