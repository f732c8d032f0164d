"""``faulthunt stress``: run a pytest suite in parallel repeated workers and name what broke.

The engine behind the command: makes the run directory, takes a kernel-log cursor, starts the
Follower, runs ``pytest -p faulthunt -p xdist -p repeat -p timeout ...`` as a child (its output
teed into ``reproducer.log``), shows live progress from the worker event files, and afterwards
writes the kernel-log snapshots, the attributed ``xid.jsonl`` and ``summary.json``.

pytest is never killed to stop early: ``--maxfail`` is pytest's own, so pytest writes its
results and our records stay whole. Ctrl-C is forwarded once as SIGINT (pytest's own clean stop).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from faulthunt.errors import ExitCode, FaulthuntError, UsageError
from faulthunt.records.documents import RunInfo
from faulthunt.records.events import Crash, Recycled, RestartLimit, TestEnd, TestStart
from faulthunt.rundir import (RUN_DIR_ENV, DEFAULT_BASE, Layout, JsonlWriter, RunDir, RunTail,
                              create_run_dir, dumps, write_json_atomic, write_run_info,
                              write_text_atomic)

#: restart budget handed to xdist: a stress run may crash many workers (xdist's default is 4*n)
DEFAULT_MAX_WORKER_RESTART = 1000


@dataclasses.dataclass(frozen=True)
class StressOptions:
    """What ``faulthunt stress`` was asked to do (see docs/stress.md)."""

    pytest_args: tuple[str, ...] = ()     # positional args and anything after `--`
    workers: int | str = 1                # -n (int or "auto"); 0 = no xdist
    count: int = 1                        # --count (pytest-repeat)
    keyword: str | None = None            # -k
    maxfail: int | None = None
    timeout: float | None = None          # per-test seconds (thread method)
    launch_blocking: bool = True          # CUDA_LAUNCH_BLOCKING=1
    gpus: tuple[str, ...] | None = None   # round-robin CUDA_VISIBLE_DEVICES per worker
    run_dir: Path | None = None           # exact dir; else a new .faulthunt/runs/<id>
    base: Path | None = None
    xid_source: str = "auto"              # faulthunt.kernlog.open_source spec
    ledger: str = "auto"                  # auto|cupti|numba|cupy|torch|off
    cwd: Path | None = None
    env: Mapping[str, str] | None = None  # extra env for pytest
    quiet: bool = False
    max_worker_restart: int = DEFAULT_MAX_WORKER_RESTART
    recycle: bool = True                  # restart a worker after a sticky CUDA error
    guard: str | None = None              # guard mode spec (FAULTHUNT_GUARD; docs/guard.md)


@dataclasses.dataclass(frozen=True)
class StressResult:
    run_dir: Path
    summary: dict[str, Any]
    exit_status: int


# --- pure pieces ---------------------------------------------------------------------------------

def parse_gpus(spec: str, device_count: Callable[[], int] | None = None) -> tuple[str, ...]:
    """``"0,1"`` -> ("0", "1"); ``"all"`` -> every NVML device; UUIDs pass through."""
    spec = spec.strip()
    if spec == "all":
        n = (device_count or nvml_device_count)()
        if n <= 0:
            raise UsageError("--gpus all: NVML sees no GPU on this machine",
                             fix="pass --gpus 0,1,... explicitly, or drop --gpus")
        return tuple(str(i) for i in range(n))
    parts = tuple(p.strip() for p in spec.split(",") if p.strip())
    if not parts:
        raise UsageError(f"--gpus {spec!r} names no device", fix="use --gpus all or --gpus 0,1")
    for p in parts:
        if not (p.isdigit() or p.startswith(("GPU-", "MIG-"))):
            raise UsageError(f"--gpus: {p!r} is neither a device index nor a GPU-/MIG- UUID",
                             fix="use --gpus all, --gpus 0,1 or --gpus GPU-<uuid>,...")
    return parts


def nvml_device_count() -> int:
    """Number of GPUs NVML sees (0 without a driver)."""
    from faulthunt import nvml

    return nvml.device_count()


def worker_count(opts: StressOptions) -> int | str:
    if opts.gpus and opts.workers == "auto":
        return len(opts.gpus)
    return opts.workers


def build_pytest_argv(opts: StressOptions, python: str = sys.executable) -> list[str]:
    """The pytest command line a stress run executes."""
    argv = [python, "-m", "pytest", "-p", "faulthunt", "-p", "xdist", "-p", "repeat",
            "-p", "timeout"]
    n = worker_count(opts)
    if opts.gpus:
        count = int(n) if n not in (0, "0") else len(opts.gpus)
        # One gateway spec per worker: xdist restarts a dead worker from its spec, so the
        # replacement keeps the slot's device (xdist/dsession.py: _clone_node).
        for i in range(count):
            argv += ["--tx", f"popen//env:CUDA_VISIBLE_DEVICES={opts.gpus[i % len(opts.gpus)]}"]
        argv += ["--dist", "load"]
    elif n not in (0, "0"):
        argv += ["-n", str(n)]
    if n not in (0, "0"):
        argv += ["--max-worker-restart", str(opts.max_worker_restart)]
    if opts.count > 1:
        argv += ["--count", str(opts.count)]
    if opts.keyword:
        argv += ["-k", opts.keyword]
    if opts.maxfail is not None:
        argv += ["--maxfail", str(opts.maxfail)]
    if opts.timeout:
        # thread: the signal method cannot interrupt a CUDA synchronize.
        argv += ["--timeout", f"{opts.timeout:g}", "--timeout-method", "thread"]
    if not opts.recycle:
        argv += ["--faulthunt-no-recycle"]
    argv += list(opts.pytest_args)
    return argv


def build_env(opts: StressOptions, run_dir: Path,
              base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the pytest child."""
    env = dict(os.environ if base is None else base)
    env.update(opts.env or {})
    env[RUN_DIR_ENV] = str(run_dir.resolve())
    env["PYTHONFAULTHANDLER"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if opts.launch_blocking:
        env["CUDA_LAUNCH_BLOCKING"] = "1"
    if opts.ledger:
        env["FAULTHUNT_LEDGER"] = opts.ledger
    if opts.guard:
        env["FAULTHUNT_GUARD"] = opts.guard  # guard mode: faulthunt.guard.config.GUARD_ENV
    if opts.gpus:
        # CUDA_VISIBLE_DEVICES indices then mean what nvidia-smi/NVML (and our PCI map) mean.
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def exit_status_for(pytest_status: int | None, found: bool) -> int:
    """faulthunt stress's exit status (docs/stress.md) from pytest's and what the run found."""
    if found:
        return ExitCode.FOUND
    if pytest_status in (0, None):
        return ExitCode.OK if pytest_status == 0 else ExitCode.FOUND
    if pytest_status == 1:        # tests failed (e.g. a crash report we did not see)
        return ExitCode.FOUND
    if pytest_status == 2:        # interrupted
        return ExitCode.INTERRUPTED
    if pytest_status in (4, 5):   # usage error / no tests collected
        return ExitCode.USAGE
    return ExitCode.FOUND if pytest_status < 0 else ExitCode.BAD_INPUT


_TOTAL_RES = (re.compile(r"\[(\d+) items?\]"), re.compile(r"collected (\d+) items?"))


def parse_total(line: str) -> int | None:
    """Number of tests from pytest/xdist's collection line."""
    for rx in _TOTAL_RES:
        m = rx.search(line)
        if m:
            return int(m.group(1))
    return None


# --- live progress -------------------------------------------------------------------------------

class Progress:
    """Counts from the worker event files and controller.jsonl, read incrementally."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._tail = RunTail(run_dir)
        self.started = 0
        self.outcomes: Counter[str] = Counter()
        self.crashed = 0
        self.hung = 0
        self.recycled = 0
        self.xids = 0
        self.total: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> None:
        with self._lock:
            workers, controller = self._tail.poll()
            for ev in workers:
                if isinstance(ev, TestStart):
                    self.started += 1
                elif isinstance(ev, TestEnd):
                    self.outcomes[ev.outcome] += 1
            for cev in controller:
                if isinstance(cev, Crash) and cev.kind == "crashed":
                    self.crashed += 1
                elif isinstance(cev, Recycled):
                    self.recycled += 1

    @property
    def done(self) -> int:
        # hung tests wrote an end record; crashed ones never do
        return sum(self.outcomes.values()) + self.crashed

    def line(self) -> str:
        total = f"/{self.total}" if self.total else ""
        failed = self.outcomes.get("failed", 0) + self.outcomes.get("error", 0)
        return (f"tests {self.done}{total}  failed {failed}  crashed {self.crashed}  "
                f"hung {self.outcomes.get('hung', 0)}  collateral "
                f"{self.outcomes.get('collateral', 0)}  recycled {self.recycled}  Xids {self.xids}")


# --- kernel log ----------------------------------------------------------------------------------

class KernelLogWatch:
    """Cursor before, Follower during, snapshots after (faulthunt.kernlog)."""

    def __init__(self, run_dir: Path, spec: str, warn: Callable[[str], None],
                 on_xid: Callable[[dict[str, Any]], None]) -> None:
        self.run_dir = run_dir
        self.spec = spec
        self.warn = warn
        self.on_xid = on_xid
        self.source: Any = None
        self.follower: Any = None
        self.cursor: Any = None
        self.status: dict[str, Any] = {"source": None, "error": None}
        self._seen: dict[tuple[Any, str], float] = {}

    def start(self) -> None:
        if self.spec == "none":
            self.status["error"] = "kernel log not followed (--xid-source none)"
            return
        from faulthunt.kernlog import sources

        try:
            self.source = sources.open_source(self.spec, warn=self.warn)
            self.cursor = self.source.cursor()
            write_json_atomic(self.run_dir / Layout.KMSG_CURSOR,
                              {"source": self.source.name, "cursor": self.cursor.to_json()})
            self._snapshot(Layout.KMSG_BEFORE)
            self.follower = sources.Follower(self.source, self.cursor, self._event)
            self.follower.start()
            self.status["source"] = self.source.name
        except (FaulthuntError, OSError) as exc:
            # The run goes on without Xid capture; the summary says why (kernel_log.error).
            self.status["error"] = str(exc)
            self.warn(f"kernel log: {exc}")
            self.source = self.follower = None

    def _snapshot(self, name: str) -> None:
        try:
            text = self.source.snapshot()
        except FaulthuntError as exc:
            text = f"# snapshot failed: {exc}\n"
        write_text_atomic(self.run_dir / name, text)

    def _event(self, event: Any) -> None:
        rec = event.to_json()
        now = time.monotonic()
        self._seen.setdefault((rec.get("seq"), rec.get("raw", "")), now)
        rec["t_seen_mono"] = now
        rec["t_seen"] = time.time()
        self.on_xid(rec)

    def stop(self) -> list[dict[str, Any]] | None:
        """All Xids since the cursor (None when the log was not followed)."""
        if self.follower is None:
            return None
        result = self.follower.stop()
        write_text_atomic(self.run_dir / Layout.KMSG_ADDED,
                          "".join(line + "\n" for line in result.lines))
        self._snapshot(Layout.KMSG_AFTER)
        # The follower's ReadResult says what could not be read: keep it in summary.json
        # (kernel_log) and say it on the terminal, so lost records are reported, not missing.
        self.status["lost"] = int(getattr(result, "lost", 0) or 0)
        self.status["lost_unknown"] = bool(getattr(result, "lost_unknown", False))
        self.status["warnings"] = [str(w) for w in getattr(result, "warnings", ())]
        unparsed = [str(u) for u in getattr(result, "unparsed", ())]
        self.status["unparsed"] = len(unparsed)
        self.status["unparsed_sample"] = unparsed[:5]
        if self.status["lost"]:
            self.warn(f"kernel log: {self.status['lost']} records were overwritten before they "
                      "were read (ring buffer overrun): Xids among them are missing")
        if self.status["lost_unknown"]:
            self.warn("kernel log: records may have been lost and the source cannot count them "
                      f"({self.source.name}); use --xid-source kmsg for a counted log")
        for w in self.status["warnings"]:
            self.warn(f"kernel log: {w}")
        if unparsed:
            self.warn(f"kernel log: {len(unparsed)} 'NVRM: Xid' line(s) could not be parsed; "
                      "they are in kmsg_added.txt")
        out = []
        for event in result.events:
            rec = event.to_json()
            seen = self._seen.get((rec.get("seq"), rec.get("raw", "")))
            if seen is not None:
                rec["t_seen_mono"] = seen
            out.append(rec)
        return out


# --- the run -------------------------------------------------------------------------------------

def _identity() -> dict[str, Any]:
    from faulthunt.identity import collect_basic

    try:
        return collect_basic()
    except Exception as exc:  # noqa: BLE001 - collect_basic promises not to raise; a run must not fail on it
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_stress(opts: StressOptions, *, on_line: Callable[[str], None] | None = None,
               console: Any = None) -> StressResult:
    """Run one stress hunt; everything recorded lands in the run directory."""
    from faulthunt.redact import redact_env
    from faulthunt.summary import attribute_xids

    cwd = (opts.cwd or Path.cwd()).resolve()
    base = opts.base if opts.base is not None else cwd / DEFAULT_BASE
    run_dir = create_run_dir(opts.run_dir, base).resolve()
    (run_dir / "hangs").mkdir(exist_ok=True)
    argv = build_pytest_argv(opts)
    env = build_env(opts, run_dir)
    run_info = RunInfo.begin(run_dir.name, kind="stress", cwd=str(cwd),
                             pytest_args=opts.pytest_args, pytest_argv=argv,
                             options=dataclasses.asdict(opts))
    write_run_info(run_dir, run_info)
    write_json_atomic(run_dir / Layout.ENV, redact_env(env))

    warnings: list[str] = []

    def warn(msg: str) -> None:
        warnings.append(msg)
        if not opts.quiet:
            print(f"faulthunt stress: {msg}", file=sys.stderr, flush=True)

    progress = Progress(run_dir)
    live_xids = JsonlWriter(run_dir / Layout.XID)
    xid_lock = threading.Lock()

    def on_xid(rec: dict[str, Any]) -> None:
        # Attributed live with the spans so far and appended at once: a controller killed
        # mid-run keeps every Xid it saw. Rewritten with the final attribution at the end.
        with xid_lock:
            try:
                rec = attribute_xids([rec], RunDir(run_dir).spans())[0]
            except Exception:  # noqa: BLE001 - attribution must never lose the event
                pass
            live_xids.write(rec)
            progress.xids += 1

    kernlog = KernelLogWatch(run_dir, opts.xid_source, warn, on_xid)
    kernlog.start()

    pytest_status: int | None = None
    log = open(run_dir / Layout.REPRODUCER_LOG, "w", encoding="utf-8", errors="replace")  # noqa: SIM115
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                # Own session: a terminal Ctrl-C reaches only us, and we forward
                                # exactly one SIGINT (two would cut pytest's own clean stop short).
                                start_new_session=True)
    except OSError as exc:
        log.close()
        raise FaulthuntError(f"cannot start pytest ({argv[0]}): {exc.strerror}",
                             fix="is pytest installed in this Python?") from exc

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            log.write(line)
            log.flush()
            if progress.total is None:
                progress.total = parse_total(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))

    reader = threading.Thread(target=pump, name="faulthunt-pytest-output", daemon=True)
    reader.start()
    # While pytest starts its workers (identity is not needed before the end of the run).
    write_json_atomic(run_dir / Layout.IDENTITY, _identity())
    live = _live(console, progress, opts.quiet)
    interrupts = 0

    def on_sigint(signum: int, frame: Any) -> None:
        # A handler instead of KeyboardInterrupt: an exception could land anywhere (in the
        # progress poll, in the final summary) and lose the results. The first Ctrl-C is
        # forwarded once to pytest (its own clean stop writes its results); a second one
        # terminates it. Either way we go on to write everything down.
        nonlocal interrupts
        interrupts += 1
        try:
            if interrupts == 1:
                proc.send_signal(signal.SIGINT)
            else:
                proc.terminate()
        except ProcessLookupError:
            pass

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, on_sigint) if in_main else None
    try:
        # Short waits so the end of pytest is noticed at once (a 0.5 s wait cost 0.25 s a run on
        # average, a few % of a short stress run); the progress files are read every 0.5 s.
        next_poll = time.monotonic() + 0.5
        while True:
            try:
                pytest_status = proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + 0.5
                    progress.poll()
                    if live is not None:
                        live.update(progress.line())
    finally:
        interrupted = interrupts > 0
        reader.join(timeout=10)
        log.close()
        progress.poll()
        if live is not None:
            live.update(progress.line())
            live.stop()
        xids = kernlog.stop()
        live_xids.close()
    try:
        return _finish_run(run_dir, opts, run_info, kernlog, xids, pytest_status, interrupted,
                           warnings, warn)
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)


def _finish_run(run_dir: Path, opts: StressOptions, run_info: RunInfo,
                kernlog: KernelLogWatch, xids: list[dict[str, Any]] | None,
                pytest_status: int | None, interrupted: bool,
                warnings: list[str], warn: Callable[[str], None]) -> StressResult:
    """Everything after pytest exited: attributed xid.jsonl, summary.json, run.json, mapping."""
    from faulthunt.summary import (attribute_xids, build_summary, found_something,
                                   pci_map_of_run, visible_of_run)

    # The collector finishing its own data: cut the unwritten reserve off the ledger files of
    # workers that died (a worker that exits cuts its own); everything after this only reads.
    from faulthunt.ledger.writer import seal_dead
    seal_dead(run_dir / Layout.LEDGER_DIR)
    run = RunDir(run_dir)
    # None: e.g. a file: source that could not be followed: keep what was recorded live
    found_xids: Sequence[Any] = run.xids() if xids is None else xids
    pci_map = pci_map_of_run(run)
    spans = run.spans()
    attributed = attribute_xids(found_xids, spans, pci_map)
    write_text_atomic(run_dir / Layout.XID, "".join(dumps(x) + "\n" for x in attributed))
    summary = build_summary(spans, run.controller(), attributed, pci_map=pci_map,
                            visible=visible_of_run(run, pci_map), events=run.worker_events())
    exit_status = exit_status_for(pytest_status, found_something(summary))
    if interrupted:
        exit_status = ExitCode.INTERRUPTED
    limit = next((c for c in run.controller() if isinstance(c, RestartLimit)), None)
    if limit is not None and not summary.get("stopped_early"):
        # xdist's restart budget ran out (the plugin records it): the rest did not run
        summary["stopped_early"] = (f"xdist: maximum crashed workers reached: {limit.limit} "
                                    "(raise --max-worker-restart to run the rest)")
    summary["exit_status"] = int(exit_status)
    summary["pytest_exit_status"] = pytest_status
    summary["skipped_lines"] = run.skipped_lines()
    summary["kernel_log"] = kernlog.status
    summary["warnings"] = warnings
    write_json_atomic(run_dir / Layout.SUMMARY, summary)
    write_run_info(run_dir, run_info.finished(exit_status=int(exit_status),
                                              pytest_exit_status=pytest_status))
    _map_run(run, summary, warn)
    return StressResult(run_dir, summary, int(exit_status))


def _map_run(run: RunDir, summary: dict[str, Any], warn: Callable[[str], None]) -> None:
    """Map the run's fault addresses to its ledger (faulthunt.mapper.map_run)."""
    if not summary.get("xids") and not run.has_ledger():
        return
    from faulthunt.mapper import map_run

    try:
        map_run(run.path)
    except FaulthuntError as exc:
        warn(f"mapping fault addresses: {exc}")
    except Exception as exc:  # noqa: BLE001 - the stress result stands even if mapping breaks
        warn(f"mapping fault addresses failed: {type(exc).__name__}: {exc}")


class _LiveLine:
    def __init__(self, live: Any, text_cls: Any) -> None:
        self._live, self._text = live, text_cls

    def update(self, line: str) -> None:
        self._live.update(self._text(line))

    def stop(self) -> None:
        self._live.stop()


def _live(console: Any, progress: Progress, quiet: bool) -> _LiveLine | None:
    """A one-line rich Live display on a terminal; nothing when quiet or not a terminal."""
    if quiet or console is None or not getattr(console, "is_terminal", False):
        return None
    from rich.live import Live
    from rich.text import Text

    live = Live(Text(progress.line()), console=console, refresh_per_second=4, transient=False)
    live.start()
    return _LiveLine(live, Text)


# --- the terminal summary ------------------------------------------------------------------------

def render_summary(summary: Mapping[str, Any], run_dir: Path, console: Any) -> None:
    """The end-of-run table: failing base tests, k of n, rate, 95% interval, Xids, mapping."""
    from rich.markup import escape
    from rich.table import Table

    run = RunDir(run_dir)
    verdicts: dict[str, list[str]] = {}
    base_of = {str(x.get("nodeid")): str(x.get("base_nodeid")) for x in summary.get("xids", [])}
    base_of.update({str(f.get("nodeid")): str(f.get("base_nodeid"))
                    for f in summary.get("failures", [])})
    for m in run.mapping() or ():
        if m.verdict:
            # mapper entries (docs/mapper.md) name the test as attributed_nodeid
            nodeid = m.attributed_nodeid or m.nodeid or ""
            key = base_of.get(nodeid, nodeid)
            verdicts.setdefault(key, []).append(m.verdict)
    xid_by_test: dict[str, Counter[str]] = {}
    for x in summary.get("xids", []):
        xid_by_test.setdefault(str(x.get("base_nodeid")), Counter())[str(x.get("xid"))] += 1
    failing = [r for r in summary.get("by_test", []) if r["failures"] or r["xids"]]
    if failing:
        table = Table(title="failing tests", show_lines=False)
        for col in ("test", "k of n runs", "rate", "95% interval", "outcomes", "Xids", "mapping"):
            table.add_column(col, overflow="fold")
        for r in failing:
            outs = ", ".join(f"{k} {v}" for k, v in r["outcomes"].items() if k != "passed")
            xs = ", ".join(f"{k}x{v}" if v > 1 else k
                           for k, v in sorted(xid_by_test.get(r["base_nodeid"], Counter()).items()))
            vs = ", ".join(sorted(set(verdicts.get(r["base_nodeid"], []))))
            lo, hi = r["ci95"]
            # ids are data: rich would read "[x/y]" in test_p[x/y] as markup and drop it
            table.add_row(escape(r["base_nodeid"]), f"{r['failures']} of {r['runs']}",
                          f"{r['rate']:.1%}", f"{lo:.1%}-{hi:.1%}", escape(outs), escape(xs or "-"),
                          escape(vs or "-"))
        console.print(table)
    unattributed = [x for x in summary.get("xids", []) if not x.get("base_nodeid")]
    if unattributed:
        console.print(f"{len(unattributed)} Xid(s) not attributed to a test "
                      "(another process, or no matching pid): see xid.jsonl", markup=False)
    spread = [s for s in summary.get("xid_spread", []) if s["verdict"] != "single"]
    for s in spread:
        console.print(f"Xid {s['xid']}: {s['count']} on GPU(s) {', '.join(s['devices']) or '?'}: "
                      f"{s['reading']}", markup=False)
    devices = summary.get("by_device", [])
    if len(devices) > 1:
        console.print("by device: " + "; ".join(
            f"{d['device']}: " + (f"{d['failures']} failed of {d['runs']}"
                                  if d.get("runs") is not None else "runs under 'unpinned'")
            + f", {d['xids']} Xids" for d in devices), markup=False)
    for line in kernel_log_lines(summary.get("kernel_log")):
        console.print(line, markup=False)
    if not summary.get("tests_run") and summary.get("pytest_exit_status") not in (None, 0, 5):
        # nothing ran (collection error, bad option): pytest's own words are in reproducer.log
        console.print(f"pytest exited {summary.get('pytest_exit_status')} before any test ran: "
                      + "; ".join(_collection_errors(run))
                      + f" (full output: {run_dir / Layout.REPRODUCER_LOG})", markup=False)
    w = summary.get("workers", {})
    outcomes = summary.get("outcomes", {})
    console.print(
        f"{summary.get('tests_run', 0)} test runs: {outcomes.get('passed', 0)} passed, "
        f"{len(summary.get('failures', []))} failing ({outcomes.get('collateral', 0)} collateral), "
        f"{len(summary.get('xids', []))} Xids; workers crashed {w.get('crashed', 0)}, "
        f"hung {w.get('hung', 0)}, recycled {w.get('recycled', 0)}"
        + (f"; stopped early: {summary['stopped_early']}" if summary.get("stopped_early") else ""),
        markup=False)
    console.print(f"run directory: {run_dir}", markup=False)


def _collection_errors(run: RunDir, limit: int = 3) -> list[str]:
    """pytest's ``ERROR ...`` / ``E   ...`` lines from reproducer.log (the first few)."""
    text = run.text(Layout.REPRODUCER_LOG)
    if text is None:
        return ["reproducer.log unreadable"]
    lines = text.splitlines()
    errs = [ln.strip() for ln in lines if ln.startswith(("ERROR ", "E   "))]
    return errs[:limit] or ["no ERROR line in its output"]


def kernel_log_lines(status: Mapping[str, Any] | None) -> list[str]:
    """What the terminal says about the kernel log: why it was not followed, records lost
    (counted or not), unparsed Xid lines, the source's warnings. Nothing when all was well."""
    if not isinstance(status, Mapping):
        return []
    out = []
    if status.get("error"):
        out.append(f"kernel log: not followed: {status['error']} (no Xids were captured)")
    if status.get("lost"):
        out.append(f"kernel log: {status['lost']} record(s) LOST (overwritten before read): "
                   "Xids among them are missing from this run")
    if status.get("lost_unknown"):
        out.append("kernel log: records may have been lost (this source cannot count them)")
    if status.get("unparsed"):
        out.append(f"kernel log: {status['unparsed']} Xid line(s) not parsed (see kmsg_added.txt)")
    warnings = [str(w) for w in status.get("warnings") or []]
    for w in warnings[:3]:
        out.append(f"kernel log warning: {w}")
    if len(warnings) > 3:
        out.append(f"kernel log: {len(warnings) - 3} more warning(s) in summary.json kernel_log")
    return out


def stress_and_report(opts: StressOptions, console: Any = None) -> StressResult:
    """run_stress plus the terminal output (what the CLI calls)."""
    result = run_stress(opts, console=console)
    if console is not None and not opts.quiet:
        render_summary(result.summary, result.run_dir, console)
    return result


__all__: Sequence[str] = ("StressOptions", "StressResult", "run_stress", "build_pytest_argv",
                          "build_env", "parse_gpus", "render_summary", "exit_status_for")
