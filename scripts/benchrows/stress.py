"""Bench rows: `faulthunt stress` against plain pytest with the same flags, and the cost of
redacting pytest's output on its way into reproducer.log.

Overhead: the same generated CPU-only suite (tests doing a little arithmetic) is run both ways
as whole commands, in pairs, alternating which goes first; every sample is kept. Ours includes
everything a stress run does: checking the options, the run directory, the plugin's per-test
records, faulthandler per worker, the kernel-log cursor/follower/snapshots, the output pump
(redaction included), identity, the summary. The baseline is `python -m pytest` with the same
-n/--count in the same environment (where the faulthunt plugin is installed, inactive).

Both sides run with bytecode caching on (PYTHONDONTWRITEBYTECODE removed) as a user's Python
has it; a sandbox that sets it makes every run compile every module it imports (about 0.35 s
for faulthunt's side alone). Both run faulthunt laid out as a user's ``pip install`` lays it out
(:mod:`benchrows._install`: ours is its ``faulthunt`` console script, the baseline its ``python -m
pytest``), not through the checkout's editable install, whose import hook costs every Python
process of the run (nine on each side, and faulthunt's own) ~25 ms of start-up that a user's
install does not have.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

from benchrows import Row, Samples, _cachegrind, paired, pairs, run_cmd
from benchrows._install import installed, installed_python

SUITE = textwrap.dedent('''
    import math
    import pytest

    @pytest.mark.parametrize("n", range(10))
    def test_work(n):
        acc = 0.0
        for i in range(2000):
            acc += math.sqrt(i + n)
        assert acc > 0

    def test_plain():
        assert sum(range(1000)) == 499500
''')


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("FAULTHUNT_RUN_DIR", None)
    return env


#: the pytest options both sides of the overhead rows pass
COMMON = ("-p", "no:cacheprovider", "-p", "no:benchmark", "-q")


def _commands(workers: int, count: int) -> dict[str, Callable[[Path], list[str]]]:
    """The overhead rows' two commands, as a user's install runs them: ``faulthunt stress`` into
    the run directory given, and plain pytest with the same flags (which takes no run directory)."""
    return {
        "ours": lambda run: [installed(), "stress", "-n", str(workers), "--count", str(count),
                             "-q", "--run-dir", str(run), "test_bench_suite.py", "--", *COMMON],
        "base": lambda run: [installed_python(), "-m", "pytest", "-n", str(workers), "--count",
                             str(count), "test_bench_suite.py", *COMMON]}


def _cpu_of(run: Callable[[], None], into: list[float]) -> Callable[[], None]:
    """``run`` that also appends the CPU seconds (user + sys) of the processes it waited for,
    their own waited-for children included (pytest's xdist workers): on a shared machine the
    wall clock varies with the neighbours, the work done does not."""
    def timed() -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        run()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        into.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return timed


def stress_overhead(quick: bool) -> Row:
    workers, count, repeat = (2, 5, 2) if quick else (8, 50, pairs(15))
    tmp = Path(tempfile.mkdtemp(prefix="faulthunt-bench-stress-"))
    env = _env()
    try:
        (tmp / "test_bench_suite.py").write_text(SUITE)
        argv = _commands(workers, count)
        runs = tmp / "runs"
        made = [0]

        def ours() -> None:
            made[0] += 1
            run = runs / f"r{made[0]}"
            proc = subprocess.run(argv["ours"](run), cwd=tmp, env=env, stdout=subprocess.DEVNULL,
                                  check=False)
            if not _ran_fully(proc.returncode, run, 11 * count):
                raise subprocess.CalledProcessError(proc.returncode, proc.args)

        def baseline() -> None:
            run_cmd(argv["base"](tmp), cwd=tmp, env=env)

        cpu: dict[str, list[float]] = {"ours": [], "base": []}
        ours_t, base_t = paired(_cpu_of(ours, cpu["ours"]), _cpu_of(baseline, cpu["base"]),
                                repeat=repeat)
        tests = 11 * count
        # pairs are (ours, base) in the order paired() ran them; warm-up samples come first
        ratios = sorted(o / b for o, b in zip(cpu["ours"][-repeat:], cpu["base"][-repeat:],
                                             strict=True) if b > 0)
        # the middle half too: one pair moves by 10-20% here, its extremes say little
        quarter = statistics.quantiles(ratios, n=4) if len(ratios) >= 4 else None
        middle = f"; middle half {quarter[0]:.3f}-{quarter[2]:.3f}" if quarter else ""
        cpu_note = (f"; CPU of the whole process tree, ours/base: {statistics.median(ratios):.3f}x "
                    f"({ratios[0]:.3f}-{ratios[-1]:.3f}{middle})" if ratios else "")
        print("stress row, CPU ratio of each pair: " + " ".join(f"{r:.3f}" for r in ratios),
              file=sys.stderr)
        return Row(capability="stress: parallel repeated run with crash-safe records",
                   ours=f"faulthunt stress -n {workers} --count {count}",
                   baseline=f"pytest -n {workers} --count {count}",
                   ours_t=ours_t, base_t=base_t, goal="<= 1.03x", goal_ratio=1.03,
                   note=f"{tests} test runs, CPU-only suite, faulthunt installed as pip lays it "
                        f"out, {repeat} pairs{cpu_note}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def stress_instructions(quick: bool) -> Row:
    """The overhead row's two commands under cachegrind, every process of each followed (the
    parent, pytest, its xdist workers): the instructions of the whole tree. Kernel time (system
    calls, page faults, thread switches) is not counted: the CPU row above has it.

    Not free of timing either: with 8 workers on 2 cores, how xdist's messages arrive (partial
    pipe reads, the garbage collector's passes between them) moves the workers' part from one
    run of the same command to the next: the baseline's whole tree read 18.8-23.4 G
    instructions over 15 runs (docs/performance.md, round 11), most apart when the two
    sides ran at once, within 1% inside one bench invocation. So the sides run one at a time,
    alternating, ``--pairs`` rounds (2 unless given), every count kept. The goal is judged as
    every row's, on the median of the pairs' ratios (a pair: the two sides run back to back);
    the note gives the ratio of the two sides' medians too, which can differ from it by a few
    percent with few pairs. Both run once natively first (bytecode, pytest's rewritten test file). The
    samples are the counts at the baseline's native rate (its instructions over its CPU
    seconds), so the ratio is the instructions' ratio."""
    if not _cachegrind.available():
        return Row(capability="stress: instructions of the whole process tree",
                   ours="faulthunt stress", baseline="pytest", ours_t=None, base_t=None,
                   goal="<= 1.03x", note="valgrind is not installed: no instruction counts")
    workers, count, rounds = (2, 5, 1) if quick else (8, 50, pairs(2))
    tmp = Path(tempfile.mkdtemp(prefix="faulthunt-bench-stress-cg-"))
    # One BLAS thread on both sides: a plugin of this environment (pytest-randomly, to reseed
    # it) imports numpy in every pytest process, and OpenBLAS's idle threads spin for a time
    # that depends on the host, not on the work: 20-36 M instructions a process, moving by
    # 15 M from one run to the next. No test of the suite calls BLAS.
    env = {**_env(), "OPENBLAS_NUM_THREADS": "1"}
    argv = _commands(workers, count)
    try:
        (tmp / "test_bench_suite.py").write_text(SUITE)
        # xdist gives its workers 10 s to exit before it kills them, and a worker killed under
        # cachegrind writes no count: 8 of them finishing under valgrind on 2 cores take longer.
        # Both sides load this conftest alike (a few instructions per process).
        (tmp / "conftest.py").write_text(
            "try:\n    from xdist.workermanage import NodeManager\nexcept ImportError:\n"
            "    pass\nelse:\n    NodeManager.EXIT_TIMEOUT = 600\n")
        cpu: list[float] = []
        for side in ("ours", "base"):
            _cpu_of(lambda side=side: run_cmd(argv[side](tmp / "warm"), cwd=tmp, env=env),
                    cpu)()
        counts: dict[str, list[int]] = {"ours": [], "base": []}
        processes: dict[str, int] = {}
        for i in range(rounds):
            for side in ("ours", "base") if i % 2 == 0 else ("base", "ours"):
                run = tmp / f"cg-{side}-{i}"
                procs, status = _cachegrind.count_tree(
                    argv[side](run), out=tmp / f"{side}.cg", cwd=tmp, env=env,
                    stdout=tmp / f"{side}.out")
                _check_counted(side, procs, status, run if side == "ours" else None, 11 * count,
                               workers)
                counts[side].append(sum(n for _, n in procs))
                processes[side] = len(procs)
        rate = statistics.median(counts["base"]) / cpu[1]
        ours_n, base_n = (statistics.median(counts[side]) for side in ("ours", "base"))
        each = "; ".join(f"{side} " + ", ".join(f"{n / 1e6:,.0f}" for n in counts[side])
                         for side in ("ours", "base"))
        return Row(capability="stress: instructions of the whole process tree (cachegrind)",
                   ours=f"faulthunt stress -n {workers} --count {count}",
                   baseline=f"pytest -n {workers} --count {count}",
                   ours_t=Samples(tuple(n / rate for n in counts["ours"])),
                   base_t=Samples(tuple(n / rate for n in counts["base"])),
                   goal="<= 1.03x", goal_ratio=1.03,
                   note=f"medians of {rounds} runs a side, one at a time: {ours_n / 1e6:,.0f} M "
                        f"instructions in {processes['ours']} processes against "
                        f"{base_n / 1e6:,.0f} M in {processes['base']}: {ours_n / base_n:.3f}x "
                        "(the ratio column: the pairs' ratios) "
                        f"(each run, M: {each}); times are the counts at {rate / 1e9:.2f}G "
                        "instructions per CPU second (the baseline's native run); user space "
                        "only, no kernel time; OPENBLAS_NUM_THREADS=1 on both sides")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _ran_fully(status: int, run: Path | None, tests: int) -> bool:
    """Whether a run did the full work: exit 0, or (ours, with its run directory ``run``) exit 1
    with all ``tests`` run and none failing, which means the kernel log showed an Xid during the
    run: on a shared machine another process's (other tests inject Xid lines into /dev/kmsg
    here). Its time and its count stand; anything else fails the row."""
    if status == 0:
        return True
    if status != 1 or run is None:
        return False
    from faulthunt.rundir import RunDir

    summary = RunDir(run).summary()
    return summary is not None and not summary.failures and summary.tests_run == tests


def _check_counted(side: str, procs: list[tuple[str, int]], status: int, run: Path | None,
                   tests: int, workers: int) -> None:
    """Every Python process wrote its count (the parent for ours, pytest, the workers), and the
    run did the full work (:func:`_ran_fully`)."""
    pythons = sum("python" in cmd or "faulthunt" in cmd for cmd, _ in procs)
    want = workers + (2 if side == "ours" else 1)
    if not _ran_fully(status, run, tests) or pythons != want:
        raise RuntimeError(f"under cachegrind, {side}: exit status {status}, {pythons} Python "
                           f"processes counted of {want} (the workers, pytest, our parent)")


def _output(mb: int, dense: bool = False) -> bytes:
    """pytest-like output: progress lines and a traceback, with one line in ten holding what a
    secret pattern starts with (``name=value``, a URL); ``dense``: every line does."""
    plain = ("test_mod.py::test_work[3-50] PASSED                               [ 10%]\n"
             "E   AssertionError: assert 3 == 4\n"
             "    faults_bin = PosixPath('/tmp/pytest-of-root/pytest-1/test_x0/faults')\n"
             "test_mod.py:42: in test_work\n"
             + "." * 70 + " [ 20%]\n")
    hot = ("url='https://example.com/api/v1/items?page=2' mode=fast\n"
           "CUDA_VISIBLE_DEVICES=0 python -m pytest -k 'cuda and not slow'\n")
    block = (hot * 5 if dense else plain * 4 + hot).encode()
    return block * (mb * 1024 * 1024 // len(block))


def _pump_run(data: bytes, log: Path, redact) -> None:  # type: ignore[no-untyped-def]
    from faulthunt.stress.output import OutputPump, PytestOutput

    r, w = os.pipe()
    p = OutputPump(r, log, PytestOutput(), redact=redact)
    p.start()
    view = memoryview(data)
    while view:
        view = view[os.write(w, view[:1 << 16]):]
    os.close(w)
    p.join(60)
    os.close(r)


def redaction_cost(quick: bool) -> Row:
    """The output pump with and without redact_text: what redaction adds per MB of output."""
    from faulthunt.redact import redact_text

    mb = 2 if quick else 16
    data, dense = _output(mb), _output(mb, dense=True)
    tmp = Path(tempfile.mkdtemp(prefix="faulthunt-bench-pump-"))
    log = tmp / "log"
    try:
        ours_t, base_t = paired(lambda: _pump_run(data, log, redact_text),
                                lambda: _pump_run(data, log, lambda t: t),
                                repeat=3 if quick else 7)
        dense_t, dense_base = paired(lambda: _pump_run(dense, log, redact_text),
                                     lambda: _pump_run(dense, log, lambda t: t), repeat=3)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = len(data) / 1e6
    extra = (ours_t.median - base_t.median) / size
    worst = (dense_t.median - dense_base.median) / (len(dense) / 1e6)
    return Row(capability="stress: pytest output into reproducer.log, redacted",
               ours="pump + redact_text per line", baseline="the same pump, no redaction",
               ours_t=ours_t, base_t=base_t, goal="(measure)",
               note=f"{size:.0f} MB of pytest-like output, 1 line in 10 with name=value or a "
                    f"URL: redaction adds {extra * 1e3:.0f} ms per MB; every line so: "
                    f"{worst * 1e3:.0f} ms per MB")


ROWS = [stress_overhead, stress_instructions, redaction_cost]
