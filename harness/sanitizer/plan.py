"""Which tests ``faulthunt sanitize`` reruns, as which ids, and how many times. Pure but for
:func:`read_last_failed` and the :class:`~faulthunt.rundir.RunDir` it is handed.

A stress run records each failing *run* (``t.py::test_a[f32-7-40]``: pytest-repeat's step 7 of
``--count 40``) and its base test (``t.py::test_a[f32]``). A rerun can select either:

- **exact**: the recorded id with its repeat step. pytest-repeat only makes that id under the same
  ``--count`` (the lesson of ``pytest --lf`` after a repeated run, which finds nothing), so the
  rerun passes ``--count 40`` and keeps that one step (``--faulthunt-id``). This matters when a
  test's behaviour depends on its id (a seed drawn from the node id, data chosen by the step).
- **base**: the base id, once per run. Used when no repeat step was recorded (no ``--count``, an
  id named only by an Xid, an id given on the command line) or when asked (``--ids base``).

How many runs: ``--count N``; else enough to see the stress run's own failure rate with 95%
confidence (:func:`faulthunt.stats.runs_to_detect`); ``--until-found`` has no count, only the
budget. Ids are data: everything that reaches pytest goes through :mod:`faulthunt.nodeids`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from faulthunt.errors import InputError
from faulthunt.records.documents import Summary
from faulthunt.records.run import TestSpan
from faulthunt.rundir import Layout, RunDir
from faulthunt.stats import runs_to_detect

#: failing outcomes worth a rerun; "collateral" tests failed because an earlier test poisoned
#: their worker, so rerunning them alone tells nothing about the culprit
RERUN_OUTCOMES = frozenset({"failed", "error", "crashed", "hung", "incomplete"})
ID_MODES = ("auto", "exact", "base")

def _bracketed(nodeid: str) -> tuple[str, str] | None:
    r"""(head, ids) of ``head[ids]``: from the first ``[`` to the ``]`` that ends the id.

    What ``^(.*?)\[(.*)\]$`` matched, in one pass: that expression retried the rest of the id
    from every ``[``, so an id of thousands of ``[`` and no ``]`` took quadratic time. An id with
    a line break is no node id (faulthunt.nodeids) and has no parameters here.
    """
    if not nodeid.endswith("]") or "\n" in nodeid:
        return None
    start = nodeid.find("[", 0, len(nodeid) - 1)
    return None if start < 0 else (nodeid[:start], nodeid[start + 1:-1])


def _step_number(text: str) -> bool:
    """Whether ``text`` can be one of pytest-repeat's numbers: ASCII digits (``int`` rejects
    other digits, ``²``), few enough for ``int`` (it refuses thousands)."""
    return text.isascii() and text.isdigit() and len(text) <= 9


def split_repeat(nodeid: str) -> tuple[str, int | None]:
    """(base id, pytest-repeat count) of an id with a repeat step; (``nodeid``, None) without.

    ``t.py::a[f32-3-50]`` -> (``t.py::a[f32]``, 50); ``t.py::a[2-5]`` -> (``t.py::a``, 5). For
    ids read back where the item (and its callspec) is gone; a stress run records
    ``base_nodeid`` from the callspec itself. Linear in the id, whatever it holds.
    """
    found = _bracketed(nodeid)
    if found is None:
        return nodeid, None
    head, ids = found
    parts = ids.split("-")
    for i in range(len(parts) - 2, -1, -1):
        a, b = parts[i], parts[i + 1]
        if _step_number(a) and _step_number(b) and 1 <= int(a) <= int(b):
            rest = parts[:i] + parts[i + 2:]
            base = f"{head}[{'-'.join(rest)}]" if rest else head
            return base, int(b)
    return nodeid, None


def base_of(nodeid: str) -> str:
    """A node id without pytest-repeat's ``<i>-<n>`` id: ``t.py::a[f32-3-50]`` -> ``t.py::a[f32]``."""
    return split_repeat(nodeid)[0]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A failing test as a run (or pytest's cache) recorded it."""

    base: str
    #: failing ids with their repeat step, in the order they failed
    exact: tuple[str, ...] = ()
    #: the stress run's failing runs and all runs of the base test (None: not known)
    failures: int | None = None
    runs: int | None = None


def _rates(summary: Summary | None, spans: Sequence[TestSpan]) -> dict[str, tuple[int, int]]:
    """(failures, runs) per base id: the summary's ``by_test``, else counted from the spans."""
    if summary is not None and summary.by_test:
        return {t.base_nodeid: (t.failures, t.runs) for t in summary.by_test if t.runs > 0}
    out: dict[str, list[int]] = {}
    for s in spans:
        row = out.setdefault(s.base_nodeid, [0, 0])
        row[1] += 1
        row[0] += s.outcome in RERUN_OUTCOMES
    return {k: (f, n) for k, (f, n) in out.items()}


def _recorded(pairs: Iterable[tuple[str, str]], rates: dict[str, tuple[int, int]]) -> list[Recorded]:
    """One :class:`Recorded` per base id, in the order of first failure, from (nodeid, base)."""
    exact: dict[str, list[str]] = {}
    for nodeid, base in pairs:
        ids = exact.setdefault(base, [])
        if nodeid != base and nodeid not in ids:
            ids.append(nodeid)
    return [Recorded(base, tuple(ids), *rates.get(base, (None, None))) for base, ids in exact.items()]


def recorded_failures(run: RunDir) -> tuple[list[Recorded], list[str], str]:
    """(failing tests, collateral base ids left out, where the list came from) of a run."""
    summary = run.summary()
    if summary is not None:
        rates = _rates(summary, ())
        pairs = [(f.nodeid, f.base_nodeid or base_of(f.nodeid)) for f in summary.failures
                 if f.outcome != "collateral"]
        pairs += [(x.base_nodeid, x.base_nodeid) for x in summary.xids if x.base_nodeid]
        wanted = _recorded(pairs, rates)
        names = {r.base for r in wanted}
        collateral = _unique(f.base_nodeid or base_of(f.nodeid) for f in summary.failures
                             if f.outcome == "collateral")
        return wanted, [c for c in collateral if c not in names], Layout.SUMMARY
    spans = run.spans()
    why = "damaged" if any(p.file == Layout.SUMMARY for p in run.problems()) else "the run did not finish"
    pairs = [(s.nodeid, s.base_nodeid if s.base_nodeid != s.nodeid else base_of(s.nodeid))
             for s in spans if s.outcome in RERUN_OUTCOMES]
    return (_recorded(pairs, _rates(None, spans)), [],
            f"{Layout.EVENTS_DIR}/ (no usable {Layout.SUMMARY}: {why})")


def select_tests(run_dir: Path | RunDir) -> tuple[list[str], list[str], str]:
    """(base ids to rerun, collateral left out, where the list came from) for a run directory."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    wanted, collateral, source = recorded_failures(run)
    return [r.base for r in wanted], collateral, source


def tests_from_summary(summary: Summary) -> tuple[list[str], list[str]]:
    """(base ids to rerun, collateral ones left out) from a run's summary."""
    pairs = [(f.nodeid, f.base_nodeid or base_of(f.nodeid)) for f in summary.failures
             if f.outcome != "collateral"]
    pairs += [(x.base_nodeid, x.base_nodeid) for x in summary.xids if x.base_nodeid]
    wanted = [r.base for r in _recorded(pairs, {})]
    collateral = _unique(f.base_nodeid or base_of(f.nodeid) for f in summary.failures
                         if f.outcome == "collateral")
    return wanted, [c for c in collateral if c not in wanted]


def tests_from_events(run_dir: Path | RunDir) -> list[str]:
    """Failing base ids straight from the run's test spans: for a run killed before its summary.

    A test that started and never ended took its worker down (``crashed``): it is rerun too.
    """
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    return _unique((s.base_nodeid if s.base_nodeid != s.nodeid else base_of(s.nodeid))
                   for s in run.spans() if s.outcome in RERUN_OUTCOMES)


def read_last_failed(cwd: Path) -> list[Recorded]:
    """pytest's ``--lf`` cache (``.pytest_cache/v/cache/lastfailed``) under ``cwd``, by base id,
    each with the exact ids (repeat step included) the cache holds."""
    path = cwd / ".pytest_cache" / "v" / "cache" / "lastfailed"
    try:
        data = json.loads(path.read_bytes().decode("utf-8", "replace"))
    except FileNotFoundError:
        raise InputError(f"no failing tests to rerun: {path} does not exist",
                         fix="run the suite first (pytest or `faulthunt stress`), or pass --run RUN") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read pytest's last-failed cache {path}: {exc}",
                         fix="delete .pytest_cache and rerun the suite") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path} is not pytest's last-failed cache", fix="delete .pytest_cache and rerun the suite")
    return _recorded(((str(k), base_of(str(k))) for k, v in data.items() if v), {})


# --- the plan --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Target:
    """One test to rerun: the ids its runs select, how many runs, and why."""

    base: str
    #: the ids a run selects, taken in turn run by run
    ids: tuple[str, ...]
    #: exact | base | given
    mode: str
    #: the sentence that says which ids and why
    why: str
    #: runs asked for (None: until found, within the budget)
    planned: int | None
    planned_why: str
    failures: int | None = None
    runs: int | None = None
    #: --with-predecessors: the tests that ran before ``ids[0]`` in its stress worker, in order
    sequence: tuple[str, ...] = ()
    #: how many other tests ran before it in its worker in the stress run (the
    #: --with-predecessors hint)
    predecessors_seen: int = 0

    def selection(self, run: int) -> tuple[str, ...]:
        """The ids run number ``run`` (1-based) selects, in the order they must run."""
        return (*self.sequence, self.ids[(run - 1) % len(self.ids)])

    def count_for(self, ids: Sequence[str]) -> int | None:
        """The pytest-repeat ``--count`` a run of ``ids`` needs (None: no repeat step in them)."""
        if self.mode != "exact":
            return None
        counts = [c for c in (split_repeat(i)[1] for i in ids) if c is not None]
        return max(counts) if counts else None


def _pct(rate: float) -> str:
    return f"{100 * rate:.3g}%"


def planned_runs(count: int | None, until_found: bool, failures: int | None,
                 runs: int | None) -> tuple[int | None, str]:
    """(runs to ask for, why): ``--count``; until found; or enough for the recorded rate."""
    if count is not None:
        return count, f"--count {count}"
    if until_found:
        return None, "until found (--until-found), within the budget"
    if failures and runs and failures >= runs:
        return 1, f"one run: it failed every run of the stress run ({failures} of {runs})"
    if failures and runs:
        rate = failures / runs
        n = runs_to_detect(rate)
        return n, (f"{n} run(s): enough to see a {_pct(rate)} failure rate ({failures} of {runs} "
                   f"runs in the stress run) with 95% confidence")
    return 1, "one run (no failure rate recorded; --count N or --until-found for more)"


def _ids_for(rec: Recorded, ids_mode: str, have_repeat: bool) -> tuple[tuple[str, ...], str, str]:
    """(ids, mode, why) for a recorded failure."""
    if ids_mode == "base":
        return (rec.base,), "base", "the base id (--ids base)"
    if not rec.exact:
        return (rec.base,), "base", "the base id (no repeat step was recorded: no --count in the stress run)"
    if not have_repeat:
        return (rec.base,), "base", ("the base id (pytest-repeat is not installed here, so the "
                                     "recorded repeat steps cannot be selected)")
    counts = sorted({c for c in (split_repeat(i)[1] for i in rec.exact) if c is not None})
    shown = ", ".join(rec.exact[:3]) + (f" and {len(rec.exact) - 3} more" if len(rec.exact) > 3 else "")
    return rec.exact, "exact", (f"the recorded repeat step(s) {shown}, with --count "
                                f"{'/'.join(map(str, counts))} (pytest-repeat makes a step's id only "
                                f"under the same --count; the step is what failed)")


def plan_targets(recorded: Sequence[Recorded], *, count: int | None = None, until_found: bool = False,
                 ids_mode: str = "auto", have_repeat: bool = True,
                 run: RunDir | None = None, with_predecessors: bool = False) -> list[Target]:
    """The :class:`Target` of each recorded failure (``run``: the stress run, for predecessors).

    With ``with_predecessors`` a run replays the stress worker's sequence up to the first failing
    run of the test, exact ids and all (a recorded sequence is a list of exact runs).
    """
    from faulthunt.hunt.isolate import predecessors

    out = []
    for rec in recorded:
        ids, mode, why = _ids_for(rec, ids_mode, have_repeat)
        planned, planned_why = planned_runs(count, until_found, rec.failures, rec.runs)
        failed_as = rec.exact[0] if rec.exact else rec.base
        preds = predecessors(run, failed_as, f"the run {run.path}") if run is not None else []
        sequence: tuple[str, ...] = ()
        if with_predecessors and preds and (have_repeat or not rec.exact):
            sequence, ids = tuple(preds), (failed_as,)
            mode = "exact" if rec.exact else mode
            why = (f"{failed_as} after the {len(preds)} test(s) that ran before it in its stress "
                   "worker, in that order")
        elif with_predecessors:
            why += ("; no test ran before it in its stress worker, so it runs alone" if not preds else
                    "; pytest-repeat is missing, so its recorded sequence cannot be replayed")
        # the hint counts other tests: earlier repeats of the same test are no predecessors to replay
        others = sum(base_of(p) != rec.base for p in preds)
        out.append(Target(rec.base, ids, mode, why, planned, planned_why, rec.failures, rec.runs,
                          sequence, others))
    return out


def given_targets(tests: Sequence[str], *, count: int | None, until_found: bool) -> list[Target]:
    """Targets for ids named on the command line: run as given."""
    planned, planned_why = planned_runs(count, until_found, None, None)
    return [Target(t, (t,), "given", "as given on the command line", planned, planned_why)
            for t in _unique(tests)]
