"""``--ledger auto`` against ``full`` (issue 16): auto records at the driver level (no CuPy
MemoryHook, no numba EMM beside CUPTI) and samples the stacks of driver allocations; full keeps
every per-array record and stack. The sampling bucket is tested in Python (StackSampler, the
``python`` route) and in C (``_native.c``, the compiled routes) against the stand-in libcupti; the
mapper's answer says when per-array bounds were not recorded.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from faulthunt import context
from faulthunt.ledger import cupti_source, install, native, uninstall, writer
from faulthunt.ledger.reader import build_ledger, load_ledger
from faulthunt.ledger.writer import StackSampler
from faulthunt.mapper import LEAN_MAP_NOTE, map_address

from cupti_standin import CB_ALLOC, CB_SYNC, ILLEGAL_ADDRESS
from test_ledger_cupti_raw import CALLBACK_DATA
from test_ledger_native import BASE, _records, _start
# the compiled library and the stand-in libcupti, as test_ledger_native sets them up (fixtures)
from test_ledger_native import compiled, native_lib, standin  # noqa: F401


def _fixtures(request):
    """(compiled library, stand-in libcupti) for a test that asks by ``request``."""
    return request.getfixturevalue("compiled"), request.getfixturevalue("standin")


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_sampler_burst_then_refill_then_a_new_test_refills():
    clock, test = _Clock(), ["a"]
    s = StackSampler(burst=3, refill=0.01, clock=clock, nodeid=lambda: test[0])
    assert [s.due() for _ in range(5)] == [True, True, True, False, False]
    clock.t += 0.025  # two tokens back
    assert [s.due() for _ in range(3)] == [True, True, False]
    clock.t += 10.0  # never more than the burst
    assert [s.due() for _ in range(4)] == [True, True, True, False]
    test[0] = "b"  # a new test: full again
    assert [s.due() for _ in range(4)] == [True, True, True, False]
    assert (s.taken, s.left_out) == (11, 5)


def _alloc_many(lib, first, n):
    for cid in range(first, first + n):
        lib.api(CB_ALLOC, cid)
        lib.memory(1, BASE + cid * 4096, 64, cid=cid)


@pytest.mark.parametrize("name", ["python", "native"])
def test_sampled_stacks_keep_each_tests_first_allocations(request, tmp_path, monkeypatch, name):
    lib, cupti = _fixtures(request)
    monkeypatch.setattr(writer, "SAMPLE_BURST", 5)
    monkeypatch.setattr(writer, "SAMPLE_REFILL", 1e6)  # no token comes back within the test
    monkeypatch.setenv(writer.STACKS_ENV, "sampled")
    w, src, _ = _start(tmp_path, name, monkeypatch)
    before = native.stats(lib)
    try:
        context.set_current("t.py::test_a", "t.py::test_a")
        _alloc_many(cupti, 1, 8)
        context.set_current("t.py::test_b", "t.py::test_b")
        w._nid()  # the test change reaches the C side (as any record of the test would)
        _alloc_many(cupti, 101, 8)
        cupti.api(CB_SYNC, 999, result=ILLEGAL_ADDRESS)
    finally:
        context.set_current(None, None)
        src.stop()
        w.close()
    stacked = sorted(r["correlation_id"] for r in _records(w) if r["event"] == "alloc" and r.get("stack"))
    assert stacked == [1, 2, 3, 4, 5, 101, 102, 103, 104, 105]
    assert sum(1 for r in _records(w) if r["event"] == "alloc") == 16  # every allocation recorded
    if name == "native":
        after = native.stats(lib)
        assert after["alloc_stacks"] - before["alloc_stacks"] == 10
        assert after["alloc_stacks_sampled_out"] - before["alloc_stacks_sampled_out"] == 6


@pytest.mark.parametrize("name", ["python", "native"])
def test_without_sampling_every_allocation_keeps_its_stack(request, tmp_path, monkeypatch, name):
    _lib, cupti = _fixtures(request)
    monkeypatch.setenv(writer.STACKS_ENV, "alloc")
    w, src, _ = _start(tmp_path, name, monkeypatch)
    try:
        _alloc_many(cupti, 1, 80)
        cupti.api(CB_SYNC, 999, result=ILLEGAL_ADDRESS)
    finally:
        src.stop()
        w.close()
    assert sum(1 for r in _records(w) if r["event"] == "alloc" and r.get("stack")) == 80


@pytest.mark.parametrize("mode, stacks_env, want_stacks, lean, allocs_env, want_allocs", [
    ("auto", None, "sampled", True, None, "callback"),
    ("auto", "alloc", "alloc", True, None, "callback"),   # an explicit FAULTHUNT_LEDGER_STACKS wins
    ("auto", None, "sampled", True, "activity", "activity"),  # so does FAULTHUNT_LEDGER_ALLOCS
    ("full", None, "alloc", False, None, "activity"),
    ("full", None, "alloc", False, "callback", "callback"),
])
def test_install_auto_is_lean_and_says_so_full_is_not(request, tmp_path, monkeypatch, mode, stacks_env,
                                                     want_stacks, lean, allocs_env, want_allocs):
    from faulthunt.ledger import cupti_native

    _lib, cupti = _fixtures(request)
    monkeypatch.delenv("FAULTHUNT_LEDGER_ROUTE", raising=False)
    if stacks_env:
        monkeypatch.setenv(writer.STACKS_ENV, stacks_env)
    else:
        monkeypatch.delenv(writer.STACKS_ENV, raising=False)
    if allocs_env:
        monkeypatch.setenv(cupti_native.ALLOCS_ENV, allocs_env)
    else:
        monkeypatch.delenv(cupti_native.ALLOCS_ENV, raising=False)
    h = install(tmp_path, mode, quiet=True)
    try:
        assert h is not None and h.plan.lean is lean
        assert h.writer.stacks == want_stacks
        # auto takes allocation lines from the calls' callbacks: no MEMORY2 activity is enabled
        assert [s.allocs for s in h.sources if hasattr(s, "allocs")] == [want_allocs]  # numba may be imported already
        assert (cupti.cupti.ActivityKind.MEMORY2 in cupti.activities) is (want_allocs == "activity")
        # armed for a later import (a framework already imported is hooked at once instead)
        want = {"torch"} if lean else {"numba.cuda", "cupy", "torch"}
        assert set(h.hooks._hooks) == {m for m in want if not _imported(m)}
    finally:
        uninstall()
    notes = [r for f in tmp_path.glob("*.jsonl") for r in map(json.loads, f.read_text().splitlines())
             if r["event"] == "note"]
    lean_notes = [r for r in notes if r.get("arrays") is False]
    assert len(lean_notes) == (1 if lean else 0)
    if lean:
        assert "--ledger full" in lean_notes[0]["message"]


def _imported(module: str) -> bool:
    import sys

    return module in sys.modules


def test_auto_arms_every_refinement_when_cupti_will_not_start(request, tmp_path, monkeypatch):
    """Under compute-sanitizer CUPTI does not start: the refinements are all there is."""
    _fixtures(request)
    monkeypatch.delenv(writer.STACKS_ENV, raising=False)

    def refuse(*a, **k):
        raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")

    monkeypatch.setattr(cupti_source, "start", refuse)
    h = install(tmp_path, "auto", quiet=True)
    try:
        assert h is not None and not h.plan.cupti and not h.plan.lean
        assert h.plan.refinements == ("numba", "cupy", "torch")
        assert h.writer.stacks == "alloc" and h.writer.sampler is None
    finally:
        uninstall()
    notes = [r for f in tmp_path.glob("*.jsonl") for r in map(json.loads, f.read_text().splitlines())]
    assert not any(r.get("arrays") is False for r in notes)


def _ledger(lean: bool):
    recs = [{"event": "note", "t": 1.0, "t_mono": 1.0, "pid": 7, "nodeid": None, "source": "ledger",
             "message": "ledger route: native"}]
    if lean:
        recs.append({"event": "note", "t": 1.1, "pid": 7, "nodeid": None, "source": "ledger",
                     "message": "ledger: auto: ...", "arrays": False})
    recs.append({"event": "alloc", "t": 2.0, "pid": 7, "nodeid": "t.py::test_a", "source": "cupti",
                 "address": BASE, "size": 2 << 20, "kind": "device"})
    return build_ledger(recs)


@pytest.mark.parametrize("lean", [True, False])
def test_the_mapper_says_when_per_array_bounds_were_not_recorded(lean):
    inside = map_address(_ledger(lean), BASE + 4096, at=3.0)
    assert inside.verdict == "inside"
    assert (LEAN_MAP_NOTE in (inside.note or "")) is lean
    # nothing recorded there at all: no array could have been either
    far = map_address(_ledger(lean), BASE + (1 << 36), at=3.0)
    assert far.verdict == "unmapped" and LEAN_MAP_NOTE not in (far.note or "")



# --- allocation lines from the callbacks (FAULTHUNT_LEDGER_ALLOCS=callback) -------------------------

def test_allocations_from_the_callbacks_need_no_memory2_and_no_flush(request, tmp_path, monkeypatch):
    from faulthunt.ledger import cupti_native

    lib, cupti = _fixtures(request)
    monkeypatch.setenv(cupti_native.ALLOCS_ENV, "callback")
    monkeypatch.setenv(writer.STACKS_ENV, "alloc")
    w, src, _ = _start(tmp_path, "native", monkeypatch)
    assert src.allocs == "callback" and cupti.cupti.ActivityKind.MEMORY2 not in cupti.activities
    flushes = cupti.flushes
    try:
        context.set_current("t.py::test_a", "t.py::test_a")
        cupti.mem_alloc(5, BASE, 4000)
        cupti.mem_alloc(6, 0, 1 << 40, result=2)  # out of memory: nothing allocated, nothing written
        cupti.mem_free(7, BASE)
        cupti.mem_free(8, 0)  # cuMemFree(0) frees nothing
        assert cupti.flushes - flushes == 1  # the failed call's (a sticky error's) flush only
    finally:
        context.set_current(None, None)
        src.stop()
        w.close()
    recs = [r for r in _records(w) if r["event"] in ("alloc", "free")]
    assert [(r["event"], r["address"], r.get("size"), r["via"], r["nodeid"]) for r in recs] == [
        ("alloc", BASE, 4000, "callback", "t.py::test_a"), ("free", BASE, None, "callback", "t.py::test_a")]
    assert any("_alloc" in f or "test_allocations" in f for f in recs[0]["stack"])
    lives = load_ledger(tmp_path / "native").pids[recs[0]["pid"]].containers
    assert len(lives) == 1


def test_allocations_from_the_callbacks_are_refused_without_function_params(request, tmp_path, monkeypatch):
    from faulthunt.ledger import cupti_native

    _lib, cupti = _fixtures(request)
    monkeypatch.setenv(cupti_native.ALLOCS_ENV, "callback")
    names = [n for n in CALLBACK_DATA.names if n != "function_params"]
    monkeypatch.setattr(cupti.cupti, "callback_data_dtype", np.dtype({
        "names": names, "formats": [CALLBACK_DATA.fields[n][0] for n in names],
        "offsets": [CALLBACK_DATA.fields[n][1] for n in names], "itemsize": CALLBACK_DATA.itemsize}))
    w, src, said = _start(tmp_path, "native", monkeypatch)
    try:
        assert src.allocs == "activity" and cupti.cupti.ActivityKind.MEMORY2 in cupti.activities
        assert any("function_params" in m for m in said)
    finally:
        src.stop()
        w.close()


def test_an_unknown_allocation_source_is_said_and_memory2_used(request, tmp_path, monkeypatch):
    from faulthunt.ledger import cupti_native

    _lib, cupti = _fixtures(request)
    monkeypatch.setenv(cupti_native.ALLOCS_ENV, "callbacks")
    w, src, said = _start(tmp_path, "native", monkeypatch)
    try:
        assert src.allocs == "activity" and cupti.cupti.ActivityKind.MEMORY2 in cupti.activities
        assert any("'callbacks' is not one of activity, callback" in m for m in said)
    finally:
        src.stop()
        w.close()
