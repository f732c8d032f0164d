"""Guard mode's H200 round-3 run replayed through today's code (tests/data/guard/h200_round3/PROVENANCE.md).

The faults run and both planted runs (align 256 and 16) are mapped again from their own ledgers
and Xid lines (`map_run` on a copy, the recorded mapping.json removed first); the validation's own
judge (`scripts/gpu/guard_validate.py`) over the remapped runs must give every recorded row, and
summary.json's guard section recomputed from the ledger must be the recorded one. The overhead
and loop figures quoted in docs/guard.md must be those of results.json.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from gpuscript import load_gpu_script

from faulthunt.mapper import map_run
from faulthunt.report import build_model, render
from faulthunt.rundir import RunDir
from faulthunt.summary import guard_of_run

D = Path(__file__).parent / "data" / "guard" / "h200_round3"
RESULTS = json.loads((D / "results.json").read_text())
RUNS = {"faults": D / "faults_run", "planted_256": D / "planted" / "planted_256",
        "planted_16": D / "planted" / "planted_16"}


def _validator() -> ModuleType:
    return load_gpu_script("guard_validate")


def _remapped(stage: str, tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    run = tmp_path / stage
    shutil.copytree(RUNS[stage], run)
    (run / "mapping.json").unlink()
    return run, map_run(run)


def _judge(v: ModuleType, stage: str, run: Path) -> list[dict[str, Any]]:
    """The rows guard_validate.py's stage gives for a run directory (stage_faults/stage_planted)."""
    if stage == "faults":
        return v.judge_run(run, v.FAULTS, v.TWINS) + v.run_rows(run, [*v.FAULTS, *v.TWINS], {"past_end": 3, "freed": 1})
    idx = 0 if stage == "planted_256" else 1
    want = {c: w[idx] for c, w in v.PLANTED.items()}
    faults = {f"test_planted[{c}]": (w, 0) for c, w in want.items() if w != "slack"}
    slack = tuple(f"test_planted[{c}]" for c, w in want.items() if w == "slack")
    twins = tuple(f"test_twin[{c}]" for c in v.PLANTED)
    caught = dict(Counter(w for w, _ in faults.values()))
    return v.judge_run(run, faults, twins, slack) + v.run_rows(run, v.suite_ids("cuda", v.PLANTED), caught)


@pytest.mark.parametrize("stage", list(RUNS))
def test_the_mapping_rederived_from_the_ledger_is_the_recorded_one(stage: str, tmp_path: Path) -> None:
    assert RunDir(RUNS[stage]).problems() == ()
    _, entries = _remapped(stage, tmp_path)
    recorded = json.loads((RUNS[stage] / "mapping.json").read_text())
    assert entries == recorded
    faults = [r for r in RESULTS[stage]["rows"] if r.get("xid31")]
    assert sorted((e["verdict"], e["text"]) for e in entries) == sorted((r["verdict"], r["text"]) for r in faults)


@pytest.mark.parametrize("stage", list(RUNS))
def test_the_validation_judge_gives_the_recorded_rows(stage: str, tmp_path: Path) -> None:
    v = _validator()
    run, _ = _remapped(stage, tmp_path)
    rows = _judge(v, stage, run)
    recorded = RESULTS[stage]["rows"]
    assert rows == recorded
    assert all(r["ok"] for r in rows)


def test_align_16_catches_the_overruns_that_align_256_leaves_in_the_slack() -> None:
    rows = {s: {r["test"]: r for r in RESULTS[s]["rows"]} for s in ("planted_256", "planted_16")}
    for case in ("oob_write-cuda", "oob_write-numba", "oob_read-cuda", "oob_read-numba"):
        at256, at16 = rows["planted_256"][f"test_planted[{case}]"], rows["planted_16"][f"test_planted[{case}]"]
        assert at256["want"] == "slack" and at256["xids"] == 0
        assert all("in the 96 bytes its 256-byte alignment leaves before the guard" in t
                   for t in at256["planted_verdicts"])
        assert at16["verdict"] == "past_end" and at16["xid31"] == 1
        assert at16["text"].startswith("past_end: 0-4095 bytes past the end of the 4000-byte ")
    for stage in ("planted_256", "planted_16"):
        assert rows[stage]["test_planted[use_after_free-cuda]"]["verdict"] == "freed"


@pytest.mark.parametrize("stage", list(RUNS))
def test_the_guard_section_recomputed_from_the_ledger_is_the_recorded_one(stage: str) -> None:
    recorded = json.loads((RUNS[stage] / "summary.json").read_text())["guard"]
    assert guard_of_run(RUNS[stage]) == recorded
    want = {"faults": {"past_end": 3, "freed": 1}, "planted_256": {"freed": 1},
            "planted_16": {"past_end": 4, "freed": 1}}
    assert recorded["caught"] == want[stage]


def test_the_overhead_and_loop_figures_quoted_in_the_docs_are_the_recorded_ones() -> None:
    samples = {s["spec"]: s for s in RESULTS["overhead"]["samples"]}
    assert all(s["rc"] == 0 and s["tests_run"] == 19 for s in samples.values())
    ratios = {spec: (round(samples[spec]["wall_s"] / samples["off"]["wall_s"], 2),
                     round(samples[spec]["tests_s"] / samples["off"]["tests_s"], 2)) for spec in ("1", "default")}
    assert ratios == {"1": (1.03, 0.99), "default": (1.05, 0.98)}
    assert (samples["1"]["guarded"], samples["default"]["guarded"], samples["default"]["seen"]) == (31, 1, 31)
    loops = {(r["framework"], r["spec"]): r["seconds"] for r in RESULTS["loops"]}
    got = {k: round(s / loops[(k[0], "off")], 2) for k, s in loops.items() if k[1] != "off"}
    assert got == {("cupy", "1"): 32.80, ("cupy", "100"): 1.40, ("numba", "1"): 6.96, ("numba", "100"): 1.36}
    log = (D / "log.txt").read_text()
    assert all(x in log for x in ("x32.80", "x1.40", "x6.96", "x1.36", "(x1.03)", "(x1.05)", "(x0.99)", "(x0.98)"))
    assert "ALL OK in 102.3 s" in log


@pytest.mark.parametrize("stage", list(RUNS))
def test_the_report_renders(stage: str) -> None:
    for fmt in ("md", "json", "html"):
        assert render(build_model(RUNS[stage]), fmt)
