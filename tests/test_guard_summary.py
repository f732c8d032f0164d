"""The run says what guard mode did: summary.json's guard section, the terminal lines, the report.

Over the real H200 guard run (tests/data/guard/h200/faults_run, mapped by today's mapper) and
small hand-made ledgers: the guard records are streamed from the ledger (never the whole ledger
as records), the section survives summary.json's typed reader, and each view shows the guard line
and every catch in the guard's own words, escaped.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from faulthunt.ledger import reader as reader_mod
from faulthunt.ledger.reader import iter_guard_records
from faulthunt.mapper import map_run
from faulthunt.records.documents import GuardSummary
from faulthunt.report import html as html_report
from faulthunt.report import markdown as md_report
from faulthunt.report.model import build_model
from faulthunt.report.terminal import SHOWN_CATCHES, guard_lines, summary_lines
from faulthunt.rundir import Layout, RunDir, write_json_atomic
from faulthunt.summary import guard_of_run, summarize_run

H200 = Path(__file__).parent / "data" / "guard" / "h200"
PRINTED = {r["test"]: r for r in json.loads((H200 / "results.json").read_text())["faults"]["rows"]}
CAUGHT = sorted(r["text"] for r in PRINTED.values() if r.get("text"))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(H200 / "faults_run", d)
    map_run(d)  # today's mapping: the guard's verdicts (the recorded one predates the wiring)
    return d


def test_the_guard_section_of_the_h200_run(run: Path) -> None:
    g = guard_of_run(run)
    assert g is not None and g["enabled"]
    assert (g["allocations_seen"], g["allocations_guarded"], g["processes"]) == (10, 10, 5)
    assert g["by_framework"] == {"cupy": 8, "numba": 2}
    assert g["config"]["rate"] == 1 and g["config"]["driver"] == "cuda"
    assert g["caught"] == {"freed": 1, "past_end": 3} and g["not_guardable"] == 0
    assert sorted(c["text"] for c in g["catches"]) == CAUGHT
    for c in g["catches"]:  # the test the Xid was attributed to, and the page
        name = c["nodeid"].split("::")[-1]
        assert PRINTED[name]["text"] == c["text"] and PRINTED[name]["page"] == c["address"]
    # a summary recomputed from the run has it too
    assert summarize_run(run)["guard"] == g


def test_a_run_without_guard_mode_has_no_section(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "report" / "h200_stress_run", run)
    assert RunDir(run).has_ledger()
    assert guard_of_run(run) is None
    assert "guard" not in summarize_run(run)
    assert build_model(run).guard is None
    assert "Guard mode" not in md_report.render(build_model(run))


def test_the_section_reads_back_typed_and_whole(run: Path) -> None:
    summary = summarize_run(run)
    write_json_atomic(run / Layout.SUMMARY, summary)
    doc = RunDir(run).summary()
    assert doc is not None and isinstance(doc.guard, GuardSummary)
    assert doc.guard.caught == {"freed": 1, "past_end": 3}
    assert sorted(c.text for c in doc.guard.catches) == CAUGHT
    summary["guard"]["allocations_guarded"] = "ten"          # damaged: the summary is not trusted
    write_json_atomic(run / Layout.SUMMARY, summary)
    fresh = RunDir(run)
    assert fresh.summary() is None and any("allocations_guarded" in p.why for p in fresh.problems())


def _rec(**kw: Any) -> str:
    return json.dumps({"t": 1.0, **kw}) + "\n"


def test_guard_records_are_streamed_and_nothing_else_is_decoded(tmp_path: Path, monkeypatch: Any) -> None:
    d = tmp_path / "ledger"
    d.mkdir()
    plain = _rec(event="launch", kernel="k", source="cupti") * 3000
    guard_note = _rec(event="note", source="guard", message="guard: 1 in 1",
                      guard_config={"rate": 1, "side": "right"})
    alloc = _rec(event="alloc", source="guard", address=1 << 40, size=4096, kind="device",
                 framework="cupy")
    lying = _rec(event="note", source="cupti", guard={"not": "guard mode's"})
    (d / "41.jsonl").write_text(plain + guard_note + plain + alloc + lying + plain)
    # a dead writer's file: a torn last line and its NUL reserve
    (d / "42.jsonl").write_bytes((guard_note + '{"event": "alloc", "sour').encode() + b"\0" * 5000)
    monkeypatch.setattr(reader_mod, "CHUNK", 4096)  # lines cross chunk boundaries
    decoded = []
    real = reader_mod._ANY.decode
    monkeypatch.setattr(reader_mod, "_ANY", type("D", (), {"decode": lambda self, b: decoded.append(b) or real(b)})())
    got = list(iter_guard_records(d))
    assert [(r["pid"], r["event"]) for r in got] == [(41, "note"), (41, "alloc"), (42, "note")]
    assert len(decoded) == 4  # the three, and the line that only says "guard"


def test_terminal_lines(run: Path) -> None:
    summary = summarize_run(run)
    lines = summary_lines(summary, None)
    head = lines.index(next(x for x in lines if x.startswith("guard: ")))
    assert lines[head] == ("guard: 10 of 10 allocations guarded (1 in 1; cupy 8, numba 2); "
                           "caught 1 freed, 3 past_end")
    assert sorted(x.strip() for x in lines[head + 1:head + 5]) == CAUGHT
    assert guard_lines(None) == [] and guard_lines({"enabled": False}) == []
    many = {**summary["guard"], "catches": summary["guard"]["catches"] * 3,
            "not_guardable": 2}
    out = guard_lines(many)
    assert out[0].endswith("; 2 in the slack, not guardable")
    assert len(out) == 1 + SHOWN_CATCHES + 1 and out[-1] == "  ... and 7 more (mapping.json has them all)"


def test_report_sections_and_escaping(run: Path) -> None:
    model = build_model(run)
    assert model.guard is not None and model.guard["line"].startswith("guard: 10 of 10")
    md = md_report.render(model)
    section = md.split("## Guard mode\n", 1)[1].split("\n## ", 1)[0]
    assert model.guard["line"] in section and "align 256" in section
    assert all(t in section for t in CAUGHT)
    # the Xid table names each allocation in the guard's words too
    assert md.count("past_end: 0-4095 bytes past the end") == 6
    page = html_report.render(model)
    assert 'id="guard-line"' in page and 'id="guard-table"' in page and 'href="#guard"' not in page
    # ids and texts are data
    bad = {**model.guard, "catches": [{"verdict": "past_end", "nodeid": "t.py::test_x[a|b]",
                                       "text": "<script>alert(1)</script> | `x`"}],
           "config": {"rate": 1, "driver": "simulated"}, "not_guardable": 1}
    evil = type(model)(**{**model.__dict__, "guard": bad})
    md = md_report.render(evil)
    assert "<script>" not in md and "t.py::test_x[a\\|b]" in md
    assert "SIMULATED driver" in md and "inside the slack, not guardable" in md
    page = html_report.render(evil)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
