"""GitHub Actions output: the job's step summary (Markdown) and ``::error`` annotations.

Pure renderers over the :class:`ReportModel`; :func:`faulthunt.report.ci.write_ci_outputs` does
the I/O. Workflow commands follow GitHub's escaping rules (actions/toolkit ``command.ts``): in
the message ``%``, ``\\r`` and ``\\n`` become ``%25``, ``%0D``, ``%0A``; in a property value
``:`` and ``,`` become ``%3A`` and ``%2C`` as well, so an id can neither end the command early
nor add a property.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from faulthunt.report.common import clip, failing_tests, headline, rate_text
from faulthunt.report.escape import md_text
from faulthunt.report.markdown import (failures_table, first_finding_line, no_finding_text,
                                       sanitizer_outcomes_table, sanitizer_table, tests_table,
                                       xids_table)
from faulthunt.report.model import ReportModel

#: GitHub shows at most 10 error annotations per step; more are dropped silently
MAX_ANNOTATIONS = 10
#: failure rows in the step summary (the report has them all)
SUMMARY_FAILURES = 20


def escape_data(text: str) -> str:
    """A workflow command's message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (file, line, title)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **props: Any) -> str:
    """``::name key=value,...::message``, every part escaped; properties that are None left out."""
    body = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{name}{' ' + body if body else ''}::{escape_data(message)}"


# --- where a test is -----------------------------------------------------------------------------

def function_line(source: str, nodeid: str) -> int | None:
    """The line of the ``def`` that ``nodeid`` names in ``source`` (``path::[Class::]name[params]``).

    Pure: the caller reads the file. None when the source does not parse or has no such function.
    """
    parts = nodeid.partition("[")[0].split("::")[1:]
    if not parts:
        return None
    try:
        body: list[ast.stmt] = ast.parse(source).body
    except (SyntaxError, ValueError):
        return None
    for i, name in enumerate(parts):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return None
        if i == len(parts) - 1:
            return node.lineno
        body = node.body
    return None


#: ``locate(nodeid) -> (repository-relative file, line)``; either may be None
Locate = Callable[[str], "tuple[str | None, int | None]"]


# --- renderers -----------------------------------------------------------------------------------

def _first_failure(model: ReportModel, base: str) -> Mapping[str, Any] | None:
    return next((f for f in model.failures if f.get("base_nodeid") == base
                 and f.get("outcome") != "collateral"), None)


def stress_annotations(model: ReportModel, locate: Locate) -> list[str]:
    """One ``::error`` per failing test (most failing first), at most :data:`MAX_ANNOTATIONS`."""
    rows = sorted(failing_tests(model), key=lambda t: (-(t.get("failures") or 0), str(t.get("base_nodeid"))))
    rows = [t for t in rows if t.get("failures")]
    out = []
    for t in rows[:MAX_ANNOTATIONS]:
        base = str(t.get("base_nodeid"))
        path, line = locate(base)
        first = _first_failure(model, base)
        msg = f"{base}: {t.get('failures')} of {t.get('runs')} runs failed, {rate_text(t)}"
        if t.get("xids"):
            msg += f", {t['xids']} Xid(s)"
        if first is not None:
            msg += (f"\nfirst: {first.get('nodeid')} {first.get('outcome')} on worker {first.get('worker')}"
                    f": {clip(first.get('message'), model, 400)}")
        if model.simulated:
            msg = "SIMULATED run: " + msg
        title = f"faulthunt: {t.get('failures')}/{t.get('runs')} runs failed"
        out.append(command("error", msg, file=path, line=line, title=title))
    if len(rows) > MAX_ANNOTATIONS:
        out.append(command("warning", f"{len(rows) - MAX_ANNOTATIONS} more failing test(s): "
                           "see the job summary or report.md", title="faulthunt"))
    return out


def sanitize_annotations(model: ReportModel) -> list[str]:
    """One ``::error`` per compute-sanitizer finding, at its kernel's source line."""
    out = []
    for f in model.sanitizer[:MAX_ANNOTATIONS]:
        msg = f"{f.get('kind')} in kernel {f.get('kernel')} ({f.get('count')} record(s))"
        if f.get("nodeid"):
            msg += f"\ntest: {f['nodeid']}"
        out.append(command("error", msg, file=f.get("file"), line=f.get("line"),
                           title=f"compute-sanitizer {f.get('tool') or ''}".strip()))
    if len(model.sanitizer) > MAX_ANNOTATIONS:
        out.append(command("warning", f"{len(model.sanitizer) - MAX_ANNOTATIONS} more finding(s): "
                           "see the job summary or report.md", title="faulthunt"))
    return out


def _heading(model: ReportModel, what: str) -> list[str]:
    out = [f"## faulthunt {what}: run {md_text(model.run_id)}", "", f"**{md_text(headline(model))}**", ""]
    if model.simulated:
        out += [f"> **{md_text(model.simulated)}**", ""]
    return out


def stress_summary(model: ReportModel) -> str:
    """The step summary of a stress run: headline, then the tests, failures and Xid tables."""
    out = _heading(model, "stress")
    if failing_tests(model):
        out += ["### Tests", "", *tests_table(model), ""]
    if model.failures:
        out += ["### Failures", "", *failures_table(model, SUMMARY_FAILURES), ""]
    if model.xids:
        out += ["### Xid events", "", *xids_table(model), ""]
    if not model.failures and not model.xids:
        out += [f"Rate: {md_text(model.rate.get('text'))}.", ""]
    return "\n".join(out) + "\n"


def sanitize_summary(model: ReportModel) -> str:
    """The step summary of a sanitize run: the first offending kernel and the findings table."""
    out = _heading(model, "sanitize")
    if not model.sanitizer:
        out += [no_finding_text(model) if model.sanitizer_ran else "compute-sanitizer did not run.", ""]
    else:
        out += [first_finding_line(model), "", *sanitizer_table(model), ""]
    if model.sanitizer_outcomes:
        out += [*sanitizer_outcomes_table(model), ""]
    return "\n".join(out) + "\n"
