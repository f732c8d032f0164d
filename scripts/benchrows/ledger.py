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
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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
        old = {k: os.environ.get(k) for k in (cupti_source.FLUSH_ENV, "FAULTHUNT_LEDGER_STACKS")}
        os.environ[cupti_source.FLUSH_ENV] = policy
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


ROWS = [gpu_alloc_loop, cupti_callback_path, writer_per_record]
