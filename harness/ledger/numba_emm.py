"""numba-cuda refinement: an External Memory Management plugin that records what numba does.

numba frees device memory late: dropping the last reference to a device array (the *Python-level*
free) only queues the ``cuMemFree`` in the context's pending-deallocation list, which is emptied
later (the *driver* free). A kernel that writes through a stale pointer in between hits memory the
driver still maps: no Xid, but a use after free. So this plugin records both: ``free`` with
``phase: requested`` when numba's pointer is freed, ``phase: completed`` when the queued driver
free runs. Installed with ``numba.cuda.set_memory_manager`` before numba creates its context; it
subclasses whatever manager is current (numba's own, or e.g. RMM's plugin).

:func:`make_manager_class` takes the base class, so the recording logic is tested with a
constructed stand-in base (no GPU).
"""

from __future__ import annotations

from typing import Any

from faulthunt.ledger.writer import LedgerWriter, stack_json
from faulthunt.records.ledger import KIND_DEVICE, PHASE_COMPLETED, PHASE_REQUESTED

NAME = "numba"


def _address(handle: Any) -> int | None:
    for attr in ("device_pointer_value",):
        v = getattr(handle, attr, None)
        if isinstance(v, int):
            return v
    try:
        return int(handle)  # cuda-python CUdeviceptr and ctypes values convert
    except (TypeError, ValueError):
        v = getattr(handle, "value", None)
        return v if isinstance(v, int) else None


def make_manager_class(base: type, writer: LedgerWriter) -> type:
    """A subclass of numba EMM class ``base`` that records allocations and both kinds of free."""

    # around numba's own driver allocation: CUPTI's callback then leaves the stack to this record
    enter, leave = writer.refine_marks()

    class LedgerMemoryManager(base):
        def initialize(self) -> None:
            super().initialize()
            if writer.route.name != "python" and writer.cupti is not None:
                # CUPTI's MEMORY2 release record of the queued cuMemFree is the driver free: the
                # replay annotates the life the Python-level free closed (free_completed_t), as it
                # would with the completed record below, so that record is not written twice
                return
            dealloc = getattr(self, "deallocations", None)
            add = getattr(dealloc, "add_item", None)
            if dealloc is None or add is None or getattr(add, "_faulthunt", False):
                return

            def add_item(dtor: Any, handle: Any, size: int = 0) -> Any:
                addr = _address(handle)

                def recording_dtor(h: Any) -> Any:
                    out = dtor(h)
                    if addr is not None:
                        writer.free(NAME, addr, KIND_DEVICE, PHASE_COMPLETED)
                    return out

                return add(recording_dtor, handle, size)

            add_item._faulthunt = True  # type: ignore[attr-defined]
            dealloc.add_item = add_item

        def memalloc(self, size: int) -> Any:
            if enter is None or leave is None:  # both or neither (refine_marks)
                mem = super().memalloc(size)
            else:
                enter()
                try:
                    mem = super().memalloc(size)
                finally:
                    leave()
            addr = _address(mem)
            if addr is None:
                return mem
            writer.alloc(NAME, addr, int(size), KIND_DEVICE, stack_json() if writer.alloc_stacks else None)
            # The pointer numba hands out is an owner of the allocation; its free() runs when the
            # last array using it goes away (Python-level free; the driver free is queued).
            target = getattr(mem, "_mem", mem)
            orig_free = target.free

            def free() -> Any:
                if not getattr(target, "_faulthunt_freed", False):
                    target._faulthunt_freed = True
                    writer.free(NAME, addr, KIND_DEVICE, PHASE_REQUESTED,
                                stack_json() if writer.all_stacks else None)
                return orig_free()

            try:
                target.free = free
            except AttributeError:  # a slotted pointer class: allocations are still recorded
                pass
            return mem

    LedgerMemoryManager.__name__ = f"Ledger{base.__name__}"
    return LedgerMemoryManager


class NumbaSource:
    name = NAME

    def __init__(self, previous: type) -> None:
        self.previous = previous

    def stop(self) -> None:
        # numba keeps the manager for contexts already made; nothing to undo safely.
        pass


def start(writer: LedgerWriter) -> NumbaSource | None:
    """Install the recording EMM plugin (call right after ``numba.cuda`` is imported)."""
    from numba import cuda
    from numba.cuda.cudadrv import driver

    from numba.core import config

    if getattr(config, "ENABLE_CUDASIM", 0):
        return None  # the CUDA simulator has no memory manager to hook
    # Honour a plugin chosen through NUMBA_CUDA_MEMORY_MANAGER (e.g. RMM's): wrap it, not numba's.
    ensure = getattr(driver, "_ensure_memory_manager", None)
    if ensure is not None:
        ensure()
    base = getattr(driver, "_memory_manager", None) or driver.NumbaCUDAMemoryManager
    if getattr(base, "__name__", "").startswith("Ledger"):
        return NumbaSource(base)
    cuda.set_memory_manager(make_manager_class(base, writer))
    return NumbaSource(base)
