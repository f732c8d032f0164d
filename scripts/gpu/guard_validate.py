#!/usr/bin/env python3
"""H200 validation of guard mode (issue 15; run by guard_validate.sh, docs/guard.md).

    python3 scripts/gpu/guard_validate.py all WORK DEST          # every stage, < 8 minutes
    python3 scripts/gpu/guard_validate.py probe LEDGER           # each hook: allocate, write, read, free
    python3 scripts/gpu/guard_validate.py loop FW SPEC N LEDGER  # the allocation-heavy loop, timed

Stages of ``all`` (each bounded; results in DEST/results.json, a table on stdout):
1. probe   one process, guard rate 1: CuPy, numba, cuda.core, cuda-python bindings and torch each
           allocate 4096 bytes, write and read them back and free them; the allocation must be a
           guard slot (the allocator owns it) and the free must unmap it.
2. faults  ``faulthunt stress --guard 1`` over a generated CuPy/numba suite: a one-element overrun
           (write and read) of a 4096-byte buffer and a use after free must fail with an Xid 31
           whose guard verdict is past_end (0-4095 bytes past the end) / freed; their twins pass
           with no Xid.
3. planted ``faulthunt stress --guard 1`` over the bundled planted suite (oob_write, oob_read,
           use_after_free, CUDA C++ and numba flavours), at align 256 (the default: the planted
           4000-byte buffers keep 96 bytes of slack, so their overruns must be reported "inside
           the slack, not guardable" and pass) and at align 16 (no slack: Xid 31, past_end); the
           use after free fails with Xid 31 / freed at both; every twin passes with no Xid.
4. loops   the allocation-heavy loop (allocate, launch fill, free; CuPy and numba) plain, with
           ``--guard 1`` and with the default rate, in fresh processes, best of 2.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import time
import traceback
from pathlib import Path

N_FLOATS = 1024                          # 4096 bytes: a multiple of every alignment, no slack
BUDGET_S = 430                           # the whole of `all`; the shell kills at 460
REPO = Path(__file__).resolve().parents[2]


def say(**kw: object) -> None:
    print(json.dumps(kw, default=str), flush=True)


# --- 1. probe: every hook, no fault ---------------------------------------------------------

def probe(ledger: str) -> None:
    import numpy as np

    from faulthunt.guard import parse_spec
    from faulthunt.guard.install import install

    handle = install(Path(ledger), parse_spec("1"), seed=1)
    guard = handle.allocator
    host = np.arange(N_FLOATS, dtype=np.float32)

    def check(fw: str, fn) -> None:
        t0 = time.perf_counter()
        try:
            out = fn()
            out.setdefault("ok", bool(out.get("guarded") and out.get("data_ok") and out.get("unmapped")))
        except Exception as exc:  # noqa: BLE001 - a check's failure, with its trace, is its result
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                   "trace": traceback.format_exc(limit=6)[-1500:]}
        say(stage="probe", framework=fw, seconds=round(time.perf_counter() - t0, 3), **out)

    def bindings() -> dict:
        from cuda.bindings import driver as cu

        cu.cuInit(0)
        _, dev = cu.cuDeviceGet(0)
        _, ctx = cu.cuDevicePrimaryCtxRetain(dev)
        cu.cuCtxSetCurrent(ctx)
        err, p = cu.cuMemAlloc(host.nbytes)
        addr = int(p)
        guarded = guard.owns(addr)
        cu.cuMemcpyHtoD(addr, host.ctypes.data, host.nbytes)
        back = np.empty_like(host)
        cu.cuMemcpyDtoH(back.ctypes.data, addr, host.nbytes)
        cu.cuMemFree(addr)
        return {"address": hex(addr), "err": int(err), "guarded": guarded,
                "data_ok": bool((back == host).all()), "unmapped": not guard.owns(addr)}

    def cupy() -> dict:
        import cupy as cp

        a = cp.asarray(host)
        addr = a.data.ptr
        guarded = guard.owns(addr)
        a *= 2
        ok = bool((cp.asnumpy(a) == host * 2).all())
        del a
        gc.collect()
        return {"address": hex(addr), "guarded": guarded, "data_ok": ok, "unmapped": not guard.owns(addr)}

    def numba() -> dict:
        from numba import cuda

        @cuda.jit
        def twice(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] *= 2

        d = cuda.to_device(host)
        addr = d.device_ctypes_pointer.value
        guarded = guard.owns(addr)
        twice[4, 256](d)
        ok = bool((d.copy_to_host() == host * 2).all())
        del d
        gc.collect()
        return {"address": hex(addr), "guarded": guarded, "data_ok": ok, "unmapped": not guard.owns(addr)}

    def cuda_core() -> dict:
        from cuda.bindings import driver as cu
        try:
            from cuda.core import Device
        except ImportError:
            from cuda.core.experimental import Device
        dev = Device(0)
        dev.set_current()
        handle.refresh()  # what the pytest hooks do at each test: guard the device's resource
        buf = dev.allocate(host.nbytes, stream=dev.default_stream)
        addr = int(buf.handle)
        guarded = guard.owns(addr)
        cu.cuMemcpyHtoD(addr, host.ctypes.data, host.nbytes)
        back = np.empty_like(host)
        cu.cuMemcpyDtoH(back.ctypes.data, addr, host.nbytes)
        buf.close()
        return {"address": hex(addr), "guarded": guarded, "data_ok": bool((back == host).all()),
                "unmapped": not guard.owns(addr), "resource": type(dev.memory_resource).__name__}

    def torch() -> dict:
        import torch as t

        if "torch" not in handle.sources:
            from faulthunt.guard.torch_alloc import find_compiler

            if find_compiler() is None:  # the documented outcome without a compiler
                return {"ok": True, "guarded": False, "note": "no C compiler: torch is not guarded"}
            return {"ok": False, "guarded": False, "error": "torch hook not installed (see stderr)"}
        x = t.arange(N_FLOATS, dtype=t.float32, device="cuda")
        addr = x.data_ptr()
        guarded = guard.owns(addr)
        ok = float((x * 2).sum()) == float(host.sum() * 2)
        del x
        t.cuda.synchronize()
        gc.collect()
        return {"address": hex(addr), "guarded": guarded, "data_ok": ok, "unmapped": not guard.owns(addr)}

    for fw, fn in (("cuda_bindings", bindings), ("cupy", cupy), ("numba", numba),
                   ("cuda_core", cuda_core), ("torch", torch)):
        check(fw, fn)
    say(stage="probe", framework="totals", counts=guard.counts.to_json(),
        hooks=sorted(handle.sources), live_bytes=guard.live_bytes)


# --- 2. the faults suite (run under faulthunt stress --guard 1) ---------------------------------

FAULT_SUITE = '''
"""Planted by scripts/gpu/guard_validate.py: overruns and a use after free of 4096-byte buffers,
each beside its twin. Under `faulthunt stress --guard 1` every planted access faults (Xid 31)."""
import gc

import numpy as np

N = 1024  # 4096 bytes of float32

SRC = r"""
extern "C" __global__ void poke(float* p, long long i) { if (threadIdx.x == 0 && blockIdx.x == 0) p[i] = 1.0f; }
extern "C" __global__ void peek(const float* p, long long i, float* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = p[i];
}
"""


def _cupy():
    import cupy as cp
    mod = cp.RawModule(code=SRC)
    return cp, mod.get_function("poke"), mod.get_function("peek")


def test_cupy_write_one_past():
    cp, poke, _ = _cupy()
    a = cp.zeros(N, dtype=cp.float32)
    poke((1,), (32,), (a, np.int64(N)))
    cp.cuda.runtime.deviceSynchronize()


def test_cupy_write_last():
    cp, poke, _ = _cupy()
    a = cp.zeros(N, dtype=cp.float32)
    poke((1,), (32,), (a, np.int64(N - 1)))
    cp.cuda.runtime.deviceSynchronize()
    assert float(a[N - 1]) == 1.0


def test_cupy_read_one_past():
    cp, _, peek = _cupy()
    a = cp.zeros(N, dtype=cp.float32)
    out = cp.zeros(1, dtype=cp.float32)
    peek((1,), (32,), (a, np.int64(N), out))
    cp.cuda.runtime.deviceSynchronize()


def test_cupy_read_last():
    cp, _, peek = _cupy()
    a = cp.full(N, 3.0, dtype=cp.float32)
    out = cp.zeros(1, dtype=cp.float32)
    peek((1,), (32,), (a, np.int64(N - 1), out))
    cp.cuda.runtime.deviceSynchronize()
    assert float(out[0]) == 3.0


def test_cupy_use_after_free():
    cp, poke, _ = _cupy()
    a = cp.zeros(N, dtype=cp.float32)
    ptr = a.data.ptr
    del a
    gc.collect()
    poke((1,), (32,), (np.uint64(ptr), np.int64(0)))
    cp.cuda.runtime.deviceSynchronize()


def test_cupy_use_before_free():
    cp, poke, _ = _cupy()
    a = cp.zeros(N, dtype=cp.float32)
    poke((1,), (32,), (np.uint64(a.data.ptr), np.int64(0)))
    cp.cuda.runtime.deviceSynchronize()
    del a
    gc.collect()


def _numba_poke():
    from numba import cuda

    @cuda.jit
    def poke(p, i):
        if cuda.grid(1) == 0:
            p[i] = 1.0
    return cuda, poke


def test_numba_write_one_past():
    cuda, poke = _numba_poke()
    d = cuda.device_array(N, dtype=np.float32)
    poke[1, 32](d, N)
    cuda.synchronize()


def test_numba_write_last():
    cuda, poke = _numba_poke()
    d = cuda.device_array(N, dtype=np.float32)
    poke[1, 32](d, N - 1)
    cuda.synchronize()
    assert d.copy_to_host()[N - 1] == 1.0
'''

#: test -> (verdict, offset of the planted access from the allocation's end (past_end) or start)
FAULTS = {"test_cupy_write_one_past": ("past_end", 0), "test_cupy_read_one_past": ("past_end", 0),
          "test_cupy_use_after_free": ("freed", 0), "test_numba_write_one_past": ("past_end", 0)}
TWINS = ("test_cupy_write_last", "test_cupy_read_last", "test_cupy_use_before_free", "test_numba_write_last")

#: planted suite: case -> verdict at align 256 and at align 16 ("slack": no fault, and the
#: planted address is named inside the slack)
PLANTED = {"oob_write-cuda": ("slack", "past_end"), "oob_write-numba": ("slack", "past_end"),
           "oob_read-cuda": ("slack", "past_end"), "oob_read-numba": ("slack", "past_end"),
           "use_after_free-cuda": ("freed", "freed")}


# --- judging a stress run ---------------------------------------------------------------------

def _read_jsonl(path: Path) -> list[dict]:
    from faulthunt.rundir import read_jsonl

    return read_jsonl(path).records if path.exists() else []


def _ledger(run: Path, pid: int) -> list[dict]:
    return _read_jsonl(run / "ledger" / f"{pid}.jsonl")


def _at(recs: list[dict], ts: float | None) -> float | None:
    """The Xid's kernel time on the ledger's wall clock (its first record carries both clocks)."""
    for r in recs:
        if isinstance(r.get("t_mono"), (int, float)) and ts is not None:
            return float(ts) + float(r["t"]) - float(r["t_mono"])
    return None


def _contains(span, value: int) -> bool:
    if isinstance(span, list):
        return span[0] <= value <= span[1]
    return span == value


def judge_run(run: Path, faults: dict[str, tuple[str, int]], twins: tuple[str, ...],
              slack_cases: tuple[str, ...] = ()) -> list[dict]:
    """One row per expected test: what happened and whether it is what guard mode must show."""
    from faulthunt.guard import guard_verdict

    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
    spans = [r for p in sorted((run / "events").glob("*.jsonl")) for r in _read_jsonl(p)]
    outcomes: dict[str, list[str]] = {}
    for r in spans:
        if r.get("event") == "end":
            outcomes.setdefault(r["nodeid"], []).append(r.get("outcome"))
    for f in summary.get("failures", []):
        if f.get("outcome") == "crashed":
            outcomes.setdefault(f["nodeid"], []).append("crashed")
    xids = summary.get("xids", [])
    rows = []

    def find(name: str) -> list[str]:
        return [n for n in outcomes if n.endswith((f"::{name}", f"[{name}]"))]

    for name, (want, off) in faults.items():
        nodes = find(name)
        mine = [x for x in xids if x.get("xid") == 31 and any(x.get("nodeid") == n for n in nodes)]
        row = {"test": name, "want": want, "outcomes": [o for n in nodes for o in outcomes[n]],
               "xid31": len(mine)}
        if mine:
            x = mine[0]
            page = (x.get("mmu") or {}).get("address")
            recs = _ledger(run, x["pid"]) if x.get("pid") else []
            v = guard_verdict(recs, page, page=True, at=_at(recs, x.get("ts"))) if page is not None else None
            j = v.to_json() if v else None
            row.update(page=hex(page) if page is not None else None, verdict=j and j["verdict"],
                       text=j and j["text"], beyond=j and j["beyond"], offset=j and j["offset"])
            exact = (j is not None and j["verdict"] == want and j["caught"]
                     and _contains(j["beyond"] if want == "past_end" else j["offset"], off))
            row["ok"] = bool(exact) and all(o in ("failed", "crashed", "error") for o in row["outcomes"])
        else:
            row["ok"] = False
        rows.append(row)
    for name in slack_cases:
        nodes = find(name)
        mine = [x for x in xids if any(x.get("nodeid") == n for n in nodes)]
        verdicts = []
        for n in nodes:
            for p in sorted((run / "ledger").glob("*.jsonl")):
                recs = _read_jsonl(p)
                for r in recs:
                    if (r.get("source") == "guard" and r.get("event") == "alloc" and r.get("nodeid") == n
                            and r.get("size") == 4000):
                        v = guard_verdict(recs, r["address"] + 4000, at=r["t"])
                        verdicts.append(v.to_json()["verdict"] if v else None)
        row = {"test": name, "want": "slack", "outcomes": [o for n in nodes for o in outcomes[n]],
               "xids": len(mine), "planted_verdicts": verdicts}
        row["ok"] = (bool(verdicts) and all(v == "slack" for v in verdicts) and not mine
                     and row["outcomes"] and all(o == "passed" for o in row["outcomes"]))
        rows.append(row)
    for name in twins:
        nodes = find(name)
        mine = [x for x in xids if any(x.get("nodeid") == n for n in nodes)]
        outs = [o for n in nodes for o in outcomes[n]]
        rows.append({"test": name, "want": "clean", "outcomes": outs, "xids": len(mine),
                     "ok": bool(outs) and all(o == "passed" for o in outs) and not mine})
    return rows


def stress(args: list[str], cwd: Path, env: dict, timeout: float, log: Path) -> int:
    cmd = [sys.executable, "-m", "faulthunt", "stress", *args]
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        log.write_text(f"$ {' '.join(cmd)}\nrc={p.returncode}\n{p.stdout}\n--- stderr\n{p.stderr[-20000:]}")
        return p.returncode
    except subprocess.TimeoutExpired:
        log.write_text(f"$ {' '.join(cmd)}\ntimed out after {timeout} s")
        return 124


# --- 4. the allocation-heavy loop ---------------------------------------------------------------

FILL = r'''
extern "C" __global__ void fill(float* p, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 2.0f;
}
'''


def loop(fw: str, spec: str, n: int, ledger: str) -> None:
    """``n`` x (allocate 4000 bytes, launch fill, free), imports and warm-up excluded."""
    guard = None
    if spec != "off":
        from faulthunt.guard import parse_spec
        from faulthunt.guard.install import install

        guard = install(Path(ledger), parse_spec(spec), seed=1, quiet=True).allocator
    import numpy as np

    if fw == "cupy":
        import cupy as cp

        fill = cp.RawModule(code=FILL).get_function("fill")

        def once() -> None:
            a = cp.empty(1000, dtype=cp.float32)
            fill((4,), (256,), (a, np.int64(1000)))
            del a
        sync = cp.cuda.runtime.deviceSynchronize
    else:
        from numba import cuda

        @cuda.jit
        def nfill(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = 2.0

        def once() -> None:
            a = cuda.device_array(1000, dtype=np.float32)
            nfill[4, 256](a)
            del a
        sync = cuda.synchronize
    for _ in range(50):
        once()
    sync()
    if guard is not None:
        guard.begin_test("loop")
        before = (guard.counts.guarded, guard.counts.seen)
    t0 = time.perf_counter()
    for _ in range(n):
        once()
    sync()
    seconds = time.perf_counter() - t0
    say(stage="loop", framework=fw, spec=spec, n=n, seconds=round(seconds, 4),
        guarded=guard.counts.guarded - before[0] if guard else 0,
        seen=guard.counts.seen - before[1] if guard else 0)


# --- orchestration ------------------------------------------------------------------------------

def child(args: list[str], timeout: float, env: dict | None = None) -> tuple[int, str, str]:
    try:
        p = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                           timeout=timeout, env=env)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out, "timed out"


def lines(text: str) -> list[dict]:
    out = []
    for ln in text.splitlines():
        if ln.startswith("{"):
            try:
                out.append(json.loads(ln))
            except ValueError:
                pass
    return out


def run_all(work: Path, dest: Path) -> int:
    t_start = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    results: dict = {"started": time.time()}
    env = dict(os.environ)
    env.setdefault("FAULTHUNT_LEDGER", "auto")
    left = lambda: BUDGET_S - (time.monotonic() - t_start)  # noqa: E731

    # 1. probe
    rc, so, se = child(["probe", str(work / "probe_ledger")], 150)
    results["probe"] = {"rc": rc, "rows": lines(so), "stderr": se[-4000:]}
    print(f"[probe] rc={rc} ({time.monotonic() - t_start:.0f} s)", flush=True)

    # 2. faults suite under faulthunt stress --guard 1
    fdir = work / "faults"
    fdir.mkdir(exist_ok=True)
    (fdir / "test_guard_faults.py").write_text(textwrap.dedent(FAULT_SUITE))
    rc = stress(["-n", "2", "--guard", "1", "--timeout", "60", "--run-dir", str(fdir / "run"),
                 "test_guard_faults.py", "--", "-p", "no:cacheprovider"], fdir, env,
                min(150, max(30, left() - 200)), work / "faults_stress.log")
    results["faults"] = {"rc": rc, "rows": judge_run(fdir / "run", FAULTS, TWINS)}
    print(f"[faults] rc={rc} ({time.monotonic() - t_start:.0f} s)", flush=True)

    # 3. the planted suite at align 256 and 16
    penv = {**env, "FAULTHUNT_KERNELS_BACKEND": "gpu"}
    for align in (256, 16):
        if left() < 140:
            results[f"planted_{align}"] = {"skipped": "time budget"}
            continue
        run = work / f"planted_{align}"
        spec = "1" if align == 256 else "1,align=16"
        rc = stress(["-n", "2", "--guard", spec, "--timeout", "60", "--run-dir", str(run),
                     "kernels/suite", "-k", "oob_write or oob_read or use_after_free",
                     "--", "-p", "no:cacheprovider"], REPO, penv, min(150, left() - 100),
                    work / f"planted_{align}_stress.log")
        idx = 0 if align == 256 else 1
        faults = {c: (w[idx], 0) for c, w in PLANTED.items() if w[idx] != "slack"}
        slack = tuple(c for c, w in PLANTED.items() if w[idx] == "slack")
        twins = tuple(f"test_twin[{c}]" for c in PLANTED)
        rows = judge_run(run, {f"test_planted[{c}]": w for c, w in faults.items()}, twins,
                         tuple(f"test_planted[{c}]" for c in slack))
        results[f"planted_{align}"] = {"rc": rc, "rows": rows}
        print(f"[planted align {align}] rc={rc} ({time.monotonic() - t_start:.0f} s)", flush=True)

    # 4. overhead
    loops = []
    plan = [("cupy", 3000), ("numba", 1000)]
    for fw, n in plan:
        for spec in ("off", "1", "100"):
            best = None
            for rep in range(2):
                if left() < 25:
                    break
                rc, so, se = child(["loop", fw, spec, str(n), str(work / f"loop_{fw}_{spec}_{rep}")], 90)
                got = [r for r in lines(so) if r.get("stage") == "loop"]
                if got and (best is None or got[0]["seconds"] < best["seconds"]):
                    best = got[0]
                if not got:
                    loops.append({"framework": fw, "spec": spec, "rc": rc, "error": se[-1500:]})
            if best:
                loops.append(best)
    results["loops"] = loops
    results["seconds"] = round(time.monotonic() - t_start, 1)
    (dest / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return report(results)


def report(results: dict) -> int:
    bad = 0
    print("\n== guard mode on the GPU ==")
    for r in results.get("probe", {}).get("rows", []):
        if r.get("framework") == "totals":
            print(f"probe totals: {r.get('counts')} hooks={r.get('hooks')}")
            continue
        ok = r.get("ok")
        bad += not ok
        print(f"probe {r.get('framework'):14} {'OK ' if ok else 'BAD'} guarded={r.get('guarded')} "
              f"data={r.get('data_ok')} unmapped={r.get('unmapped')} {r.get('error') or ''}")
    for stage in ("faults", "planted_256", "planted_16"):
        st = results.get(stage, {})
        if "skipped" in st:
            print(f"{stage}: SKIPPED ({st['skipped']})")
            bad += 1
            continue
        for r in st.get("rows", []):
            bad += not r.get("ok")
            print(f"{stage:12} {'OK ' if r.get('ok') else 'BAD'} {r['test']:40} want={r['want']:9} "
                  f"outcomes={r.get('outcomes')} xid31={r.get('xid31', r.get('xids'))} "
                  f"{r.get('text') or r.get('planted_verdicts') or ''}")
    base = {(r["framework"]): r["seconds"] for r in results.get("loops", []) if r.get("spec") == "off" and "seconds" in r}
    for r in results.get("loops", []):
        if "seconds" in r:
            ratio = r["seconds"] / base[r["framework"]] if base.get(r["framework"]) else float("nan")
            print(f"loop {r['framework']:6} guard={r['spec']:4} n={r['n']} {r['seconds']:.3f} s "
                  f"x{ratio:.2f} guarded={r['guarded']} of {r['seen']}")
        else:
            print(f"loop {r['framework']} guard={r['spec']} FAILED rc={r.get('rc')}: {r.get('error', '')[-300:]}")
    print(f"\n{'ALL OK' if not bad else f'{bad} BAD'} in {results.get('seconds')} s")
    return 0 if not bad else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["probe"]:
        probe(argv[1])
        return 0
    if argv[:1] == ["loop"]:
        loop(argv[1], argv[2], int(argv[3]), argv[4])
        return 0
    if argv[:1] == ["all"]:
        return run_all(Path(argv[1]), Path(argv[2]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
