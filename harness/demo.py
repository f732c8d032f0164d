"""``faulthunt demo``: the whole hunt over faulthunt's own planted faults, end to end.

stress-run the bundled suite (``faulthunt.kernels.suite``) -> rerun under compute-sanitizer ->
map fault addresses to allocations -> write the report, all into one run directory.

On a GPU every step is real. On a machine without one the suite runs numba's CUDA simulator and
the SIMULATED stand-ins (kernels/standins.py); their Xid lines go to a simulated kernel log in the
run directory that stress follows with ``--xid-source file:PATH``; compute-sanitizer is absent, so
that step says so and the demo goes on. Each step's module is imported when its step runs, so
``import faulthunt.demo`` (done by the CLI for every command) stays cheap.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faulthunt.errors import FaulthuntError

#: the simulated kernel log inside the run directory (CPU only)
SIM_KERNEL_LOG = "simulated_kernel_log.txt"
#: per-test timeout: below the planted hang's 6 s clock bound, so it is reported hung
DEFAULT_TIMEOUT = 5.0


@dataclasses.dataclass(frozen=True)
class DemoOptions:
    run_dir: Path | None = None
    workers: int = 2
    count: int = 2
    timeout: float = DEFAULT_TIMEOUT
    #: intermittent mode: the bug in 1 run of ``every`` (seeded); None: every run
    every: int | None = None
    seed: int = 0
    backend: str = "auto"       # auto | gpu | sim
    cwd: Path | None = None
    quiet: bool = False


@dataclasses.dataclass(frozen=True)
class Step:
    name: str
    status: str                 # ok | found | skipped | failed
    message: str


@dataclasses.dataclass(frozen=True)
class DemoResult:
    run_dir: Path | None
    backend: str
    steps: tuple[Step, ...]

    @property
    def exit_status(self) -> int:
        """0 when every step ran (or was skipped for a missing tool); 1 when a step failed outright."""
        return 1 if any(s.status == "failed" for s in self.steps) else 0


def _say(out: Callable[[str], None], quiet: bool) -> Callable[[str], None]:
    return (lambda msg: None) if quiet else (lambda msg: out(f"faulthunt demo: {msg}"))


def suite_nodeids(suite: Path, backend: str) -> list[str]:
    """The planted tests whose bug only compute-sanitizer sees (silent in a plain run): the demo
    reruns these under memcheck besides the recorded failures."""
    from faulthunt.kernels import backend as be
    from faulthunt.kernels import catalog

    test_file = suite / "test_planted.py"
    out = []
    for f in catalog.CATALOG:
        if f.evidence.tool == "memcheck" and not f.evidence.tool_options and f.evidence.plain_error is None:
            for flavour in be.flavours_for(f, backend):
                out.append(f"{test_file}::test_planted[{f.name}-{flavour}]")
    return out


#: what the planted suite imports on every backend (numba-cuda, of the gpu extra, pulls both in)
SUITE_MODULES = ("numpy", "numba")


def check_suite_modules(backend: str, find: Callable[[str], object] | None = None) -> None:
    """ToolMissingError (exit 4) before anything runs when the planted suite cannot import.

    A plain ``pip install faulthunt`` has neither: the demo used to stress-run the suite anyway,
    every test erred at import ("48 test runs, 0 passed, 48 error") and the demo said only
    "found"."""
    from faulthunt.errors import ToolMissingError
    from faulthunt.kernels import backend as be

    find = find or importlib.util.find_spec
    missing = [name for name in SUITE_MODULES if find(name) is None]
    if missing:
        extra = "gpu" if backend == be.GPU else "test"
        raise ToolMissingError(
            f"the planted-fault suite needs {' and '.join(missing)}, not installed in "
            f"{sys.prefix}", fix=f"pip install 'faulthunt[{extra}]' (or pip install numpy numba) "
                                  "in this environment, then run faulthunt demo again")


def run_demo(opts: DemoOptions, out: Callable[[str], None] | None = None) -> DemoResult:
    """Run the demo pipeline; every step reports what it did or why it could not."""
    from faulthunt.kernels import SUITE_DIR
    from faulthunt.kernels import backend as be
    from faulthunt.rundir import create_run_dir

    say = _say(out or (lambda m: print(m, file=sys.stderr, flush=True)), opts.quiet)
    steps: list[Step] = []
    backend = be.choose({**os.environ, be.BACKEND_ENV: opts.backend})
    check_suite_modules(backend)
    if backend == be.GPU:
        say("backend gpu: the real planted kernels (CUDA C++ via NVRTC + cuda.core, numba-cuda)")
    else:
        say("backend sim: NO GPU on this machine. The planted numba kernels run in numba's CUDA "
            "simulator; a native crash (wild write), Xid lines, a sticky error and a bounded hang "
            "are SIMULATED stand-ins, so that the pipeline can be seen end to end")
    cwd = (opts.cwd or Path.cwd()).resolve()
    run_dir = create_run_dir(opts.run_dir, base=cwd / ".faulthunt" / "runs").resolve()
    say(f"run directory {run_dir}")

    env = {be.BACKEND_ENV: backend}
    if opts.every:
        env.update({"FAULTHUNT_PLANT_EVERY": str(opts.every), "FAULTHUNT_PLANT_SEED": str(opts.seed)})
        say(f"intermittent: each planted bug fires in 1 run of {opts.every} (seed {opts.seed})")
    xid_source = "auto"
    if backend == be.SIM:
        from faulthunt.kernels.standins import SIM_XID_LOG_ENV

        sim_log = run_dir / SIM_KERNEL_LOG
        sim_log.touch()
        env[SIM_XID_LOG_ENV] = str(sim_log)
        xid_source = f"file:{sim_log}"
        say(f"simulated kernel log (SIMULATED Xid lines, real format): {sim_log}")

    # 1. stress ---------------------------------------------------------------------------------
    summary: dict[str, Any] | None = None
    from faulthunt.stress import StressOptions, run_stress

    sopts = StressOptions(
        pytest_args=(str(SUITE_DIR), "-p", "no:cacheprovider"), workers=opts.workers,
        count=opts.count, timeout=opts.timeout, run_dir=run_dir, xid_source=xid_source,
        cwd=cwd, env=env, quiet=opts.quiet)
    say(f"stress: {opts.workers} workers x {opts.count} runs of each test in {SUITE_DIR}")
    t0 = time.monotonic()
    try:
        result = run_stress(sopts)
    except FaulthuntError as exc:
        steps.append(Step("stress", "failed", str(exc)))
    else:
        summary = result.summary
        steps.append(Step("stress", "found" if result.exit_status else "ok",
                          _stress_line(summary, time.monotonic() - t0)))
    say(steps[-1].message)

    # 2. sanitize -------------------------------------------------------------------------------
    from faulthunt.errors import ToolMissingError
    from faulthunt.sanitizer import run_sanitize

    tests = None
    if backend == be.GPU:
        # one rerun per test: a recorded failure's nodeid is relative to the stress run's cwd,
        # suite_nodeids' absolute, so they are merged on the part after the file
        merged: dict[str, str] = {}
        for nodeid in [*_failed_nodeids(summary), *suite_nodeids(SUITE_DIR, backend)]:
            merged.setdefault(nodeid.split("::", 1)[-1], nodeid)
        tests = sorted(merged.values())
    try:
        # the reruns run the same suite on the same backend
        san = run_sanitize(run_dir, tool="memcheck", cwd=cwd, quiet=opts.quiet, tests=tests,
                           timeout=300, env={**os.environ, **env})
    except ToolMissingError as exc:
        steps.append(Step("sanitize", "skipped",
                          f"compute-sanitizer is not on this machine"
                          f"{' (no GPU: expected)' if backend == be.SIM else ''}; "
                          f"skipped and going on. {exc.fix or ''}".strip()))
    except FaulthuntError as exc:
        steps.append(Step("sanitize", "failed", str(exc)))
    else:
        steps.append(Step("sanitize", "found" if san.findings else "ok",
                          f"memcheck: {len(san.findings)} finding(s) -> {san.out_dir}"))
    say(steps[-1].message)

    # 3. map ------------------------------------------------------------------------------------
    from faulthunt.mapper import map_run

    try:
        verdicts = map_run(run_dir)
    except FaulthuntError as exc:
        steps.append(Step("map", "failed", str(exc)))
    else:
        steps.append(Step("map", "ok", map_message(verdicts)))
    say(steps[-1].message)

    # 4. report ---------------------------------------------------------------------------------
    from faulthunt.report import write_reports

    try:
        paths = write_reports(run_dir)
    except FaulthuntError as exc:
        steps.append(Step("report", "failed", str(exc)))
    else:
        steps.append(Step("report", "ok", "wrote " + ", ".join(str(p) for p in paths)))
    say(steps[-1].message)
    return DemoResult(run_dir, backend, tuple(steps))


def _failed_nodeids(summary: dict[str, Any] | None) -> list[str]:
    out = []
    for f in (summary or {}).get("failures", []) or []:
        if isinstance(f, dict) and f.get("outcome") != "collateral" and f.get("base_nodeid"):
            out.append(str(f["base_nodeid"]))
    return out


def _stress_line(summary: dict[str, Any], secs: float) -> str:
    fails = summary.get("failures", []) or []
    by: dict[str, int] = {}
    for f in fails:
        if isinstance(f, dict):
            by[str(f.get("outcome"))] = by.get(str(f.get("outcome")), 0) + 1
    parts = ", ".join(f"{n} {k}" for k, n in sorted(by.items())) or "no failures"
    return (f"stress: {summary.get('tests_run', '?')} test runs, {summary.get('passed', '?')} passed, "
            f"{parts}, {len(summary.get('xids', []) or [])} Xid(s) attributed ({secs:.0f} s)")


def render_steps(result: DemoResult) -> str:
    """The closing table of the demo, plain text."""
    lines = [f"faulthunt demo ({'GPU' if result.backend == 'gpu' else 'NO GPU: simulator + SIMULATED stand-ins'})",
             f"run directory: {result.run_dir}"]
    for s in result.steps:
        lines.append(f"  {s.name:<9} {s.status:<11} {s.message}")
    return "\n".join(lines)


def map_message(verdicts: list[dict[str, Any]]) -> str:
    """The map step's line: the verdicts found, and why the others have none (in the simulator
    no GPU source records, so nothing can be mapped: the reason says so instead of a bare None)."""
    kinds = sorted({str(v["verdict"]) for v in verdicts if v.get("verdict")})
    missing = [v for v in verdicts if not v.get("verdict")]
    msg = f"{len(verdicts)} fault address(es)"
    if kinds or not missing:
        msg += " mapped" + (f" ({', '.join(kinds)})" if kinds else "")
    if missing:
        reason = missing[0].get("reason") or missing[0].get("note") or "no reason given"
        msg += f"{'; ' if kinds else ', '}{len(missing)} not mapped: {reason}"
    return msg
