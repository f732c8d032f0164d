"""The report of a real `faulthunt demo` run on the H200 (tests/data/report/PROVENANCE.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

from faulthunt.report import build_model, render, write_reports
from faulthunt.report.markdown import _EXAMPLE_FRAMES

RUN = Path(__file__).parent / "data" / "report" / "h200_demo_run"


def test_markdown_names_the_real_findings() -> None:
    md = render(build_model(RUN), "md")
    # the numbers the run itself recorded (summary.json), not values typed here
    assert "14 of 152 runs" in md
    assert "First offending kernel: `read_past_end` at `planted.cu:35`" in md
    assert "0x7f4afbe00000" in md  # the Xid 31 page of test_planted[wild_write-cuda-2-4]
    assert "py-spy dump --native --locals" in md  # the hung test's real native stack


def test_example_record_is_the_printed_record_with_a_short_stack() -> None:
    md = render(build_model(RUN), "md")
    block = md.split("First offending kernel", 1)[1].split("```", 2)[1]
    assert "Access to 0x7f12d6800fa0 is out of bounds" in block
    assert "1 bytes after the nearest allocation at 0x7f12d6800000 of size 4,000 bytes" in block
    frames = [line for line in block.splitlines() if line.startswith("Host Frame")]
    assert 0 < len(frames) <= _EXAMPLE_FRAMES
    assert frames[0] == "Host Frame: run_kernel in cuda_faults.py:142"
    assert "more host frame(s) in sanitizer/sanitizer.log" in block
    assert "{'access'" not in md  # never a Python dict repr


def test_all_formats_write(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    paths = write_reports(run, ("md", "json", "html"))
    assert sorted(p.name for p in paths) == ["report.html", "report.json", "report.md"]
    assert "<svg" in (run / "report.html").read_text()
