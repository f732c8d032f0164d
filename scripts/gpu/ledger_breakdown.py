#!/usr/bin/env python3
"""Where the ledger's time goes on an allocation-heavy loop (run by ledger_breakdown.sh on a GPU).

    python3 scripts/gpu/ledger_breakdown.py all OUTDIR           # every configuration, table + JSON
    python3 scripts/gpu/ledger_breakdown.py loop FW CONFIG N DIR  # one timed loop (own process)
    python3 scripts/gpu/ledger_breakdown.py fault DIR             # CUPTI kernel records of a faulting launch

The loop is ledger_probe.py's (alloc + launch + free, no synchronization inside: the CPU side of
a test that churns small arrays). Each configuration switches on one more part, so the table reads
as a cost breakdown: CUPTI activity alone, a CUPTI subscriber whose Python callback does nothing,
the same reading the callback's fields, the full CUPTI source, a framework refinement alone, the
default ``auto``, and the launch records taken from CUPTI activity buffers instead of callbacks.
``hook_noop`` is CuPy's own cost of a registered ``MemoryHook`` whose methods do nothing.
``fault`` answers the design question behind the last one: does CUPTI hand over a kernel record
for a launch that faults (Xid 31), and with which name and times?
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ledger_probe import SRC, timed_loop  # noqa: E402

CONFIGS = ("off", "refine", "act_mem", "sub_noop_launch", "sub_fields_launch", "cupti", "auto",
           "auto_py", "auto_nostack", "auto_write", "act_kernel", "writer3", "hook_noop")
LAUNCH = ("cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz")
OTHER = ("cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemFreeAsync", "cuCtxSynchronize",
         "cuStreamSynchronize")


def _cupti_raw(config: str) -> dict:
    """Set up the raw-CUPTI configurations (no faulthunt code on the path)."""
    from cupti import cupti as c

    seen = {"records": 0, "buffers": 0, "kernels": []}

    def req():
        return 8 * 1024 * 1024, 0

    def done(acts):
        seen["buffers"] += 1
        seen["records"] += len(acts)

    c.activity_register_callbacks(req, done)
    c.activity_enable(c.ActivityKind.MEMORY2)
    if config == "act_kernel":
        c.activity_enable(c.ActivityKind.CONCURRENT_KERNEL)
    if config.startswith("sub_"):
        if config == "sub_fields_launch":
            def cb(_u, _d, _cbid, data):
                data.callback_site, data.correlation_id, data.symbol_name  # noqa: B018
        else:
            def cb(_u, _d, _cbid, data):
                pass
        params = c.SubscriberParams()
        params.struct_size = c.SUBSCRIBER_PARAMS_SIZE
        params.subscriber_name = "breakdown"
        sub = c.subscribe_v2(cb, None, params.ptr)
        apis = LAUNCH + (OTHER if config == "sub_noop_all" else ())
        for api in apis:
            cbid = getattr(c.driver_api_trace_cbid, api, None)
            if cbid is not None:
                c.enable_callback(1, sub, c.CallbackDomain.DRIVER_API, cbid)
    seen["flush"] = lambda: c.activity_flush_all(int(c.ActivityFlag.FLUSH_FORCED))
    return seen


def _three_records(writer):
    """Three bare records an iteration, as the ledger writes them (the writer's own cost)."""
    def each(ptr: int, nbytes: int, i: int) -> None:
        writer.alloc("x", ptr, nbytes, "block")
        writer.launch("x", "fill", "cuLaunchKernel", i)
        writer.free("x", ptr, "block")
    return each


def run_loop(fw: str, config: str, n: int, ledger_dir: str) -> None:
    raw = None
    writer = None
    if config in ("refine", "cupti", "auto", "auto_py", "auto_nostack", "auto_write"):
        if config == "auto_py":  # CUPTI through cupti-python's own callbacks and records
            os.environ["FAULTHUNT_LEDGER_CUPTI_CALL"] = "python"
        if config == "auto_nostack":
            os.environ["FAULTHUNT_LEDGER_STACKS"] = "off"
        if config == "auto_write":
            os.environ["FAULTHUNT_LEDGER_WRITE"] = "write"
        from faulthunt.ledger import install

        install(Path(ledger_dir), {"refine": fw}.get(config, config.split("_")[0]), quiet=True)
    elif config in ("act_mem", "act_kernel") or config.startswith("sub_"):
        raw = _cupti_raw(config)
    elif config == "hook_noop":  # CuPy's own cost of calling a memory hook that does nothing
        if fw != "cupy":
            print(json.dumps({"loop": fw, "config": config, "skipped": "CuPy only"}), flush=True)
            return
        import cupy

        cupy.cuda.MemoryHook().__enter__()
    elif config == "writer3":
        from faulthunt.ledger.writer import LedgerWriter

        writer = LedgerWriter(ledger_dir)
    prof = cProfile.Profile() if os.environ.get("BREAKDOWN_PROFILE") else None
    seconds = timed_loop(fw, n, _three_records(writer) if writer is not None else None, prof)
    if prof:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        Path(ledger_dir).mkdir(parents=True, exist_ok=True)
        (Path(ledger_dir) / "profile.txt").write_text(s.getvalue())
    extra = {}
    if raw is not None:
        raw["flush"]()
        extra = {"cupti_records": raw["records"], "cupti_buffers": raw["buffers"]}
    print(json.dumps({"loop": fw, "config": config, "n": n, "seconds": seconds, **extra}), flush=True)


def run_fault(out: str) -> None:
    """A wild write under CONCURRENT_KERNEL + DRIVER activity: which records come back?"""
    from cupti import cupti as c

    got: list[dict] = []

    def req():
        return 8 * 1024 * 1024, 0

    def done(acts):
        for a in acts:
            k = int(a.kind)
            if k == int(c.ActivityKind.CONCURRENT_KERNEL):
                got.append({"kind": "kernel", "name": a.name, "cid": a.correlation_id, "start": a.start,
                            "end": a.end, "completed": a.completed, "queued": a.queued})
            elif k == int(c.ActivityKind.DRIVER):
                got.append({"kind": "driver", "cbid": a.cbid, "cid": a.correlation_id, "start": a.start,
                            "end": a.end, "ret": a.return_value})

    c.activity_register_callbacks(req, done)
    c.activity_enable(c.ActivityKind.CONCURRENT_KERNEL)
    c.activity_enable(c.ActivityKind.DRIVER)
    import cupy as cp

    mod = cp.RawModule(code=SRC)
    poke, fill = mod.get_function("poke"), mod.get_function("fill")
    a = cp.zeros(1 << 20, dtype=cp.float32)
    fill((64,), (256,), (a, cp.int64(a.size)))
    cp.cuda.runtime.deviceSynchronize()
    t_before = c.get_timestamp()
    err = None
    try:
        poke((1,), (32,), (a, cp.int64(1 << 36)))
        cp.cuda.runtime.deviceSynchronize()
    except Exception as exc:
        err = repr(exc)
    try:
        c.activity_flush_all(int(c.ActivityFlag.FLUSH_FORCED))
    except Exception as exc:
        got.append({"flush_error": repr(exc)})
    Path(out).mkdir(parents=True, exist_ok=True)
    res = {"error": err, "t_before_fault": t_before, "records": got[-12:], "n_records": len(got),
           "poke_kernel_records": [g for g in got if g.get("kind") == "kernel" and "poke" in str(g.get("name"))]}
    (Path(out) / "fault_records.json").write_text(json.dumps(res, indent=2, default=str))
    print(json.dumps(res, default=str))


def run_all(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    rows = []
    for fw in ("cupy", "numba"):
        best: dict[str, float] = {}
        info: dict[str, dict] = {}
        for rep in range(2):
            for cfg in CONFIGS:
                if rep and cfg not in ("off", "auto"):
                    continue
                if time.monotonic() - t0 > 300:
                    break
                d = out / "ledgers" / f"{fw}_{cfg}_{rep}"
                p = subprocess.run([sys.executable, __file__, "loop", fw, cfg, "3000", str(d)],
                                   capture_output=True, text=True, timeout=90)
                line = next((ln for ln in p.stdout.splitlines() if ln.startswith("{")), None)
                if line is None:
                    (out / f"{fw}_{cfg}.err.txt").write_text(p.stdout + p.stderr)
                    continue
                r = json.loads(line)
                if "skipped" in r:
                    continue
                info[cfg] = r
                best[cfg] = min(best.get(cfg, 1e9), r["seconds"])
        for cfg in CONFIGS:
            if cfg in best and "off" in best:
                rows.append({"loop": fw, "config": cfg, "seconds": best[cfg], "ratio": best[cfg] / best["off"],
                             "us_per_iter_added": (best[cfg] - best["off"]) / 3000 * 1e6,
                             **{k: v for k, v in info[cfg].items() if k.startswith("cupti_")}})
        # one profiled run of auto: which Python functions take the time
        env = {**os.environ, "BREAKDOWN_PROFILE": "1"}
        subprocess.run([sys.executable, __file__, "loop", fw, "auto", "3000", str(out / f"profile_{fw}")],
                       capture_output=True, text=True, timeout=90, env=env)
    # what the auto ledgers hold: every launch and allocation of the loop, and any fallback note
    from faulthunt.ledger.reader import read_ledger_file

    held = {}
    for f in sorted((out / "ledgers").glob("*_auto_0/*.jsonl")):
        recs = read_ledger_file(f).records
        counts: dict = {}
        for r in recs:
            key = f"{r['event']}:{r.get('source')}"
            counts[key] = counts.get(key, 0) + 1
        held[f.parent.name] = {"counts": counts, "notes": [r.get("message") for r in recs if r["event"] == "note"]}
    (out / "auto_ledgers.json").write_text(json.dumps(held, indent=2) + "\n")
    print(json.dumps(held, indent=1))
    (out / "breakdown.json").write_text(json.dumps(rows, indent=2) + "\n")
    p = subprocess.run([sys.executable, __file__, "fault", str(out)], capture_output=True, text=True, timeout=60)
    (out / "fault.txt").write_text(p.stdout + p.stderr)
    print(f"{'loop':6} {'config':18} {'seconds':>8} {'ratio':>7} {'+us/iter':>9}")
    for r in rows:
        print(f"{r['loop']:6} {r['config']:18} {r['seconds']:8.3f} {r['ratio']:7.2f} {r['us_per_iter_added']:9.1f}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["loop"]:
        run_loop(argv[1], argv[2], int(argv[3]), argv[4])
        return 0
    if argv[:1] == ["fault"]:
        run_fault(argv[1])
        return 0
    if argv[:1] == ["all"]:
        return run_all(Path(argv[1]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
