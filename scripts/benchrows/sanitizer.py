"""Sanitizer rows: ``faulthunt sanitize parse LOG --json`` as a whole command, on four inputs.

Ours: the command a user runs, as a process (start-up, imports, reading, parsing, JSON Lines out
to a file). Baseline: the least a program must do to produce the same output shape from the same
log: a Python process that streams the file line by line, splits records at the prefix's
separator lines and writes each record's lines as one JSON line to a file (SPLIT_BASELINE below).
Same interpreter start, same reading and decoding, same record count, same kind of output;
it understands nothing in the records. ``wc -l`` (the old baseline) reads the file in C and writes
nothing, so it measured only how far Python is from C; ``grep -c`` to /dev/null stops at the first
match. For the sparse file, where there is nothing to split, the baseline is ``wc -l FILE``
written to a file: it reads every byte looking for line breaks, as ours does (``grep`` skips a
sparse file's holes and reads nothing). Pairs alternate which side goes first (``benchrows.paired``);
every sample is kept.

Inputs, generated:
- a 100,000-record memcheck log (49 MB) from the real H200 record of
  ``tests/data/h200/san_memcheck_oob1.txt`` (the same line layout, thousands separators included),
  spread over a few kernels and source lines, thread, block and address varied per record, API
  errors in between: what a 100,000-error memcheck run without ``--print-limit`` prints;
- the adversarial log of issue 16: host frames padded with long runs of spaces (40 KB took the old
  parser 40-47 s, 4x per doubling; this one is 64 MB, so start-up is not most of either side);
- a mixed-tools log like ``sanitizer/sanitizer.log``: real H200 captures of memcheck, racecheck,
  initcheck, synccheck and numba (Python host frames) repeated with their thread indices varied,
  each after a ``# faulthunt sanitize: test ...`` line;
- a 1 GB sparse file (NUL bytes, no line break): memory must stay bounded (peak RSS in the note).
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchrows import Row, command, paired

H200 = Path(__file__).resolve().parents[2] / "tests" / "data" / "h200"

KERNELS = [("max_reduce_off_by_one(const float *, float *, int)", "faults.cu", 18, "write"),
           ("scale(float *, int, float)", "faults.cu", 26, "read"),
           ("read_past_end(const int *, int *, int)", "faults.cu", 24, "read"),
           ("void gemm_tile<float, 64>(const float *, const float *, float *, int)", "gemm.cuh", 211, "write")]

#: the baseline: stream the log, split records at separator lines, one JSON line per record
SPLIT_BASELINE = r"""
import json, sys
prefix = "========="
out, rec, batch = sys.stdout, [], []
with open(sys.argv[1], encoding="utf-8", errors="replace") as fh:
    for line in fh:
        if line.startswith(prefix):
            body = line[len(prefix):].strip()
            if body:
                rec.append(body)
            elif rec:
                batch.append(json.dumps(rec))
                rec = []
                if len(batch) >= 1024:
                    batch.append("")
                    out.write("\n".join(batch))
                    batch = []
if rec:
    batch.append(json.dumps(rec))
if batch:
    batch.append("")
    out.write("\n".join(batch))
"""


def make_log(path: Path, n_records: int, seed: int = 4) -> int:
    """Write a memcheck text log of ``n_records`` error records; returns its size in bytes."""
    rng = random.Random(seed)
    out = ["========= COMPUTE-SANITIZER", "pid=680 mode=oob1"]
    for i in range(n_records):
        if i % 50 == 49:
            out += ['========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch '
                    'failure" on CUDA API call to cudaDeviceSynchronize.',
                    "=========     Saved host backtrace up to driver entry point at error",
                    "=========         Host Frame: main [0x9a75] in faults", "========= "]
            continue
        kernel, file, line, access = KERNELS[rng.randrange(len(KERNELS)) if i % 3 == 0 else 0]
        t, b = rng.randrange(256), rng.randrange(4096)
        base = 0x7F59_2A80_1000 + rng.randrange(64) * 0x10_0000
        addr = base + 4000 + 4 * rng.randrange(16)
        out += [f"========= Invalid __global__ {access} of size 4 bytes",
                f"=========     at {kernel}+0x120 in {file}:{line}",
                f"=========     by thread ({t},0,0) in block ({b},0,0)",
                f"=========     Access to 0x{addr:x} is out of bounds",
                f"=========     and is {addr - base - 3999:,} bytes after the nearest allocation at "
                f"0x{base:x} of size 4,000 bytes",
                "=========     Saved host backtrace up to driver entry point at kernel launch time",
                "=========         Host Frame: main [0x99d3] in faults",
                "========= "]
    out += ["========= Target application returned an error", f"========= ERROR SUMMARY: {n_records:,} errors"]
    text = "\n".join(out) + "\n"
    path.write_text(text)
    return len(text)


def make_adversarial_log(n_bytes: int, run: int = 20_000) -> str:
    """Issue 16's input: records whose host frames hold runs of ``run`` spaces, ``n_bytes`` long."""
    spaces = " " * run
    record = ["========= Invalid __global__ write of size 4 bytes",
              "=========     at max_reduce_off_by_one(const float *, float *, int)+0x120 in faults.cu:18",
              "=========     by thread (232,0,0) in block (3,0,0)",
              "=========     Saved host backtrace up to driver entry point at kernel launch time",
              f"=========         Host Frame: main{spaces}[0x99d3]{spaces}in faults",
              f"=========         Host Frame: {spaces}libcuda_helper{spaces}x",
              f"=========         Host Frame: main in {spaces}x.py:{spaces}",
              "========= "]
    size = sum(len(line) + 1 for line in record)
    out = ["========= COMPUTE-SANITIZER"]
    for _ in range(max(1, n_bytes // size)):
        out += record
    return "\n".join(out) + "\n"


_MIXED = [("memcheck", "san_memcheck_uaf.txt"), ("racecheck", "san_racecheck_shared.txt"),
          ("initcheck", "san_initcheck_uninit.txt"), ("synccheck", "san_synccheck_div.txt"),
          ("memcheck", "san_numba.txt"), ("racecheck", "san_racecheck_analysis.txt"),
          ("memcheck", "san_memcheck_leak.txt"), ("memcheck", "san_memcheck_apierror.txt")]
_THREAD = re.compile(r"\((\d+),(\d+),(\d+)\)")


def make_mixed_log(path: Path, n_records: int, seed: int = 5) -> int:
    """A merged log of every tool's real captures, thread indices varied; returns its record count."""
    rng = random.Random(seed)
    from faulthunt.sanitizer import parse_text

    blocks = [(tool, (H200 / name).read_text()) for tool, name in _MIXED]
    counts = [len(parse_text(text)) for _, text in blocks]
    written = test = 0
    with open(path, "w") as fh:
        while written < n_records:
            i = test % len(blocks)
            tool, text = blocks[i]
            text = _THREAD.sub(lambda m: f"({rng.randrange(1024)},{m.group(2)},{m.group(3)})", text)
            fh.write(f"# faulthunt sanitize: test tests/t.py::test_{test} tool {tool} exit 86\n{text}")
            written += counts[i]
            test += 1
    return written


#: runs a command and prints its peak RSS in KiB: started from this small process, the child's
#: ru_maxrss is its own (a child forked straight from the bench would count the bench's pages)
_RSS_PROBE = r"""
import resource, subprocess, sys
with open(sys.argv[1], "wb") as out:
    subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.DEVNULL, check=False)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss_mib(argv: list[str], out: Path) -> float:
    """Peak resident memory of one run of ``argv`` (its stdout into ``out``), in MiB."""
    probe = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(out), *argv], check=True,
                           stdout=subprocess.PIPE, text=True)
    return int(probe.stdout) / 1024


def _ours(log: Path) -> list[str]:
    return [sys.executable, "-m", "faulthunt", "sanitize", "parse", str(log), "--json"]


def _row(title: str, log: Path, n_records: int, tmp: Path, repeat: int, goal: str,
         goal_ratio: float | None = None, goal_s: float | None = None, extra: str = "") -> Row:
    out_ours, out_base = tmp / "ours.jsonl", tmp / "base.jsonl"
    ours = command(_ours(log), out=out_ours)
    base = command([sys.executable, "-c", SPLIT_BASELINE, str(log)], out=out_base)
    ours_t, base_t = paired(ours, base, repeat=repeat)
    with open(out_ours, "rb") as fh:
        lines = sum(1 for _ in fh)
    peak = peak_rss_mib(_ours(log), out_ours)
    size = log.stat().st_size
    per = f"{ours_t.median / n_records * 1e6:.1f} us/record, " if n_records else ""
    note = (f"{size / 1e6:.0f} MB, {lines:,} records out ({n_records:,} expected); {per}"
            f"peak {peak:.0f} MiB; baseline: stream + split at separators + json.dumps per record" + extra)
    return Row(capability=title, ours="faulthunt sanitize parse LOG --json",
               baseline="python: split records, one JSON line each", ours_t=ours_t, base_t=base_t,
               goal=goal, goal_ratio=goal_ratio, goal_s=goal_s, note=note)


def memcheck_100k(quick: bool = False) -> Row:
    n = 5_000 if quick else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "memcheck.log"
        make_log(log, n)
        return _row(f"sanitize parse --json, {n:,}-record memcheck log", log, n, Path(tmp),
                    repeat=2 if quick else 5, goal="<= 10 us/record", goal_s=n * 10e-6)


def adversarial_spaces(quick: bool = False) -> Row:
    size = 400_000 if quick else 64_000_000
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "spaces.log"
        text = make_adversarial_log(size)
        log.write_text(text)
        n = text.count("========= Invalid")
        return _row("sanitize parse --json, host frames with 20,000-space runs (issue 16)", log, n,
                    Path(tmp), repeat=2 if quick else 5, goal="linear (next row); ratio as on ordinary logs",
                    extra="; the parser before issue 16 took 40-47 s on 40 KB of it")


def adversarial_doubling(quick: bool = False) -> Row:
    """Linearity measured: the adversarial log, then twice as much of it, both through ours."""
    size = 400_000 if quick else 32_000_000
    with tempfile.TemporaryDirectory() as tmp:
        one, two = Path(tmp) / "spaces1.log", Path(tmp) / "spaces2.log"
        one.write_text(make_adversarial_log(size))
        two.write_text(make_adversarial_log(2 * size))
        double = command(_ours(two), out=Path(tmp) / "two.jsonl")
        single = command(_ours(one), out=Path(tmp) / "one.jsonl")
        two_t, one_t = paired(double, single, repeat=2 if quick else 5)
    return Row(capability="the same, input doubled (time per doubling)", ours=f"{2 * size / 1e6:.0f} MB through ours",
               baseline=f"{size / 1e6:.0f} MB through ours", ours_t=two_t, base_t=one_t,
               goal="<= 2.3x (linear: 2x; the old parser: 4x)", goal_ratio=2.3,
               note="start-up (~0.15 s) is paid once on each side, so a linear parser shows a little under 2x")


def mixed_tools(quick: bool = False) -> Row:
    n = 5_000 if quick else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "mixed.log"
        written = make_mixed_log(log, n)
        return _row(f"sanitize parse --json, {written:,} records of every tool (merged log)", log, written,
                    Path(tmp), repeat=2 if quick else 5, goal="<= 10 us/record", goal_s=written * 10e-6)


def sparse_1g(quick: bool = False) -> Row:
    size = (64 if quick else 1024) * 2**20
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "sparse.log"
        with open(log, "wb") as fh:
            fh.truncate(size)
        out_ours, out_base = Path(tmp) / "ours.jsonl", Path(tmp) / "base.txt"
        ours = command(_ours(log), out=out_ours)
        base = command(["wc", "-l", str(log)], out=out_base)
        ours_t, base_t = paired(ours, base, repeat=2 if quick else 3)
        peak = peak_rss_mib(_ours(log), out_ours)
        base_peak = peak_rss_mib(["wc", "-l", str(log)], out_base)
    return Row(capability=f"sanitize parse --json, {size // 2**20:,} MiB sparse file (no line break)",
               ours="faulthunt sanitize parse LOG --json", baseline="wc -l LOG > out",
               ours_t=ours_t, base_t=base_t, goal="bounded memory: < 100 MiB peak",
               note=f"peak RSS ours {peak:.0f} MiB ({'met' if peak < 100 else 'NOT met'}), wc {base_peak:.0f} MiB")


ROWS = [memcheck_100k, adversarial_spaces, adversarial_doubling, mixed_tools, sparse_1g]

__all__ = ["ROWS", "make_log", "make_adversarial_log", "make_mixed_log", "SPLIT_BASELINE"]
