"""The pytest child of a stress run: its own session, waited for without polling, stopped whole.

pytest runs in its own session, so a terminal's Ctrl-C reaches only faulthunt and faulthunt decides
how pytest stops: a stop (Ctrl-C, SIGTERM from a CI timeout or ``timeout``, SIGHUP) sends one
SIGINT to pytest's whole process group (controller, xdist workers and whatever the tests
started): pytest's own clean stop, each worker ending its test. After a bounded grace period
whatever is left is SIGKILLed; a second stop SIGKILLs at once. When pytest has exited, what is
left of its group (a test's stray subprocess) is ended too: a stress run leaves no orphans.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from faulthunt.errors import FaulthuntError

#: seconds pytest gets to stop cleanly after the first stop, by signal. A CI runner that sends
#: SIGTERM kills a few seconds later (GitHub Actions: 2.5 s after SIGTERM), so that is short;
#: Ctrl-C at a terminal can wait for pytest's own summary.
STOP_GRACE_S: dict[int, float] = {signal.SIGINT: 10.0, signal.SIGTERM: 2.0, signal.SIGHUP: 2.0}
#: seconds what is left of the group after pytest exited gets between SIGTERM and SIGKILL
LEFTOVER_GRACE_S = 2.0


class PytestChild:
    """A running pytest whose output comes through one pipe (:attr:`stdout_fd`)."""

    def __init__(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> None:
        try:
            self.proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env),
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise FaulthuntError(f"cannot start pytest ({argv[0]}): {exc.strerror}",
                                 fix="is pytest installed in this Python?") from exc
        self.pgid = self.proc.pid
        #: pytest's exit status once it ended (negative: killed by that signal)
        self.status: int | None = None
        #: the signal that stopped the run (None: pytest ended by itself)
        self.stop_signal: int | None = None
        self._done = threading.Event()
        self._kill_timer: threading.Timer | None = None
        # A thread blocked in waitpid costs nothing while pytest runs (Popen.wait(timeout)
        # polls: about 10 ms of CPU a second).
        threading.Thread(target=self._wait, name="faulthunt-pytest-wait", daemon=True).start()

    @property
    def stdout_fd(self) -> int:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def _wait(self) -> None:
        self.status = self.proc.wait()
        self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once pytest has exited (a signal handler may run while this waits)."""
        return self._done.wait(timeout)

    def stop(self, signum: int) -> None:
        """Stop the run because faulthunt got ``signum``: SIGINT to the group, SIGKILL after the
        grace period, or at once on a second stop."""
        if self._done.is_set():
            return
        if self.stop_signal is not None:
            self.kill()
            return
        self.stop_signal = signum
        self._signal_group(signal.SIGINT)
        self._kill_timer = threading.Timer(STOP_GRACE_S.get(signum, 2.0), self.kill)
        self._kill_timer.daemon = True
        self._kill_timer.start()

    def kill(self) -> None:
        self._signal_group(signal.SIGKILL)

    def end_leftovers(self, grace: float = LEFTOVER_GRACE_S) -> list[int]:
        """After pytest exited: SIGTERM what is left of its process group, SIGKILL what is still
        there after ``grace``; the pids that were left."""
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        left = group_members(self.pgid)
        if not left:
            return []
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while group_members(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if group_members(self.pgid):
            self._signal_group(signal.SIGKILL)
        return left

    def close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone (or its last member is a zombie of another parent)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return []
    import psutil

    out = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return out
