"""Mapper rows: ``faulthunt map --addresses FILE`` on 10,000 addresses against a 1,000,000-record
ledger, as a whole process (start-up, load, mapping and JSON output included), per ledger shape.

Shapes (each 8 pid files, lines in the writer's own hot-path format, a stack on every allocation):

- ``churn``: a long run of alloc/free pairs over 65,536 addresses, each reused now and then; every
  allocation is freed by the end (mapping at the end: nothing live anywhere, the shape that cost
  the previous reader a scan of every start address per address, issue 16).
- ``live``: allocations never freed (plus launches).
- ``pools``: CuPy-style pool chunks (``segment``) with blocks allocated and freed inside them,
  some chunks given back, plus CUPTI's record of each chunk (merged with the hook's).

The note says which reader ran: the compiled part where it is built (``FAULTHUNT_MAP_PURE=1`` in
the environment measures the pure-Python route).

Baseline: what a user would write without faulthunt, run for real on every address (no
extrapolation): ``json.loads`` every line, pair allocations with their frees into lives, sort the
lives by start, then per address bisect the starts and walk back to the lives that contain it
(``inside``, or ``freed`` when only freed ones do) -- a plain interval lookup with no neighbours,
pools, pages or records shown, so it does less than ours. It runs in this process (no start-up)
with its answers written to a file.
"""

from __future__ import annotations

import bisect
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchrows import Row, command, paired

PIDS = 8
BASE = 0x7F00_0000_0000
STACK = ('["/home/u/proj/tests/test_model.py:88 in test_forward",'
         '"/home/u/proj/.venv/lib/python3.12/site-packages/numba_cuda/numba/cuda/cudadrv/'
         'devicearray.py:120 in __init__"]')


def _alloc(t: int, pid: int, nid: str, source: str, addr: int, size: int, kind: str) -> str:
    return (f'{{"event":"alloc","t":{t}e-9,"pid":{pid},"nodeid":{nid},"source":"{source}",'
            f'"address":{addr},"size":{size},"kind":"{kind}","stack":{STACK}}}\n')


def _free(t: int, pid: int, nid: str, source: str, addr: int, kind: str, phase: str | None = None) -> str:
    ph = f',"phase":"{phase}"' if phase else ""
    return (f'{{"event":"free","t":{t}e-9,"pid":{pid},"nodeid":{nid},"source":"{source}",'
            f'"address":{addr},"kind":"{kind}"{ph}}}\n')


def _launch(t: int, pid: int, nid: str, k: int, corr: int) -> str:
    return (f'{{"event":"launch","t":{t}e-9,"pid":{pid},"nodeid":{nid},"source":"cupti",'
            f'"kernel":"_Z6kernel{k}Pfi","api":"cuLaunchKernel","correlation_id":{corr}}}\n')


def make_ledger(directory: Path, shape: str, n_records: int, seed: int = 5) -> list[tuple[int, int]]:
    """Write ``n_records`` records of ``shape`` over PIDS files; returns (pid, address) probes
    near allocations (inside, past the end, freed, in slack, between)."""
    rng = random.Random(seed)
    per_pid = n_records // PIDS
    probes: list[tuple[int, int]] = []
    for p in range(PIDS):
        pid = 1000 + p
        t = 1_764_000_000_000_000_000 + p
        lines: list[str] = ['{"event":"note","t":%de-9,"t_mono":9000.5,"pid":%d,"nodeid":null,'
                            '"source":"ledger","message":"ledger opened (mmap)"}\n' % (t, pid)]
        gen = {"churn": _churn, "live": _live, "pools": _pools}[shape]
        gen(rng, pid, t, per_pid, lines, probes)
        (directory / f"{pid}.jsonl").write_text("".join(lines))
    return probes


def _nid(i: int) -> str:
    return f'"tests/test_model.py::test_forward[{i // 2000}-50]"'


def _churn(rng: random.Random, pid: int, t: int, n: int, lines: list[str], probes: list) -> None:
    slots = [BASE + i * (2 << 20) for i in range(1 << 16)]  # 65,536 addresses, each reused now and then
    live: list[tuple[int, int]] = []
    while len(lines) < n:
        t += 40_000
        nid = _nid(len(lines))
        if rng.random() < 0.04:
            lines.append(_launch(t, pid, nid, rng.randrange(40), len(lines)))
        elif len(live) < 8 and (rng.random() < 0.5 or not live):
            addr = rng.choice(slots)
            if any(a == addr for a, _ in live):
                continue
            size = rng.choice((256, 4000, 4096, 65536, 1 << 20))
            live.append((addr, size))
            lines.append(_alloc(t, pid, nid, "numba", addr, size, "device"))
            if len(probes) < 40_000:
                probes.append((pid, addr + rng.randrange(0, size + 8192)))
        else:
            addr, _ = live.pop(rng.randrange(len(live)))
            lines.append(_free(t, pid, nid, "numba", addr, "device", "requested"))
    for addr, _ in live:  # a clean exit frees everything
        t += 40_000
        lines.append(_free(t, pid, "null", "numba", addr, "device", "requested"))


def _live(rng: random.Random, pid: int, t: int, n: int, lines: list[str], probes: list) -> None:
    addr = BASE + (pid % 8) * (1 << 40)
    while len(lines) < n:
        t += 40_000
        nid = _nid(len(lines))
        if rng.random() < 0.05:
            lines.append(_launch(t, pid, nid, rng.randrange(40), len(lines)))
            continue
        size = rng.choice((256, 4000, 4096, 65536, 1 << 20))
        lines.append(_alloc(t, pid, nid, "cupti", addr, size, "device"))
        if len(probes) < 40_000:
            probes.append((pid, addr + rng.randrange(0, size + 8192)))
        addr += (size + 4095) // 4096 * 4096 + rng.choice((0, 0, 4096, 1 << 21))


def _pools(rng: random.Random, pid: int, t: int, n: int, lines: list[str], probes: list) -> None:
    chunks: list[int] = []
    nxt = BASE
    blocks: dict[int, list[tuple[int, int]]] = {}
    while len(lines) < n:
        t += 40_000
        nid = _nid(len(lines))
        r = rng.random()
        if r < 0.03 or not chunks:
            chunk = nxt
            nxt += 2 << 20
            chunks.append(chunk)
            blocks[chunk] = []
            lines.append(_alloc(t, pid, nid, "cupti", chunk, 2 << 20, "device"))
            lines.append(_alloc(t + 1000, pid, nid, "cupy", chunk, 2 << 20, "segment"))
        elif r < 0.04 and len(chunks) > 4:
            chunk = chunks.pop(rng.randrange(len(chunks)))
            for b, _ in blocks.pop(chunk):
                lines.append(_free(t, pid, nid, "cupy", b, "block"))
            lines.append(_free(t + 500, pid, nid, "cupti", chunk, "device"))
        elif r < 0.08:
            lines.append(_launch(t, pid, nid, rng.randrange(40), len(lines)))
        elif r < 0.55:
            chunk = rng.choice(chunks)
            off = rng.randrange(0, 512) * 4096
            size = rng.choice((512, 4000, 4096, 8192))
            b = chunk + off
            if any(x == b for x, _ in blocks[chunk]):
                continue
            blocks[chunk].append((b, size))
            lines.append(_alloc(t, pid, nid, "cupy", b, size, "block"))
            if len(probes) < 40_000:
                probes.append((pid, b + rng.randrange(0, size + 4096)))
        else:
            chunk = rng.choice(chunks)
            if blocks[chunk]:
                b, _ = blocks[chunk].pop(rng.randrange(len(blocks[chunk])))
                lines.append(_free(t, pid, nid, "cupy", b, "block"))


# --- the baseline ----------------------------------------------------------------------------------

def baseline_map(directory: Path, probes: list[tuple[int, int]], out: Path) -> None:
    """The straightforward mapper: json.loads every line, lives, sort, bisect per address."""
    lives: dict[int, list[list]] = {}
    for path in sorted(directory.glob("*.jsonl")):
        recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        recs.sort(key=lambda r: r["t"])
        current: dict[int, list] = {}
        for r in recs:
            if r["event"] == "alloc":
                life = [r["address"], r["address"] + r["size"], r["t"], None, r]
                current[r["address"]] = life
                lives.setdefault(r["pid"], []).append(life)
            elif r["event"] == "free":
                life = current.pop(r["address"], None)
                if life is not None:
                    life[3] = r["t"]
    index = {}
    for pid, ls in lives.items():
        ls.sort(key=lambda lf: lf[0])
        index[pid] = ([lf[0] for lf in ls], ls)
    with open(out, "w") as fh:
        for pid, a in probes:
            starts, ls = index[pid]
            i = bisect.bisect_right(starts, a) - 1
            hit, freed = None, None
            while i >= 0 and a - starts[i] < (4 << 20):  # the largest allocation is 2 MiB
                lf = ls[i]
                if lf[0] <= a < lf[1]:
                    if lf[3] is None:
                        hit = lf
                        break
                    if freed is None or lf[3] > freed[3]:
                        freed = lf
                i -= 1
            got = hit or freed
            fh.write(json.dumps({"address": hex(a), "pid": pid,
                                 "verdict": None if got is None else "inside" if hit else "freed",
                                 "allocation": None if got is None else got[4]}) + "\n")


def _peak_mib(argv: list[str]) -> float:
    """Peak RSS of a whole command, as the kernel counted it for the child (MiB)."""
    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
            "check=True); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    got = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
    return int(got.stdout.split()[-1]) / 1024


def _baseline_peak_mib(directory: Path, probes_file: Path, out: Path) -> float:
    code = ("import json, resource, sys; sys.path.insert(0, sys.argv[1]); from benchrows.mapper import "
            "baseline_map; from pathlib import Path; p = [tuple(x) for x in json.load(open(sys.argv[3]))]; "
            "baseline_map(Path(sys.argv[2]), p, Path(sys.argv[4])); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    here = str(Path(__file__).resolve().parent.parent)
    got = subprocess.run([sys.executable, "-c", code, here, str(directory), str(probes_file), str(out)],
                         capture_output=True, text=True, check=True)
    return int(got.stdout.split()[-1]) / 1024


def _row(shape: str, quick: bool) -> Row:
    n_records = 100_000 if quick else 1_000_000
    n_addr = 1_000 if quick else 10_000
    repeat = 2 if quick else 3
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "ledger"
        d.mkdir()
        probes = make_ledger(d, shape, n_records)
        random.Random(1).shuffle(probes)
        probes = (probes * (n_addr // max(1, len(probes)) + 1))[:n_addr]
        addr_file = Path(tmp) / "addresses.txt"
        addr_file.write_text("".join(f"{hex(a)} {pid}\n" for pid, a in probes))
        probes_file = Path(tmp) / "probes.json"
        probes_file.write_text(json.dumps(probes))
        argv = [sys.executable, "-m", "faulthunt", "map", "--ledger", str(d), "--addresses",
                str(addr_file), "--json"]
        run_ours = command(argv, out=Path(tmp) / "ours.jsonl")
        cpu: list[float] = []

        def ours() -> None:  # the command's own CPU (user + sys, its forked readers included)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            run_ours()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)

        base_out = Path(tmp) / "baseline.jsonl"
        o, b = paired(ours, lambda: baseline_map(d, probes, base_out), repeat=repeat)
        peak_o = _peak_mib(argv)
        peak_b = _baseline_peak_mib(d, probes_file, base_out)
        with open(Path(tmp) / "ours.jsonl", "rb") as fh:
            lines = sum(1 for _ in fh)
        assert lines == n_addr, f"faulthunt map wrote {lines} verdicts for {n_addr} addresses"
    return Row(
        capability=f"map {n_addr:,} addresses vs {n_records:,}-record ledger, {shape} (whole command)",
        ours="faulthunt map --addresses FILE --json", baseline="json.loads + sort + bisect, in-process",
        ours_t=o, base_t=b, goal="<= 2 s, <= 300 MiB", goal_s=2.0,
        note=(f"peak RSS ours {peak_o:.0f} MiB, baseline {peak_b:.0f} MiB; ours CPU "
              f"{statistics.median(cpu[-repeat:]):.2f} s (user+sys, median; wall also waits for cores); "
              f"{_route()} reader"),
    )


def _route() -> str:
    """Which reader the command ran: the compiled part (docs/mapper.md) or the pure-Python route."""
    from faulthunt.ledger.index import compiled_part

    return "compiled" if compiled_part() is not None else "pure-Python"


def map_churn(quick: bool) -> Row:
    return _row("churn", quick)


def map_live(quick: bool) -> Row:
    return _row("live", quick)


def map_pools(quick: bool) -> Row:
    return _row("pools", quick)


ROWS = [map_churn, map_live, map_pools]


if __name__ == "__main__":  # python scripts/benchrows/mapper.py SHAPE N DIR: write a ledger to look at
    shape, n, where = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    where.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    got = make_ledger(where, shape, n)
    (where.parent / f"{where.name}.probes.json").write_text(json.dumps(got))
    print(f"{n} records, {len(got)} probes, {time.perf_counter() - t0:.1f} s", file=sys.stderr)
