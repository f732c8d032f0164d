"""CuPy refinement: ``cupy.cuda.MemoryHook`` records pool chunks and the arrays carved from them.

CuPy's memory pool takes chunks from the driver (hook ``alloc``: recorded as ``kind: segment``)
and hands out pieces to arrays (hook ``malloc``: ``kind: block``); an array's memory goes back to
the pool (hook ``free``: block freed), not to the driver, so a stale pointer into it never faults
on the GPU. With these records a fault inside a chunk but outside every live array is
``pool_slack``, inside a returned one ``freed``. Chunks given back to the driver
(``free_all_blocks``) have no hook: CUPTI's release records close them when CUPTI is on.

CuPy keeps memory hooks per thread; the hook is entered on the thread that imports CuPy (the
pytest worker's main thread, where tests run). :func:`hook_record` is the pure translation of one
hook call (tested with constructed keyword arguments as CuPy passes them).
"""

from __future__ import annotations

from typing import Any

from faulthunt.ledger.writer import LedgerWriter, stack_json
from faulthunt.records.ledger import EVENT_ALLOC, EVENT_FREE, KIND_BLOCK, KIND_SEGMENT

NAME = "cupy"


def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, int) else "null"


def hook_record(hook: str, device_id: Any = None, size: Any = 0, mem_size: Any = 0,
                mem_ptr: Any = 0) -> tuple[str, int, int, str, str] | None:
    """(event, address, size, kind, more fields as ``,"k":v`` JSON) for a CuPy memory-hook
    postprocess call, or None. Pure.

    CuPy's documented keywords: ``alloc``: device_id, mem_size, mem_ptr; ``malloc``: device_id,
    size, mem_size, mem_ptr, pmem_id; ``free``: device_id, mem_size, mem_ptr, pmem_id.
    """
    if not isinstance(mem_ptr, int) or mem_ptr == 0:
        return None
    if hook == "alloc":
        return EVENT_ALLOC, mem_ptr, int(mem_size or 0), KIND_SEGMENT, f',"device_id":{_num(device_id)}'
    if hook == "malloc":
        # size is what the array asked for; mem_size the rounded piece of the pool: bytes between
        # the two are slack an off-by-one can hit silently.
        return (EVENT_ALLOC, mem_ptr, int(size if size else mem_size or 0), KIND_BLOCK,
                f',"rounded_size":{_num(mem_size)},"device_id":{_num(device_id)}')
    if hook == "free":
        return EVENT_FREE, mem_ptr, 0, KIND_BLOCK, f',"device_id":{_num(device_id)}'
    return None


def make_hook(base: type, writer: LedgerWriter) -> Any:
    """An instance of a ``base`` (cupy.cuda.MemoryHook) subclass writing to ``writer``.

    Its methods take CuPy's keywords by name (cheaper than collecting ``**kw``: they run on every
    array allocation and free) and write through the writer's hot paths. Off the ``python`` route
    the block methods (every array's malloc and free) format their fields inline
    (:func:`make_lean_hook`): the same records, less Python per event.
    """
    if writer.route.name != "python":
        return make_lean_hook(base, writer)
    alloc, free = writer.alloc, writer.free

    def put(got: tuple[str, int, int, str, str] | None) -> None:
        if got is None:
            return
        if got[0] == EVENT_ALLOC:
            alloc(NAME, got[1], got[2], got[3], stack_json() if writer.alloc_stacks else None, got[4])
        else:
            free(NAME, got[1], got[3], None, stack_json() if writer.all_stacks else None, got[4])

    class LedgerHook(base):
        name = "faulthunt_ledger"

        def alloc_postprocess(self, device_id: Any = None, mem_size: Any = 0, mem_ptr: Any = 0,
                              **_: Any) -> None:
            put(hook_record("alloc", device_id, 0, mem_size, mem_ptr))

        # pmem_id is named so that CuPy's usual call does not build a dict for ``**_``
        def malloc_postprocess(self, device_id: Any = None, size: Any = 0, mem_size: Any = 0,
                               mem_ptr: Any = 0, pmem_id: Any = None, **_: Any) -> None:
            put(hook_record("malloc", device_id, size, mem_size, mem_ptr))

        def free_postprocess(self, device_id: Any = None, mem_size: Any = 0, mem_ptr: Any = 0,
                             pmem_id: Any = None, **_: Any) -> None:
            put(hook_record("free", device_id, 0, mem_size, mem_ptr))

    return LedgerHook()


def make_lean_hook(base: type, writer: LedgerWriter) -> Any:
    """:func:`make_hook` with the translation of :func:`hook_record` inlined in each method (CuPy
    passes ints; anything else is left to :func:`hook_record`, which says null)."""
    alloc, free = writer.alloc, writer.free
    alloc_stacks, all_stacks = writer.alloc_stacks, writer.all_stacks

    class LeanLedgerHook(base):
        name = "faulthunt_ledger"

        def alloc_postprocess(self, device_id: Any = None, mem_size: Any = 0, mem_ptr: Any = 0,
                              **_: Any) -> None:
            got = hook_record("alloc", device_id, 0, mem_size, mem_ptr)
            if got is not None:
                alloc(NAME, got[1], got[2], got[3], stack_json() if alloc_stacks else None, got[4])

        def malloc_postprocess(self, device_id: Any = None, size: Any = 0, mem_size: Any = 0,
                               mem_ptr: Any = 0, pmem_id: Any = None, **_: Any) -> None:
            if type(mem_ptr) is int and type(mem_size) is int and type(size) is int and type(device_id) is int:
                if mem_ptr:
                    alloc(NAME, mem_ptr, size or mem_size, KIND_BLOCK, stack_json() if alloc_stacks else None,
                          f',"rounded_size":{mem_size},"device_id":{device_id}')
                return
            got = hook_record("malloc", device_id, size, mem_size, mem_ptr)
            if got is not None:
                alloc(NAME, got[1], got[2], got[3], stack_json() if alloc_stacks else None, got[4])

        def free_postprocess(self, device_id: Any = None, mem_size: Any = 0, mem_ptr: Any = 0,
                             pmem_id: Any = None, **_: Any) -> None:
            if type(mem_ptr) is int and type(device_id) is int:
                if mem_ptr:
                    free(NAME, mem_ptr, KIND_BLOCK, None, stack_json() if all_stacks else None,
                         f',"device_id":{device_id}')
                return
            got = hook_record("free", device_id, 0, mem_size, mem_ptr)
            if got is not None:
                free(NAME, got[1], got[3], None, stack_json() if all_stacks else None, got[4])

    return LeanLedgerHook()


class CupySource:
    name = NAME

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def stop(self) -> None:
        try:
            self.hook.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - stopping at exit: CuPy may be torn down, or the hook owned by another thread
            pass  # a different thread, or CuPy already torn down at exit


def start(writer: LedgerWriter) -> CupySource:
    import cupy

    hook = make_hook(cupy.cuda.MemoryHook, writer)
    hook.__enter__()
    return CupySource(hook)
