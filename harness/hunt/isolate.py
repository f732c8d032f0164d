"""Isolate state leaks: does a test fail only after others in the same process, and after which?

``ddmin`` (Zeller's delta debugging) shrinks the predecessor list to a 1-minimal set that still
makes the test fail; the oracle is flaky, so each probe runs several times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from faulthunt.rundir import Layout, read_jsonl

#: fails(predecessors) -> True when running predecessors then the target fails
Probe = Callable[[Sequence[str]], bool]


def predecessors(run_dir: Path, nodeid: str) -> list[str]:
    """The tests that ran before ``nodeid`` in the worker process where it first failed (else first ran)."""
    best: list[str] | None = None
    for path in sorted((Path(run_dir) / Layout.EVENTS_DIR).glob("*.jsonl")):
        order: list[str] = []
        outcomes: dict[str, str] = {}
        for rec in read_jsonl(path).records:
            if rec.get("event") == "start":
                order.append(str(rec.get("nodeid")))
            elif rec.get("event") == "end":
                outcomes[str(rec.get("nodeid"))] = str(rec.get("outcome"))
        for i, nid in enumerate(order):
            if nid == nodeid or nid.split("[")[0] == nodeid:
                before = [p for p in order[:i]]
                failed = outcomes.get(nid, "crashed") != "passed"
                if failed:
                    return before
                if best is None:
                    best = before
                break
    return best or []


def ddmin(items: Sequence[str], fails: Probe) -> list[str]:
    """Smallest (1-minimal) subsequence of ``items`` (order kept) for which ``fails`` holds."""
    current = list(items)
    n = 2
    while len(current) >= 2:
        size = max(1, len(current) // n)
        chunks = [current[i:i + size] for i in range(0, len(current), size)]
        reduced = False
        for chunk in chunks:
            if fails(chunk):
                current, n, reduced = chunk, 2, True
                break
        if not reduced:
            for i in range(len(chunks)):
                rest = [x for j, c in enumerate(chunks) if j != i for x in c]
                if rest and fails(rest):
                    current, n, reduced = rest, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), n * 2)
    return current
