"""Supervising worker processes: hang dumps, py-spy, process trees, how a worker died.

Used by the pytest plugin (worker side: the stack dumps of a hung test, whose watchdog lives in
:mod:`faulthunt.recorder`; controller side: the exit status of a dead worker) and by
``faulthunt stress``.
All of this is I/O at the edge.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import faulthandler
import os
import shutil
import signal
import subprocess
import time
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


def __getattr__(name: str) -> object:
    """The hang watchdog moved to :mod:`faulthunt.recorder` (every worker imports that one; this
    module only when a test hangs or a worker dies); its old names still work here."""
    if name in ("HangWatchdog", "_Watcher"):
        from faulthunt import recorder

        return getattr(recorder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
