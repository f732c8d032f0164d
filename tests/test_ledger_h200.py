"""Mapping against real ledgers and sanitizer findings from the H200 (tests/data/ledger/PROVENANCE.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from faulthunt.ledger.reader import load_ledger
from faulthunt.mapper import map_address, map_run, sanitizer_verdict
from faulthunt.sanitizer import parse_text

DATA = Path(__file__).parent / "data" / "ledger"
OOB1 = DATA / "h200_numba_oob1"
PLANTED = 0x7F84E2800FA0  # 4000 bytes into a 4000-byte array: the first byte past its end
BASE = 0x7F84E2800000


def test_end_of_ledger_is_freed_with_the_allocation():
    L = load_ledger(OOB1)
    v = map_address(L, PLANTED, pid=694)
    assert v.verdict == "freed"
    assert v.allocation["address"] == BASE and v.allocation["size"] == 4000
    assert v.allocation["freed"]["phase"] == "requested"
    assert v.offset == 4000 and "past its end" in (v.note or "")
    assert v.below is not None and v.below["allocation"]["address"] == BASE  # nearest is never empty


def test_at_the_kernel_time_it_is_past_end():
    L = load_ledger(OOB1)
    recs = [json.loads(x) for x in (OOB1 / "694.jsonl").read_text().splitlines()]
    alloc_t = next(r["t"] for r in recs if r["event"] == "alloc")
    v = map_address(L, PLANTED, pid=694, at=alloc_t + 0.5)
    assert v.verdict == "past_end" and v.offset == 4000


def test_page_at_end_of_ledger_is_freed_and_split():
    v = map_address(load_ledger(OOB1), PLANTED, pid=694, page=True)
    assert v.verdict == "freed" and v.offset == (0, 3999)  # the piece inside the freed bytes
    assert [p["verdict"] for p in v.pieces] == ["freed", "freed"]
    assert [p["range"] for p in v.pieces] == [[hex(BASE), hex(BASE + 3999)], [hex(BASE + 4000), hex(BASE + 4095)]]


def test_cli_says_freed(capsys):
    from faulthunt.cli import map as map_cli
    import argparse

    p = argparse.ArgumentParser()
    map_cli.add_arguments(p)
    rc = map_cli.run(p.parse_args([hex(PLANTED), "--ledger", str(OOB1), "--pid", "694", "--json"]))
    out = capsys.readouterr().out
    got = json.loads(out.strip().splitlines()[0])
    assert rc == 0 and got["verdict"] == "freed" and got["allocation"]["address"] == BASE


def test_memcheck_console_address_and_nearest_line():
    recs = parse_text((OOB1 / "memcheck_console.txt").read_text())
    first = recs[0]
    assert first.address == PLANTED
    assert (first.alloc_base, first.alloc_size, first.alloc_relation) == (BASE, 4000, "after")
    v = sanitizer_verdict(first.address, {"base": first.alloc_base, "size": first.alloc_size,
                                          "relation": first.alloc_relation, "distance": first.alloc_distance})
    assert v["verdict"] == "past_end" and v["offset"] == 4000 and v["basis"] == "sanitizer"


def test_map_run_falls_back_to_the_sanitizer_line(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(DATA / "h200_san_oob_write_cuda" / "run", run)
    [e] = map_run(run)
    assert e["origin"] == "sanitizer" and e["verdict"] == "past_end" and e["basis"] == "sanitizer"
    assert e["allocation"]["address"] == 0x7F7812801000 and e["offset"] == 4000
    assert e["ledger_verdict"] == "unmapped"  # the ledger had only notes: CUPTI could not subscribe
    assert e["pid"] == 1499 and "test span" in e["time_basis"]
    assert "not from the ledger" in e["note"]


def test_sanitizer_verdict_malformed_cases():
    assert sanitizer_verdict(10, None) is None
    assert sanitizer_verdict(10, {"base": "x", "size": 4, "relation": "after"}) is None
    assert sanitizer_verdict(10, {"base": 0, "size": 4, "relation": "sideways"}) is None
    bad = sanitizer_verdict(0, {"base": 100, "size": 4, "relation": "after", "distance": 1})
    assert bad["verdict"] is None and "does not fit" in bad["reason"]
    assert sanitizer_verdict(96, {"base": 100, "size": 4, "relation": "before", "distance": 4})["verdict"] == "before_start"


# --- round 3 (2026-12-02 18:43 UTC): ledgers written by the memory-mapped writer and the direct
# CUPTI route (tests/data/ledger/PROVENANCE.md, h200_round3/) ----------------------------------

ROUND3 = DATA / "h200_round3" / "cases"


def _xid31(case: str):
    from faulthunt.kernlog.parse import parse_text as parse_kernlog

    events = [e for e in parse_kernlog((ROUND3 / case / f"{case}.dmesg.txt").read_text()) if e.xid == 31]
    assert len(events) == 1
    return events[0]


def test_round3_cuda_core_async_pool_overrun_is_past_end_from_the_xid_page():
    ev = _xid31("cuda_core_past_end")
    L = load_ledger(ROUND3 / "cuda_core_past_end")
    pl = L.pid(ev.pid)
    assert pl is not None and pl.mono_offset is not None  # from the writer's opening note
    at = ev.ts + pl.mono_offset  # the Xid's kernel-log time on the ledger's clock
    v = map_address(L, ev.mmu.address, pid=ev.pid, at=at, page=True)
    # a 64 MiB allocation from the stream-ordered pool (CUPTI MEMORY2, async), 1 MiB past its end
    assert v.verdict == "past_end" and v.offset == (68157440, 68161535)
    assert v.allocation["source"] == "cupti" and v.allocation["size"] == 64 << 20
    assert v.allocation["stack"]  # the Python stack joined to the MEMORY2 record by correlation id
    assert [k["kernel"] for k in v.launches] == ["poke"]


def test_round3_cupy_wild_write_is_unmapped():
    ev = _xid31("cupy_wild")
    L = load_ledger(ROUND3 / "cupy_wild")
    assert L.skipped == 0
    v = map_address(L, ev.mmu.address, pid=ev.pid, page=True)
    assert v.verdict == "unmapped" and v.below is not None
