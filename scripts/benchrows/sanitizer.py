"""Sanitizer rows: reduce a 100,000-record memcheck log to findings, against reading it with ``wc -l``.

The log is generated from the real H200 record of ``tests/data/h200/san_memcheck_oob1.txt`` (the
same line layout, thousands separators included), spread over a few kernels and source lines, with
thread, block and address varied per record, and API-error records in between, as a 100,000-error
memcheck run without ``--print-limit`` would print them. Ours: read the file, ``parse_text``, then
``reduce_records`` (the whole of ``faulthunt sanitize parse``'s work but the printing). Baseline:
``wc -l`` on the same file, the least anyone can do with it.

The other sanitizer number of issue 4 (``faulthunt sanitize`` on one failing test of a 200-test
suite, against compute-sanitizer over the whole suite) needs the GPU; it is measured by
``scripts/gpu/sanitize_bench.sh`` on the H200 and recorded in docs/sanitize.md.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
from pathlib import Path

from benchrows import Row, paired

KERNELS = [("max_reduce_off_by_one(const float *, float *, int)", "faults.cu", 18, "write"),
           ("scale(float *, int, float)", "faults.cu", 26, "read"),
           ("read_past_end(const int *, int *, int)", "faults.cu", 24, "read"),
           ("void gemm_tile<float, 64>(const float *, const float *, float *, int)", "gemm.cuh", 211, "write")]


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


def reduce_log(quick: bool = False) -> Row:
    from faulthunt.sanitizer import parse_text, reduce_records

    n = 5_000 if quick else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "memcheck.log"
        size = make_log(path, n)
        wc = shutil.which("wc")
        found: list[int] = []

        def ours() -> None:
            text = path.read_bytes().decode("utf-8", "replace")
            findings = reduce_records(parse_text(text))
            found[:] = [len(findings), sum(f.count for f in findings)]

        def baseline() -> None:
            subprocess.run([wc or "wc", "-l", str(path)], check=True, stdout=subprocess.DEVNULL)

        ours_t, base_t = paired(ours, baseline, repeat=1 if not quick else 2, warmup=0)
    return Row(capability=f"reduce a {n:,}-record memcheck log",
               ours="read+parse_text+reduce_records", baseline="wc -l on the log",
               ours_t=ours_t, base_t=base_t, goal="< 10 s per 100,000 records",
               note=f"{size / 1e6:.0f} MB log -> {found[0]} findings covering {found[1]:,} records")


ROWS = [reduce_log]
