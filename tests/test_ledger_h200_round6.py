"""The ledger's round-6 H200 run (issue 16: ``--ledger auto`` takes driver allocations from the
allocation calls' own callbacks instead of CUPTI's MEMORY2 records), read with today's code.

The capture is what ``scripts/gpu/ledger_breakdown.sh`` and ``ledger_cupti_cost.sh`` wrote
(tests/data/ledger/h200_round6/, PROVENANCE.md there). Checked: every planted fault got its
expected verdict under ``full`` (MEMORY2) and under ``auto`` (callbacks), the probe ledgers
recorded under ``auto`` carry callback allocation lines only and those under ``full`` MEMORY2
lines only, every loop process recorded every launch and allocation, a dying worker's launches
are all in its ledger, and each ratio in summary.txt is the median of the recorded samples.
"""

from __future__ import annotations

import json
import statistics
import tarfile
from pathlib import Path

import pytest

from faulthunt.ledger.reader import load_ledger
from faulthunt.mapper import map_address
from gpuscript import load_gpu_script

D = Path(__file__).parent / "data" / "ledger" / "h200_round6"
pytestmark = pytest.mark.skipif(not (D / "loops.jsonl").is_file(), reason="no round-6 H200 capture")


def _jsonl(name: str) -> list[dict]:
    return [json.loads(x) for x in (D / name).read_text().splitlines() if x.strip()]


def test_every_planted_fault_got_its_verdict_under_full_and_auto() -> None:
    probe = _jsonl("probe.jsonl")
    lean_expect = load_gpu_script("ledger_breakdown").AUTO_EXPECT
    for mode in ("full", "auto"):
        rows = [r for r in probe if r["route"] == mode]
        assert len(rows) == 16
        for r in rows:
            fw, fault = r["case"].rsplit("_", 1) if not r["case"].endswith("past_end") else (r["case"][:-9], "past_end")
            expect = lean_expect.get((fw, fault), r["expect"]) if mode == "auto" else r["expect"]
            assert r["ok"] and r["verdict"] == expect == r["expect"], r


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for f in sorted(path.glob("*.jsonl"))
            for x in f.read_bytes().rstrip(b"\0").decode().splitlines() if x.strip()]


def test_auto_took_allocations_from_the_callbacks_and_full_from_memory2(tmp_path: Path) -> None:
    with tarfile.open(D / "ledgers.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    for mode, via in (("auto", {"callback"}), ("full", {None})):
        for case in ("cuda_core_wild", "numba_wild", "cupy_wild", "torch_wild"):
            allocs = [r for r in _lines(tmp_path / mode / case) if r["event"] in ("alloc", "free")
                      and r.get("source") == "cupti"]
            assert allocs and {r.get("via") for r in allocs} == via, (mode, case)
            # MEMORY2 records name the pool of a stream-ordered allocation; callback lines their API
            assert all(("api" in r) is (mode == "auto") for r in allocs), (mode, case)


def test_the_wild_writes_map_unmapped_from_either_source(tmp_path: Path) -> None:
    with tarfile.open(D / "ledgers.tgz") as tar:
        tar.extractall(tmp_path, filter="data")
    probe = {(r["route"], r["case"]): r for r in _jsonl("probe.jsonl")}
    for mode in ("auto", "full"):
        for case in ("cuda_core_wild", "numba_wild"):
            row = probe[(mode, case)]
            if not row.get("planted"):
                continue
            v = map_address(load_ledger(tmp_path / mode / case), int(row["planted"], 16), pid=row["pid"],
                            at=row["planted_t"])
            assert v.verdict == row["verdict"] == "unmapped"


def test_every_loop_recorded_every_launch_and_allocation() -> None:
    loops = [r for r in _jsonl("loops.jsonl") if r["config"] != "off"]
    assert loops and all(r["rc"] == 0 for r in loops)
    ns = load_gpu_script("ledger_breakdown").NS
    for r in loops:
        want = ns[r["loop"]] * 5 + 1  # five samples and the warm-up
        assert r["stats"]["launches"] == want, r
        if r.get("records"):
            assert r["records"]["launch"] == want and r["records"]["skipped"] == 0
        if r["loop"] != "cupy" and r["config"] == "auto":  # CuPy's pool calls the driver a few times only
            # callback lines: an alloc and a free line an iteration (numba defers its driver frees:
            # the last few were still queued when the stats were read), no activity flush needed
            lines = r["stats"]["memory_records"]
            assert (lines == 2 * want if r["loop"] == "cuda_core" else want < lines <= 2 * want), r
            assert r["stats"]["flushes"] == 0
            assert r["stats"]["alloc_stacks_sampled_out"] > r["stats"]["alloc_stacks"] > 0


def test_a_dying_worker_keeps_every_launch() -> None:
    crash = {(c["route"], c["how"]): c["fill_launches_in_ledger"] for c in json.loads((D / "crash.json").read_text())}
    assert crash == {("native", "abort"): 500, ("native", "SIGKILL"): 500}


def test_the_summary_ratios_are_the_medians_of_the_recorded_samples() -> None:
    loops = _jsonl("loops.jsonl")
    summary = (D / "summary.txt").read_text().splitlines()
    for loop, config in {(r["loop"], r["config"]) for r in loops if r.get("samples")}:
        offs = {(r["round"], i): s for r in loops if r["loop"] == loop and r["config"] == "off"
                for i, s in enumerate(r["samples"])}
        med = statistics.median(s / offs[(r["round"], i)] for r in loops if r["loop"] == loop
                                and r["config"] == config for i, s in enumerate(r["samples"]))
        line = next(x for x in summary if x.split()[:2] == [loop, config])
        assert f"{med:.2f}x" in line
