"""The processes a test starts, recorded as they start, so that an Xid from a child is the test's.

A GPU suite often runs the risky part in a child (``subprocess``, ``multiprocessing``, a helper
binary), and the Xid line then carries the child's pid, which no worker has. A worker records
every descendant it sees, with the test running at the time, as a ``child`` event
(:class:`faulthunt.records.events.ChildProcess`); ``faulthunt.summary`` attributes an Xid of such
a pid to that test ("child pid N (name) of worker gwK").

Two ways of seeing a child, both cheap enough to leave on (docs/plugin.md has the figures):

- At creation, in Python: ``subprocess.Popen`` (its ``_execute_child``, so every way of calling
  it is seen), ``multiprocessing`` (``BaseProcess.start``: fork, spawn and forkserver, pools and
  ProcessPoolExecutor), ``os.fork``/``os.forkpty`` and ``os.posix_spawn``/``posix_spawnp``. The
  pid is written the moment the call returns, so a child that faults and exits at once is still
  known. Nothing is added to a test that starts no process.
- By polling, for what Python does not start (a helper binary's own children, a native library
  that forks): a daemon thread reads ``/proc/<pid>/task/<tid>/children`` of the worker and of the
  descendants found so far, every ``poll_s`` while a test runs (about 90 us a poll with a few
  worker threads and children: small /proc reads, under 0.1% of a core at 0.1 s; a worker with no
  child at all answers one ``waitid`` and reads nothing); a child that lives shorter than the
  interval can be missed, and the summary then falls back to the process name the Xid line
  carries.

The Linux proc connector (netlink, every fork/exec/exit on the machine) is not used: it needs
CAP_NET_ADMIN, silently delivers nothing to a process in a non-initial pid namespace (every
Docker or Kubernetes container), and would make every worker decode the whole machine's process
events.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from faulthunt import context

#: env: seconds between polls of a worker's descendants while a test runs (0: no polling)
POLL_ENV = "FAULTHUNT_CHILD_POLL_S"
#: a process that makes a CUDA context lives longer than this (context creation alone takes
#: 100 ms or more), so a child that faults is seen; about 90 us a poll: < 0.1% of a core
DEFAULT_POLL_S = 0.1
#: seconds after it was first seen during which a child is checked for a rename (its exec)
RENAME_WINDOW_S = 2.0


def proc_name(pid: int) -> str | None:
    """The kernel's name of ``pid`` (``/proc/<pid>/comm``: what an Xid line's ``name=`` says)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as fh:
            return fh.read().decode("utf-8", "replace").strip() or None
    except OSError:
        return None


def proc_children(pid: int) -> list[int] | None:
    """The direct children of ``pid`` from ``/proc/<pid>/task/*/children``; None when the
    process is gone."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(p) for p in fh.read().split())
        except OSError:  # the thread ended meanwhile
            continue
    return out


class TaskChildren:
    """:func:`proc_children` of one process polled again and again (the worker itself): each
    thread's ``children`` file is opened once and read again from its start with ``pread``, one
    system call a thread instead of an open, a stat, two reads and a close, without Python's
    file objects around them (about a third of the poll's cost, which runs ten times a second in
    every worker while a test runs)."""

    #: bytes read at once; a thread with more children than fit is read whole, as before
    CHUNK = 1 << 16

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._fds: dict[str, int] = {}

    def children(self) -> list[int] | None:
        """The direct children of the process; None when it is gone."""
        try:
            tasks = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return None
        out: list[int] = []
        for tid in tasks:
            data = self._read(tid)
            if data is not None:
                out.extend(int(p) for p in data.split())
        if len(self._fds) > len(tasks):  # threads that ended: their files go
            for tid in set(self._fds) - set(tasks):
                os.close(self._fds.pop(tid))
        return out

    def _read(self, tid: str) -> bytes | None:
        fd = self._fds.get(tid)
        try:
            if fd is None:
                fd = self._fds[tid] = os.open(f"/proc/{self.pid}/task/{tid}/children",
                                              os.O_RDONLY | os.O_CLOEXEC)
            data = os.pread(fd, self.CHUNK, 0)
            if len(data) < self.CHUNK:
                return data
            with open(f"/proc/{self.pid}/task/{tid}/children", "rb") as fh:
                return fh.read()
        except OSError:  # the thread ended meanwhile
            return None

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()


#: waitid(2) option (Linux, <linux/wait.h>): children of every kind, clone children included
_WALL = 0x40000000
_ANY_CHILD = os.WEXITED | os.WNOHANG | os.WNOWAIT | _WALL


def has_children() -> bool:
    """Whether this process has a child of any kind (running, or exited and not yet reaped), by
    one ``waitid(P_ALL, WNOHANG | WNOWAIT | __WALL)``, which reaps nothing and answers ECHILD
    only when there is none: a poll of a worker that started nothing costs this one system call
    instead of reading every thread's ``children`` file. Children of every thread count
    (waitid waits for the whole thread group's). True when the call cannot answer."""
    try:
        os.waitid(os.P_ALL, 0, _ANY_CHILD)
    except ChildProcessError:
        return False
    except OSError:  # EINVAL from a kernel before 4.7 (no __WALL for waitid): read /proc
        return True
    return True


#: env: ``python`` wakes the poller in Python even where the compiled clock loads (tests, checks)
WAKE_ENV = "FAULTHUNT_CHILD_WAKE"
#: must equal CW_ABI in _childwake.c
_WAKE_ABI = 1


def wake_library() -> Any:
    """The compiled clock (``_childwake.c``, an extension module), or None: not built (no
    compiler at install), another build, or :data:`WAKE_ENV` asks for Python."""
    if os.environ.get(WAKE_ENV) == "python":
        return None
    try:
        from faulthunt import _childwake  # type: ignore[attr-defined]
    except ImportError:
        return None
    if getattr(_childwake, "cw_abi", lambda: None)() != _WAKE_ABI:
        return None
    return _childwake


def children_file_available(pid: int) -> bool:
    """Whether this kernel lists a task's children in /proc (CONFIG_PROC_CHILDREN)."""
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


class ChildWatch:
    """Records the descendants of this worker process as ``child`` events: ``write`` gets each
    one's fields (:class:`faulthunt.records.events.ChildProcess`'s, as a dict; the recorder
    writes them with :func:`faulthunt.records.lines.event_line`)."""

    def __init__(self, write: Callable[[dict[str, Any]], None], *, worker: str, pid: int,
                 poll_s: float = DEFAULT_POLL_S) -> None:
        self._write = write
        self.worker = worker
        self.pid = pid
        self.poll_s = poll_s
        #: (pid, node id, how) already written; pids seen at all (polling skips those)
        self._written: set[tuple[int, str | None, str]] = set()
        self._seen: set[int] = set()
        #: the last name written for each pid (a child recorded before its exec is renamed)
        self._names: dict[int, str | None] = {}
        #: when each pid was first seen (only young children are checked for a rename)
        self._first_seen: dict[int, float] = {}
        #: tests during which a child was recorded (taken out by :meth:`started_any`)
        self._tests: set[str] = set()
        self._lock = threading.Lock()
        # a fork while another thread holds the lock would leave the child's copy held forever
        os.register_at_fork(after_in_child=self._new_lock)
        self._originals: list[tuple[Any, str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._own = TaskChildren(pid)
        self._hooks: Any = None
        #: the compiled clock and its pipe (read end, write end) when the poller runs on it
        self._clock: Any = None
        self._wake: tuple[int, int] | None = None
        self.polling = "off"

    def _new_lock(self) -> None:
        self._lock = threading.Lock()

    # -- recording ---------------------------------------------------------------------------

    def record(self, child: int, how: str, parent: int | None = None, *,
               nodeid: str | None = None, running: bool = True) -> None:
        """Write one child (once per test and way of seeing it: a poll can catch a child before
        it execs, its creation record then follows with its real name); never raises."""
        base = context.current_base_nodeid
        if running:  # the test running now; a poll passes the one it started under
            nodeid = context.current_nodeid
        with self._lock:
            if (child, nodeid, how) in self._written:
                return
            self._written.add((child, nodeid, how))
            self._seen.add(child)
            if nodeid is not None:
                self._tests.add(nodeid)
        name = proc_name(child)
        self._names[child] = name
        self._first_seen.setdefault(child, time.monotonic())
        try:
            self._write({
                "worker": self.worker, "pid": self.pid, "child_pid": child,
                "parent_pid": parent if parent is not None else os.getpid(), "name": name,
                "how": how, "nodeid": nodeid, "base_nodeid": base if nodeid is not None else None,
                "t": time.time(), "t_mono": time.monotonic()})
        except Exception:  # noqa: BLE001 - a test's subprocess call must never fail on us
            pass

    def started_any(self, nodeid: str) -> bool:
        """Whether a child was recorded while ``nodeid`` ran (asked once, as the test ends)."""
        with self._lock:
            if nodeid in self._tests:
                self._tests.discard(nodeid)
                return True
            return False

    # -- creation hooks ------------------------------------------------------------------------

    def install(self) -> None:
        """Wrap the ways Python starts a process, and start the poller. ``multiprocessing`` is
        wrapped when it is imported (at once if it is already): a worker whose tests never use
        it does not import it for us (a few ms a worker)."""
        import subprocess

        from faulthunt.importhooks import PostImportHooks

        def after_popen(original: Any) -> Any:
            @functools.wraps(original)
            def _execute_child(popen: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(popen, *args, **kwargs)
                if getattr(popen, "pid", None):
                    self.record(popen.pid, "subprocess")
                return result
            return _execute_child

        def after_start(original: Any) -> Any:
            @functools.wraps(original)
            def start(process: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(process, *args, **kwargs)
                if getattr(process, "pid", None):
                    self.record(process.pid, "multiprocessing")
                return result
            return start

        def returns_pid(original: Any, how: str, index: int | None = None) -> Any:
            @functools.wraps(original)
            def call(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                pid = result[index] if index is not None else result
                if isinstance(pid, int) and pid > 0:
                    self.record(pid, how)
                return result
            return call

        self._patch(subprocess.Popen, "_execute_child", after_popen)
        self._hooks = PostImportHooks(failed="faulthunt: child processes started by {name} "
                                             "will not be recorded")
        self._hooks.add("multiprocessing.process",
                        lambda module: self._patch(module.BaseProcess, "start", after_start))
        self._patch(os, "fork", lambda f: returns_pid(f, "fork"))
        self._patch(os, "forkpty", lambda f: returns_pid(f, "fork", 0))
        self._patch(os, "posix_spawn", lambda f: returns_pid(f, "posix_spawn"))
        self._patch(os, "posix_spawnp", lambda f: returns_pid(f, "posix_spawn"))
        self._start_poller()

    def _patch(self, owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        self._originals.append((owner, name, original))
        setattr(owner, name, wrap(original))

    def uninstall(self) -> None:
        self._stop.set()
        if self._clock is not None and os.getpid() == self.pid:
            self._clock.cw_stop()
            self._clock = None
            if self._wake is not None:
                os.close(self._wake[1])  # the reader sees the end, closes its side and returns
        if self._hooks is not None:
            self._hooks.remove()
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()

    # -- polling -------------------------------------------------------------------------------

    def _start_poller(self) -> None:
        if self.poll_s <= 0:
            return
        if not children_file_available(self.pid):
            self.polling = "unavailable: /proc/<pid>/task/<tid>/children missing (CONFIG_PROC_CHILDREN)"
            return
        self.polling = f"every {self.poll_s:g}s during a test"
        target = self._poll_loop if not self._start_clock() else self._clock_loop
        self._thread = threading.Thread(target=target, name="faulthunt-children", daemon=True)
        self._thread.start()

    def _start_clock(self) -> bool:
        """Wake on the compiled clock when it loads: it asks the kernel every ``poll_s`` and
        wakes this thread only while the worker has a child (no Python at all meanwhile)."""
        lib = wake_library()
        if lib is None:
            return False
        r, w = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(w, False)
        if lib.cw_start(w, int(self.poll_s * 1e9)) != 0:
            os.close(r)
            os.close(w)
            return False
        self._clock, self._wake = lib, (r, w)
        return True

    def _clock_loop(self) -> None:
        assert self._wake is not None
        r = self._wake[0]
        try:
            while not self._stop.is_set():
                try:
                    if not os.read(r, 4096):  # the clock's end closed: uninstalled
                        break
                except InterruptedError:
                    continue
                if context.current_nodeid is not None and os.getpid() == self.pid:
                    self.poll_once()
        finally:
            os.close(r)
            self._own.close()

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            if context.current_nodeid is not None and os.getpid() == self.pid:
                self.poll_once()
        self._own.close()  # here, not in uninstall: never while a poll reads them

    def poll_once(self) -> None:
        """Record every descendant not seen before, as the running test's."""
        if not has_children():  # every descendant hangs below a child: none, nothing to read
            return
        nodeid = context.current_nodeid  # once: the test may end while we look
        now = time.monotonic()
        queue, seen = [self.pid], {self.pid}
        while queue:
            parent = queue.pop()
            found = self._own.children() if parent == self.pid else proc_children(parent)
            for child in found or ():
                if child in seen:
                    continue
                seen.add(child)
                queue.append(child)
                # a child seen before (in this test or an earlier one) is known already: a
                # long-lived helper is recorded once, not once per test; again only when it
                # has exec'd since (Popen returns before the kernel renames the child)
                if child not in self._seen:
                    self.record(child, "poll", parent, nodeid=nodeid, running=False)
                elif (now - self._first_seen.get(child, now) < RENAME_WINDOW_S
                      and proc_name(child) not in (self._names.get(child), None)):
                    self.record(child, "exec", parent, nodeid=nodeid, running=False)
