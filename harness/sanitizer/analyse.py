"""What the sanitizer reruns of each test add up to: found, reproduced but silent, or not
reproduced with the rate that rules out. Pure: runs in, outcomes and findings out.

The honest reading of a rerun that passed is "the failure did not come back", never "the
sanitizer found nothing": memcheck can only report a fault that happens while it watches. So every
test gets one of :data:`faulthunt.records.documents.SANITIZE_OUTCOMES` per tool, with its numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from faulthunt.records.documents import SanitizeOutcome
from faulthunt.records.run import FAILING
from faulthunt.records.sanitizer import TOOLS, Finding
from faulthunt.sanitizer.command import ERROR_EXITCODE
from faulthunt.sanitizer.plan import Target
from faulthunt.sanitizer.reduce import order_findings
from faulthunt.stats import rate_ruled_out

#: a lane stops after this many failing runs with no sanitizer record (unless --keep-going): the
#: tool watched the failure happen that often and saw nothing
SILENT_STOP = 3
CONFIDENCE = 0.95

#: what each tool sees, for "reproduced, sanitizer silent"
TOOL_SEES = {
    "memcheck": "out-of-bounds and misaligned accesses, use after free, API errors",
    "racecheck": "shared-memory data races",
    "initcheck": "reads of uninitialized device memory",
    "synccheck": "barrier and warp-synchronization misuse",
}

#: run states (one sanitizer run of one test); only passed, failed and found count as checked
CHECKED = ("passed", "failed", "found")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """One sanitizer run: one test (or a recorded sequence ending in it) under one tool, once."""

    job: int                      # global start order (the NNN of its files)
    base: str                     # the target's base id
    tool: str
    run: int                      # 1-based, in start order within the test and tool
    ids: tuple[str, ...]          # what pytest was asked to run, in order
    exit_status: int | None = None
    timed_out: bool = False
    #: why it was killed before it ended: found (another run found it), budget, interrupted
    cancelled: str | None = None
    duration: float = 0.0
    records: int = 0
    findings: tuple[Finding, ...] = ()
    #: the sanitizer could not check the test (its own error, or pytest could not run it)
    tool_error: str | None = None
    #: (node id, outcome) of each test the run's pytest process ran, in the order it ran them
    tests: tuple[tuple[str, str], ...] = ()
    meta: Mapping[str, object] = dataclasses.field(default_factory=dict)

    @property
    def target(self) -> str:
        return self.ids[-1]

    @property
    def order_kept(self) -> bool | None:
        """Whether a sequence ran in the asked order (None: a single test, or nothing recorded)."""
        if len(self.ids) < 2 or not self.tests:
            return None
        return tuple(n for n, _ in self.tests) == self.ids

    @property
    def state(self) -> str:
        """cancelled | found | timed_out | not_checked | skipped | failed | passed."""
        if self.cancelled:
            return "cancelled"
        if self.findings or self.exit_status == ERROR_EXITCODE:
            return "found"
        if self.timed_out:
            return "timed_out"
        if self.tool_error:
            return "not_checked"
        if self.tests:
            outcomes = [o for _, o in self.tests]
            if any(o in FAILING or o == "incomplete" for o in outcomes):
                return "failed"
            target = [o for n, o in self.tests if n == self.target]
            if target and all(o == "skipped" for o in target):
                return "skipped"
            return "passed"
        rc = self.exit_status
        if rc == 0:
            return "passed"
        if rc == 1 or (rc is not None and (rc < 0 or rc > 128)):
            return "failed"  # pytest's "tests failed", or killed by a signal (a crash)
        return "not_checked"

    @property
    def culprit(self) -> str:
        return culprit_of(self.ids, self.tests)


def culprit_of(ids: Sequence[str], tests: Sequence[tuple[str, str]]) -> str:
    """The test a run's sanitizer records belong to: the first of its tests that failed, else the
    test it was run for (the last of ``ids``). compute-sanitizer's records carry no test, but one
    run is one pytest process running ``ids`` in order, children included."""
    return next((n for n, o in tests if o in FAILING), ids[-1])


def _pct(rate: float) -> str:
    return f"{100 * rate:.2g}%"


def ruled_out_text(runs: int) -> str:
    """'a rate above 7% is unlikely' for ``runs`` passing runs (95%)."""
    return f"a rate above {_pct(rate_ruled_out(runs, CONFIDENCE))} is unlikely (95% confidence)"


def silent_hint(tools_run: Sequence[str]) -> str:
    """Which tools would see what the ones run could not."""
    others = [t for t in TOOLS if t not in tools_run]
    if not others:
        return ("none of the four tools sees it: a wrong result from valid addresses (a stale "
                "pointer into a live allocation, a logic error) or a host-side fault")
    seen = "; ".join(f"{t} sees {TOOL_SEES[t]}" for t in others)
    return f"{seen}: try --tool all"


def _not_checked_reason(runs: Sequence[RunResult]) -> str:
    for r in runs:
        if r.tool_error:
            logs = [str(r.meta[k]) for k in ("output", "log") if r.meta.get(k)]
            return r.tool_error + (f" (what it printed: {', '.join(logs)})" if logs else "")
    if any(r.state == "skipped" for r in runs):
        return "the test skipped itself under the sanitizer"
    if runs and all(r.state == "cancelled" for r in runs):
        return f"every run was stopped before it ended ({runs[0].cancelled})"
    return "no run ended"


def _outcome_text(o: dict[str, object], target: Target, tools_run: Sequence[str],
                  runs: Sequence[RunResult], notes: Sequence[str]) -> str:
    kind, k = o["outcome"], int(o["runs"])  # type: ignore[call-overload]
    if kind == "found":
        text = f"found in run {o['found_in_run']}"
        if int(o["finding_runs"]) > 1 or k > int(o["found_in_run"]):  # type: ignore[call-overload]
            text += f" (in {o['finding_runs']} of {k} runs)"
        first = first_findings(runs)
        if first:
            f = first[0]
            where = f.location.rsplit("/", 1)[-1] if f.file else f.location
            text += f": {f.error}" + (f" in kernel {f.kernel}" if f.kernel else "") + f" at {where}"
    elif kind == "reproduced_silent":
        text = (f"reproduced, sanitizer silent: failed in {o['failed_runs']} of {k} run(s) under "
                f"{o['tool']} with no record; {silent_hint(tools_run)}")
    elif kind == "not_reproduced":
        text = f"not reproduced in {k} run{'s' if k != 1 else ''}: {ruled_out_text(k)}"
        if target.failures and target.runs:
            rate = target.failures / target.runs
            text += f"; the stress run failed {target.failures} of {target.runs} ({100 * rate:.3g}%)"
            if rate > rate_ruled_out(k, CONFIDENCE):
                text += (", a rate these runs make unlikely: under the sanitizer it shows less "
                         "often, if at all (its slowdown changes timing)")
        if target.predecessors_seen and not target.sequence:
            text += (f"; in the stress run {target.predecessors_seen} test(s) ran before it in its "
                     "worker: try --with-predecessors")
        text += "".join(f"; {n}" for n in notes)
    elif kind == "timed_out":
        text = (f"timed out in {o['timed_out_runs']} run(s) with none ending in time: the "
                "sanitizer's slowdown; raise --timeout")
    else:
        text = f"not checked: {_not_checked_reason(runs)}"
    if o.get("stopped") == "budget" and kind != "found":
        text += f"; stopped by the budget after {o['started']} run(s) started"
    if target.sequence and o.get("order_kept") is False:
        text += "; WARNING: the sequence did not run in the recorded order"
    return text


def outcome_for(target: Target, tool: str, runs: Sequence[RunResult], *, stopped: str | None,
                tools_run: Sequence[str], notes: Sequence[str] = ()) -> SanitizeOutcome:
    """The outcome of one test under one tool from its runs (any order)."""
    runs = sorted(runs, key=lambda r: r.run)
    states = [r.state for r in runs]
    checked = sum(s in CHECKED for s in states)
    found = [r.run for r in runs if r.state == "found"]
    failed = states.count("failed")
    timed_out = states.count("timed_out")
    if found:
        kind = "found"
    elif failed:
        kind = "reproduced_silent"
    elif checked:
        kind = "not_reproduced"
    elif timed_out:
        kind = "timed_out"
    else:
        kind = "not_checked"
    orders = [r.order_kept for r in runs if r.order_kept is not None]
    o: dict[str, object] = {
        "nodeid": target.base, "tool": tool, "outcome": kind, "runs": checked,
        "planned": target.planned, "started": len(runs),
        "found_in_run": found[0] if found else None, "finding_runs": len(found),
        "failed_runs": failed, "timed_out_runs": timed_out,
        "not_checked_runs": sum(s in ("not_checked", "skipped") for s in states),
        "cancelled_runs": states.count("cancelled"),
        "rate_ruled_out": (round(rate_ruled_out(checked, CONFIDENCE), 6)
                           if kind == "not_reproduced" else None),
        "stress_failures": target.failures, "stress_runs": target.runs,
        "id_mode": target.mode, "ids": list(target.ids), "predecessors": len(target.sequence),
        "order_kept": all(orders) if orders else None, "stopped": stopped,
    }
    counts = [c for c in (target.count_for(target.selection(r.run)) for r in runs) if c]
    o["count"] = counts[0] if counts else None
    o["text"] = _outcome_text(o, target, tools_run, runs, notes)
    return SanitizeOutcome(**o)  # type: ignore[arg-type]


def first_findings(runs: Sequence[RunResult]) -> list[Finding]:
    """The findings of the run where the fault first showed (the lowest run number)."""
    found = sorted((r for r in runs if r.findings and r.state == "found"), key=lambda r: r.run)
    return list(found[0].findings) if found else []


@dataclasses.dataclass(frozen=True)
class Analysis:
    outcomes: tuple[SanitizeOutcome, ...]
    #: each test and tool's findings from the run where they first showed, offending kernel first
    findings: tuple[Finding, ...]
    records: int


def analyse(targets: Sequence[Target], tools: Sequence[str], runs: Sequence[RunResult], *,
            stopped: Mapping[tuple[str, str], str] | None = None,
            notes: Sequence[str] = ()) -> Analysis:
    """Outcomes per (test, tool) in target order, and the findings that go with them."""
    by_lane: dict[tuple[str, str], list[RunResult]] = {}
    for r in runs:
        by_lane.setdefault((r.base, r.tool), []).append(r)
    outcomes = []
    findings: list[Finding] = []
    for t in targets:
        for tool in tools:
            lane = by_lane.get((t.base, tool), [])
            outcomes.append(outcome_for(t, tool, lane, stopped=(stopped or {}).get((t.base, tool)),
                                        tools_run=tools, notes=notes))
            findings.extend(first_findings(lane))
    return Analysis(tuple(outcomes), tuple(order_findings(findings)), sum(r.records for r in runs))


__all__ = ["RunResult", "Analysis", "analyse", "outcome_for", "first_findings", "silent_hint",
           "ruled_out_text", "SILENT_STOP", "TOOL_SEES"]
