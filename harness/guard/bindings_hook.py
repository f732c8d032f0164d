"""cuda-python's driver bindings: ``cuMemAlloc`` / ``cuMemFree`` called from Python.

Code that allocates through ``cuda.bindings.driver.cuMemAlloc`` (faulthunt's planted CUDA C++
kernels do, as do small libraries built on cuda-python) looks the function up on the module at
each call, so guard mode wraps the two module attributes: a sampled ``cuMemAlloc`` returns
``(CUDA_SUCCESS, CUdeviceptr(slot address))`` and the matching ``cuMemFree`` unmaps the slot; every
other call goes to the original function. Calls compiled against the bindings (Cython ``cimport``,
cuda.core's own resources) and ``cudaMalloc`` from native code do not pass through a module
attribute and are out of reach.

A framework hook that calls its framework's allocator (numba's, which may reach this very
function) does so inside :func:`faulthunt.guard.allocator.bypass`, so nothing is sampled twice.
"""

from __future__ import annotations

from typing import Any

from faulthunt.guard.allocator import GuardAllocator, bypassed

NAME = "cuda_bindings"
ALLOC, FREE = "cuMemAlloc", "cuMemFree"


def make_wrappers(guard: GuardAllocator, cu: Any, alloc: Any, free: Any) -> tuple[Any, Any]:
    """Guarding replacements of ``alloc`` (cuMemAlloc) and ``free`` (cuMemFree) of module ``cu``."""
    sample, allocate, owns, release = guard.sample, guard.allocate, guard.owns, guard.free
    success = cu.CUresult.CUDA_SUCCESS

    def cuMemAlloc(bytesize: Any) -> Any:
        if bypassed() or not sample(int(bytesize)):
            return alloc(bytesize)
        slot = allocate(int(bytesize), NAME)
        if slot is None:
            return alloc(bytesize)
        return success, cu.CUdeviceptr(slot.address)

    def cuMemFree(dptr: Any) -> Any:
        try:
            address = int(dptr)
        except (TypeError, ValueError):
            return free(dptr)
        if owns(address) and release(address):
            return (success,)
        return free(dptr)

    for w, orig in ((cuMemAlloc, alloc), (cuMemFree, free)):
        w.__doc__ = getattr(orig, "__doc__", None)
        w._faulthunt_guard = orig  # type: ignore[union-attr]
    return cuMemAlloc, cuMemFree


class BindingsGuard:
    name = NAME

    def __init__(self, cu: Any) -> None:
        self.cu = cu

    def stop(self) -> None:
        for attr in (ALLOC, FREE):
            orig = getattr(getattr(self.cu, attr, None), "_faulthunt_guard", None)
            if orig is not None:
                setattr(self.cu, attr, orig)


def start(guard: GuardAllocator, cu: Any = None) -> BindingsGuard | None:
    """Wrap ``cuMemAlloc``/``cuMemFree`` of the driver module (right after it is imported)."""
    if cu is None:
        from cuda.bindings import driver
        cu = driver
    alloc, free = getattr(cu, ALLOC), getattr(cu, FREE)
    if getattr(alloc, "_faulthunt_guard", None) is not None:
        return None
    new_alloc, new_free = make_wrappers(guard, cu, alloc, free)
    setattr(cu, ALLOC, new_alloc)
    setattr(cu, FREE, new_free)
    return BindingsGuard(cu)
