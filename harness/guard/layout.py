"""Where a guarded allocation goes inside its slot (pure arithmetic, no driver).

A slot is one VA reservation of ``k`` data granules plus one guard granule that is never mapped::

    side=right (overruns):   | head (mapped, unused) | allocation | slack | GUARD (unmapped) |
    side=left  (underruns):  | GUARD (unmapped) | allocation | tail (mapped, unused)          |

On the right the allocation ends as close to the guard as ``align`` allows: its start must stay a
multiple of ``align`` (256 for cudaMalloc), so ``round_up(size, align) - size`` bytes of *slack*
stay mapped between its end and the guard, and an access there is not caught. On the left the
allocation starts right at the guard (granules are aligned far beyond any ``align``), so underruns
fault from the first byte and overruns run into the unused tail.
"""

from __future__ import annotations

import dataclasses

PAGE = 4096


def round_up(n: int, to: int) -> int:
    return -(-n // to) * to


@dataclasses.dataclass(frozen=True)
class SlotLayout:
    """Offsets inside one slot's reservation (all in bytes from its start)."""

    side: str
    size: int
    granularity: int
    reserve: int
    mapped_offset: int
    mapped_size: int
    guard_offset: int
    guard_size: int
    data_offset: int
    #: mapped bytes between the allocation and its guard (alignment): accesses there go unseen
    slack: int

    @property
    def data_end(self) -> int:
        return self.data_offset + self.size


def plan_slot(size: int, granularity: int, align: int, side: str = "right") -> SlotLayout:
    """The layout of a slot for a ``size``-byte allocation. Pure; raises ValueError on bad input."""
    if size <= 0:
        raise ValueError(f"size must be > 0, not {size}")
    if granularity <= 0 or granularity % PAGE:
        raise ValueError(f"granularity {granularity} is not a multiple of {PAGE}")
    if align <= 0 or align & (align - 1) or granularity % align:
        raise ValueError(f"align {align} is not a power of two dividing {granularity}")
    padded = round_up(size, align)
    mapped = round_up(padded, granularity)
    g = granularity
    if side == "right":
        return SlotLayout(side, size, g, mapped + g, 0, mapped, mapped, g, mapped - padded, padded - size)
    if side == "left":
        return SlotLayout(side, size, g, mapped + g, g, mapped, 0, g, g, 0)
    raise ValueError(f"side must be right or left, not {side!r}")
