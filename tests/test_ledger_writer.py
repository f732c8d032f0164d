"""The cheap paths of the ledger: the record encoder, cached stacks, the CUPTI flush policy.

The CUPTI module is a constructed stand-in (tests/test_ledger.py's ``_FakeCupti``) that counts
forced flushes: on the H200 each one costs about a millisecond, so their number is what the flush
policy is judged on here. Time itself is measured in scripts/benchrows/ledger.py, not asserted.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

from hypothesis import given, strategies as st

from faulthunt.ledger import cupti_source
from faulthunt.ledger.writer import LedgerWriter, RawJSON, encode_record, python_stack, stack_json

from test_ledger import BASE, _FakeCupti

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40))
values = st.one_of(scalars, st.lists(st.text(max_size=20), max_size=5),
                   st.dictionaries(st.text(max_size=5), st.integers(), max_size=3))


@given(st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=10))
def test_encode_record_round_trips_like_json(rec):
    line = encode_record(rec)
    assert "\n" not in line
    assert json.loads(line) == json.loads(json.dumps(rec))


def test_encode_record_writes_raw_json_as_is():
    assert json.loads(encode_record({"stack": RawJSON('["a:1 in f"]'), "n": 1})) == {"stack": ["a:1 in f"], "n": 1}


def test_non_finite_floats_become_null():
    assert json.loads(encode_record({"t": float("nan"), "u": float("inf")})) == {"t": None, "u": None}


def _here():
    return stack_json(), python_stack()


def test_stack_json_is_python_stack_and_cached():
    a = [_here() for _ in range(3)]
    assert json.loads(a[0][0]) == a[0][1]
    assert a[0][0] is a[1][0] is a[2][0]  # same call site: the cached encoding
    assert any("test_stack_json_is_python_stack_and_cached" in f for f in a[0][1])


def test_stack_policy_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("FAULTHUNT_LEDGER_STACKS", "off")
    w = LedgerWriter(tmp_path)
    assert not w.alloc_stacks and not w.all_stacks
    w.close()
    monkeypatch.setenv("FAULTHUNT_LEDGER_STACKS", "bogus")
    w = LedgerWriter(tmp_path)
    assert w.stacks == "alloc" and w.alloc_stacks and not w.all_stacks
    w.close()


def _loop(fake, n, cid0=100):
    for i in range(n):
        cid = cid0 + 2 * i
        fake.cb(None, 1, 34, SimpleNamespace(callback_site=0, correlation_id=cid, function_name="cuMemAlloc_v2",
                                             symbol_name=None))
        fake.cb(None, 1, 34, SimpleNamespace(callback_site=1, correlation_id=cid, function_name="cuMemAlloc_v2",
                                             symbol_name=None))
        fake.cb(None, 1, 307, SimpleNamespace(callback_site=0, correlation_id=cid + 1,
                                              function_name="cuLaunchKernel", symbol_name="_Z4fillPf"))
        fake.cb(None, 1, 307, SimpleNamespace(callback_site=1, correlation_id=cid + 1,
                                              function_name="cuLaunchKernel", symbol_name="_Z4fillPf"))


def _start(tmp_path, monkeypatch, policy=None):
    fake = _FakeCupti()
    monkeypatch.setattr(cupti_source, "_import", lambda: fake)
    if policy:
        monkeypatch.setenv(cupti_source.FLUSH_ENV, policy)
    else:
        monkeypatch.delenv(cupti_source.FLUSH_ENV, raising=False)
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w)
    src._stop.set()  # no background flushes: only the launch/sync paths are counted
    return fake, w, src


def test_default_policy_does_not_flush_before_every_launch(tmp_path, monkeypatch):
    fake, w, src = _start(tmp_path, monkeypatch)
    _loop(fake, 200)
    # the first launch after the allocation flushes; the next ones are within FLUSH_GAP of it
    assert 1 <= fake.flushes < 20
    launches = [json.loads(x) for x in w.path.read_text().splitlines() if '"launch"' in x]
    assert len(launches) == 200 and all("stack" not in r for r in launches)  # stacks: alloc only
    w.close()


def test_sync_flushes_pending_allocations(tmp_path, monkeypatch):
    fake, w, src = _start(tmp_path, monkeypatch)
    _loop(fake, 5)
    before = fake.flushes
    fake.cb(None, 1, 17, SimpleNamespace(callback_site=1, correlation_id=999, function_name="cuCtxSynchronize",
                                         symbol_name=None))
    assert fake.flushes == before + 1 and not src.dirty
    w.close()


def test_strict_policy_flushes_before_each_launch(tmp_path, monkeypatch):
    fake, w, src = _start(tmp_path, monkeypatch, "launch")
    _loop(fake, 50)
    assert fake.flushes == 50
    w.close()


def test_background_flusher_hands_over_pending_records(tmp_path, monkeypatch):
    fake = _FakeCupti()
    monkeypatch.setattr(cupti_source, "_import", lambda: fake)
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w)
    try:
        src.dirty = True
        src._last_flush = 0.0
        # poll (a loaded machine may delay the thread); no timing is asserted, only that it runs
        for _ in range(200):
            if fake.flushes >= 1 and not src.dirty:
                break
            src._stop.wait(0.05)
        assert fake.flushes >= 1 and not src.dirty
    finally:
        src.stop()
        w.close()
    assert any(f'"address":{BASE}' in x for x in (tmp_path / f"{os.getpid()}.jsonl").read_text().splitlines())
