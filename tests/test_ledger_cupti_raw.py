"""Reading CUPTI records from their bytes (RawStruct) instead of cupti-python's attributes.

cupti-python 13.0 wraps each record in an object whose attribute reads go through a numpy record
array (about 3 us a field on the H200). The CUPTI source reads the fields it needs with one
``struct`` unpack of the record's ``_data`` array, laid out by cupti-python's own dtype, and
checks the first records against the attributes. The dtypes below are cupti-python 13.0.1's
``callback_data_dtype`` and ``activity_memory4_dtype``, as printed by that release
(``{k: (v[0], v[1]) for k, v in dtype.fields.items()}``); the record objects are constructed.
"""

from __future__ import annotations

import ctypes
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, strategies as st

from faulthunt.ledger import cupti_source
from faulthunt.ledger.cupti_source import MEM_FIELDS, MemoryFields, RawStruct, memory_record
from faulthunt.ledger.writer import LedgerWriter

from test_ledger import BASE, CLOCK, _FakeCupti, act, written
from faulthunt.ledger.cupti_source import OP_ALLOCATION, OP_RELEASE

CALLBACK_DATA = np.dtype({
    "names": ["callback_site", "function_name", "function_params", "function_return_value", "symbol_name",
              "context", "context_uid", "correlation_data", "correlation_id"],
    "formats": ["<i4", "<i8", "<i8", "<i8", "<i8", "<i8", "<u4", "<i8", "<u4"],
    "offsets": [0, 8, 16, 24, 32, 40, 48, 56, 64], "itemsize": 72})
POOL = np.dtype({"names": ["memory_pool_type", "pad2", "address", "release_threshold", "utilized_size"],
                 "formats": ["<i4", "<u4", "<u8", "<u8", "<u8"], "offsets": [0, 4, 8, 16, 32], "itemsize": 40})
MEMORY4 = np.dtype({
    "names": ["kind", "memory_operation_type", "memory_kind", "correlation_id", "address", "bytes", "timestamp",
              "pc", "process_id", "device_id", "context_id", "stream_id", "name", "is_async", "pad1",
              "memory_pool_config", "source"],
    "formats": ["<i4", "<i4", "<i4", "<u4", "<u8", "<u8", "<u8", "<u8", "<u4", "<u4", "<u4", "<u4", "<i8",
                "<u4", "<u4", POOL, "<i8"],
    "offsets": [0, 4, 8, 12, 16, 24, 32, 40, 48, 52, 56, 60, 64, 72, 76, 80, 120], "itemsize": 128})
MEMORY2 = 49


class _Rec:
    """A record as cupti-python hands it over: attributes plus the ``_data`` record array."""

    def __init__(self, dtype, lie=None, **fields):
        self._data = np.zeros(1, dtype=dtype)
        for k, v in fields.items():
            if "." in k:
                outer, inner = k.split(".")
                self._data[outer][inner] = v
            else:
                self._data[k] = v
        self.attrs = {k.split(".")[-1] if k.startswith("memory_pool") else k: v for k, v in fields.items()}
        self.attrs.update(lie or {})

    def __getattr__(self, name):
        try:
            return self.__dict__["attrs"][name]
        except KeyError:
            raise AttributeError(name) from None


@given(st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 64) - 1), st.integers(0, (1 << 32) - 1),
       st.integers(0, 1 << 62), st.sampled_from([0, 1, 2]))
def test_raw_struct_reads_what_the_dtype_holds(address, nbytes, cid, ts, pool_type):
    rec = np.zeros(1, dtype=MEMORY4)
    rec["kind"], rec["address"], rec["bytes"], rec["correlation_id"], rec["timestamp"] = 49, address, nbytes, cid, ts
    rec["memory_pool_config"]["memory_pool_type"] = pool_type
    rec["memory_pool_config"]["address"] = address ^ 0xFFFF
    f = MemoryFields(*RawStruct(MEMORY4, MEM_FIELDS).unpack(rec))
    assert (f.kind, f.address, f.bytes, f.correlation_id, f.timestamp) == (49, address, nbytes, cid, ts)
    assert (f.memory_pool_type, f.memory_pool_address) == (pool_type, address ^ 0xFFFF)


def test_raw_struct_rejects_a_non_integer_field():
    with pytest.raises(ValueError, match="not an integer"):
        RawStruct(np.dtype([("a", "<f8")]), ("a",))


def test_memory_record_is_the_same_from_bytes_and_from_attributes():
    a = act(OP_RELEASE, BASE, 4000, 6_000_000_000, is_async=1, pool_type=1, pool_addr=0x1234)
    raw = np.zeros(1, dtype=MEMORY4)
    for k in ("memory_operation_type", "address", "bytes", "timestamp", "correlation_id", "memory_kind",
              "device_id", "stream_id", "is_async"):
        raw[k] = getattr(a, k)
    raw["kind"] = MEMORY2
    raw["memory_pool_config"]["memory_pool_type"] = 1
    raw["memory_pool_config"]["address"] = 0x1234
    f = MemoryFields(*RawStruct(MEMORY4, MEM_FIELDS).unpack(raw))
    assert memory_record(f, CLOCK, pid=7) == memory_record(a, CLOCK, pid=7)


class _RawCupti(_FakeCupti):
    callback_data_dtype = CALLBACK_DATA
    activity_memory4_dtype = MEMORY4

    def __init__(self, lie=None):
        super().__init__()
        self.lie = lie or {}

    def activity_flush_all(self, flag):
        self.flushes += 1
        self.buffer_completed([_Rec(MEMORY4, kind=MEMORY2, memory_operation_type=OP_ALLOCATION, memory_kind=3,
                                    correlation_id=5, address=BASE, bytes=4000, timestamp=5_000_100_000,
                                    lie=self.lie.get("memory"))])


def _cb(site, cid, fn, symbol=None, lie=None, keep=None):
    sym = 0
    if symbol is not None:
        buf = ctypes.create_string_buffer(symbol.encode())
        keep.append(buf)
        sym = ctypes.addressof(buf)
    ok = ctypes.c_int(0)
    keep.append(ok)
    r = _Rec(CALLBACK_DATA, callback_site=site, correlation_id=cid, symbol_name=sym,
             function_return_value=ctypes.addressof(ok), lie=lie)
    r.attrs.update(function_name=fn, symbol_name=symbol, function_return_value=ctypes.addressof(ok))
    r.attrs.update(lie or {})
    return r


def _run(tmp_path, monkeypatch, fake):
    monkeypatch.setattr(cupti_source, "_import", lambda: fake)
    said: list[str] = []
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w, say=said.append)
    src._stop.set()
    keep: list = []
    fake.cb(None, 1, 34, _cb(0, 5, "cuMemAlloc_v2", keep=keep))
    fake.cb(None, 1, 34, _cb(1, 5, "cuMemAlloc_v2", keep=keep))
    fake.cb(None, 1, 307, _cb(0, 6, "cuLaunchKernel", "_Z4pokePfx", keep=keep,
                              lie=(fake.lie.get("callback") or None)))
    fake.cb(None, 1, 17, _cb(1, 7, "cuCtxSynchronize", keep=keep))
    w.close()
    return src, said, written(tmp_path / f"{os.getpid()}.jsonl")


def test_cupti_source_reads_callbacks_and_memory_records_from_bytes(tmp_path, monkeypatch):
    src, said, recs = _run(tmp_path, monkeypatch, _RawCupti())
    assert src._cbraw is not None and src._memraw is not None and not said[1:]
    assert [r["event"] for r in recs] == ["alloc", "launch", "sync"]
    assert recs[0]["address"] == BASE and recs[0]["size"] == 4000 and recs[0]["correlation_id"] == 5
    assert recs[0]["stack"]  # joined by correlation id
    assert recs[1]["kernel"] == "_Z4pokePfx" and recs[1]["correlation_id"] == 6


@pytest.mark.parametrize("lie, what", [({"callback": {"correlation_id": 99}}, "callback"),
                                       ({"memory": {"address": 1}}, "memory")])
def test_a_layout_that_disagrees_with_cupti_python_falls_back(tmp_path, monkeypatch, lie, what):
    src, said, recs = _run(tmp_path, monkeypatch, _RawCupti(lie))
    assert any(f"reading CUPTI {what} records field by field" in m for m in said)
    assert (src._cbraw if what == "callback" else src._memraw) is None
    notes = [r for r in recs if r["event"] == "note"]
    assert notes and "field by field" in notes[0]["message"]
    events = [r["event"] for r in recs if r["event"] != "note"]
    assert events == ["alloc", "launch", "sync"]  # nothing lost: the attributes were used instead
    if what == "memory":
        assert [r["address"] for r in recs if r["event"] == "alloc"] == [1]  # cupti-python's value wins
