"""`scripts/gpu/sanitize_intermittent.sh` on the H200, replayed (tests/data/sanitize/h200_intermittent/PROVENANCE.md).

The planted wild write fails 5 of 40 repeat steps under stress; `faulthunt sanitize` reran the
exact failing steps once (found in run 1), until found on 4 processes (found in run 2) and the
base id once (not reproduced). compute-sanitizer's own XML and text outputs of each rerun are
parsed and reduced again here: the headline must be wild_write at planted.cu:26 and read as the
run recorded it; the stress run's summary is rebuilt from its records.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from faulthunt.report import build_model, render
from faulthunt.report.sanitize import render_headline
from faulthunt.rundir import RunDir
from faulthunt.sanitizer.analyse import ruled_out_text
from faulthunt.sanitizer.parse_text import parse_text
from faulthunt.sanitizer.parse_xml import parse_xml
from faulthunt.sanitizer.reduce import headline, reduce_records
from faulthunt.summary import summarize_run

D = Path(__file__).parent / "data" / "sanitize" / "h200_intermittent"
RESULTS = json.loads((D / "results.json").read_text())
STRESS = D / "stress_run"
BASE = "kernels/suite/test_planted.py::test_planted[wild_write-cuda]"


def _doc(rerun: str) -> dict[str, Any]:
    doc = RunDir(D / rerun).sanitizer()
    assert doc is not None
    return doc.to_json()


def _runs_with_records(rerun: str) -> list[dict[str, Any]]:
    return [t for t in _doc(rerun)["tests"] if t["records"]]


@pytest.mark.parametrize(("rerun", "found_in"), [("exact", 1), ("until_found", 2)])
def test_the_sanitizer_records_reparsed_give_wild_write_at_planted_cu_26(rerun: str, found_in: int) -> None:
    doc = _doc(rerun)
    (run,) = _runs_with_records(rerun)
    assert run["run"] == found_in == RESULTS[rerun]["outcome"]["found_in_run"]
    san = D / rerun / "sanitizer"
    from_xml = parse_xml((san / "xml" / f"{found_in:03d}-memcheck.xml").read_text())
    from_text = parse_text((san / "logs" / f"{found_in:03d}-memcheck.log").read_text())
    for records in (from_xml, from_text):
        assert len(records) == 1
        f = headline(reduce_records(records, nodeid=run["nodeid"]))
        assert f is not None
        assert (f.kernel, Path(f.file or "").name, f.line) == ("wild_write", "planted.cu", 26)
        assert f.error == "Invalid __global__ write (out of bounds)"
        assert f.example.address == from_text[0].address
    # the nearest allocation is in the text output only (this XML has no allocation element)
    text_record = from_text[0]
    assert (text_record.alloc_relation, text_record.alloc_size, text_record.alloc_distance) == ("after", 512, 274638831105)
    assert from_xml[0].alloc_relation is None
    headline_text = render_headline(headline(reduce_records(from_text, nodeid=run["nodeid"])))  # type: ignore[arg-type]
    assert headline_text == doc["headline"] == RESULTS[rerun]["headline"]
    # every other run of the rerun was clean: its XML has no record
    for other in (san / "xml").glob("*-memcheck.xml"):
        if other.name != f"{found_in:03d}-memcheck.xml":
            assert parse_xml(other.read_text()) == []


def test_the_single_rerun_is_not_reproduced_never_clean() -> None:
    doc = _doc("single")
    assert doc["records"] == 0 and doc["findings"] == [] and doc["headline"] is None
    assert parse_xml((D / "single" / "sanitizer" / "xml" / "001-memcheck.xml").read_text()) == []
    (outcome,) = doc["outcomes"]
    assert outcome["outcome"] == "not_reproduced" and outcome["nodeid"] == BASE
    assert outcome["text"].startswith(f"not reproduced in 1 run: {ruled_out_text(1)}")
    assert "no sanitizer errors" not in outcome["text"]


def test_the_stress_run_rebuilt_from_its_records_fails_5_of_40_repeat_steps() -> None:
    run = RunDir(STRESS)
    assert run.problems() == ()
    recorded = json.loads((STRESS / "summary.json").read_text())
    rebuilt = summarize_run(run)
    for key in ("by_test", "failures", "outcomes", "tests_run", "xids", "workers", "notes"):
        assert rebuilt[key] == recorded[key], key
    failing = sorted(f["nodeid"] for f in rebuilt["failures"])
    assert failing == sorted(RESULTS["stress"]["failing"]) and len(failing) == 5
    assert all(f["base_nodeid"] == BASE for f in rebuilt["failures"])
    (row,) = [t for t in rebuilt["by_test"] if t["base_nodeid"] == BASE]
    assert (row["failures"], row["runs"]) == (5, 40)


def test_the_parallel_figure_quoted_in_the_docs_is_the_recorded_one() -> None:
    log = (D / "log.txt").read_text()
    assert "---- serial: 8 runs, -n 1: exit 1, 37.0 s" in log
    assert "---- parallel: 8 runs, -n 4: exit 1, 11.9 s" in log
    assert "37.0 s vs 11.9 s: 3.11x" in log and "ALL OK" in log
    assert all(c["ok"] for c in RESULTS["checks"].values()) and len(RESULTS["checks"]) == 5


@pytest.mark.parametrize("rerun", ["exact", "until_found", "single"])
def test_the_report_renders_with_the_sanitize_rerun(rerun: str, tmp_path: Path) -> None:
    """The rerun's run directory as sanitize left it: the stress run with its sanitizer/ folder."""
    run = tmp_path / "run"
    shutil.copytree(STRESS, run)
    shutil.copytree(D / rerun / "sanitizer", run / "sanitizer")
    for fmt in ("md", "json", "html"):
        assert render(build_model(run), fmt)
