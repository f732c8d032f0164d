"""Reports of a run directory: Markdown for an issue, JSON for tools, HTML with a timeline.

``build_model`` reads only the run directory; the renderers are pure functions of the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from faulthunt.errors import UsageError
from faulthunt.report.model import ReportModel, build_model
from faulthunt.rundir import Layout, write_text_atomic

__all__ = ["ReportModel", "build_model", "render", "write_reports"]

FORMATS = {"md": Layout.REPORT_MD, "json": Layout.REPORT_JSON, "html": Layout.REPORT_HTML}


def render(model: ReportModel, fmt: str) -> str:
    """Render ``model`` in one format: md, json or html."""
    if fmt == "md":
        from faulthunt.report.markdown import render as r
    elif fmt == "json":
        from faulthunt.report.jsonout import render as r
    elif fmt == "html":
        from faulthunt.report.html import render as r
    else:
        raise UsageError(f"unknown report format {fmt!r}", fix="use --format md, json or html")
    return r(model)


def write_reports(run_dir: Path, formats: Sequence[str] = ("md", "json", "html")) -> list[Path]:
    """Write report.md / report.json / report.html into ``run_dir``; returns the paths written."""
    model = build_model(Path(run_dir))
    out = []
    for fmt in formats:
        path = Path(run_dir) / FORMATS.get(fmt, f"report.{fmt}")
        write_text_atomic(path, render(model, fmt))
        out.append(path)
    return out
