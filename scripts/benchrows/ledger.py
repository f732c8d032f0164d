"""Ledger rows: the overhead of recording.

- GPU: an allocation-heavy loop (allocate, launch, free, 3000 times; CuPy and numba) with the
  ledger ``auto`` against the same loop with it off, each in a fresh process, timed inside it
  (scripts/gpu/ledger_probe.py loop). Without a GPU the row says where it was measured instead.
- CPU: the writer's cost per record (time, pid, test, source, one O_APPEND write) against the bare
  minimum of a crash-safe JSONL line (json.dumps + os.write).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchrows import Row, side_by_side

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
    return Row(title, "ledger auto", "ledger off", best["auto"] if ok else None,
               best["off"] if ok else None, "< 1.2x", note=f"{n} iterations, fresh process each, best of 2")


def writer_per_record(quick: bool) -> Row:
    from faulthunt.ledger.writer import LedgerWriter

    n = 20_000 if quick else 200_000
    with tempfile.TemporaryDirectory() as d:
        w = LedgerWriter(d)
        fd = os.open(Path(d) / "bare.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT)

        def ours() -> None:
            for i in range(n):
                w.record("alloc", "bench", address=0x7F0000000000 + i * 4096, size=4096, kind="device")

        def bare() -> None:
            for i in range(n):
                os.write(fd, (json.dumps({"event": "alloc", "address": 0x7F0000000000 + i * 4096,
                                          "size": 4096}) + "\n").encode())

        o, b = side_by_side(ours, bare, repeat=3)
        w.close()
        os.close(fd)
    return Row(f"ledger writer: {n:,} records", "LedgerWriter.record", "json.dumps + os.write",
               o, b, "-", note="per record: t, t_mono, pid, test, source, one O_APPEND write")


ROWS = [gpu_alloc_loop, writer_per_record]
