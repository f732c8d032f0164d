"""report.json: the same content as the Markdown, for tools."""

from __future__ import annotations

from faulthunt.report.model import ReportModel
from faulthunt.rundir import dumps

SCHEMA = "faulthunt.report/1"


def render(model: ReportModel) -> str:
    """The report.json text (sorted keys, indented: diffable)."""
    obj = {"schema": SCHEMA, **model.to_json()}
    return dumps(obj, indent=2) + "\n"
