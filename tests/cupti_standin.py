"""A stand-in for cupti-python and its libcupti, driving every ledger route without a GPU.

The module object (:class:`StandInCupti`) has the names the ledger reads from ``cupti.cupti``
(enums, ``SubscriberParams``, the dtypes) with cupti-python 13.0's spellings; its dtypes are
cupti-python 13.0.1's ``callback_data_dtype`` and ``activity_memory4_dtype`` as printed by that
release (tests/test_ledger_cupti_raw.py), plus a kernel record laid out as cupti_activity.h's
``CUpti_ActivityKernel9`` (constructed: the prefix the ledger reads).

The library (:class:`StandInLibcupti`) is what both the Python direct route (``cupti_direct``) and
the compiled route (``cupti_native`` + ``_native.c``) call: registered callbacks and buffer
functions are kept as real C function pointers (the compiled route's own C functions, or ctypes
thunks of the Python route's), ``cuptiActivityGetNextRecord`` and ``cuptiActivityFlushAll`` are
ctypes thunks that C can call, and records travel through real memory, as CUPTI's do. A driver
call is played with :meth:`StandInLibcupti.api` (callback on entry and exit) and activity records
are queued with :meth:`memory` / :meth:`kernel` until the next forced flush hands them over.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from test_ledger_cupti_raw import CALLBACK_DATA, MEMORY4

KERNEL9 = np.dtype({
    "names": ["kind", "start", "end", "completed", "device_id", "context_id", "stream_id", "grid_x", "grid_y",
              "grid_z", "block_x", "block_y", "block_z", "correlation_id", "grid_id", "name", "queued"],
    "formats": ["<i4", "<u8", "<u8", "<u8", "<u4", "<u4", "<u4", "<i4", "<i4", "<i4", "<i4", "<i4", "<i4",
                "<u4", "<i8", "<i8", "<u8"],
    "offsets": [0, 16, 24, 32, 40, 44, 48, 52, 56, 60, 64, 68, 72, 92, 96, 104, 120], "itemsize": 208})

MEMORY2, CONCURRENT_KERNEL, KERNEL = 49, 10, 3
CB_LAUNCH, CB_ALLOC, CB_FREE, CB_SYNC = 307, 34, 35, 17
ENTER, EXIT = 0, 1
ILLEGAL_ADDRESS = 700

CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
REQUESTED = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                             ctypes.POINTER(ctypes.c_size_t))
COMPLETED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.c_size_t)
NEXT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))
FLUSH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32)


class StandInCupti:
    """``from cupti import cupti`` as far as the ledger uses it."""

    class ActivityKind:
        MEMORY2 = MEMORY2
        CONCURRENT_KERNEL = CONCURRENT_KERNEL
        KERNEL = KERNEL

    class ActivityMemoryOperationType:
        ALLOCATION, RELEASE = 1, 2

    class ApiCallbackSite:
        API_ENTER, API_EXIT = ENTER, EXIT

    class ActivityFlag:
        FLUSH_FORCED = 1

    class CallbackDomain:
        DRIVER_API = 1

    class Result:
        ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39
        ERROR_MAX_LIMIT_REACHED = 12

    class driver_api_trace_cbid:
        cuLaunchKernel = CB_LAUNCH
        cuMemAlloc_v2 = CB_ALLOC
        cuMemFree_v2 = CB_FREE
        cuCtxSynchronize = CB_SYNC

    class cuptiError(Exception):
        def __init__(self, status):
            super().__init__(f"CUPTI error {status}")
            self.status = status

    SUBSCRIBER_PARAMS_SIZE = 32

    class SubscriberParams:
        ptr = 0
        old_subscriber_name = None

    callback_data_dtype = CALLBACK_DATA
    activity_memory4_dtype = MEMORY4
    activity_kernel9_dtype = KERNEL9

    def get_timestamp(self):
        return time.time_ns()  # the stand-in's CUPTI clock is the wall clock


def _fn(proto, f):
    """A C function pointer from what was registered: an address (the compiled route's own C
    functions) or a ctypes thunk (the Python route's)."""
    return proto(f) if isinstance(f, int) else f


class StandInLibcupti:
    """libcupti's entry points as the ledger calls them (see the module docstring)."""

    def __init__(self, cupti: StandInCupti | None = None):
        self.cupti = cupti or StandInCupti()
        self.cb = self.requested = self.completed = None
        self.enabled: list[int] = []
        self.activities: list[int] = []
        self.flushes = 0
        self.queue: list[bytes] = []
        self.layout: dict[int, list[int]] = {}  # buffer -> record offsets
        self.keep: list = []  # memory the callbacks' data points into
        for name in ("cuptiSubscribe_v2", "cuptiEnableCallback", "cuptiUnsubscribe",
                     "cuptiActivityRegisterCallbacks", "cuptiActivityEnable", "cuptiActivityDisable"):
            method = getattr(self, "_" + name)
            setattr(self, name, lambda *a, _m=method: _m(*a))  # plain functions take argtypes
        self.cuptiActivityGetNextRecord = NEXT(self._next)
        self.cuptiActivityFlushAll = FLUSH(self._flush)

    # registration ------------------------------------------------------------------------------
    def _cuptiSubscribe_v2(self, handle_ref, fn, _u, _params):
        self.cb = _fn(CALLBACK, fn)
        handle_ref._obj.value = 77
        return 0

    def _cuptiEnableCallback(self, enable, sub, domain, cbid):
        assert sub == 77
        self.enabled.append(int(cbid))
        return 0

    def _cuptiUnsubscribe(self, sub):
        self.cb = None
        return 0

    def _cuptiActivityRegisterCallbacks(self, req, comp):
        self.requested, self.completed = _fn(REQUESTED, req), _fn(COMPLETED, comp)
        return 0

    def _cuptiActivityEnable(self, kind):
        self.activities.append(int(kind))
        return 0

    def _cuptiActivityDisable(self, kind):
        if int(kind) in self.activities:
            self.activities.remove(int(kind))
        return 0

    # records --------------------------------------------------------------------------------------
    def _next(self, buffer, valid, rec):
        offsets = self.layout.get(buffer or 0, [])
        cur = rec[0]
        i = 0 if not cur else offsets.index(cur - buffer) + 1
        if i >= len(offsets) or offsets[i] >= valid:
            return 12  # CUPTI_ERROR_MAX_LIMIT_REACHED: no more records
        rec[0] = buffer + offsets[i]
        return 0

    def _flush(self, _flag):
        self.flushes += 1
        if not self.queue or self.requested is None:
            return 0
        buf, size, most = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
        self.requested(ctypes.byref(buf), ctypes.byref(size), ctypes.byref(most))
        records, self.queue = self.queue, []
        offsets, at, parts = [], 0, []
        for r in records:
            offsets.append(at)
            pad = -len(r) % 8  # CUPTI aligns records to 8 bytes
            parts += [r, b"\0" * pad]
            at += len(r) + pad
        assert at <= size.value
        ctypes.memmove(buf.value, b"".join(parts), at)
        self.layout[buf.value] = offsets
        self.completed(None, 0, buf.value, size.value, at)
        return 0

    def memory(self, op, address, nbytes, cid, ts=None, **kw):
        """Queue a MEMORY2 record (op 1 allocation, 2 release)."""
        rec = np.zeros(1, dtype=MEMORY4)
        rec["kind"], rec["memory_operation_type"], rec["memory_kind"] = MEMORY2, op, kw.get("memory_kind", 3)
        rec["correlation_id"], rec["address"], rec["bytes"] = cid, address, nbytes
        rec["timestamp"] = time.time_ns() if ts is None else ts
        rec["stream_id"] = kw.get("stream_id", 7)
        rec["is_async"] = kw.get("is_async", 0)
        if "pool_type" in kw:
            rec["memory_pool_config"]["memory_pool_type"] = kw["pool_type"]
            rec["memory_pool_config"]["address"] = kw.get("pool_address", 0)
        self.queue.append(rec.tobytes())

    def kernel(self, name, cid, start=None, end=None, grid=(1, 1, 1), block=(32, 1, 1)):
        """Queue a CONCURRENT_KERNEL record (when that activity is enabled, as CUPTI would);
        start/end 0: the kernel a fault swallowed."""
        if CONCURRENT_KERNEL not in self.activities:
            return
        rec = np.zeros(1, dtype=KERNEL9)
        s = time.time_ns() if start is None else start
        rec["kind"], rec["correlation_id"], rec["start"] = CONCURRENT_KERNEL, cid, s
        rec["end"] = (s + 1000 if s else 0) if end is None else end
        rec["grid_x"], rec["grid_y"], rec["grid_z"] = grid
        rec["block_x"], rec["block_y"], rec["block_z"] = block
        cname = ctypes.create_string_buffer(name.encode())
        self.keep.append(cname)
        rec["name"] = ctypes.addressof(cname)
        self.queue.append(rec.tobytes())

    # driver calls -------------------------------------------------------------------------------
    def callback(self, site, cbid, cid, symbol=None, result=0, params=None):
        """One callback (if enabled), with CallbackData as CUPTI lays it out; ``params``: the
        call's parameter structure (a ctypes object), pointed to by ``function_params``."""
        if self.cb is None or cbid not in self.enabled:
            return
        rec = np.zeros(1, dtype=CALLBACK_DATA)
        rec["callback_site"], rec["correlation_id"] = site, cid
        if params is not None:
            self.keep.append(params)
            rec["function_params"] = ctypes.addressof(params)
        if symbol is not None:
            s = ctypes.create_string_buffer(symbol.encode())
            self.keep.append(s)
            rec["symbol_name"] = ctypes.addressof(s)
        res = ctypes.c_int(result)
        self.keep += [res, rec]
        rec["function_return_value"] = ctypes.addressof(res)
        self.cb(None, 1, cbid, rec.ctypes.data)

    def api(self, cbid, cid, symbol=None, result=0, params=None):
        """A driver call: its callback on entry, then on exit with ``result``."""
        self.callback(ENTER, cbid, cid, symbol, params=params)
        self.callback(EXIT, cbid, cid, symbol, result, params)

    def mem_alloc(self, cid, address, nbytes, result=0):
        """cuMemAlloc_v2 as the driver makes it: ``*dptr`` is written before the exit callback."""
        out = ctypes.c_uint64(0)
        params = (ctypes.c_uint64 * 2)(ctypes.addressof(out), nbytes)  # CUdeviceptr *dptr; size_t bytesize
        self.keep.append(out)
        self.callback(ENTER, CB_ALLOC, cid, params=params)
        out.value = address if result == 0 else 0
        self.callback(EXIT, CB_ALLOC, cid, None, result, params)

    def mem_free(self, cid, address, result=0):
        """cuMemFree_v2(dptr)."""
        self.api(CB_FREE, cid, result=result, params=(ctypes.c_uint64 * 1)(address))
