"""The guard allocator's ledger records: one place that writes their fields and reads them back.

They are ordinary ledger records (docs/ledger.md) with ``source: guard``, so every ledger reader
already sees a guarded allocation as a device allocation of its exact size, and carry a ``guard``
object with the slot's geometry so :mod:`faulthunt.guard.verdict` can say exactly what a fault
address is (docs/guard.md has the format)::

    {"event": "alloc", "source": "guard", "address": A, "size": S, "kind": "device",
     "framework": "cupy", "device": 0, "stack": [...],
     "guard": {"slot": 7, "side": "right", "align": 256, "granularity": 2097152, "slack": 96,
               "reserve": [R0, R1], "mapped": [M0, M1], "guard": [G0, G1]}}
    {"event": "free", "source": "guard", "address": A, "kind": "device", "phase": "requested",
     "guard": {"slot": 7, "quarantined": true, "unmapped": true}}
    {"event": "free", "source": "guard", "address": A, "kind": "device", "phase": "completed",
     "guard": {"slot": 7, "released": true}}

Ranges are ``[lo, hi)``. ``requested``: the program freed it; its granules were unmapped and the
VA stays reserved (quarantine). ``completed``: the VA was given back to the driver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from faulthunt.guard.layout import SlotLayout
from faulthunt.records.ledger import (EVENT_ALLOC, EVENT_FREE, EVENT_NOTE, KIND_DEVICE,
                                      PHASE_COMPLETED, PHASE_REQUESTED, format_stack)

SOURCE = "guard"
#: note records: the configuration once per process, the counters per test and at exit
NOTE_CONFIG = "guard_config"
NOTE_STATS = "guard_stats"


def alloc_fields(number: int, base: int, layout: SlotLayout, align: int, framework: str,
                 device: int) -> dict[str, Any]:
    """The fields of a guarded allocation's ``alloc`` record, after event/t/pid/nodeid/source."""
    address = base + layout.data_offset
    return {
        "address": address, "size": layout.size, "kind": KIND_DEVICE, "framework": framework,
        "device": device,
        "guard": {
            "slot": number, "side": layout.side, "align": align, "granularity": layout.granularity,
            "slack": layout.slack,
            "reserve": [base, base + layout.reserve],
            "mapped": [base + layout.mapped_offset, base + layout.mapped_offset + layout.mapped_size],
            "guard": [base + layout.guard_offset, base + layout.guard_offset + layout.guard_size],
        },
    }


def free_fields(number: int, address: int, unmapped: bool) -> dict[str, Any]:
    return {"address": address, "kind": KIND_DEVICE, "phase": PHASE_REQUESTED,
            "guard": {"slot": number, "quarantined": True, "unmapped": unmapped}}


def release_fields(number: int, address: int) -> dict[str, Any]:
    return {"address": address, "kind": KIND_DEVICE, "phase": PHASE_COMPLETED,
            "guard": {"slot": number, "released": True}}


@dataclasses.dataclass(frozen=True)
class GuardSlot:
    """One guarded allocation's life, read back from its records."""

    slot: int
    address: int
    size: int
    side: str
    align: int
    slack: int
    reserve: tuple[int, int]
    mapped: tuple[int, int]
    guard: tuple[int, int]
    t: float
    pid: int | None
    nodeid: str | None
    framework: str | None
    device: int | None
    stack: tuple[str, ...] | None
    t_free: float | None = None
    free_nodeid: str | None = None
    free_stack: tuple[str, ...] | None = None
    #: False when unmapping failed at the free (then a later access may not fault)
    unmapped: bool | None = None
    t_release: float | None = None

    @property
    def end(self) -> int:
        return self.address + self.size

    def to_json(self) -> dict[str, Any]:
        return {
            "slot": self.slot, "address": self.address, "address_hex": hex(self.address),
            # what every reader of an allocation shows (faulthunt map, the report)
            "source": SOURCE, "kind": KIND_DEVICE,
            "size": self.size, "end": self.end, "side": self.side, "align": self.align,
            "slack": self.slack, "reserve": list(self.reserve), "mapped": list(self.mapped),
            "guard": list(self.guard), "t": self.t, "pid": self.pid, "nodeid": self.nodeid,
            "framework": self.framework, "device": self.device,
            "stack": list(self.stack) if self.stack else None,
            "freed": None if self.t_free is None else {
                "t": self.t_free, "nodeid": self.free_nodeid,
                "stack": list(self.free_stack) if self.free_stack else None,
                "unmapped": self.unmapped},
            "released_t": self.t_release,
        }


def _range(v: Any) -> tuple[int, int] | None:
    if (isinstance(v, (list, tuple)) and len(v) == 2 and all(type(x) is int for x in v)
            and 0 <= v[0] <= v[1]):
        return (v[0], v[1])
    return None


def slot_from_alloc(rec: Mapping[str, Any]) -> GuardSlot | None:
    """A :class:`GuardSlot` from a guard ``alloc`` record, or None when it is not a well-formed one."""
    if rec.get("event") != EVENT_ALLOC or rec.get("source") != SOURCE:
        return None
    g = rec.get("guard")
    a, n, t = rec.get("address"), rec.get("size"), rec.get("t")
    if not isinstance(g, Mapping) or type(a) is not int or type(n) is not int or n <= 0:
        return None
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return None
    reserve, mapped, guard = _range(g.get("reserve")), _range(g.get("mapped")), _range(g.get("guard"))
    side = g.get("side")
    if reserve is None or mapped is None or guard is None or side not in ("right", "left"):
        return None
    if not (reserve[0] <= mapped[0] <= a and a + n <= mapped[1] <= reserve[1]
            and reserve[0] <= guard[0] < guard[1] <= reserve[1]):
        return None
    slot = g.get("slot")
    return GuardSlot(
        slot=slot if type(slot) is int else -1, address=a, size=n, side=side,
        align=int(g.get("align") or 1), slack=int(g.get("slack") or 0),
        reserve=reserve, mapped=mapped, guard=guard, t=float(t),
        pid=rec.get("pid") if type(rec.get("pid")) is int else None,
        nodeid=rec.get("nodeid") if isinstance(rec.get("nodeid"), str) else None,
        framework=rec.get("framework") if isinstance(rec.get("framework"), str) else None,
        device=rec.get("device") if type(rec.get("device")) is int else None,
        stack=format_stack(rec.get("stack")),
    )


def is_guard_free(rec: Mapping[str, Any]) -> bool:
    return (rec.get("event") == EVENT_FREE and rec.get("source") == SOURCE
            and type(rec.get("address")) is int
            and isinstance(rec.get("t"), (int, float)) and not isinstance(rec.get("t"), bool))


def is_note(rec: Mapping[str, Any], key: str) -> bool:
    return rec.get("event") == EVENT_NOTE and rec.get("source") == SOURCE and isinstance(rec.get(key), Mapping)
