"""numba-cuda: an External Memory Management plugin that guards a sample of device allocations.

It subclasses whichever memory manager numba uses when ``numba.cuda`` is imported (numba's own,
the ledger's recording one, RMM's) and overrides ``memalloc`` only: unsampled allocations go to
that manager unchanged; a sampled one is a guard slot handed to numba the way numba's own manager
hands out memory (an ``AutoFreePointer`` kept in ``allocations``, returned as its owned pointer),
so numba's reference counting decides when it is freed. The free unmaps the slot at once instead of
joining numba's deferred-deallocation queue: a stale pointer used after the array is gone faults.
Guarded memory has no IPC handle (CUDA IPC does not cover VMM allocations); host allocations
(``memhostalloc``, ``mempin``) are not guarded.

numba's CUDA simulator has no memory manager, so none of this runs there; the CPU tests drive
:func:`make_manager_class` with constructed stand-ins for numba's manager and pointer classes.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from typing import Any

from faulthunt.guard.allocator import GuardAllocator, bypass

NAME = "numba"


def make_manager_class(base: type, guard: GuardAllocator, pointers: Any = None) -> type:
    """A subclass of numba EMM class ``base`` guarding sampled ``memalloc`` calls.

    ``pointers``: the module with numba's ``AutoFreePointer``/``MemoryPointer``
    (``numba.cuda.cudadrv.driver``, imported when first needed).
    """

    class GuardMemoryManager(base):
        def memalloc(self, size: int) -> Any:
            if guard.sample(size):
                slot = guard.allocate(size, NAME)
                if slot is not None:
                    return _pointer(self, slot.address, size, guard, pointers)
            with bypass():  # the base manager's cuMemAlloc must not be sampled again
                return super().memalloc(size)

    GuardMemoryManager.__name__ = f"Guard{base.__name__}"
    return GuardMemoryManager


def _pointer(mgr: Any, address: int, size: int, guard: GuardAllocator, pointers: Any) -> Any:
    if pointers is None:
        from numba.cuda.cudadrv import driver
        pointers = driver
    ctx = mgr.context
    if not isinstance(ctx, weakref.ProxyTypes):
        ctx = weakref.proxy(ctx)
    allocations = getattr(mgr, "allocations", None)

    def finalizer() -> None:
        if allocations is not None:
            allocations.pop(address, None)
        guard.free(address)

    auto_free = getattr(pointers, "AutoFreePointer", None)
    if auto_free is not None and allocations is not None:
        # numba's own shape (NumbaCUDAMemoryManager.memalloc): freed when the last owner goes
        mem = auto_free(ctx, ctypes.c_void_p(address), size, finalizer=finalizer)
        allocations[address] = mem
        return mem.own()
    return pointers.MemoryPointer(ctx, ctypes.c_void_p(address), size, finalizer=finalizer)


class NumbaGuard:
    name = NAME

    def stop(self) -> None:
        pass  # numba keeps the manager of contexts already made; nothing to undo safely


def start(guard: GuardAllocator) -> NumbaGuard | None:
    """Install the guarding EMM plugin (right after ``numba.cuda`` is imported)."""
    from numba import cuda

    if getattr(cuda, "simulator_enabled", False) or os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return None  # the simulator has no memory manager to plug into
    from numba.cuda.cudadrv import driver

    ensure = getattr(driver, "_ensure_memory_manager", None)
    if ensure is not None:
        ensure()
    base = getattr(driver, "_memory_manager", None) or driver.NumbaCUDAMemoryManager
    if base.__name__.startswith("Guard"):
        return None
    cuda.set_memory_manager(make_manager_class(base, guard))
    return NumbaGuard()
