"""Round 8's H200 measurement of cuda.core's pool loop under the ledger
(tests/data/ledger/h200_cuda_core_r8/, PROVENANCE.md in tests/data/ledger/): every process ran,
and each ratio in cost.txt is what ``scripts/gpu/ledger_cupti_cost.py`` computes from the recorded
samples (the median of 15 paired ratios against the ledger off), so the table can be trusted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscript import load_gpu_script

D = Path(__file__).parent / "data" / "ledger" / "h200_cuda_core_r8"
pytestmark = pytest.mark.skipif(not (D / "cost.jsonl").is_file(), reason="no round-8 cuda.core capture")


def test_every_loop_process_ran_three_rounds_of_five_samples() -> None:
    rows = [json.loads(x) for x in (D / "cost.jsonl").read_text().splitlines() if x.strip()]
    assert {r["variant"] for r in rows} == {"off", "auto", "cb", "cb_noop", "cb_nowrite", "cb_nolaunch",
                                           "cb_launch", "bare"}
    assert all(r["rc"] == 0 and r["loop"] == "cuda_core" and len(r["samples"]) == 5 for r in rows)
    assert sorted({r["round"] for r in rows}) == [0, 1, 2]
    assert {r.get("route") for r in rows if r["variant"] == "auto"} == {"native"}


def test_the_table_is_computed_from_the_samples() -> None:
    cost = load_gpu_script("ledger_cupti_cost")
    rows = [json.loads(x) for x in (D / "cost.jsonl").read_text().splitlines() if x.strip()]
    table = (D / "cost.txt").read_text().splitlines()
    for line in table[1:]:
        variant = line.split()[1]
        wall, cpu = (x.strip() for x in line.split("|"))
        assert wall.endswith(cost._summary(rows, "cuda_core", variant, "samples").strip())
        assert cpu == cost._summary(rows, "cuda_core", variant, "cpu").strip()
    assert any(line.startswith("cuda_core auto") and " 1.20x " in line for line in table)
