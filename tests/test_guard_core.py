"""Guard mode's pure core and its allocator over the fake driver (no GPU).

What runs here: slot layout, sampling and reseeding, quarantine bounds, spec parsing, exact
verdicts (table-driven and property-based), the allocator driving FakeVmmDriver (whose touch()
raises where the GPU would raise an Xid 31), and the records it writes read back by a real
LedgerWriter/reader round trip. What does not: the CUDA driver itself (scripts/gpu/guard_validate.sh).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.errors import UsageError
from faulthunt.guard import GuardConfig, guard_verdict, parse_spec, summarize_guard
from faulthunt.guard.allocator import GuardAllocator
from faulthunt.guard.config import DEFAULT_RATE
from faulthunt.guard.fake import FakeFault, FakeVmmDriver
from faulthunt.guard.layout import plan_slot
from faulthunt.guard.sampling import Quarantine, Sampler
from faulthunt.guard.summary import guard_line
from faulthunt.guard.verdict import GuardIndex
from faulthunt.ledger.writer import LedgerWriter
from faulthunt.rundir import read_jsonl

G = 2 << 20


class ListSink:
    """Records as dicts with increasing times (a LedgerWriter's shape, in memory)."""

    alloc_stacks = False

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.t = 100.0

    def record(self, event: str, source: str, *, nodeid=None, **fields):
        self.t += 1.0
        rec = {"event": event, "t": self.t, "pid": 1, "nodeid": nodeid,
               "source": source, **{k: v for k, v in fields.items() if v is not None}}
        self.records.append(json.loads(json.dumps(rec)))
        return rec


def make(spec: str = "1", **kw) -> tuple[GuardAllocator, FakeVmmDriver, ListSink]:
    drv, sink = FakeVmmDriver(), ListSink()
    return GuardAllocator(parse_spec(spec), drv, sink, **kw), drv, sink


# --- layout ------------------------------------------------------------------------------------

@pytest.mark.parametrize("size,align,side,slack,data_offset,mapped,reserve", [
    (4000, 256, "right", 96, G - 4096, G, 2 * G),       # the H200 proof: 96 bytes of slack
    (4096, 256, "right", 0, G - 4096, G, 2 * G),        # a multiple of the alignment: none
    (4000, 16, "right", 0, G - 4000, G, 2 * G),
    (1, 256, "right", 255, G - 256, G, 2 * G),
    (G, 256, "right", 0, 0, G, 2 * G),
    (G + 1, 256, "right", 255, 2 * G - (G + 256), 2 * G, 3 * G),
    (4000, 256, "left", 0, G, G, 2 * G),
])
def test_plan_slot(size, align, side, slack, data_offset, mapped, reserve):
    lay = plan_slot(size, G, align, side)
    assert (lay.slack, lay.data_offset, lay.mapped_size, lay.reserve) == (slack, data_offset, mapped, reserve)
    if side == "right":
        assert lay.data_end + lay.slack == lay.guard_offset == lay.mapped_offset + lay.mapped_size
    else:
        assert lay.guard_offset + lay.guard_size == lay.data_offset == lay.mapped_offset


@given(st.integers(1, 64 << 20), st.sampled_from([1, 16, 256, 4096]), st.sampled_from(["right", "left"]))
def test_plan_slot_properties(size, align, side):
    lay = plan_slot(size, G, align, side)
    assert lay.data_offset % align == 0
    assert lay.mapped_offset <= lay.data_offset and lay.data_end <= lay.mapped_offset + lay.mapped_size
    assert lay.mapped_size % G == 0 and lay.reserve == lay.mapped_size + G
    assert lay.mapped_size < size + align + G  # never more than one granule past what is needed
    if side == "right":
        assert 0 <= lay.slack < align and lay.guard_offset == lay.data_end + lay.slack
    else:
        assert lay.guard_offset + G == lay.data_offset


@pytest.mark.parametrize("args", [(0, G, 256, "right"), (10, 1000, 256, "right"),
                                  (10, G, 3, "right"), (10, G, 256, "up")])
def test_plan_slot_rejects(args):
    with pytest.raises(ValueError):
        plan_slot(*args)


# --- sampling and quarantine -------------------------------------------------------------------

def test_rate_one_samples_everything():
    s = Sampler(1, 5)
    assert all(s.sample() for _ in range(1000))


def test_sampler_mean_and_determinism():
    s = Sampler(100, 7)
    s.reseed("t[1-50]")
    picks = [i for i in range(200_000) if s.sample()]
    assert 1800 < len(picks) < 2200  # mean gap 100 (a uniform gap from [1, 199])
    s.reseed("t[1-50]")
    again = [i for i in range(200_000) if s.sample()]
    assert picks == again
    s.reseed("t[2-50]")
    other = [i for i in range(200_000) if s.sample()]
    assert other != picks  # another repetition samples other allocations
    s2 = Sampler(100, 8)
    s2.reseed("t[1-50]")
    assert [i for i in range(200_000) if s2.sample()] != picks  # another run seed, another draw


def test_quarantine_bounds_oldest_first():
    q: Quarantine[str] = Quarantine(max_slots=2, max_bytes=10)
    assert q.add("a", 4) == [] and q.add("b", 4) == []
    assert q.add("c", 4) == ["a"]          # count bound
    assert q.add("d", 9) == ["b", "c"]     # byte bound
    assert q.add("e", 11) == ["d", "e"]    # too big to keep at all
    assert len(q) == 0 and q.bytes == 0
    q.add("f", 1)
    assert q.drain() == ["f"]
    assert Quarantine(0, 100).add("x", 1) == ["x"]


# --- spec --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,want", [
    ("1", GuardConfig(rate=1)),
    (" 100 , side=left ", GuardConfig(rate=100, side="left")),
    ("5,align=16,max_bytes=4G,quarantine-bytes=1M,quarantine_slots=0,seed=3,only=cupy+numba",
     GuardConfig(rate=5, align=16, max_bytes=4 << 30, quarantine_bytes=1 << 20, quarantine_slots=0,
                 seed=3, only=("cupy", "numba"))),
])
def test_parse_spec(text, want):
    assert parse_spec(text) == want
    assert parse_spec(want.to_spec()) == want


@pytest.mark.parametrize("text", ["", "off", "0", " none "])
def test_parse_spec_off(text):
    assert parse_spec(text) is None


@pytest.mark.parametrize("text,says", [
    ("-3", ">= 1"), ("x", "not an integer"), ("side=left", "no RATE"), ("1,side=up", "side"),
    ("1,align=24", "power of two"), ("1,max_bytes=lots", "not a size"), ("1,colour=red", "settings"),
    ("1,only=jax", "unknown framework"), ("1,align", "settings"),
])
def test_parse_spec_errors_say_the_fix(text, says):
    with pytest.raises(UsageError) as e:
        parse_spec(text)
    assert says in str(e.value) and e.value.fix


def test_default_rate_bounds_memory_by_construction():
    cfg = GuardConfig()
    assert cfg.rate == DEFAULT_RATE >= 100
    assert cfg.max_bytes <= 1 << 30  # at most 512 live 2 MiB granules per process


# --- the allocator over the fake driver --------------------------------------------------------

def test_overrun_faults_at_the_guard_and_the_verdict_names_it():
    guard, drv, sink = make("1")
    slot = guard.allocate(4096, "cupy")
    a = slot.address
    drv.touch(a, 4096)                        # the whole buffer is usable
    with pytest.raises(FakeFault) as f:
        drv.touch(a + 4096, 4)                # one element past: the guard granule
    v = guard_verdict(sink.records, f.value.page, page=True)
    assert (v.verdict, v.caught, v.offset, v.beyond) == ("past_end", True, (4096, 8191), (0, 4095))
    assert "0-4095 bytes past the end of the 4096-byte cupy allocation" in v.text


def test_slack_is_not_guardable_and_said_so():
    guard, drv, sink = make("1")
    slot = guard.allocate(4000, "cuda_bindings")
    drv.touch(slot.address + 4000, 4)         # inside the 96 bytes of slack: no fault
    v = guard_verdict(sink.records, slot.address + 4000)
    assert (v.verdict, v.caught, v.beyond) == ("slack", False, 0)
    assert v.text.startswith("inside the slack, not guardable: 0 bytes past the end")
    assert "96 bytes its 256-byte alignment leaves" in v.text


def test_use_after_free_faults_while_quarantined_then_va_is_released():
    guard, drv, sink = make("1,quarantine_slots=2")
    slots = [guard.allocate(4000, "numba") for _ in range(3)]
    guard.free(slots[0].address)
    assert drv.leaks()["handles"] == 2 and drv.mapped_bytes() == 2 * G
    with pytest.raises(FakeFault) as f:
        drv.touch(slots[0].address, 4)
    v = guard_verdict(sink.records, f.value.page, page=True)
    assert v.verdict == "freed" and v.caught and v.offset == (0, 3999)
    assert "96 bytes of the slot outside" in v.note
    guard.free(slots[1].address)
    guard.free(slots[2].address)              # the third free pushes the first out
    assert guard.counts.released == 1 and len(drv.reservations) == 2
    assert guard_verdict(sink.records, slots[0].address) is None   # its VA is the driver's again
    assert guard.release_quarantine() == 2
    assert drv.leaks() == {"reservations": 0, "mappings": 0, "handles": 0}


def test_left_side_catches_underruns():
    guard, drv, sink = make("1,side=left")
    slot = guard.allocate(4000, "torch")
    drv.touch(slot.address + 4000, 4)         # the tail is mapped: an overrun is not caught here
    with pytest.raises(FakeFault) as f:
        drv.touch(slot.address - 4, 4)
    v = guard_verdict(sink.records, f.value.page, page=True)
    assert (v.verdict, v.beyond) == ("before_start", (1, 4096))
    tail = guard_verdict(sink.records, slot.address + 4000)
    assert tail.verdict == "slack" and "mapped tail" in tail.text


def test_cap_skips_and_failures_fall_back_without_leaks():
    guard, drv, sink = make("1,max_bytes=4M")
    assert guard.allocate(100, "cupy") and guard.allocate(100, "cupy")
    assert guard.allocate(100, "cupy") is None and guard.counts.skipped_cap == 1
    for call in ("reserve", "create", "map", "set_access"):
        drv.fail_next(call)
        guard2, drv2, _ = make("1")
        drv2.fail_next(call)
        assert guard2.allocate(100, "cupy") is None
        assert guard2.counts.failed == 1 and drv2.leaks() == {"reservations": 0, "mappings": 0, "handles": 0}
    assert any("max_bytes" in (r.get("message") or "") for r in sink.records)


def test_no_context_and_broken_driver_fall_back():
    drv = FakeVmmDriver(device=None)
    guard = GuardAllocator(parse_spec("1"), drv, None)
    assert guard.allocate(10, "cupy") is None and guard.counts.failed == 1

    def broken():
        raise ImportError("no cuda-bindings")
    guard = GuardAllocator(parse_spec("1"), broken, None)
    assert guard.sample(10) and guard.allocate(10, "cupy") is None
    assert "no cuda-bindings" in guard.broken and not guard.sample(10)  # stops trying


def test_free_of_unknown_address_is_not_ours_and_unmap_failure_keeps_va():
    guard, drv, sink = make("1")
    assert guard.free(12345) is False
    slot = guard.allocate(10, "cupy")
    drv.fail_next("unmap")
    assert guard.free(slot.address)
    assert len(guard.quarantine) == 0          # still mapped: its VA is never recycled
    v = guard_verdict(sink.records, slot.address)
    assert v.verdict == "freed" and not v.caught and "unmapping failed" in v.note


def test_per_test_counts_and_totals_notes():
    guard, drv, sink = make("1")
    guard.begin_test("t::a")
    for _ in range(3):
        if guard.sample(8):
            guard.allocate(8, "cupy")
    d = guard.end_test()
    assert (d.seen, d.guarded) == (3, 3)
    guard.begin_test("t::b")
    assert guard.end_test().seen == 0          # nothing allocated: no note
    guard.note_totals()
    notes = [r for r in sink.records if "guard_stats" in r]
    assert [n["guard_stats"]["scope"] for n in notes] == ["test", "process"]


def test_records_round_trip_through_the_ledger_writer(tmp_path):
    w = LedgerWriter(tmp_path)
    guard = GuardAllocator(parse_spec("1"), FakeVmmDriver(), w)
    slot = guard.allocate(4096, "cupy")
    guard.free(slot.address)
    w.close()
    recs = read_jsonl(w.path).records
    allocs = [r for r in recs if r.get("source") == "guard" and r["event"] == "alloc"]
    assert allocs[0]["stack"] and allocs[0]["guard"]["slack"] == 0   # a stack from outside the guard
    assert all("faulthunt/guard" not in s for s in allocs[0]["stack"])
    v = guard_verdict(recs, slot.address + 4096 + 8, at=allocs[0]["t"] + 1e-9)
    assert v.verdict == "past_end" and v.beyond == 8
    # the existing ledger reader sees a plain device allocation of the exact size
    from faulthunt.ledger.reader import load_ledger

    led = load_ledger(tmp_path)
    live, _freed = led.pid(w._pid).containers.containing(slot.address, allocs[0]["t"] + 1e-9)
    assert any(lf.size == 4096 and lf.address == slot.address for lf in live)


# --- verdicts ----------------------------------------------------------------------------------

def _alloc(address, size, t=1.0, side="right", slot=1, nodeid="t::a", align=256):
    lay = plan_slot(size, G, align, side)
    base = address - lay.data_offset
    from faulthunt.guard.records import alloc_fields

    return {"event": "alloc", "t": t, "pid": 9, "nodeid": nodeid, "source": "guard",
            **alloc_fields(slot, base, lay, align, "cupy", 0)}


def _free(address, t, phase="requested", nodeid="t::b"):
    return {"event": "free", "t": t, "pid": 9, "nodeid": nodeid, "source": "guard",
            "address": address, "kind": "device", "phase": phase, "guard": {"slot": 1, "unmapped": True}}


A = 0x7F00_001F_F000  # a 4000-byte allocation ending 96 bytes before its guard (at 0x7f0000200000)


@pytest.mark.parametrize("address,page,at,want", [
    (A + 3999, False, 2.0, ("inside", False)),
    (A + 4000, False, 2.0, ("slack", False)),
    (A + 4095, False, 2.0, ("slack", False)),
    (A + 4096, False, 2.0, ("past_end", True)),
    (A - 1, False, 2.0, ("slack", False)),         # the mapped head of a right-side slot
    (A + 4096, True, 2.0, ("past_end", True)),
    (A + 10, False, 6.0, ("freed", True)),
    (A + 10, True, 6.0, ("freed", True)),
    (A + 4096, False, 6.0, ("past_end", True)),    # past the end of a freed allocation
    (A + 10, True, 4.5, ("freed", True)),          # a mapped page cannot fault: clocks differ
    (A + 10, False, 20.0, None),                   # after the VA went back to the driver
    (A + 10, False, -0.5, None),                   # before the slot existed
    (A + 4096, True, 0.9, ("past_end", True)),     # 0.1 s before its allocation: clocks differ
    (A + 5 * G, False, 2.0, None),                 # outside the slot
])
def test_verdict_table(address, page, at, want):
    recs = [_alloc(A, 4000), _free(A, 5.0), _free(A, 10.0, "completed")]
    v = guard_verdict(recs, address, page=page, at=at)
    assert (None if v is None else (v.verdict, v.caught)) == want


def test_verdict_texts_name_the_freeing_test_and_the_clock_note():
    recs = [_alloc(A, 4000), _free(A, 5.0, nodeid="tests/t.py::test_free[3-50]")]
    v = guard_verdict(recs, A + 10, page=True, at=4.5)
    assert "freed by tests/t.py::test_free[3-50]" in v.text and "clocks differ" in v.note
    assert v.to_json()["allocation"]["freed"]["nodeid"] == "tests/t.py::test_free[3-50]"
    late = guard_verdict(recs, A + 4096, at=6.0)
    assert late.verdict == "past_end" and "freed by" in late.note


def test_a_fault_just_before_its_allocation_says_the_clocks_differ():
    """The kernel log's timestamps (boot clock) and the ledger's (wall clock) are converted to one
    another; a few hundred ms apart, an overrun right after its allocation reads 'before' it."""
    v = guard_verdict([_alloc(A, 4000, t=1.0)], A + 4096, page=True, at=0.7)
    assert v is not None and v.verdict == "past_end" and v.caught
    assert "0.300 s before the recorded allocation" in v.note
    assert guard_verdict([_alloc(A, 4000, t=1.0)], A + 4096, page=True, at=-0.1) is None


def test_reused_va_picks_the_slot_of_the_time():
    recs = [_alloc(A, 4000, t=1.0, nodeid="t::old"), _free(A, 2.0), _free(A, 3.0, "completed"),
            _alloc(A, 4000, t=4.0, nodeid="t::new")]
    assert guard_verdict(recs, A, at=1.5).slot.nodeid == "t::old"
    assert guard_verdict(recs, A, at=5.0).slot.nodeid == "t::new"
    assert guard_verdict(recs, A).slot.nodeid == "t::new"   # no time: the newest


def test_malformed_guard_records_are_skipped_not_fatal():
    good = _alloc(A, 4000)
    bad = [dict(good, guard="x"), dict(good, size=-1), dict(good, guard={**good["guard"], "mapped": [1]}),
           {"event": "free", "source": "guard", "t": "x", "address": A}, {"event": "free", "source": "guard",
                                                                          "t": 3.0, "address": 5}]
    idx = GuardIndex.from_records([*bad, good, {"event": "alloc", "source": "cupti", "t": 1.0}])
    assert len(idx) == 1 and idx.skipped == 5
    assert idx.verdict(A + 4096).verdict == "past_end"


sizes = st.integers(1, 5 * G)


@settings(max_examples=300, deadline=None)
@given(size=sizes, align=st.sampled_from([16, 256]), side=st.sampled_from(["right", "left"]),
       rel=st.integers(-G - 10, 6 * G), page=st.booleans(), freed=st.booleans())
def test_verdict_agrees_with_the_fake_mmu(size, align, side, rel, page, freed):
    """Every address of a slot: the verdict says caught exactly when the fake MMU faults, and the
    verdict kind follows from where the address lies."""
    guard, drv, sink = make(f"1,align={align},side={side}")
    slot = guard.allocate(size, "cupy")
    if freed:
        guard.free(slot.address)
    addr = slot.address + rel
    v = guard_verdict(sink.records, addr, page=page)
    lo, hi = slot.base, slot.base + slot.layout.reserve
    probe = addr - addr % 4096 if page else addr
    if not lo <= probe < hi:
        assert v is None
        return
    try:
        drv.touch(probe, 1)
        faulted = False
    except FakeFault:
        faulted = True
    assert v.caught == faulted
    e = slot.address + size
    if slot.base + slot.layout.guard_offset <= probe < slot.base + slot.layout.guard_offset + G:
        assert v.verdict == ("past_end" if side == "right" else "before_start")
        if not page:
            assert v.beyond == (addr - e if side == "right" else slot.address - addr)
    elif freed:
        assert v.verdict == "freed"
    elif page:
        assert v.verdict in ("inside", "slack")
    else:
        assert v.verdict == ("inside" if slot.address <= addr < e else "slack")
        assert v.offset == addr - slot.address


# --- summary -----------------------------------------------------------------------------------

def test_summary_counts_and_catches():
    guard, drv, sink = make("1")
    guard.begin_test("t::a")
    slots = [guard.allocate(4096, fw) for fw in ("cupy", "cupy", "numba") if guard.sample(4096)]
    guard.sample(8)
    guard.free(slots[0].address)
    guard.end_test()
    v1 = guard_verdict(sink.records, slots[1].address + 4096, page=True)
    v2 = guard_verdict(sink.records, slots[0].address, page=True)
    v3 = {"guard": {"verdict": "slack", "caught": False}}
    s = summarize_guard(sink.records + [{"event": "alloc", "source": "cupti", "size": 1}], [v1, v2, v3, {"x": 1}])
    assert s["allocations_guarded"] == 3 and s["by_framework"] == {"cupy": 2, "numba": 1}
    assert s["allocations_seen"] == 4 and s["caught"] == {"freed": 1, "past_end": 1}
    assert s["not_guardable"] == 1 and s["freed"] == 1 and s["guarded_bytes"] == 3 * 4096
    line = guard_line(s)
    assert line.startswith("guard: 3 of 4 allocations guarded (cupy 2, numba 1); caught 1 freed, 1 past_end")
    assert guard_line(summarize_guard([])) is None
