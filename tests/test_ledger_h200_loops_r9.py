"""Round 9's H200 measurement of the three allocation loops under ``--ledger auto``
(tests/data/ledger/h200_loops_r9/, PROVENANCE.md in tests/data/ledger/): every process ran, and
each ratio in cost.txt is what ``scripts/gpu/ledger_cupti_cost.py`` computes from the recorded
samples (the median of 20 paired ratios against the ledger off)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscript import load_gpu_script

D = Path(__file__).parent / "data" / "ledger" / "h200_loops_r9"
pytestmark = pytest.mark.skipif(not (D / "cost.jsonl").is_file(), reason="no round-9 loops capture")
LOOPS = ("cuda_core", "cupy", "numba")


def _rows() -> list[dict]:
    return [json.loads(x) for x in (D / "cost.jsonl").read_text().splitlines() if x.strip()]


def test_every_loop_process_ran_four_rounds_of_five_samples() -> None:
    rows = _rows()
    assert {(r["loop"], r["variant"]) for r in rows} == {(lp, v) for lp in LOOPS for v in ("off", "auto")}
    assert all(r["rc"] == 0 and len(r["samples"]) == 5 and len(r["cpu"]) == 5 for r in rows)
    assert sorted({r["round"] for r in rows}) == [0, 1, 2, 3]
    assert {r.get("route") for r in rows if r["variant"] == "auto"} == {"native"}


def test_the_table_is_computed_from_the_samples() -> None:
    cost = load_gpu_script("ledger_cupti_cost")
    rows = _rows()
    table = (D / "cost.txt").read_text().splitlines()
    assert len(table) == 1 + 2 * len(LOOPS)
    for line in table[1:]:
        loop, variant = line.split()[:2]
        wall, cpu = (x.strip() for x in line.split("|"))
        assert wall.endswith(cost._summary(rows, loop, variant, "samples").strip())
        assert cpu == cost._summary(rows, loop, variant, "cpu").strip()
    auto = {line.split()[0]: line.split()[2] for line in table[1:] if line.split()[1] == "auto"}
    assert auto == {"cuda_core": "1.40x", "cupy": "1.08x", "numba": "1.03x"}
