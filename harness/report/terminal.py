"""The terminal view of a stress run: the end-of-run table and the lines under it.

Renders a summary.json document (:func:`faulthunt.summary.build_summary` plus what the stress run
added: why nothing ran, collection errors, the stop, a full disk, the timeout) on a rich console.
Test ids are data: every id and every text from the run is printed without markup, so
``test_p[x/y]`` stays ``test_p[x/y]``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from faulthunt.records.documents import MappingEntry
from faulthunt.report.escape import visible
from faulthunt.summary import interval_text, nothing_ran_text, plural

#: collection errors named one by one under the table (the rest are counted)
SHOWN_ERRORS = 5
#: guard catches named one by one under the guard line (the rest are counted)
SHOWN_CATCHES = 5


def render_summary(summary: Mapping[str, Any], run_dir: Path | None, console: Any, *,
                   mapping: Sequence[MappingEntry] | None = None) -> None:
    """The end-of-run table (failing base tests, k of n, rate, 95% interval, Xids, mapping
    verdicts) and the lines that say what else the run found or could not do.

    ``mapping``: the run's mapping.json entries; read from ``run_dir`` when not given.
    """
    if mapping is None and run_dir is not None:
        from faulthunt.rundir import RunDir

        mapping = RunDir(run_dir).mapping()
    table = failing_table(summary, mapping or ())
    if table is not None and _fits(table, console):
        console.print(table)
    elif table is not None:  # a narrow terminal: each id whole on its line, its figures under it
        for line in failing_lines(summary, mapping or ()):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in summary_lines(summary, run_dir):
        console.print(line, markup=False, highlight=False, soft_wrap=True)  # paths and ids stay whole


#: the failing-tests table's columns, in order
COLUMNS = ("test", "k of n runs", "rate", "95% interval", "outcomes", "Xids", "mapping")


def _failing_rows(summary: Mapping[str, Any], mapping: Iterable[MappingEntry]) -> list[tuple[str, ...]]:
    """One plain-text row (the :data:`COLUMNS`) per test that failed or had Xids."""
    failing = [r for r in summary.get("by_test", []) if r["failures"] or r["xids"]]
    verdicts = _verdicts(summary, mapping)
    xid_by_test: dict[str, Counter[str]] = {}
    for x in summary.get("xids", []):
        xid_by_test.setdefault(str(x.get("base_nodeid")), Counter())[str(x.get("xid"))] += 1
    rows: list[tuple[str, ...]] = []
    for r in failing:
        outs = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items() if k != "passed")
        xs = ", ".join(f"{k}x{v}" if v > 1 else k
                       for k, v in sorted(xid_by_test.get(r["base_nodeid"], Counter()).items()))
        vs = ", ".join(sorted(set(verdicts.get(r["base_nodeid"], []))))
        rows.append((visible(r["base_nodeid"]), f"{r['failures']} of {r['runs']}",
                     f"{100 * r['rate']:.1f}%", interval_text(r["failures"], r["runs"], r["ci95"]) or "-",
                     outs, xs or "-", vs or "-"))
    return rows


def failing_table(summary: Mapping[str, Any], mapping: Iterable[MappingEntry]) -> Any:
    """The rich Table of the tests that failed or had Xids (None when there are none)."""
    from rich.markup import escape
    from rich.table import Table

    rows = _failing_rows(summary, mapping)
    if not rows:
        return None
    table = Table(title="failing tests", show_lines=False)
    for col in COLUMNS:
        table.add_column(col, overflow="fold")
    for row in rows:
        # ids are data: rich would read "[x/y]" in test_p[x/y] as markup and drop it
        table.add_row(*(escape(cell) for cell in row))
    return table


def failing_lines(summary: Mapping[str, Any], mapping: Iterable[MappingEntry]) -> list[str]:
    """The table as lines, for a terminal too narrow for it: the id whole, its figures under it."""
    out = ["failing tests:"]
    for test, k_of_n, rate, interval, outs, xids, verdicts in _failing_rows(summary, mapping):
        out.append(f"  {test}")
        out.append(f"      {k_of_n} runs, {rate} ({interval}); {outs}; Xids {xids}; mapping {verdicts}")
    return out


def _fits(table: Any, console: Any) -> bool:
    """Whether ``table`` fits the console without folding a cell (an id in 11-character pieces,
    "20.7%-100.0" over "%": unreadable, and the id no longer copies whole)."""
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(1 << 20), table).maximum
    return bool(natural <= console.width)


def _verdicts(summary: Mapping[str, Any], mapping: Iterable[MappingEntry]) -> dict[str, list[str]]:
    base_of = {str(x.get("nodeid")): str(x.get("base_nodeid")) for x in summary.get("xids", [])}
    base_of.update({str(f.get("nodeid")): str(f.get("base_nodeid"))
                    for f in summary.get("failures", [])})
    verdicts: dict[str, list[str]] = {}
    for m in mapping:
        if m.verdict:
            # mapper entries (docs/mapper.md) name the test as attributed_nodeid
            nodeid = m.attributed_nodeid or m.nodeid or ""
            verdicts.setdefault(base_of.get(nodeid, nodeid), []).append(m.verdict)
    return verdicts


def summary_lines(summary: Mapping[str, Any], run_dir: Path | None) -> list[str]:
    """The plain lines under the table, in order (each printed without markup)."""
    out: list[str] = []
    unattributed = [x for x in summary.get("xids", []) if not x.get("base_nodeid")]
    if unattributed:
        out.append(f"{len(unattributed)} Xid(s) not attributed to a test "
                   "(another process, or no matching pid): see xid.jsonl")
    for s in summary.get("xid_spread", []):
        if s["verdict"] != "single":
            out.append(f"Xid {s['xid']}: {s['count']} on GPU(s) "
                       f"{', '.join(s['devices']) or '?'}: {s['reading']}")
    devices = summary.get("by_device", [])
    if len(devices) > 1:
        out.append("by device: " + "; ".join(
            f"{d['device']}: " + (f"{d['failures']} failed of {d['runs']}"
                                  if d.get("runs") is not None else "runs under 'unpinned'")
            + f", {d['xids']} Xids" for d in devices))
    out += kernel_log_lines(summary.get("kernel_log"))
    out += guard_lines(summary.get("guard"))
    out += collection_error_lines(summary)
    out += _nothing_ran(summary, run_dir)
    out += _stop_lines(summary)
    out += _disk_lines(summary)
    out.append(headline(summary))
    timeout = summary.get("timeout")
    if isinstance(timeout, Mapping) and timeout.get("text"):
        out.append(str(timeout["text"]))
    if run_dir is not None:
        out.append(f"run directory: {run_dir}")
    return out


def headline(summary: Mapping[str, Any]) -> str:
    """``N test runs: ...; 4 worker slots, 2 restarts (crashed 1, hung 0, recycled 1)``."""
    w = summary.get("workers") or {}
    outcomes = summary.get("outcomes") or {}
    counts = (f"crashed {w.get('crashed', 0)}, hung {w.get('hung', 0)}, "
              f"recycled {w.get('recycled', 0)}")
    if w.get("slots") is not None:
        # slots (gw0..gwN-1) are the workers asked for; each restart is a new process in a slot
        workers = (f"{w['slots']} worker slot{'s' if w['slots'] != 1 else ''}, "
                   f"{w.get('restarts', 0)} restart{'s' if w.get('restarts', 0) != 1 else ''} "
                   f"({counts})")
    else:
        workers = f"workers {counts}"
    errors = _error_count(summary)
    # skipped, xfailed and xpassed runs could not fail: said apart, outside every rate
    unrated = "".join(f", {outcomes[k]} {k}" for k in ("skipped", "xfailed", "xpassed")
                      if outcomes.get(k))
    return (f"{plural(int(summary.get('tests_run') or 0), 'test run')}: "
            f"{outcomes.get('passed', 0)} passed, "
            f"{len(summary.get('failures', []))} failing ({outcomes.get('collateral', 0)} "
            f"collateral){unrated}, {plural(len(summary.get('xids', [])), 'Xid')}"
            + (f", {errors} collection error{'s' if errors != 1 else ''}" if errors else "")
            + f"; {workers}"
            + (f"; stopped early: {summary['stopped_early']}" if summary.get("stopped_early")
               else ""))


def _error_count(summary: Mapping[str, Any]) -> int:
    errors = summary.get("collection_errors") or []
    return max(len(errors), int(summary.get("collection_error_count") or 0))


def guard_lines(guard: Mapping[str, Any] | None) -> list[str]:
    """What guard mode did (:func:`faulthunt.guard.guard_line`) and each fault it caught, in
    the guard's own words; nothing for a run without guard mode."""
    from faulthunt.guard.summary import guard_line

    if not isinstance(guard, Mapping):
        return []
    line = guard_line(guard)
    if line is None:
        return []
    catches = [c for c in guard.get("catches") or [] if isinstance(c, Mapping)]
    out = [line]
    for c in catches[:SHOWN_CATCHES]:
        text = str(c.get("text") or c.get("verdict"))
        nodeid = c.get("nodeid")
        out.append(f"  {visible(text)}"
                   + (f" (the fault: in {visible(nodeid)})" if nodeid and nodeid not in text else ""))
    if len(catches) > SHOWN_CATCHES:
        out.append(f"  ... and {len(catches) - SHOWN_CATCHES} more (mapping.json has them all)")
    return out


def collection_error_lines(summary: Mapping[str, Any]) -> list[str]:
    """Modules that failed to collect: failures of the run, named with pytest's first line."""
    errors = [e for e in summary.get("collection_errors") or [] if isinstance(e, Mapping)]
    n = _error_count(summary)
    if not n:
        return []
    out = [f"{n} collection error{'s' if n != 1 else ''} (counted as failures of the run; "
           "their tests did not run):"]
    for e in errors[:SHOWN_ERRORS]:
        msg = e.get("message") or e.get("longrepr")
        out.append(f"  {visible(e.get('nodeid') or '?')}" + (f": {visible(msg)}" if msg else ""))
    if n > SHOWN_ERRORS:
        out.append(f"  ... and {n - SHOWN_ERRORS} more (reproducer.log has them all)")
    return out


def _nothing_ran(summary: Mapping[str, Any], run_dir: Path | None) -> list[str]:
    line = nothing_ran_text(summary, run_dir)
    return [line] if line else []


def _stop_lines(summary: Mapping[str, Any]) -> list[str]:
    out = []
    if summary.get("stopped_by"):
        running = list(summary.get("interrupted") or [])
        out.append(f"stopped by {summary['stopped_by']}: pytest and its workers were ended; "
                   + (f"{plural(len(running), 'test run')} "
                      f"{'was' if len(running) == 1 else 'were'} running (outcome interrupted): "
                      + ", ".join(visible(r) for r in running[:5]) + (" ..." if len(running) > 5 else "")
                      if running else "no test was running"))
    if summary.get("leftover_processes"):
        out.append(f"ended {summary['leftover_processes']} process(es) left in pytest's process "
                   "group after it exited")
    return out


def _disk_lines(summary: Mapping[str, Any]) -> list[str]:
    full = list(summary.get("disk_full") or [])
    if not full:
        return []
    dropped = int(summary.get("output_dropped_bytes") or 0)
    out = [f"DISK FULL: {f}" for f in dict.fromkeys(full)]
    if dropped:
        out.append(f"{dropped} bytes of pytest's output were not written to reproducer.log")
    out.append("what was recorded before stays readable; the results above may be incomplete")
    return out


def kernel_log_lines(status: Mapping[str, Any] | None) -> list[str]:
    """What the terminal says about the kernel log: why it was not followed, records lost
    (counted or not), unparsed Xid lines, the source's warnings. Nothing when all was well."""
    if not isinstance(status, Mapping):
        return []
    out = []
    if status.get("error"):
        out.append(f"kernel log: not followed: {status['error']} (no Xids were captured)")
    if status.get("lost"):
        out.append(f"kernel log: {status['lost']} record(s) LOST (overwritten before read): "
                   "Xids among them are missing from this run")
    if status.get("lost_unknown"):
        out.append("kernel log: records may have been lost (this source cannot count them)")
    if status.get("unparsed"):
        out.append(f"kernel log: {status['unparsed']} Xid line(s) not parsed (see kmsg_added.txt)")
    warnings = [str(w) for w in status.get("warnings") or []]
    for w in warnings[:3]:
        out.append(f"kernel log warning: {w}")
    if len(warnings) > 3:
        out.append(f"kernel log: {len(warnings) - 3} more warning(s) in summary.json kernel_log")
    return out
