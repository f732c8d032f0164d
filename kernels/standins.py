"""SIMULATED stand-ins, used only on a machine without a GPU, for what numba's simulator cannot do.

The CPU simulator can show an out-of-bounds index, but not what makes GPU faults hard to hunt:
a process that dies natively, the Xid line the driver writes to the kernel log, the sticky error
that poisons every later test in the worker, a kernel that does not come back. These stand-ins
imitate exactly those, so that ``faulthunt demo`` shows the whole pipeline (attribution, crash
and hang handling, the report) on a laptop. Every message they print says SIMULATED; none of this
runs on a GPU machine (the bundled suite runs the real kernels there).

The simulated kernel log is a plain file named by ``FAULTHUNT_SIM_XID_LOG`` that
``faulthunt stress --xid-source file:PATH`` follows; the lines are in the real driver's format
(copied from the H200 captures in tests/data/h200/nvrm_lines.txt) with this process's real pid,
so pid -> worker -> test attribution works on them as it does on the real kernel log.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from faulthunt.kernels.results import BUG, Check, PlantedCudaError

#: env: the file the stand-ins append simulated kernel-log lines to
SIM_XID_LOG_ENV = "FAULTHUNT_SIM_XID_LOG"
SIMULATED = "SIMULATED on CPU (no GPU here)"
PCI = "0000:00:06"
#: the page a simulated wild write faults on (hi_lo as the driver prints it: 0x7faf_e7e00000)
WILD_PAGE = 0x7FAF_E7E0_0000
HANG_CAP_S = 6.0

#: set by the misaligned stand-in: the sticky error every later simulated kernel in this process
#: fails with, as a real poisoned CUDA context would
_poisoned: PlantedCudaError | None = None


def _comm() -> str:
    try:
        return Path("/proc/self/comm").read_text().strip() or "python"
    except OSError:
        return Path(sys.executable).name[:15]


def kernel_log_line(message: str, t_mono: float | None = None) -> str:
    """One dmesg-style line, ``[    t.tttttt] NVRM: Xid (PCI:...): ...``, stamped with the
    monotonic clock (the clock of kernel-log timestamps)."""
    t = time.monotonic() if t_mono is None else t_mono
    return f"[{t:12.6f}] NVRM: Xid (PCI:{PCI}): {message}"


def xid31_message(pid: int, name: str, address: int, access: str = "WRITE") -> str:
    hi, lo = address >> 32, address & 0xFFFFFFFF
    return (f"31, pid={pid}, name={name}, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE "
            f"GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x{hi:x}_{lo:08x}. Fault is of type "
            f"FAULT_PDE ACCESS_TYPE_VIRT_{access}")


def xid13_messages(pid: int, name: str) -> list[str]:
    return [
        "13, Graphics SM Warp Exception on (GPC 1, TPC 4, SM 0): Misaligned Address",
        "13, Graphics Exception: ESR 0x519730=0x500000f 0x519734=0x0 0x519728=0x1f81fb60 "
        "0x51972c=0x1174",
        f"13, pid={pid}, name={name}, Graphics Exception: channel 0x0000000a, Class 0000cbc0, "
        "Offset 00000510, Data 0017e2ac",
    ]


def append_kernel_log(messages: list[str], path: str | None = None) -> Path | None:
    """Append simulated Xid lines to the file in FAULTHUNT_SIM_XID_LOG (one write, flushed);
    returns the path, or None when no simulated log was asked for."""
    target = path or os.environ.get(SIM_XID_LOG_ENV)
    if not target:
        return None
    data = "".join(kernel_log_line(m) + "\n" for m in messages).encode()
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return Path(target)


def check_poisoned() -> None:
    """Raise the sticky error of an earlier simulated fault in this process, if there was one."""
    if _poisoned is not None:
        raise PlantedCudaError(_poisoned.name, _poisoned.code, "cuCtxSynchronize",
                               f"sticky: an earlier kernel in this process faulted [{SIMULATED}]")


def wild_write(variant: str) -> Check:
    """Bug: a simulated Xid 31 for this pid, then a native crash (os.abort)."""
    check_poisoned()
    if variant != BUG:
        return Check(True, f"in-bounds write ({SIMULATED})")
    where = append_kernel_log([xid31_message(os.getpid(), _comm(), WILD_PAGE)])
    print(f"faulthunt planted wild_write: {SIMULATED}: on a GPU this write gives "
          f"CUDA_ERROR_ILLEGAL_ADDRESS (700) and Xid 31; here a simulated Xid 31 "
          f"{'went to ' + str(where) if where else 'was not written (no ' + SIM_XID_LOG_ENV + ')'}"
          f" and the process now aborts like a native crash", file=sys.stderr, flush=True)
    os.abort()


def misaligned(variant: str) -> Check:
    """Bug: simulated Xid 13 lines and a sticky CUDA_ERROR_MISALIGNED_ADDRESS."""
    global _poisoned
    check_poisoned()
    if variant != BUG:
        return Check(True, f"aligned stores ({SIMULATED})")
    append_kernel_log(xid13_messages(os.getpid(), _comm()))
    _poisoned = PlantedCudaError("CUDA_ERROR_MISALIGNED_ADDRESS", 716, "cuCtxSynchronize",
                                 f"misaligned address [{SIMULATED}]")
    raise _poisoned


def bounded_hang(variant: str, cap_s: float = HANG_CAP_S) -> Check:
    """A host-side wait on a flag with the planted kernel's clock bound; it always ends."""
    check_poisoned()
    flag = threading.Event()
    if variant != BUG:
        flag.set()
    released = flag.wait(cap_s)
    if released:
        return Check(True, f"the flag was released ({SIMULATED})")
    return Check(False, f"kernel hit its clock bound ({cap_s:g} s): the host never released the "
                        f"flag ({SIMULATED})")


RUNNERS = {"wild_write": wild_write, "misaligned": misaligned, "bounded_hang": bounded_hang}


def run(name: str, variant: str = BUG) -> Check:
    """Run the stand-in for planted fault ``name``."""
    return RUNNERS[name](variant)
