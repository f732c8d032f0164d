"""Ledger rows: the overhead of recording.

- GPU: an allocation-heavy loop (allocate, launch, free, 3000 times; CuPy and numba) with the
  ledger ``auto`` against the same loop with it off, each in a fresh process, timed inside it
  (scripts/gpu/ledger_probe.py loop). Without a GPU the row says where it was measured instead.
- CPU: the CUPTI callback path of one alloc+launch iteration (four driver-API callbacks) against a
  constructed CUPTI stand-in whose forced flush is free: default policy (flush rate-limited,
  stacks on allocations) vs the first H200 run's (flush before every launch after an allocation,
  stacks on launches too). The note gives the forced-flush counts: each costs ~1 ms on the H200,
  which this CPU-only row cannot show.
- CPU: the writer's cost per record (its hot path: time, pid, test, source, kind, into the shared
  mapping) against the obvious crash-safe JSONL line (json.dumps + os.write of fewer fields).
- CPU, per route (docs/ledger.md, "Routes"): the CUPTI work of one alloc+launch+free iteration
  (callbacks as CUPTI makes them, activity records through real buffers and a C
  GetNextRecord: tests/cupti_standin.py plus a few lines of C compiled here) against the same driver
  calls into a no-op C callback; and the CuPy refinement per array against a hook that does nothing
  (CuPy's own dispatch). The harness calls the C callback through ctypes from Python, which a driver
  does not: both sides pay that, so the difference is the route's own work.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchrows import Row, Samples, paired

PROBE = Path(__file__).resolve().parents[1] / "gpu" / "ledger_probe.py"


def _loop(fw: str, mode: str, n: int, d: str) -> float | None:
    p = subprocess.run([sys.executable, str(PROBE), "loop", fw, mode, str(n), d],
                       capture_output=True, text=True, timeout=300)
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            return float(json.loads(line)["seconds"])
    return None


def gpu_alloc_loop(quick: bool) -> Row:
    title = "ledger overhead: alloc+launch+free loop (CuPy)"
    if shutil.which("nvidia-smi") is None:
        return Row(title, "ledger auto", "ledger off", None, None, "< 1.2x",
                   note="GPU only: scripts/gpu/ledger_probe.sh measures it (docs/ledger.md)")
    n = 300 if quick else 3000
    best = {"off": float("inf"), "auto": float("inf")}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(2):
            for mode in ("off", "auto"):
                t = _loop("cupy", mode, n, d)
                if t is not None:
                    best[mode] = min(best[mode], t)
    ok = all(v != float("inf") for v in best.values())
    return Row(title, "ledger auto", "ledger off", Samples((best["auto"],)) if ok else None,
               Samples((best["off"],)) if ok else None, "< 1.2x", note=f"{n} iterations, fresh process each, best of 2")


def writer_per_record(quick: bool) -> Row:
    from faulthunt.ledger.writer import LedgerWriter

    n = 20_000 if quick else 200_000
    with tempfile.TemporaryDirectory() as d:
        w = LedgerWriter(d)
        fd = os.open(Path(d) / "bare.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT)

        def ours() -> None:  # the hot path the sources use (memory-mapped backend, the default)
            for i in range(n):
                w.alloc("bench", 0x7F0000000000 + i * 4096, 4096, "device")

        def bare() -> None:
            for i in range(n):
                os.write(fd, (json.dumps({"event": "alloc", "address": 0x7F0000000000 + i * 4096,
                                          "size": 4096}) + "\n").encode())

        o, b = paired(ours, bare, repeat=3)
        w.close()
        os.close(fd)
    return Row(f"ledger writer: {n:,} records", f"LedgerWriter.alloc ({w.backend})", "json.dumps + os.write",
               o, b, "-", note="ours per record: t, pid, test, source, kind, copied into a shared "
                               "mapping; the baseline writes fewer fields, one write(2) each")


class _FreeFlushCupti:
    """Just enough of cupti-python 13.0 for CuptiSource, with free forced flushes (counted)."""

    class ActivityMemoryOperationType:
        ALLOCATION, RELEASE = 1, 2

    class ActivityKind:
        MEMORY2 = 49

    class ApiCallbackSite:
        API_ENTER, API_EXIT = 0, 1

    class ActivityFlag:
        FLUSH_FORCED = 1

    class CallbackDomain:
        DRIVER_API = 1

    class Result:
        ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39

    class driver_api_trace_cbid:
        cuLaunchKernel, cuMemAlloc_v2, cuCtxSynchronize = 307, 34, 17

    class cuptiError(Exception):
        pass

    SUBSCRIBER_PARAMS_SIZE = 32

    class SubscriberParams:
        ptr = 0

    def __init__(self) -> None:
        self.flushes = 0

    def get_timestamp(self) -> int:
        return 0

    def activity_register_callbacks(self, req, done) -> None:
        pass

    def activity_enable(self, kind) -> None:
        pass

    def activity_disable(self, kind) -> None:
        pass

    def activity_flush_all(self, flag) -> None:
        self.flushes += 1

    def subscribe_v2(self, cb, userdata, ptr) -> int:
        self.cb = cb
        return 1

    def enable_callback(self, *a) -> None:
        pass

    def unsubscribe(self, sub) -> None:
        pass


def cupti_callback_path(quick: bool) -> Row:
    from types import SimpleNamespace

    from faulthunt.ledger import cupti_source
    from faulthunt.ledger.writer import LedgerWriter

    n = 2000 if quick else 20_000
    calls = [SimpleNamespace(callback_site=site, correlation_id=7, function_name=fn, symbol_name=sym)
             for fn, sym in (("cuMemAlloc_v2", None), ("cuLaunchKernel", "_Z4fillPf")) for site in (0, 1)]
    cbids = (34, 34, 307, 307)
    flushes: dict[str, int] = {}

    def run(policy: str, stacks: str, d: str) -> None:
        fake = _FreeFlushCupti()
        real_import = cupti_source._import
        old = {k: os.environ.get(k) for k in (cupti_source.FLUSH_ENV, "FAULTHUNT_LEDGER_STACKS",
                                              "FAULTHUNT_LEDGER_ROUTE")}
        os.environ[cupti_source.FLUSH_ENV] = policy
        os.environ["FAULTHUNT_LEDGER_ROUTE"] = "python"  # the flush policies of the Python route
        cupti_source._import = lambda: fake
        try:
            w = LedgerWriter(d, stacks=stacks)
            src = cupti_source.start(w)
            src._stop.set()
            cb = fake.cb
            for _ in range(n):
                for cbid, data in zip(cbids, calls):
                    cb(None, 1, cbid, data)
            src.pending.clear()
            w.close()
        finally:
            cupti_source._import = real_import
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        flushes[policy] = fake.flushes

    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        o, b = paired(lambda: run("sync", "alloc", d1), lambda: run("launch", "all", d2), repeat=3)
    return Row(f"ledger CUPTI callbacks: {n:,} alloc+launch iterations (stand-in CUPTI)",
               "default (rate-limited flush, alloc stacks)", "round-1 (flush per launch, all stacks)",
               o, b, "-", note=f"forced flushes: {flushes.get('sync')} vs {flushes.get('launch')} "
                               f"(~1 ms each on the H200, not in these times); per iteration "
                               f"{o.median / n * 1e6:.1f} us vs {b.median / n * 1e6:.1f} us")


# --- each route's per-iteration cost against a stand-in libcupti ------------------------------

_STANDIN_C = r"""
#include <stdint.h>
#include <stddef.h>
/* CUPTI's cuptiActivityGetNextRecord for the bench's buffers: MEMORY2 records (kind 49, 128
   bytes) and kernel records (208 bytes), back to back; a no-op CUPTI callback */
int sb_next(uint8_t *buf, size_t valid, void **rec) {
    uint8_t *p = *rec ? (uint8_t *)*rec + (*(int32_t *)*rec == 49 ? 128 : 208) : buf;
    if (p + 4 > buf + valid) return 12;
    *rec = p;
    return 0;
}
void sb_noop(void *u, int d, uint32_t cbid, const void *data) { (void)u; (void)d; (void)cbid; (void)data; }
"""


def _standin_c(d: str) -> Any:
    import ctypes

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src, out = Path(d) / "standin.c", Path(d) / "standin.so"
    src.write_text(_STANDIN_C)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return ctypes.CDLL(str(out))


class _RouteDriver:
    """Plays one alloc + launch + free iteration of driver calls through a route's CUPTI callbacks
    (as CUPTI would call them: CallbackData in memory, the callback a C function pointer) and hands
    activity records over every 4096 iterations, through real buffers and a C GetNextRecord."""

    def __init__(self, name: str, d: str, c: Any, stacks: str = "alloc") -> None:
        import ctypes

        import numpy as np

        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
        import cupti_standin as si
        from faulthunt.ledger import cupti_direct, cupti_native, cupti_source
        from faulthunt.ledger.route import ROUTE_ENV
        from faulthunt.ledger.writer import LedgerWriter

        self.si, self.name = si, name
        lib = si.StandInLibcupti()
        lib.cuptiActivityGetNextRecord = c.sb_next  # C, as CUPTI's is
        lib.cuptiActivityGetNextRecord.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        lib.cuptiActivityGetNextRecord.restype = ctypes.c_int
        self.lib = lib
        self._patches = [(cupti_source, "_import", lambda: lib.cupti),
                         (cupti_direct, "loaded_libcupti", lambda major=None: "/stand-in/libcupti.so.13"),
                         (cupti_direct, "_load", lambda path: lib),
                         (cupti_native, "loaded_libcupti", lambda major=None: "/stand-in/libcupti.so.13"),
                         (cupti_native, "_load_libcupti", lambda path: lib)]
        self._saved = [(m, a, getattr(m, a)) for m, a, _ in self._patches]
        for m, a, v in self._patches:
            setattr(m, a, v)
        old = os.environ.get(ROUTE_ENV)
        os.environ[ROUTE_ENV] = name
        try:
            self.writer = LedgerWriter(d, stacks=stacks)
            self.src = cupti_source.start(self.writer)
        finally:
            if old is None:
                os.environ.pop(ROUTE_ENV, None)
            else:
                os.environ[ROUTE_ENV] = old
        self.real_cb = lib.cb
        self.noop_cb = si.CALLBACK(ctypes.cast(c.sb_noop, ctypes.c_void_p).value)
        self.calls = []
        for cbid in (si.CB_ALLOC, si.CB_LAUNCH, si.CB_FREE):
            if cbid not in lib.enabled:
                continue
            for site in (si.ENTER, si.EXIT):
                rec = np.zeros(1, dtype=si.CALLBACK_DATA)
                rec["callback_site"], rec["correlation_id"] = site, 1000 + cbid
                name_buf = ctypes.create_string_buffer(b"_Z4fillPf")
                ok = ctypes.c_int(0)
                rec["symbol_name"] = ctypes.addressof(name_buf) if cbid == si.CB_LAUNCH else 0
                rec["function_return_value"] = ctypes.addressof(ok)
                lib.keep += [rec, name_buf, ok]
                self.calls.append((cbid, rec.ctypes.data))
        lib.queue = []
        lib.memory(1, 0x7F0000000000, 4096, cid=1000 + si.CB_ALLOC)
        lib.kernel("_Z4fillPf", 1000 + si.CB_LAUNCH)  # queued only when kernel activity is on
        lib.memory(2, 0x7F0000000000, 4096, cid=1000 + si.CB_FREE)
        self.batch = lib.queue * 4096
        lib.queue = []

    def run(self, n: int, real: bool) -> None:
        """n iterations; ``real`` False: the same calls into a no-op C callback, no records."""
        lib = self.lib
        cb = self.real_cb if real else self.noop_cb
        calls = self.calls
        for i in range(n):
            for cbid, data in calls:
                cb(None, 1, cbid, data)
            if i & 4095 == 4095:  # a buffer handed over (CUPTI: full, or forced every 0.1 s)
                if real:
                    lib.queue = list(self.batch)
                lib.cuptiActivityFlushAll(1)

    def close(self) -> None:
        self.src.stop()
        self.writer.close()
        for m, a, v in self._saved:
            setattr(m, a, v)


def cupti_route(name: str, quick: bool, stacks: str = "alloc") -> Row:
    """A route's CUPTI work per alloc+launch+free iteration (callbacks, activity decoding,
    writing) against the same driver calls into a no-op C callback. ``stacks``: ``alloc`` (a
    stack for every driver allocation: ``--ledger full``) or ``sampled`` (``--ledger auto``)."""
    from faulthunt.ledger import native

    n = 2048 if quick else 20_480
    title = (f"ledger CUPTI callbacks, route {name}{', sampled stacks' if stacks == 'sampled' else ''}: "
             f"{n:,} alloc+launch+free iterations (stand-in CUPTI)")
    with tempfile.TemporaryDirectory() as d:
        c = _standin_c(d)
        if c is None or (name.startswith("native") and native.load()[0] is None):
            why = "no C compiler" if c is None else native.load()[1]
            return Row(title, name, "no-op C callback", None, None, "-", note=f"not measured: {why}")
        drv = _RouteDriver(name, str(Path(d) / name), c, stacks)
        try:
            o, b = paired(lambda: drv.run(n, True), lambda: drv.run(n, False), repeat=3)
        finally:
            drv.close()
    return Row(title, name, "no-op C callback", o, b, "-",
               note=f"+{(o.median - b.median) / n * 1e6:.2f} us per iteration ({len(drv.calls)} callbacks; "
                    f"{'kernel activity records' if name.endswith('activity') else 'launch callbacks'})")


class _MemoryHook:
    """cupy.cuda.MemoryHook's shape: no-op methods, called with keywords."""

    def malloc_preprocess(self, **kw: Any) -> None: ...
    def malloc_postprocess(self, **kw: Any) -> None: ...
    def free_preprocess(self, **kw: Any) -> None: ...
    def free_postprocess(self, **kw: Any) -> None: ...


def cupy_hook_route(name: str, quick: bool) -> Row:
    """The CuPy refinement per array (malloc + free hook calls as CuPy makes them, the stack
    taken) on a route against a hook whose methods do nothing (CuPy's own dispatch)."""
    from faulthunt.ledger import native
    from faulthunt.ledger.cupy_hook import make_hook
    from faulthunt.ledger.route import choose
    from faulthunt.ledger.writer import LedgerWriter

    n = 5000 if quick else 50_000
    title = f"ledger CuPy hook, route {name}: {n:,} arrays (malloc+free, stand-in MemoryHook)"
    if name == "native" and native.load()[0] is None:
        return Row(title, name, "no-op hook", None, None, "-", note=f"not measured: {native.load()[1]}")

    def arrays(h: Any) -> None:
        for i in range(n):
            p = 0x7F0000000000 + (i & 1023) * 4096
            h.malloc_preprocess(device_id=0, size=4000, mem_size=4096)
            h.malloc_postprocess(device_id=0, size=4000, mem_size=4096, mem_ptr=p, pmem_id=p)
            h.free_preprocess(device_id=0, mem_size=4096, mem_ptr=p, pmem_id=p)
            h.free_postprocess(device_id=0, mem_size=4096, mem_ptr=p, pmem_id=p)

    with tempfile.TemporaryDirectory() as d:
        w = LedgerWriter(d, route=choose(name))
        hook, noop = make_hook(_MemoryHook, w), _MemoryHook()
        try:
            o, b = paired(lambda: arrays(hook), lambda: arrays(noop), repeat=3)
        finally:
            w.close()
    return Row(title, name, "no-op hook", o, b, "-",
               note=f"+{(o.median - b.median) / n * 1e6:.2f} us per array ({w.backend} backend"
                    f"{', records queued' if w.route.deferred else ''})")


def _row(fn: Any, name: str) -> Any:
    def row(quick: bool) -> Row:
        return fn(name, quick)

    row.__name__ = f"{fn.__name__}_{name.replace('-', '_')}"
    return row


def _sampled(name: str) -> Any:
    def row(quick: bool) -> Row:
        return cupti_route(name, quick, stacks="sampled")

    row.__name__ = f"cupti_route_{name.replace('-', '_')}_sampled"
    return row


ROUTE_ROWS = ([_row(cupti_route, n) for n in ("python", "activity", "native", "native-activity")]
              + [_sampled(n) for n in ("python", "native")]
              + [_row(cupy_hook_route, n) for n in ("python", "activity", "native")])

ROWS = [gpu_alloc_loop, cupti_callback_path, writer_per_record, *ROUTE_ROWS]
