#!/usr/bin/env python3
"""GPU validation of the ledger and the mapper (run by ledger_probe.sh on the H200).

    python3 scripts/gpu/ledger_probe.py all OUTDIR          # every case + overhead, < 3 min
    python3 scripts/gpu/ledger_probe.py case FW FAULT DIR   # one planted fault (own process)
    python3 scripts/gpu/ledger_probe.py loop FW MODE N DIR  # the allocation-heavy loop, timed

Each planted fault runs in its own process (a fault poisons the CUDA context) with
``faulthunt.ledger.install(DIR, "auto")`` called before the framework is imported. The case
prints one JSON line ``{"pid", "address", "expect", "evidence"}`` before it faults. Evidence:
``xid``: the fault must produce an Xid 31 whose page is mapped at the Xid's time; ``sanitizer``:
the case is rerun under compute-sanitizer memcheck and its first reported address is mapped;
``direct``: the planted address itself is mapped (pool slack: neither the GPU nor memcheck sees it,
the pool's own records are what is under test). Sanitizer output is read with
``faulthunt.sanitizer.parse_text``; when the ledger cannot place its address (CUPTI cannot subscribe
under compute-sanitizer) the sanitizer's nearest-allocation line gives the verdict (``basis:
sanitizer``). A case whose fault raises no Xid (the page stayed mapped: an overrun into memory the
driver still maps, a freed range the pool kept) is reported as such and its planted address is
mapped at the planted time, so the verdict is still checked. Results go to OUTDIR/results.jsonl and
a table on stdout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

N = 16 << 20            # 16 Mi floats = 64 MiB: big buffers get their own 2 MiB pages
SMALL = 1000            # 4000 bytes: shares a page, so only memcheck sees an overrun
WILD = 1 << 36          # elements: 256 GiB away

SRC = r'''
extern "C" __global__ void poke(float* p, long long i) {
    if (threadIdx.x == 0 && blockIdx.x == 0) p[i] = 1.0f;
}
extern "C" __global__ void fill(float* p, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 2.0f;
}
'''

CASES = [
    # framework, fault, expected verdict, evidence
    ("numba", "wild", "unmapped", "xid"),
    ("numba", "past_end", "past_end", "xid"),
    ("numba", "uaf", "freed", "xid"),
    ("numba", "oob1", "past_end", "sanitizer"),
    ("cupy", "wild", "unmapped", "xid"),
    ("cupy", "past_end", "past_end", "xid"),
    ("cupy", "uaf", "freed", "xid"),
    ("cupy", "pool_uaf", "freed", "direct"),
    ("cupy", "slack", "pool_slack", "direct"),
    # one element past a 4000-byte CuPy array is inside the pool's 4096-byte chunk: memcheck sees a
    # driver allocation there and reports nothing (H200 run 1); the ledger's pool records say slack
    ("cupy", "oob1", "pool_slack", "sanitizer"),
    ("torch", "wild", "unmapped", "xid"),
    ("torch", "uaf", "freed", "xid"),
    ("torch", "slack", "pool_slack", "direct"),
    ("cuda_core", "wild", "unmapped", "xid"),
    ("cuda_core", "past_end", "past_end", "xid"),
    ("cuda_core", "uaf", "freed", "xid"),
]


#: the verdict of a case whose process wrote no ledger: cuda.core has no refinement of its own, so
#: without CUPTI (cupti-python absent) nothing records its allocations (docs/ledger.md)
NO_LEDGER = "no ledger"


def say(**kw: object) -> None:
    kw.setdefault("t", time.time())  # the planted time: what a mapping without an Xid is made at
    print(json.dumps(kw), flush=True)


# --- the planted programs (each runs in a fresh process) -----------------------------------

def case_numba(fault: str) -> None:
    import numpy as np
    from numba import cuda

    @cuda.jit
    def poke(a, i):
        if cuda.grid(1) == 0:
            a[i] = 1.0

    n = SMALL if fault == "oob1" else N
    a = cuda.device_array(n, dtype=np.float32)
    base = a.__cuda_array_interface__["data"][0]
    poke[1, 32](a, 0)
    cuda.synchronize()
    if fault == "wild":
        say(pid=os.getpid(), address=base + WILD * 4, expect="unmapped")
        poke[1, 32](a, WILD)
    elif fault in ("past_end", "oob1"):
        i = n + (0 if fault == "oob1" else (1 << 18))  # 1 MiB past the end of 64 MiB
        say(pid=os.getpid(), address=base + i * 4, expect="past_end")
        poke[1, 32](a, i)
    elif fault == "uaf":
        desc = dict(a.__cuda_array_interface__)
        del a
        cuda.current_context().deallocations.clear()  # the deferred driver free, now
        stale = cuda.from_cuda_array_interface(desc, owner=None, sync=False)
        say(pid=os.getpid(), address=base + 64, expect="freed")
        poke[1, 32](stale, 16)
    cuda.synchronize()


def _cupy_kernel():
    import cupy as cp

    return cp, cp.RawModule(code=SRC).get_function("poke")


def case_cupy(fault: str) -> None:
    cp, poke = _cupy_kernel()
    n = SMALL if fault in ("oob1", "slack", "pool_uaf") else N
    a = cp.zeros(n, dtype=cp.float32)
    base = a.data.ptr
    cp.cuda.runtime.deviceSynchronize()
    if fault == "wild":
        say(pid=os.getpid(), address=base + WILD * 4, expect="unmapped")
        poke((1,), (32,), (a, cp.int64(WILD)))
    elif fault in ("past_end", "oob1"):
        i = n + (0 if fault == "oob1" else (1 << 18))
        say(pid=os.getpid(), address=base + i * 4, expect="pool_slack" if fault == "oob1" else "past_end")
        poke((1,), (32,), (a, cp.int64(i)))
    elif fault == "uaf":
        del a
        cp.get_default_memory_pool().free_all_blocks()  # the chunk goes back to the driver
        say(pid=os.getpid(), address=base + 64, expect="freed")
        poke((1,), (32,), (cp.uint64(base), cp.int64(16)))
    elif fault == "pool_uaf":  # back in the pool, still mapped: silent on the GPU
        del a
        say(pid=os.getpid(), address=base + 64, expect="freed")
    elif fault == "slack":  # the pool rounds 4000 bytes up to 4096: the tail is in no array
        say(pid=os.getpid(), address=base + 4 * SMALL + 8, expect="pool_slack")
    cp.cuda.runtime.deviceSynchronize()


def case_torch(fault: str) -> None:
    import torch

    cp, poke = _cupy_kernel()  # torch has no raw-kernel API; the allocations are torch's
    n = SMALL if fault == "slack" else N
    t = torch.zeros(n, dtype=torch.float32, device="cuda")
    base = t.data_ptr()
    torch.cuda.synchronize()
    if fault == "wild":
        say(pid=os.getpid(), address=base + WILD * 4, expect="unmapped")
        poke((1,), (32,), (cp.uint64(base), cp.int64(WILD)))
    elif fault == "uaf":
        del t
        torch.cuda.empty_cache()  # the segment goes back to the driver
        say(pid=os.getpid(), address=base + 64, expect="freed")
        poke((1,), (32,), (cp.uint64(base), cp.int64(16)))
    elif fault == "slack":
        # a small tensor sits at the start of a fresh 2 MiB small-pool segment
        say(pid=os.getpid(), address=base + (64 << 10), expect="pool_slack")
    torch.cuda.synchronize()
    time.sleep(0.5)  # let the torch poller copy the trace (POLL_S)


def case_cuda_core(fault: str) -> None:
    import numpy as np
    try:
        from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
    except ImportError:  # cuda.core before 1.0
        from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch

    dev = Device()
    dev.set_current()
    s = dev.create_stream()
    prog = Program(SRC, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}"))
    mod = prog.compile("cubin", name_expressions=())
    poke = mod.get_kernel("poke")
    buf = dev.allocate(N * 4, stream=s)
    base = int(buf.handle)
    cfg = LaunchConfig(grid=1, block=32)
    if fault == "wild":
        say(pid=os.getpid(), address=base + WILD * 4, expect="unmapped")
        launch(s, cfg, poke, buf, np.int64(WILD))
    elif fault == "past_end":
        i = N + (1 << 18)
        say(pid=os.getpid(), address=base + i * 4, expect="past_end")
        launch(s, cfg, poke, buf, np.int64(i))
    elif fault == "uaf":
        buf.close(s)
        s.sync()
        dev.sync()  # release threshold 0: the pool gives the memory back at synchronization
        say(pid=os.getpid(), address=base + 64, expect="freed")
        launch(s, cfg, poke, np.uint64(base), np.int64(16))
    s.sync()


def run_case(fw: str, fault: str, ledger_dir: str) -> None:
    from faulthunt.ledger import install

    install(Path(ledger_dir), os.environ.get("FAULTHUNT_LEDGER", "auto"))
    {"numba": case_numba, "cupy": case_cupy, "torch": case_torch, "cuda_core": case_cuda_core}[fw](fault)


# --- overhead: an allocation-heavy loop, timed inside the process (imports excluded) --------

#: iterations of :func:`loop_runner`'s loop a sample, per framework: about 0.3 s each on the H200
#: (CuPy ~10 us an iteration, numba ~100, cuda.core ~8; 24 ms samples were mostly noise)
SAMPLE_ITERS = {"cupy": 30000, "numba": 3000, "cuda_core": 40000}
#: the cores the timed loop processes run on (when the machine has them): every configuration
#: runs where ``off`` ran
PIN = {2, 3}


def pin_to_cores() -> None:
    """A child's ``preexec_fn``: run on :data:`PIN` where the machine has those cores."""
    if hasattr(os, "sched_setaffinity") and PIN <= os.sched_getaffinity(0):
        os.sched_setaffinity(0, PIN)


def loop_runner(fw: str):
    """A callable ``run(n, each=None, prof=None) -> seconds``: ``n`` iterations of allocate +
    launch ``fill`` + free (``fw``: cupy, numba or cuda_core), compiled and warmed up once, so a
    process can time several samples. ``each(pointer, nbytes, i)`` runs after each launch;
    ``prof`` (a cProfile.Profile) is enabled for the timed part only."""
    if fw == "cupy":
        cp, _ = _cupy_kernel()
        fill = cp.RawModule(code=SRC).get_function("fill")
        a = cp.empty(1 << 16, dtype=cp.float32)
        fill((64,), (256,), (a, cp.int64(a.size)))
        del a
        cp.cuda.runtime.deviceSynchronize()

        def body(n, each):
            for i in range(n):
                a = cp.empty(1 << 16 + (i % 4), dtype=cp.float32)
                fill((64,), (256,), (a, cp.int64(a.size)))
                if each:
                    each(a.data.ptr, a.nbytes, i)
                del a
            cp.cuda.runtime.deviceSynchronize()
    elif fw == "numba":
        import numpy as np
        from numba import cuda

        @cuda.jit
        def fill(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = 2.0

        a = cuda.device_array(1 << 16, dtype=np.float32)
        fill[64, 256](a)
        cuda.synchronize()
        del a

        def body(n, each):
            for i in range(n):
                a = cuda.device_array((1 << 16) + i % 4, dtype=np.float32)
                fill[64, 256](a)
                if each:
                    each(a.device_ctypes_pointer.value, a.nbytes, i)
                del a
            cuda.synchronize()
    else:  # cuda.core: stream-ordered pool allocations, which only CUPTI records
        import numpy as np
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
        except ImportError:  # cuda.core before 1.0
            from cuda.core.experimental import Device, LaunchConfig, Program, ProgramOptions, launch

        dev = Device()
        dev.set_current()
        s = dev.create_stream()
        prog = Program(SRC, code_type="c++", options=ProgramOptions(arch=f"sm_{dev.arch}"))
        kfill = prog.compile("cubin", name_expressions=()).get_kernel("fill")
        cfg = LaunchConfig(grid=64, block=256)
        buf = dev.allocate(1 << 18, stream=s)
        launch(s, cfg, kfill, buf, np.int64(1 << 16))
        buf.close(s)
        s.sync()

        def body(n, each):
            for i in range(n):
                nbytes = ((1 << 16) + i % 4) * 4
                buf = dev.allocate(nbytes, stream=s)
                launch(s, cfg, kfill, buf, np.int64(nbytes // 4))
                if each:
                    each(int(buf.handle), nbytes, i)
                buf.close(s)
            s.sync()

    def run(n: int, each=None, prof=None) -> float:
        if prof:
            prof.enable()
        t0 = time.perf_counter()
        body(n, each)
        seconds = time.perf_counter() - t0
        if prof:
            prof.disable()
        return seconds

    return run


def timed_loop(fw: str, n: int, each=None, prof=None) -> float:
    """Seconds for ``n`` iterations of :func:`loop_runner`'s loop, warm-up and imports excluded."""
    return loop_runner(fw)(n, each, prof)


def run_loop(fw: str, mode: str, n: int, ledger_dir: str) -> None:
    if mode != "off":
        from faulthunt.ledger import install

        install(Path(ledger_dir), mode)
    say(loop=fw, mode=mode, n=n, seconds=timed_loop(fw, n))


# --- orchestration ------------------------------------------------------------------------

_XID31 = re.compile(r"^\[\s*([0-9.]+)\].*NVRM: Xid \([^)]*\): 31, pid=(\d+),.*faulted @ (0x[0-9a-fA-F_]+)")


def dmesg_lines() -> list[str]:
    try:
        return subprocess.run(["dmesg"], capture_output=True, text=True, timeout=20).stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return []


def child(args: list[str], env: dict[str, str], timeout: float, prefix: list[str] | None = None):
    cmd = (prefix or []) + [sys.executable, __file__] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        return 124, (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), "timeout"


def first_json(text: str) -> dict | None:
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def do_map(ledger_dir: Path, address: int, pid: int | None, at: float | None, page: bool) -> dict:
    from faulthunt.errors import InputError
    from faulthunt.ledger.reader import load_ledger
    from faulthunt.mapper import map_address

    try:
        ledger = load_ledger(ledger_dir)
    except InputError as exc:  # the process recorded nothing (cuda.core without CUPTI)
        return {"verdict": NO_LEDGER, "reason": str(exc)}
    try:
        return map_address(ledger, address, pid=pid, at=at, page=page).to_json()
    except Exception as exc:  # noqa: BLE001 - a mapping failure is this case's result, not the script's end
        return {"verdict": None, "reason": str(exc)}


def probe_case(fw: str, fault: str, expect: str, evidence: str, out: Path, env: dict[str, str],
               have_san: bool, cli: bool = True) -> dict:
    """Run one planted fault in its own process under ``env`` and map its evidence; the result
    entry (``ok``: the verdict is the expected one; ``launch_kernels``: the launches the mapping
    lists; ``estimated_launches``: those whose time the ledger estimated). Logs and ledgers go
    under ``out``;
    ``cli``: also run ``faulthunt map`` on it, for the record."""
    name = f"{fw}_{fault}"
    ldir = out / "ledgers" / name
    before = len(dmesg_lines())
    prefix = None
    if evidence == "sanitizer":
        if not have_san:
            return {"case": name, "ok": False, "reason": "compute-sanitizer not found"}
        prefix = ["compute-sanitizer", "--tool", "memcheck", "--print-limit", "5"]
    rc, so, se = child(["case", fw, fault, str(ldir)], env, 60, prefix)
    (out / f"{name}.log").write_text(f"rc={rc}\n--- stdout\n{so}\n--- stderr\n{se}\n")
    planted = first_json(so) or {}
    time.sleep(0.3)
    added = dmesg_lines()[before:]
    (out / f"{name}.dmesg.txt").write_text("\n".join(added) + "\n")
    pid = planted.get("pid")
    entry = {"case": name, "expect": expect, "evidence": evidence, "rc": rc, "pid": pid,
             "planted": hex(planted["address"]) if "address" in planted else None}
    at_planted = entry["planted_t"] = planted.get("t")
    if evidence == "xid":
        xids = [m for m in map(_XID31.match, added) if m and int(m.group(2)) == pid]
        if not xids:
            # The GPU raised nothing: the page stayed mapped (an overrun inside a large page
            # the driver maps, a freed range the allocator kept). Check the planted address.
            if "address" not in planted:
                entry.update(ok=False, reason="the case did not start")
            else:
                v = do_map(ldir, planted["address"], pid, at_planted, False)
                entry.update(xid=None, evidence="planted (no Xid)",
                             reason="no Xid: the page stayed mapped", verdict=v.get("verdict"),
                             offset=v.get("offset"), ok=v.get("verdict") == expect, mapping=v)
        else:
            ts, page = float(xids[0].group(1)), int(xids[0].group(3).replace("_", ""), 16)
            from faulthunt.ledger.reader import load_ledger
            pl = load_ledger(ldir).pid(pid) if ldir.is_dir() else None
            at = ts + pl.mono_offset if pl is not None and pl.mono_offset is not None else None
            v = do_map(ldir, page, pid, at, True)
            v_end = do_map(ldir, page, pid, None, True)
            entry.update(xid_page=hex(page), xid_ts=ts, at=at, verdict=v.get("verdict"),
                         offset=v.get("offset"), verdict_at_end=v_end.get("verdict"),
                         page_in_expected=planted.get("address", -1) // 4096 * 4096 == page,
                         ok=v.get("verdict") == expect, mapping=v)
    elif evidence == "sanitizer":
        from faulthunt.mapper import sanitizer_verdict
        from faulthunt.sanitizer import parse_text

        recs = [r for r in parse_text(so + "\n" + se) if r.address is not None]
        (out / f"{name}.sanitizer_records.json").write_text(
            json.dumps([r.to_json() if hasattr(r, "to_json") else repr(r) for r in recs], default=str, indent=1))
        if not recs and "address" in planted:
            v = do_map(ldir, planted["address"], pid, at_planted, False)
            entry.update(evidence="planted (memcheck silent)",
                         reason="memcheck reported nothing: the byte lies inside a driver allocation",
                         verdict=v.get("verdict"), offset=v.get("offset"), ok=v.get("verdict") == expect,
                         mapping=v)
        elif not recs:
            entry.update(ok=False, reason="memcheck printed no record with an address and the case did not start")
        else:
            r = recs[0]
            addr = r.address
            v = do_map(ldir, addr, pid, at_planted, False)
            basis = "ledger"
            if v.get("verdict") in (None, "unmapped") and r.alloc_base is not None:
                fb = sanitizer_verdict(addr, {"base": r.alloc_base, "size": r.alloc_size,
                                              "relation": r.alloc_relation, "distance": r.alloc_distance})
                if fb is not None:
                    fb["ledger_verdict"] = v.get("verdict")
                    v, basis = fb, "sanitizer"
            entry.update(sanitizer_address=hex(addr), address_is_planted=addr == planted.get("address"),
                         basis=basis, verdict=v.get("verdict"), offset=v.get("offset"),
                         ok=v.get("verdict") == expect, mapping=v)
    else:
        if "address" not in planted:
            entry.update(ok=False, reason="the case did not start")
        else:
            v = do_map(ldir, planted["address"], pid, at_planted, False)
            entry.update(verdict=v.get("verdict"), offset=v.get("offset"), ok=v.get("verdict") == expect,
                         mapping=v)
    launches = (entry.get("mapping") or {}).get("launches") or []
    entry["launch_kernels"] = [x.get("kernel") for x in launches]
    if ldir.is_dir() and pid:
        from faulthunt.ledger.reader import load_ledger

        pl = load_ledger(ldir).pid(pid)
        # launches whose time the ledger estimated (kernel activity records of a swallowed launch)
        entry["estimated_launches"] = [r.get("kernel") for r in (pl.launches if pl else []) if r.get("t_estimated")]
    # the CLI, once per case, for the record
    if cli and ldir.is_dir() and entry.get("planted"):
        cli = subprocess.run([sys.executable, "-m", "faulthunt", "map", entry.get("xid_page") or
                              entry.get("sanitizer_address") or entry["planted"], "--ledger", str(ldir),
                              *(["--pid", str(pid)] if pid else []), *(["--page"] if "xid_page" in entry else [])],
                             capture_output=True, text=True, timeout=60)
        (out / f"{name}.map.txt").write_text(cli.stdout + cli.stderr)
    return entry


def run_all(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("FAULTHUNT_LEDGER", "auto")
    results = []
    have_san = shutil.which("compute-sanitizer") is not None
    t_start = time.monotonic()
    from faulthunt.ledger.cupti_source import problem
    no_cupti = problem() is not None
    for fw, fault, expect, evidence in CASES:
        if no_cupti and fw == "cuda_core":
            expect = NO_LEDGER
        if time.monotonic() - t_start > 140:
            results.append({"case": f"{fw}/{fault}", "ok": False, "reason": "skipped: time budget"})
            continue
        entry = probe_case(fw, fault, expect, evidence, out, env, have_san)
        results.append(entry)
        with open(out / "results.jsonl", "a") as fh:
            fh.write(json.dumps(entry) + "\n")
    # overhead: same loop, ledger off and auto (default policy), interleaved, best of 2; then once
    # with the round-1 policy ("strict": forced CUPTI flush before every launch after an
    # allocation, stacks on launches and frees too) to show what the default saves
    over = []
    strict_env = {**env, "FAULTHUNT_LEDGER_FLUSH": "launch", "FAULTHUNT_LEDGER_STACKS": "all"}
    for fw in ("cupy", "numba"):
        best: dict[str, float] = {}
        runs = [("off", env), ("auto", env), ("off", env), ("auto", env), ("strict", strict_env)]
        for label, e in runs:
            if label == "strict" and time.monotonic() - t_start > 120:
                continue  # the comparison is optional; the 170 s limit is not
            mode = "off" if label == "off" else "auto"
            _, so, se = child(["loop", fw, mode, "3000", str(out / "ledgers" / f"loop_{fw}_{label}")], e, 60)
            got = first_json(so)
            if got:
                best[label] = min(best.get(label, 1e9), got["seconds"])
            else:
                (out / f"loop_{fw}_{label}.err.txt").write_text(se)
        if "off" in best and "auto" in best:
            row = {"loop": fw, "off_s": best["off"], "auto_s": best["auto"], "ratio": best["auto"] / best["off"]}
            if "strict" in best:
                row.update(strict_s=best["strict"], strict_ratio=best["strict"] / best["off"])
            over.append(row)
    (out / "overhead.json").write_text(json.dumps(over, indent=2) + "\n")
    print(f"{'case':24} {'expect':12} {'verdict':12} ok  evidence")
    for r in results:
        print(f"{r['case']:24} {r.get('expect', ''):12} {r.get('verdict')!s:12} {'yes' if r.get('ok') else 'NO ':3} "
              f"{r.get('evidence', '')} {('basis ' + r['basis']) if r.get('basis') else ''} {r.get('reason', '')}")
    for o in over:
        strict = (f"; round-1 policy {o['strict_s']:.3f}s {o['strict_ratio']:.2f}x" if "strict_s" in o else "")
        print(f"overhead {o['loop']}: off {o['off_s']:.3f}s auto {o['auto_s']:.3f}s ratio {o['ratio']:.2f}x "
              f"(goal < 1.2x){strict}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["case"]:
        run_case(argv[1], argv[2], argv[3])
        return 0
    if argv[:1] == ["loop"]:
        run_loop(argv[1], argv[2], int(argv[3]), argv[4])
        return 0
    if argv[:1] == ["all"]:
        return run_all(Path(argv[1]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
