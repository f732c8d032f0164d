"""Overhead of `faulthunt stress` over plain pytest on a real GPU suite (issue 16), on the H200.

numba-cuda's own cudapy tests (the folder scripts/gpu/stress_overhead_numba.sh prepares), run as a
user runs them: whole commands as processes, `-n 8`, one run of each test (so plain pytest does the
same work: pytest-repeat would not repeat these unittest items). Three configurations, interleaved
in rounds (A B C, then C B A, ...): plain `pytest -n 8`, `faulthunt stress -n 8` with the ledger on
(`auto`, the default), and with `--ledger off`. Prints every sample, the median/min/max of each and
the per-round ratios against plain; writes results.json.

    python3 scripts/gpu/stress_overhead_numba.py SUITE_DIR OUT_DIR ROUNDS
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _configs(out: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "plain": [py, "-m", "pytest", "-n", "8", "-q", "-p", "no:cacheprovider"],
        "faulthunt": [py, "-m", "faulthunt", "stress", "-n", "8", "--timeout", "120", "-q",
                      "--run-dir", str(out / "run_auto_{i}"), ".", "--", "-p", "no:cacheprovider"],
        "faulthunt_ledger_off": [py, "-m", "faulthunt", "stress", "-n", "8", "--timeout", "120",
                                 "-q", "--ledger", "off", "--run-dir", str(out / "run_off_{i}"), ".",
                                 "--", "-p", "no:cacheprovider"],
    }


def main() -> int:
    suite, out, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    # seconds the rounds may take: no round starts that would not end by then (the longest so
    # far as its estimate), so a slow day gives fewer whole rounds and still its results.json
    budget = float(sys.argv[4]) if len(sys.argv) > 4 else float("inf")
    start, longest = time.monotonic(), 0.0
    out.mkdir(parents=True, exist_ok=True)
    configs = _configs(out)
    names = list(configs)
    samples: dict[str, list[float]] = {n: [] for n in names}
    rcs: dict[str, list[int]] = {n: [] for n in names}
    for i in range(rounds):
        if time.monotonic() - start + longest > budget:
            print(f"round {i} not started: it would end past the {budget:g} s budget", flush=True)
            rounds = i
            break
        began = time.monotonic()
        order = names if i % 2 == 0 else names[::-1]
        for name in order:
            argv = [a.replace("{i}", str(i)) for a in configs[name]]
            t0 = time.perf_counter()
            proc = subprocess.run(argv, cwd=suite, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=200)
            wall = time.perf_counter() - t0
            samples[name].append(round(wall, 3))
            rcs[name].append(proc.returncode)
            (out / f"{name}_{i}.txt").write_text(proc.stdout)
            print(f"round {i} {name:22s} {wall:7.2f} s rc={proc.returncode} "
                  f"{proc.stdout.strip().splitlines()[-1][:120] if proc.stdout.strip() else ''}",
                  flush=True)
        longest = max(longest, time.monotonic() - began)
    result: dict[str, object] = {"rounds": rounds, "samples": samples, "rcs": rcs}
    for name in names[1:]:
        ratios = [a / b for a, b in zip(samples[name], samples["plain"])]
        result[f"{name}_ratio"] = {"median": round(statistics.median(ratios), 3),
                                   "min": round(min(ratios), 3), "max": round(max(ratios), 3)}
        print(f"{name} / plain: median {statistics.median(ratios):.3f}x "
              f"({min(ratios):.3f}-{max(ratios):.3f}) over {rounds} rounds")
    for name in names:
        print(f"{name}: median {statistics.median(samples[name]):.2f} s "
              f"({min(samples[name]):.2f}-{max(samples[name]):.2f})")
    (out / "results.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
