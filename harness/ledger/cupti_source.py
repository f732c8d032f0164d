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
(:func:`memory_record`, :func:`callback_record`, :func:`kernel_line`, :class:`Clock`,
:class:`RawStruct`) take plain objects and bytes so they are unit-tested without CUPTI.

Routes (:mod:`.route`): this module is the ``python`` route and, with launches from CUPTI's
kernel activity records instead of a callback per launch, the ``activity`` route (a): no Python
runs per launch on the launching thread; each kernel record becomes a launch line when its buffer
is handed over (every ``FLUSH_GAP``, forced, or at a failure), attributed to the test running at
its time; a kernel the fault swallowed (CUPTI reports start and end 0) gets the latest of the last
successful synchronization, the last kernel end and the start of the running test
(``t_estimated``), all of which it followed. The compiled routes are :mod:`.cupti_native`;
:func:`start` picks.
"""

from __future__ import annotations

import ctypes
import dataclasses
import operator
import os
import re
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from faulthunt import context
from faulthunt.ledger.writer import LedgerWriter, refining, stack_json
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
        take = [pos[n] for n in names]
        self.names = names
        unpack_from = self._struct.unpack_from
        if take == list(range(len(take))):
            self.unpack = unpack_from  # type: ignore[method-assign, assignment]  # fields already in order
        else:
            pick = operator.itemgetter(*take)
            if len(take) == 1:
                self.unpack = lambda data: (pick(unpack_from(data)),)  # type: ignore[method-assign]
            else:
                self.unpack = lambda data: pick(unpack_from(data))  # type: ignore[method-assign]

    def unpack(self, data: Any) -> tuple[int, ...]:
        """The named fields, in the order given, from a buffer holding one record (replaced per
        instance by the cheapest way for its field order)."""
        raise NotImplementedError


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


def memory_line(f: tuple[int, ...], clock: Clock, pid: int, nodeid: str | None, stack: str | None) -> str | None:
    """:func:`memory_record` as a line (no newline), from :data:`MEM_FIELDS` values in order: the
    activity route writes a whole buffer's records this way, without a dict or the encoder per
    record. ``stack`` is encoded JSON. Pure."""
    (_kind, op, mkind, cid, address, nbytes, ts, dev, stream, is_async, ptype, paddr) = f
    if op != OP_ALLOCATION and op != OP_RELEASE:
        return None
    wall0 = round(clock.wall * 1e9)
    mono0 = round(clock.mono * 1e9)
    line = (f'{{"event":"{EVENT_ALLOC if op == OP_ALLOCATION else EVENT_FREE}","t":{wall0 + ts - clock.cupti_ns}e-9,'
            f'"t_mono":{mono0 + ts - clock.cupti_ns}e-9,"pid":{pid},"nodeid":{"null" if nodeid is None else _json_s(nodeid)},'
            f'"source":"{NAME}","address":{address},"kind":"{KIND_DEVICE}",'
            f'"{"size" if op == OP_ALLOCATION else "size_released"}":{nbytes},'
            f'"memory_kind":"{MEMORY_KINDS.get(mkind, "unknown")}","correlation_id":{cid},'
            f'"device_id":{dev},"stream_id":{stream}')
    if is_async:
        line += ',"async":true'
    ptype_name = POOL_TYPES.get(ptype)
    if ptype_name:
        line += f',"pool":{{"type":"{ptype_name}","address":{paddr}}}'
    return line + (f',"stack":{stack}}}' if stack else "}")


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


#: the kernel activity fields read (the grid and block ones when the dtype has them)
KERNEL_FIELDS = ("kind", "correlation_id", "start", "end", "name", "device_id", "stream_id",
                 "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
KERNEL_REQUIRED = ("kind", "correlation_id", "start", "end", "name")


def kernel_dtype(cupti: Any) -> Any:
    """cupti-python's dtype of the kernel activity record (the newest ``activity_kernelN_dtype``:
    the record version the matching libcupti writes), or None."""
    best: tuple[int, Any] | None = None
    for name in dir(cupti):
        m = re.fullmatch(r"activity_kernel(\d+)_dtype", name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), getattr(cupti, name))
    return best[1] if best else None


def kernel_line(f: dict[str, Any], clock: Clock, pid: int, nodeid_at: Callable[[int], str | None],
                estimate_ns: int) -> tuple[str, int]:
    """(a launch line without newline, its wall time in ns) for one kernel activity record's
    fields (names of :data:`KERNEL_FIELDS`; ``name`` already a str); ``nodeid_at(t_ns)`` is the
    test running then. Pure given that.

    A kernel the fault swallowed has start 0: it gets ``estimate_ns`` and ``t_estimated``.
    """
    start, end = int(f.get("start") or 0), int(f.get("end") or 0)
    wall0 = round(clock.wall * 1e9)
    t = estimate_ns if not start else wall0 + (start - clock.cupti_ns)
    nid = nodeid_at(t)
    line = (f'{{"event":"launch","t":{t}e-9,"pid":{pid},"nodeid":{"null" if nid is None else _json_s(nid)},"source":"{NAME}",'
            f'"kernel":{_json_s(f.get("name") or "<unknown>")},"via":"activity","correlation_id":{int(f["correlation_id"])}')
    if start and end:
        line += f',"t_end":{wall0 + (end - clock.cupti_ns)}e-9'
    if not start:
        line += ',"t_estimated":true'
    if "grid_x" in f:
        line += (f',"grid":[{f["grid_x"]},{f["grid_y"]},{f["grid_z"]}]'
                 f',"block":[{f["block_x"]},{f["block_y"]},{f["block_z"]}]')
    for k in ("device_id", "stream_id"):
        if k in f:
            line += f',"{k}":{int(f[k])}'
    return line + "}", t


def _json_s(s: str) -> str:
    from json.encoder import encode_basestring_ascii

    return encode_basestring_ascii(s)


def _failed(result_ptr: Any) -> bool:
    """Did the API call whose ``CUresult*`` this is return an error? (Unknown: yes.)"""
    if not isinstance(result_ptr, int) or not result_ptr:
        return True
    try:
        return ctypes.c_int.from_address(result_ptr).value != 0
    except (ValueError, OverflowError):
        return True


def _import() -> Any:
    from cupti import cupti

    return cupti


def problem() -> str | None:
    """None when CUPTI can be loaded here, else why not and what to do."""
    try:
        cupti = _import()
    except ImportError as exc:
        return (f"cupti-python is not installed ({exc.name or exc}); "
                "pip install 'cupti-python==<your CUDA major>.*' (e.g. 13.* for CUDA 13)")
    except Exception as exc:  # noqa: BLE001 - the extension loaded but libcupti did not (the binding's own errors)
        return f"cupti-python could not load libcupti ({exc}); install nvidia-cuda-cupti matching your CUDA"
    try:
        cupti.get_timestamp()
    except Exception as exc:  # noqa: BLE001 - the binding's CUPTIError or a loader error: either way CUPTI is unusable
        return f"libcupti is not usable ({exc}); check the driver and the nvidia-cuda-cupti version"
    return None


class CuptiSource:
    """The running CUPTI source of this process."""

    name = NAME

    def __init__(self, writer: LedgerWriter, say: Callable[[str], None], launches: str | None = None) -> None:
        self.cupti = self.module = _import()
        #: ``callback``: a launch line per launch callback; ``activity``: from kernel activity records
        self.launches = launches or writer.route.launches
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
        self._kinds: tuple[int, ...] = ()
        self._kraw: RawStruct | None = None
        #: wall ns of the last successful synchronization and the last kernel end seen: the time
        #: given to a kernel whose record has none (the one a fault swallowed)
        self._last_ok_sync = 0
        self._last_kernel_end = 0
        if self.launches == "activity":
            self._kinds = tuple(int(getattr(c.ActivityKind, k)) for k in ("CONCURRENT_KERNEL", "KERNEL")
                                if hasattr(c.ActivityKind, k))
            kd = kernel_dtype(self.module)
            names = tuple(n for n in KERNEL_FIELDS if kd is not None and kd.fields and n in kd.fields)
            if kd is None or not set(KERNEL_REQUIRED) <= set(names) or not self._kinds:
                self.launches = "callback"
                self._activity_problem = "cupti-python has no usable kernel activity dtype"
            else:
                self._kraw = RawStruct(kd, names)

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
            except Exception as exc:  # noqa: BLE001 - the raw-bytes route turns itself off on any failure; the object route takes over
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

    def _kernel_fields(self, act: Any) -> dict[str, Any] | None:
        """The kernel record's fields (from its bytes, or cupti-python's attributes), or None when
        ``act`` is not a kernel record."""
        data = getattr(act, "_data", None)
        if data is not None and self._kraw is not None:
            kind = struct.unpack_from("<i", data)[0]
            if kind not in self._kinds:
                return None
            f: dict[str, Any] = dict(zip(self._kraw.names, self._kraw.unpack(data)))
            f["name"] = ctypes.string_at(f["name"]).decode("utf-8", "replace") if f["name"] else None
            return f
        if int(getattr(act, "kind", -1)) not in self._kinds:
            return None
        return {n: getattr(act, n) for n in KERNEL_FIELDS if hasattr(act, n)}

    def _kernel(self, f: dict[str, Any], put: bool = True) -> str:
        # a kernel the fault swallowed was launched after all of these (see kernel_line)
        changed = round((self.writer.test_changed_at() or 0) * 1e9)
        est = max(self._last_ok_sync, self._last_kernel_end, changed) + 1
        line, _t = kernel_line(f, self.clock, self.pid, lambda t: self.writer.test_at(t / 1e9), est)
        if f.get("start") and f.get("end"):
            end = round(self.clock.wall * 1e9) + int(f["end"]) - self.clock.cupti_ns
            self._last_kernel_end = max(self._last_kernel_end, end)
        if put:
            self.writer.put_line(line)
            self.records += 1
        return line

    def _buffer_lines(self, activities: list[Any]) -> bool:
        """The activity route's decoding: every record of a buffer read from its bytes, formatted
        as a line and written in one put. False when the records have no bytes (cupti-python's
        objects): the general path below then does it record by record."""
        memraw, kraw = self._memraw, self._kraw
        if memraw is None or kraw is None or not activities or getattr(activities[0], "_data", None) is None:
            return False
        lines = []
        unpack_kind = struct.Struct("<i").unpack_from
        mem2, kinds, clock, pid, pending, lock = self._memory2, self._kinds, self.clock, self.pid, self.pending, self._lock
        test_at = self.writer.test_at
        for act in activities:
            try:
                data = act._data
                kind = unpack_kind(data)[0]
                if kind == mem2:
                    f = memraw.unpack(data)
                    with lock:
                        nodeid, stack = pending.pop(f[3], (None, None))
                    if nodeid is None:
                        nodeid = test_at((round(clock.wall * 1e9) + f[6] - clock.cupti_ns) / 1e9)
                    line = memory_line(f, clock, pid, nodeid, stack)
                    if line is not None:
                        lines.append(line)
                elif kind in kinds:
                    kf = self._kernel_fields(act)
                    if kf is not None:
                        lines.append(self._kernel(kf, put=False))
            except Exception as exc:  # noqa: BLE001 - never raise into CUPTI's thread
                print(f"faulthunt ledger: bad CUPTI record: {exc!r}", file=sys.stderr)
        if lines:
            self.writer.put_line("\n".join(lines))
            self.records += len(lines)
        return True

    def _buffer_completed(self, activities: list[Any]) -> None:
        if self._kinds and self._buffer_lines(activities):
            return
        for act in activities:
            try:
                if self._kinds:
                    kf = self._kernel_fields(act)
                    if kf is not None:
                        self._kernel(kf)
                        continue
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
            except Exception as exc:  # noqa: BLE001 - never raise into CUPTI's thread
                print(f"faulthunt ledger: bad CUPTI record: {exc!r}", file=sys.stderr)

    def _flush_forced(self, why: str) -> None:
        """Force CUPTI to hand over every pending record now (about 1 ms on the H200)."""
        self.dirty = False
        self._last_flush = time.monotonic()
        self.flushes += 1
        try:
            with self._flush_lock:
                self.cupti.activity_flush_all(self._forced)
            if self.writer.route.deferred:
                self.writer.drain()
        except Exception as exc:  # noqa: BLE001 - a failed forced flush is said once; the background flush still runs
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
            sym: int | None
            if raw is not None:
                try:
                    site, sym, retp, cid = raw.unpack(cbdata._data)
                except Exception as exc:  # noqa: BLE001 - the raw-bytes route turns itself off on any failure; the object route takes over
                    self._raw_off("callback", f"unpack failed: {exc!r}")
                else:
                    if self._checks["callback"] > 0:
                        self._check("callback", cbdata, {"callback_site": site, "correlation_id": cid})
                        raw = self._cbraw
            if raw is None:
                site, sym, cid = cbdata.callback_site, None, cbdata.correlation_id
            entering = site == self._enter
            if kind in (_ALLOC, _FREE):
                if not entering:
                    # an allocation call that failed may be reporting a fault's sticky error
                    if self.launches == "activity" and _failed(retp if raw is not None else
                                                               getattr(cbdata, "function_return_value", 0)):
                        self._flush_forced("api error")
                    return
                w = self.writer
                stack = (stack_json() if (w.alloc_stacks and (w.sampler is None or w.sampler.due())
                                          if kind == _ALLOC else w.all_stacks)
                         and not (self.launches == "activity" and refining()) else None)
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
                bad = _failed(retp if raw is not None else getattr(cbdata, "function_return_value", 0))
                if (self.dirty or self._always) and (self.flush_on_launch or bad
                                                     or time.monotonic() - self._last_flush >= FLUSH_GAP):
                    self._flush_forced("sync")
                got = callback_record(self._cbnames.get(cbid) or cbdata.function_name, None, False, None)
                if got is not None:
                    rec = self.writer.record(got[0], NAME, **got[1], failed=True if bad else None)
                    if not bad:
                        self._last_ok_sync = round(rec["t"] * 1e9)
        except Exception as exc:  # noqa: BLE001 - never raise into CUPTI's callback (the user's CUDA call)
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
        if self.writer.route.launches == "activity":
            if self.launches == "activity":
                self.writer.record(EVENT_NOTE, NAME, message="ledger: launches from CUPTI kernel activity "
                                   "records, attributed to the test running at their time")
            else:
                msg = f"ledger: launches from callbacks ({getattr(self, '_activity_problem', '')})"
                self.say(msg)
                self.writer.record(EVENT_NOTE, NAME, message=msg)
        c.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        c.activity_enable(c.ActivityKind.MEMORY2)
        self.writer.cupti = NAME
        if self.launches == "activity":
            self.writer.follow_tests()
            c.activity_enable(c.ActivityKind.CONCURRENT_KERNEL)
            self._always = True  # nothing else says a kernel ran: flush on the period
            self._flush_on_sigterm()
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
            for api in (LAUNCH_APIS if self.launches == "callback" else ()) + ALLOC_APIS + tuple(SYNC_APIS):
                cbid = getattr(cbids, api, None)
                if cbid is None:
                    continue
                self._cbnames[int(cbid)] = api
                self._cbkind[int(cbid)] = (_LAUNCH if api in LAUNCH_APIS else _SYNC if api in SYNC_APIS
                                           else _FREE if api in FREE_APIS else _ALLOC)
                c.enable_callback(1, self.subscriber, c.CallbackDomain.DRIVER_API, cbid)
        self._flusher = threading.Thread(target=self._background, name="faulthunt-ledger-flush", daemon=True)
        self._flusher.start()

    def _flush_on_sigterm(self) -> None:
        """A SIGTERM (a supervisor ending the worker) flushes before the process goes, when nothing
        else handles it. Fatal signals cannot run Python: the compiled routes cover those."""
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return

            def on_term(signum: int, _frame: Any) -> None:
                try:
                    self._flush_forced("SIGTERM")
                finally:
                    signal.signal(signum, signal.SIG_DFL)
                    os.kill(os.getpid(), signum)

            signal.signal(signal.SIGTERM, on_term)
        except ValueError:  # not the main thread
            pass

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
            if self.launches == "activity":
                c.activity_disable(c.ActivityKind.CONCURRENT_KERNEL)


def start(writer: LedgerWriter, say: Callable[[str], None] = lambda m: None, *,
          allocs: str = "activity") -> Any:
    """Start CUPTI recording into ``writer`` on its route (raises if CUPTI will not start).

    On a compiled route the compiled source is tried first; when it cannot be set up (no single
    libcupti, a layout it cannot read) the reason is said and the Python source takes over.
    ``allocs``: where the compiled source takes allocation lines from (``cupti_native.ALLOCS``);
    the Python source always reads MEMORY2 records.
    """
    if writer.route.compiled and writer._sink is not None:
        from faulthunt.ledger import cupti_native

        module = _import()
        try:
            return cupti_native.start(writer, module, say, allocs)
        except Exception as exc:  # noqa: BLE001 - the compiled route falls back to Python on any failure, said
            msg = f"ledger: compiled CUPTI route unavailable ({exc}); CUPTI through Python"
            say(msg)
            writer.record(EVENT_NOTE, NAME, message=msg)
    src = CuptiSource(writer, say)
    src.start()
    return src
