"""What guard mode did in a run: a pure summary of its ledger records and of the verdicts.

:func:`summarize_guard` is what ``summary.json`` (key ``guard``), the terminal table and the
report show; :func:`guard_line` is its one-line form. Both take records, never files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from faulthunt.guard import records
from faulthunt.guard.verdict import GuardVerdict
from faulthunt.records.ledger import EVENT_ALLOC, EVENT_FREE, PHASE_COMPLETED

_STATS = ("seen", "guarded", "guarded_bytes", "skipped_cap", "failed", "freed", "released")


def summarize_guard(ledger_records: Iterable[Mapping[str, Any]],
                    verdicts: Iterable[GuardVerdict | Mapping[str, Any]] = ()) -> dict[str, Any]:
    """Counts of a run's guarded allocations and what guard mode caught.

    ``ledger_records``: every ledger record of the run (any pid, any source; others are ignored).
    ``verdicts``: guard verdicts of the run's fault addresses (:class:`GuardVerdict`, or mapping
    entries carrying a ``guard`` verdict object or ``basis: guard``).
    """
    guarded = 0
    guarded_bytes = 0
    frameworks: Counter[str] = Counter()
    freed = released = 0
    totals: dict[int, dict[str, Any]] = {}
    tests: dict[tuple[Any, Any], dict[str, Any]] = {}
    config: dict[str, Any] | None = None
    pids: set[Any] = set()
    for rec in ledger_records:
        if rec.get("source") != records.SOURCE:
            continue
        event = rec.get("event")
        if event == EVENT_ALLOC and isinstance(rec.get("size"), int):
            guarded += 1
            guarded_bytes += rec["size"]
            frameworks[str(rec.get("framework") or "?")] += 1
            pids.add(rec.get("pid"))
        elif event == EVENT_FREE:
            if rec.get("phase") == PHASE_COMPLETED:
                released += 1
            else:
                freed += 1
        elif records.is_note(rec, records.NOTE_CONFIG) and config is None:
            config = {k: v for k, v in rec[records.NOTE_CONFIG].items() if k != "pid"}
        elif records.is_note(rec, records.NOTE_STATS):
            stats = rec[records.NOTE_STATS]
            if stats.get("scope") == "process":
                totals[rec.get("pid") or 0] = stats
            else:
                tests[(rec.get("pid"), rec.get("nodeid"))] = stats
    seen, skipped = _seen(totals, tests)
    caught: Counter[str] = Counter()
    catches: list[dict[str, Any]] = []
    not_guardable = 0
    for v in verdicts:
        j = _verdict_json(v)
        if j is None:
            continue
        if j.get("caught"):
            caught[str(j.get("verdict"))] += 1
            catches.append({"verdict": j.get("verdict"), "text": j.get("text"),
                            "nodeid": j.get("nodeid") or (j.get("allocation") or {}).get("nodeid"),
                            "address": j.get("address")})
        elif j.get("verdict") == "slack":
            not_guardable += 1
    return {
        "enabled": config is not None or guarded > 0,
        "config": config,
        "allocations_seen": seen,
        "allocations_guarded": guarded,
        "guarded_bytes": guarded_bytes,
        "by_framework": dict(sorted(frameworks.items())),
        "processes": len(pids),
        "freed": freed,
        "released": released,
        "skipped_cap": skipped.get("skipped_cap", 0),
        "failed": skipped.get("failed", 0),
        "caught": dict(sorted(caught.items())),
        "catches": catches,
        "not_guardable": not_guardable,
    }


def _seen(totals: Mapping[Any, Mapping[str, Any]],
          tests: Mapping[Any, Mapping[str, Any]]) -> tuple[int | None, dict[str, int]]:
    """Allocations seen and skipped: process totals where a process wrote them at exit, else the
    sum of its per-test counts (a worker that died wrote no totals)."""
    per_pid: dict[Any, dict[str, int]] = {}
    for (pid, _nodeid), stats in tests.items():
        acc = per_pid.setdefault(pid, Counter())
        for k in ("seen", "skipped_cap", "failed"):
            acc[k] += _count(stats.get(k))
    for pid, stats in totals.items():
        per_pid[pid] = Counter({k: _count(stats.get(k)) for k in ("seen", "skipped_cap", "failed")})
    if not per_pid:
        return None, {}
    out: Counter[str] = Counter()
    for acc in per_pid.values():
        out.update(acc)
    return out.pop("seen", 0), dict(out)


def _count(v: Any) -> int:
    """A counter from a record: a damaged one (not a count) counts nothing."""
    return v if type(v) is int and v >= 0 else 0


def _verdict_json(v: GuardVerdict | Mapping[str, Any]) -> dict[str, Any] | None:
    if isinstance(v, GuardVerdict):
        return v.to_json()
    if not isinstance(v, Mapping):
        return None
    if isinstance(v.get("guard"), Mapping):
        return {**v["guard"], "nodeid": v.get("attributed_nodeid") or v.get("nodeid")}
    if v.get("basis") == "guard":
        # a mapping entry: the test the fault was attributed to, else the one running then
        return {**v, "nodeid": v.get("attributed_nodeid") or v.get("nodeid")}
    return None


def guard_line(summary: Mapping[str, Any]) -> str | None:
    """``guard: 120 of 45600 allocations guarded (1 in 100; cupy 100, numba 20); caught 1
    past_end, 1 freed; 1 in the slack, not guardable`` (None when guard mode was off)."""
    if not summary.get("enabled"):
        return None
    cfg = summary.get("config") or {}
    seen = summary.get("allocations_seen")
    n = summary.get("allocations_guarded", 0)
    head = f"guard: {n} of {seen} allocations guarded" if seen is not None else f"guard: {n} allocations guarded"
    parts = [f"1 in {cfg['rate']}"] if cfg.get("rate") else []
    fw = ", ".join(f"{k} {v}" for k, v in (summary.get("by_framework") or {}).items())
    if fw:
        parts.append(fw)
    out = head + (f" ({'; '.join(parts)})" if parts else "")
    caught = summary.get("caught") or {}
    out += "; caught " + (", ".join(f"{v} {k}" for k, v in caught.items()) if caught else "nothing")
    if summary.get("not_guardable"):
        out += f"; {summary['not_guardable']} in the slack, not guardable"
    skipped = summary.get("skipped_cap", 0)
    if skipped:
        out += f"; {skipped} sampled allocations unguarded at max_bytes"
    if summary.get("failed"):
        out += f"; {summary['failed']} sampled allocations could not be guarded (see the ledger notes)"
    return out
