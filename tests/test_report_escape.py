"""Hostile test ids in every medium: Markdown (rendered by a real CommonMark+tables parser), HTML
(parsed back), the terminal (rich), and the simulated-run labels.

An id must come out as exactly its characters: no lost ``[x/y]`` (rich markup), no extra table
column (``|``), no code span (backtick), no tag (``<script>``), no link, no emphasis.
"""

from __future__ import annotations

import io
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from faulthunt.report import build_model, render
from faulthunt.report.escape import md_code, md_text, visible

DATA = Path(__file__).parent / "data" / "report"

HOSTILE_PARAMS = ["x/y", "a b", "bold", "[bold]", "<script>alert(1)</script>", "p|q", "back`tick",
                  "new\nline", "ünï-çødé ✓", "a](http://evil.example)", "__init__", "*star*", "~~s~~",
                  "back\\slash", "&amp;"]
HOSTILE_IDS = [f"tests/test_h.py::test_p[{p}]" for p in HOSTILE_PARAMS]


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def hostile_run(tmp_path: Path) -> Path:
    """A run directory whose every failure, Xid and finding names a hostile id."""
    run = tmp_path / "hostile"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"id": "hostile", "argv": ["faulthunt", "stress", "tests"]}))
    failures, by_test, xids, events = [], [], [], []
    events.append({"event": "worker", "worker": "gw0", "pid": 100, "t": 1000.0, "t_mono": 10.0})
    for i, nodeid in enumerate(HOSTILE_IDS):
        t = 1000.0 + i
        events += [{"event": "start", "nodeid": nodeid, "base_nodeid": nodeid, "worker": "gw0", "pid": 100,
                    "t": t, "t_mono": 10.0 + i},
                   {"event": "end", "nodeid": nodeid, "base_nodeid": nodeid, "worker": "gw0", "pid": 100,
                    "t": t + 0.5, "t_mono": 10.5 + i, "outcome": "failed"}]
        failures.append({"nodeid": nodeid, "base_nodeid": nodeid, "outcome": "failed", "worker": "gw0",
                         "pid": 100, "device": None, "message": f"AssertionError: {nodeid}"})
        by_test.append({"base_nodeid": nodeid, "runs": 1, "failures": 1, "rate": 1.0, "ci95": [0.2, 1.0],
                        "outcomes": {"failed": 1}, "collateral": 0, "xids": 1})
        xids.append({"xid": 31, "pid": 100, "worker": "gw0", "nodeid": nodeid, "base_nodeid": nodeid,
                     "device": "0", "category": "app_memory_fault", "ts": 10.2 + i})
    _write_jsonl(run / "events" / "gw0-100.jsonl", events)
    _write_jsonl(run / "xid.jsonl", xids)
    (run / "summary.json").write_text(json.dumps({
        "tests_run": len(HOSTILE_IDS), "passed": 0, "outcomes": {"failed": len(HOSTILE_IDS)},
        "failures": failures, "by_test": by_test, "xids": xids, "workers": {"processes": 1}}))
    (run / "sanitizer").mkdir()
    (run / "sanitizer" / "sanitizer.json").write_text(json.dumps({"findings": [
        {"tool": "memcheck", "kind": "Invalid __global__ write", "kernel": f"k<{p}>", "file": "k.cu",
         "line": 3, "count": 1, "nodeid": n} for p, n in zip(HOSTILE_PARAMS, HOSTILE_IDS)]}))
    return run


def simulated_run(tmp_path: Path) -> Path:
    """The constructed sample run, recorded as the demo's simulator run (run.json options)."""
    run = tmp_path / "sim"
    shutil.copytree(DATA / "sample_run", run)
    info = json.loads((run / "run.json").read_text())
    info["options"] = {"env": {"FAULTHUNT_KERNELS_BACKEND": "sim"},
                       "xid_source": f"file:{run}/simulated_kernel_log.txt"}
    (run / "run.json").write_text(json.dumps(info))
    summary = json.loads((run / "summary.json").read_text())
    summary["failures"][0]["message"] = ("x" * 130) + " [SIMULATED on CPU (no GPU here)]"
    (run / "summary.json").write_text(json.dumps(summary))
    return run


class _Cells(HTMLParser):
    """Rows of <td> texts per table, and every tag seen."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.tags: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs) -> None:  # type: ignore[no-untyped-def]
        self.tags.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag == "td":
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _parse(html: str) -> _Cells:
    p = _Cells()
    p.feed(html)
    return p


def _shown(nodeid: str) -> str:
    """How Markdown shows an id: exact, with a newline written as \\n (a cell is one line)."""
    return nodeid.replace("\n", "\\n")


# --- Markdown -------------------------------------------------------------------------------------

def test_markdown_ids_survive_a_real_renderer(tmp_path: Path) -> None:
    from markdown_it import MarkdownIt

    md = render(build_model(hostile_run(tmp_path)), "md")
    assert "<script>" not in md  # raw text: an entity, never a tag
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    cells = _parse(html)
    assert "script" not in cells.tags and "a" not in cells.tags and "em" not in cells.tags
    assert "s" not in cells.tags and "del" not in cells.tags and "strong" in cells.tags  # the headline only
    tests, failures, xids, sanitizer = cells.tables[:4]
    assert [len(r) for r in failures[1:]] == [6] * len(HOSTILE_IDS)  # no extra column from "|"
    assert [r[0] for r in tests[1:]] == [_shown(n) for n in HOSTILE_IDS]
    assert [r[0] for r in failures[1:]] == [_shown(n) for n in HOSTILE_IDS]
    assert [r[4] for r in xids[1:]] == [_shown(n) for n in HOSTILE_IDS]
    assert [r[5] for r in sanitizer[1:]] == [_shown(n) for n in HOSTILE_IDS]
    assert [r[2] for r in sanitizer[1:]] == [f"k<{_shown(p)}>" for p in HOSTILE_PARAMS]


@pytest.mark.parametrize("value", HOSTILE_PARAMS + ["", "`", "``a``", "trailing\\"])
def test_md_text_and_code_round_trip(value: str) -> None:
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    cells = _parse(parser.render(f"| h |\n|---|\n| {md_text(value) or '-'} |\n"))
    assert cells.tables[0][1] == [_shown(value) or "-"]
    code = _parse(parser.render(f"x {md_code(value.replace(chr(10), ' '))} y"))
    assert "code" in code.tags or value == ""


# --- HTML -----------------------------------------------------------------------------------------

def test_html_ids_are_text_never_markup(tmp_path: Path) -> None:
    html = render(build_model(hostile_run(tmp_path)), "html")
    cells = _parse(html)
    assert cells.tags.count("script") == 1  # the page's own sort script only
    assert "<script>alert(1)" not in html
    tables = {name: rows for name, rows in zip(
        ["tests", "failures", "xids", "sanitizer", "environment"], cells.tables)}
    assert len(tables["failures"]) == len(HOSTILE_IDS) + 1
    # control characters show as their escapes (user defect 19), everything else exactly
    shown = [visible(i) for i in HOSTILE_IDS]
    assert [r[0] for r in tables["tests"][1:]] == shown
    assert [r[0] for r in tables["failures"][1:]] == shown
    assert [r[4] for r in tables["xids"][1:]] == shown
    assert [r[5] for r in tables["sanitizer"][1:]] == shown
    # the timeline's titles carry the ids as text too
    assert "test_p[&lt;script&gt;alert(1)&lt;/script&gt;]: failed</title>" in html


# --- terminal -------------------------------------------------------------------------------------

def _console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(file=io.StringIO(), width=400, record=True, color_system=None, highlight=False)


def test_stress_summary_table_prints_exact_ids(tmp_path: Path) -> None:
    from faulthunt.report.terminal import render_summary

    run = hostile_run(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    console = _console()
    render_summary(summary, run, console)
    text = console.export_text()
    for nodeid in HOSTILE_IDS:
        for part in nodeid.split("\n"):
            assert part in text, part
    assert "test_p[x/y]" in text and "test_p[[bold]]" in text and "test_p[a b]" in text


@pytest.mark.parametrize("width", [80, 60])
def test_a_narrow_terminal_gets_every_id_whole_on_its_line(tmp_path: Path, width: int) -> None:
    """On an 80-column terminal the table folded each id into 11-character pieces (and the
    interval into "20.7%-100.0" over "%"): no id could be read or copied. Too narrow for the table,
    the tests are listed, each id whole on its own line, its figures under it."""
    from rich.console import Console

    from faulthunt.report.terminal import render_summary

    run = hostile_run(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None, highlight=False)
    render_summary(summary, run, console)
    lines = console.export_text().splitlines()
    assert lines[0] == "failing tests:" and "┃" not in "".join(lines)
    for nodeid in ("tests/test_h.py::test_p[x/y]", "tests/test_h.py::test_p[[bold]]",
                   "tests/test_h.py::test_p[a b]", "tests/test_h.py::test_p[new\\nline]"):
        i = lines.index(f"  {nodeid}")
        assert lines[i + 1].startswith("      1 of 1 runs, 100.0% (20.7%-100.0%); failed 1")


def test_sanitizer_table_prints_exact_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    from faulthunt.report import sanitize as san_render

    rows = [(str(i), "memcheck", "Invalid __global__ write", f"k[{p}]", "k.cu:3", "1", "-", "-", "-", n)
            for i, (p, n) in enumerate(zip(HOSTILE_PARAMS, HOSTILE_IDS), 1) if "\n" not in n]
    monkeypatch.setattr(san_render, "table_rows", lambda findings: rows)
    out = io.StringIO()
    san_render.print_table([], out)
    text = out.getvalue()
    for row in rows:
        assert row[3] in text and row[9] in text, row


# --- simulated runs -------------------------------------------------------------------------------

def test_simulated_run_is_labelled_in_markdown(tmp_path: Path) -> None:
    md = render(build_model(simulated_run(tmp_path)), "md")
    assert md.splitlines()[2].startswith("**SIMULATED: ")
    assert "> **SIMULATED run: no GPU" in md
    failures = md.split("## Failures", 1)[1].split("## Xid events", 1)[0]
    rows = [ln for ln in failures.splitlines() if ln.startswith("| tests/")]
    assert rows[0].endswith("x ... [SIMULATED] |")  # the label past the 120-character cut is kept
    assert all("SIMULATED" in ln for ln in rows if not ln.endswith("| - |"))
    xids = md.split("## Xid events", 1)[1].split("## Sanitizer", 1)[0]
    assert "(SIMULATED)" in xids and "simulated kernel log" in xids
    assert json.loads(render(build_model(simulated_run(tmp_path / "j")), "json"))["simulated"]


def test_real_run_is_not_labelled() -> None:
    for run in ("h200_demo_run", "h200_stress_run", "sample_run"):
        m = build_model(DATA / run)
        assert m.simulated is None
        assert "SIMULATED" not in render(m, "md")
