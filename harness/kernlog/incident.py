"""Group the Xid lines of one fault into an incident: the fault, its companion lines, its consequences.

One bad access on a Hopper GPU leaves several lines (real H200 capture, driver 580.159.04)::

    [33.871650] NVRM: Xid (PCI:0000:00:06): 13, Graphics SM Warp Exception on (GPC 1, TPC 4, SM 0): Misaligned Address
    [33.873117] NVRM: Xid (PCI:0000:00:06): 13, Graphics Exception: ESR 0x519730=0x500000f ...
    [33.874667] NVRM: Xid (PCI:0000:00:06): 13, pid=553, name=faults, Graphics Exception: channel 0x0000000a, ...

The warp and ESR lines carry no pid; the last one does. Rules (pure, on events in log order; "near"
is measured in kernel time, or in lines when the log has no kernel times):

- an Xid 13 or 31 looks at the application-fault incidents on its GPU, newest first, as long as
  each is within ``same_pid_window`` (``max_gap`` lines) of its last line and has no consequence
  yet (a torn-down fault is over). It joins the first with its own pid, or -- when its pid or the
  incident's is unknown -- the first within ``window`` (``max_gap // 4`` lines; without kernel times
  only if the burst rule of :func:`_same_burst` allows); otherwise it opens a new incident;
- an Xid 43 (channel reset), 45 (preemptive cleanup) or an informational Xid (154) is a
  *consequence* of the newest incident on its GPU within ``consequence_window`` (``4 * max_gap``
  lines) that holds the Xid its ``caused by previous Xid N`` names; else, for a 43 with a pid, that
  has this pid (or no pid, and is not itself a lone 43/45); else that is not a lone 43/45. With
  none, it is an incident of its own (a process killed under compute-sanitizer leaves a lone 43);
- every other Xid is an incident of its own.

Linear time. Each event is placed with a few dictionary and deque operations, not a scan of the
incidents so far: per GPU, the 13/31 search keeps the newest rank it can no longer reach past (an
incident with a consequence, or one gone stale; staleness is read off a queue of last touches in
time order), the newest incident per pid, and the recent touches for the ``window`` rule; the
consequence search keeps rank-ordered lists per Xid, per pid and of incidents that are not lone
43/45s, dropping from their ends what has gone stale for good. This relies on time moving forward,
so it is made to: a kernel time behind the newest one seen is read as that newest time, unless it
is more than ``EPOCH_BACKSTEP`` behind (a reboot, a second log) -- then, as when the log switches
between lines with and without kernel times, a new *epoch* starts and no incident spans it.
On logs whose times only move forward this gives exactly the grouping of the literal scan
(tests/test_kernlog_incident.py compares the two on generated logs).
"""

from __future__ import annotations

import bisect
import collections
import math
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from faulthunt.kernlog.catalog import classify
from faulthunt.kernlog.pci import normalize_pci
from faulthunt.records.xid import XidEvent

APP_FAULT_XIDS = frozenset({13, 31})
CONSEQUENCE_XIDS = frozenset({43, 45})
#: seconds: a kernel time this far behind the newest one seen starts a new epoch (module docstring)
EPOCH_BACKSTEP = 1.0


class Incident(msgspec.Struct, frozen=True, gc=False):
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
        return _reading(self.root.xid)[1]

    @property
    def addresses(self) -> tuple[int, ...]:
        """Decoded Xid 31 page addresses (undecodable ones are never included)."""
        # dict.fromkeys: first-seen order without a list search per line (a storm of one process's
        # faults can put 10k lines in one incident)
        return tuple(dict.fromkeys(e.mmu.address for e in self.events
                                   if e.mmu is not None and e.mmu.address is not None))

    @property
    def errors(self) -> tuple[str, ...]:
        """SM warp errors of the Xid 13 lines (``Misaligned Address``, ``Out Of Range Address``...)."""
        return tuple(dict.fromkeys(e.gr.error for e in self.events
                                   if e.gr is not None and e.gr.kind in ("warp", "global") and e.gr.error))

    @property
    def t0(self) -> float | None:
        return next((e.ts for e in self.all_events if e.ts is not None), None)

    def describe(self) -> str:
        """One line for humans."""
        # the properties' work done once (a big log's table describes thousands of incidents, and one
        # process's fault storm can put 10k lines in one)
        events = self.events
        if len(events) == 1 and not self.consequences:
            # the commonest incident of a big log: one line, nothing decoded to add (the general
            # way below gives the same text)
            e = events[0]
            if e.mmu is None and e.gr is None:
                pid, process = e.pid, e.process
                who = f"pid {pid}" if pid is not None else "pid unknown"
                if process:
                    who += f" ({process})"
                return f"Xid {e.xid} on {e.pci or '?'}, {who}: {_reading(self.root.xid)[0]}"
        everything = self.all_events
        if len(everything) == 1:  # most incidents of a big log are one line
            e = everything[0]
            pid, process, pci, xids = e.pid, e.process, e.pci, str(e.xid)
        else:
            pid = next((e.pid for e in everything if e.pid is not None), None)
            process = next((e.process for e in everything if e.process), None)
            pci = next((e.pci for e in everything if e.pci), None)
            xids = "/".join(map(str, sorted({e.xid for e in everything})))
        who = f"pid {pid}" if pid is not None else "pid unknown"
        if process:
            who += f" ({process})"
        what = _reading(self.root.xid)[0]
        bits = [f"Xid {xids} on {pci or '?'}, {who}: {what}"]
        if len(events) > 1 or events[0].mmu is not None or events[0].gr is not None:
            addresses = self.addresses
            if addresses:
                bits.append("page " + _some(addresses, "0x%x", ", "))
            undecodable = sum(1 for e in events if e.mmu is not None and not e.mmu.decodable)
            if undecodable:
                bits.append(f"{undecodable} undecodable MMU fault(s), not a user address")
            errors = self.errors
            if errors:
                bits.append(_some(errors, "%s", "; "))
        if self.consequences:
            bits.append("then " + _some([e.xid for e in self.consequences], "Xid %s", ", "))
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


#: Xid -> (title, culprit) of its catalog entry: read for every incident of a big log's table
_READINGS: dict[int, tuple[str, str]] = {}


def _reading(xid: int) -> tuple[str, str]:
    reading = _READINGS.get(xid)
    if reading is None:
        entry = classify(xid)
        reading = _READINGS[xid] = (entry.title, entry.culprit)
    return reading


#: items of a list a one-line description names before saying how many more there are
DESCRIBE_ITEMS = 8


def _some(items: Sequence[object], fmt: str, sep: str) -> str:
    """``items`` as ``fmt`` each, joined by ``sep``; past DESCRIBE_ITEMS, how many more (only the
    items named are formatted: a fault storm's incident has thousands)."""
    text = sep.join([fmt % (item,) for item in items[:DESCRIBE_ITEMS]])
    if len(items) <= DESCRIBE_ITEMS:
        return text
    return f"{text}{sep}... ({len(items) - DESCRIBE_ITEMS} more)"


class _Open:
    """An incident being built: its lines, and what the searches need to know of it."""

    __slots__ = ("rank", "events", "consequences", "last_index", "last_ts", "pid", "xids", "app")

    def __init__(self, rank: int, events: list[XidEvent], consequences: list[XidEvent], last_index: int,
                 last_ts: float | None, pid: int | None, xids: set[int], app: bool) -> None:
        #: its position in the output (incidents are listed in order of their first line)
        self.rank = rank
        self.events = events
        self.consequences = consequences
        self.last_index = last_index
        #: kernel time of its newest line that had one (as the epoch reads it: never behind an earlier one)
        self.last_ts = last_ts
        self.pid = pid
        #: the Xids of ``events`` (for ``caused by previous Xid N``)
        self.xids = xids
        self.app = app

    def freeze(self) -> Incident:
        return Incident(self.events[0], tuple(self.events), tuple(self.consequences))


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


def _by_rank(inc: _Open) -> int:
    return inc.rank


class _Gpu:
    """One GPU's open incidents within an epoch, indexed for the two searches (module docstring)."""

    def __init__(self, small_gap: int) -> None:
        # -- the 13/31 search (application-fault incidents only) --
        #: the newest rank the search cannot reach past: an incident with a consequence, or stale
        self.broken = -1
        #: (clock, incident) for every touch, oldest first: what goes stale next
        self.expiry: collections.deque[tuple[float, _Open]] = collections.deque()
        #: pid -> the newest incident with that pid
        self.app_pid: dict[int, _Open] = {}
        #: pid-less incidents still within ``window`` of their last line
        self.app_nopid: list[_Open] = []
        #: with kernel times: (time, incident) touches, ranks decreasing, so the front is the newest
        #: incident touched within ``window``; without: the last few touches
        self.recent: collections.deque[tuple[float, _Open]] = collections.deque()
        self.last_touched: collections.deque[_Open] = collections.deque(maxlen=small_gap + 1)
        # -- the consequence search (every incident), each list in rank order --
        self.by_xid: dict[int, list[_Open]] = collections.defaultdict(list)
        self.by_pid: dict[int, list[_Open]] = collections.defaultdict(list)
        #: incidents that are not lone 43/45s
        self.causes: list[_Open] = []
        #: ... and have no pid
        self.causes_nopid: list[_Open] = []


def _int_or_none(value: object) -> int | None:
    # events read back from a damaged xid.jsonl may carry any JSON type here
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class IncidentGrouper:
    """Groups events fed in log order (:meth:`add`) into incidents (:meth:`incidents`), in linear time.

    ``steps`` counts the incidents examined while placing events: it stays within a small multiple
    of the number of events whatever their mix (the regression tests assert that, not a time).
    """

    def __init__(self, *, window: float = 0.5, same_pid_window: float = 5.0, consequence_window: float = 60.0,
                 max_gap: int = 16) -> None:
        self.window = window
        self.same_pid_window = same_pid_window
        self.consequence_window = consequence_window
        self.max_gap = max_gap
        self.steps = 0
        #: epochs started after the first (time went back, or lines with/without kernel times switched)
        self.epochs = 0
        self._incs: list[_Open] = []
        self._gpus: dict[str | None, _Gpu] = {}
        #: PCI address as printed -> its GPU in this epoch
        self._gpu_of: dict[str, _Gpu] = {}
        self._timed: bool | None = None
        self._newest = -math.inf
        self._index = -1
        #: PCI address as printed -> the GPU's key (normalize_pci)
        self._keys: dict[str, str | None] = {}

    def add(self, ev: XidEvent) -> None:
        """Place one event (the next in log order)."""
        self._index += 1
        i = self._index
        # (the common types tested first: this runs for every line of a big log)
        ts = ev.ts
        if ts.__class__ is not float or ts - ts != 0.0:  # not a finite float: a finite number, else None
            ts = ts if isinstance(ts, (int, float)) and math.isfinite(ts) else None
        if (ts is not None) is not self._timed or (ts is not None and ts < self._newest - EPOCH_BACKSTEP):
            self._new_epoch(ts is not None)
        if ts is not None:
            if ts < self._newest:
                ts = self._newest
            self._newest = ts
        pci = ev.pci
        # the GPU of this printed address in this epoch: one lookup on every line after its GPU's first
        gpu = self._gpu_of.get(pci) if pci.__class__ is str else None
        if gpu is None:
            gpu = self._gpu(pci)
        pid = ev.pid
        if pid.__class__ is not int and pid is not None:
            pid = _int_or_none(pid)
        xid = ev.xid
        if xid in APP_FAULT_XIDS:
            target = self._fault_target(gpu, ev, pid, ts, i)
            if target is None:
                self._open(gpu, ev, pid, ts, i)
            else:
                self._join(gpu, target, ev, pid, ts, i, False)
        elif (xid == 43 and pid is not None and ev.caused_by is None and pid not in gpu.by_pid
              and not gpu.causes_nopid):
            # the commonest line of a busy shared GPU: the channel reset of a process that never
            # faulted, with nothing pid-less to blame (both searches of _consequence_target would
            # find nothing): an incident of its own, opened as _open opens it
            inc = _Open(len(self._incs), [ev], [], i, ts, pid, {43}, False)
            self._incs.append(inc)
            gpu.by_xid[43].append(inc)
            gpu.by_pid[pid] = [inc]
        elif xid in CONSEQUENCE_XIDS or classify(xid).category == "informational_or_recovery":
            target = self._consequence_target(gpu, ev, pid, ts, i)
            if target is None:
                self._open(gpu, ev, pid, ts, i)
            else:
                self._join(gpu, target, ev, pid, ts, i, True)
        else:
            self._open(gpu, ev, pid, ts, i)

    def _gpu(self, pci: object) -> _Gpu:
        """The GPU of a printed PCI address (normalize_pci: ``3b:00`` and ``0000:3b:00`` are one GPU)."""
        key = None
        if isinstance(pci, str):
            key = self._keys.get(pci)
            if key is None:
                key = self._keys[pci] = normalize_pci(pci)
        gpu = self._gpus.get(key)
        if gpu is None:
            gpu = self._gpus[key] = _Gpu(self.max_gap // 4)
        if pci.__class__ is str:
            self._gpu_of[pci] = gpu
        return gpu

    def incidents(self) -> list[Incident]:
        """The incidents so far, in order of their first line."""
        return [inc.freeze() for inc in self._incs]

    # -- epochs -----------------------------------------------------------------------------------------

    def _new_epoch(self, timed: bool) -> None:
        if self._timed is not None:
            self.epochs += 1
        self._timed = timed
        self._gpus = {}
        self._gpu_of = {}
        self._newest = -math.inf

    # -- the 13/31 search -------------------------------------------------------------------------------

    def _fault_target(self, gpu: _Gpu, ev: XidEvent, pid: int | None, ts: float | None, i: int) -> _Open | None:
        self._expire(gpu, ts, i)
        best: _Open | None = None
        if pid is not None:
            same = gpu.app_pid.get(pid)
            if same is not None and same.rank > gpu.broken:
                best = same
            pidless = self._newest_pidless(gpu, ts, i) if gpu.app_nopid else None
            if pidless is not None and (best is None or pidless.rank > best.rank):
                best = pidless
        elif self._timed:
            recent = gpu.recent
            while recent and ts - recent[0][0] > self.window:  # type: ignore[operator]
                recent.popleft()
                self.steps += 1
            if recent and recent[0][1].rank > gpu.broken:
                best = recent[0][1]
        else:
            for inc in gpu.last_touched:
                self.steps += 1
                if (inc.rank > gpu.broken and i - inc.last_index <= self.max_gap // 4 and _same_burst(inc, ev)
                        and (best is None or inc.rank > best.rank)):
                    best = inc
        return best

    def _expire(self, gpu: _Gpu, ts: float | None, i: int) -> None:
        """Move ``broken`` past every incident that has gone stale by now (staleness lasts)."""
        expiry = gpu.expiry
        if self._timed:
            while expiry and ts - expiry[0][0] > self.same_pid_window:  # type: ignore[operator]
                clock, inc = expiry.popleft()
                self.steps += 1
                if inc.last_ts == clock and inc.rank > gpu.broken:
                    gpu.broken = inc.rank
        else:
            while expiry and i - expiry[0][0] > self.max_gap:
                clock, inc = expiry.popleft()
                self.steps += 1
                if inc.last_index == clock and inc.rank > gpu.broken:
                    gpu.broken = inc.rank

    def _near_small(self, inc: _Open, ts: float | None, i: int) -> bool:
        if self._timed:
            return ts - inc.last_ts <= self.window  # type: ignore[operator]
        return i - inc.last_index <= self.max_gap // 4

    def _newest_pidless(self, gpu: _Gpu, ts: float | None, i: int) -> _Open | None:
        """The newest reachable pid-less incident within ``window``; drops those that can never be again."""
        if not gpu.app_nopid:
            return None
        best: _Open | None = None
        keep: list[_Open] = []
        for inc in gpu.app_nopid:
            self.steps += 1
            # out of reach for good: took a pid, torn down or stale, or too far for a pid-less join
            if inc.pid is not None or inc.rank <= gpu.broken or not self._near_small(inc, ts, i):
                continue
            keep.append(inc)
            if best is None or inc.rank > best.rank:
                best = inc
        gpu.app_nopid = keep
        return best

    # -- the consequence search -------------------------------------------------------------------------

    def _consequence_target(self, gpu: _Gpu, ev: XidEvent, pid: int | None, ts: float | None,
                            i: int) -> _Open | None:
        caused_by = ev.caused_by
        if caused_by.__class__ is not int and caused_by is not None:
            caused_by = _int_or_none(caused_by)
        if caused_by is not None:
            return self._newest_near(gpu.by_xid.get(caused_by), ts, i)
        if ev.xid == 43 and pid is not None:
            # each search only where it has something to look at (a lone 43 of a process that never
            # faulted, the commonest line of a busy shared GPU, has neither)
            same_pid = gpu.by_pid.get(pid)
            same = self._newest_near(same_pid, ts, i) if same_pid else None
            pidless = self._newest_near(gpu.causes_nopid, ts, i, pidless=True) if gpu.causes_nopid else None
            if same is None or (pidless is not None and pidless.rank > same.rank):
                return pidless
            return same
        return self._newest_near(gpu.causes, ts, i)

    def _newest_near(self, incs: list[_Open] | None, ts: float | None, i: int, pidless: bool = False) -> _Open | None:
        """The newest incident of ``incs`` within the consequence window; drops the stale ones at its end.

        Staleness lasts (time only moves forward within an epoch, and a stale incident can be joined
        by nothing), so an incident dropped here is never wanted again.
        """
        while incs:
            inc = incs[-1]
            self.steps += 1
            if self._timed:
                near = ts - inc.last_ts <= self.consequence_window  # type: ignore[operator]
            else:
                near = i - inc.last_index <= self.max_gap * 4
            if near and not (pidless and inc.pid is not None):
                return inc
            incs.pop()
        return None

    # -- placing ----------------------------------------------------------------------------------------

    def _open(self, gpu: _Gpu, ev: XidEvent, pid: int | None, ts: float | None, i: int) -> None:
        xid = ev.xid
        app = xid in APP_FAULT_XIDS
        incs = self._incs
        inc = _Open(len(incs), [ev], [], i, ts, pid, {xid}, app)
        incs.append(inc)
        gpu.by_xid[xid].append(inc)
        if pid is not None:
            gpu.by_pid[pid].append(inc)
        if xid not in CONSEQUENCE_XIDS:
            gpu.causes.append(inc)
            if pid is None:
                gpu.causes_nopid.append(inc)
        if app:
            if pid is None:
                gpu.app_nopid.append(inc)
            else:
                gpu.app_pid[pid] = inc
            self._touched(gpu, inc)

    def _join(self, gpu: _Gpu, inc: _Open, ev: XidEvent, pid: int | None, ts: float | None, i: int,
              consequence: bool) -> None:
        inc.last_index = i
        if ts is not None:
            inc.last_ts = ts
        if consequence:
            inc.consequences.append(ev)
            if inc.app and inc.rank > gpu.broken:
                gpu.broken = inc.rank  # a torn-down fault takes no more lines
        else:
            inc.events.append(ev)
            if ev.xid not in inc.xids:
                inc.xids.add(ev.xid)
                bisect.insort(gpu.by_xid[ev.xid], inc, key=_by_rank)
            if inc.pid is None and pid is not None:
                inc.pid = pid
                newest = gpu.app_pid.get(pid)
                if newest is None or newest.rank < inc.rank:
                    gpu.app_pid[pid] = inc
                bisect.insort(gpu.by_pid[pid], inc, key=_by_rank)
        if inc.app:
            self._touched(gpu, inc)

    def _touched(self, gpu: _Gpu, inc: _Open) -> None:
        timed = self._timed
        # timed: every event of the log has a timestamp (the first one decides), so last_ts is set
        clock: float = inc.last_ts if timed else inc.last_index  # type: ignore[assignment]
        gpu.expiry.append((clock, inc))
        if timed:
            recent = gpu.recent
            while recent and recent[-1][1].rank <= inc.rank:  # a newer touch of a newer incident outranks it
                recent.pop()
            recent.append((clock, inc))
        else:
            gpu.last_touched.append(inc)


def group_incidents(events: Iterable[XidEvent], *, window: float = 0.5, same_pid_window: float = 5.0,
                    consequence_window: float = 60.0, max_gap: int = 16) -> list[Incident]:
    """Group events (in log order) into incidents, in order of their first line (rules: module docstring)."""
    grouper = IncidentGrouper(window=window, same_pid_window=same_pid_window, consequence_window=consequence_window,
                              max_gap=max_gap)
    for ev in events:
        grouper.add(ev)
    return grouper.incidents()


def summarize_incidents(incidents: Sequence[Incident]) -> dict[str, Any]:
    """Counts by culprit and category: the "your bug or the machine" answer at a glance."""
    by_culprit: dict[str, int] = {}
    by_category: dict[str, int] = {}
    for inc in incidents:
        by_culprit[inc.culprit] = by_culprit.get(inc.culprit, 0) + 1
        by_category[inc.category] = by_category.get(inc.category, 0) + 1
    return {"incidents": len(incidents), "by_culprit": by_culprit, "by_category": by_category}
