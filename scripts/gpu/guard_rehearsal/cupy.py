"""SIMULATED CuPy, for rehearsing scripts/gpu/guard_validate.py on a machine without a GPU.

Never on a GPU run: ``guard_validate.py rehearse`` puts this directory on PYTHONPATH. Just enough
of CuPy for the validation's probe, fault suite and loop: arrays whose device memory comes through
CuPy's allocator interface (``cuda.set_allocator``), so guard mode's CuPy hook takes them over its
fake driver (``FAULTHUNT_GUARD_DRIVER=fake``), and ``RawModule`` kernels ``poke``/``peek``/
``fill`` whose accesses are checked against that driver's mappings. An access to a guard slot's
unmapped VA does what the GPU does: a real-format Xid 31 line (the H200's text) with this pid and
the page goes to the kernel log file named by ``FAULTHUNT_REHEARSAL_KMSG``, and the launch raises
CUDA's illegal-address error. Memory outside guard slots is a fiction that never faults.
"""

from __future__ import annotations

import itertools
import os
import time
import types
from typing import Any

import numpy as np

float32 = np.float32
KMSG_ENV = "FAULTHUNT_REHEARSAL_KMSG"
_POOL = itertools.count(0x10_0000_0000, 1 << 20)   # addresses of unguarded (pool) memory


class CUDARuntimeError(RuntimeError):
    pass


class UnownedMemory:
    def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
        self.ptr, self.size, self.owner = ptr, size, owner


class MemoryPointer:
    def __init__(self, mem: UnownedMemory, offset: int) -> None:
        self.mem, self.ptr = mem, mem.ptr + offset


def _pool(size: int) -> MemoryPointer:
    return MemoryPointer(UnownedMemory(next(_POOL), size, None), 0)


_allocator: list[Any] = [_pool]


def _set_allocator(allocator: Any = None) -> None:
    _allocator[0] = allocator or _pool


cuda = types.SimpleNamespace(
    UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
    get_allocator=lambda: _allocator[0], set_allocator=_set_allocator,
    runtime=types.SimpleNamespace(getDevice=lambda: 0, deviceSynchronize=lambda: None),
)


class ndarray:
    def __init__(self, host: np.ndarray) -> None:
        self._host = host
        self.size = host.size
        self.data = _allocator[0](max(1, host.nbytes))

    def __getitem__(self, i: Any) -> Any:
        return self._host[i]

    def __imul__(self, k: Any) -> ndarray:
        self._host *= k
        return self


def zeros(n: int, dtype: Any = float32) -> ndarray:
    return ndarray(np.zeros(n, dtype))


def empty(n: int, dtype: Any = float32) -> ndarray:
    return ndarray(np.zeros(n, dtype))


def full(n: int, value: Any, dtype: Any = float32) -> ndarray:
    return ndarray(np.full(n, value, dtype))


def asarray(a: Any) -> ndarray:
    return ndarray(np.array(a))


def asnumpy(a: ndarray) -> np.ndarray:
    return a._host.copy()


# --- kernels ----------------------------------------------------------------------------------

def _touch(ptr: int, nbytes: int, write: bool) -> None:
    """Check an access against the fake driver: an unmapped guard slot faults like the GPU."""
    from faulthunt.guard.fake import FakeFault
    from faulthunt.guard.install import active

    handle = active()
    drv = handle.allocator.driver if handle is not None else None
    if drv is None or not any(r <= ptr < r + n for r, n in drv.reservations.items()):
        return
    try:
        drv.touch(ptr, nbytes, write)
    except FakeFault as fault:
        line = (f"[{time.monotonic():12.6f}] NVRM: Xid (PCI:0000:00:06): 31, pid={os.getpid()}, "
                "name=python, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 "
                f"GPCCLIENT_T1_8 faulted @ 0x{fault.page >> 32:x}_{fault.page & 0xFFFFFFFF:08x}. "
                f"Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_{'WRITE' if write else 'READ'}")
        with open(os.environ[KMSG_ENV], "a") as fh:
            fh.write(line + "\n")
        time.sleep(0.6)  # the follower sees the line while the test still runs
        raise CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered") from None


def _ptr(p: Any) -> int:
    return p.data.ptr if isinstance(p, ndarray) else int(p)


def _poke(p: Any, i: Any) -> None:
    i = int(i)
    _touch(_ptr(p) + 4 * i, 4, True)
    if isinstance(p, ndarray) and 0 <= i < p.size:
        p._host[i] = 1.0


def _peek(p: Any, i: Any, out: ndarray) -> None:
    i = int(i)
    _touch(_ptr(p) + 4 * i, 4, False)
    if isinstance(p, ndarray) and 0 <= i < p.size:
        out._host[0] = p._host[i]


def _fill(p: Any, n: Any) -> None:
    _touch(_ptr(p), 4 * int(n), True)
    if isinstance(p, ndarray):
        p._host[:int(n)] = 2.0


_KERNELS = {"poke": _poke, "peek": _peek, "fill": _fill}


class RawModule:
    def __init__(self, code: str = "") -> None:
        self.code = code

    def get_function(self, name: str) -> Any:
        fn = _KERNELS[name]
        return lambda grid, block, args: fn(*args)
