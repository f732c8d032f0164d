"""Render a :class:`ReportModel` as Markdown ready to paste into an issue (fixed layout, golden-tested)."""

from __future__ import annotations

import re

from typing import Any

from faulthunt.report.model import ReportModel


def _cell(v: Any) -> str:
    if v is None or v == "":
        return "-"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def render(model: ReportModel) -> str:
    """The whole report.md text."""
    L: list[str] = [f"# faulthunt report: run {model.run_id}", "", f"**{model.headline}**", ""]
    L += ["## Reproduce", ""]
    if model.reproduce:
        L += ["```sh", model.reproduce, "```", ""]
    else:
        L += ["(run.json missing: the command is not known)", ""]
    r = model.rate
    L += [f"Rate: {r['text']}."]
    if r.get("outcomes"):
        L += ["Outcomes: " + ", ".join(f"{k} {v}" for k, v in r["outcomes"].items()) + "."]
    L += [""]
    if model.by_test:
        L += ["## Tests", ""]
        L += _table(["test", "runs", "failures", "rate (95% interval)", "Xids"],
                    [[t.get("base_nodeid"), t.get("runs"), t.get("failures"),
                      _rate(t), t.get("xids")] for t in model.by_test if t.get("failures") or t.get("xids")])
        L += [""]
    if model.failures:
        L += ["## Failures", ""]
        L += _table(["test", "outcome", "worker", "pid", "GPU", "message"],
                    [[f.get("nodeid"), f.get("outcome") + (f" ({f['signal_name']})" if f.get("signal_name") else ""),
                      f.get("worker"), f.get("pid"), f.get("device"), (f.get("message") or "")[:120]]
                     for f in model.failures[:30]])
        if len(model.failures) > 30:
            L += ["", f"... and {len(model.failures) - 30} more (report.json has them all)"]
        L += [""]
    L += ["## Xid events", ""]
    if model.xids:
        L += _table(["Xid", "category", "GPU", "pid", "test", "fault page", "engine", "access", "allocation"],
                    [[x.get("xid"), x.get("category"), x.get("device") or x.get("pci"), x.get("pid"),
                      x.get("nodeid") or x.get("mapped_test"), x.get("page"), x.get("engine"),
                      " ".join(filter(None, [x.get("access_type"), x.get("fault_type")])) or None,
                      _alloc(x)] for x in model.xids])
    else:
        L += ["None recorded."]
    L += ["", "## Sanitizer", ""]
    if not model.sanitizer_ran:
        L += ["Not run yet."]
    elif not model.sanitizer:
        L += ["compute-sanitizer ran and reported no errors."]
    else:
        first = model.sanitizer[0]
        L += [f"First offending kernel: `{first.get('kernel')}` at "
              f"`{first.get('file') or '?'}:{first.get('line') or '?'}` ({first.get('kind')}"
              + (f", {first.get('access')} of size {first.get('size')}" if first.get("access") else "") + ")", ""]
        L += _table(["tool", "kind", "kernel", "source", "count", "test"],
                    [[f.get("tool"), f.get("kind"), f.get("kernel"),
                      f"{f.get('file')}:{f.get('line')}" if f.get("file") else None, f.get("count"), f.get("nodeid")]
                     for f in model.sanitizer])
        example = _example_text(first.get("example"))
        if example:
            L += ["", "```", example, "```"]
    L += [""]
    if model.hangs:
        L += ["## Hangs", ""]
        for h in model.hangs:
            L += [f"### {h.get('nodeid')} (worker {h.get('worker')}, pid {h.get('pid')}, timeout {h.get('timeout')} s)", ""]
            if h.get("stack"):
                L += [f"Stack ({h.get('stack_source')}):", "", "```", h["stack"].rstrip(), "```", ""]
            else:
                L += [f"No stack: {h.get('why_no_stack')}", ""]
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
    L += _table(["what", "value"], rows)
    L += ["", "## What to try next", ""]
    L += [f"{i}. {s}" for i, s in enumerate(model.next_steps, 1)]
    if model.notes:
        L += ["", "## Notes on this run directory", ""]
        L += [f"- {n}" for n in model.notes]
    return "\n".join(L).rstrip() + "\n"


def _rate(t: dict[str, Any]) -> str:
    ci = t.get("ci95") or [None, None]
    rate = t.get("rate")
    if rate is None or ci[0] is None:
        return "-"
    return f"{100 * rate:.1f}% ({100 * ci[0]:.1f}%-{100 * ci[1]:.1f}%)"


def _alloc(x: dict[str, Any]) -> str | None:
    a = x.get("allocation")
    if not x.get("verdict"):
        return None
    if not a:
        return str(x["verdict"])
    return (f"{x['verdict']}: {a.get('address')} +{a.get('size')} ({a.get('source') or '?'}, "
            f"from {a.get('nodeid') or '?'})")


#: host frames kept in the report's example record; the full stack is in sanitizer/sanitizer.log
_EXAMPLE_FRAMES = 8


def _example_text(example: object) -> str:
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
