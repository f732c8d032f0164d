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

Second row (issue 14): the same number of sanitizer reruns of one test on 4 processes at once
against one process (``sanitize --count 8 --keep-going -n 4`` vs ``-n 1``, whole commands), with the
stand-in compute-sanitizer of the tests, whose ``STANDIN_SLEEP`` stands for the time the real tool
spends per run while the CPU waits (its start-up and the instrumented kernels: about 3 s a run on
the H200, docs/sanitize.md). Both sides do the same 8 runs; the CPU part of each run (two Python
start-ups and pytest) runs on however many cores this machine has, so on a small shared machine the
ratio says less than the GPU check (scripts/gpu/sanitize_intermittent.sh).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchrows import Row, command, paired

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


REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "data" / "sanitizer" / "standin_compute_sanitizer.py"
HELP = REPO / "tests" / "data" / "h200" / "compute-sanitizer-help.txt"


def _project(tmp: Path, runs: int) -> tuple[Path, dict[str, str]]:
    """A one-test project, a stress run that recorded it failing, and the stand-in on PATH."""
    from faulthunt.rundir import create_run_dir, write_json_atomic

    proj = tmp / "proj"
    proj.mkdir()
    (proj / "test_b.py").write_text("def test_flaky():\n    pass\n")
    for i in range(runs):
        run = create_run_dir(tmp / "runs" / f"r{i}")
        write_json_atomic(run / "run.json", {"id": run.name, "cwd": str(proj)})
        write_json_atomic(run / "summary.json", {"tests_run": 8, "failures": [
            {"nodeid": "test_b.py::test_flaky", "base_nodeid": "test_b.py::test_flaky", "outcome": "failed"}]})
    bindir = tmp / "bin"
    bindir.mkdir()
    exe = bindir / "compute-sanitizer"
    exe.write_text(f"#!{sys.executable}\n" + STANDIN.read_text())
    exe.chmod(0o755)
    env = {"PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", "STANDIN_HELP": str(HELP),
           "STANDIN_ARGV_LOG": str(tmp / "argv.jsonl"), "STANDIN_REPLAY": json.dumps({}),
           "STANDIN_SLEEP": "3"}
    return proj, env


def parallel_reruns(quick: bool = False) -> Row:
    count, repeat = (4, 1) if quick else (8, 3)
    tmp = Path(tempfile.mkdtemp(prefix="faulthunt-bench-sanitize-"))
    try:
        proj, env = _project(tmp, 2 * (repeat + 1))
        runs = iter(sorted((tmp / "runs").iterdir()))

        def side(n: int) -> object:
            def go() -> None:
                argv = [sys.executable, "-m", "faulthunt", "sanitize", "--run", str(next(runs)),
                        "--count", str(count), "--keep-going", "-n", str(n), "--budget", "none"]
                command(argv, out=tmp / f"out-{n}.txt", cwd=proj, env=env)()
            return go

        ours_t, base_t = paired(side(4), side(1), repeat=repeat, warmup=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Row(capability=f"{count} sanitizer reruns of one test (stand-in, 3 s a run)",
               ours="sanitize --keep-going -n 4", baseline="the same runs, -n 1",
               ours_t=ours_t, base_t=base_t, goal="<= 1/3 of one process (>= 3x)", goal_ratio=1 / 3,
               note=f"{os.cpu_count()} CPU core(s) here; the GPU check: scripts/gpu/sanitize_intermittent.sh")


ROWS = [reduce_log, parallel_reruns]
