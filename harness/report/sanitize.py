"""Render ``faulthunt sanitize``'s results: the outcome of each test, the findings table, the
plain-text ``sanitizer_summary.txt``, and both tables on a terminal. Pure but for the printing
functions, which write to the file they are given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import IO, Any

from faulthunt.records.documents import SanitizeOutcome
from faulthunt.records.sanitizer import Finding

#: how each outcome reads in a table
OUTCOME_LABELS = {
    "found": "found",
    "reproduced_silent": "reproduced, sanitizer silent",
    "not_reproduced": "not reproduced",
    "timed_out": "timed out",
    "not_checked": "not checked",
}
OUTCOME_HEADERS = ("test", "tool", "outcome", "runs", "detail")


def _where(f: Finding) -> str:
    if f.file:
        name = os.path.basename(f.file)
        return f"{name}:{f.line}" if f.line is not None else name
    if f.location == "?" and f.host_stack:
        return f"host: {f.host_stack[0]}"  # API errors and leaks: where the host called from
    return f.location


def _addr(f: Finding) -> str:
    if not f.address_range:
        return "-"
    lo, hi = f.address_range
    return f"0x{lo:x}" if lo == hi else f"0x{lo:x}-0x{hi:x}"


def table_rows(findings: Sequence[Finding]) -> list[tuple[str, ...]]:
    """Rows of the findings table: #, tool, error, kernel, where, count, threads, blocks, addresses."""
    rows: list[tuple[str, ...]] = []
    for i, f in enumerate(findings, 1):
        rows.append((str(i), f.tool or "-", f.error, f.kernel or "-", _where(f), str(f.count),
                     f.threads.render() if f.threads else "-", f.blocks.render() if f.blocks else "-",
                     _addr(f), f.nodeid or "-"))
    return rows


HEADERS = ("#", "tool", "error", "kernel", "where", "count", "threads", "blocks", "addresses", "test")


def render_table(findings: Sequence[Finding]) -> str:
    """A fixed-layout text table (no terminal width involved, so files compare whole)."""
    rows = table_rows(findings)
    widths = [max(len(c) for c in col) for col in zip(HEADERS, *rows)] if rows else [len(h) for h in HEADERS]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(HEADERS), line(tuple("-" * w for w in widths))] + [line(r) for r in rows])


def render_headline(f: Finding) -> str:
    """One sentence naming the offending kernel and line."""
    ex = f.example
    what = f.error
    text = f"{what} in kernel {f.kernel or '?'} at {_where(f)}"
    if f.count > 1:
        text += f" ({f.count} records"
        if f.threads and f.threads.distinct > 1:
            text += f", {f.threads.distinct} threads"
        text += ")"
    if ex.alloc_relation:
        if ex.alloc_relation == "inside":
            text += f"; inside the allocation at 0x{ex.alloc_base:x} of {ex.alloc_size} bytes"
        else:
            text += (f"; {ex.alloc_distance} bytes {ex.alloc_relation} the allocation at "
                     f"0x{ex.alloc_base:x} of {ex.alloc_size} bytes")
    if f.nodeid:
        text += f" [test {f.nodeid}]"
    return text


def outcome_rows(outcomes: Sequence[SanitizeOutcome]) -> list[tuple[str, ...]]:
    """Rows of the outcome table: test, tool, outcome, runs (checked/started), detail."""
    rows: list[tuple[str, ...]] = []
    for o in outcomes:
        runs = str(o.runs) if o.started == o.runs else f"{o.runs} of {o.started}"
        rows.append((o.nodeid, o.tool, OUTCOME_LABELS.get(o.outcome, o.outcome), runs, o.text))
    return rows


def render_outcomes(outcomes: Sequence[SanitizeOutcome]) -> list[str]:
    """One paragraph per test and tool: the honest result of its reruns."""
    out = []
    for o in outcomes:
        out.append(f"  {o.nodeid}  [{o.tool}]  {OUTCOME_LABELS.get(o.outcome, o.outcome)}")
        out.append(f"      {o.text}")
    return out


def render_verdict(outcomes: Sequence[SanitizeOutcome], findings: Sequence[Finding]) -> str:
    """The one line under the tables: what the reruns add up to (never "no errors" for a test
    that did not fail under the sanitizer)."""
    if findings:
        return f"offending kernel: {render_headline(findings[0])}"
    if not outcomes:
        return "faulthunt sanitize: nothing to rerun"
    kinds = {o.outcome for o in outcomes}
    if kinds == {"not_checked"}:
        return ("faulthunt sanitize: could not check any test under compute-sanitizer (each test's "
                "line says why, and names the log holding the tool's own output)")
    if "reproduced_silent" in kinds:
        return ("faulthunt sanitize: the failure came back under the sanitizer with no sanitizer "
                "record (see each test's line for the tools that see more)")
    return ("faulthunt sanitize: no sanitizer finding, and the failure did not come back under the "
            "sanitizer (see each test's runs and the rate they rule out)")


def render_summary(findings: Sequence[Finding], *, tests: Sequence[Mapping[str, Any]] = (),
                   dropped: Sequence[str] = (), tool_version: str | None = None,
                   records: int = 0, notes: Sequence[str] = (),
                   outcomes: Sequence[SanitizeOutcome] = ()) -> str:
    """The readable ``sanitizer_summary.txt``: headline, each test's outcome, the runs, the table,
    each finding's example and stack."""
    out: list[str] = []
    out.append(f"faulthunt sanitize: {len(findings)} finding(s) from {records} record(s)"
               + (f", compute-sanitizer {tool_version}" if tool_version else ""))
    if findings:
        out += ["", "Offending kernel: " + render_headline(findings[0])]
    if outcomes:
        out += ["", "Outcome per test:"] + render_outcomes(outcomes)
    if tests:
        out += ["", "Runs:"]
        for t in tests:
            state = "timed out" if t.get("timed_out") else f"exit {t.get('exit_status')}"
            run = f" run {t['run']}" if t.get("run") is not None else ""
            out.append(f"  {t.get('nodeid')}  [{t.get('tool')}]{run}  "
                       + (f"{t['state']}, " if t.get("state") else "")
                       + f"{state}, {t.get('records', 0)} record(s)"
                       + (f", {t.get('duration', 0):.1f}s" if t.get("duration") is not None else ""))
    if dropped:
        out += ["", "Options left out (not supported by this compute-sanitizer):"]
        out += [f"  {d}" for d in dropped]
    if notes:
        out += ["", "Notes:"] + [f"  {n}" for n in notes]
    if findings:
        out += ["", render_table(findings)]
        for i, f in enumerate(findings, 1):
            out += ["", f"[{i}] {f.error} -- {f.kernel_full or f.kernel or '?'}"]
            out += [f"    {line}" for line in (f.example.lines or (f.example.message,))]
            if f.host_stack:
                out.append("    host stack" + (f" at {f.example.host_stack_at}" if f.example.host_stack_at else "") + ":")
                out += [f"      {s}" for s in f.host_stack[:12]]
    return "\n".join(out) + "\n"


def _console(file: IO[str]) -> Any:
    from rich.console import Console

    isatty = getattr(file, "isatty", lambda: False)()
    # a pipe or a file gets the whole table unwrapped; a terminal gets its own width
    return Console(file=file, soft_wrap=False, width=None if isatty else 240)


def print_outcomes(outcomes: Sequence[SanitizeOutcome], file: IO[str]) -> None:
    """The outcome table on a terminal (test ids and texts are data, not rich markup)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="under the sanitizer, per test", show_lines=False)
    for h in OUTCOME_HEADERS:
        table.add_column(h, overflow="fold")
    for row in outcome_rows(outcomes):
        table.add_row(*(escape(c) for c in row))
    _console(file).print(table)


def print_table(findings: Sequence[Finding], file: IO[str]) -> None:
    """The findings table on a terminal (rich)."""
    from rich.markup import escape
    from rich.table import Table

    rows = table_rows(findings)
    keep = [i for i, h in enumerate(HEADERS) if h != "test" or any(r[i] != "-" for r in rows)]
    table = Table(title="compute-sanitizer findings (first = offending kernel)", show_lines=False)
    for i in keep:
        table.add_column(HEADERS[i], overflow="fold")
    for row in rows:  # kernel names and test ids are data, not rich markup ("[x/y]", "[bold]")
        table.add_row(*(escape(row[i]) for i in keep))
    _console(file).print(table)
