#!/usr/bin/env python3
"""Where the CUPTI source's cost on the allocation-heavy loop goes (issue 16, the compiled route).

    python3 scripts/gpu/ledger_cupti_cost.py all OUTDIR [LOOPS]     # every variant, < 3 min
    python3 scripts/gpu/ledger_cupti_cost.py loop FW VARIANT N SAMPLES DIR

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

Writes OUTDIR/cost.jsonl (every sample) and OUTDIR/cost.txt (medians, min-max).
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
from ledger_probe import loop_runner

VARIANTS = ("off", "cupti", "nostack", "sampled", "cballoc", "stack_cb", "noalloc_cb", "nomem2", "launch_only", "mem2_only")
N, SAMPLES, ROUNDS = 3000, 3, 2


def _patch(variant: str) -> None:
    """Take one part out of the compiled CUPTI source before it starts."""
    from faulthunt.ledger import cupti_native

    if variant in ("noalloc_cb", "launch_only"):
        cupti_native.ALLOC_APIS = ()
    if variant == "mem2_only":
        cupti_native.NativeCuptiSource._enable_callbacks = lambda self: None
    if variant in ("nomem2", "launch_only"):
        orig = cupti_native.NativeCuptiSource.start

        def start(self):
            orig(self)
            self.cl.cuptiActivityDisable(int(self.cupti.ActivityKind.MEMORY2))
        cupti_native.NativeCuptiSource.start = start
    if variant == "stack_cb":
        cupti_native.NativeCuptiSource._stack = lambda self, cid, kind: None


def run_loop(fw: str, variant: str, n: int, samples: int, ledger_dir: str) -> None:
    info: dict = {}
    if variant != "off":
        os.environ.setdefault("FAULTHUNT_LEDGER_ROUTE", "native")
        if variant in ("nostack", "sampled", "cballoc"):
            os.environ["FAULTHUNT_LEDGER_STACKS"] = "off" if variant == "nostack" else "sampled"
        if variant == "cballoc":
            os.environ["FAULTHUNT_LEDGER_ALLOCS"] = "callback"
        _patch(variant)
        from faulthunt.ledger import install

        h = install(Path(ledger_dir), "cupti", quiet=True)
        info = {"route": h.writer.route.name if h else None}
    run = loop_runner(fw)
    got = [run(n) for _ in range(samples)]
    print(json.dumps({"loop": fw, "variant": variant, "n": n, "samples": got, **info}), flush=True)


def run_all(out: Path, loops: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    plan = [(fw, v) for fw in loops for v in VARIANTS]
    for rnd in range(ROUNDS):
        for fw, v in plan if rnd == 0 else plan[::-1]:
            d = Path("/tmp/ledger_cost") / f"{fw}_{v}_{rnd}"
            p = subprocess.run([sys.executable, __file__, "loop", fw, v, str(N), str(SAMPLES), str(d)],
                               capture_output=True, text=True, timeout=120)
            line = next((x for x in p.stdout.splitlines() if x.startswith("{")), None)
            rec = {"loop": fw, "variant": v, "round": rnd, "rc": p.returncode, **(json.loads(line) if line else {})}
            if p.returncode:
                rec["stderr"] = p.stderr[-2000:]
            rows.append(rec)
            print(f"{fw:9} {v:12} r{rnd} {rec.get('samples')}", flush=True)
    with open(out / "cost.jsonl", "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    lines = []
    for fw in loops:
        offs = {(r["round"], i): s for r in rows if r["loop"] == fw and r["variant"] == "off"
                for i, s in enumerate(r.get("samples") or [])}
        for v in VARIANTS:
            pairs = [(s, offs[(r["round"], i)]) for r in rows if r["loop"] == fw and r["variant"] == v
                     for i, s in enumerate(r.get("samples") or []) if (r["round"], i) in offs]
            if not pairs:
                lines.append(f"{fw:9} {v:12} no samples")
                continue
            ratios = [s / o for s, o in pairs]
            added = (statistics.median(s for s, _ in pairs) - statistics.median(o for _, o in pairs)) / N * 1e6
            lines.append(f"{fw:9} {v:12} {statistics.median(ratios):5.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) "
                         f"{added:+7.1f} us/iter  off {statistics.median(o for _, o in pairs) / N * 1e6:6.1f} us/iter")
    text = "\n".join(lines)
    print(text)
    (out / "cost.txt").write_text(text + "\n")


def main(argv: list[str]) -> int:
    if argv[:1] == ["loop"]:
        run_loop(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5])
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
