"""The mapper on synthetic ledgers: every verdict, pages, pids, time, reuse, pools, launches.

Ledgers here are constructed (hand-written records), except where a real H200 capture is named.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from faulthunt.errors import InputError, UsageError
from faulthunt.ledger.reader import build_ledger, load_ledger, parse_ledger_text
from faulthunt.mapper import NEAR_BYTES, PAGE_SIZE, map_address, parse_address

DATA = Path(__file__).parent / "data"
MiB = 1 << 20
BASE = 0x7000_0000_0000


def alloc(addr: int, size: int, t: float, pid: int = 7, kind: str = "device", nodeid: str = "t.py::a",
          source: str = "synthetic", **kw: Any) -> dict[str, Any]:
    return {"event": "alloc", "address": addr, "size": size, "t": t, "pid": pid, "kind": kind,
            "nodeid": nodeid, "source": source, **kw}


def free(addr: int, t: float, pid: int = 7, nodeid: str = "t.py::b", **kw: Any) -> dict[str, Any]:
    return {"event": "free", "address": addr, "t": t, "pid": pid, "nodeid": nodeid, "source": "synthetic", **kw}


def launch(kernel: str, t: float, pid: int = 7, nodeid: str = "t.py::c") -> dict[str, Any]:
    return {"event": "launch", "kernel": kernel, "t": t, "pid": pid, "nodeid": nodeid}


STANDARD = [
    alloc(BASE, 4000, 1.0),
    alloc(BASE + 4 * MiB, 8 * MiB, 1.1, kind="segment", source="cupy"),
    alloc(BASE + 4 * MiB, 1024, 1.2, kind="block", source="cupy"),
    alloc(BASE + 4 * MiB + 1024, 1024, 1.3, kind="block", source="cupy"),
    free(BASE + 4 * MiB + 1024, 1.4, kind="block", stack=["t.py:9 in test_b"]),
    alloc(BASE + 64 * MiB, 4096, 1.5),
    free(BASE + 64 * MiB, 1.6),
    launch("k_before_sync", 1.7),
    {"event": "sync", "t": 1.75, "pid": 7, "what": "context"},
    launch("k_after_sync", 1.8),
    launch("k_last", 1.9),
]


@pytest.fixture(scope="module")
def ledger():
    return build_ledger(STANDARD)


# --- one verdict each (byte addresses) ---------------------------------------------------------

@pytest.mark.parametrize("address, verdict, offset, start", [
    (BASE + 16, "inside", 16, BASE),
    (BASE + 3999, "inside", 3999, BASE),
    (BASE + 4000, "past_end", 4000, BASE),
    (BASE + 4000 + MiB, "past_end", 4000 + MiB, BASE),
    (BASE - 8, "before_start", -8, BASE),
    (BASE + 4 * MiB + 10, "inside", 10, BASE + 4 * MiB),
    (BASE + 4 * MiB + 1024 + 5, "freed", 5, BASE + 4 * MiB + 1024),
    (BASE + 4 * MiB + 4096, "pool_slack", 4096, BASE + 4 * MiB),
    (BASE + 64 * MiB + 100, "freed", 100, BASE + 64 * MiB),
    (0x7FFF_0000_0000, "unmapped", None, None),
    (0x20, "null_page", 0x20, None),
])
def test_byte_verdicts(ledger, address, verdict, offset, start):
    v = map_address(ledger, address)
    assert (v.verdict, v.offset) == (verdict, offset)
    if start is None:
        assert v.allocation is None
    else:
        assert v.allocation["address"] == start


def test_freed_names_when_and_by_whom(ledger):
    v = map_address(ledger, BASE + 4 * MiB + 1024 + 5)
    freed = v.allocation["freed"]
    assert freed["t"] == 1.4 and freed["nodeid"] == "t.py::b" and freed["stack"] == ["t.py:9 in test_b"]
    assert v.container["address"] == BASE + 4 * MiB  # still inside its live pool chunk


def test_unmapped_gives_both_neighbours_and_distances(ledger):
    a = BASE + 200 * MiB
    v = map_address(ledger, a)
    assert v.verdict == "unmapped"
    assert v.below["allocation"]["address"] == BASE + 4 * MiB
    assert v.below["distance"] == a - (BASE + 12 * MiB)
    assert v.above is None
    j = v.to_json()
    assert j["nearest"]["below"]["distance"] == a - (BASE + 12 * MiB) and j["nearest"]["above"] is None


def test_reach_boundary_past_end_then_unmapped():
    L = build_ledger([alloc(BASE, 4000, 1.0)])
    assert map_address(L, BASE + 4000 + NEAR_BYTES - 1).verdict == "past_end"
    assert map_address(L, BASE + 4000 + NEAR_BYTES).verdict == "unmapped"
    big = build_ledger([alloc(BASE, 64 * MiB, 1.0)])  # reach grows with the allocation
    assert map_address(big, BASE + 64 * MiB + 32 * MiB).verdict == "past_end"


def test_closer_neighbour_wins_between_two():
    L = build_ledger([alloc(BASE, 4096, 1.0), alloc(BASE + 8192, 4096, 1.0)])
    assert map_address(L, BASE + 4096 + 100).verdict == "past_end"
    v = map_address(L, BASE + 8192 - 100)
    assert (v.verdict, v.offset, v.allocation["address"]) == ("before_start", -100, BASE + 8192)


def test_launches_since_last_sync_and_test_running(ledger):
    v = map_address(ledger, BASE)
    assert [k["kernel"] for k in v.launches] == ["k_after_sync", "k_last"]
    assert v.launches_since == 1.75
    assert v.nodeid == "t.py::c"
    early = map_address(ledger, BASE, at=1.72)
    assert [k["kernel"] for k in early.launches] == ["k_before_sync"]
    assert "no synchronization" in (early.note or "")


# --- time -------------------------------------------------------------------------------------

def test_time_decides_live_or_freed_and_reuse():
    L = build_ledger([
        alloc(BASE, 4096, 1.0, nodeid="t::first"), free(BASE, 2.0, nodeid="t::first"),
        alloc(BASE, 8192, 3.0, nodeid="t::second"),
    ])
    assert map_address(L, BASE + 10, at=1.5).verdict == "inside"
    v = map_address(L, BASE + 10, at=2.5)
    assert v.verdict == "freed" and v.allocation["nodeid"] == "t::first"
    v = map_address(L, BASE + 5000, at=3.5)
    assert v.verdict == "inside" and v.allocation["nodeid"] == "t::second"
    assert map_address(L, BASE + 10, at=0.5).verdict == "unmapped"  # nothing allocated yet
    # --at defaults to the end of the ledger
    assert map_address(L, BASE + 10).at == 3.0


def test_alloc_at_same_address_without_free_closes_the_old_life():
    L = build_ledger([alloc(BASE, 4096, 1.0), alloc(BASE, 100, 2.0)])
    v = map_address(L, BASE + 1000, at=2.5)
    assert v.verdict == "freed" and v.allocation["freed"]["implied"] is True


# --- sources agreeing -------------------------------------------------------------------------

def test_cupti_and_numba_records_merge_and_deferred_free_annotates():
    L = build_ledger([
        alloc(BASE, 4000, 1.0, source="numba", stack=["nb.py:3 in f"]),
        alloc(BASE, 4000, 1.001, source="cupti"),
        free(BASE, 2.0, source="numba", phase="requested"),
        free(BASE, 3.0, source="cupti"),
    ])
    assert L.pids[7].unmatched_frees == 0
    v = map_address(L, BASE + 8, at=2.5)
    assert v.verdict == "freed"
    assert v.allocation["also_recorded_by"] == ["cupti"]
    assert v.allocation["free_completed_t"] == 3.0
    assert v.allocation["stack"] == ["nb.py:3 in f"]


def test_torch_segment_upgrades_cupti_device_alloc_to_pool():
    L = build_ledger([
        alloc(BASE, 2 * MiB, 1.0, source="cupti"),
        alloc(BASE, 2 * MiB, 1.0, source="torch", kind="segment"),
        alloc(BASE, 512, 1.1, source="torch", kind="block"),
    ])
    assert map_address(L, BASE + 4096).verdict == "pool_slack"
    assert map_address(L, BASE + 100).verdict == "inside"


def test_device_alloc_with_blocks_inside_is_a_pool_even_without_segment_kind():
    L = build_ledger([alloc(BASE, 2 * MiB, 1.0, source="cupti"),
                      alloc(BASE, 512, 1.1, source="cupy", kind="block")])
    v = map_address(L, BASE + 4096)
    assert v.verdict == "pool_slack" and v.below["allocation"]["address"] == BASE


# --- pages (Xid 31) ---------------------------------------------------------------------------

def test_page_gives_ranges_never_a_byte():
    L = build_ledger([alloc(BASE, 4000, 1.0)])
    v = map_address(L, BASE + 123, page=True)
    assert v.address == BASE  # the page, not the byte given
    assert v.verdict == "past_end" and v.offset == (4000, 4095)
    assert [(p["verdict"], p["offset"]) for p in v.pieces] == [("inside", [0, 3999]), ("past_end", [4000, 4095])]
    assert v.to_json()["offset"] == [4000, 4095]


def test_page_wholly_unmapped_has_distance_ranges():
    L = build_ledger([alloc(BASE, 4096, 1.0)])
    page = BASE + (1 << 38)
    v = map_address(L, page, page=True)
    assert v.verdict == "unmapped" and v.offset is None
    assert v.below["distance"] == (page - (BASE + 4096), page + PAGE_SIZE - 1 - (BASE + 4096))


def test_page_splits_where_reach_ends():
    L = build_ledger([alloc(BASE, 4000, 1.0)])
    edge = BASE + 4000 + NEAR_BYTES  # first unmapped byte, mid-page
    page = edge - 100 - (edge - 100) % PAGE_SIZE
    v = map_address(L, page + 5, page=True)
    kinds = [(p["verdict"], p["range"]) for p in v.pieces]
    assert kinds[0][0] == "past_end" and kinds[1][0] == "unmapped"
    assert int(kinds[0][1][1], 16) == edge - 1 and int(kinds[1][1][0], 16) == edge


def test_null_page():
    L = build_ledger([alloc(BASE, 4096, 1.0)])
    v = map_address(L, 0x0, page=True)
    assert v.verdict == "null_page" and v.offset == (0, 4095)


# --- pids -------------------------------------------------------------------------------------

def test_pid_selects_the_process_and_unknown_pid_is_a_clear_error():
    L = build_ledger([alloc(BASE, 4096, 1.0, pid=1), alloc(BASE + MiB * 100, 4096, 1.0, pid=2)])
    assert map_address(L, BASE + 5, pid=1).verdict == "inside"
    assert map_address(L, BASE + 5, pid=2).verdict == "unmapped"
    with pytest.raises(InputError, match="no records for pid 3") as err:
        map_address(L, BASE, pid=3)
    # the fix never says "pass --pid" to someone who just did
    assert err.value.fix is not None and err.value.fix.startswith("leave --pid out to try every pid")


def test_without_pid_best_explanation_wins_and_says_so():
    L = build_ledger([alloc(BASE, 4096, 1.0, pid=1), alloc(BASE + MiB * 100, 4096, 1.0, pid=2)])
    v = map_address(L, BASE + MiB * 100 + 8)
    assert v.verdict == "inside" and v.pid == 2 and "no pid given" in v.note


def test_empty_ledger_is_a_clear_error():
    with pytest.raises(InputError, match="empty"):
        map_address(build_ledger([]), BASE)


# --- addresses --------------------------------------------------------------------------------

@pytest.mark.parametrize("text, value", [
    ("0x7f7d_dbe00000", 0x7F7DDBE00000), ("0x7F7DDBE00000", 0x7F7DDBE00000),
    ("140178412601344", 140178412601344), (" 0x10 ", 16), ("1_000", 1000),
])
def test_parse_address_forms(text, value):
    assert parse_address(text) == value


@pytest.mark.parametrize("bad", ["", "0x", "7f7ddbe00000", "-5", "0xZZ", "12.5", "0x_", "page"])
def test_parse_address_rejects_with_fix(bad):
    with pytest.raises(UsageError) as exc:
        parse_address(bad)
    assert exc.value.fix


# --- reading ----------------------------------------------------------------------------------

MALFORMED = [
    ('{"event": "alloc", "address": 1, "t": 1}', "size"),
    ('{"event": "alloc", "address": -1, "size": 1, "t": 1}', "address"),
    ('{"event": "alloc", "address": "0x10", "size": 1, "t": 1}', "address"),
    ('{"event": "alloc", "address": 65536, "size": 1, "t": "x"}', "t"),
    ('{"event": "alloc", "address": 65536, "size": 1, "t": 1, "kind": "weird"}', "kind"),
    ('{"event": "boom", "t": 1}', "event"),
    ('{"event": "launch", "t": 1}', "kernel"),
    ('[1, 2]', None),
    ('\x00\x01binary junk', None),
    ('{"event": "alloc", "address": 65536, "si', None),
]


@pytest.mark.parametrize("line, why", MALFORMED)
def test_malformed_lines_are_skipped_and_counted(line, why):
    good = json.dumps(alloc(BASE, 4096, 1.0))
    L = parse_ledger_text(good + "\n" + line + "\n" + good.replace("1.0", "2.0") + "\n")
    assert L.skipped == 1
    if why:
        assert any(why in p for p in L.problems)
    assert map_address(L, BASE + 1).verdict == "inside"


def test_pid_from_file_name(tmp_path):
    (tmp_path / "4242.jsonl").write_text(json.dumps({"event": "alloc", "address": BASE, "size": 64, "t": 1.0}) + "\n")
    L = load_ledger(tmp_path)
    assert map_address(L, BASE + 1, pid=4242).verdict == "inside"


def test_missing_ledger_file_is_input_error(tmp_path):
    with pytest.raises(InputError) as exc:
        load_ledger(tmp_path / "nope.jsonl")
    assert exc.value.fix


# --- real capture: the H200's Xid 31 lines against ledgers built from the program's own output ---

def _xid_page(line: str) -> tuple[int, int]:
    import re
    m = re.search(r"pid=(\d+).*faulted @ (0x[0-9a-f_]+)", line)
    assert m
    return int(m.group(1)), parse_address(m.group(2))


def test_h200_wild_and_uaf_xids():
    """tests/data/h200 (PROVENANCE.md): faults wild / uaf; the ledgers are constructed from the
    addresses the program printed (plain_wild.txt, plain_uaf.txt), not recorded by CUPTI."""
    lines = (DATA / "h200" / "nvrm_lines.txt").read_text().splitlines()
    wild = next(ln for ln in lines if "pid=543," in ln and " 31," in ln)
    uaf = next(ln for ln in lines if "pid=583," in ln and " 31," in ln)
    pid, page = _xid_page(wild)
    L = build_ledger([alloc(0x7F6FE7E00000, 4000, 1.0, pid=543), launch("wild_write", 1.1, pid=543)])
    v = map_address(L, page, pid=pid, page=True)
    assert v.verdict == "unmapped" and v.below["distance"][0] == 0x7FAFE7E00000 - (0x7F6FE7E00000 + 4000)
    assert [k["kernel"] for k in v.launches] == ["wild_write"]
    pid, page = _xid_page(uaf)
    L = build_ledger([alloc(0x7FE33DE00000, 4000, 1.0, pid=583), free(0x7FE33DE00000, 1.1, pid=583),
                      launch("scale", 1.2, pid=583)])
    v = map_address(L, page, pid=pid, page=True)
    assert v.verdict == "freed" and v.offset == (0, 3999)


# --- property: the index agrees with a linear scan -------------------------------------------

def linear(records: list[dict[str, Any]], a: int, at: float) -> tuple[str, int | None]:
    """The obvious O(n) answer for device-level ledgers: live containing, else freed containing."""
    lives: dict[int, list[list[Any]]] = {}
    order = sorted(records, key=lambda r: r["t"])
    current: dict[int, list[Any]] = {}
    for r in order:
        if r["event"] == "alloc":
            if r["address"] in current:
                current[r["address"]][3] = r["t"]
            life = [r["address"], r["size"], r["t"], None]
            current[r["address"]] = life
            lives.setdefault(r["address"], []).append(life)
        elif r["event"] == "free" and r["address"] in current:
            current.pop(r["address"])[3] = r["t"]
    live = [lf for ls in lives.values() for lf in ls
            if lf[0] <= a < lf[0] + lf[1] and lf[2] <= at and (lf[3] is None or lf[3] > at)]
    if live:
        return "inside", min(live, key=lambda lf: lf[1])[0]
    freed = [lf for ls in lives.values() for lf in ls
             if lf[0] <= a < lf[0] + lf[1] and lf[3] is not None and lf[3] <= at]
    if freed:
        return "freed", max(freed, key=lambda lf: lf[3])[0]
    # Not in any allocation: the nearest within reach (every one is, here) names it, live ones
    # first on ties; a freed one (the newest life begun by `at` at its start) gives "freed".
    newest = {}
    for start, ls in lives.items():
        begun = [lf for lf in ls if lf[2] <= at]
        if begun:
            newest[start] = begun[-1]
    cands = []
    for lf in newest.values():
        end = lf[0] + lf[1]
        is_live = lf[3] is None or lf[3] > at
        if end <= a:
            cands.append((a - end, 0 if is_live else 2, lf))
        elif lf[0] > a:
            cands.append((lf[0] - a, 1 if is_live else 3, lf))
    if cands:
        # equal distance below: the allocation starting higher (the index's nearest-below rule)
        _d, rank, lf = min(cands, key=lambda c: (c[0], c[1], -c[2][0]))
        if rank >= 2:
            return "freed", lf[0]
    return "other", None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 15), st.integers(1, 5), st.booleans()), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(0, 20 * 4096), st.floats(0, 40)), min_size=1, max_size=10))
@example(ops=[(9, 2, True), (10, 1, True)], queries=[(45056, 3.0)])  # two freed ends tie below
def test_index_matches_linear_scan(ops, queries):
    records = []
    t = 0.0
    for slot, pages, do_free in ops:
        t += 1
        addr = BASE + slot * 4096
        records.append(alloc(addr, pages * 4096 if slot % 2 else 4096, t))
        if do_free:
            t += 0.5
            records.append(free(addr, t))
    # allocations at one start may overlap others: keep only non-overlapping ones at each time,
    # which is what a real driver hands out, by spacing sizes to one page for even slots
    L = build_ledger(records)
    for off, at in queries:
        a = BASE + off
        want = linear(records, a, at)
        v = map_address(L, a, at=at)
        got = (v.verdict, v.allocation["address"]) if v.verdict in ("inside", "freed") else ("other", None)
        if want[0] == "inside":
            assert got[0] == "inside"
        else:
            assert got == want


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 1 << 40), st.integers(1, 3 * MiB))
def test_page_pieces_cover_the_page_and_agree_with_bytes(page_hint, size):
    rng = random.Random(page_hint)
    L = build_ledger([alloc(BASE, size, 1.0), alloc(BASE + 8 * MiB, 4096, 1.0),
                      free(BASE + 8 * MiB, 1.5)])
    page = BASE + rng.randrange(0, 16 * MiB)
    v = map_address(L, page, page=True)
    lo = page - page % PAGE_SIZE
    ranges = [(int(p["range"][0], 16), int(p["range"][1], 16)) for p in v.pieces]
    assert ranges[0][0] == lo and ranges[-1][1] == lo + PAGE_SIZE - 1
    assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:]))
    for (s, e), p in zip(ranges, v.pieces):
        for byte in (s, e):
            assert map_address(L, byte).verdict == p["verdict"]


@pytest.mark.parametrize("line, why", MALFORMED + [("", None), ("   ", None)])
def test_file_reader_fast_path_and_fallback_agree(tmp_path, line, why):
    good = json.dumps(alloc(BASE, 4096, 1.0))
    text = good + "\n" + line + "\n" + good.replace("1.0", "2.0") + "\n"
    (tmp_path / "7.jsonl").write_text(text)
    from_file = load_ledger(tmp_path)
    from_text = parse_ledger_text(text)
    assert (from_file.records, from_file.skipped) == (from_text.records, from_text.skipped)
    assert map_address(from_file, BASE + 1).verdict == "inside"


def test_sanitizer_basis_wild_write_is_unmapped_not_past_end() -> None:
    # Real H200 memcheck line of the planted wild write (validate run, 2026-12-02): compute-sanitizer
    # named a 512-byte allocation 274,571,722,241 bytes below as "nearest"; that is a wild access.
    from faulthunt.mapper import sanitizer_verdict

    nearest = {"base": 140118924984320, "distance": 274571722241, "relation": "after", "size": 512}
    v = sanitizer_verdict(140393496707072, nearest)
    assert v is not None and v["verdict"] == "unmapped" and v["allocation"] is None
    assert v["nearest"]["below"]["distance"] == 274571722241 and v["basis"] == "sanitizer"
    # one byte past a 4000-byte allocation (the planted off-by-one): past_end, offset 4000
    near = {"base": 0x7F592A801000, "distance": 1, "relation": "after", "size": 4000}
    v = sanitizer_verdict(0x7F592A801FA0, near)
    assert v is not None and v["verdict"] == "past_end" and v["offset"] == 4000
