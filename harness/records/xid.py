"""Records of the kernel log: one Xid report line, its decoded MMU fault and SM exception.

Filled by the pure parser :mod:`faulthunt.kernlog.parse`; every other area reads them (the stress
runner attributes them to tests, the mapper maps :attr:`MmuFault.address` to allocations, the
report prints them). ``to_json`` is exactly the object ``faulthunt xid parse --json`` prints and
``xid.jsonl`` stores (docs/kernlog.md), and ``from_json`` reads it back.

The records are frozen ``msgspec.Struct``s, like every record under ``faulthunt.records``: a big
log makes one per Xid line, and a Struct is built in a tenth of a frozen dataclass's time and
encoded to JSON in C (:mod:`faulthunt.kernlog.jsonl`). Fields are declared in the order of the
JSON object, so the encoded Struct is ``to_json``'s object. ``gc=False``: they hold only scalars,
strings, tuples and each other (never a cycle), so the cyclic collector need not track them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

#: 4 KiB: the granularity of the address an Xid 31 reports (the MMU fault buffer keeps bits 63:12)
MMU_PAGE = 4096


class MmuFault(msgspec.Struct, frozen=True, gc=False):
    """The decoded ``MMU Fault: ENGINE ... faulted @ 0x<hi>_<lo>. Fault is of type ...`` of an Xid 31.

    ``address`` is ``(hi << 32) | lo``: the base of the 4 KiB page of the faulting access (match it
    against allocations overlapping ``[address, address + 4096)``). It is ``None`` whenever the
    fault is not decodable (``UNRECOGNIZED_*`` names, an address wider than any GPU VA or not
    page-aligned): such a value is hardware or firmware garbage, never a user virtual address.
    ``address_text`` keeps the driver's own spelling (``0x7f7d_dbe00000``) for humans either way.
    """

    address: int | None
    engine: str | None
    gpc: int | None
    client: str | None
    fault_type: str | None
    access_type: str | None
    decodable: bool
    address_text: str | None = None
    #: why ``decodable`` is False (None when it is True)
    reason: str | None = None

    @property
    def is_write(self) -> bool | None:
        """True for a write/atomic access, False for a read/prefetch, None when unknown."""
        if not self.access_type:
            return None
        at = self.access_type
        if at.endswith(("WRITE", "ATOMIC")) or "ATOMIC" in at:
            return True
        if at.endswith(("READ", "PREFETCH")):
            return False
        return None

    @property
    def from_sm(self) -> bool:
        """Whether an SM load/store (a CUDA kernel) faulted: ``ENGINE GRAPHICS`` with a ``GPCCLIENT_T1_*``."""
        return self.engine == "GRAPHICS" and (self.client or "").startswith("GPCCLIENT_T1_")

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MmuFault:
        return cls(
            address=d.get("address"),
            engine=d.get("engine"),
            gpc=d.get("gpc"),
            client=d.get("client"),
            fault_type=d.get("fault_type"),
            access_type=d.get("access_type"),
            decodable=bool(d.get("decodable", d.get("address") is not None)),
            address_text=d.get("address_text"),
            reason=d.get("reason"),
        )


class GrException(msgspec.Struct, frozen=True, gc=False):
    """The SM/graphics exception an Xid 13 line describes.

    ``kind`` is ``warp`` (``Graphics SM Warp Exception on (GPC g, TPC t, SM s): <error>``),
    ``global`` (``Graphics SM Global Exception on ...``), ``esr`` (``Graphics Exception: ESR
    0xreg=0xval ...``) or ``other`` (``Graphics Exception: channel ..., Class ...`` and the rest).
    ``sm`` is None on Maxwell/Pascal, whose lines name only GPC and TPC.
    """

    kind: str
    gpc: int | None = None
    tpc: int | None = None
    sm: int | None = None
    error: str | None = None
    #: ``((register, value), ...)`` of an ESR line
    esr: tuple[tuple[int, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The ``gr`` object (``esr`` as a list of ``[register, value]`` lists, as JSON reads it back)."""
        return {"kind": self.kind, "gpc": self.gpc, "tpc": self.tpc, "sm": self.sm, "error": self.error,
                "esr": [[r, v] for r, v in self.esr]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GrException:
        return cls(
            kind=str(d.get("kind", "other")),
            gpc=d.get("gpc"),
            tpc=d.get("tpc"),
            sm=d.get("sm"),
            error=d.get("error"),
            esr=tuple((int(r), int(v)) for r, v in d.get("esr") or ()),
        )


class XidEvent(msgspec.Struct, frozen=True, gc=False):
    """One ``NVRM: Xid`` report line of the kernel log.

    ``pid``/``process`` are None when the driver did not print them (drivers up to 418; 570+ for
    faults with no known owner; ``pid='<unknown>', name=<unknown>`` on 515-560). ``ts`` is the
    kernel's timestamp in seconds since boot (the monotonic clock, comparable with
    ``time.monotonic()`` on Linux); ``wall`` is the wall-clock text a container printed
    (``dmesg -T``, syslog, iso), kept verbatim because its time zone and year are often implicit.
    """

    xid: int
    pci: str | None
    gpu_instance: int | None
    compute_instance: int | None
    pid: int | None
    process: str | None
    message: str
    category: str
    mmu: MmuFault | None
    caused_by: int | None
    #: the channel id the driver printed (``Ch %08x`` / ``channel 0x%08x``), when it did
    channel: int | None = None
    #: the SM exception of an Xid 13 line
    gr: GrException | None = None
    seq: int | None = None
    ts: float | None = None
    wall: str | None = None
    #: the kernel log level (0 emerg .. 7 debug) when the container carried one
    level: int | None = None
    #: the whole original line
    raw: str = ""

    def to_json(self) -> dict[str, Any]:
        """The ``faulthunt xid parse --json`` object (one line of JSON Lines), keys in field order."""
        d: dict[str, Any] = msgspec.to_builtins(self)
        if self.gr is not None:
            d["gr"] = self.gr.to_json()  # to_builtins leaves tuples as tuples
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> XidEvent:
        """Read back a :meth:`to_json` object (extra keys, e.g. ``worker``/``nodeid``, are ignored)."""
        mmu = d.get("mmu")
        gr = d.get("gr")
        return cls(
            xid=int(d["xid"]),
            pci=d.get("pci"),
            gpu_instance=d.get("gpu_instance"),
            compute_instance=d.get("compute_instance"),
            pid=d.get("pid"),
            process=d.get("process"),
            message=str(d.get("message", "")),
            category=str(d.get("category", "")),
            mmu=None if not mmu else MmuFault.from_json(mmu),
            caused_by=d.get("caused_by"),
            raw=str(d.get("raw", "")),
            seq=d.get("seq"),
            ts=d.get("ts"),
            wall=d.get("wall"),
            channel=d.get("channel"),
            gr=None if not gr else GrException.from_json(gr),
            level=d.get("level"),
        )

    def replace(self, **changes: Any) -> XidEvent:
        """A copy with ``changes`` (e.g. the ``seq`` a kmsg reader knows and the line does not)."""
        return msgspec.structs.replace(self, **changes)
