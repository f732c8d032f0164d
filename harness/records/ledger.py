"""Allocation-ledger records: what each ``ledger/<pid>.jsonl`` line holds (docs/ledger.md).

One JSON object a line. Every record has ``event``, ``t`` (wall clock, ``time.time()``; the
writer's hot paths spell it as integer nanoseconds with an ``e-9`` exponent), optionally ``t_mono``
(``time.monotonic()``, comparable with kernel-log timestamps: on the writer's opening note and on
CUPTI records), ``pid``, ``nodeid`` (the test
running, or null) and ``source`` (who recorded it: ``cupti``, ``numba``, ``cupy``, ``torch``,
``cuda_core``, ``synthetic``...). Events:

``alloc``   ``address``, ``size``, ``kind`` (``device`` a driver allocation, ``segment`` a
            framework pool chunk, ``block`` an object inside a chunk), optional ``stack``
``free``    ``address``, optional ``kind``, ``phase`` (``requested``: the program let go of it;
            ``completed``: the driver got it back; absent: both at once), optional ``stack``
``launch``  ``kernel``, optional ``correlation_id``, ``stack``
``sync``    a synchronization returned (``what``: ``context``, ``stream``, ``event``)
``note``    anything a source wants to say (``message``): fallbacks, dropped records

Only ``event`` and ``t`` (and ``address`` for alloc/free, ``size`` for alloc) are required to map;
the rest is optional so hand-written and third-party ledgers also load.
"""

from __future__ import annotations

import dataclasses
from typing import Any

EVENT_ALLOC = "alloc"
EVENT_FREE = "free"
EVENT_LAUNCH = "launch"
EVENT_SYNC = "sync"
EVENT_NOTE = "note"
EVENTS = (EVENT_ALLOC, EVENT_FREE, EVENT_LAUNCH, EVENT_SYNC, EVENT_NOTE)

#: a driver-level allocation (cuMemAlloc, cuMemAllocAsync, a VMM mapping)
KIND_DEVICE = "device"
#: a chunk a framework pool took from the driver (CuPy pool chunk, torch segment)
KIND_SEGMENT = "segment"
#: an object a framework carved out of a chunk (CuPy array memory, torch block)
KIND_BLOCK = "block"
KINDS = (KIND_DEVICE, KIND_SEGMENT, KIND_BLOCK)

PHASE_REQUESTED = "requested"
PHASE_COMPLETED = "completed"


@dataclasses.dataclass(frozen=True)
class Allocation:
    """One allocation's life as the mapper reconstructs it from alloc and free records."""

    address: int
    size: int
    kind: str
    t: float
    pid: int | None
    nodeid: str | None
    source: str | None
    #: when the program let go of it (the first free); None while live
    t_free: float | None = None
    free_nodeid: str | None = None
    free_source: str | None = None
    #: when the driver got it back, if a later free record said so (deferred frees)
    t_free_completed: float | None = None
    stack: tuple[str, ...] | None = None
    free_stack: tuple[str, ...] | None = None
    #: other sources that recorded the same allocation (e.g. CUPTI and the numba EMM plugin)
    also: tuple[str, ...] = ()

    @property
    def end(self) -> int:
        """One past the last byte."""
        return self.address + self.size


def record_problem(rec: dict[str, Any]) -> str | None:
    """Why ``rec`` cannot be used as a ledger record, or None when it can.

    Pure; the reader counts records with a problem as skipped (they are never fatal).
    """
    event = rec.get("event")
    if event not in EVENTS:
        return f"unknown event {event!r}"
    t = rec.get("t")
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return "missing or non-numeric t"
    if event in (EVENT_ALLOC, EVENT_FREE):
        addr = rec.get("address")
        if not isinstance(addr, int) or isinstance(addr, bool) or addr < 0:
            return "missing or invalid address"
        if event == EVENT_ALLOC:
            size = rec.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                return "missing or invalid size"
            kind = rec.get("kind") or KIND_DEVICE
            if kind not in KINDS:
                return f"unknown kind {kind!r}"
    if event == EVENT_LAUNCH and not isinstance(rec.get("kernel"), str):
        return "launch without a kernel name"
    return None


def format_stack(frames: Any) -> tuple[str, ...] | None:
    """A recorded stack (list of ``"file:line in func"`` strings) as a tuple, or None."""
    if not frames:
        return None
    if isinstance(frames, str):
        return (frames,)
    try:
        return tuple(str(f) for f in frames)
    except TypeError:
        return None
