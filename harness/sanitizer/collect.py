"""Run the sanitizer reruns: up to ``parallel`` compute-sanitizer processes at once, each test
under each tool until its runs are done, it is found, or the budget ends (the I/O edge).

compute-sanitizer slows a test 10-100x, mostly on the GPU, and the GPU runs several processes at
once: one sanitizer process at a time leaves it idle while the rerun of a 1-in-50 fault takes
hours. So runs are spread over a pool of processes. Which run starts next is round-robin over the
tests (and tools) that still want runs, so a budget is shared fairly; a test whose fault showed
stops starting runs and its runs still going are stopped (their GPU time goes to the others).

Each run is one process: ``compute-sanitizer [options] python -m pytest ... --faulthunt-id=ID``,
in its own session (a timeout or a stop kills its whole process group, children included), with
its text log, XML and pytest output in ``<run>/sanitizer/logs|xml/NNN-<tool>.*``. What each test of
the run did comes from the rerun's own test spans (``<run>/sanitizer/run/events``), found through
the pid the run's pytest writes (:mod:`faulthunt.sanitizer.rerun_plugin`).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from faulthunt.errors import InputError
from faulthunt.nodeids import pytest_selection
from faulthunt.records.run import assemble_spans
from faulthunt.rundir import RunTail
from faulthunt.sanitizer import command as cmd
from faulthunt.sanitizer.analyse import SILENT_STOP, RunResult, culprit_of
from faulthunt.sanitizer.parse_text import parse_text_log
from faulthunt.sanitizer.parse_xml import parse_xml_stream
from faulthunt.sanitizer.plan import Target
from faulthunt.sanitizer.reduce import reduce_records
from faulthunt.sanitizer.rerun_plugin import ORDER_OPTION, PIDFILE_OPTION, write_order

RERUN_PLUGIN = "faulthunt.sanitizer.rerun_plugin"
_KILL_GRACE = 10.0
#: how often the pool looks at its processes; small against a sanitizer run's seconds
POLL_S = 0.05


def pytest_argv(ids: Sequence[str], out_dir: Path, *, count: int | None = None,
                pidfile: Path | None = None, order_file: Path | None = None,
                python: str = sys.executable, rootdir: str | None = None,
                cwd: Path | None = None) -> list[str]:
    """The pytest command of one run: no xdist, its own cache dir, no pytest-timeout interference;
    ``count`` for pytest-repeat's step ids; ``order_file`` to run a sequence in its order. The
    ids come last, behind ``--`` (faulthunt.nodeids): a hostile id cannot read as an option;
    ``rootdir`` (the stress run's) pinned, the ids being relative to it, and the roots as paths
    from ``cwd``, where the run goes."""
    argv = [python, "-m", "pytest", "-p", "faulthunt", "-p", RERUN_PLUGIN, "-q", "-rfE", "--color=no",
            # the user's .pytest_cache (their --lf list) stays as it was
            "-o", f"cache_dir={out_dir / 'pytest_cache'}"]
    if importlib.util.find_spec("xdist") is not None:
        argv += ["-n", "0"]  # overrides an `-n` in the user's addopts
    if importlib.util.find_spec("pytest_timeout") is not None:
        argv += ["--timeout", "0"]  # the rerun has its own, longer per-run timeout
    if count is not None:
        argv += ["-p", "repeat", "--count", str(count)]
    if pidfile is not None:
        argv.append(f"{PIDFILE_OPTION}={pidfile}")
    if order_file is not None:
        argv += ["-p", "no:randomly", f"{ORDER_OPTION}={order_file}"]
    return argv + pytest_selection(ids, "the run being sanitized", rootdir=rootdir, cwd=cwd)


def have_repeat() -> bool:
    """Whether pytest-repeat is importable here (exact repeat-step ids need it)."""
    return importlib.util.find_spec("pytest_repeat") is not None


def kill_groups(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """End each process's whole group (compute-sanitizer, pytest, the test's children): SIGTERM,
    a grace period shared by all, then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, _KILL_GRACE), (signal.SIGKILL, 5.0)):
        alive = []
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)
                alive.append(proc)
            except (ProcessLookupError, PermissionError):
                continue
        end = time.monotonic() + grace
        for proc in alive:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                continue
        procs = [p for p in alive if p.poll() is None]
        if not procs:
            return


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except (FileNotFoundError, IsADirectoryError):
        return ""


def _read_pid(path: Path) -> int | None:
    text = _read(path).strip()
    return int(text) if text.isdigit() and len(text) < 10 else None


@dataclasses.dataclass
class Lane:
    """One test under one tool: how many runs it has started, and whether it stopped."""

    target: Target
    tool: str
    started: int = 0
    silent: int = 0
    #: found | silent | runs | budget | interrupted (None: still going)
    stopped: str | None = None

    def wants_run(self) -> bool:
        return self.stopped is None and (self.target.planned is None or self.started < self.target.planned)


@dataclasses.dataclass
class _Active:
    lane: Lane
    run: int
    job: int
    ids: tuple[str, ...]
    proc: subprocess.Popen[bytes]
    output: IO[bytes]
    t0: float
    stem: str
    plan: cmd.CommandPlan
    argv: list[str]


@dataclasses.dataclass(frozen=True)
class Settings:
    """What every run of one sanitize shares."""

    out_dir: Path                 # <run>/sanitizer
    cwd: Path
    env: dict[str, str]
    timeout: float
    #: builds compute-sanitizer's part of the command: (tool, log file, xml file) -> plan
    build: Callable[[str, str, str], cmd.CommandPlan]
    python: str = sys.executable
    #: pytest's rootdir in the stress run (its node ids are relative to it), when it said
    rootdir: str | None = None


class Collector:
    """The pool: starts runs, reaps them, stops lanes, keeps every run's result."""

    def __init__(self, settings: Settings, lanes: Sequence[Lane], *, parallel: int = 1,
                 budget: float | None = None, keep_going: bool = False,
                 on_run: Callable[[RunResult, str, str], None] = lambda r, log, xml: None,
                 say: Callable[[str], None] = lambda msg: None) -> None:
        self.s = settings
        self.lanes = list(lanes)
        self.parallel = max(1, parallel)
        self.budget = budget
        self.keep_going = keep_going
        self.on_run = on_run
        self.say = say
        self.active: list[_Active] = []
        self.results: list[RunResult] = []
        self.job = 0
        self._cursor = 0
        self._tail = RunTail(settings.out_dir / "run")
        self._events: dict[int | None, list[Any]] = {}
        self.dropped: dict[str, None] = {}

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> list[RunResult]:
        deadline = time.monotonic() + self.budget if self.budget else None
        try:
            while True:
                if deadline is not None and time.monotonic() >= deadline:
                    self._stop_all("budget")
                    deadline = None
                self._fill()
                if not self.active:
                    break
                done = self._reap()
                if not done:
                    time.sleep(POLL_S)
                for active, timed_out in done:
                    self._finish(active, timed_out=timed_out)
        except BaseException:
            self._stop_all("interrupted", finished_too=True)  # Ctrl-C: leave no sanitizer behind
            raise
        for lane in self.lanes:
            lane.stopped = lane.stopped or "runs"
        return self.results

    def _next_lane(self) -> Lane | None:
        """Round-robin over the lanes that want a run, so a budget is shared fairly."""
        n = len(self.lanes)
        for i in range(n):
            lane = self.lanes[(self._cursor + i) % n]
            if lane.wants_run():
                self._cursor = (self._cursor + i + 1) % n
                return lane
        return None

    def _fill(self) -> None:
        while len(self.active) < self.parallel:
            lane = self._next_lane()
            if lane is None:
                return
            self.active.append(self._start(lane))

    def _reap(self) -> list[tuple[_Active, bool]]:
        done = [(a, False) for a in self.active if a.proc.poll() is not None]
        now = time.monotonic()
        late = [a for a in self.active if a.proc.returncode is None and now - a.t0 > self.s.timeout]
        if late:
            kill_groups([a.proc for a in late])
            done += [(a, True) for a in late]
        return done

    def _stop_all(self, why: str, *, finished_too: bool = False) -> None:
        busy = {id(a.lane) for a in self.active}
        for lane in self.lanes:  # a lane that had done all its runs was not stopped by this
            if lane.stopped is None and (lane.wants_run() or id(lane) in busy):
                lane.stopped = why
        going = [a for a in self.active if finished_too or a.proc.poll() is None]
        if going:
            self.say(f"{why}: stopping {len(going)} run(s) still going")
            self._cancel(going, why)

    def _cancel(self, runs: Sequence[_Active], why: str) -> None:
        kill_groups([a.proc for a in runs])
        for a in runs:
            self._finish(a, timed_out=False, cancelled=why)

    # -- one run -------------------------------------------------------------------------------

    def _start(self, lane: Lane) -> _Active:
        lane.started += 1
        self.job += 1
        run, job, tool = lane.started, self.job, lane.tool
        ids = lane.target.selection(run)
        stem = f"{job:03d}-{tool}"
        logs = self.s.out_dir / "logs"
        log, xml, pid = logs / f"{stem}.log", self.s.out_dir / "xml" / f"{stem}.xml", logs / f"{stem}.pid"
        for stale in (log, xml, pid):
            stale.unlink(missing_ok=True)
        order = None
        if len(ids) > 1:
            order = logs / f"{stem}.order.json"
            write_order(order, list(ids))
        plan = self.s.build(tool, str(log), str(xml))
        for d in plan.dropped:
            self.dropped.setdefault(d.render(), None)
        argv = list(plan.argv) + pytest_argv(ids, self.s.out_dir, count=lane.target.count_for(ids),
                                             pidfile=pid, order_file=order, python=self.s.python,
                                             rootdir=self.s.rootdir, cwd=self.s.cwd)
        output = open(logs / f"{stem}.pytest.log", "wb")  # noqa: SIM115 - closed in _finish
        try:
            proc = subprocess.Popen(argv, cwd=self.s.cwd, env=self.s.env, stdout=output,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            output.close()
            raise InputError(f"cannot run {argv[0]}: {exc.strerror}",
                             fix="check that compute-sanitizer and python are executable") from exc
        return _Active(lane, run, job, ids, proc, output, time.monotonic(), stem, plan, argv)

    def _tests_of(self, pid: int | None) -> tuple[tuple[str, str], ...]:
        """(node id, outcome) of each test the pytest process ``pid`` ran, in order."""
        if pid is None:
            return ()
        workers, _ = self._tail.poll()
        for ev in workers:
            self._events.setdefault(getattr(ev, "pid", None), []).append(ev)
        return tuple((s.nodeid, s.outcome) for s in assemble_spans(self._events.pop(pid, [])))

    def _finish(self, a: _Active, *, timed_out: bool, cancelled: str | None = None) -> None:
        if a not in self.active:
            return  # already finished (cancelled while it waited to be reaped)
        self.active.remove(a)
        a.output.close()
        _scrub_in_place(self.s.out_dir / "logs" / f"{a.stem}.pytest.log")
        rc = a.proc.returncode
        secs = time.monotonic() - a.t0
        logs, tool = self.s.out_dir / "logs", a.lane.tool
        out_path, log_path = logs / f"{a.stem}.pytest.log", logs / f"{a.stem}.log"
        xml_path = self.s.out_dir / "xml" / f"{a.stem}.xml"
        text = _read(log_path) if a.plan.log_file else _read(out_path)
        parsed = parse_text_log(text, tool=tool)
        xml_text = _read(xml_path) if a.plan.xml_file else ""
        xml_records, xml_ok = parse_xml_stream(xml_text) if xml_text else ([], False)
        records = list(parsed.records) or xml_records
        pid = _read_pid(logs / f"{a.stem}.pid")
        tests = self._tests_of(pid)
        tool_error = None
        if not records and not timed_out and not cancelled and rc not in (0, None, cmd.ERROR_EXITCODE):
            errors = [n for n in parsed.notices if n.startswith(("Error", "Internal Sanitizer Error"))]
            if errors or not parsed.banners:
                # the sanitizer could not check this test at all (no GPU, a driver mismatch, the
                # target died before CUDA started): not a clean result
                tool_error = "; ".join(errors) or "no compute-sanitizer output"
            elif rc in (4, 5) and not tests:
                tool_error = f"pytest could not run the test (exit {rc}: no such test, or a usage error)"
        findings = tuple(reduce_records(records, nodeid=culprit_of(a.ids, tests)))
        run_dir = self.s.out_dir.parent
        meta: dict[str, Any] = {
            "nodeid": a.ids[-1], "base": a.lane.target.base, "tool": tool, "run": a.run, "job": a.job,
            "exit_status": rc, "timed_out": timed_out, "cancelled": cancelled,
            "duration": round(secs, 3), "records": len(records), "xml_records": len(xml_records),
            "xml_intact": xml_ok, "error_summary": parsed.error_summary,
            "not_printed": parsed.not_printed, "findings": len(findings),
            "sanitizer_errors": rc == cmd.ERROR_EXITCODE, "tool_error": tool_error, "pid": pid,
            "tests": [list(t) for t in tests],
            "log": str(log_path.relative_to(run_dir)) if a.plan.log_file else None,
            "output": str(out_path.relative_to(run_dir)),
            "xml": str(xml_path.relative_to(run_dir)) if a.plan.xml_file else None,
            "argv": a.argv,
        }
        if len(a.ids) > 1:
            meta["sequence"] = list(a.ids[:-1])
        result = RunResult(a.job, a.lane.target.base, tool, a.run, a.ids, exit_status=rc,
                           timed_out=timed_out, cancelled=cancelled, duration=secs,
                           records=len(records), findings=findings, tool_error=tool_error,
                           tests=tests, meta=meta)
        self.results.append(result)
        self.on_run(result, text, xml_text)
        self._after(a.lane, result)

    def _after(self, lane: Lane, result: RunResult) -> None:
        """Stop a lane whose fault showed (and its runs still going) or that failed silently
        too often, unless every run was asked for (--keep-going)."""
        if result.cancelled or lane.stopped or self.keep_going:
            return
        if result.state == "found":
            lane.stopped = "found"
            rest = [a for a in self.active if a.lane is lane and a.proc.poll() is None]
            if rest:
                self.say(f"{lane.target.base} [{lane.tool}]: found in run {result.run}; "
                         f"stopping its {len(rest)} other run(s)")
                self._cancel(rest, "found")
        elif result.state == "failed":
            lane.silent += 1
            if lane.silent >= SILENT_STOP:
                lane.stopped = "silent"


def _scrub_in_place(path: Path) -> None:
    """A rerun's output is the test's output (a token it printed, an assertion holding one):
    it is redacted as stress redacts reproducer.log before the run directory keeps it."""
    from faulthunt.scrub import scrub_file

    tmp = path.with_name(f".{path.name}.scrub")
    try:
        scrub_file(path, tmp)
        os.replace(tmp, path)
    except OSError:  # no room, gone: the log as it is beats no log (the parse still reads it)
        tmp.unlink(missing_ok=True)
