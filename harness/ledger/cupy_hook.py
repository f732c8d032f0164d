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

from faulthunt.ledger.writer import LedgerWriter
from faulthunt.records.ledger import EVENT_ALLOC, EVENT_FREE, KIND_BLOCK, KIND_SEGMENT

NAME = "cupy"


def hook_record(hook: str, kw: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(event, fields) for a CuPy memory-hook postprocess call, or None. Pure.

    ``alloc``: device_id, mem_size, mem_ptr; ``malloc``: device_id, size, mem_size, mem_ptr,
    pmem_id; ``free``: device_id, mem_size, mem_ptr, pmem_id (CuPy's documented keywords).
    """
    ptr = kw.get("mem_ptr")
    if not isinstance(ptr, int) or ptr == 0:
        return None
    if hook == "alloc":
        return EVENT_ALLOC, {"address": ptr, "size": int(kw.get("mem_size", 0)), "kind": KIND_SEGMENT,
                             "device_id": kw.get("device_id")}
    if hook == "malloc":
        # size is what the array asked for; mem_size the rounded piece of the pool: bytes between
        # the two are slack an off-by-one can hit silently.
        return EVENT_ALLOC, {"address": ptr, "size": int(kw.get("size", kw.get("mem_size", 0))),
                             "kind": KIND_BLOCK, "rounded_size": kw.get("mem_size"),
                             "device_id": kw.get("device_id")}
    if hook == "free":
        return EVENT_FREE, {"address": ptr, "kind": KIND_BLOCK, "device_id": kw.get("device_id")}
    return None


def make_hook(base: type, writer: LedgerWriter) -> Any:
    """An instance of a ``base`` (cupy.cuda.MemoryHook) subclass writing to ``writer``."""

    class LedgerHook(base):  # type: ignore[misc, valid-type]
        name = "faulthunt_ledger"

        def _rec(self, hook: str, kw: dict[str, Any]) -> None:
            got = hook_record(hook, kw)
            if got is not None:
                event, fields = got
                writer.record(event, NAME, stack=writer.stack() if event == EVENT_ALLOC and writer.alloc_stacks else None,
                              **fields)

        def alloc_postprocess(self, **kw: Any) -> None:
            self._rec("alloc", kw)

        def malloc_postprocess(self, **kw: Any) -> None:
            self._rec("malloc", kw)

        def free_postprocess(self, **kw: Any) -> None:
            self._rec("free", kw)

    return LedgerHook()


class CupySource:
    name = NAME

    def __init__(self, hook: Any) -> None:
        self.hook = hook

    def stop(self) -> None:
        try:
            self.hook.__exit__(None, None, None)
        except Exception:
            pass  # a different thread, or CuPy already torn down at exit


def start(writer: LedgerWriter) -> CupySource:
    import cupy

    hook = make_hook(cupy.cuda.MemoryHook, writer)
    hook.__enter__()
    return CupySource(hook)
