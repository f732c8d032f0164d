"""report.html: the report as one offline page, rendered from the :class:`ReportModel` directly.

Headline, then two pictures (the failure rate of each test with its 95% interval; the run's
timeline, one lane per worker process in natural order, gw2 before gw10, with a row per GPU),
then real tables (sortable by a few lines of inline script; without script they read the same,
in the run's order), the sanitizer record and hang stacks as code blocks, the environment and
what to try next. The timeline's failing spans and markers link to their rows in the tables.

Offline by construction: no network asset, no external font, and a Content-Security-Policy that
lets the page load nothing and run only its own script (by hash). Every id, path and message is
escaped (:func:`html.escape`), so an id holding ``<script>`` is shown, never run.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from faulthunt.report.common import (SIMULATED, allocation_text, clip, failing_tests, gpu_text,
                                     headline, outcome_text, pid_text, rate_text)
from faulthunt.report.escape import visible, visible_lines
from faulthunt.report.markdown import example_text
from faulthunt.report.model import Lane, ReportModel

COLOURS = {"passed": "#8fd18f", "failed": "#e8a33d", "error": "#e8a33d", "crashed": "#d9412b",
           "hung": "#8a55c9", "collateral": "#b8b8b8", "skipped": "#dddddd", "xfailed": "#dddddd",
           "xpassed": "#dddddd", "incomplete": "#d9412b"}
MARKS = {"crash": "#d9412b", "hang": "#8a55c9", "xid": "#1f5fbf", "recycle": "#555555"}
#: outcomes that are not failures (their spans link nowhere)
_QUIET = {"passed", "skipped", "xfailed", "xpassed"}
WIDTH, LANE_H, LEFT, TOP = 1000, 26, 190, 34
#: rows in the HTML failures table (report.json has them all)
MAX_FAILURE_ROWS = 500
#: tests in the rate picture (the table below has them all)
MAX_RATE_ROWS = 40

_SCRIPT = """
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.tabIndex = 0;
  th.title = 'sort by ' + th.textContent;
  function sort() {
    var body = th.closest('table').tBodies[0], col = th.cellIndex, num = th.dataset.type === 'num';
    var dir = th.dataset.dir === 'desc' ? 1 : -1;
    th.closest('tr').querySelectorAll('th').forEach(function (o) { delete o.dataset.dir; });
    th.dataset.dir = dir === 1 ? 'asc' : 'desc';
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.v || a.cells[col].textContent;
      var y = b.cells[col].dataset.v || b.cells[col].textContent;
      return dir * (num ? (parseFloat(x) || 0) - (parseFloat(y) || 0) : x.localeCompare(y));
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  th.addEventListener('click', sort);
  th.addEventListener('keydown', function (e) { if (e.key === 'Enter') sort(); });
});
"""

_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:1.5em auto;max-width:1280px;
 padding:0 1em;color:#1d1d1f;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.headline{font-size:1.1em;font-weight:600}
.simulated{background:#fde8e6;border:2px solid #d9412b;padding:.6em 1em;font-weight:600;color:#8c1d10}
nav a{margin-right:1em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em;display:block;max-width:100%;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:.3em .6em;text-align:left;vertical-align:top}
th{background:#f3f5f7}table.sortable th{cursor:pointer}
table.sortable th[data-dir=asc]::after{content:" \\25B2"}table.sortable th[data-dir=desc]::after{content:" \\25BC"}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.id{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace;overflow-wrap:anywhere;
 word-break:break-all}
#failures-table td.id,#xids-table td.id:nth-child(5){min-width:16em;max-width:36em}
pre.stack{max-height:32em;overflow:auto}td.nowrap{white-space:nowrap;overflow-wrap:normal}
tr:target{background:#fff3c4}
pre{background:#f6f8fa;border:1px solid #e1e4e8;padding:.8em;overflow-x:auto;font-size:.85em}
code{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace}
svg{border:1px solid #ddd;background:#fff;max-width:100%;height:auto}
svg a:hover>*{stroke:#000;stroke-width:1.5}
figure{margin:1em 0}figcaption{font-size:.9em;color:#555}
details summary{cursor:pointer}
"""


def _e(value: Any) -> str:
    """Data as HTML text: control characters shown as escapes (an ESC or BEL from a failure
    message never lands raw in the page; line breaks stay), then HTML-escaped."""
    return escape(visible_lines(value), quote=True)


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that orders numbers inside text by value: gw2 before gw10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def sorted_lanes(lanes: Iterable[Lane]) -> list[Lane]:
    """Worker lanes in natural order of their names, then by pid (a restarted worker's lanes)."""
    return sorted(lanes, key=lambda ln: (natural_key(ln.worker), ln.pid if ln.pid is not None else -1))


# --- anchors: timeline -> table rows -------------------------------------------------------------

class Anchors:
    """Row ids of failures and Xids, looked up by (pid, nodeid) from the timeline."""

    def __init__(self, model: ReportModel) -> None:
        self.failure: dict[tuple[Any, Any], str] = {}
        self.xid: dict[tuple[Any, Any], str] = {}
        for i, f in enumerate(model.failures[:MAX_FAILURE_ROWS]):
            self.failure.setdefault((f.get("pid"), f.get("nodeid")), f"failure-{i + 1}")
        for i, x in enumerate(model.xids):
            self.xid.setdefault((x.get("pid"), x.get("nodeid")), f"xid-{i + 1}")

    def for_marker(self, pid: Any, marker: dict[str, Any]) -> str | None:
        key = (pid, marker.get("nodeid"))
        if marker.get("kind") == "xid":
            return self.xid.get(key) or self.failure.get(key)
        return self.failure.get(key)


def _link(href: str | None, inner: str) -> str:
    return f'<a href="#{_e(href)}">{inner}</a>' if href else inner


# --- pictures ------------------------------------------------------------------------------------

def _nice_step(span: float, ticks: int = 8) -> float:
    raw = max(span / ticks, 1e-9)
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _short(text: str, n: int) -> str:
    """The end of a long id (the parameters are what tell tests apart)."""
    return text if len(text) <= n else "\u2026" + text[-(n - 1):]


def render_rate_chart(model: ReportModel) -> str:
    """Inline SVG: each failing test's failure rate (dot) and its 95% interval (bar)."""
    rows = [t for t in failing_tests(model) if t.get("rate") is not None and t.get("ci95")]
    if not rows:
        return '<p class="empty">No test failed: nothing to draw.</p>'
    rows = sorted(rows, key=lambda t: (-float(t["rate"]), natural_key(str(t.get("base_nodeid")))))
    shown = rows[:MAX_RATE_ROWS]
    left, width, row_h, top = 430, 560, 22, 28
    h = top + row_h * len(shown) + 30
    parts = [f'<svg id="rate-chart" role="img" aria-label="failure rate per test with 95% interval" '
             f'viewBox="0 0 {left + width + 30} {h}" width="{left + width + 30}" height="{h}" '
             f'font-family="system-ui,sans-serif" font-size="11">']
    for pct in range(0, 101, 20):
        x = left + width * pct / 100
        parts.append(f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{h - 24}" stroke="#e5e5e5"/>'
                     f'<text x="{x:.1f}" y="{h - 10}" text-anchor="middle">{pct}%</text>')
    parts.append(f'<text x="{left}" y="14">failure rate (dot) and its 95% interval (bar)</text>')
    for i, t in enumerate(shown):
        y = top + i * row_h + row_h / 2
        lo, hi = (float(v) for v in t["ci95"])
        rate = float(t["rate"])
        name = visible(t.get("base_nodeid"))
        tip = f"{name}: {t.get('failures')} of {t.get('runs')} runs, {rate_text(t)}"
        parts.append(
            f'<g class="rate-row"><title>{_e(tip)}</title>'
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{_e(_short(name, 60))}</text>'
            f'<line class="ci" x1="{left + width * lo:.1f}" y1="{y:.1f}" x2="{left + width * hi:.1f}" '
            f'y2="{y:.1f}" stroke="#7a8899" stroke-width="5" stroke-linecap="round"/>'
            f'<circle class="rate" cx="{left + width * rate:.1f}" cy="{y:.1f}" r="4.5" fill="#d9412b"/>'
            f'<text x="{left + width + 6}" y="{y + 4:.1f}">{t.get("failures")}/{t.get("runs")}</text></g>')
    parts.append("</svg>")
    more = (f"<p>{len(rows) - len(shown)} more failing test(s) in the table below.</p>"
            if len(rows) > len(shown) else "")
    return "".join(parts) + more


def _lane_label(lane: Lane) -> str:
    gpu = f" \u00b7 GPU {lane.device}" if lane.device is not None else ""
    return f"{lane.worker} \u00b7 pid {lane.pid if lane.pid is not None else '?'}{gpu}"


def _gpu_rows(lanes: Sequence[Lane]) -> list[tuple[str, list[tuple[float, str, str | None, Any]]]]:
    """One row per GPU (the workers' CUDA_VISIBLE_DEVICES): failing spans' ends and Xids on it."""
    rows: dict[str, list[tuple[float, str, str | None, Any]]] = {}
    for lane in lanes:
        key = f"GPU {lane.device}" if lane.device is not None else "GPU not pinned"
        events = rows.setdefault(key, [])
        for s in lane.spans:
            out = str(s.get("outcome"))
            t = s.get("t1") if isinstance(s.get("t1"), (int, float)) else s.get("t0")
            if out not in _QUIET and isinstance(t, (int, float)):
                events.append((float(t), out, s.get("nodeid"), lane.pid))
        for m in lane.markers:
            if m.get("kind") == "xid" and isinstance(m.get("t"), (int, float)):
                events.append((float(m["t"]), "xid", m.get("nodeid"), lane.pid))
    return sorted(rows.items(), key=lambda kv: natural_key(kv[0]))


def render_timeline(model: ReportModel, anchors: Anchors | None = None) -> str:
    """Inline SVG: one lane per worker process (natural order), then one row per GPU."""
    anchors = anchors or Anchors(model)
    lanes = sorted_lanes(model.lanes)
    gpu_rows = _gpu_rows(lanes)
    n_rows = max(1, len(lanes)) + len(gpu_rows)
    h = TOP + LANE_H * n_rows + 44
    full_w = WIDTH + LEFT + 20
    parts = [f'<svg id="timeline" role="img" aria-label="timeline of the run by worker and GPU" '
             f'viewBox="0 0 {full_w} {h}" width="{full_w}" height="{h}" '
             f'font-family="system-ui,sans-serif" font-size="11">']
    if model.t_range is None:
        parts.append('<text x="10" y="20">no timed events in this run directory</text></svg>')
        return "".join(parts)
    t0, t1 = model.t_range
    span = max(t1 - t0, 1e-6)

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * WIDTH

    step = _nice_step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        tx = LEFT + tick / span * WIDTH
        parts.append(f'<line x1="{tx:.1f}" y1="{TOP - 6}" x2="{tx:.1f}" y2="{h - 38}" stroke="#f0f0f0"/>'
                     f'<text x="{tx:.1f}" y="{TOP - 10}" text-anchor="middle">{tick:g} s</text>')
        tick += step
    for i, lane in enumerate(lanes):
        y = TOP + i * LANE_H
        parts.append(f'<g class="lane" data-worker="{_e(lane.worker)}" data-pid="{_e(lane.pid)}">'
                     f'<text x="5" y="{y + 16}">{_e(_lane_label(lane))}</text>'
                     f'<line x1="{LEFT}" y1="{y + LANE_H - 2}" x2="{LEFT + WIDTH}" y2="{y + LANE_H - 2}" stroke="#eee"/>')
        for s in lane.spans:
            if not isinstance(s.get("t0"), (int, float)):
                continue
            a = x(s["t0"])
            b = x(s["t1"]) if isinstance(s.get("t1"), (int, float)) else a + 2
            out = str(s.get("outcome"))
            rect = (f'<rect class="span outcome-{_e(out)}" x="{a:.1f}" y="{y + 4}" '
                    f'width="{max(b - a, 1.5):.1f}" height="{LANE_H - 10}" fill="{COLOURS.get(out, "#999")}" '
                    f'stroke="#fff" stroke-width="0.5"><title>{_e(visible(s.get("nodeid")))}: {_e(out)}</title></rect>')
            href = None if out in _QUIET else anchors.failure.get((lane.pid, s.get("nodeid")))
            parts.append(_link(href, rect))
        for m in lane.markers:
            if not isinstance(m.get("t"), (int, float)):
                continue
            mx = x(m["t"])
            kind = str(m.get("kind"))
            path = (f'<path class="marker marker-{_e(kind)}" d="M{mx:.1f},{y + 1} l5,-1 l-5,{LANE_H - 4} '
                    f'l-5,-{LANE_H - 4} z" fill="{MARKS.get(kind, "#000")}"><title>{_e(m.get("label"))}</title></path>')
            parts.append(_link(anchors.for_marker(lane.pid, m), path))
        parts.append("</g>")
    base = TOP + max(1, len(lanes)) * LANE_H
    for j, (name, events) in enumerate(gpu_rows):
        y = base + j * LANE_H
        parts.append(f'<g class="gpu-row" data-gpu="{_e(name)}">'
                     f'<rect x="0" y="{y}" width="{full_w}" height="{LANE_H}" fill="#f7f9fb"/>'
                     f'<text x="5" y="{y + 16}" font-weight="600">{_e(name)} ({len(events)})'
                     f'<title>{_e(name)}: {len(events)} failing run(s) and Xid(s)</title></text>')
        for t, kind, nodeid, pid in events:
            colour = MARKS["xid"] if kind == "xid" else COLOURS.get(kind, "#999")
            href = (anchors.xid.get((pid, nodeid)) if kind == "xid" else None) or anchors.failure.get((pid, nodeid))
            dot = (f'<circle class="gpu-event gpu-{_e(kind)}" cx="{x(t):.1f}" cy="{y + LANE_H / 2}" r="4.5" '
                   f'fill="{colour}"><title>{_e(visible(nodeid))}: {_e(kind)}</title></circle>')
            parts.append(_link(href, dot))
        parts.append("</g>")
    ly, lx = h - 12, LEFT
    legend = [(k, COLOURS[k]) for k in ("passed", "failed", "crashed", "hung", "collateral")]
    for name, colour in legend + [(f"{k} marker", v) for k, v in MARKS.items()]:
        parts.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{lx + 13}" y="{ly}">{_e(name)}</text>')
        lx += 95
    parts.append("</svg>")
    return "".join(parts)


# --- tables --------------------------------------------------------------------------------------

def _td(value: Any, cls: str = "", sort: Any = None) -> str:
    """A cell; an ``id`` cell shows control characters escaped and wraps, its whole text in the
    tooltip."""
    ident = "id" in cls.split() and value is not None and value != ""
    text = "-" if value is None or value == "" else _e(visible(value) if ident else value)
    attrs = ((f' class="{cls}"' if cls else "") + (f' data-v="{_e(sort)}"' if sort is not None else "")
             + (f' title="{_e(visible(value))}"' if ident else ""))
    return f"<td{attrs}>{text}</td>"


def _table(table_id: str, headers: Sequence[tuple[str, str]], rows: Sequence[str], sortable: bool = True) -> str:
    """headers: (label, "num"|"text"); rows: already rendered ``<tr>`` strings."""
    cls = ' class="sortable"' if sortable else ""
    head = "".join(f'<th data-type="{kind}">{_e(label)}</th>' for label, kind in headers)
    return (f'<table id="{table_id}"{cls}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def tests_table(model: ReportModel) -> str:
    rows = []
    for t in failing_tests(model):
        rows.append("<tr>" + _td(t.get("base_nodeid"), "id") + _td(t.get("runs"), "num")
                    + _td(t.get("failures"), "num") + _td(rate_text(t), "num", t.get("rate"))
                    + _td(t.get("xids"), "num") + "</tr>")
    return _table("tests-table", [("test", "text"), ("runs", "num"), ("failures", "num"),
                                  ("rate (95% interval)", "num"), ("Xids", "num")], rows)


def _message_cell(message: Any, model: ReportModel) -> str:
    short = clip(message, model)
    full = str(message or "")
    if not full or full == short:
        return _td(short)
    return f"<td><details><summary>{_e(short)}</summary>{_e(full)}</details></td>"


def failures_table(model: ReportModel) -> str:
    rows = []
    for i, f in enumerate(model.failures[:MAX_FAILURE_ROWS]):
        rows.append(f'<tr id="failure-{i + 1}">' + _td(f.get("nodeid"), "id") + _td(outcome_text(f))
                    + _td(f.get("worker"), sort=" ".join(str(p) for p in natural_key(str(f.get("worker")))))
                    + _td(pid_text(f), "num", f.get("pid")) + _td(gpu_text(f.get("device"), model))
                    + _message_cell(f.get("message"), model) + "</tr>")
    more = (f"<p>... and {len(model.failures) - MAX_FAILURE_ROWS} more (report.json has them all)</p>"
            if len(model.failures) > MAX_FAILURE_ROWS else "")
    return _table("failures-table", [("test", "text"), ("outcome", "text"), ("worker", "text"),
                                     ("pid", "num"), ("GPU", "text"), ("message", "text")], rows) + more


def xids_table(model: ReportModel) -> str:
    rows = []
    for i, x in enumerate(model.xids):
        access = " ".join(filter(None, [x.get("access_type"), x.get("fault_type")])) or None
        rows.append(f'<tr id="xid-{i + 1}">' + _td(x.get("xid"), "num") + _td(x.get("category"))
                    + _td(gpu_text(x.get("device") or x.get("pci"), model)) + _td(x.get("pid"), "num")
                    + _td(x.get("nodeid") or x.get("mapped_test"), "id") + _td(x.get("page"), "id nowrap")
                    + _td(x.get("engine")) + _td(access) + _td(allocation_text(x)) + "</tr>")
    return _table("xids-table", [("Xid", "num"), ("category", "text"), ("GPU", "text"), ("pid", "num"),
                                 ("test", "text"), ("fault page", "text"), ("engine", "text"),
                                 ("access", "text"), ("allocation", "text")], rows)


def guard_section(model: ReportModel) -> str:
    """What guard mode did and each fault it caught, in the guard's own words."""
    from faulthunt.report.markdown import guard_notes

    g = model.guard or {}
    out = [f'<p id="guard-line">{_e(g.get("line"))}</p>']
    out += [f"<p>{_e(n)}</p>" for n in guard_notes(g)]
    rows = ["<tr>" + _td(c.get("verdict")) + _td(c.get("nodeid"), "id") + _td(c.get("text")) + "</tr>"
            for c in g.get("catches") or []]
    if rows:
        out.append(_table("guard-table", [("verdict", "text"), ("test", "text"),
                                          ("what guard mode says", "text")], rows))
    return "".join(out)


def _outcomes_table(model: ReportModel) -> str:
    from faulthunt.report.sanitize import OUTCOME_LABELS

    rows = ["<tr>" + _td(o.get("nodeid"), "id") + _td(o.get("tool"))
            + _td(OUTCOME_LABELS.get(str(o.get("outcome")), o.get("outcome"))) + _td(o.get("runs"), "num")
            + _td(o.get("text")) + "</tr>" for o in model.sanitizer_outcomes]
    return _table("sanitizer-outcomes-table", [("test", "text"), ("tool", "text"), ("outcome", "text"),
                                               ("runs", "num"), ("detail", "text")], rows)


def sanitizer_section(model: ReportModel) -> str:
    if not model.sanitizer_ran:
        return "<p>Not run yet.</p>"
    if not model.sanitizer:
        if model.sanitizer_outcomes:
            return ("<p>No sanitizer finding; per test, what the reruns add up to:</p>"
                    + _outcomes_table(model))
        return ("<p>compute-sanitizer ran and reported no errors (this sanitize did not record whether "
                "the failures came back under it).</p>")
    first = model.sanitizer[0]
    access = f", {_e(first.get('access'))} of size {_e(first.get('size'))}" if first.get("access") else ""
    out = [f'<p id="offending-kernel">First offending kernel: <code>{_e(first.get("kernel"))}</code> at '
           f'<code>{_e(first.get("file") or "?")}:{_e(first.get("line") or "?")}</code> '
           f'({_e(first.get("kind"))}{access})</p>']
    rows = ["<tr>" + _td(f.get("tool")) + _td(f.get("kind")) + _td(f.get("kernel"), "id")
            + _td(f"{f.get('file')}:{f.get('line')}" if f.get("file") else None, "id")
            + _td(f.get("count"), "num") + _td(f.get("nodeid"), "id") + "</tr>" for f in model.sanitizer]
    out.append(_table("sanitizer-table", [("tool", "text"), ("kind", "text"), ("kernel", "text"),
                                          ("source", "text"), ("count", "num"), ("test", "text")], rows))
    if model.sanitizer_outcomes:
        out.append(_outcomes_table(model))
    example = example_text(first.get("example"))
    if example:
        out.append(f'<p>The first finding as compute-sanitizer printed it:</p>'
                   f'<pre id="sanitizer-record"><code>{_e(example)}</code></pre>')
    return "".join(out)


def hangs_section(model: ReportModel) -> str:
    out = []
    for h in model.hangs:
        out.append(f"<h3>{_e(visible(h.get('nodeid')))}</h3><p>worker {_e(h.get('worker'))}, pid {_e(pid_text(h))}, "
                   f"timeout {_e(h.get('timeout'))} s</p>")
        also = (f"; the same stack in {', '.join(h['same_stack_in'])}"
                if h.get("same_stack_in") else "")
        if h.get("same_as"):
            out.append(f"<p>Same stack as {_e(h['same_as'])} (above).</p>")
        elif h.get("stack"):
            out.append(f"<details open><summary>Stack ({_e(h.get('stack_source'))}{_e(also)})</summary>"
                       f"<pre class=\"stack\"><code>{_e(str(h['stack']).rstrip())}</code></pre></details>")
        else:
            out.append(f"<p>No stack: {_e(h.get('why_no_stack'))}</p>")
    return "".join(out)


def environment_table(model: ReportModel) -> str:
    e = model.environment
    driver = e.get("driver")
    if driver and e.get("driver_module"):
        driver = f"{driver} ({e['driver_module']} kernel module)"
    rows: list[tuple[str, Any]] = [
        ("host", e.get("host")), ("OS", e.get("os")),
        ("kernel", " ".join(filter(None, [e.get("kernel"), e.get("machine")])) or None),
        ("python", e.get("python")), ("faulthunt", e.get("faulthunt")),
        ("driver", driver), ("CUDA (driver)", e.get("cuda"))]
    for g in e.get("gpus") or []:
        mem = g.get("memory_total")
        bits = [f"cc {g.get('cc')}" if g.get("cc") else None,
                f"{mem / 2**30:.0f} GiB" if isinstance(mem, (int, float)) and mem > 0 else None,
                g.get("pci"), g.get("uuid")]
        rows.append((f"GPU {g.get('index')}", f"{g.get('name')} ({', '.join(b for b in bits if b)})"))
    if not e.get("gpus"):
        rows.append(("GPU", f"none recorded: {e['gpu_note']}" if e.get("gpu_note") else None))
    rows += list((e.get("packages") or {}).items())
    body = ["<tr>" + _td(a) + _td(b) + "</tr>" for a, b in rows]
    return _table("environment-table", [("what", "text"), ("value", "text")], body, sortable=False)


def _inline(text: str) -> str:
    """Escaped text with `code` spans (the model's own sentences use backticks for commands)."""
    parts = _e(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


# --- the page ------------------------------------------------------------------------------------

def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{_e(title)}</h2>{body}</section>'


def render(model: ReportModel) -> str:
    """The whole report.html text: one self-contained page."""
    anchors = Anchors(model)
    r = model.rate
    rate_lines = f"<p>Rate: {_e(r.get('text'))}.</p>"
    if r.get("outcomes"):
        rate_lines += "<p>Outcomes: " + _e(", ".join(f"{k} {v}" for k, v in r["outcomes"].items())) + ".</p>"
    repro = (f'<pre id="reproduce"><code>{_e(model.reproduce)}</code></pre>' if model.reproduce
             else "<p>(run.json missing: the command is not known)</p>")
    sections = [
        _section("reproduce", "Reproduce", repro + rate_lines),
        _section("pictures", "Failure rate per test",
                 f"<figure>{render_rate_chart(model)}<figcaption>Each failing test: the share of its runs "
                 "that failed (dot) and the 95% Wilson interval of that rate (bar).</figcaption></figure>"),
        _section("timeline-section", "Timeline",
                 f"<figure>{render_timeline(model, anchors)}<figcaption>One lane per worker process "
                 "(a restarted worker is a new lane), then one row per GPU with its failures and Xids "
                 "over the run's time. Failing spans and markers link to their rows below."
                 "</figcaption></figure>"),
    ]
    if model.by_test:
        sections.append(_section("tests", "Tests", tests_table(model)))
    if model.collection_errors:
        sections.append(_section(
            "collection-errors", "Modules that failed to import",
            "<p>Their tests never ran (pytest's first error line; reproducer.log has the rest).</p>"
            + _table("collection-errors-table", [("module", "text"), ("error", "text")],
                     ["<tr>" + _td(e.get("nodeid"), "id") + _td(e.get("message")) + "</tr>"
                      for e in model.collection_errors])))
    if model.failures:
        sections.append(_section("failures", "Failures", failures_table(model)))
    xid_note = (f"<p>Xid lines of the simulated kernel log ({SIMULATED}: no GPU wrote them).</p>"
                if model.simulated and model.xids else "")
    sections.append(_section("xids", "Xid events", xid_note + xids_table(model) if model.xids
                             else "<p>None recorded.</p>"))
    if model.guard:
        sections.append(_section("guard", "Guard mode", guard_section(model)))
    sections.append(_section("sanitizer", "Sanitizer", sanitizer_section(model)))
    if model.hangs:
        sections.append(_section("hangs", "Hangs", hangs_section(model)))
    sections.append(_section("environment", "Environment", environment_table(model)))
    sections.append(_section("next", "What to try next",
                             "<ol>" + "".join(f"<li>{_inline(s)}</li>" for s in model.next_steps) + "</ol>"))
    if model.notes:
        sections.append(_section("notes", "Notes on this run directory",
                                 "<ul>" + "".join(f"<li>{_inline(n)}</li>" for n in model.notes) + "</ul>"))
    nav = "<nav>" + "".join(f'<a href="#{sid}">{label}</a>' for sid, label in (
        ("pictures", "rate"), ("timeline-section", "timeline"), ("tests", "tests"), ("failures", "failures"),
        ("xids", "Xids"), ("sanitizer", "sanitizer"), ("environment", "environment"), ("next", "next"))) + "</nav>"
    banner = f'<p class="simulated" id="simulated">{_e(model.simulated)}</p>' if model.simulated else ""
    script_hash = base64.b64encode(hashlib.sha256(_SCRIPT.encode()).digest()).decode()
    csp = (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src 'sha256-{script_hash}'")
    title = f"faulthunt report: run {model.run_id}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{_e(title)}</h1>{banner}<p class=\"headline\" id=\"headline\">{_e(headline(model))}</p>"
            f"{nav}{''.join(sections)}<script>{_SCRIPT}</script></body></html>\n")
