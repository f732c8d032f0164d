"""report.html: an offline page (no network assets) with an inline-SVG timeline and the Markdown content.

One lane per worker process; test spans are rectangles coloured by outcome, crashes/hangs/Xids
are markers, all on the wall clock ``t`` the run directory records. The Markdown is embedded as
preformatted text so the page needs no Markdown library or script.
"""

from __future__ import annotations

from html import escape

from faulthunt.report.markdown import render as render_md
from faulthunt.report.model import ReportModel

COLOURS = {"passed": "#8fd18f", "failed": "#e8a33d", "error": "#e8a33d", "crashed": "#d9412b",
           "hung": "#8a55c9", "collateral": "#b8b8b8", "skipped": "#dddddd", "incomplete": "#d9412b"}
MARKS = {"crash": "#d9412b", "hang": "#8a55c9", "xid": "#1f5fbf", "recycle": "#555555"}
WIDTH, LANE_H, LEFT, TOP = 1000, 28, 150, 30


def render_timeline(model: ReportModel) -> str:
    """The inline SVG timeline."""
    lanes = model.lanes
    h = TOP + LANE_H * max(1, len(lanes)) + 30
    parts = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH + LEFT + 20}" '
             f'height="{h}" font-family="sans-serif" font-size="11">']
    if model.t_range is None:
        parts.append('<text x="10" y="20">no timed events in this run directory</text></svg>')
        return "".join(parts)
    t0, t1 = model.t_range
    span = max(t1 - t0, 1e-6)

    def x(t: float) -> float:
        return LEFT + (t - t0) / span * WIDTH

    parts.append(f'<text x="{LEFT}" y="15">0 s</text>'
                 f'<text x="{LEFT + WIDTH}" y="15" text-anchor="end">{span:.2f} s</text>')
    for i, lane in enumerate(lanes):
        y = TOP + i * LANE_H
        parts.append(f'<g class="lane" data-worker="{escape(lane.worker)}" data-pid="{lane.pid}">'
                     f'<text x="5" y="{y + 17}">{escape(lane.worker)} pid {lane.pid}</text>'
                     f'<line x1="{LEFT}" y1="{y + LANE_H - 2}" x2="{LEFT + WIDTH}" y2="{y + LANE_H - 2}" stroke="#eee"/>')
        for s in lane.spans:
            if not isinstance(s.get("t0"), (int, float)):
                continue
            a = x(s["t0"])
            b = x(s["t1"]) if isinstance(s.get("t1"), (int, float)) else a + 2
            out = str(s.get("outcome"))
            parts.append(f'<rect class="span outcome-{escape(out)}" x="{a:.1f}" y="{y + 4}" '
                         f'width="{max(b - a, 1.5):.1f}" height="{LANE_H - 10}" fill="{COLOURS.get(out, "#999")}" '
                         f'stroke="#fff" stroke-width="0.5"><title>{escape(str(s.get("nodeid")))}: {escape(out)}</title></rect>')
        for m in lane.markers:
            if not isinstance(m.get("t"), (int, float)):
                continue
            mx = x(m["t"])
            kind = escape(str(m.get("kind")))
            parts.append(f'<path class="marker marker-{kind}" d="M{mx:.1f},{y + 1} l5,-1 l-5,{LANE_H - 4} l-5,-{LANE_H - 4} z" '
                         f'fill="{MARKS.get(m["kind"], "#000")}"><title>{escape(str(m.get("label")))}</title></path>')
        parts.append("</g>")
    ly = h - 10
    lx = LEFT
    for name, colour in list(COLOURS.items())[:5] + [(f"{k} marker", v) for k, v in MARKS.items()]:
        parts.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{lx + 13}" y="{ly}">{escape(name)}</text>')
        lx += 95
    parts.append("</svg>")
    return "".join(parts)


def render(model: ReportModel) -> str:
    """The whole report.html text: one self-contained page."""
    md = render_md(model)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>faulthunt report {escape(model.run_id)}</title>"
            "<style>body{font-family:sans-serif;margin:1.5em;max-width:1250px}"
            "pre{background:#f6f6f6;padding:1em;overflow-x:auto;white-space:pre-wrap}"
            "svg{border:1px solid #ddd;background:#fff}</style></head><body>"
            f"<h1>faulthunt report: run {escape(model.run_id)}</h1>"
            f"<p><strong>{escape(model.headline)}</strong></p>"
            "<h2>Timeline</h2>" + render_timeline(model) +
            f'<h2>Report</h2><pre id="markdown">{escape(md)}</pre></body></html>\n')
