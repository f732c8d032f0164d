"""Group the Xid lines of one fault into an incident: the fault, its companion lines, its consequences.

One bad access on a Hopper GPU leaves several lines (real H200 capture, driver 580.159.04)::

    [33.871650] NVRM: Xid (PCI:0000:00:06): 13, Graphics SM Warp Exception on (GPC 1, TPC 4, SM 0): Misaligned Address
    [33.873117] NVRM: Xid (PCI:0000:00:06): 13, Graphics Exception: ESR 0x519730=0x500000f ...
    [33.874667] NVRM: Xid (PCI:0000:00:06): 13, pid=553, name=faults, Graphics Exception: channel 0x0000000a, ...

The warp and ESR lines carry no pid; the last one does. Rules (pure, on events in log order):

- an Xid 13 or 31 joins the latest application-fault incident on the same GPU with the same pid
  within ``same_pid_window`` seconds of kernel time, or -- when its pid or the incident's is
  unknown -- one within ``window`` seconds (the lines of one fault come milliseconds apart; with no
  kernel times, a few lines apart); otherwise it opens a new incident;
- an Xid 43 (channel reset) or 45 (preemptive cleanup) is a *consequence*: of the incident its
  ``caused by previous Xid N`` names, else of the latest incident of the same pid (43) or GPU (45)
  within ``consequence_window``; with none, it is an incident of its own (e.g. a process killed
  under compute-sanitizer leaves a lone Xid 43);
- an informational Xid (154: recovery action changed) is a consequence of the latest incident on
  its GPU; every other Xid is an incident of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from faulthunt.kernlog.catalog import classify
from faulthunt.kernlog.parse import normalize_pci
from faulthunt.records.xid import XidEvent

APP_FAULT_XIDS = frozenset({13, 31})
CONSEQUENCE_XIDS = frozenset({43, 45})


@dataclasses.dataclass(frozen=True)
class Incident:
    """One fault as the kernel log tells it."""

    #: the first line of the fault (its Xid decides the category)
    root: XidEvent
    #: the lines of the fault itself, root first, in log order
    events: tuple[XidEvent, ...]
    #: lines that followed because of it (43, 45, 154)
    consequences: tuple[XidEvent, ...] = ()

    @property
    def all_events(self) -> tuple[XidEvent, ...]:
        return self.events + self.consequences

    @property
    def pid(self) -> int | None:
        return next((e.pid for e in self.all_events if e.pid is not None), None)

    @property
    def process(self) -> str | None:
        return next((e.process for e in self.all_events if e.process), None)

    @property
    def pci(self) -> str | None:
        return next((e.pci for e in self.all_events if e.pci), None)

    @property
    def xids(self) -> tuple[int, ...]:
        return tuple(sorted({e.xid for e in self.all_events}))

    @property
    def category(self) -> str:
        return self.root.category

    @property
    def culprit(self) -> str:
        return classify(self.root.xid).culprit

    @property
    def addresses(self) -> tuple[int, ...]:
        """Decoded Xid 31 page addresses (undecodable ones are never included)."""
        out: list[int] = []
        for e in self.events:
            if e.mmu is not None and e.mmu.address is not None and e.mmu.address not in out:
                out.append(e.mmu.address)
        return tuple(out)

    @property
    def errors(self) -> tuple[str, ...]:
        """SM warp errors of the Xid 13 lines (``Misaligned Address``, ``Out Of Range Address``...)."""
        out: list[str] = []
        for e in self.events:
            if e.gr is not None and e.gr.kind in ("warp", "global") and e.gr.error and e.gr.error not in out:
                out.append(e.gr.error)
        return tuple(out)

    @property
    def t0(self) -> float | None:
        return next((e.ts for e in self.all_events if e.ts is not None), None)

    def describe(self) -> str:
        """One line for humans."""
        who = f"pid {self.pid}" if self.pid is not None else "pid unknown"
        if self.process:
            who += f" ({self.process})"
        what = classify(self.root.xid).title
        bits = [f"Xid {'/'.join(str(x) for x in self.xids)} on {self.pci or '?'}, {who}: {what}"]
        if self.addresses:
            bits.append("page " + ", ".join(f"0x{a:x}" for a in self.addresses))
        undecodable = [e.mmu for e in self.events if e.mmu is not None and not e.mmu.decodable]
        if undecodable:
            bits.append(f"{len(undecodable)} undecodable MMU fault(s), not a user address")
        if self.errors:
            bits.append("; ".join(self.errors))
        if self.consequences:
            bits.append("then " + ", ".join(f"Xid {e.xid}" for e in self.consequences))
        return " - ".join(bits)

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root.to_json(),
            "xids": list(self.xids),
            "pid": self.pid,
            "process": self.process,
            "pci": self.pci,
            "category": self.category,
            "culprit": self.culprit,
            "addresses": list(self.addresses),
            "errors": list(self.errors),
            "t0": self.t0,
            "events": [e.to_json() for e in self.events],
            "consequences": [e.to_json() for e in self.consequences],
            "description": self.describe(),
        }


@dataclasses.dataclass
class _Open:
    events: list[XidEvent]
    consequences: list[XidEvent]
    last_index: int
    last_ts: float | None
    pid: int | None
    pci: str | None

    def freeze(self) -> Incident:
        return Incident(self.events[0], tuple(self.events), tuple(self.consequences))


def _near(inc: _Open, ev: XidEvent, index: int, window: float, max_gap: int) -> bool:
    if ev.ts is not None and inc.last_ts is not None:
        return 0 <= ev.ts - inc.last_ts <= window
    return index - inc.last_index <= max_gap


def _has_times(inc: _Open, ev: XidEvent) -> bool:
    return ev.ts is not None and inc.last_ts is not None


def _same_burst(inc: _Open, ev: XidEvent) -> bool:
    """Without kernel times (``dmesg -T`` has whole seconds): may a pid-less line continue ``inc``?

    The pid-less warp/ESR lines of an SM exception come first and the line with the pid last
    (H200 capture), so they continue an incident whose owner is still unknown or that is itself a
    burst of Xid 13 lines; after another process's Xid 31 they start a new fault -- unless the warp
    error says ``MMU Fault`` (Hopper/Blackwell print it beside that Xid 31).
    """
    last = inc.events[-1]
    if inc.pid is None or ev.pid is not None or last.xid == 13:
        return True
    return last.xid == 31 and ev.gr is not None and (ev.gr.error or "").startswith("MMU Fault")


def group_incidents(events: Iterable[XidEvent], *, window: float = 0.5, same_pid_window: float = 5.0,
                    consequence_window: float = 60.0, max_gap: int = 16) -> list[Incident]:
    """Group events (in log order) into incidents, in order of their first line (rules: module docstring)."""
    incidents: list[_Open] = []
    for i, ev in enumerate(events):
        pci = normalize_pci(ev.pci)
        target: _Open | None = None
        as_consequence = False
        if ev.xid in APP_FAULT_XIDS:
            for inc in reversed(incidents):
                if inc.pci != pci or inc.events[0].xid not in APP_FAULT_XIDS:
                    continue
                if not _near(inc, ev, i, same_pid_window, max_gap):
                    break
                if inc.consequences:
                    break  # the fault was already torn down: a new fault starts a new incident
                same_pid = ev.pid is not None and inc.pid == ev.pid
                # lines of one fault come milliseconds apart; a line without a pid only joins
                # what is that close (0.8 s apart on the H200 were two different processes)
                if same_pid or ((ev.pid is None or inc.pid is None) and _near(inc, ev, i, window, max_gap // 4)
                                and (_has_times(inc, ev) or _same_burst(inc, ev))):
                    target = inc
                    break
        elif ev.xid in CONSEQUENCE_XIDS or classify(ev.xid).category == "informational_or_recovery":
            as_consequence = True
            for inc in reversed(incidents):
                if inc.pci != pci or not _near(inc, ev, i, consequence_window, max_gap * 4):
                    continue
                if ev.caused_by is not None:
                    if any(e.xid == ev.caused_by for e in inc.events):
                        target = inc
                        break
                    continue
                if ev.xid == 43 and ev.pid is not None and inc.pid is not None:
                    if inc.pid == ev.pid:
                        target = inc
                        break
                    continue
                if inc.events[0].xid not in CONSEQUENCE_XIDS:
                    target = inc
                    break
        if target is None:
            incidents.append(_Open([ev], [], i, ev.ts, ev.pid, pci))
            continue
        (target.consequences if as_consequence else target.events).append(ev)
        target.last_index = i
        target.last_ts = ev.ts if ev.ts is not None else target.last_ts
        if target.pid is None and ev.pid is not None and not as_consequence:
            target.pid = ev.pid
    return [inc.freeze() for inc in incidents]


def summarize_incidents(incidents: Sequence[Incident]) -> dict[str, Any]:
    """Counts by culprit and category: the "your bug or the machine" answer at a glance."""
    by_culprit: dict[str, int] = {}
    by_category: dict[str, int] = {}
    for inc in incidents:
        by_culprit[inc.culprit] = by_culprit.get(inc.culprit, 0) + 1
        by_category[inc.category] = by_category.get(inc.category, 0) + 1
    return {"incidents": len(incidents), "by_culprit": by_culprit, "by_category": by_category}
