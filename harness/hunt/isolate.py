"""Isolate state leaks: does a test fail only after others in the same process, and after which?

``ddmin`` (Zeller's delta debugging) shrinks the predecessor list to a 1-minimal set that still
makes the test fail; the oracle is flaky, so each probe runs several times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from faulthunt.records.run import TestSpan
from faulthunt.rundir import RunDir

#: fails(predecessors) -> True when running predecessors then the target fails
Probe = Callable[[Sequence[str]], bool]


def predecessors(run_dir: Path | RunDir, nodeid: str) -> list[str]:
    """The tests that ran before ``nodeid`` in the worker process where it first failed (else
    where it first ran). ``nodeid`` may be a base id (``t.py::test_a`` for ``t.py::test_a[3-5]``)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    by_process: dict[int | None, list[TestSpan]] = {}
    for span in run.spans():  # in start order
        by_process.setdefault(span.pid, []).append(span)
    best: list[str] | None = None
    for spans in by_process.values():
        for i, span in enumerate(spans):
            if span.nodeid == nodeid or span.nodeid.split("[")[0] == nodeid:
                before = [s.nodeid for s in spans[:i]]
                if span.outcome != "passed":
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


def pytest_probe(target: str, *, cwd: Path, repeats: int = 3, python: str | None = None) -> Probe:
    """A probe that runs ``predecessors + [target]`` in one fresh pytest process, ``repeats`` times.

    Fresh processes are the point: a module-level cache can only leak within one interpreter.
    Fails when the target fails in any repeat (pytest keeps command-line node-id order).
    """
    import subprocess
    import sys

    def probe(preds: Sequence[str]) -> bool:
        for _ in range(repeats):
            p = subprocess.run([python or sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                "-p", "no:randomly", *preds, target, "-rf"],
                               cwd=cwd, capture_output=True, text=True)
            if p.returncode not in (0, 1):
                from faulthunt.errors import FaulthuntError
                raise FaulthuntError(f"pytest exited {p.returncode} running {target}:\n{p.stdout[-1500:]}",
                                     fix="check the node ids exist (run `pytest --collect-only`)")
            if f"FAILED {target}" in p.stdout:
                return True
        return False

    return probe


def isolate(target: str, preds: Sequence[str], probe: Probe) -> dict[str, object]:
    """Alone vs after predecessors, and the minimal polluting set when it fails only after others."""
    alone = probe([])
    after = probe(list(preds)) if preds else alone
    result: dict[str, object] = {"nodeid": target, "predecessors": len(preds), "fails_alone": alone,
                                 "fails_after_predecessors": after, "minimal": None}
    if alone:
        result["reading"] = "fails on its own in a fresh process: not a state leak from other tests"
    elif not after:
        result["reading"] = "passed alone and after its predecessors: the failure did not reproduce"
    else:
        minimal = ddmin(list(preds), probe)
        result["minimal"] = minimal
        result["reading"] = (f"fails only after {', '.join(minimal)}: that test leaves state "
                             "(a cache, a stream, a freed buffer) that this one picks up")
    return result
