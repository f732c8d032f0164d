"""Sanitizer rerun row (issue 14): the same number of sanitizer reruns of one test on 4 processes at
once against one process (``sanitize --count 8 --keep-going -n 4`` vs ``-n 1``, whole commands), with
the stand-in compute-sanitizer of the tests, whose ``STANDIN_SLEEP`` stands for the time the real tool
spends per run while the CPU waits (its start-up and the instrumented kernels: about 3 s a run on the
H200, docs/sanitize.md). Both sides do the same 8 runs; the CPU part of each run (two Python start-ups
and pytest) runs on however many cores this machine has, so on a small shared machine the ratio says
less than the GPU check (scripts/gpu/sanitize_intermittent.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchrows import Row, command, paired

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


ROWS = [parallel_reruns]
