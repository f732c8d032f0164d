"""CUPTI source: every driver-level allocation and release, every launch and synchronization.

Uses the ``cupti-python`` package (``from cupti import cupti``; pick the release matching the CUDA
major in use: ``pip install 'cupti-python==13.*'`` for CUDA 13). API names below are those of
cupti-python 13.0 (``cupti/cupti.pyi`` and its bundled samples):

- Activity API: ``activity_enable(ActivityKind.MEMORY2)`` gives one ``ActivityMemory4`` record
  per allocation and per release (``memory_operation_type`` ALLOCATION / RELEASE, ``address``,
  ``bytes``, ``memory_kind``, ``timestamp`` in CUPTI ns, ``correlation_id``, ``is_async``,
  ``memory_pool_config``), async pools and VMM included; delivered in buffers through
  ``activity_register_callbacks(buffer_requested, buffer_completed)``.
- Callback API: ``subscribe_v2(callback, userdata, SubscriberParams.ptr)`` and
  ``enable_callback(1, subscriber, CallbackDomain.DRIVER_API, driver_api_trace_cbid.X)`` for the
  launch, allocation and synchronization entry points. The callback runs on the calling thread,
  so the Python stack is there to take; ``cbdata.symbol_name`` names the kernel and
  ``cbdata.correlation_id`` joins a call to its MEMORY2 record.

Crash safety: launch and sync records are written in the callback, before the kernel runs.
Allocation records arrive in activity buffers, which CUPTI hands over only when full or when
forced (its periodic flush returns full buffers only). ``cuptiActivityFlushAll(FORCED)`` costs
about a millisecond, so forcing it before every launch that follows an allocation made an
allocation-heavy loop 12x slower on the H200. The default policy (``FAULTHUNT_LEDGER_FLUSH=sync``):
force a flush before a launch that follows an allocation only if the last forced flush is at least
:data:`FLUSH_GAP` old (so the first launch after a quiet spell, the usual faulting test, has its
allocation on disk before it starts), at a synchronization that returns with records pending
(at once if it failed, the path a fault is reported on; else on the same :data:`FLUSH_GAP` rate),
from a background thread every :data:`FLUSH_GAP` while records are pending, and at
exit. What a hard kill (SIGKILL, abort) can then lose is the driver-level allocations of the last
:data:`FLUSH_GAP` seconds; framework refinements (numba, CuPy, torch) write synchronously and lose
nothing. ``FAULTHUNT_LEDGER_FLUSH=launch`` restores the strict flush before every such launch.
Stacks are taken at allocation calls only unless ``FAULTHUNT_LEDGER_STACKS=all``.

Only one CUPTI subscriber may exist per process (Nsight Systems, another profiler): then
``subscribe_v2`` fails with ``ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED``; the ledger says who holds it
and falls back to activity records alone (allocations, no launches or stacks).

The hot paths (callbacks, activity buffers) run through ctypes on the same libcupti
(:mod:`.cupti_direct`), and fields are read from record bytes (:class:`RawStruct`): cupti-python's
per-record numpy-backed objects cost more than the launches they describe. The pure parts
(:func:`memory_record`, :func:`callback_record`, :class:`Clock`, :class:`RawStruct`) take plain
objects and bytes so they are unit-tested without CUPTI.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from faulthunt import context
from faulthunt.ledger.writer import LedgerWriter, stack_json
from faulthunt.records.ledger import EVENT_ALLOC, EVENT_FREE, EVENT_LAUNCH, EVENT_NOTE, EVENT_SYNC, KIND_DEVICE

NAME = "cupti"
#: CUpti_ActivityMemoryOperationType (cupti_activity.h); checked against cupti's enum at start
OP_ALLOCATION = 1
OP_RELEASE = 2
#: CUpti_ActivityMemoryKind names by value (cupti_activity.h)
MEMORY_KINDS = {0: "unknown", 1: "pageable", 2: "pinned", 3: "device", 4: "array", 5: "managed",
                6: "device_static", 7: "managed_static"}
#: CUpti_ActivityMemoryPoolType
POOL_TYPES = {0: None, 1: "local", 2: "imported"}

LAUNCH_APIS = ("cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
               "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuGraphLaunch",
               "cuGraphLaunch_ptsz", "cuLaunchGrid", "cuLaunchGridAsync", "cuLaunch")
ALLOC_APIS = ("cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemAllocManaged", "cuMemAllocAsync",
              "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz",
              "cuMemCreate", "cuMemMap", "cuMemFree_v2", "cuMemFreeAsync", "cuMemFreeAsync_ptsz",
              "cuMemUnmap", "cuMemRelease")
SYNC_APIS = {"cuCtxSynchronize": "context", "cuCtxSynchronize_v2": "context",
             "cuStreamSynchronize": "stream", "cuStreamSynchronize_ptsz": "stream",
             "cuEventSynchronize": "event"}
#: correlation ids whose stack waits for its MEMORY2 record; bounded so a lost record can't leak
MAX_PENDING = 4096
FLUSH_ENV = "FAULTHUNT_LEDGER_FLUSH"
#: seconds: the least time between forced flushes from the launch path; the background flush period
FLUSH_GAP = 0.1
#: what the callback does per API (looked up by cbid: one dict lookup on the hot path)
_ALLOC, _FREE, _LAUNCH, _SYNC = 1, 2, 3, 4
FREE_APIS = ("cuMemFree_v2", "cuMemFreeAsync", "cuMemFreeAsync_ptsz", "cuMemUnmap", "cuMemRelease")


@dataclasses.dataclass(frozen=True)
class Clock:
    """CUPTI timestamps (ns, CUPTI's own clock) -> wall and monotonic seconds.

    Taken once at start from ``get_timestamp()`` read between two ``time.time()`` calls; CUPTI's
    clock and the wall clock run at the same rate over a test run.
    """

    cupti_ns: int
    wall: float
    mono: float

    def wall_of(self, ns: int) -> float:
        return self.wall + (ns - self.cupti_ns) / 1e9

    def mono_of(self, ns: int) -> float:
        return self.mono + (ns - self.cupti_ns) / 1e9


#: numpy (kind, itemsize) -> struct code
_CODES = {("i", 1): "b", ("u", 1): "B", ("i", 2): "h", ("u", 2): "H", ("i", 4): "i", ("u", 4): "I",
          ("i", 8): "q", ("u", 8): "Q"}


class RawStruct:
    """Reads named fields of a cupti-python record straight from its bytes, in one unpack.

    cupti-python wraps each callback-data and activity record in an object whose attributes go
    through a numpy record array: about 3 microseconds a field on the H200, so a callback that
    read four fields cost more than the launch it watched. The record's bytes are its ``_data``
    array; the field offsets come from cupti-python's own dtype (``callback_data_dtype``,
    ``activity_memory4_dtype``), nested fields named ``outer.inner``. Pure given the dtype.
    """

    def __init__(self, dtype: Any, names: tuple[str, ...]) -> None:
        spots = []
        for name in names:
            dt, off = dtype, 0
            for part in name.split("."):
                sub, o = dt.fields[part][:2]
                dt, off = sub, off + o
            code = _CODES.get((dt.kind, dt.itemsize))
            if code is None:
                raise ValueError(f"field {name} has dtype {dt}, not an integer")
            spots.append((off, code, name))
        order = sorted(spots)
        fmt, at = "<", 0
        for off, code, _name in order:
            if off < at:
                raise ValueError(f"fields overlap at offset {off}")
            fmt += ("%dx" % (off - at) if off > at else "") + code
            at = off + struct.calcsize("<" + code)
        self.size = at
        self._struct = struct.Struct(fmt)
        pos = {name: i for i, (_o, _c, name) in enumerate(order)}
        self._take = [pos[n] for n in names]
        self.names = names

    def unpack(self, data: Any) -> tuple[int, ...]:
        """The named fields, in the order given, from a buffer holding one record."""
        got = self._struct.unpack_from(data)
        return tuple(got[i] for i in self._take)


#: records of each kind whose raw decoding is compared with cupti-python's attributes
RAW_CHECKS = 8
#: the callback fields read per call: site, symbol (char*), return value (CUresult*), correlation
CB_FIELDS = ("callback_site", "symbol_name", "function_return_value", "correlation_id")
#: the MEMORY2 fields memory_record reads
MEM_FIELDS = ("kind", "memory_operation_type", "memory_kind", "correlation_id", "address", "bytes",
              "timestamp", "device_id", "stream_id", "is_async", "memory_pool_config.memory_pool_type",
              "memory_pool_config.address")


@dataclasses.dataclass(frozen=True)
class MemoryFields:
    """The MEMORY2 fields :func:`memory_record` reads, decoded by :class:`RawStruct`."""

    kind: int
    memory_operation_type: int
    memory_kind: int
    correlation_id: int
    address: int
    bytes: int
    timestamp: int
    device_id: int
    stream_id: int
    is_async: int
    memory_pool_type: int
    memory_pool_address: int


def memory_record(act: Any, clock: Clock, pending: dict[int, tuple[str | None, list[str]]] | None = None,
                  pid: int | None = None) -> dict[str, Any] | None:
    """A ledger record from one MEMORY2 activity record (``ActivityMemory4``-like), or None.

    ``pending`` maps correlation id -> (nodeid, stack) captured at the API call; the entry is
    consumed. Pure apart from that dict.
    """
    op = getattr(act, "memory_operation_type", None)
    if op not in (OP_ALLOCATION, OP_RELEASE):
        return None
    cid = getattr(act, "correlation_id", None)
    nodeid, stack = (pending.pop(cid, (None, None)) if pending is not None and cid is not None
                     else (None, None))
    ts = int(getattr(act, "timestamp", 0))
    rec: dict[str, Any] = {
        "event": EVENT_ALLOC if op == OP_ALLOCATION else EVENT_FREE,
        "t": clock.wall_of(ts),
        "t_mono": clock.mono_of(ts),
        "pid": pid if pid is not None else getattr(act, "process_id", None),
        "nodeid": nodeid,
        "source": NAME,
        "address": int(act.address),
        "kind": KIND_DEVICE,
    }
    if op == OP_ALLOCATION:
        rec["size"] = int(act.bytes)
    else:
        rec["size_released"] = int(act.bytes)
    rec["memory_kind"] = MEMORY_KINDS.get(getattr(act, "memory_kind", 0), "unknown")
    for field in ("correlation_id", "device_id", "stream_id"):
        v = getattr(act, field, None)
        if v is not None:
            rec[field] = int(v)
    if getattr(act, "is_async", 0):
        rec["async"] = True
    if hasattr(act, "memory_pool_type"):  # flat (MemoryFields)
        ptype, paddr = POOL_TYPES.get(act.memory_pool_type), act.memory_pool_address
    else:
        pool = getattr(act, "memory_pool_config", None)
        ptype = POOL_TYPES.get(getattr(pool, "memory_pool_type", 0)) if pool is not None else None
        paddr = getattr(pool, "address", 0)
    if ptype:
        rec["pool"] = {"type": ptype, "address": int(paddr)}
    if stack:
        rec["stack"] = stack
    return rec


def callback_record(function_name: str, symbol_name: str | None, entering: bool,
                    correlation_id: int | None) -> tuple[str, dict[str, Any]] | None:
    """(event, fields) for a driver-API callback, or None for calls not recorded. Pure.

    Launches are recorded on entry (before the kernel can fault), synchronizations on exit (a
    sync that returned means every earlier launch finished).
    """
    if entering and function_name in LAUNCH_APIS:
        kernel = symbol_name or ("<graph>" if function_name.startswith("cuGraphLaunch") else "<unknown>")
        return EVENT_LAUNCH, {"kernel": kernel, "api": function_name, "correlation_id": correlation_id}
    if not entering and function_name in SYNC_APIS:
        return EVENT_SYNC, {"what": SYNC_APIS[function_name], "api": function_name}
    return None


def _failed(result_ptr: Any) -> bool:
    """Did the API call whose ``CUresult*`` this is return an error? (Unknown: yes.)"""
    if not isinstance(result_ptr, int) or not result_ptr:
        return True
    try:
        return ctypes.c_int.from_address(result_ptr).value != 0
    except (ValueError, OverflowError):
        return True


def _import() -> Any:
    from cupti import cupti  # type: ignore[import-not-found]

    return cupti


def problem() -> str | None:
    """None when CUPTI can be loaded here, else why not and what to do."""
    try:
        cupti = _import()
    except ImportError as exc:
        return (f"cupti-python is not installed ({exc.name or exc}); "
                "pip install 'cupti-python==<your CUDA major>.*' (e.g. 13.* for CUDA 13)")
    except Exception as exc:  # the extension loaded but libcupti did not
        return f"cupti-python could not load libcupti ({exc}); install nvidia-cuda-cupti matching your CUDA"
    try:
        cupti.get_timestamp()
    except Exception as exc:
        return f"libcupti is not usable ({exc}); check the driver and the nvidia-cuda-cupti version"
    return None


class CuptiSource:
    """The running CUPTI source of this process."""

    name = NAME

    def __init__(self, writer: LedgerWriter, say: Callable[[str], None]) -> None:
        self.cupti = _import()
        from faulthunt.ledger.cupti_direct import direct

        # the hot paths through ctypes (see cupti_direct); cupti-python's route if that fails
        bound, self.direct_problem = direct(self.cupti, RawStruct)
        if bound is not None:
            self.cupti = bound
        self.route = "direct" if bound is not None else "cupti-python"
        self.writer = writer
        self.say = say
        self.pending: dict[int, tuple[str | None, Any]] = {}
        self.subscriber: int | None = None
        self.dirty = False
        policy = os.environ.get(FLUSH_ENV, "sync")
        self.flush_on_launch = policy == "launch"
        self.flushes = 0
        self._last_flush = 0.0
        self.records = 0
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        #: no subscriber (another CUPTI client): nothing marks records pending, flush every period
        self._always = False
        self.pid = os.getpid()
        w0 = time.time()
        m0 = time.monotonic()
        ns = int(self.cupti.get_timestamp())
        w1 = time.time()
        self.clock = Clock(ns, (w0 + w1) / 2, m0 + (w1 - w0) / 2)
        c = self.cupti
        # The C values this module hard-codes for its pure parts must be cupti's.
        assert int(c.ActivityMemoryOperationType.ALLOCATION) == OP_ALLOCATION
        assert int(c.ActivityMemoryOperationType.RELEASE) == OP_RELEASE
        self._memory2 = int(c.ActivityKind.MEMORY2)
        self._enter = int(c.ApiCallbackSite.API_ENTER)
        self._forced = int(c.ActivityFlag.FLUSH_FORCED)
        self._cbnames: dict[int, str] = {}
        self._cbkind: dict[int, int] = {}
        # Field readers from cupti-python's own dtypes; each is checked against cupti-python's
        # attributes on its first RAW_CHECKS records and dropped (attributes used) on a mismatch.
        self._cbraw = self._raw_struct("callback_data_dtype", CB_FIELDS)
        self._memraw = self._raw_struct("activity_memory4_dtype", MEM_FIELDS)
        self._checks = {"callback": RAW_CHECKS, "memory": RAW_CHECKS}

    def _raw_struct(self, dtype_name: str, names: tuple[str, ...]) -> RawStruct | None:
        dtype = getattr(self.cupti, dtype_name, None)
        if dtype is None:
            return None
        try:
            return RawStruct(dtype, names)
        except (KeyError, ValueError, TypeError) as exc:
            self._raw_off(dtype_name, f"layout not readable ({exc})")
            return None

    def _raw_off(self, what: str, why: str) -> None:
        if what.startswith("callback"):
            self._cbraw = None
        else:
            self._memraw = None
        msg = f"ledger: reading CUPTI {what} records field by field ({why}); slower"
        self.say(msg)
        self.writer.record(EVENT_NOTE, NAME, message=msg)

    def _check(self, what: str, obj: Any, got: dict[str, Any]) -> None:
        """Compare raw-decoded fields with cupti-python's attributes (first records only)."""
        self._checks[what] -= 1
        for field, value in got.items():
            want = getattr(obj, field, value)
            if want != value:
                self._raw_off(what, f"{field}: raw {value!r} vs cupti-python {want!r}")
                return

    # activity buffers ------------------------------------------------------------------------
    def _buffer_requested(self) -> tuple[int, int]:
        return 8 * 1024 * 1024, 0

    def _memory_fields(self, act: Any) -> Any:
        """The activity's fields (MemoryFields from its bytes, or the object itself), or None
        when it is not a MEMORY2 record."""
        raw = self._memraw
        if raw is not None:
            try:
                f = MemoryFields(*raw.unpack(act._data))
            except Exception as exc:
                self._raw_off("memory", f"unpack failed: {exc!r}")
            else:
                if self._checks["memory"] > 0 and f.kind == self._memory2:
                    self._check("memory", act, {"address": f.address, "bytes": f.bytes,
                                                "memory_operation_type": f.memory_operation_type,
                                                "correlation_id": f.correlation_id, "timestamp": f.timestamp})
                    if self._memraw is None:
                        return self._memory_fields(act)
                return f if f.kind == self._memory2 else None
        return act if act.kind == self._memory2 else None

    def _buffer_completed(self, activities: list[Any]) -> None:
        for act in activities:
            try:
                fields = self._memory_fields(act)
                if fields is None:
                    continue
                with self._lock:
                    rec = memory_record(fields, self.clock, self.pending, self.pid)
                if rec is not None:
                    if rec["nodeid"] is None:
                        rec["nodeid"] = context.current_nodeid
                    self.writer.write(rec)
                    self.records += 1
            except Exception as exc:  # never raise into CUPTI's thread
                print(f"faulthunt ledger: bad CUPTI record: {exc!r}", file=sys.stderr)

    def _flush_forced(self, why: str) -> None:
        """Force CUPTI to hand over every pending record now (about 1 ms on the H200)."""
        self.dirty = False
        self._last_flush = time.monotonic()
        self.flushes += 1
        try:
            with self._flush_lock:
                self.cupti.activity_flush_all(self._forced)
        except Exception as exc:
            # Said once; the background flush still runs.
            if self.flush_on_launch:
                self.flush_on_launch = False
                msg = f"ledger: CUPTI flush at {why} failed ({exc}); background flush only"
                self.say(msg)
                self.writer.record(EVENT_NOTE, NAME, message=msg)

    # callbacks --------------------------------------------------------------------------------
    def _callback(self, _userdata: Any, domain: int, cbid: int, cbdata: Any) -> None:
        try:
            kind = self._cbkind.get(cbid)
            if kind is None:  # a cbid enabled by someone else or unknown to this table
                name = cbdata.function_name
                kind = (_LAUNCH if name in LAUNCH_APIS else _SYNC if name in SYNC_APIS
                        else _FREE if name in FREE_APIS else _ALLOC if name in ALLOC_APIS else 0)
                self._cbkind[cbid] = kind
                self._cbnames[cbid] = name
            if not kind:
                return
            raw = self._cbraw
            if raw is not None:
                try:
                    site, sym, retp, cid = raw.unpack(cbdata._data)
                except Exception as exc:
                    self._raw_off("callback", f"unpack failed: {exc!r}")
                else:
                    if self._checks["callback"] > 0:
                        self._check("callback", cbdata, {"callback_site": site, "correlation_id": cid})
                        raw = self._cbraw
            if raw is None:
                site, sym, cid = cbdata.callback_site, None, cbdata.correlation_id
            entering = site == self._enter
            if kind == _ALLOC or kind == _FREE:
                if entering:
                    stack = (stack_json() if (self.writer.alloc_stacks if kind == _ALLOC
                                              else self.writer.all_stacks) else None)
                    with self._lock:
                        if len(self.pending) >= MAX_PENDING:
                            self.pending.pop(next(iter(self.pending)))
                        self.pending[cid] = (context.current_nodeid, stack)
                    self.dirty = True
                return
            if kind == _LAUNCH:
                if not entering:
                    return
                if self.dirty and (self.flush_on_launch
                                   or time.monotonic() - self._last_flush >= FLUSH_GAP):
                    self._flush_forced("launch")
                if raw is not None:
                    symbol = ctypes.string_at(sym).decode("utf-8", "replace") if sym else None
                    if self._checks["callback"] > 0:
                        self._check("callback", cbdata, {"symbol_name": symbol})
                        if self._cbraw is None:
                            symbol = getattr(cbdata, "symbol_name", None)
                else:
                    symbol = getattr(cbdata, "symbol_name", None)
                got = callback_record(self._cbnames.get(cbid) or cbdata.function_name, symbol, True, cid)
                if got is not None:
                    f = got[1]
                    self.writer.launch(NAME, f["kernel"], f["api"], f["correlation_id"],
                                       stack=stack_json() if self.writer.all_stacks else None)
                return
            if not entering:  # _SYNC: on return; a fault is reported here, so flush first
                if self.dirty and (self.flush_on_launch or _failed(retp if raw is not None else
                                                                   getattr(cbdata, "function_return_value", 0))
                                   or time.monotonic() - self._last_flush >= FLUSH_GAP):
                    self._flush_forced("sync")
                got = callback_record(self._cbnames.get(cbid) or cbdata.function_name, None, False, None)
                if got is not None:
                    self.writer.record(got[0], NAME, **got[1])
        except Exception as exc:
            print(f"faulthunt ledger: CUPTI callback failed: {exc!r}", file=sys.stderr)

    def _background(self) -> None:
        while not self._stop.wait(FLUSH_GAP):
            if (self.dirty or self._always) and time.monotonic() - self._last_flush >= FLUSH_GAP:
                self._flush_forced("background")

    def start(self) -> None:
        c = self.cupti
        self.writer.record(EVENT_NOTE, NAME, message=(
            f"ledger: CUPTI calls direct (ctypes on cupti-python's libcupti, {getattr(c, 'path', '')})"
            if self.route == "direct" else
            f"ledger: CUPTI calls through cupti-python ({self.direct_problem})"))
        c.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        c.activity_enable(c.ActivityKind.MEMORY2)
        params = c.SubscriberParams()
        params.struct_size = c.SUBSCRIBER_PARAMS_SIZE
        params.subscriber_name = "faulthunt-ledger"
        try:
            self.subscriber = c.subscribe_v2(self._callback, None, params.ptr)
        except c.cuptiError as exc:
            status = getattr(exc, "status", None)
            if status == int(c.Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED):
                holder = getattr(params, "old_subscriber_name", None) or "another CUPTI client"
                msg = (f"ledger: CUPTI already has a subscriber ({holder}; a profiler such as nsys "
                       "or ncu?): recording allocations from activity records only, no launches "
                       "or stacks. Run without the profiler for the full ledger.")
            else:
                msg = f"ledger: CUPTI subscribe failed ({exc}): allocations only, no launches"
            self.say(msg)
            self.writer.record(EVENT_NOTE, NAME, message=msg)
            # without callbacks nothing marks records pending: flush on the period regardless
            self._always = True
        else:
            cbids = c.driver_api_trace_cbid
            for api in LAUNCH_APIS + ALLOC_APIS + tuple(SYNC_APIS):
                cbid = getattr(cbids, api, None)
                if cbid is None:
                    continue
                self._cbnames[int(cbid)] = api
                self._cbkind[int(cbid)] = (_LAUNCH if api in LAUNCH_APIS else _SYNC if api in SYNC_APIS
                                           else _FREE if api in FREE_APIS else _ALLOC)
                c.enable_callback(1, self.subscriber, c.CallbackDomain.DRIVER_API, cbid)
        self._flusher = threading.Thread(target=self._background, name="faulthunt-ledger-flush", daemon=True)
        self._flusher.start()

    def flush(self) -> None:
        self._flush_forced("request")

    def stop(self) -> None:
        c = self.cupti
        self._stop.set()
        try:
            self.flush()
        finally:
            if self.subscriber is not None:
                c.unsubscribe(self.subscriber)
                self.subscriber = None
            c.activity_disable(c.ActivityKind.MEMORY2)


def start(writer: LedgerWriter, say: Callable[[str], None] = lambda m: None) -> CuptiSource:
    """Start CUPTI recording into ``writer`` (raises if CUPTI will not start)."""
    src = CuptiSource(writer, say)
    src.start()
    return src
