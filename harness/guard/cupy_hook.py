"""CuPy: a custom allocator (``cupy.cuda.set_allocator``) in front of CuPy's own.

Every allocation CuPy makes through its current allocator (arrays, kernels' temporaries) comes
here first; unsampled ones go to the allocator that was current before (CuPy's memory pool, or one
the suite set earlier). A sampled one is a guard slot wrapped as CuPy expects: a
``MemoryPointer`` over ``UnownedMemory`` whose owner frees the slot when CuPy lets go of the
memory (the last array using it is gone). CuPy's pool never sees guarded memory, so its
``MemoryHook`` (the ledger's CuPy refinement) does not record it: the guard's own record does.

A suite that calls ``cupy.cuda.set_allocator`` itself after CuPy is imported replaces this hook;
``cupy.cuda.using_allocator`` blocks bypass it while they last.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from faulthunt.guard.allocator import GuardAllocator

NAME = "cupy"


class _Owner:
    """Owner of a guarded CuPy allocation: frees the slot when CuPy drops its memory object."""

    __slots__ = ("guard", "address")

    def __init__(self, guard: GuardAllocator, address: int) -> None:
        self.guard, self.address = guard, address

    def __del__(self) -> None:
        try:
            self.guard.free(self.address)
        except Exception:  # noqa: BLE001 - at interpreter exit the driver may be gone already
            pass


def make_allocator(guard: GuardAllocator, fallback: Callable[[int], Any], *,
                   memory_cls: Any, pointer_cls: Any, get_device: Callable[[], int]) -> Callable[[int], Any]:
    """CuPy's allocator interface (``size -> MemoryPointer``) guarding a sample of allocations.

    ``memory_cls``/``pointer_cls``: ``cupy.cuda.UnownedMemory`` and ``cupy.cuda.MemoryPointer``
    (stand-ins in the CPU tests); ``get_device``: the current device id.
    """
    sample, allocate = guard.sample, guard.allocate

    def guarded_alloc(size: int) -> Any:
        if not sample(size):
            return fallback(size)
        device = get_device()
        slot = allocate(size, NAME, device)
        if slot is None:
            return fallback(size)
        mem = memory_cls(slot.address, size, _Owner(guard, slot.address), device)
        return pointer_cls(mem, 0)

    guarded_alloc._faulthunt_guard = True  # type: ignore[attr-defined]
    return guarded_alloc


class CupyGuard:
    name = NAME

    def __init__(self, cupy: Any, previous: Any) -> None:
        self.cupy, self.previous = cupy, previous

    def stop(self) -> None:
        try:
            self.cupy.cuda.set_allocator(self.previous)
        except Exception:  # noqa: BLE001 - restoring CuPy's allocator at stop is best effort (CuPy may be torn down)
            pass


def start(guard: GuardAllocator) -> CupyGuard | None:
    """Put the guarded allocator in front of CuPy's current one (right after ``import cupy``)."""
    import cupy

    previous = cupy.cuda.get_allocator()
    if getattr(previous, "_faulthunt_guard", False):
        return None
    cupy.cuda.set_allocator(make_allocator(guard, previous, memory_cls=cupy.cuda.UnownedMemory,
                                           pointer_cls=cupy.cuda.MemoryPointer,
                                           get_device=cupy.cuda.runtime.getDevice))
    return CupyGuard(cupy, previous)
