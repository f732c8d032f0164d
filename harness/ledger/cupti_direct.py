"""Direct calls into libcupti for the ledger's hot paths, beside cupti-python.

cupti-python wraps every callback-data and activity record it hands to Python in an object backed
by a numpy record array. Creating one costs several microseconds on the H200 (numpy's
``recarray.__array_finalize__`` and ``__setattr__``), and the ledger gets one per launch entry,
per launch exit, per allocation call and per activity record: on an allocation-heavy loop that was
most of the ledger's cost (scripts/gpu/ledger_breakdown.py). :class:`DirectCupti` registers the
same Python callbacks with the same library through :mod:`ctypes` instead and gives them records
as plain bytes (``_data``), which :class:`~faulthunt.ledger.cupti_source.RawStruct` reads with
cupti-python's own dtype offsets. cupti-python is still what finds and loads libcupti, supplies
the enums (callback ids, activity kinds, results), the dtypes and the subscriber parameters; only
the calls on the hot paths go around it. Chosen by :data:`CALL_ENV` (``direct``, the default, or
``python``); when the direct route cannot be set up the CUPTI source says why and uses
cupti-python's.

C signatures (cupti_callbacks.h, cupti_activity.h, CUDA 13)::

    void CUpti_CallbackFunc(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void *cbdata)
    CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
                                  void *userdata, CUpti_SubscriberParams *params)
    CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                    CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
    void CUpti_BuffersCallbackRequestFunc(uint8_t **buffer, size_t *size, size_t *maxNumRecords)
    void CUpti_BuffersCallbackCompleteFunc(CUcontext context, uint32_t streamId, uint8_t *buffer,
                                           size_t size, size_t validSize)
    CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
                                           CUpti_Activity **record)
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from typing import Any

#: ``direct`` (default): hot paths through ctypes; ``python``: everything through cupti-python
CALL_ENV = "FAULTHUNT_LEDGER_CUPTI_CALL"
#: bytes of each activity buffer handed to CUPTI (CUPTI needs 8-byte alignment; malloc gives 16)
BUFFER_SIZE = 8 * 1024 * 1024

_c_void_pp = ctypes.POINTER(ctypes.c_void_p)
_c_size_p = ctypes.POINTER(ctypes.c_size_t)
CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p)
REQUESTED = ctypes.CFUNCTYPE(None, _c_void_pp, _c_size_p, _c_size_p)
COMPLETED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                             ctypes.c_size_t)


#: every C function pointer handed to CUPTI, kept for the life of the process: CUPTI may call a
#: registered buffer callback after the ledger stopped (it cannot be unregistered), and a freed
#: ctypes thunk would crash the process there
_REGISTERED: list[Any] = []


def loaded_libcupti(maps: str = "/proc/self/maps", major: int | None = None) -> str | None:
    """The path of the libcupti this process has loaded (cupti-python's), or None.

    Another copy can be in the process too (a framework's profiler bringing the libcupti of its
    own CUDA major); with ``major`` only ``libcupti.so.<major>`` counts, and more than one
    candidate left is no answer (the direct route is then not used).
    """
    found: list[str] = []
    try:
        with open(maps, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if "libcupti.so" in line:
                    path = line.split(None, 5)[-1].strip()
                    if path.startswith("/") and path not in found:
                        found.append(path)
    except OSError:
        return None
    if major is not None:
        found = [p for p in found if os.path.basename(p).startswith(f"libcupti.so.{major}")] or \
                [p for p in found if os.path.basename(p) == "libcupti.so"]
    return found[0] if len(found) == 1 else None


def cupti_python_major() -> int | None:
    """The CUDA major cupti-python was built for (its release number's first part), or None."""
    try:
        from importlib.metadata import version

        return int(version("cupti-python").split(".")[0])
    except Exception:  # noqa: BLE001 - a missing, unparsable or broken dist-info all mean 'unknown'
        return None


class RawRecord:
    """A CUPTI record as bytes (a callback's ``CUpti_CallbackData`` copied out, or a memoryview of
    an activity record inside its buffer), its fields read lazily by name through ``layout``."""

    __slots__ = ("_data", "_layout")

    def __init__(self, data: bytes | memoryview, layout: Any) -> None:
        self._data = data
        self._layout = layout

    def __getattr__(self, name: str) -> Any:
        return self._layout.field(self._data, name)


class Layout:
    """Reads single named fields of one dtype from bytes (the slow, rarely used path); pointer
    fields named ``*_name`` are returned as the C string they point to."""

    def __init__(self, dtype: Any, raw_struct: Callable[[Any, tuple[str, ...]], Any]) -> None:
        self._dtype = dtype
        self._raw_struct = raw_struct
        self._one: dict[str, Any] = {}

    def field(self, data: Any, name: str) -> Any:
        rs = self._one.get(name)
        if rs is None:
            if self._dtype.fields is None or name not in self._dtype.fields:
                raise AttributeError(name)
            rs = self._one[name] = self._raw_struct(self._dtype, (name,))
        (value,) = rs.unpack(data)
        if name.endswith("_name"):
            return ctypes.string_at(value).decode("utf-8", "replace") if value else None
        return value


class DirectCupti:
    """The part of cupti-python's API the CUPTI source calls, with the hot paths through ctypes.

    Anything not defined here (enums, dtypes, ``SubscriberParams``, ``get_timestamp``) is
    cupti-python's. ``lib`` is the loaded libcupti (a :class:`ctypes.CDLL`, or a stand-in with the
    same functions in tests).
    """

    def __init__(self, cupti: Any, lib: Any, raw_struct: Callable[[Any, tuple[str, ...]], Any]) -> None:
        self._cupti = cupti
        self.lib = lib
        self.path = ""  # the library's file, for the ledger's note
        self.cuptiError = cupti.cuptiError
        self._end = int(cupti.Result.ERROR_MAX_LIMIT_REACHED)
        self._cb_layout = Layout(cupti.callback_data_dtype, raw_struct)
        self._cb_size = int(cupti.callback_data_dtype.itemsize)
        self._act_layout = Layout(cupti.activity_memory4_dtype, raw_struct)
        self._buffers: dict[int, Any] = {}
        for name, args, res in (
            ("cuptiSubscribe_v2", [ctypes.POINTER(ctypes.c_void_p), CALLBACK, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int),
            ("cuptiEnableCallback", [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32], ctypes.c_int),
            ("cuptiUnsubscribe", [ctypes.c_void_p], ctypes.c_int),
            ("cuptiActivityRegisterCallbacks", [REQUESTED, COMPLETED], ctypes.c_int),
            ("cuptiActivityGetNextRecord", [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int),
            ("cuptiActivityEnable", [ctypes.c_int], ctypes.c_int),
            ("cuptiActivityDisable", [ctypes.c_int], ctypes.c_int),
            ("cuptiActivityFlushAll", [ctypes.c_uint32], ctypes.c_int),
        ):
            fn = getattr(lib, name)  # AttributeError: an older libcupti; the caller falls back
            fn.argtypes = args
            fn.restype = res

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cupti, name)

    def _check(self, status: int) -> None:
        if status:
            raise self._cupti.cuptiError(status)

    # callbacks ---------------------------------------------------------------------------------
    def subscribe_v2(self, callback: Callable[..., None], userdata: Any, params_ptr: int) -> int:
        layout, size, string_at = self._cb_layout, self._cb_size, ctypes.string_at

        def trampoline(_u: Any, domain: int, cbid: int, cbdata: int) -> None:
            try:
                callback(None, domain, cbid, RawRecord(string_at(cbdata, size), layout))
            except BaseException as exc:  # noqa: BLE001 - never unwind into CUPTI (a C caller)
                print(f"faulthunt ledger: CUPTI callback raised {exc!r}", file=sys.stderr)

        fn = CALLBACK(trampoline)
        handle = ctypes.c_void_p()
        self._check(self.lib.cuptiSubscribe_v2(ctypes.byref(handle), fn, None, params_ptr))
        _REGISTERED.append(fn)
        return int(handle.value or 0)

    def enable_callback(self, enable: int, subscriber: int, domain: int, cbid: int) -> None:
        self._check(self.lib.cuptiEnableCallback(int(enable), subscriber, int(domain), int(cbid)))

    def unsubscribe(self, subscriber: int) -> None:
        self._check(self.lib.cuptiUnsubscribe(subscriber))

    # activity ----------------------------------------------------------------------------------
    def activity_register_callbacks(self, requested: Callable[[], tuple[int, int]],
                                    completed: Callable[[list[Any]], None]) -> None:
        buffers, layout, lib, end = self._buffers, self._act_layout, self.lib, self._end

        def on_requested(buf: Any, size: Any, max_records: Any) -> None:
            try:
                n = requested()[0] or BUFFER_SIZE
                mem = (ctypes.c_uint8 * n)()
                addr = ctypes.addressof(mem)
                buffers[addr] = mem
                buf[0] = addr
                size[0] = n
                max_records[0] = 0
            except BaseException as exc:  # noqa: BLE001 - never unwind into CUPTI (a C caller)
                print(f"faulthunt ledger: CUPTI buffer request failed: {exc!r}", file=sys.stderr)
                size[0] = 0

        def on_completed(_ctx: Any, _stream: int, buffer: int, _size: int, valid: int) -> None:
            mem = buffers.pop(buffer or 0, None)
            if mem is None:
                return
            try:
                view = memoryview(mem).cast("B")
                acts = []
                rec = ctypes.c_void_p()
                ref = ctypes.byref(rec)
                while True:
                    status = lib.cuptiActivityGetNextRecord(buffer, valid, ref)
                    if status:
                        if status != end:
                            print(f"faulthunt ledger: CUPTI activity buffer ended with status {status}",
                                  file=sys.stderr)
                        break
                    acts.append(RawRecord(view[(rec.value or 0) - buffer:], layout))
                if acts:
                    completed(acts)
            except BaseException as exc:  # noqa: BLE001 - never unwind into CUPTI (a C caller)
                print(f"faulthunt ledger: CUPTI buffer handling failed: {exc!r}", file=sys.stderr)

        req, comp = REQUESTED(on_requested), COMPLETED(on_completed)
        self._check(self.lib.cuptiActivityRegisterCallbacks(req, comp))
        _REGISTERED.extend((req, comp))

    def activity_enable(self, kind: int) -> None:
        self._check(self.lib.cuptiActivityEnable(int(kind)))

    def activity_disable(self, kind: int) -> None:
        self._check(self.lib.cuptiActivityDisable(int(kind)))

    def activity_flush_all(self, flag: int) -> None:
        self._check(self.lib.cuptiActivityFlushAll(int(flag)))


def _load(path: str) -> Any:
    return ctypes.CDLL(path)  # the library is loaded already: this is the same handle


def direct(cupti: Any, raw_struct: Callable[[Any, tuple[str, ...]], Any]) -> tuple[DirectCupti | None, str | None]:
    """(the direct binding, None), or (None, why not) — cupti-python's route is then used."""
    if os.environ.get(CALL_ENV, "direct") == "python":
        return None, f"{CALL_ENV}=python"
    for need in ("callback_data_dtype", "activity_memory4_dtype"):
        if getattr(cupti, need, None) is None:
            return None, f"cupti-python has no {need}"
    major = cupti_python_major()
    path = loaded_libcupti(major=major)
    if path is None:
        return None, ("no single loaded libcupti" + (f".so.{major}" if major else "")
                      + " among this process's libraries")
    try:
        bound = DirectCupti(cupti, _load(path), raw_struct)
        bound.path = path
        return bound, None
    except (OSError, AttributeError) as exc:
        return None, f"{path}: {exc}"
