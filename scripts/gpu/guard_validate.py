#!/usr/bin/env python3
"""H200 validation of guard mode (issue 15; run by guard_validate.sh, docs/guard.md).

    python3 scripts/gpu/guard_validate.py all WORK DEST          # every stage, < 130 s
    python3 scripts/gpu/guard_validate.py rehearse WORK DEST     # the same on a CPU (below)
    python3 scripts/gpu/guard_validate.py probe LEDGER           # each hook: allocate, write, read, free
    python3 scripts/gpu/guard_validate.py loop FW SPEC N LEDGER  # the allocation-heavy loop, timed

Stages of ``all`` (each bounded; results in DEST/results.json, a table on stdout whose last line
is ``ALL OK in N s`` on success):
1. probe    one process, guard rate 1: CuPy, numba, cuda.core, cuda-python bindings and torch each
            allocate 4096 bytes, write and read them back and free them; the allocation must be a
            guard slot (the allocator owns it) and the free must unmap it.
2. faults   ``faulthunt stress --guard 1`` over a generated CuPy/numba suite: a one-element overrun
            (write and read) of a 4096-byte buffer and a use after free must fail with an Xid 31
            whose guard verdict is past_end (0-4095 bytes past the end) / freed, and which the
            run's own mapping.json names the same way (``basis: guard``, the same text); their
            twins pass with no Xid; summary.json's guard section counts the catches.
3. planted  ``faulthunt stress -n 4 --guard 1`` over the bundled planted suite's oob_write,
            oob_read (CUDA C++ and numba) and use_after_free (CUDA C++) and their twins, at align
            256 (the default: the planted 4000-byte buffers keep 96 bytes of slack, so the
            overruns must pass and ``faulthunt map`` must call their address "inside the slack,
            not guardable") and at align 16 (no slack: Xid 31, past_end); the use after free
            fails with Xid 31 / freed at both; every twin passes with no Xid.
4. overhead ``faulthunt stress -n 4 -k test_twin kernels/suite`` (every twin of the planted suite,
            each a short real kernel and its allocations) plain, with ``--guard 1`` and with
            ``--guard`` (the default rate), in alternating pairs, every sample kept: the wall time
            of the whole command and the summed time of its tests.
5. loops    the allocation-heavy loop (allocate, launch fill, free; CuPy and numba) plain, with
            ``--guard 1`` and with the default rate, in fresh processes, while time is left.

``rehearse`` runs every stage with the same command lines on a machine without a GPU: guard
mode over its fake driver (``FAULTHUNT_GUARD_DRIVER=fake``), the planted suite on numba's
simulator (``FAULTHUNT_KERNELS_BACKEND=sim``), a SIMULATED CuPy (scripts/gpu/guard_rehearsal/)
whose kernels fault where a guard page is and write the Xid 31 line to a file the stress run
follows (``--xid-source file:``, the only option that differs). It checks what can be checked
there: every command runs the tests it names, CuPy's faults are named exactly, the rest runs.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

N_FLOATS = 1024                          # 4096 bytes: a multiple of every alignment, no slack
BUDGET_S = 125                           # the whole of `all`; the shell kills at 135
REPO = Path(__file__).resolve().parents[2]
REHEARSAL = Path(__file__).resolve().parent / "guard_rehearsal"
#: the planted cases of stage 3 (their node ids: test_planted[CASE], test_twin[CASE])
PLANTED_K = "oob_write or oob_read or use_after_free"


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
        except Exception as exc:  # noqa: BLE001 - a probe row says what broke; the next one runs
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


cuda = None  # numba.cuda once imported: a module global, which numba's simulator can swap


def _numba_poke():
    global cuda
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
#: on numba's simulator the suite has one flavour, and guard mode guards nothing (no EMM there):
#: the cases must run, that is all
PLANTED_SIM = {"oob_write-numba": ("ran", "ran"), "oob_read-numba": ("ran", "ran"),
               "use_after_free-numba": ("ran", "ran")}


@dataclasses.dataclass(frozen=True)
class Mode:
    """What differs between the GPU run and its CPU rehearsal (the command lines do not)."""

    name: str
    env: dict[str, str]
    #: ``faulthunt stress`` options only the rehearsal adds (its kernel log is a file)
    xid_args: tuple[str, ...]
    faults: dict[str, tuple[str, int]]
    #: fault tests that must run but cannot fault here (numba's simulator)
    faults_ran: tuple[str, ...]
    planted: dict[str, tuple[str, str]]
    loops: tuple[tuple[str, int], ...]
    pairs: int
    #: the planted suite's backend, for the ids it collects
    backend: str
    gpu: bool
    #: what a twin may end as: passed (the simulator skips what it cannot show)
    clean: tuple[str, ...] = ("passed",)


def gpu_mode() -> Mode:
    env = dict(os.environ)
    env.setdefault("FAULTHUNT_LEDGER", "auto")
    env["FAULTHUNT_KERNELS_BACKEND"] = "gpu"
    return Mode("gpu", env, (), FAULTS, (), PLANTED, (("cupy", 3000), ("numba", 1000)), 2, "gpu", True)


def rehearsal_mode(work: Path) -> Mode:
    kmsg = work / "kmsg.log"
    kmsg.touch()  # the kernel log the stress runs follow; the SIMULATED CuPy appends to it
    env = {k: v for k, v in os.environ.items() if k != "FAULTHUNT_RUN_DIR"}
    env.update(FAULTHUNT_LEDGER="auto", FAULTHUNT_GUARD_DRIVER="fake", FAULTHUNT_KERNELS_BACKEND="sim",
               NUMBA_ENABLE_CUDASIM="1", FAULTHUNT_REHEARSAL_KMSG=str(kmsg),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REHEARSAL), env.get("PYTHONPATH")])))
    faults = {k: v for k, v in FAULTS.items() if k.startswith("test_cupy")}
    return Mode("rehearsal", env, ("--xid-source", f"file:{kmsg}"), faults,
                ("test_numba_write_one_past",), PLANTED_SIM, (("cupy", 200), ("numba", 2)), 1,
                "sim", False, ("passed", "skipped"))


# --- the command lines (pure: tests parse them with today's CLI) --------------------------------

def faults_args(run: Path, mode: Mode) -> list[str]:
    return ["-n", "2", "--guard", "1", "--timeout", "60", *mode.xid_args, "--run-dir", str(run),
            "test_guard_faults.py", "--", "-p", "no:cacheprovider"]


def planted_args(run: Path, align: int, mode: Mode) -> list[str]:
    spec = "1" if align == 256 else f"1,align={align}"
    return ["-n", "4", "--guard", spec, "--timeout", "60", *mode.xid_args, "--run-dir", str(run),
            "-k", PLANTED_K, "kernels/suite", "--", "-p", "no:cacheprovider"]


#: stage 4's settings: plain, every allocation guarded, the default rate (--guard alone)
OVERHEAD_SPECS = ("off", "1", "default")


def overhead_args(run: Path, spec: str, mode: Mode) -> list[str]:
    guard = [] if spec == "off" else ["--guard"] if spec == "default" else ["--guard", spec]
    return ["-n", "4", *guard, "--timeout", "60", *mode.xid_args, "--run-dir", str(run),
            "-k", "test_twin", "kernels/suite", "--", "-p", "no:cacheprovider"]


def suite_ids(backend: str, cases: dict[str, Any] | None = None) -> list[str]:
    """The node names the planted suite runs: its twins (``cases``: planted and twin of those)."""
    sys.path.insert(0, str(REPO))
    from faulthunt.kernels import backend as kb
    from faulthunt.kernels import catalog

    if cases is not None:
        return [f"test_planted[{c}]" for c in cases] + [f"test_twin[{c}]" for c in cases]
    return [f"test_twin[{f.name}-{fl}]" for f in catalog.CATALOG for fl in kb.flavours_for(f, backend)]


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


def _json(path: Path) -> dict:
    try:
        got = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def _outcomes(run: Path) -> dict[str, list[str]]:
    summary = _json(run / "summary.json")
    outcomes: dict[str, list[str]] = {}
    for p in sorted((run / "events").glob("*.jsonl")):
        for r in _read_jsonl(p):
            if r.get("event") == "end":
                outcomes.setdefault(r["nodeid"], []).append(r.get("outcome"))
    for f in summary.get("failures", []):
        if f.get("outcome") == "crashed":
            outcomes.setdefault(f["nodeid"], []).append("crashed")
    return outcomes


def _find(outcomes: dict[str, list[str]], name: str) -> list[str]:
    return [n for n in outcomes if n.endswith((f"::{name}", f"[{name}]"))]


def _fault_row(run: Path, name: str, want: str, off: int, nodes: list[str], outs: list[str],
               xids: list[dict], mapping: list[dict]) -> dict:
    from faulthunt.guard import guard_verdict

    mine = [x for x in xids if x.get("xid") == 31 and x.get("nodeid") in nodes]
    row: dict[str, Any] = {"test": name, "want": want, "outcomes": outs, "xid31": len(mine)}
    if not mine:
        return {**row, "ok": False}
    x = mine[0]
    page = (x.get("mmu") or {}).get("address")
    recs = _ledger(run, x["pid"]) if x.get("pid") else []
    v = guard_verdict(recs, page, page=True, at=_at(recs, x.get("ts"))) if page is not None else None
    j = v.to_json() if v else None
    row.update(page=hex(page) if page is not None else None, verdict=j and j["verdict"],
               text=j and j["text"], beyond=j and j["beyond"], offset=j and j["offset"])
    exact = (j is not None and j["verdict"] == want and j["caught"]
             and _contains(j["beyond"] if want == "past_end" else j["offset"], off))
    # the run's own mapping.json (written by faulthunt stress) must say the same
    m = next((e for e in mapping if e.get("address_int") == page and e.get("pid") == x.get("pid")), {})
    row.update(mapped_basis=m.get("basis"), mapped_text=m.get("text"))
    mapped = j is not None and m.get("basis") == "guard" and m.get("text") == j["text"]
    row["ok"] = bool(exact) and mapped and all(o in ("failed", "crashed", "error") for o in outs)
    return row


def _slack_row(run: Path, name: str, nodes: list[str], outs: list[str], xids: list[dict]) -> dict:
    """A planted overrun inside the slack: no fault, and ``faulthunt map`` (the mapper over the
    run's whole ledger) calls the planted address inside the slack, never inside."""
    from faulthunt.ledger.reader import iter_guard_records, load_ledger
    from faulthunt.mapper import map_address

    mine = [x for x in xids if x.get("nodeid") in nodes]
    texts = []
    if (run / "ledger").is_dir():
        ledger = None
        for r in iter_guard_records(run / "ledger"):
            if r.get("event") == "alloc" and r.get("nodeid") in nodes and r.get("size") == 4000:
                ledger = ledger or load_ledger(run / "ledger")
                v = map_address(ledger, r["address"] + 4000, pid=r.get("pid"), at=r["t"]).to_json()
                texts.append(v.get("text") or v.get("verdict"))
    row = {"test": name, "want": "slack", "outcomes": outs, "xids": len(mine), "planted_verdicts": texts}
    row["ok"] = (bool(texts) and all(str(t).startswith("inside the slack, not guardable") for t in texts)
                 and not mine and bool(outs) and all(o == "passed" for o in outs))
    return row


def judge_run(run: Path, faults: dict[str, tuple[str, int]], twins: tuple[str, ...],
              slack_cases: tuple[str, ...] = (), ran: tuple[str, ...] = (),
              clean: tuple[str, ...] = ("passed",)) -> list[dict]:
    """One row per expected test: what happened and whether it is what guard mode must show."""
    summary = _json(run / "summary.json")
    outcomes = _outcomes(run)
    xids = summary.get("xids", [])
    try:
        mapping = json.loads((run / "mapping.json").read_text())
    except (OSError, ValueError):
        mapping = []
    rows = []
    for name, (want, off) in faults.items():
        nodes = _find(outcomes, name)
        rows.append(_fault_row(run, name, want, off, nodes, [o for n in nodes for o in outcomes[n]],
                               xids, mapping if isinstance(mapping, list) else []))
    for name in slack_cases:
        nodes = _find(outcomes, name)
        rows.append(_slack_row(run, name, nodes, [o for n in nodes for o in outcomes[n]], xids))
    for name in twins:
        nodes = _find(outcomes, name)
        mine = [x for x in xids if x.get("nodeid") in nodes]
        outs = [o for n in nodes for o in outcomes[n]]
        rows.append({"test": name, "want": "clean", "outcomes": outs, "xids": len(mine),
                     "ok": bool(outs) and all(o in clean for o in outs) and not mine})
    for name in ran:
        outs = [o for n in _find(outcomes, name) for o in outcomes[n]]
        rows.append({"test": name, "want": "ran", "outcomes": outs, "ok": bool(outs)})
    return rows


def run_rows(run: Path, expected: list[str], caught: dict[str, int] | None) -> list[dict]:
    """The run as a whole: the command ran exactly the tests it names (pytest's own command line
    in run.json shows what it was given), and summary.json's guard section counts the catches."""
    info, summary = _json(run / "run.json"), _json(run / "summary.json")
    argv = [str(a) for a in info.get("pytest_argv") or []]
    ran = sorted({n.split("::")[-1] for n in _outcomes(run)})
    rows = [{"test": "(command)", "want": f"{len(expected)} tests", "tests_run": summary.get("tests_run"),
             "pytest_exit_status": summary.get("pytest_exit_status"), "pytest_argv": argv[3:],
             "missing": sorted(set(expected) - set(ran)), "extra": sorted(set(ran) - set(expected)),
             "ok": ran == sorted(expected) and summary.get("tests_run") == len(expected)}]
    if caught is not None:
        got = (summary.get("guard") or {}).get("caught")
        rows.append({"test": "(summary.json guard)", "want": f"caught {caught}", "got": got,
                     "line": _guard_line(summary), "ok": got == caught})
    return rows


def _guard_line(summary: dict) -> str | None:
    from faulthunt.guard import guard_line

    g = summary.get("guard")
    return guard_line(g) if isinstance(g, dict) else None


def stress(args: list[str], cwd: Path, env: dict, timeout: float, log: Path) -> int:
    cmd = [sys.executable, "-m", "faulthunt", "stress", *args]
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=max(5.0, timeout))
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


#: numba.cuda once the numba loop imports it: a module global, which numba's simulator swaps
#: for its own inside a kernel (a closure it cannot: the CPU rehearsal runs this loop there)
cuda: Any = None


def loop(fw: str, spec: str, n: int, ledger: str) -> None:
    """``n`` x (allocate 4000 bytes, launch fill, free), imports and warm-up excluded."""
    global cuda
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
    for _ in range(min(50, n)):  # warm-up (a few on numba's simulator: the CPU rehearsal)
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
                           timeout=max(5.0, timeout), env=env)
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


class Clock:
    def __init__(self, budget: float) -> None:
        self.t0 = time.monotonic()
        self.budget = budget

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def say(self, what: str) -> None:
        print(f"[{what}] ({time.monotonic() - self.t0:.0f} s)", flush=True)


def stage_probe(mode: Mode, work: Path, clock: Clock) -> dict:
    rc, so, se = child(["probe", str(work / "probe_ledger")], min(30, clock.left()), mode.env)
    rows = lines(so)
    if not mode.gpu:  # only CuPy (the SIMULATED one) can be guarded on a CPU: the rest must not crash
        rows = [r if r.get("framework") in ("cupy", "totals") else dict(r, ok=True, na="not on a CPU")
                for r in rows]
    clock.say(f"probe rc={rc}")
    return {"rc": rc, "rows": rows, "stderr": se[-4000:]}


def stage_faults(mode: Mode, work: Path, clock: Clock) -> dict:
    fdir = work / "faults"
    fdir.mkdir(exist_ok=True)
    (fdir / "test_guard_faults.py").write_text(textwrap.dedent(FAULT_SUITE))
    run = fdir / "run"
    rc = stress(faults_args(run, mode), fdir, mode.env, min(45, clock.left() - 60),
                work / "faults_stress.log")
    rows = judge_run(run, mode.faults, TWINS, ran=mode.faults_ran, clean=mode.clean)
    caught = dict(Counter(w for w, _ in mode.faults.values()))
    rows += run_rows(run, list(mode.faults) + list(TWINS) + list(mode.faults_ran), caught)
    clock.say(f"faults rc={rc}")
    return {"rc": rc, "rows": rows}


def stage_planted(mode: Mode, work: Path, clock: Clock, align: int) -> dict:
    if clock.left() < 60:
        return {"skipped": "time budget"}
    run = work / f"planted_{align}"
    rc = stress(planted_args(run, align, mode), REPO, mode.env, min(40, clock.left() - 45),
                work / f"planted_{align}_stress.log")
    idx = 0 if align == 256 else 1
    want = {c: w[idx] for c, w in mode.planted.items()}
    faults = {f"test_planted[{c}]": (w, 0) for c, w in want.items() if w not in ("slack", "ran")}
    slack = tuple(f"test_planted[{c}]" for c, w in want.items() if w == "slack")
    ran = tuple(f"test_planted[{c}]" for c, w in want.items() if w == "ran")
    twins = tuple(f"test_twin[{c}]" for c in mode.planted)
    rows = judge_run(run, faults, twins, slack, ran, mode.clean)
    caught = dict(Counter(w for w, _ in faults.values())) if mode.gpu else None
    rows += run_rows(run, suite_ids(mode.backend, mode.planted), caught)
    clock.say(f"planted align {align} rc={rc}")
    return {"rc": rc, "rows": rows}


def _tests_seconds(run: Path) -> float | None:
    from faulthunt.rundir import RunDir

    spans = [s for s in RunDir(run).spans() if s.t1 is not None and s.t0 is not None]
    return round(sum(s.t1 - s.t0 for s in spans), 3) if spans else None


def stage_overhead(mode: Mode, work: Path, clock: Clock) -> dict:
    """The twins of the planted suite plain, at --guard 1 and at the default rate, in
    alternating pairs (a pair: one run of each, in order); every sample kept."""
    expected = suite_ids(mode.backend)
    samples: list[dict] = []
    for pair in range(mode.pairs):
        if clock.left() < (45 if pair == 0 else 55):
            break
        for spec in OVERHEAD_SPECS:
            run = work / f"overhead_{spec}_{pair}"
            t0 = time.perf_counter()
            rc = stress(overhead_args(run, spec, mode), REPO, mode.env, min(40, clock.left() - 10),
                        work / f"overhead_{spec}_{pair}_stress.log")
            wall = round(time.perf_counter() - t0, 3)
            summary = _json(run / "summary.json")
            guard = summary.get("guard") or {}
            samples.append({"spec": spec, "pair": pair, "rc": rc, "wall_s": wall,
                            "tests_s": _tests_seconds(run), "tests_run": summary.get("tests_run"),
                            "guarded": guard.get("allocations_guarded"), "seen": guard.get("allocations_seen")})
    rows = []
    for spec in OVERHEAD_SPECS:
        mine = [s for s in samples if s["spec"] == spec]
        ok = bool(mine) and all(s["rc"] == 0 and s["tests_run"] == len(expected) for s in mine)
        if spec == "1" and mode.gpu:  # guard mode must have guarded what the twins allocate
            ok = ok and all((s["guarded"] or 0) > 0 for s in mine)
        rows.append({"test": f"twins --guard {spec}" if spec != "off" else "twins plain", "want": "rc 0",
                     "spec": spec, "runs": len(mine), "ok": ok,
                     "wall_s": [s["wall_s"] for s in mine], "tests_s": [s["tests_s"] for s in mine],
                     "guarded": [s["guarded"] for s in mine], "seen": [s["seen"] for s in mine]})
    clock.say(f"overhead {len(samples)} runs")
    return {"samples": samples, "rows": rows, "tests": len(expected)}


def stage_loops(mode: Mode, work: Path, clock: Clock) -> list[dict]:
    loops = []
    for fw, n in mode.loops:
        for spec in ("off", "1", "100"):
            best = None
            for rep in range(2):
                if clock.left() < 12:
                    break
                rc, so, se = child(["loop", fw, spec, str(n), str(work / f"loop_{fw}_{spec}_{rep}")],
                                   min(20, clock.left() - 2), mode.env)
                got = [r for r in lines(so) if r.get("stage") == "loop"]
                if got and (best is None or got[0]["seconds"] < best["seconds"]):
                    best = got[0]
                if not got:
                    loops.append({"framework": fw, "spec": spec, "rc": rc, "error": se[-1500:]})
            if best:
                loops.append(best)
    clock.say(f"loops {len(loops)}")
    return loops


def run_all(mode: Mode, work: Path, dest: Path) -> int:
    clock = Clock(BUDGET_S)
    work.mkdir(parents=True, exist_ok=True)
    dest.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"started": time.time(), "mode": mode.name}
    results["probe"] = stage_probe(mode, work, clock)
    results["faults"] = stage_faults(mode, work, clock)
    for align in (256, 16):
        results[f"planted_{align}"] = stage_planted(mode, work, clock, align)
    results["overhead"] = stage_overhead(mode, work, clock)
    results["loops"] = stage_loops(mode, work, clock)
    results["seconds"] = round(time.monotonic() - clock.t0, 1)
    (dest / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return report(results)


def _ratio(x: list[float | None], base: list[float | None]) -> str:
    xs, bs = [v for v in x if v is not None], [v for v in base if v is not None]
    if not xs or not bs:
        return "-"
    return f"x{statistics.median(xs) / statistics.median(bs):.2f}"


def report(results: dict) -> int:
    bad = 0
    print(f"\n== guard mode on the GPU ({results.get('mode')}) ==")
    for r in results.get("probe", {}).get("rows", []):
        if r.get("framework") == "totals":
            print(f"probe totals: {r.get('counts')} hooks={r.get('hooks')}")
            continue
        ok = r.get("ok")
        bad += not ok
        if r.get("na"):
            print(f"probe {r.get('framework'):14} n/a ({r['na']}: {r.get('error')})")
            continue
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
            detail = (r.get("text") or r.get("planted_verdicts") or r.get("line") or r.get("got")
                      or (r.get("missing") or r.get("extra")) or "")
            print(f"{stage:12} {'OK ' if r.get('ok') else 'BAD'} {r['test']:40} want={r['want']:9} "
                  f"outcomes={r.get('outcomes', r.get('tests_run'))} "
                  f"xid31={r.get('xid31', r.get('xids'))} {detail}")
    over = results.get("overhead", {})
    base = next((r for r in over.get("rows", []) if r["spec"] == "off"), {})
    for r in over.get("rows", []):
        bad += not r.get("ok")
        print(f"overhead     {'OK ' if r.get('ok') else 'BAD'} {r['test']:22} {over.get('tests')} twins, "
              f"{r['runs']} run(s): wall {r['wall_s']} s ({_ratio(r['wall_s'], base.get('wall_s', []))}), "
              f"tests {r['tests_s']} s ({_ratio(r['tests_s'], base.get('tests_s', []))}), "
              f"guarded {r['guarded']} of {r['seen']}")
    base_loop = {r["framework"]: r["seconds"] for r in results.get("loops", [])
                 if r.get("spec") == "off" and "seconds" in r}
    for r in results.get("loops", []):
        if "seconds" in r:
            ratio = r["seconds"] / base_loop[r["framework"]] if base_loop.get(r["framework"]) else float("nan")
            print(f"loop {r['framework']:6} guard={r['spec']:4} n={r['n']} {r['seconds']:.3f} s "
                  f"x{ratio:.2f} guarded={r['guarded']} of {r['seen']}")
        else:
            bad += 1
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
    if argv[:1] == ["all"] and len(argv) == 3:
        return run_all(gpu_mode(), Path(argv[1]), Path(argv[2]))
    if argv[:1] == ["rehearse"] and len(argv) == 3:
        work = Path(argv[1])
        work.mkdir(parents=True, exist_ok=True)
        return run_all(rehearsal_mode(work), work, Path(argv[2]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
