"""The guard allocator: sampled allocations get a slot of their own with an unmapped guard.

Framework hooks (:mod:`.cupy_hook`, :mod:`.numba_emm`, :mod:`.cuda_core_mr`, :mod:`.bindings_hook`,
:mod:`.torch_alloc`) ask :meth:`GuardAllocator.sample` for every allocation (one decrement on the
unsampled path) and hand the sampled ones to :meth:`GuardAllocator.allocate`, which reserves a slot
(:func:`~faulthunt.guard.layout.plan_slot`), creates, maps and opens its data granules and writes
an ``alloc`` record. :meth:`GuardAllocator.free` waits for the device, unmaps the granules, keeps
the VA reserved in quarantine (a later access faults) and writes a ``free`` record; the oldest
quarantined slots are given back when the quarantine is full (a ``free`` with phase
``completed``). Anything that fails returns None / False and the hook falls back to the
framework's own allocator: guard mode never fails an allocation of the code under test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from faulthunt.guard import records
from faulthunt.guard.config import GuardConfig
from faulthunt.guard.driver import VmmDriver
from faulthunt.guard.layout import SlotLayout, plan_slot
from faulthunt.guard.sampling import Quarantine, Sampler
from faulthunt.records.ledger import EVENT_ALLOC, EVENT_FREE, EVENT_NOTE

_GUARD_DIR = str(Path(__file__).resolve().parent) + os.sep


class RecordSink(Protocol):
    """Where records go: :class:`faulthunt.ledger.writer.LedgerWriter` (``record`` and ``stack``)."""

    alloc_stacks: bool

    def record(self, event: str, source: str, **fields: Any) -> Any: ...


@dataclasses.dataclass
class Slot:
    """A live or quarantined guard slot."""

    number: int
    base: int
    layout: SlotLayout
    handle: Any
    device: int
    framework: str

    @property
    def address(self) -> int:
        return self.base + self.layout.data_offset

    @property
    def size(self) -> int:
        return self.layout.size

    @property
    def mapped(self) -> tuple[int, int]:
        lo = self.base + self.layout.mapped_offset
        return lo, lo + self.layout.mapped_size


@dataclasses.dataclass
class Counts:
    """What guard mode did (per process; per test as differences)."""

    seen: int = 0
    guarded: int = 0
    guarded_bytes: int = 0
    skipped_cap: int = 0
    failed: int = 0
    freed: int = 0
    released: int = 0

    def minus(self, other: Counts) -> Counts:
        return Counts(*(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


_local = threading.local()


@contextlib.contextmanager
def bypass() -> Iterator[None]:
    """Within: allocations on this thread go past the low-level hook (a framework hook calling its
    framework's own allocator, which may reach ``cuMemAlloc``, must not be sampled twice)."""
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1


def bypassed() -> bool:
    return getattr(_local, "depth", 0) > 0


def _caller_frame() -> FrameType | None:
    f: FrameType | None = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_GUARD_DIR):
        f = f.f_back
    return f


class GuardAllocator:
    """Guard slots of one process. Thread-safe; the sampling counter is deliberately unlocked
    (a lost decrement between threads only shifts which allocation is sampled)."""

    def __init__(self, config: GuardConfig, driver: Callable[[], VmmDriver] | VmmDriver | type,
                 sink: RecordSink | None, seed: int = 0) -> None:
        self.config = config
        # a class or a function: made at the first sampled allocation (cuda-python loads then)
        factory = inspect.isclass(driver) or inspect.isfunction(driver) or inspect.ismethod(driver)
        self._driver_factory: Callable[[], VmmDriver] | None = driver if factory else None  # type: ignore[assignment]
        self.driver: VmmDriver | None = None if factory else driver  # type: ignore[assignment]
        self.sink = sink
        self.sampler = Sampler(config.rate, seed)
        self.quarantine: Quarantine[Slot] = Quarantine(config.quarantine_slots, config.quarantine_bytes)
        self.counts = Counts()
        self.live_bytes = 0
        self.broken: str | None = None
        self._live: dict[int, Slot] = {}
        self._lock = threading.RLock()
        self._numbers = 0
        self._said: set[str] = set()
        self._mark = Counts()

    # the hot path -------------------------------------------------------------------------------
    def sample(self, size: int) -> bool:
        """Count an allocation of ``size`` bytes and say whether to guard it."""
        self.counts.seen += 1
        if size <= 0 or self.broken is not None:
            return False
        return self.sampler.sample()

    def owns(self, address: int) -> bool:
        """``address`` is the start of a live guarded allocation."""
        return address in self._live

    # allocation ---------------------------------------------------------------------------------
    def allocate(self, size: int, framework: str, device: int | None = None) -> Slot | None:
        """A guarded allocation of ``size`` bytes, or None (the caller uses its own allocator)."""
        with self._lock:
            drv = self._get_driver()
            if drv is None:
                return self._fail("driver", self.broken or "no driver")
            if device is None:
                try:
                    device = drv.current_device()
                except Exception as exc:  # noqa: BLE001 - any driver or binding error: the allocation goes unguarded, said once
                    return self._fail("context", f"cannot read the current device: {exc}")
                if device is None:
                    return self._fail("context", "no CUDA context is current on this thread")
            else:
                try:
                    drv.ensure_context(device)
                except Exception as exc:  # noqa: BLE001 - any driver or binding error: the allocation goes unguarded, said once
                    return self._fail("context", f"no context for device {device}: {exc}")
            try:
                layout = plan_slot(size, drv.granularity(device), self.config.align, self.config.side)
            except Exception as exc:  # noqa: BLE001 - any driver or binding error: the allocation goes unguarded, said once
                return self._fail("granularity", str(exc))
            if self.live_bytes + layout.mapped_size > self.config.max_bytes:
                self.counts.skipped_cap += 1
                self._say("cap", f"guard: {self.live_bytes >> 20} MiB of live guarded memory reached "
                                 f"max_bytes ({self.config.max_bytes >> 20} MiB); further sampled "
                                 "allocations go unguarded until some are freed")
                return None
            slot = self._map_slot(drv, layout, device, framework)
            if slot is None:
                return None
            self._live[slot.address] = slot
            self.live_bytes += layout.mapped_size
            self.counts.guarded += 1
            self.counts.guarded_bytes += size
        self._write(EVENT_ALLOC, stack=True, **records.alloc_fields(
            slot.number, slot.base, layout, self.config.align, framework, device))
        return slot

    def _map_slot(self, drv: VmmDriver, layout: SlotLayout, device: int, framework: str) -> Slot | None:
        base = handle = None
        mapped = False
        lo = 0
        try:
            base = drv.reserve(layout.reserve, layout.granularity)
            lo = base + layout.mapped_offset
            handle = drv.create(layout.mapped_size, device)
            drv.map(lo, layout.mapped_size, handle)
            mapped = True
            drv.set_access(lo, layout.mapped_size, device)
        except Exception as exc:  # noqa: BLE001 - any failure while mapping: undone below, the allocation unguarded
            undo: list[Callable[[], None]] = []
            if mapped:
                undo.append(lambda: drv.unmap(lo, layout.mapped_size))
            if handle is not None:
                undo.append(lambda: drv.release(handle))
            if base is not None:
                undo.append(lambda: drv.free_va(base, layout.reserve))
            for step in undo:
                try:
                    step()
                except Exception:  # noqa: BLE001 - undoing a half-made slot is best effort
                    pass
            return self._fail("map", str(exc))
        self._numbers += 1
        return Slot(self._numbers, base, layout, handle, device, framework)

    # free ---------------------------------------------------------------------------------------
    def free(self, address: int) -> bool:
        """Unmap and quarantine the guarded allocation at ``address``; False if it is not one."""
        with self._lock:
            slot = self._live.pop(address, None)
            if slot is None:
                return False
            drv = self.driver
            assert drv is not None
            try:
                drv.synchronize()  # work still running on the buffer must not fault on the unmap
            except Exception:  # noqa: BLE001 - a poisoned context: the unmap below reports what it can
                pass
            unmapped = True
            try:
                drv.unmap(*self._range(slot))
            except Exception as exc:  # noqa: BLE001 - any driver error: the slot's VA stays reserved, said
                unmapped = False
                self._say("unmap", f"guard: unmapping a freed slot failed ({exc}); its VA stays "
                                   "mapped and reserved, so a use after free there is not caught")
            try:
                drv.release(slot.handle)
            except Exception:  # noqa: BLE001 - releasing a freed slot's memory is best effort
                pass
            self.live_bytes -= slot.layout.mapped_size
            self.counts.freed += 1
            old = self.quarantine.add(slot, slot.layout.reserve) if unmapped else []
        self._write(EVENT_FREE, stack=False, **records.free_fields(slot.number, address, unmapped))
        for s in old:
            self._release(s)
        return True

    def _range(self, slot: Slot) -> tuple[int, int]:
        lo, hi = slot.mapped
        return lo, hi - lo

    def _release(self, slot: Slot) -> None:
        assert self.driver is not None
        try:
            self.driver.free_va(slot.base, slot.layout.reserve)
        except Exception as exc:  # noqa: BLE001 - any driver error: said, the VA stays reserved
            self._say("free_va", f"guard: giving back a quarantined slot's VA failed ({exc})")
            return
        self.counts.released += 1
        self._write(EVENT_FREE, stack=False, **records.release_fields(slot.number, slot.address))

    def release_quarantine(self) -> int:
        """Give back every quarantined slot's VA now (tests, and a process done with the GPU)."""
        with self._lock:
            old = self.quarantine.drain()
        for s in old:
            self._release(s)
        return len(old)

    # tests and notes ----------------------------------------------------------------------------
    def begin_test(self, nodeid: str | None) -> None:
        """A test starts: reseed the sampler from its node id and start its counts."""
        with self._lock:
            self.sampler.reseed(nodeid)
            self._mark = dataclasses.replace(self.counts)

    def end_test(self) -> Counts:
        """A test ended: write its counts (when it allocated anything) and return them."""
        with self._lock:
            delta = self.counts.minus(self._mark)
            self._mark = dataclasses.replace(self.counts)
        if delta.seen:
            self._write(EVENT_NOTE, stack=False, message="guard stats",
                        **{records.NOTE_STATS: {**delta.to_json(), "scope": "test"}})
        return delta

    def note_totals(self) -> None:
        self._write(EVENT_NOTE, stack=False, message="guard totals",
                    nodeid=None, **{records.NOTE_STATS: {**self.counts.to_json(), "scope": "process",
                                                         "live_bytes": self.live_bytes,
                                                         "quarantined": len(self.quarantine)}})

    # internals ----------------------------------------------------------------------------------
    def _get_driver(self) -> VmmDriver | None:
        if self.driver is None and self.broken is None and self._driver_factory is not None:
            try:
                self.driver = self._driver_factory()
            except Exception as exc:  # noqa: BLE001 - loading the bindings fails in many ways (ImportError, OSError, CUDA errors): guard off, said
                self.broken = f"the CUDA driver bindings could not be loaded: {exc}"
                self._say("driver", f"guard: off in this process: {self.broken}")
        return self.driver

    def _fail(self, key: str, why: str) -> Slot | None:  # always None: `return self._fail(...)`
        self.counts.failed += 1
        self._say(key, f"guard: a sampled allocation went unguarded: {why}")
        return None

    def _say(self, key: str, message: str) -> None:
        """Say ``message`` once per kind on stderr and in the ledger."""
        if key in self._said:
            return
        self._said.add(key)
        print(f"faulthunt {message}", file=sys.stderr)
        self._write(EVENT_NOTE, stack=False, message=message)

    def _write(self, event: str, *, stack: bool, **fields: Any) -> None:
        sink = self.sink
        if sink is None:
            return
        if stack and getattr(sink, "alloc_stacks", False):
            frame = _caller_frame()
            if frame is not None:
                from faulthunt.ledger.writer import stack_json

                fields["stack"] = stack_json(frame)
        try:
            sink.record(event, records.SOURCE, **fields)
        except Exception:  # noqa: BLE001 - a record that cannot be written must not fail the allocation
            pass
