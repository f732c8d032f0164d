"""Supervising worker processes: hang dumps, py-spy, process trees, how a worker died.

Used by the pytest plugin (worker side: the hang watchdog that dumps stacks before the worker is
ended; controller side: the exit status of a dead worker) and by ``faulthunt stress``.
All of this is I/O at the edge.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import faulthandler
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

#: prctl(2) option letting another process ptrace this one under Yama ptrace_scope=1
_PR_SET_PTRACER = 0x59616D61
_PR_SET_PTRACER_ANY = ctypes.c_ulong(-1).value


@dataclasses.dataclass(frozen=True)
class DumpResult:
    """Where a stack dump went, or why it could not be taken."""

    path: Path | None
    error: str | None = None


def dump_python_stacks(path: Path) -> DumpResult:
    """All threads' Python stacks via faulthandler (works while the main thread is stuck in C)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(f"# faulthandler.dump_traceback(all_threads=True) of pid {os.getpid()} "
                     f"at {time.time():.3f}\n")
            fh.flush()
            faulthandler.dump_traceback(file=fh, all_threads=True)
        return DumpResult(path)
    except OSError as exc:
        return DumpResult(None, f"cannot write {path}: {exc.strerror}")


def ptrace_scope() -> int | None:
    """Yama's kernel.yama.ptrace_scope (None when Yama is not in the kernel)."""
    try:
        return int(Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip())
    except (OSError, ValueError):
        return None


def allow_ptrace_by_any() -> bool:
    """Let any process of ours ptrace this one (needed under ptrace_scope=1 for py-spy run by a
    child of the target, as the hang watchdog does). Harmless elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PTRACER, _PR_SET_PTRACER_ANY, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def pyspy_dump(pid: int, path: Path, timeout: float = 30.0) -> DumpResult:
    """``py-spy dump --native --locals --pid PID`` into ``path``; says plainly why when it can't.

    Locals can hold secrets (a token a test was given): the dump is written with the values of
    secret-named locals and known secret shapes scrubbed (``faulthunt.redact.redact_stack_dump``)."""
    exe = shutil.which("py-spy")
    if exe is None:
        return DumpResult(None, "py-spy is not installed (pip install py-spy); "
                                "native stacks were not dumped")
    scope = ptrace_scope()
    if scope == 3:
        return DumpResult(None, "kernel.yama.ptrace_scope=3 forbids ptrace entirely; "
                                "native stacks were not dumped")
    allow_ptrace_by_any()
    cmd = [exe, "dump", "--native", "--locals", "--pid", str(pid)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return DumpResult(None, f"py-spy dump did not finish in {timeout:.0f}s")
    except OSError as exc:
        return DumpResult(None, f"cannot run py-spy: {exc.strerror}")
    text = proc.stdout
    if proc.returncode != 0:
        err = (proc.stderr or "").strip()
        hint = ""
        if "ermission" in err or "EPERM" in err or "ptrace" in err.lower():
            hint = (" (ptrace not permitted: run as root, add CAP_SYS_PTRACE, e.g. "
                    "`docker run --cap-add SYS_PTRACE`, or set kernel.yama.ptrace_scope=0)")
        return DumpResult(None, f"py-spy dump failed with status {proc.returncode}: "
                                f"{err[:500]}{hint}")
    from faulthunt.redact import redact_stack_dump

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {' '.join(cmd)}\n{redact_stack_dump(text)}", encoding="utf-8")
    except OSError as exc:
        return DumpResult(None, f"cannot write {path}: {exc.strerror}")
    return DumpResult(path)


def process_tree(pid: int) -> list[dict[str, object]]:
    """The process and its descendants (pid, ppid, name, status, cmdline) via psutil; command
    lines with secrets redacted (``--token X``, URL passwords, known token shapes)."""
    from faulthunt.redact import redact_argv

    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    out: list[dict[str, object]] = []
    for p in procs:
        try:
            with p.oneshot():
                out.append({"pid": p.pid, "ppid": p.ppid(), "name": p.name(),
                            "status": p.status(), "cmdline": redact_argv(p.cmdline()[:8])})
        except psutil.Error:
            continue
    return out


class _Watcher:
    """One daemon thread per process that calls the armed test's ``on_hang`` at its deadline.

    A thread per test (pytest-timeout's own thread method, and this module's first watchdog)
    costs a thread start and join per test, 0.3 ms of CPU on the 2-core dev machine: 7% of a
    CPU-bound stress run's tests. Arming and disarming this one is a lock, and wakes the thread
    only when it must look sooner than it already will: the thread sleeps until the latest
    deadline it knows of, then looks at what is armed by then. With one timeout for every test
    each new deadline lies after the one it sleeps to, so a test wakes nothing (it was two
    thread switches a test); a disarmed test is found disarmed when the thread next wakes.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: tuple[float, int, Callable[[], None]] | None = None
        self._token = 0
        self._firing: int | None = None
        self._fired = threading.Event()
        self._pid: int | None = None
        #: the monotonic time the thread will look again by itself (inf: only when notified)
        self._wake = math.inf
        #: the latest deadline ever armed: with nothing armed the thread sleeps until then, so
        #: that the next test (whose deadline lies after it) need not wake it
        self._latest = -math.inf
        #: notifications sent (tests count them: none per test when the deadlines only grow)
        self.notified = 0

    def arm(self, timeout: float, on_hang: Callable[[], None]) -> int:
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: no thread here yet
                self._pid = os.getpid()
                self._wake = math.inf
                threading.Thread(target=self._run, name="faulthunt-hang-watchdog",
                                 daemon=True).start()
            self._token += 1
            deadline = time.monotonic() + timeout
            self._armed = (deadline, self._token, on_hang)
            self._latest = max(self._latest, deadline)
            if deadline < self._wake:
                self.notified += 1
                self._cond.notify()
            return self._token

    def disarm(self, token: int) -> None:
        with self._cond:
            if self._armed is not None and self._armed[1] == token:
                self._armed = None  # the thread finds nothing armed when it next looks
                return
            firing = self._firing == token
        if firing and threading.current_thread().name != "faulthunt-hang-watchdog":
            self._fired.wait(5)  # on_hang is dumping stacks and ends the process

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._armed is None:
                        idle = self._latest - time.monotonic()
                        self._wake = self._latest if idle > 0 else math.inf
                        self._cond.wait(idle if idle > 0 else None)
                        continue
                    deadline, token, on_hang = self._armed
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wake = deadline
                    self._cond.wait(left)
                self._armed = None
                self._firing = token
                self._wake = math.inf
            try:
                on_hang()
            finally:
                self._fired.set()


_WATCHER = _Watcher()


class HangWatchdog:
    """A per-test timer: on expiry call ``on_hang`` (which dumps and ends) from another thread.

    Thread method on purpose: a SIGALRM handler never runs while the main thread sits inside a
    CUDA synchronize (seen on the H200), a second thread does. One thread serves every test of a
    process (:class:`_Watcher`).
    """

    def __init__(self, timeout: float, on_hang: Callable[[], None]) -> None:
        self.timeout = timeout
        self._on_hang = on_hang
        self._token: int | None = None

    def start(self) -> None:
        self._token = _WATCHER.arm(self.timeout, self._on_hang)

    def cancel(self) -> None:
        if self._token is not None:
            _WATCHER.disarm(self._token)
            self._token = None


@dataclasses.dataclass(frozen=True)
class ExitInfo:
    """How a child process ended: exit status or the signal that killed it."""

    exit_status: int | None
    signal: int | None
    core_dumped: bool = False

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"


def peek_exit(pid: int, wait: float = 2.0) -> ExitInfo | None:
    """Exit status of our dead child ``pid`` *without reaping it* (``waitid(WNOWAIT)``).

    The xdist controller is the parent of its workers (execnet popen); execnet reaps them itself
    later, so we only look. ``None`` when ``pid`` is not our child or has not exited in ``wait``.
    """
    deadline = time.monotonic() + wait
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:
            return None
        except OSError as exc:  # pragma: no cover - EINTR and friends
            if exc.errno == errno.EINTR:
                continue
            return None
        if info is not None:
            if info.si_code == os.CLD_EXITED:
                return ExitInfo(info.si_status, None)
            return ExitInfo(None, info.si_status, info.si_code == os.CLD_DUMPED)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def head_text(path: Path, limit: int = 4000) -> str | None:
    """The first ``limit`` characters of a text file, or None when it is missing or empty.

    For faulthandler output the head is what matters: "Fatal Python error: Aborted", then the
    crashing thread's frames, innermost (the test) first.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit)
    except OSError:
        return None
    if not data.strip():
        return None
    return data.decode("utf-8", "replace")
