"""Exact verdicts for fault addresses that fall in a guard slot. Pure, over ledger records.

The mapper has to guess with plain allocations: the nearest one within reach. A guarded
allocation leaves nothing to guess: its slot's geometry is on record, so an address in the slot is
exactly one of

``past_end``      in the unmapped guard after the allocation (``--guard-side right``): *N* bytes
                  past its end (a range for an Xid 31 page)
``before_start``  in the guard before it (``--guard-side left``): *N* bytes before its start
``freed``         in the allocation (or its slot) after the program freed it: the slot was
                  unmapped and its VA quarantined, so the access faulted; names the freeing test
``slack``         mapped bytes of a live slot outside the allocation: the alignment slack between
                  its end and the guard, or the unused head / tail of the slot. *Inside the slack,
                  not guardable*: such an access does not fault
``inside``        in the live allocation itself

``caught`` says whether the hardware faults on that range at that time (it is unmapped). An
address outside every slot (or in one whose VA was already given back) gets None: the mapper's
own rules apply there. Use :func:`guard_verdict` for one query, :class:`GuardIndex` for many.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from faulthunt.guard.records import GuardSlot, is_guard_free, slot_from_alloc
from faulthunt.records.ledger import PHASE_COMPLETED, format_stack

PAGE = 4096
#: a fault on a page that was mapped at the fault time cannot be a guard catch; when the slot was
#: freed this soon after that time, the two clocks (kernel log vs ledger) are taken to differ; a
#: slot made this soon after the fault time is taken to be the one that faulted, for the same reason
SKEW_S = 1.0

Span = int | tuple[int, int]


@dataclasses.dataclass(frozen=True)
class GuardVerdict:
    """What one address (a byte, or a 4 KiB page) is against one guard slot."""

    verdict: str
    #: the range is unmapped at that time: an access there faults (Xid 31)
    caught: bool
    address: int
    page: bool
    slot: GuardSlot
    #: address minus the allocation's start (a [lo, hi] range for a page)
    offset: Span
    #: bytes past the end (past_end, slack after it) or before the start (before_start, head)
    beyond: Span | None
    text: str
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        def j(v: Span | None) -> Any:
            return list(v) if isinstance(v, tuple) else v

        return {"verdict": self.verdict, "caught": self.caught, "address": hex(self.address),
                "address_int": self.address, "page": self.page, "offset": j(self.offset),
                "beyond": j(self.beyond), "text": self.text, "note": self.note,
                "allocation": self.slot.to_json(), "basis": "guard"}


class GuardIndex:
    """The guard slots of one process's ledger, indexed by reserved range."""

    def __init__(self, slots: Iterable[GuardSlot]) -> None:
        self.slots = sorted(slots, key=lambda s: (s.reserve[0], s.t))
        self._starts = [s.reserve[0] for s in self.slots]
        self._widest = max((s.reserve[1] - s.reserve[0] for s in self.slots), default=0)
        #: malformed or unmatched guard records left out by :meth:`from_records`
        self.skipped = 0

    def __len__(self) -> int:
        return len(self.slots)

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> GuardIndex:
        """Replay guard ``alloc``/``free`` records (any other record is ignored) into slot lives.

        A malformed guard record is skipped (counted in :attr:`skipped`), never fatal.
        """
        recs = [r for r in records if isinstance(r, Mapping) and r.get("source") == "guard"]
        recs.sort(key=lambda r: t if isinstance(t := r.get("t"), (int, float)) else 0.0)
        live: dict[int, dict[str, Any]] = {}
        done: list[dict[str, Any]] = []
        skipped = 0
        for rec in recs:
            slot = slot_from_alloc(rec)
            if slot is not None:
                old = live.pop(slot.address, None)
                if old is not None:
                    done.append(old)  # its free was never recorded (a torn ledger)
                live[slot.address] = {"slot": slot}
                continue
            if not is_guard_free(rec):
                skipped += rec.get("event") in ("alloc", "free")
                continue
            life = live.get(rec["address"])
            if life is None:
                skipped += 1
                continue
            if rec.get("phase") == PHASE_COMPLETED:
                life["t_release"] = float(rec["t"])
                done.append(live.pop(rec["address"]))
            elif "t_free" not in life:
                g = got if isinstance(got := rec.get("guard"), Mapping) else {}
                life.update(t_free=float(rec["t"]), free_nodeid=rec.get("nodeid"),
                            free_stack=format_stack(rec.get("stack")), unmapped=g.get("unmapped"))
        index = cls(dataclasses.replace(life.pop("slot"), **life) for life in [*done, *live.values()])
        index.skipped = skipped
        return index

    def slot_at(self, address: int, at: float | None = None, *, skew: bool = False) -> GuardSlot | None:
        """The slot whose reservation holds ``address`` at time ``at`` (None: the end of the
        ledger, so the newest slot, unless its VA was given back)."""
        if at is None:
            at = float("inf")
        i = bisect.bisect_right(self._starts, address)
        best: GuardSlot | None = None
        # made just after ``at`` (``skew``: ``at`` is a kernel-log time, whose clock and the
        # ledger's may differ by that much)
        late: GuardSlot | None = None
        while i > 0:
            i -= 1
            s = self.slots[i]
            if s.reserve[0] + self._widest <= address:
                break
            if not s.reserve[0] <= address < s.reserve[1]:
                continue
            if s.t <= at:
                if best is None or s.t > best.t:
                    best = s
            elif skew and s.t - at < SKEW_S and (late is None or s.t < late.t):
                late = s
        for slot in (best, late):  # the newest slot made by then, unless its VA was given back
            if slot is not None and (slot.t_release is None or at < slot.t_release):
                return slot
        return None

    def verdict(self, address: int, *, page: bool = False, at: float | None = None) -> GuardVerdict | None:
        """The verdict for ``address`` (a byte; with ``page`` its 4 KiB page) at time ``at``."""
        if page:
            address -= address % PAGE
        slot = self.slot_at(address, at, skew=page)  # a page is an Xid's: the kernel log's time
        if slot is None:
            return None
        hi = address + (PAGE if page else 1)
        v = _classify(slot, address, hi, page, freed=_freed(slot, at))
        if page and not v.caught and slot.t_free is not None and at is not None and slot.t_free - at < SKEW_S:
            # A mapped page cannot raise an MMU fault: the access came after the recorded free.
            late = _classify(slot, address, hi, page, freed=True)
            note = (f"the fault time is {slot.t_free - at:.3f} s before the recorded free; a mapped "
                    "page cannot fault, so the access followed the free (the clocks differ)")
            return dataclasses.replace(late, note=_join(late.note, note))
        if at is not None and slot.t > at:
            note = (f"the fault time is {slot.t - at:.3f} s before the recorded allocation: the "
                    "kernel log's clock and the ledger's differ by that much")
            return dataclasses.replace(v, note=_join(v.note, note))
        return v


def guard_verdict(records: Iterable[Mapping[str, Any]], address: int, *, page: bool = False,
                  at: float | None = None) -> GuardVerdict | None:
    """The exact verdict for ``address`` against one process's ledger records, or None when the
    address is in no guard slot at time ``at`` (None: the end of the ledger). ``page``: the address
    is an Xid 31 page (4 KiB), not a byte. Pure."""
    return GuardIndex.from_records(records).verdict(address, page=page, at=at)


# --- classification --------------------------------------------------------------------------

def _freed(slot: GuardSlot, at: float | None) -> bool:
    return slot.t_free is not None and (at is None or at >= slot.t_free)


def _join(a: str | None, b: str | None) -> str | None:
    return "; ".join(x for x in (a, b) if x) or None


def _span(lo: int, hi: int) -> Span:
    return lo if lo == hi else (lo, hi)


def _bytes(v: Span) -> str:
    if isinstance(v, int):
        return f"{v}"
    # "0-4095" as the H200 texts read; a range below the start reads "-4096 to -1"
    return f"{v[0]}-{v[1]}" if v[0] >= 0 else f"{v[0]} to {v[1]}"


def _what(slot: GuardSlot) -> str:
    fw = f"{slot.framework} " if slot.framework else ""
    by = f", allocated by {slot.nodeid}" if slot.nodeid else ""
    return f"the {slot.size}-byte {fw}allocation at {hex(slot.address)}{by}"


def _freed_by(slot: GuardSlot) -> str:
    return f"freed by {slot.free_nodeid}" if slot.free_nodeid else "freed outside any test"


def _classify(slot: GuardSlot, lo: int, hi: int, page: bool, *, freed: bool) -> GuardVerdict:
    """``[lo, hi)`` lies inside ``slot``'s reservation; say what it is."""
    a, e, last = slot.address, slot.end, hi - 1
    offset = _span(lo - a, last - a)
    base: dict[str, Any] = dict(address=lo, page=page, slot=slot)
    if slot.guard[0] <= lo < slot.guard[1]:
        after = slot.side == "right"
        beyond = _span(lo - e, last - e) if after else _span(a - last, a - lo)
        where = "past the end of" if after else "before the start of"
        verdict = "past_end" if after else "before_start"
        note = f"{_freed_by(slot)} by then" if freed else None
        text = (f"{verdict}: {_bytes(beyond)} bytes {where} {_what(slot)} "
                f"(guard {hex(slot.guard[0])}-{hex(slot.guard[1] - 1)})")
        return GuardVerdict(verdict, True, offset=offset, beyond=beyond, text=text, note=note, **base)
    d_lo, d_hi = max(lo, a), min(hi, e)
    if freed:
        unmapped = slot.unmapped is not False
        if d_lo < d_hi:
            offset = _span(d_lo - a, d_hi - 1 - a)
            outside = (hi - lo) - (d_hi - d_lo)
            note = f"the page also covers {outside} bytes of the slot outside the allocation" if outside else None
            text = f"freed: offset {_bytes(offset)} of {_what(slot)}, {_freed_by(slot)}"
        else:
            where = "past its end" if lo >= e else "before its start"
            note = f"{_bytes(_span(lo - e, last - e) if lo >= e else _span(a - last, a - lo))} bytes {where}"
            text = f"freed: offset {_bytes(offset)} of {_what(slot)} ({where}), {_freed_by(slot)}"
        if not unmapped:
            note = _join(note, "unmapping failed at the free: the slot may still be mapped")
        return GuardVerdict("freed", unmapped, offset=offset, beyond=None, text=text, note=note, **base)
    mapped_note = "this page is mapped: a fault here is not a guard catch" if page else None
    if d_lo < d_hi:
        offset = _span(d_lo - a, d_hi - 1 - a)
        return GuardVerdict("inside", False, offset=offset, beyond=None,
                            text=f"inside {_what(slot)} at offset {_bytes(offset)}", note=mapped_note, **base)
    after = lo >= e
    beyond = _span(lo - e, last - e) if after else _span(a - last, a - lo)
    if after and slot.side == "right":
        where = f"in the {slot.slack} bytes its {slot.align}-byte alignment leaves before the guard"
    elif after:
        where = "in the mapped tail of its slot (--guard-side right guards overruns)"
    else:
        where = "in the mapped head of its slot (--guard-side left guards underruns)"
    text = (f"inside the slack, not guardable: {_bytes(beyond)} bytes "
            f"{'past the end of' if after else 'before the start of'} {_what(slot)}, {where}")
    return GuardVerdict("slack", False, offset=offset, beyond=beyond, text=text, note=mapped_note, **base)
