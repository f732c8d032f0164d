"""Isolate state leaks: does a test fail only after others in the same process, and after which?

``ddmin`` (Zeller's delta debugging) shrinks the predecessor list to a 1-minimal set that still
makes the test fail; the oracle is flaky, so each probe runs several times.

A run with ``--count N`` records repeat steps (``t.py::test_a[2-3]``), names that exist only under
that count. A probe replays them as recorded: ``--count N`` again and each exact step id selected
with ``--faulthunt-id`` (:func:`faulthunt.nodeids.pytest_selection`), in the recorded order
(:mod:`faulthunt.hunt.replay`). Stripping the steps to base ids would be shorter but not the same
history: a test that leaks into its own next run (``test_a[1-3]`` pollutes ``test_a[2-3]``), or
state that builds up over repeats, would vanish from the replay.

Recorded ids are relative to pytest's rootdir in the run, which is not the directory it ran in
when the suite has its own ini file in a subfolder: a probe runs in the run's directory with that
rootdir pinned and the roots given as paths from there (``pytest_selection(rootdir=, cwd=)``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from faulthunt.errors import FaulthuntError, UsageError
from faulthunt.hunt.replay import TRACE_ENV
from faulthunt.nodeids import check_node_id, pytest_selection
from faulthunt.records.documents import RunInfo
from faulthunt.records.run import TestSpan
from faulthunt.rundir import RUN_DIR_ENV, RunDir
from faulthunt.stats import fisher_greater

#: fails(predecessors) -> True when running predecessors then the target fails
Probe = Callable[[Sequence[str]], bool]
#: tally(predecessors) -> (failures, runs) of the target after predecessors, every repeat run
Tally = Callable[[Sequence[str]], tuple[int, int]]

#: a difference between "after predecessors" and "alone" is named a cause only when chance
#: explains it at most this often (one-sided Fisher; 3 of 3 after vs 0 of 3 alone is 0.05)
SIGNIFICANCE = 0.05


#: pytest-repeat's step: ``t.py::test_p[a-2-3]`` of a parametrized test, ``t.py::test_a[2-3]`` of
#: a plain one
_REPEAT_STEP = re.compile(r"[-\[](\d+)-(\d+)\]$")


@dataclasses.dataclass(frozen=True)
class Replay:
    """What a probe replays: the target's recorded id, the ids before it, and the run's count."""

    target: str
    predecessors: tuple[str, ...]
    count: int = 1
    #: pytest's rootdir in the run: the ids are relative to it (None: not recorded)
    rootdir: str | None = None
    #: the run's own ``--timeout`` (0: off; None: not given, the suite's or faulthunt's default)
    timeout: float | None = None


def _matches(span: TestSpan, nodeid: str) -> bool:
    return nodeid in (span.nodeid, span.base_nodeid) or span.nodeid.split("[")[0] == nodeid


def _history(run: RunDir, nodeid: str) -> tuple[str, list[str]] | None:
    """(recorded id, ids before it) in the worker process where ``nodeid`` first failed, else
    where it first ran; None when it never ran."""
    by_process: dict[int | None, list[TestSpan]] = {}
    for span in run.spans():  # in start order
        by_process.setdefault(span.pid, []).append(span)
    best: tuple[str, list[str]] | None = None
    for spans in by_process.values():
        for i, span in enumerate(spans):
            if _matches(span, nodeid):
                found = (span.nodeid, [s.nodeid for s in spans[:i]])
                if span.outcome != "passed":  # a later repeat step may be the one that failed
                    return found
                best = best or found
    return best


def _run_timeout(run: RunDir) -> float | None:
    """The run's ``--timeout`` (run.json), None when it was not given (or the file is damaged)."""
    timeout = (run.run_info() or RunInfo()).option("timeout")
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout >= 0:
        return float(timeout)
    return None


def _run_count(run: RunDir, target: str) -> int:
    """The run's ``--count`` (run.json), else the one in the target's repeat step, else 1."""
    count = (run.run_info() or RunInfo()).option("count")
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        return count
    step = _REPEAT_STEP.search(target)
    return int(step.group(2)) if step else 1


def replay_plan(run_dir: Path | RunDir, nodeid: str, given_in: str = "the command line") -> Replay:
    """The replay of ``nodeid`` (a base or a recorded id, from ``given_in``) from the run's
    worker history.

    Every id is checked to be a node id: a run directory is data that may have been edited.
    """
    check_node_id(nodeid, given_in)
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    found = _history(run, nodeid)
    if found is None:  # never ran in this run: alone, as given
        return Replay(nodeid, (), 1, run.rootdir(), _run_timeout(run))
    target, before = found
    preds = tuple(dict.fromkeys(p for p in before if p != target))
    where = f"the events of {run.path}"
    for pred in (target, *preds):
        check_node_id(pred, where)
    return Replay(target, preds, _run_count(run, target), run.rootdir(), _run_timeout(run))


def predecessors(run_dir: Path | RunDir, nodeid: str, given_in: str = "the command line") -> list[str]:
    """The tests that ran before ``nodeid`` in the worker process where it first failed (else
    where it first ran). ``nodeid`` may be a base id (``t.py::test_a`` for ``t.py::test_a[3-5]``)."""
    return list(replay_plan(run_dir, nodeid, given_in).predecessors)


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


def shown_id(nodeid: str, rootdir: str | None, cwd: Path) -> str:
    """``nodeid`` as pytest's terminal shows it: its path relative to the directory pytest runs
    in (``Config.cwd_relative_nodeid``), when that is not the rootdir."""
    if rootdir is None or Path(rootdir) == cwd:
        return nodeid
    path, sep, rest = nodeid.partition("::")
    return f"{os.path.relpath(os.path.join(rootdir, path), cwd)}{sep}{rest}"


def _short_summary(stdout: str, targets: Sequence[str]) -> set[str]:
    """The words of pytest's short summary (``-rfEp``) about exactly the target (any of the
    forms in ``targets``). A failed subtest (pytest's ``SUBFAILED(i=1) t.py::test_a - ...``,
    pytest-subtests' ``SUBFAIL t.py::test_a (i=1) - ...``) fails its test, whose own line then
    says PASSED: it counts as FAILED, as in a stress run."""
    words = set()
    for line in stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word.startswith("SUBFAIL"):
            word = "FAILED"
        if word in ("FAILED", "ERROR", "PASSED") and any(
                rest == t or rest.startswith((t + " - ", t + " (")) for t in targets):
            words.add(word)
    return words


def probe_argv(target: str, preds: Sequence[str], count: int = 1, python: str | None = None, *,
               rootdir: str | None = None, cwd: Path | None = None,
               timeout: float | None = None) -> list[str]:
    """The pytest command of one probe: ``preds`` then ``target``, in that order, under ``count``.

    Ids are selected with ``--faulthunt-id`` (last on the line, behind ``--``), never passed as
    arguments pytest could read as options; ``rootdir`` (the run's) pinned, roots as paths from
    ``cwd``. A per-test timeout as a stress run has (``timeout`` seconds, 0 off; None: the
    suite's own pytest ``timeout``, else faulthunt's default): a test that hung in the run
    would otherwise hang the probe, and isolate with it, for good.
    """
    from faulthunt.stress.options import resolve_timeout, suite_timeout, timeout_argv

    argv = [python or sys.executable, "-m", "pytest", "-q", "-rfEp", "-p", "no:cacheprovider",
            "-p", "no:randomly", "-p", "faulthunt", "-p", "faulthunt.hunt.replay"]
    if count > 1:
        argv += ["-p", "repeat", "--count", str(count)]
    suite = suite_timeout(cwd) if timeout is None and cwd is not None else None
    argv += ["-p", "timeout", *timeout_argv(resolve_timeout(timeout, suite))]
    return argv + pytest_selection([*preds, target], rootdir=rootdir, cwd=cwd)


def pytest_probe(target: str, *, cwd: Path, repeats: int = 3, python: str | None = None,
                 count: int = 1, rootdir: str | None = None, timeout: float | None = None) -> Probe:
    """A probe that runs ``predecessors + [target]`` in one fresh pytest process, ``repeats`` times.

    Fresh processes are the point: a module-level cache can only leak within one interpreter.
    Fails when the target fails (or errors) in any repeat; a target that did not run at all is
    an error, not a pass.
    """
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, not {repeats}: with {repeats} nothing runs",
                         fix="pass --repeats 3 (the default) or more for a rare failure")
    env = {k: v for k, v in os.environ.items() if k != RUN_DIR_ENV}  # never record into a run
    cwd = Path(cwd).resolve()
    forms = list(dict.fromkeys([target, shown_id(target, rootdir, cwd)]))

    def once(preds: Sequence[str]) -> bool:
        argv = probe_argv(target, preds, count, python, rootdir=rootdir, cwd=cwd, timeout=timeout)
        with tempfile.TemporaryDirectory(prefix="faulthunt-probe-") as tmp:
            trace = Path(tmp) / "started"
            p = subprocess.run(argv, cwd=cwd, env={**env, TRACE_ENV: str(trace)},
                               capture_output=True, text=True)
            last = _last_started(trace)
        said = _short_summary(p.stdout, forms)
        if p.returncode not in (0, 1) or not said:
            if p.returncode != 0 and not said and last in forms:
                return True  # the target took its process down (a crash is its failure)
            raise _probe_error(p, target, last)
        return bool(said & {"FAILED", "ERROR"})

    return CountingProbe(once, repeats)


def _last_started(trace: Path) -> str | None:
    """The last test id the probe's replay plugin saw start (None: none started)."""
    try:
        lines = trace.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    return lines[-1] if lines else None


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited {returncode}"


def _probe_error(p: subprocess.CompletedProcess[str], target: str, last: str | None) -> FaulthuntError:
    """Why a probe gave no verdict on ``target``: it never ran, or an earlier test crashed."""
    output = f"{p.stdout[-1500:]}{p.stderr[-500:]}"
    if last is not None and p.returncode != 0:
        return FaulthuntError(
            f"pytest {_exit_text(p.returncode)} while running {last}, before {target} ran:\n{output}",
            fix=f"that test takes its process down by itself: run `faulthunt isolate {shlex.quote(last)}` "
                "first, or stress it alone")
    return FaulthuntError(f"pytest {_exit_text(p.returncode)} without running {target}:\n{output}",
                          fix="check the test still exists (`pytest --collect-only -q`) and "
                              "that --cwd is the directory the run was started from")


class CountingProbe:
    """A probe (``probe(preds)``: fails in any of ``repeats`` runs, stopping at the first) that
    also counts (``probe.tally(preds)``: failures and runs over all ``repeats``)."""

    def __init__(self, once: Callable[[Sequence[str]], bool], repeats: int) -> None:
        self._once, self.repeats = once, repeats

    def __call__(self, preds: Sequence[str]) -> bool:
        return any(self._once(preds) for _ in range(self.repeats))

    def tally(self, preds: Sequence[str]) -> tuple[int, int]:
        return sum(self._once(preds) for _ in range(self.repeats)), self.repeats


def isolate(target: str, preds: Sequence[str], probe: Probe,
            tally: Tally | None = None) -> dict[str, object]:
    """Alone vs after predecessors, and the minimal polluting set when it fails only after others.

    A cause is named only when the counts say so: failing after the predecessors and never
    alone must be beyond chance (:data:`SIGNIFICANCE`, one-sided Fisher), and the minimal set
    must make it fail again. A test that fails 1 in k on its own would otherwise pass alone by
    luck and ddmin, fed a coin, would name a random predecessor.
    """
    count = tally or getattr(probe, "tally", None) or (lambda p: (int(probe(p)), 1))
    alone = count([])
    after = count(list(preds)) if preds else alone
    result: dict[str, object] = {
        "nodeid": target, "predecessors": len(preds), "fails_alone": bool(alone[0]),
        "fails_after_predecessors": bool(after[0]), "minimal": None,
        "alone": _counts(alone), "after_predecessors": _counts(after)}
    chance = fisher_greater(after[0], after[1], alone[0], alone[1])
    result["confidence"] = round(1 - chance, 3)
    said = f"failed {alone[0]} of {alone[1]} runs alone, {after[0]} of {after[1]} after its predecessors"
    if alone[0] and alone[0] == alone[1]:
        result["reading"] = (f"fails alone, every run ({said}): an ordinary failure, not a state "
                             "leak from other tests: debug it alone")
    elif alone[0]:
        result["reading"] = (f"inconclusive: fails alone too ({said}): flaky on its own, not a "
                             "state leak from other tests")
    elif not after[0]:
        result["reading"] = f"did not reproduce ({said})"
    elif chance > SIGNIFICANCE:
        result["reading"] = (f"inconclusive: {said}; chance alone would show that "
                             f"{chance:.0%} of the time: rerun with more --repeats (e.g. "
                             f"{max(10, 3 * alone[1])})")
    else:
        minimal = ddmin(list(preds), probe)
        again = count(minimal)
        result["after_minimal"] = _counts(again)
        confirm = fisher_greater(again[0], again[1], alone[0], alone[1])
        result["confidence"] = round(1 - max(chance, confirm), 3)
        if confirm > SIGNIFICANCE:
            result["reading"] = (f"inconclusive: {said}, but {again[0]} of {again[1]} after "
                                 f"{', '.join(minimal)} alone: rerun with more --repeats")
        else:
            result["minimal"] = minimal
            result["reading"] = (f"fails only after {', '.join(minimal)} ({said}, {again[0]} of "
                                 f"{again[1]} after that; confidence {1 - max(chance, confirm):.0%}): "
                                 "that test leaves state (a cache, a stream, a freed buffer) that "
                                 "this one picks up")
    return result


def _counts(tally: tuple[int, int]) -> dict[str, int]:
    return {"failed": tally[0], "runs": tally[1]}
