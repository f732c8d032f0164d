"""Render a :class:`ReportModel` as Markdown ready to paste into an issue (fixed layout, golden-tested).

Every id, path and message is data: escaped with :mod:`faulthunt.report.escape` so that a pipe
never splits a cell, a backtick never opens code and ``<script>`` never reaches the page as a tag.
"""

from __future__ import annotations

import re

from typing import Any

from faulthunt.report.common import (allocation_text, clip, failing_tests, gpu_text, headline,
                                     outcome_text, pid_text, rate_text)
from faulthunt.report.escape import md_cell, md_code, md_fence, md_note, md_text
from faulthunt.report.model import ReportModel

#: failure rows in the table (report.json has them all)
MAX_FAILURES = 30


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    """A GitHub table; cells are already escaped (see :func:`md_cell`)."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def tests_table(model: ReportModel) -> list[str]:
    """The per-test rates of failing tests (also the CI step summary's table)."""
    return _table(["test", "runs", "failures", "rate (95% interval)", "Xids"],
                  [[md_cell(t.get("base_nodeid")), md_cell(t.get("runs")), md_cell(t.get("failures")),
                    md_cell(rate_text(t)), md_cell(t.get("xids"))] for t in failing_tests(model)])


def failures_table(model: ReportModel, limit: int = MAX_FAILURES) -> list[str]:
    """The first ``limit`` failures, with a line saying how many more report.json holds."""
    out = _table(["test", "outcome", "worker", "pid", "GPU", "message"],
                 [[md_cell(f.get("nodeid")), md_cell(outcome_text(f)), md_cell(f.get("worker")),
                   md_cell(pid_text(f)), md_cell(gpu_text(f.get("device"), model)),
                   md_cell(clip(f.get("message"), model), newlines="space")]
                  for f in model.failures[:limit]])
    if len(model.failures) > limit:
        out += ["", f"... and {len(model.failures) - limit} more (report.json has them all)"]
    return out


def xids_table(model: ReportModel) -> list[str]:
    """Decoded Xid events with their mapping verdicts."""
    return _table(["Xid", "category", "GPU", "pid", "test", "fault page", "engine", "access", "allocation"],
                  [[md_cell(x.get("xid")), md_cell(x.get("category")),
                    md_cell(gpu_text(x.get("device") or x.get("pci"), model)), md_cell(x.get("pid")),
                    md_cell(x.get("nodeid") or x.get("mapped_test")), md_cell(x.get("page")),
                    md_cell(x.get("engine")),
                    md_cell(" ".join(filter(None, [x.get("access_type"), x.get("fault_type")])) or None),
                    md_cell(allocation_text(x))] for x in model.xids])


def guard_section(model: ReportModel) -> list[str]:
    """What guard mode did and each fault it caught, in the guard's own words."""
    g = model.guard or {}
    out = [md_text(g.get("line")), ""]
    for line in guard_notes(g):
        out += [md_text(line), ""]
    catches = g.get("catches") or []
    if catches:
        out += _table(["verdict", "test", "what guard mode says"],
                      [[md_cell(c.get("verdict")), md_cell(c.get("nodeid")),
                        md_cell(c.get("text"), newlines="space")] for c in catches])
        out += [""]
    return out


def guard_notes(guard: dict[str, Any]) -> list[str]:
    """The sentences under the guard line: settings, a simulated driver, what it cannot see."""
    cfg = guard.get("config") or {}
    out = []
    if cfg:
        out.append(f"Settings: 1 in {cfg.get('rate')}, guard {'after' if cfg.get('side') != 'left' else 'before'} "
                   f"each allocation, align {cfg.get('align')}, seed {cfg.get('seed')}.")
    if cfg.get("driver") == "simulated":
        out.append("SIMULATED driver (FAULTHUNT_GUARD_DRIVER=fake): no GPU memory was guarded.")
    if guard.get("not_guardable"):
        out.append(f"{guard['not_guardable']} fault address(es) fell inside a slot's slack: inside "
                   "the slack, not guardable (a smaller align leaves less: --guard 1,align=16).")
    return out


def sanitizer_table(model: ReportModel) -> list[str]:
    """compute-sanitizer findings, first = offending kernel."""
    return _table(["tool", "kind", "kernel", "source", "count", "test"],
                  [[md_cell(f.get("tool")), md_cell(f.get("kind")), md_cell(f.get("kernel")),
                    md_cell(f"{f.get('file')}:{f.get('line')}" if f.get("file") else None),
                    md_cell(f.get("count")), md_cell(f.get("nodeid"))] for f in model.sanitizer])


def sanitizer_outcomes_table(model: ReportModel) -> list[str]:
    """Each rerun test's outcome under the sanitizer: found, reproduced but silent, not reproduced."""
    from faulthunt.report.sanitize import OUTCOME_LABELS

    return _table(["test", "tool", "outcome", "runs", "detail"],
                  [[md_cell(o.get("nodeid")), md_cell(o.get("tool")),
                    md_cell(OUTCOME_LABELS.get(str(o.get("outcome")), o.get("outcome"))),
                    md_cell(o.get("runs")), md_cell(o.get("text"), newlines="space")]
                   for o in model.sanitizer_outcomes])


def no_finding_text(model: ReportModel) -> str:
    """What a sanitize without findings says: never "no errors" for a test that did not fail."""
    if model.sanitizer_outcomes:
        return "No sanitizer finding; per test, what the reruns add up to:"
    return ("compute-sanitizer ran and reported no errors (this sanitize did not record whether "
            "the failures came back under it).")


def first_finding_line(model: ReportModel) -> str:
    """``First offending kernel: `k` at `file:line` (kind, access of size n)``."""
    first = model.sanitizer[0]
    return (f"First offending kernel: {md_code(first.get('kernel'))} at "
            f"{md_code(str(first.get('file') or '?') + ':' + str(first.get('line') or '?'))} "
            f"({md_text(first.get('kind'))}"
            + (f", {md_text(first.get('access'))} of size {md_text(first.get('size'))}"
               if first.get("access") else "") + ")")


def render(model: ReportModel) -> str:
    """The whole report.md text."""
    L: list[str] = [f"# faulthunt report: run {md_text(model.run_id)}", "", f"**{md_text(headline(model))}**", ""]
    if model.simulated:
        L += [f"> **{md_text(model.simulated)}**", ""]
    L += ["## Reproduce", ""]
    if model.reproduce:
        L += [*md_fence(model.reproduce, "sh"), ""]
    else:
        L += ["(run.json missing: the command is not known)", ""]
    r = model.rate
    L += [f"Rate: {r['text']}."]
    if r.get("outcomes"):
        L += ["Outcomes: " + ", ".join(f"{k} {v}" for k, v in r["outcomes"].items()) + "."]
    L += [""]
    if model.by_test:
        L += ["## Tests", ""]
        L += tests_table(model)
        L += [""]
    if model.collection_errors:
        L += ["## Modules that failed to import", "",
              "Their tests never ran (pytest's first error line; reproducer.log has the rest).", ""]
        L += _table(["module", "error"],
                    [[md_cell(e.get("nodeid")), md_cell(e.get("message"), newlines="space")]
                     for e in model.collection_errors])
        L += [""]
    if model.failures:
        L += ["## Failures", ""]
        L += failures_table(model)
        L += [""]
    L += ["## Xid events", ""]
    if model.xids:
        if model.simulated:
            L += ["Xid lines of the simulated kernel log (SIMULATED: no GPU wrote them).", ""]
        L += xids_table(model)
    else:
        L += ["None recorded."]
    if model.guard:
        L += ["", "## Guard mode", ""]
        L += guard_section(model)
        L.pop()
    L += ["", "## Sanitizer", ""]
    if not model.sanitizer_ran:
        L += ["Not run yet."]
    elif not model.sanitizer:
        L += [no_finding_text(model)]
        if model.sanitizer_outcomes:
            L += ["", *sanitizer_outcomes_table(model)]
    else:
        L += [first_finding_line(model), ""]
        L += sanitizer_table(model)
        if model.sanitizer_outcomes:
            L += ["", *sanitizer_outcomes_table(model)]
        example = example_text(model.sanitizer[0].get("example"))
        if example:
            L += ["", *md_fence(example)]
    L += [""]
    if model.hangs:
        L += ["## Hangs", ""]
        for h in model.hangs:
            L += [f"### {md_text(h.get('nodeid'))} (worker {md_text(h.get('worker'))}, pid {md_text(pid_text(h))}, "
                  f"timeout {md_text(h.get('timeout'))} s)", ""]
            if h.get("same_as"):
                L += [f"Same stack as {md_text(h['same_as'])} (above).", ""]
            elif h.get("stack"):
                also = (f"; the same stack in {md_text(', '.join(h['same_stack_in']))}"
                        if h.get("same_stack_in") else "")
                L += [f"Stack ({md_text(h.get('stack_source'))}{also}):", "",
                      *md_fence(h["stack"].rstrip()), ""]
            else:
                L += [f"No stack: {md_text(h.get('why_no_stack'), newlines='space')}", ""]
    e = model.environment
    L += ["## Environment", ""]
    driver = e.get("driver")
    if driver and e.get("driver_module"):
        driver = f"{driver} ({e['driver_module']} kernel module)"
    rows = [["host", e.get("host")], ["OS", e.get("os")],
            ["kernel", " ".join(filter(None, [e.get("kernel"), e.get("machine")])) or None],
            ["python", e.get("python")], ["faulthunt", e.get("faulthunt")],
            ["driver", driver], ["CUDA (driver)", e.get("cuda")]]
    for g in e.get("gpus") or []:
        mem = g.get("memory_total")
        bits = [f"cc {g.get('cc')}" if g.get("cc") else None,
                f"{mem / 2**30:.0f} GiB" if isinstance(mem, (int, float)) and mem > 0 else None,
                g.get("pci"), g.get("uuid")]
        rows.append([f"GPU {g.get('index')}", f"{g.get('name')} ({', '.join(b for b in bits if b)})"])
    if not e.get("gpus"):
        rows.append(["GPU", f"none recorded: {e['gpu_note']}" if e.get("gpu_note") else None])
    for name, ver in (e.get("packages") or {}).items():
        rows.append([name, ver])
    L += _table(["what", "value"], [[md_cell(a), md_cell(b, newlines="space")] for a, b in rows])
    L += ["", "## What to try next", ""]
    L += [f"{i}. {s}" for i, s in enumerate(model.next_steps, 1)]
    if model.notes:
        L += ["", "## Notes on this run directory", ""]
        L += [f"- {md_note(n)}" for n in model.notes]
    return "\n".join(L).rstrip() + "\n"


#: host frames kept in the report's example record; the full stack is in sanitizer/sanitizer.log
_EXAMPLE_FRAMES = 8


def example_text(example: object) -> str:
    """The first finding's record as compute-sanitizer printed it, host stack cut to what helps.

    A record is a dict (``sanitizer.json``) with its printed ``lines``; the host stack of a Python
    process is mostly interpreter frames, so only frames that name a source line (the Python
    frames compute-sanitizer resolves, and C/C++ frames with line info) are kept, at most
    ``_EXAMPLE_FRAMES``, with a count of what was left out.
    """
    if not example:
        return ""
    if not isinstance(example, dict):
        return str(example).rstrip()
    lines = [str(x) for x in example.get("lines") or []]
    if not lines:
        return str(example.get("message") or "").rstrip()
    out: list[str] = []
    frames = kept = 0
    for line in lines:
        if not line.startswith("Host Frame"):
            out.append(line)
            continue
        frames += 1
        if kept < _EXAMPLE_FRAMES and re.search(r" in \S+:\d+$", line):
            out.append(line)
            kept += 1
    if frames > kept:
        out.append(f"... {frames - kept} more host frame(s) in sanitizer/sanitizer.log")
    return "\n".join(out)
