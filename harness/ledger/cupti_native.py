"""The CUPTI source on the compiled routes (``native``, ``native-activity``): set up in Python,
run in C.

Python does what happens once: it finds the libcupti that cupti-python loaded, reads the record
layouts from cupti-python's dtypes and hands them to ``_native.c`` (checked against the CUDA 13
declarations there), tells it which callback ids are launches, allocations and synchronizations,
and registers the library's own C functions with CUPTI: the callback (``cuptiSubscribe_v2``) and
the activity buffer functions (``cuptiActivityRegisterCallbacks``). From then on no Python runs
per launch, per synchronization or per activity record. Python is called back only for the stack
of a driver-level allocation that no framework refinement is recording (numba's EMM marks its own
allocations with ``fl_refine``), or of a launch when ``FAULTHUNT_LEDGER_STACKS=all``.

Flushes, as on the Python routes (``FAULTHUNT_LEDGER_FLUSH``): before a synchronization returns
when it failed (at once) or when records are pending (every ``FLUSH_GAP``), when an allocation call
returns an error, before a launch that follows an allocation (rate-limited; every one with
``launch``), from a C thread every ``FLUSH_GAP`` while records are pending (always, when launches
come from activity records: nothing else says a kernel ran), at exit, and on a fatal signal
(SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT; SIGTERM when nothing else handles it) before the
handler that was there runs. That last one is best effort: CUPTI may be locked by the interrupted
thread, so it is bounded by ``alarm(2)``.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from typing import Any

from faulthunt.ledger import native
from faulthunt.ledger.cupti_direct import cupti_python_major, loaded_libcupti
from faulthunt.ledger.cupti_source import (
    ALLOC_APIS,
    FLUSH_ENV,
    FLUSH_GAP,
    FREE_APIS,
    LAUNCH_APIS,
    NAME,
    SYNC_APIS,
    kernel_dtype,
)
from faulthunt.ledger.writer import LedgerWriter, stack_json
from faulthunt.records.ledger import EVENT_NOTE

_KINDS = {"context": 4, "stream": 5, "event": 6}
BUFFER_SIZE = 8 * 1024 * 1024
#: where allocation lines come from on the compiled routes: ``activity`` (CUPTI's MEMORY2 records;
#: ``--ledger full`` and ``cupti``) or ``callback`` (each allocation API's exit callback reads the
#: address and size from the call's parameters; no MEMORY2, so no activity buffer or forced flush
#: for allocations: ``--ledger auto``, whose stream-ordered pool loop MEMORY2 made 1.3x slower on
#: the H200). The variable overrides either default.
ALLOCS_ENV = "FAULTHUNT_LEDGER_ALLOCS"
ALLOCS = ("activity", "callback")
_DEVICE, _MANAGED = 3, 5  # _native.c's MEMKINDS
#: per allocation API: (mode, address offset, size offset, aux offset, memory kind, async) in its
#: cuda.h ``<api>_params`` structure (every field 8 bytes: pointers, CUdeviceptr, size_t, handles);
#: modes as _native.c's rec_api_memory. cuMemCreate / cuMemRelease deal in handles: the address
#: comes with cuMemMap / cuMemUnmap.
API_PARAMS = {
    "cuMemAlloc_v2": (1, 0, 8, 0, _DEVICE, 0),                # CUdeviceptr *dptr; size_t bytesize
    "cuMemAllocPitch_v2": (3, 0, 24, 8, _DEVICE, 0),          # *dptr; size_t *pPitch; Width; Height
    "cuMemAllocManaged": (1, 0, 8, 0, _MANAGED, 0),           # *dptr; bytesize; flags
    "cuMemAllocAsync": (1, 0, 8, 0, _DEVICE, 1),              # *dptr; bytesize; hStream
    "cuMemAllocAsync_ptsz": (1, 0, 8, 0, _DEVICE, 1),
    "cuMemAllocFromPoolAsync": (1, 0, 8, 0, _DEVICE, 1),      # *dptr; bytesize; pool; hStream
    "cuMemAllocFromPoolAsync_ptsz": (1, 0, 8, 0, _DEVICE, 1),
    "cuMemMap": (2, 0, 8, 0, _DEVICE, 0),                     # ptr; size; offset; handle; flags
    "cuMemFree_v2": (4, 0, 0, 0, _DEVICE, 0),                 # dptr
    "cuMemFreeAsync": (4, 0, 0, 0, _DEVICE, 1),               # dptr; hStream
    "cuMemFreeAsync_ptsz": (4, 0, 0, 0, _DEVICE, 1),
    "cuMemUnmap": (5, 0, 8, 0, _DEVICE, 0),                   # ptr; size
}


def _load_libcupti(path: str) -> Any:
    return ctypes.CDLL(path)  # already loaded by cupti-python: the same handle


def _bind(cl: Any) -> Any:
    """libcupti's entry points with C function pointers passed as plain addresses."""
    v, i, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32
    for name, args in (("cuptiSubscribe_v2", [ctypes.POINTER(v), v, v, v]),
                       ("cuptiEnableCallback", [u32, v, i, u32]),
                       ("cuptiUnsubscribe", [v]),
                       ("cuptiActivityRegisterCallbacks", [v, v]),
                       ("cuptiActivityEnable", [i]),
                       ("cuptiActivityDisable", [i]),
                       ("cuptiActivityFlushAll", [u32])):
        fn = getattr(cl, name)
        fn.argtypes = args
        fn.restype = ctypes.c_int
    _ = cl.cuptiActivityGetNextRecord  # resolved now: a libcupti without it fails here, not mid-run
    return cl


class NativeCuptiSource:
    """CUPTI recording by the compiled library, into the writer's native sink."""

    name = NAME

    def __init__(self, writer: LedgerWriter, cupti: Any, say: Callable[[str], None],
                 allocs: str = "activity") -> None:
        if writer._sink is None:
            raise RuntimeError(f"the writer is not on the native backend ({writer.backend})")
        self.writer, self.cupti, self.say = writer, cupti, say
        self.lib = writer._lib
        self.launches = writer.route.launches
        self.subscriber: int | None = None
        self.notes: list[str] = []
        major = cupti_python_major()
        path = loaded_libcupti(major=major)
        if path is None:
            raise RuntimeError("no single loaded libcupti" + (f".so.{major}" if major else "")
                               + " among this process's libraries")
        self.cupti_path = path
        self.cl = _bind(_load_libcupti(path))
        self._configure(allocs)

    # set-up ------------------------------------------------------------------------------------
    def _layout(self, which: int, dtype: Any, what: str) -> bool:
        if dtype is None:
            self.notes.append(f"cupti-python has no {what} dtype")
            return False
        got, problem = native.layout_from_dtype(dtype, which)
        if problem:
            self.notes.append(f"{what} layout not usable ({problem})")
            return False
        off = native.check_layout(self.lib, which, got)
        if off:
            self.notes.append(f"{what} layout differs from the CUDA 13 declaration, using cupti-python's: "
                              + "; ".join(off))
        native.set_layout(self.lib, which, got)
        return True

    def _configure(self, allocs: str) -> None:
        c, lib = self.cupti, self.lib
        if not self._layout(0, getattr(c, "callback_data_dtype", None), "callback data"):
            raise RuntimeError("; ".join(self.notes))
        if not self._layout(1, getattr(c, "activity_memory4_dtype", None), "MEMORY2 (ActivityMemory4)"):
            raise RuntimeError("; ".join(self.notes))
        if self.launches == "activity":
            kd = kernel_dtype(c)
            if kd is None:
                # the fields read lie in the prefix every CUpti_ActivityKernelN since 4 shares
                native.set_layout(lib, 2, native.default_layout(lib, 2))
                self.notes.append("cupti-python has no kernel activity dtype: reading kernel records "
                                  "at the CUDA 13 declaration's offsets")
            elif not self._layout(2, kd, "kernel activity"):
                self.notes.append("launches from callbacks instead")
                self.launches = "callback"
        kind = c.ActivityKind
        lib.fl_consts(int(c.CallbackDomain.DRIVER_API), int(c.ApiCallbackSite.API_ENTER), int(kind.MEMORY2), int(getattr(kind, "KERNEL", -1)),
                      int(getattr(kind, "CONCURRENT_KERNEL", -1)), int(c.ActivityMemoryOperationType.ALLOCATION),
                      int(c.ActivityMemoryOperationType.RELEASE), int(c.Result.ERROR_MAX_LIMIT_REACHED))
        w0 = time.time_ns()
        m0 = time.monotonic_ns()
        ns = int(c.get_timestamp())
        w1 = time.time_ns()
        lib.fl_clock(ns, (w0 + w1) // 2, m0 + (w1 - w0) // 2)
        lib.fl_functions(native.address(self.cl, "cuptiActivityGetNextRecord"),
                         native.address(self.cl, "cuptiActivityFlushAll"), int(c.ActivityFlag.FLUSH_FORCED))
        w = self.writer
        lib.fl_policy(int(self.launches == "callback"), int(os.environ.get(FLUSH_ENV, "sync") == "launch"),
                      int(FLUSH_GAP * 1e9), int(self.launches == "activity"), int(w.alloc_stacks),
                      int(w.all_stacks), BUFFER_SIZE)
        if w.sampler is not None:
            lib.fl_stack_sampling(w.sampler.burst, int(w.sampler.refill * 1e9))
        else:
            lib.fl_stack_sampling(0, 0)
        self.allocs = "activity"
        want = os.environ.get(ALLOCS_ENV) or allocs
        if want not in ALLOCS:
            self.notes.append(f"{ALLOCS_ENV}={want!r} is not one of {', '.join(ALLOCS)}: allocations "
                              "from MEMORY2 records")
        elif want == "callback":
            if lib.fl_alloc_source(1) == 0:
                self.allocs = "callback"
            else:
                self.notes.append("allocation lines from the callbacks need the callback data's function_params "
                                  "field, which cupti-python's dtype lacks: allocations from MEMORY2 records")
        if self.allocs == "activity":
            lib.fl_alloc_source(0)
        self._provider = native.STACK_PROVIDER(self._stack)  # kept: C holds its address
        lib.fl_stack_provider(ctypes.cast(self._provider, ctypes.c_void_p).value)
        self._encoded: dict[str, bytes] = {}

    def _stack(self, cid: int, _kind: int) -> None:
        """Called from C (on the thread making the CUDA call) for a stack to keep under ``cid``."""
        try:
            s = stack_json()
            b = self._encoded.get(s)
            if b is None:
                if len(self._encoded) > 4096:
                    self._encoded.clear()
                b = self._encoded[s] = s.encode()
            self.lib.fl_pending_put(cid, b, len(b))
        except BaseException:  # noqa: BLE001 - never unwind into C
            pass

    def _note(self, msg: str) -> None:
        self.say(msg)
        self.writer.record(EVENT_NOTE, NAME, message=msg)

    def start(self) -> None:
        c, cl, lib = self.cupti, self.cl, self.lib
        lib.fl_use_sink(self.writer._sink)
        self.writer.follow_tests()
        self.writer.record(EVENT_NOTE, NAME, message=(
            f"ledger: CUPTI route {self.writer.route.name} (compiled, {lib.path}; launches from "
            f"{'kernel activity records' if self.launches == 'activity' else 'callbacks'}, allocations from "
            f"{'MEMORY2 records' if self.allocs == 'activity' else 'callbacks'}; {self.cupti_path})"))
        for n in self.notes:
            self._note(f"ledger: {n}")
        self._check(cl.cuptiActivityRegisterCallbacks(native.address(lib, "fl_buffer_requested"),
                                                      native.address(lib, "fl_buffer_completed")), "register buffers")
        if self.allocs == "activity":
            self._check(cl.cuptiActivityEnable(int(c.ActivityKind.MEMORY2)), "enable MEMORY2")
        self.writer.cupti = NAME
        if self.launches == "activity":
            self._check(cl.cuptiActivityEnable(int(c.ActivityKind.CONCURRENT_KERNEL)), "enable CONCURRENT_KERNEL")
        params = c.SubscriberParams()
        params.struct_size = c.SUBSCRIBER_PARAMS_SIZE
        params.subscriber_name = "faulthunt-ledger"
        handle = ctypes.c_void_p()
        status = cl.cuptiSubscribe_v2(ctypes.byref(handle), native.address(lib, "fl_cupti_callback"), None,
                                      params.ptr)
        if status:
            busy = status == int(c.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
            holder = getattr(params, "old_subscriber_name", None) or "another CUPTI client"
            self._note(f"ledger: CUPTI already has a subscriber ({holder}; a profiler such as nsys or ncu?): "
                       "recording allocations from activity records only, no launches or stacks. Run "
                       "without the profiler for the full ledger." if busy else
                       f"ledger: CUPTI subscribe failed (status {status}): allocations only, no launches")
            lib.fl_policy(0, 0, int(FLUSH_GAP * 1e9), 1, 0, 0, BUFFER_SIZE)  # flush on the period
            if self.allocs == "callback":  # no callbacks: the allocations can only come from MEMORY2
                lib.fl_alloc_source(0)
                self.allocs = "activity"
                self._check(cl.cuptiActivityEnable(int(c.ActivityKind.MEMORY2)), "enable MEMORY2")
        else:
            self.subscriber = handle.value or 0
            self._enable_callbacks()
        if lib.fl_start_flusher():  # the writer started it; again, in case it could not
            self._note("ledger: the background flush thread did not start; flushes at syncs and exit only")
        lib.fl_install_crash_flush(1)

    def _enable_callbacks(self) -> None:
        c, cl, lib = self.cupti, self.cl, self.lib
        apis = (LAUNCH_APIS if self.launches == "callback" else ()) + ALLOC_APIS + tuple(SYNC_APIS)
        for api in apis:
            cbid = getattr(c.driver_api_trace_cbid, api, None)
            if cbid is None:
                continue
            kind = (3 if api in LAUNCH_APIS else _KINDS[SYNC_APIS[api]] if api in SYNC_APIS
                    else 2 if api in FREE_APIS else 1)
            lib.fl_cbparams(int(cbid), *(API_PARAMS.get(api, (0, 0, 0, 0, 0, 0))))
            if lib.fl_cbid(int(cbid), kind, api.encode()) == 0:
                cl.cuptiEnableCallback(1, self.subscriber, int(c.CallbackDomain.DRIVER_API), int(cbid))

    def _check(self, status: int, what: str) -> None:
        if status:
            raise self.cupti.cuptiError(status) if hasattr(self.cupti, "cuptiError") else RuntimeError(
                f"CUPTI {what}: status {status}")

    def flush(self) -> None:
        self.lib.fl_flush()

    def stats(self) -> dict[str, int]:
        return native.stats(self.lib)

    def stop(self) -> None:
        c, cl, lib = self.cupti, self.cl, self.lib
        try:
            lib.fl_flush()
        finally:
            # no more flushes from the C thread (it goes on prefaulting the writer's pages) or from
            # a signal: CUPTI may be torn down before the process ends
            lib.fl_functions(native.address(cl, "cuptiActivityGetNextRecord"), None, 0)
            lib.fl_remove_crash_flush()
            if self.subscriber is not None:
                cl.cuptiUnsubscribe(self.subscriber)
                self.subscriber = None
            if self.allocs == "activity":
                cl.cuptiActivityDisable(int(c.ActivityKind.MEMORY2))
            lib.fl_alloc_source(0)
            if self.launches == "activity":
                cl.cuptiActivityDisable(int(c.ActivityKind.CONCURRENT_KERNEL))
            s = self.stats()
            if s.get("lost") or s.get("buffer_errors"):
                self.writer.record(EVENT_NOTE, NAME, message=(
                    f"ledger: native CUPTI records lost: {s['lost']}, activity buffer errors: {s['buffer_errors']}"))


def start(writer: LedgerWriter, cupti: Any, say: Callable[[str], None],
          allocs: str = "activity") -> NativeCuptiSource:
    """Start the compiled source; ``allocs``: where allocation lines come from unless
    :data:`ALLOCS_ENV` says otherwise (:data:`ALLOCS`)."""
    src = NativeCuptiSource(writer, cupti, say, allocs)
    src.start()
    return src
