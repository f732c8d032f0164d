#!/usr/bin/env python3
"""Where the CUPTI source's cost on the allocation-heavy loop goes (issue 16, the compiled route).

    python3 scripts/gpu/ledger_cupti_cost.py all OUTDIR [LOOPS]     # every variant, < 5 min
    python3 scripts/gpu/ledger_cupti_cost.py loop FW VARIANT N SAMPLES DIR
    python3 scripts/gpu/ledger_cupti_cost.py prof OUTDIR FW VARIANT...  # native profiles (py-spy)

Each variant is the ``native`` route's CUPTI source (``--ledger cupti``, no framework refinement)
with one part taken away, in its own process, samples interleaved over two rounds (the second in
reverse) with ``off``; a sample's ratio is against the ``off`` sample of the same round and index:

``cupti``        the source as it is (stacks of driver allocations taken in Python)
``nostack``      no Python stack for driver allocations (FAULTHUNT_LEDGER_STACKS=off)
``sampled``      stacks sampled as under ``--ledger auto`` (FAULTHUNT_LEDGER_STACKS=sampled)
``noalloc_cb``   no callbacks on the allocation entry points (MEMORY2 records still on)
``nomem2``       no MEMORY2 activity (callbacks, stacks as ``cupti``)
``launch_only``  launch and synchronization callbacks only (no MEMORY2, no allocation callbacks)
``mem2_only``    MEMORY2 activity only, no subscriber at all
``cballoc``      allocation lines from the callbacks' parameters, no MEMORY2
                 (FAULTHUNT_LEDGER_ALLOCS=callback), stacks sampled
``stack_cb``     as ``cupti`` but the Python stack provider returns at once (the ctypes callback
                 into Python alone)
``auto``         ``--ledger auto`` exactly as a worker installs it (the default)
``bare``         a subscriber with no callback enabled and no activity kind: CUPTI attached, nothing asked
``nolaunch_cb``  stacks sampled, no launch callbacks (allocation callbacks, MEMORY2, syncs kept)
``noflush``      stacks sampled, no periodic forced flush (FLUSH_GAP of an hour: flushes at exit only)
``cb``           allocation lines from the callbacks, stacks sampled (``auto``'s CUPTI set-up, mode cupti)
``cb_noop``      as ``cb``, but the compiled callback returns at once for every API: CUPTI's own
                 dispatch of the enabled callbacks, the floor of any callback route
``cb_nowrite``   as ``cb``, every line formatted but none written (no sink): the mapping's share
``cb_nolaunch``  as ``cb`` without launch callbacks
``cb_launch``    as ``cb`` without allocation callbacks (launch and synchronization callbacks only)

``COST_VARIANTS=a,b,...`` runs those (and ``off``) only; ``COST_ROUNDS`` sets the rounds.

Each sample is a loop of N iterations (N per framework, so a sample lasts about 0.3 s: a 24 ms
sample was round 5's noise); its wall and CPU (process) seconds are both kept. Children are pinned
to two cores (2 and 3) when the machine has them, so every variant runs where ``off`` ran.
Writes OUTDIR/cost.jsonl (every sample) and OUTDIR/cost.txt (medians, min-max, wall and CPU).
``prof`` records each named variant's loop with ``py-spy record --native`` (raw collapsed stacks,
OUTDIR/prof_<FW>_<VARIANT>.txt) and prints the leaf libraries' shares.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ledger_probe import SAMPLE_ITERS, loop_runner, pin_to_cores

VARIANTS = ("off", "auto", "bare", "cupti", "nostack", "sampled", "cballoc", "stack_cb", "noalloc_cb",
            "nolaunch_cb", "noflush", "nomem2", "launch_only", "mem2_only")
#: iterations a sample, per loop (ledger_probe's, shared with ledger_breakdown.py)
N = SAMPLE_ITERS
SAMPLES, ROUNDS = 5, int(os.environ.get("COST_ROUNDS", "2"))
CB = ("cb", "cb_noop", "cb_nowrite", "cb_nolaunch", "cb_launch")
VARIANTS += CB
if os.environ.get("COST_VARIANTS"):
    VARIANTS = ("off", *[v for v in os.environ["COST_VARIANTS"].split(",") if v != "off"])


def _patch(variant: str) -> None:
    """Take one part out of the compiled CUPTI source before it starts."""
    from faulthunt.ledger import cupti_native

    if variant in ("noalloc_cb", "launch_only", "cb_launch"):
        cupti_native.ALLOC_APIS = ()
    if variant == "mem2_only":
        cupti_native.NativeCuptiSource._enable_callbacks = lambda self: None
    if variant == "stack_cb":
        cupti_native.NativeCuptiSource._stack = lambda self, cid, kind: None
    if variant == "bare":
        cupti_native.NativeCuptiSource._enable_callbacks = lambda self: None
        cupti_native.ALLOC_APIS = ()
    if variant in ("bare", "nomem2", "launch_only"):
        orig = cupti_native.NativeCuptiSource.start

        def start(self):
            orig(self)
            self.cl.cuptiActivityDisable(int(self.cupti.ActivityKind.MEMORY2))
        cupti_native.NativeCuptiSource.start = start
    if variant in ("cb_noop", "cb_nowrite"):
        orig_start = cupti_native.NativeCuptiSource.start

        def start_then(self):
            orig_start(self)
            if variant == "cb_nowrite":
                self.lib.fl_use_sink(None)
                return
            from faulthunt.ledger.cupti_source import SYNC_APIS
            for api in cupti_native.LAUNCH_APIS + cupti_native.ALLOC_APIS + tuple(SYNC_APIS):
                cbid = getattr(self.cupti.driver_api_trace_cbid, api, None)
                if cbid is not None:
                    self.lib.fl_cbid(int(cbid), 0, api.encode())
        cupti_native.NativeCuptiSource.start = start_then
    if variant in ("nolaunch_cb", "cb_nolaunch"):
        cupti_native.LAUNCH_APIS = ()
    if variant == "noflush":
        cupti_native.FLUSH_GAP = 3600.0


def run_loop(fw: str, variant: str, n: int, samples: int, ledger_dir: str) -> None:
    info: dict = {}
    if variant == "auto":
        from faulthunt.ledger import install

        h = install(Path(ledger_dir), "auto", quiet=True)
        info = {"route": h.writer.route.name if h else None}
    elif variant != "off":
        os.environ.setdefault("FAULTHUNT_LEDGER_ROUTE", "native")
        if variant in ("nostack", "sampled", "cballoc", "nolaunch_cb", "noflush", "bare", *CB):
            os.environ["FAULTHUNT_LEDGER_STACKS"] = "off" if variant == "nostack" else "sampled"
        # mode cupti's default is MEMORY2; auto's (and these variants') the callbacks
        os.environ["FAULTHUNT_LEDGER_ALLOCS"] = "callback" if variant in ("cballoc", *CB) else "activity"
        _patch(variant)
        from faulthunt.ledger import install

        h = install(Path(ledger_dir), "cupti", quiet=True)
        info = {"route": h.writer.route.name if h else None}
    run = loop_runner(fw)
    got, cpu = [], []
    for _ in range(samples):
        c0 = time.process_time()
        got.append(run(n))
        cpu.append(time.process_time() - c0)
    print(json.dumps({"loop": fw, "variant": variant, "n": n, "samples": got, "cpu": cpu, **info}), flush=True)


def _summary(rows: list[dict], fw: str, v: str, key: str) -> str:
    offs = {(r["round"], i): s for r in rows if r["loop"] == fw and r["variant"] == "off"
            for i, s in enumerate(r.get(key) or [])}
    pairs = [(s, offs[(r["round"], i)]) for r in rows if r["loop"] == fw and r["variant"] == v
             for i, s in enumerate(r.get(key) or []) if (r["round"], i) in offs]
    if not pairs:
        return "no samples"
    ratios = [s / o for s, o in pairs]
    n = N[fw]
    added = (statistics.median(s for s, _ in pairs) - statistics.median(o for _, o in pairs)) / n * 1e6
    return (f"{statistics.median(ratios):5.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) {added:+7.1f} us/iter "
            f"(off {statistics.median(o for _, o in pairs) / n * 1e6:6.1f})")


def run_all(out: Path, loops: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    plan = [(fw, v) for fw in loops for v in VARIANTS]
    for rnd in range(ROUNDS):
        for fw, v in plan if rnd == 0 else plan[::-1]:
            d = Path("/tmp/ledger_cost") / f"{fw}_{v}_{rnd}"
            p = subprocess.run([sys.executable, __file__, "loop", fw, v, str(N[fw]), str(SAMPLES), str(d)],
                               capture_output=True, text=True, timeout=120, preexec_fn=pin_to_cores)
            line = next((x for x in p.stdout.splitlines() if x.startswith("{")), None)
            rec = {"loop": fw, "variant": v, "round": rnd, "rc": p.returncode, **(json.loads(line) if line else {})}
            if p.returncode:
                rec["stderr"] = p.stderr[-2000:]
            rows.append(rec)
            print(f"{fw:9} {v:12} r{rnd} {rec.get('samples')}", flush=True)
    with open(out / "cost.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    lines = [f"{'loop':9} {'variant':12} wall ratio (min-max), added, (off us/iter) | CPU the same"]
    for fw in loops:
        for v in VARIANTS:
            lines.append(f"{fw:9} {v:12} {_summary(rows, fw, v, 'samples')} | {_summary(rows, fw, v, 'cpu')}")
    text = "\n".join(lines)
    print(text)
    (out / "cost.txt").write_text(text + "\n")


def _leaf_shares(raw: Path, top: int = 25) -> str:
    """py-spy's raw output: ``frame;frame;... count`` lines. Shares of the leaf frames' libraries
    and of the frames under which CUPTI's callback into us sits."""
    leaves: dict[str, int] = {}
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        leaf = stack.rsplit(";", 1)[-1]
        leaves[leaf] = leaves.get(leaf, 0) + int(count)
    rows = sorted(leaves.items(), key=lambda kv: -kv[1])[:top]
    return "\n".join(f"{c / max(total, 1):6.1%} {k[:160]}" for k, c in rows) + f"\n({total} samples)"


def run_prof(out: Path, fw: str, variants: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for v in variants:
        raw = out / f"prof_{fw}_{v}.txt"
        cmd = ["py-spy", "record", "--native", "--rate", "400", "--format", "raw", "-o", str(raw), "--",
               sys.executable, __file__, "loop", fw, v, str(N[fw] * 8), "1", f"/tmp/ledger_cost/prof_{fw}_{v}"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, preexec_fn=pin_to_cores)
        print(f"== {fw} {v} rc={p.returncode} {p.stdout.strip()[-300:]} {p.stderr.strip()[-600:]}", flush=True)
        if raw.exists():
            print(_leaf_shares(raw), flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["loop"]:
        run_loop(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5])
        return 0
    if argv[:1] == ["prof"]:
        run_prof(Path(argv[1]), argv[2], argv[3:])
        return 0
    if argv[:1] == ["all"]:
        t0 = time.monotonic()
        run_all(Path(argv[1]), argv[2].split(",") if len(argv) > 2 else ["numba", "cuda_core"])
        print(f"total {time.monotonic() - t0:.0f} s")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
