"""The ledger routes' H200 run (round 4) read with today's code (tests/data/ledger/PROVENANCE.md).

The wild-write ledgers were written on the H200 by each route (`native`, `native-activity`,
`activity`; the compiled ones with nanosecond times as `...e-9` numbers). Read through the ledger
reader and mapped at the Xid's time, each must give the verdict, the launches and the estimated
launches the run recorded in probe.jsonl; the figures quoted in docs/ledger.md must be the medians
of the recorded samples.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from faulthunt.ledger.reader import load_ledger, read_ledger_file
from faulthunt.mapper import map_address

D = Path(__file__).parent / "data" / "ledger" / "h200_round4"
PROBE = [json.loads(line) for line in (D / "probe.jsonl").read_text().splitlines()]
LOOPS = [json.loads(line) for line in (D / "loops.jsonl").read_text().splitlines()]
LEDGERS = sorted((D / "ledgers").glob("*/*/*.jsonl"))
WILD = 1 << 38  # the planted index, 2**36 floats: 256 GiB past the array's start


def _row(path: Path) -> dict:
    route, case = path.parent.parent.name, path.parent.name
    (row,) = [r for r in PROBE if r["route"] == route and r["case"] == case]
    assert row["pid"] == int(path.stem)
    return row


def test_every_route_got_every_verdict() -> None:
    assert len(PROBE) == 30 and all(r["ok"] and r["verdict"] == r["expect"] for r in PROBE)
    per_route = {r: sum(1 for p in PROBE if p["route"] == r) for r in ("native", "native-activity", "activity")}
    assert per_route == {"native": 16, "native-activity": 11, "activity": 3}
    assert "verdicts: 30 of 30 as expected" in (D / "summary.txt").read_text()
    assert "auto route: native" in (D / "identity.txt").read_text()
    assert len(LEDGERS) == 10


@pytest.mark.parametrize("path", LEDGERS, ids=lambda p: f"{p.parent.parent.name}-{p.parent.name}")
def test_the_xid_page_maps_as_recorded(path: Path) -> None:
    row = _row(path)
    ledger = load_ledger(path.parent)
    assert ledger.skipped == 0 and ledger.torn_files == ()
    pid = row["pid"]
    pl = ledger.pid(pid)
    assert pl is not None and pl.mono_offset is not None
    at = row["xid_ts"] + pl.mono_offset  # the kernel log's clock on the ledger's
    assert at == pytest.approx(row["at"], abs=1e-6)
    page = int(row["xid_page"], 16)
    assert page == int(row["planted"], 16) & ~0xFFF
    v = map_address(ledger, page, pid=pid, at=at, page=True)
    assert v.verdict == row["verdict"] == "unmapped"
    assert map_address(ledger, page, pid=pid, page=True).verdict == row["verdict_at_end"]
    assert [x.get("kernel") for x in v.launches] == row["launch_kernels"]
    assert [r.get("kernel") for r in pl.launches if r.get("t_estimated")] == row["estimated_launches"]


@pytest.mark.parametrize("path", LEDGERS, ids=lambda p: f"{p.parent.parent.name}-{p.parent.name}")
def test_the_ledger_names_its_route_and_holds_the_array_the_write_indexed_from(path: Path) -> None:
    route, row = path.parent.parent.name, _row(path)
    records = read_ledger_file(path).records
    notes = [r["message"] for r in records if r["event"] == "note"]
    assert any(n.startswith(f"ledger route: {route} (") for n in notes)
    base = int(row["planted"], 16) - WILD
    assert any(r["event"] == "alloc" and r["address"] == base and r["size"] == 64 << 20 for r in records)
    # the faulting launch: a callback line on `native`, a kernel record with an estimated time on
    # the activity routes (the fault zeroed its start and end)
    kernels = [r for r in records if r["event"] == "launch"]
    assert kernels and all(("via" in r) == route.endswith("activity") for r in kernels)


def _median_ratio(loop: str, config: str) -> float:
    offs = {(r["round"], i): s for r in LOOPS if r["loop"] == loop and r["config"] == "off"
            for i, s in enumerate(r["samples"])}
    return statistics.median(s / offs[(r["round"], i)] for r in LOOPS if r["loop"] == loop and r["config"] == config
                             for i, s in enumerate(r["samples"]))


@pytest.mark.parametrize(("loop", "config", "ratio"), [
    ("cupy", "current", 3.93), ("cupy", "native", 1.58), ("cupy", "native-activity", 2.19),
    ("cupy", "native/cupti", 0.96), ("cupy", "hook_noop", 1.17), ("numba", "current", 2.75),
    ("numba", "native", 2.14), ("numba", "native-activity", 1.88), ("numba", "native/cupti", 1.63),
    ("cuda_core", "current", 8.59), ("cuda_core", "native", 2.10), ("cuda_core", "native-activity", 2.03),
])
def test_the_quoted_ratios_are_the_medians_of_the_recorded_samples(loop: str, config: str, ratio: float) -> None:
    assert round(_median_ratio(loop, config), 2) == ratio
    line = next(x for x in (D / "summary.txt").read_text().splitlines() if x.split()[:2] == [loop, config])
    assert f"{ratio:.2f}x" in line


def test_every_loop_process_recorded_every_launch_and_the_crashes_are_as_recorded() -> None:
    on = [r for r in LOOPS if r.get("records")]
    assert on and all(r["rc"] == 0 and r["records"]["launch"] == 9001 and r["records"]["skipped"] == 0 for r in on)
    crash = {(c["route"], c["how"]): c["fill_launches_in_ledger"] for c in json.loads((D / "crash.json").read_text())}
    assert crash == {("native", "abort"): 500, ("native-activity", "abort"): 500,
                     ("native-activity", "SIGKILL"): 0, ("activity", "abort"): 0, ("python", "abort"): 500}
