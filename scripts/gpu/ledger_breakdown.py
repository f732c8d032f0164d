#!/usr/bin/env python3
"""The ledger's routes on the GPU: what each costs on an allocation-heavy loop, whether a dying
worker keeps its last launches, and whether the planted faults still map (ledger_breakdown.sh).

    python3 scripts/gpu/ledger_breakdown.py all OUTDIR                    # everything, < 6 min
    python3 scripts/gpu/ledger_breakdown.py loop FW CONFIG N SAMPLES DIR   # one process's samples
    python3 scripts/gpu/ledger_breakdown.py crash ROUTE HOW N DIR          # launches, then die
    python3 scripts/gpu/ledger_breakdown.py fault DIR                      # CUPTI kernel records of a faulting launch

Loops (ledger_probe.loop_runner: allocate + launch ``fill`` + free, no synchronization inside; CuPy,
numba, cuda.core): every configuration of :data:`PER_FW` in its own process, several samples a
process, the processes interleaved over two rounds (the second in reverse order), so drift on the
host lands on every configuration. A sample's ratio is against the ``off`` sample of the same
round and index. Round 5 (issue 16) measures ``auto`` (the default: driver-level records, CuPy's
MemoryHook and numba's EMM left to ``full``, driver allocations' stacks sampled), ``full`` (every
per-array record, a stack on every allocation: what round 4 called ``native``) and
``auto/allstacks`` (auto with a stack on every driver allocation: what the sampling saves) and
``auto/cballoc`` (auto with allocation lines from the callbacks, FAULTHUNT_LEDGER_ALLOCS=callback);
round 6 makes those callbacks ``auto``'s own allocation source and measures ``auto/mem2`` (auto
with MEMORY2 records instead, FAULTHUNT_LEDGER_ALLOCS=activity: round 5's ``auto``), with samples
of about 0.3 s (N per loop; round 5's 24 ms samples of cuda.core were mostly noise) and the loop
processes pinned to two cores;
``hook_noop`` is CuPy with a registered MemoryHook that does nothing and no ledger (CuPy's own
dispatch of a hook). Round 4's route configurations stay in :data:`CONFIGS` for a rerun.

Crash: a CuPy loop under ``auto`` launches N kernels without synchronizing and then aborts (or is
SIGKILLed); the ledger is counted for its launches of ``fill`` (the compiled route writes each
launch before the kernel runs: all N, either way).

Verdicts: the planted faults of ledger_probe.py (Xid, memcheck, planted address) under ``full``
(all 16 as expected before) and under ``auto`` (the same, except CuPy's write into a block the
pool took back and into a block's slack: at the segment level those lie ``inside`` a live
segment, and the mapping's note says to rerun with ``--ledger full``; since round 6 ``auto``
takes its allocations from the callbacks, which round 5 probed as ``auto/cballoc``); with the
launches the mapping lists and those whose time the ledger estimated.

Writes to OUTDIR: summary.txt (the tables), loops.jsonl (every sample), probe.jsonl (every case),
crash.json, errors.txt (stderr of any child that failed), ledgers.tgz (a few ledgers, cut).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ledger_probe import CASES, SAMPLE_ITERS, SRC, loop_runner, pin_to_cores, probe_case

ROUTE = "FAULTHUNT_LEDGER_ROUTE"
STACK_KEY = "FAULTHUNT_LEDGER_STACK_KEY"
#: config -> (ledger mode, environment)
CONFIGS: dict[str, tuple[str, dict[str, str]]] = {
    "off": ("off", {}),
    "current": ("auto", {ROUTE: "python", STACK_KEY: "line"}),
    "python": ("auto", {ROUTE: "python"}),
    "activity": ("auto", {ROUTE: "activity"}),
    "native": ("auto", {ROUTE: "native"}),
    "native-activity": ("auto", {ROUTE: "native-activity"}),
    "native/cupti": ("cupti", {ROUTE: "native"}),
    "native-activity/cupti": ("cupti", {ROUTE: "native-activity"}),
    # CuPy's own cost of a registered MemoryHook whose methods do nothing (no ledger)
    "hook_noop": ("off", {}),
    # round 5 (issue 16): the default (driver level, sampled stacks), everything, and the default
    # with a stack on every driver allocation (what the sampling saves)
    "auto": ("auto", {}),
    "full": ("full", {}),
    "auto/allstacks": ("auto", {"FAULTHUNT_LEDGER_STACKS": "alloc"}),
    # round 6: auto takes allocations from the callbacks; this is round 5's auto (MEMORY2 records)
    "auto/mem2": ("auto", {"FAULTHUNT_LEDGER_ALLOCS": "activity"}),
}
#: the configurations measured per loop (round 6; round 4's were every route, docs/ledger.md)
PER_FW = {"cupy": ["off", "auto", "full"],
          "numba": ["off", "auto", "full", "auto/mem2"],
          "cuda_core": ["off", "auto", "full", "auto/mem2"]}
#: iterations a sample, per loop (ledger_probe's, shared with ledger_cupti_cost.py)
NS = SAMPLE_ITERS
SAMPLES, ROUNDS = 5, 2
#: seconds from the start after which no new loop process / probe case starts
LOOP_BUDGET, TOTAL_BUDGET = 250.0, 400.0
#: ledger mode -> the planted cases run under it (on the route auto picks). ``full`` records
#: every array: all 16 as before. ``auto`` records CuPy at the pool-segment level: a write into a
#: block CuPy took back, or into a block's slack, lies inside a live segment there (``inside``,
#: the mapper's note saying how to get the array's bounds), so those two expect ``inside``.
PROBE_MODES = {
    "full": [c for c in CASES],
    "auto": [c for c in CASES],
    # allocations from the callbacks: the cases whose verdict rests on a driver allocation record
}
#: the environment of each probe mode (the ledger mode is the part before the "/")
PROBE_ENV: dict[str, dict[str, str]] = {}
#: numba's Python-level release is not recorded under auto (no EMM beside CUPTI): its use after
#: free, planted before the deferred driver free, lies inside the live driver allocation
AUTO_EXPECT = {("cupy", "pool_uaf"): "inside", ("cupy", "slack"): "inside", ("numba", "uaf"): "inside"}
WORK = Path(os.environ.get("BREAKDOWN_WORK", "/tmp/ledger_breakdown"))


# --- children ---------------------------------------------------------------------------------

def run_loop(fw: str, config: str, n: int, samples: int, ledger_dir: str) -> None:
    mode, _env = CONFIGS[config]
    info: dict = {}
    if mode != "off":
        from faulthunt.ledger import install

        h = install(Path(ledger_dir), mode, quiet=True)
        if h is not None:
            info = {"route": h.writer.route.name, "backend": h.writer.backend,
                    "cupti": [type(s).__name__ for s in h.sources],
                    "launches": next((s.launches for s in h.sources if hasattr(s, "launches")), None)}
    if config == "hook_noop":
        import cupy

        cupy.cuda.MemoryHook().__enter__()
    run = loop_runner(fw)
    got = [run(n) for _ in range(samples)]
    if info:
        info["stacks"] = h.writer.stacks
        info["sources"] = h.source_names
        if h.writer.route.compiled:
            from faulthunt.ledger import native

            st = native.stats(h.writer.route.lib)
            info["stats"] = {k: st[k] for k in ("launches", "memory_records", "alloc_stacks",
                                                "alloc_stacks_sampled_out", "flushes")}
    print(json.dumps({"loop": fw, "config": config, "n": n, "samples": got, **info}), flush=True)


def run_crash(route: str, how: str, n: int, ledger_dir: str) -> None:
    """Install the ledger on ``route``, launch ``n`` fills (no synchronization), die ``how``."""
    os.environ[ROUTE] = route
    from faulthunt.ledger import install

    install(Path(ledger_dir), "auto", quiet=True)
    import cupy as cp

    fill = cp.RawModule(code=SRC).get_function("fill")
    a = cp.empty(1 << 20, dtype=cp.float32)
    cp.cuda.runtime.deviceSynchronize()
    for _ in range(n):
        fill((4096,), (256,), (a, cp.int64(a.size)))
    print(json.dumps({"launched": n, "pid": os.getpid()}), flush=True)
    if how == "abort":
        os.abort()
    time.sleep(30)  # the parent sends SIGKILL


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
    err = None
    try:
        poke((1,), (32,), (a, cp.int64(1 << 36)))
        cp.cuda.runtime.deviceSynchronize()
    except Exception as exc:  # noqa: BLE001 - the planted fault: whatever CuPy raises for it is the result
        err = repr(exc)
    c.activity_flush_all(int(c.ActivityFlag.FLUSH_FORCED))
    Path(out).mkdir(parents=True, exist_ok=True)
    res = {"error": err, "records": got[-12:], "n_records": len(got)}
    (Path(out) / "fault_records.json").write_text(json.dumps(res, indent=2, default=str))
    print(json.dumps(res, default=str))


# --- the whole run ------------------------------------------------------------------------------

class Run:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.t0 = time.monotonic()
        self.errors: list[str] = []
        out.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def child(self, args: list[str], env: dict[str, str], timeout: float, pin: bool = False) -> tuple[int, str, str]:
        full = {**os.environ, **env}
        try:
            # -X faulthandler: a child that crashes leaves its Python stack in errors.txt
            p = subprocess.run([sys.executable, "-X", "faulthandler", __file__, *args], capture_output=True,
                               text=True, timeout=timeout, env=full, preexec_fn=pin_to_cores if pin else None)
            rc, so, se = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, so, se = 124, str(exc.stdout or ""), "timeout"
        if rc != 0:
            self.errors.append(f"--- {' '.join(args)} (rc {rc})\n{se[-3000:]}")
        return rc, so, se

    # loops ----------------------------------------------------------------------------------
    def loops(self) -> list[dict]:
        plan = [(fw, cfg) for fw, cfgs in PER_FW.items() for cfg in cfgs]
        got: list[dict] = []
        for rnd in range(ROUNDS):
            for fw, cfg in (plan if rnd % 2 == 0 else plan[::-1]):
                if self.elapsed() > LOOP_BUDGET:
                    got.append({"loop": fw, "config": cfg, "round": rnd, "skipped": "time budget"})
                    continue
                d = WORK / "loops" / f"{fw}_{cfg.replace('/', '_')}_{rnd}"
                rc, so, _se = self.child(["loop", fw, cfg, str(NS[fw]), str(SAMPLES), str(d)], CONFIGS[cfg][1], 120,
                                         pin=True)
                line = next((x for x in so.splitlines() if x.startswith("{")), None)
                rec = {"loop": fw, "config": cfg, "round": rnd, "rc": rc}
                if line:
                    rec.update(json.loads(line))
                if rnd == 0 and d.is_dir():
                    rec["records"] = _counts(d)
                got.append(rec)
                print(f"[{self.elapsed():5.0f}s] {fw:9} {cfg:22} {rec.get('samples')}", flush=True)
        with open(self.out / "loops.jsonl", "w") as fh:
            for r in got:
                fh.write(json.dumps(r) + "\n")
        return got

    # crash ----------------------------------------------------------------------------------
    def crashes(self) -> list[dict]:
        got = []
        for route, how in (("native", "abort"), ("native", "SIGKILL")):
            d = WORK / "crash" / f"{route}_{how}"
            n = 500
            if how == "SIGKILL":
                p = subprocess.Popen([sys.executable, __file__, "crash", route, how, str(n), str(d)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, ROUTE: route})
                first = p.stdout.readline() if p.stdout else ""
                p.send_signal(signal.SIGKILL)
                p.wait(30)
                rc = p.returncode
            else:
                rc, so, _ = self.child(["crash", route, how, str(n), str(d)], {ROUTE: route}, 60)
                first = so
            launched = "launched" in first
            fills = _fills(d)
            got.append({"route": route, "how": how, "rc": rc, "launched": n if launched else None,
                        "fill_launches_in_ledger": fills})
            print(f"[{self.elapsed():5.0f}s] crash {route:16} {how:8} launched {n}, in the ledger {fills}",
                  flush=True)
        (self.out / "crash.json").write_text(json.dumps(got, indent=1) + "\n")
        return got

    # verdicts --------------------------------------------------------------------------------
    def probe(self) -> list[dict]:
        have_san = shutil.which("compute-sanitizer") is not None
        got = []
        for mode, cases in PROBE_MODES.items():
            base = WORK / "probe" / mode.replace("/", "_")
            base.mkdir(parents=True, exist_ok=True)
            env = {k: v for k, v in os.environ.items() if k != ROUTE}
            env["FAULTHUNT_LEDGER"] = mode.split("/")[0]
            env.update(PROBE_ENV.get(mode, {}))
            for fw, fault, expect, evidence in cases:
                if mode.startswith("auto"):
                    expect = AUTO_EXPECT.get((fw, fault), expect)
                if self.elapsed() > TOTAL_BUDGET:
                    got.append({"route": mode, "case": f"{fw}_{fault}", "ok": False, "reason": "skipped: time budget"})
                    continue
                e = probe_case(fw, fault, expect, evidence, base, env, have_san, cli=False)
                e["route"] = mode  # the ledger mode (the column is shared with round 4's routes)
                e["full_note"] = "--ledger full" in ((e.get("mapping") or {}).get("note") or "")
                e.pop("mapping", None)
                got.append(e)
                print(f"[{self.elapsed():5.0f}s] {mode:16} {e['case']:22} {e.get('verdict')!s:11} "
                      f"{'ok' if e.get('ok') else 'NO'} {e.get('launch_kernels')}", flush=True)
        with open(self.out / "probe.jsonl", "w") as fh:
            for r in got:
                fh.write(json.dumps(r, default=str) + "\n")
        return got

    def keep_ledgers(self) -> None:
        """A few ledgers as evidence, each cut to its first 4000 lines."""
        picks = [p for p in (WORK / "probe").glob("*/ledgers/*_wild") if p.is_dir()]
        # CuPy at the segment level (auto) and per array (full): the mapper's note and its absence
        picks += [p for p in (WORK / "probe").glob("*/ledgers/cupy_slack") if p.is_dir()]
        picks += [p for p in (WORK / "loops").glob("cupy_*_0") if p.is_dir()]
        with tarfile.open(self.out / "ledgers.tgz", "w:gz") as tar:
            for d in picks:
                for f in d.glob("*.jsonl"):
                    lines = f.read_bytes().rstrip(b"\0").split(b"\n")[:4000]
                    cut = WORK / "cut" / d.parent.parent.name / d.name / f.name
                    cut.parent.mkdir(parents=True, exist_ok=True)
                    cut.write_bytes(b"\n".join(lines) + b"\n")
                    tar.add(cut, arcname=str(cut.relative_to(WORK / "cut")))


def _counts(d: Path) -> dict[str, int]:
    from faulthunt.ledger.reader import load_ledger

    counts: dict[str, int] = {}
    led = load_ledger(d)
    for pl in led.pids.values():
        counts["launch"] = counts.get("launch", 0) + len(pl.launches)
        counts["alloc"] = counts.get("alloc", 0) + len(pl.containers) + len(pl.blocks)
    counts["skipped"] = led.skipped
    return counts


def _fills(d: Path) -> int | None:
    if not d.is_dir():
        return None
    from faulthunt.ledger.reader import load_ledger

    return sum(1 for pl in load_ledger(d).pids.values() for r in pl.launches if r.get("kernel") == "fill")


def table(loops: list[dict], crashes: list[dict], probe: list[dict]) -> str:
    out = [f"{'loop':9} {'config':22} {'route':16} {'off med':>9} {'cfg med':>9} {'ratio med (min-max)':>21} "
           f"{'+us/iter':>9}"]
    best: dict[str, tuple[float, str]] = {}
    for fw, cfgs in PER_FW.items():
        offs = {(r["round"], i): s for r in loops if r["loop"] == fw and r["config"] == "off"
                for i, s in enumerate(r.get("samples") or [])}
        if not offs:
            continue
        for cfg in cfgs:
            pairs = [(s, offs[(r["round"], i)]) for r in loops if r["loop"] == fw and r["config"] == cfg
                     for i, s in enumerate(r.get("samples") or []) if (r["round"], i) in offs]
            routes = {f"{r.get('route', '-')}" + (f"({r['launches'][:3]})" if r.get("launches") else "")
                      for r in loops if r["loop"] == fw and r["config"] == cfg}
            if not pairs:
                out.append(f"{fw:9} {cfg:22} {'/'.join(sorted(routes)):16} (no samples)")
                continue
            ratios = [s / o for s, o in pairs]
            med = statistics.median(ratios)
            added = (statistics.median(s for s, _ in pairs) - statistics.median(o for _, o in pairs)) / NS[fw] * 1e6
            out.append(f"{fw:9} {cfg:22} {'/'.join(sorted(routes)):16} {statistics.median(o for _, o in pairs):9.4f} "
                       f"{statistics.median(s for s, _ in pairs):9.4f} {med:7.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
                       f"{added:9.1f}")
            if cfg == "auto":
                best[fw] = (med, cfg)
    out.append("")
    for fw, (med, cfg) in best.items():
        out.append(f"--ledger {cfg} (the default), {fw}: {med:.2f}x "
                   f"({'meets' if med <= 1.2 else 'misses'} the 1.2x goal)")
    out.append("")
    for c in crashes:
        out.append(f"crash {c['route']:16} {c['how']:8} launched {c['launched']}, fill launches in the ledger "
                   f"{c['fill_launches_in_ledger']}")
    out.append("")
    for e in probe:
        out.append(f"{e.get('route', ''):16} {e.get('case', ''):22} {e.get('expect', '')!s:11} {e.get('verdict')!s:11} "
                   f"{'yes' if e.get('ok') else 'NO ':3} {e.get('evidence', '')} {e.get('launch_kernels') or ''} "
                   f"{('estimated ' + str(e['estimated_launches'])) if e.get('estimated_launches') else ''} "
                   f"{'(says --ledger full) ' if e.get('full_note') else ''}{e.get('reason', '')}")
    n_ok = sum(1 for e in probe if e.get("ok"))
    out.append(f"verdicts: {n_ok} of {len(probe)} as expected")
    return "\n".join(out)


def run_all(out: Path) -> int:
    run = Run(out)
    loops = run.loops()
    crashes = run.crashes()
    probe = run.probe()
    try:
        run.keep_ledgers()
    except Exception as exc:  # noqa: BLE001 - every error is written to errors.txt and the table still printed
        run.errors.append(f"--- keeping ledgers: {exc!r}")
    (out / "errors.txt").write_text("\n".join(run.errors) + "\n")
    text = table(loops, crashes, probe)
    print(text)
    (out / "summary.txt").write_text(text + f"\n(total {run.elapsed():.0f} s)\n")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["loop"]:
        run_loop(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5])
        return 0
    if argv[:1] == ["crash"]:
        run_crash(argv[1], argv[2], int(argv[3]), argv[4])
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
