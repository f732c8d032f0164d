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


@pytest.fixture(autouse=True)
def _python_route(monkeypatch):
    """These tests are of the ``python`` route (the default when the compiled library is built
    is ``native``; tests/test_ledger_native.py covers the compiled routes)."""
    monkeypatch.setenv("FAULTHUNT_LEDGER_ROUTE", "python")


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


# --- the direct route: real ctypes callbacks, a stand-in libcupti --------------------------------

from faulthunt.ledger import cupti_direct  # noqa: E402


class _FakeLib:
    """libcupti's functions as the direct route calls them; callbacks go back through real ctypes
    function pointers (the CFUNCTYPE objects registered), records through real memory."""

    RECORD = MEMORY4.itemsize

    def __init__(self):
        self.cb = self.requested = self.completed = None
        self.enabled = []
        self.flushes = 0
        self.pending: list[bytes] = []
        for name in ("cuptiSubscribe_v2", "cuptiEnableCallback", "cuptiUnsubscribe", "cuptiActivityRegisterCallbacks",
                     "cuptiActivityGetNextRecord", "cuptiActivityEnable", "cuptiActivityDisable",
                     "cuptiActivityFlushAll"):
            method = getattr(self, "_" + name)
            setattr(self, name, lambda *a, _m=method: _m(*a))  # functions take argtypes/restype

    def _cuptiSubscribe_v2(self, handle_ref, fn, _u, _params):
        self.cb = fn
        handle_ref._obj.value = 77
        return 0

    def _cuptiEnableCallback(self, enable, sub, domain, cbid):
        assert sub == 77
        self.enabled.append(cbid)
        return 0

    def _cuptiUnsubscribe(self, sub):
        return 0

    def _cuptiActivityRegisterCallbacks(self, req, comp):
        self.requested, self.completed = req, comp
        return 0

    def _cuptiActivityEnable(self, kind):
        return 0

    _cuptiActivityDisable = _cuptiActivityEnable

    def _cuptiActivityGetNextRecord(self, buffer, valid, rec_ref):
        rec = rec_ref._obj
        nxt = buffer if not rec.value else rec.value + self.RECORD
        if nxt + self.RECORD > buffer + valid:
            return 12  # CUPTI_ERROR_MAX_LIMIT_REACHED: no more records
        rec.value = nxt
        return 0

    def _cuptiActivityFlushAll(self, flag):
        self.flushes += 1
        if not self.pending:
            return 0
        buf, size, most = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
        self.requested(ctypes.pointer(buf), ctypes.pointer(size), ctypes.pointer(most))
        assert size.value >= len(self.pending) * self.RECORD
        data = b"".join(self.pending)
        self.pending = []
        ctypes.memmove(buf.value, data, len(data))
        self.completed(None, 0, buf.value, size.value, len(data))
        return 0


class _DirectCupti(_RawCupti):
    class Result(_FakeCupti.Result):
        ERROR_MAX_LIMIT_REACHED = 12


def _memory_bytes(**fields):
    rec = np.zeros(1, dtype=MEMORY4)
    for k, v in fields.items():
        rec[k] = v
    return rec.tobytes()


def _callback_struct(site, cid, symbol=None, keep=None):
    rec = np.zeros(1, dtype=CALLBACK_DATA)
    rec["callback_site"], rec["correlation_id"] = site, cid
    if symbol is not None:
        buf = ctypes.create_string_buffer(symbol.encode())
        keep.append(buf)
        rec["symbol_name"] = ctypes.addressof(buf)
    ok = ctypes.c_int(0)
    keep += [ok, rec]
    rec["function_return_value"] = ctypes.addressof(ok)
    return rec.ctypes.data


def test_direct_route_records_through_real_ctypes_callbacks(tmp_path, monkeypatch):
    lib = _FakeLib()
    monkeypatch.setattr(cupti_source, "_import", lambda: _DirectCupti())
    monkeypatch.setattr(cupti_direct, "loaded_libcupti", lambda major=None: "/fake/libcupti.so.13")
    monkeypatch.setattr(cupti_direct, "_load", lambda path: lib)
    monkeypatch.delenv(cupti_direct.CALL_ENV, raising=False)
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w)
    src._stop.set()
    assert src.route == "direct" and sorted(lib.enabled) == [17, 34, 307]
    keep: list = []
    lib.pending.append(_memory_bytes(kind=MEMORY2, memory_operation_type=OP_ALLOCATION, memory_kind=3,
                                     correlation_id=5, address=BASE, bytes=4000, timestamp=5_000_100_000))
    lib.pending.append(_memory_bytes(kind=MEMORY2, memory_operation_type=OP_RELEASE, memory_kind=3,
                                     correlation_id=9, address=BASE, bytes=4000, timestamp=5_000_300_000))
    lib.cb(None, 1, 34, _callback_struct(0, 5, keep=keep))          # cuMemAlloc_v2 enter
    lib.cb(None, 1, 34, _callback_struct(1, 5, keep=keep))          # exit
    lib.cb(None, 1, 307, _callback_struct(0, 6, "_Z4pokePfx", keep))  # cuLaunchKernel enter: flushes
    lib.cb(None, 1, 307, _callback_struct(1, 6, "_Z4pokePfx", keep))
    lib.cb(None, 1, 17, _callback_struct(1, 7, keep=keep))          # cuCtxSynchronize exit
    src.stop()
    w.close()
    recs = [json.loads(x) for x in (tmp_path / f"{os.getpid()}.jsonl").read_text().splitlines()]
    assert any(r.get("message", "").startswith("ledger: CUPTI calls direct") for r in recs)
    events = [(r["event"], r.get("address"), r.get("kernel")) for r in recs if r["event"] != "note"]
    assert events == [("alloc", BASE, None), ("free", BASE, None), ("launch", None, "_Z4pokePfx"), ("sync", None, None)]
    alloc = recs[[r["event"] for r in recs].index("alloc")]
    assert alloc["size"] == 4000 and alloc["stack"] and alloc["correlation_id"] == 5
    assert lib.flushes >= 2


def test_direct_route_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setenv(cupti_direct.CALL_ENV, "python")
    assert cupti_direct.direct(_DirectCupti(), RawStruct) == (None, f"{cupti_direct.CALL_ENV}=python")
    monkeypatch.delenv(cupti_direct.CALL_ENV)
    monkeypatch.setattr(cupti_direct, "loaded_libcupti", lambda major=None: None)
    assert "no single loaded libcupti" in cupti_direct.direct(_DirectCupti(), RawStruct)[1]
    assert "has no callback_data_dtype" in cupti_direct.direct(_FakeCupti(), RawStruct)[1]


def test_loaded_libcupti_reads_the_maps_file(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
                    "7f02-7f03 r-xp 00000000 08:01 2 /opt/x/nvidia/cu13/lib/libcupti.so.13\n")
    assert cupti_direct.loaded_libcupti(str(maps)) == "/opt/x/nvidia/cu13/lib/libcupti.so.13"
    assert cupti_direct.loaded_libcupti(str(tmp_path / "none")) is None
    # a second copy (a framework's own, another CUDA major): the one matching cupti-python's major
    with maps.open("a") as fh:
        fh.write("7f04-7f05 r-xp 00000000 08:01 3 /opt/torch/nvidia/cuda_cupti/lib/libcupti.so.12\n")
    assert cupti_direct.loaded_libcupti(str(maps)) is None  # two candidates, no major: no answer
    assert cupti_direct.loaded_libcupti(str(maps), major=13) == "/opt/x/nvidia/cu13/lib/libcupti.so.13"
    assert cupti_direct.loaded_libcupti(str(maps), major=11) is None


def test_sync_flushes_at_once_only_when_it_failed(tmp_path, monkeypatch):
    fake = _RawCupti()
    monkeypatch.setattr(cupti_source, "_import", lambda: fake)
    w = LedgerWriter(tmp_path)
    src = cupti_source.start(w)
    src._stop.set()
    keep: list = []
    fake.cb(None, 1, 34, _cb(0, 5, "cuMemAlloc_v2", keep=keep))
    fake.cb(None, 1, 307, _cb(0, 6, "cuLaunchKernel", "_Z1kv", keep=keep))  # first launch: flushes
    assert fake.flushes == 1 and not src.dirty
    fake.cb(None, 1, 34, _cb(0, 8, "cuMemAlloc_v2", keep=keep))
    ok = _cb(1, 9, "cuCtxSynchronize", keep=keep)
    fake.cb(None, 1, 17, ok)  # succeeded, within FLUSH_GAP of the last flush: the period will do
    assert fake.flushes == 1 and src.dirty
    failed = _cb(1, 10, "cuCtxSynchronize", keep=keep)
    ctypes.c_int.from_address(failed.attrs["function_return_value"]).value = 700  # ILLEGAL_ADDRESS
    fake.cb(None, 1, 17, failed)
    assert fake.flushes == 2 and not src.dirty
    w.close()
