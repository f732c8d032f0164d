"""Collection: everything a stress run records while it runs, into its run directory.

The run directory and ``run.json``, the kernel-log cursor and follower, the pytest child (its own
process group) and its output pump, live progress, and the stop signals (Ctrl-C, SIGTERM, SIGHUP:
one clean stop of the whole group, bounded). What comes back is :class:`Collected`: the facts
only the live run knew (pytest's status, what stopped it, what pytest said, what could not be
written); everything else is in the run directory for the analysis to read.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from faulthunt.errors import FaulthuntError
from faulthunt.records.documents import RunInfo
from faulthunt.records.events import Crash, Recycled, TestEnd, TestStart
from faulthunt.rundir import (DEFAULT_BASE, DiskFullError, JsonlWriter, Layout, RunDir, RunTail,
                              create_run_dir, write_json_atomic, write_run_info,
                              write_text_atomic)
from faulthunt.stress.child import STOP_GRACE_S, PytestChild
from faulthunt.stress.options import Plan, build_env
from faulthunt.stress.output import OutputPump, PytestOutput

#: the signals that stop a run the way Ctrl-C does
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: seconds to wait for the end of pytest's output once its process group is gone
OUTPUT_GRACE_S = 5.0


class Collected(msgspec.Struct, frozen=True):
    """What only the live run knew; the rest is in the run directory."""

    run_dir: Path
    run_info: RunInfo
    plan: Plan
    #: pytest's exit status (negative: killed by that signal; None: it never started)
    pytest_status: int | None
    #: the signal that stopped the run (None: pytest ended by itself)
    stopped_by: int | None
    #: what pytest's output said
    output: PytestOutput
    #: every Xid since the cursor (None when the log was not followed: use xid.jsonl)
    xids: list[dict[str, Any]] | None
    kernel_log: dict[str, Any]
    warnings: tuple[str, ...]
    #: "disk full at <path>: ..." for each place that could not be written
    disk_full: tuple[str, ...]
    #: bytes of pytest's output not written to reproducer.log (no room)
    output_dropped: int
    #: processes left in pytest's group after it exited (ended by faulthunt)
    leftovers: tuple[int, ...]


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


# --- kernel log ----------------------------------------------------------------------------------

class KernelLogWatch:
    """Cursor before, Follower during, snapshots after (faulthunt.kernlog), for an opened source
    (:func:`faulthunt.stress.options.open_kernel_log`; None: not followed)."""

    def __init__(self, run_dir: Path, source: Any, warn: Callable[[str], None],
                 on_xid: Callable[[dict[str, Any]], None]) -> None:
        self.run_dir = run_dir
        self.source = source
        self.warn = warn
        self.on_xid = on_xid
        self.follower: Any = None
        self.cursor: Any = None
        self.status: dict[str, Any] = {"source": None, "error": None}
        #: "disk full at ..." for the text files that could not be written at the end
        self.disk_full: list[str] = []
        self._seen: dict[tuple[Any, str], float] = {}

    def mark(self) -> None:
        """The cursor: where the run's part of the log begins (taken before pytest starts)."""
        if self.source is None:
            self.status["error"] = "--xid-source none"
            return
        try:
            self.cursor = self.source.cursor()
        except FaulthuntError as exc:
            # The run goes on without Xid capture; the summary says why (kernel_log.error).
            self.status["error"] = str(exc)
            self.warn(f"kernel log: {exc}")
            self.source = None

    def follow(self) -> None:
        """The cursor and the log as it was written down, then the follower from the cursor on
        (while pytest starts: everything since the cursor is read either way)."""
        if self.source is None or self.cursor is None:
            return
        from faulthunt.kernlog import sources

        try:
            write_json_atomic(self.run_dir / Layout.KMSG_CURSOR,
                              {"source": self.source.name, "cursor": self.cursor.to_json()},
                              fsync=False)
            self._snapshot(Layout.KMSG_BEFORE)
        except DiskFullError as exc:
            # pytest is running: a full disk loses these two files, not the run's Xids (the
            # follower reads from the cursor in memory; xid.jsonl and the summary keep them)
            self.disk_full.append(exc.message)
        self.follower = sources.Follower(self.source, self.cursor, self._event)
        self.follower.start()
        self.status["source"] = self.source.name

    def _snapshot(self, name: str) -> None:
        try:
            text = self.source.snapshot()
        except FaulthuntError as exc:
            text = f"# snapshot failed: {exc}\n"
        write_text_atomic(self.run_dir / name, text, fsync=False)

    def _event(self, event: Any) -> None:
        rec = event.to_json()
        now = time.monotonic()
        self._seen.setdefault((rec.get("seq"), rec.get("raw", "")), now)
        rec["t_seen_mono"] = now
        rec["t_seen"] = time.time()
        self.on_xid(rec)

    def stop(self) -> list[dict[str, Any]] | None:
        """All Xids since the cursor (None when the log was not followed). The follower's
        ReadResult says what could not be read: kept in summary.json (kernel_log) and said, so
        lost records are reported, not missing. Writes kmsg_added.txt and kmsg_after.txt."""
        if self.follower is None:
            return None
        result = self.follower.stop()
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
        # the events are in hand: a full disk loses the text files, not the Xids
        try:
            write_text_atomic(self.run_dir / Layout.KMSG_ADDED,
                              "".join(line + "\n" for line in result.lines), fsync=False)
            self._snapshot(Layout.KMSG_AFTER)
        except DiskFullError as exc:
            self.disk_full.append(exc.message)
        return out


# --- stop signals --------------------------------------------------------------------------------

class _Stopper:
    """Turns stop signals into one clean stop of the pytest child (see faulthunt.stress.child)."""

    def __init__(self) -> None:
        self.child: PytestChild | None = None
        self.early: int | None = None     # a stop before pytest started

    def __call__(self, signum: int, frame: Any) -> None:
        # A handler instead of KeyboardInterrupt: an exception could land anywhere (in the
        # progress poll, in the final summary) and lose the results.
        if self.child is None:
            self.early = self.early or signum
        else:
            self.child.stop(signum)


@contextmanager
def stop_signals(stopper: _Stopper) -> Iterator[None]:
    """Route SIGINT, SIGTERM and SIGHUP to ``stopper`` (only from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, stopper) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --- the run -------------------------------------------------------------------------------------

def _identity() -> dict[str, Any]:
    from faulthunt.identity import collect_basic

    try:
        return collect_basic()
    except Exception as exc:  # noqa: BLE001 - collect_basic promises not to raise; a run must not fail on it
        return {"error": f"{type(exc).__name__}: {exc}"}


def _warm_imports(render: bool) -> None:
    """Import what analysis (and rendering, when there is a table to draw) needs while pytest
    starts (off the critical path: pytest's start-up keeps one core, this takes the other)."""
    import faulthunt.stress.analyse
    import faulthunt.summary
    from faulthunt.records.codec import decoder
    from faulthunt.records.events import ControllerEvent, WorkerEvent

    # msgspec works out a decoder's types (every record's annotations) when it is made: about
    # 6 ms, here rather than after pytest's end, when the analysis reads the run with them
    decoder(WorkerEvent)
    decoder(ControllerEvent)
    if render:
        import faulthunt.report.terminal  # noqa: F401


class _XidLog:
    """xid.jsonl while the run goes: each Xid attributed with the spans so far and appended at
    once, so a controller killed mid-run keeps every Xid it saw (rewritten with the final
    attribution at the end)."""

    def __init__(self, run_dir: Path, progress: Progress, disk_full: list[str]) -> None:
        self.run_dir = run_dir
        self.progress = progress
        self._writer = JsonlWriter(run_dir / Layout.XID, on_full=disk_full.append)
        self._lock = threading.Lock()

    def record(self, rec: dict[str, Any]) -> None:
        from faulthunt.summary import attribute_xids

        with self._lock:
            try:
                rec = attribute_xids([rec], RunDir(self.run_dir).spans())[0]
            except Exception:  # noqa: BLE001 - attribution must never lose the event
                pass
            self._writer.write(rec)
            self.progress.xids += 1

    def close(self) -> None:
        self._writer.close()


def collect(plan: Plan, stopper: _Stopper, *, warn: Callable[[str], None],
            warnings: list[str], console: Any = None,
            on_line: Callable[[str], None] | None = None,
            once_started: Callable[[], None] | None = None) -> Collected:
    """Run pytest for ``plan``, recording everything into a new run directory.

    Only what pytest needs, or what must come first, is done before it starts: the run directory
    and run.json, the kernel-log cursor. The rest (the log written down and followed from the
    cursor, env.json, identity.json, the analysis's imports, then ``once_started``) is done
    while pytest starts, which keeps one core busy for a few hundred milliseconds.
    """
    run_dir, run_info = _open_run(plan, warn)
    disk_full: list[str] = []
    progress = Progress(run_dir)
    xid_log = _XidLog(run_dir, progress, disk_full)
    kernlog = KernelLogWatch(run_dir, plan.xid_source, warn, xid_log.record)
    kernlog.mark()

    def while_pytest_starts() -> None:
        kernlog.follow()
        _warm_imports(not plan.opts.quiet)
        if once_started is not None:
            once_started()

    output = PytestOutput()
    ran = None
    if stopper.early is None:  # a stop before pytest started: nothing runs
        ran = _run_pytest(plan, run_dir, stopper, output, progress, disk_full, warn, console,
                          on_line, while_pytest_starts)
    else:  # the same steps, nothing to wait for (once_started: the collector on again)
        while_pytest_starts()
    xids = _stop_kernel_log(kernlog, disk_full)
    xid_log.close()
    _seal_ledgers(run_dir)
    child, pump, leftovers = ran if ran is not None else (None, None, [])
    for full in (pump.disk_full if pump else None, *output.disk_full):
        if full and full not in disk_full:
            disk_full.append(full)
    return Collected(run_dir=run_dir, run_info=run_info, plan=plan,
                     pytest_status=child.status if child else None,
                     stopped_by=child.stop_signal if child else stopper.early, output=output,
                     xids=xids, kernel_log=kernlog.status, warnings=tuple(warnings),
                     disk_full=tuple(disk_full), output_dropped=pump.dropped if pump else 0,
                     leftovers=tuple(leftovers))


def _open_run(plan: Plan, warn: Callable[[str], None]) -> tuple[Path, RunInfo]:
    """The new run directory with its run.json (a full disk here: DiskFullError, nothing ran)."""
    opts, cwd = plan.opts, plan.cwd
    base = opts.base if opts.base is not None else cwd / DEFAULT_BASE
    asked = opts.run_dir
    if asked is not None and not asked.is_absolute():
        asked = cwd / asked
    run_dir = create_run_dir(asked, base).resolve()
    (run_dir / Layout.HANGS_DIR).mkdir(exist_ok=True)
    run_info = RunInfo.begin(run_dir.name, kind="stress", cwd=str(cwd),
                             pytest_args=opts.pytest_args, pytest_argv=plan.argv,
                             options=msgspec.structs.asdict(opts))
    # no fsync for what is written before and during the run: the rename keeps readers safe,
    # and a machine crash would lose the unsynced worker records anyway
    write_run_info(run_dir, run_info, fsync=False)
    for note in plan.notes:
        warn(note)
    return run_dir, run_info


def _run_pytest(plan: Plan, run_dir: Path, stopper: _Stopper, output: PytestOutput,
                progress: Progress, disk_full: list[str], warn: Callable[[str], None],
                console: Any, on_line: Callable[[str], None] | None,
                while_starting: Callable[[], None]) -> tuple[PytestChild, OutputPump, list[int]]:
    """pytest from start to end (stopped whole on a stop signal), its output pumped;
    ``while_starting`` and the run's own records are done once it is started."""
    env = build_env(plan.opts, run_dir)
    child = PytestChild(plan.argv, plan.cwd, env)
    stopper.child = child
    pump = OutputPump(child.stdout_fd, run_dir / Layout.REPRODUCER_LOG, output, on_line=on_line)
    pump.start()
    if stopper.early is not None:  # came while pytest was being started
        child.stop(stopper.early)
    try:  # while pytest starts its workers
        from faulthunt.redact import redact_env

        _write_or_note(disk_full, lambda: write_json_atomic(run_dir / Layout.ENV,
                                                            redact_env(env), fsync=False))
        _write_or_note(disk_full, lambda: write_json_atomic(run_dir / Layout.IDENTITY,
                                                            _identity(), fsync=False))
        while_starting()
    except BaseException:
        # faulthunt cannot go on with the run: pytest is stopped whole, as a stop signal stops
        # it, and ended like any run, so that nothing is left running
        child.stop(signal.SIGTERM)
        child.wait(STOP_GRACE_S[signal.SIGTERM] + 1.0)
        _end(child, pump, warn)
        raise
    _wait(child, _live(console, progress, plan.opts.quiet), progress, output)
    return child, pump, _end(child, pump, warn)


def _end(child: PytestChild, pump: OutputPump, warn: Callable[[str], None]) -> list[int]:
    """After pytest exited: what is left of its group ended (those pids returned), the rest of
    its output read, the pipe closed."""
    leftovers = child.end_leftovers()
    if not pump.join(OUTPUT_GRACE_S):
        warn("pytest's output did not end after its processes did (a process outside its "
             "group holds it); the rest is not in reproducer.log")
    child.close()
    if pump.error:
        warn(pump.error)
    return leftovers


def _wait(child: PytestChild, live: _LiveLine | None, progress: Progress,
          output: PytestOutput) -> None:
    """Until pytest exits: blocked (signal handlers still run), or the live line every 0.5 s."""
    if live is None:
        child.wait()
        return
    while True:
        done = child.wait(0.5)
        progress.total = output.total
        progress.poll()
        live.update(progress.line())
        if done:
            break
    live.stop()


def _stop_kernel_log(kernlog: KernelLogWatch, disk_full: list[str]) -> list[dict[str, Any]] | None:
    xids = kernlog.stop()
    disk_full.extend(kernlog.disk_full)
    return xids


def _write_or_note(disk_full: list[str], write: Callable[[], None]) -> None:
    try:
        write()
    except DiskFullError as exc:
        disk_full.append(exc.message)


def _seal_ledgers(run_dir: Path) -> None:
    """The collector finishing its own data: cut the unwritten reserve off the ledger files of
    workers that died (a worker that exits cuts its own); everything after this only reads.
    A run whose workers recorded nothing (a CPU-only suite) has no ledger file: nothing to load."""
    ledger = run_dir / Layout.LEDGER_DIR
    try:
        if not any(ledger.glob("*.jsonl")):
            return
        from faulthunt.ledger.writer import seal_dead

        seal_dead(ledger)
    except OSError as exc:
        print(f"faulthunt stress: sealing the ledger files: {exc}", file=sys.stderr)
