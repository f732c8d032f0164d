"""The mapper as it was before the columnar reader (commit eed7246), kept as the reference the
differential tests compare against: harness/ledger/reader.py and the address-mapping core of
harness/mapper.py, unchanged apart from imports and the wording of one fix (a pid with no
records). Not part of the package; tests only.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import gc
import json
import operator
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from faulthunt.errors import InputError, UsageError
from faulthunt.records.ledger import (
    EVENT_ALLOC,
    EVENT_FREE,
    EVENT_LAUNCH,
    EVENT_SYNC,
    KIND_BLOCK,
    KIND_DEVICE,
    KIND_SEGMENT,
    PHASE_COMPLETED,
    Allocation,
    format_stack,
    record_problem,
)
from faulthunt.rundir import JsonlRead, parse_jsonl, read_jsonl

_INF = float("inf")
_ADDRESS = operator.attrgetter("address")
_T = operator.itemgetter("t")
_PID_FILE = re.compile(r"^(\d+)")


class Life:
    """One allocation's life inside the index (mutable while the ledger is replayed)."""

    __slots__ = ("address", "end", "size", "kind", "t0", "t1", "rec", "free", "completed", "also")

    def __init__(self, rec: dict[str, Any], kind: str, address: int, size: int, t0: float) -> None:
        self.address = address
        self.size = size
        self.end = address + size
        self.kind = kind
        self.t0 = t0
        self.t1: float | None = None
        self.rec = rec
        self.free: dict[str, Any] | None = None
        self.completed: float | None = None
        self.also: tuple[str, ...] = ()  # a tuple: most lives never get one, and lists cost

    def live_at(self, t: float) -> bool:
        return self.t0 <= t and (self.t1 is None or self.t1 > t)

    def to_allocation(self) -> Allocation:
        rec, free = self.rec, self.free or {}
        return Allocation(
            address=self.address, size=self.size, kind=self.kind, t=self.t0,
            pid=rec.get("pid"), nodeid=rec.get("nodeid"), source=rec.get("source"),
            t_free=self.t1, free_nodeid=free.get("nodeid"), free_source=free.get("source"),
            t_free_completed=self.completed, stack=format_stack(rec.get("stack")),
            free_stack=format_stack(free.get("stack")), also=tuple(self.also),
        )

    def to_json(self) -> dict[str, Any]:
        """The alloc record as recorded, plus what the replay learned (kind, free)."""
        out = dict(self.rec)
        out["kind"] = self.kind
        out["end"] = self.end
        if self.also:
            out["also_recorded_by"] = list(self.also)
        if self.free is not None:
            out["freed"] = {k: v for k, v in self.free.items() if k != "event"}
            if self.free.get("implied"):
                out["freed"]["implied"] = True
        else:
            out["freed"] = None
        if self.completed is not None:
            out["free_completed_t"] = self.completed
        return out


class LevelIndex:
    """Lives of one level (containers or blocks) of one pid, indexed for point queries."""

    def __init__(self, lives: list[Life]) -> None:
        # `lives` arrive in allocation-time order; a stable sort by address keeps that order
        # inside each group, so one pass groups them (no per-group sort).
        ordered = sorted(lives, key=_ADDRESS)
        self.starts: list[int] = []
        self.groups: list[list[Life]] = []
        self.times: list[list[float]] = []
        self.maxend: list[int] = []
        self._count = len(ordered)
        running = -1
        prev = None
        group: list[Life] = []
        times: list[float] = []
        for life in ordered:
            if life.address != prev:
                prev = life.address
                group, times = [life], [life.t0]
                self.starts.append(prev)
                self.groups.append(group)
                self.times.append(times)
                if life.end > running:
                    running = life.end
                self.maxend.append(running)
            else:
                group.append(life)
                times.append(life.t0)
                if life.end > running:
                    running = life.end
                    self.maxend[-1] = running

    def __len__(self) -> int:
        return self._count

    def containing(self, address: int, at: float) -> tuple[list[Life], list[Life]]:
        """(lives containing ``address`` live at ``at``, lives that contained it and were freed by ``at``)."""
        live: list[Life] = []
        freed: list[Life] = []
        i = bisect.bisect_right(self.starts, address) - 1
        while i >= 0 and self.maxend[i] > address:
            group, times = self.groups[i], self.times[i]
            j = bisect.bisect_right(times, at) - 1
            # Lives at one start never overlap in time (the replay closes a live one before the
            # next begins), so the newest one that reaches the address is the answer here.
            while j >= 0:
                life = group[j]
                if life.end > address:
                    (live if life.t1 is None or life.t1 > at else freed).append(life)
                    break
                j -= 1
            i -= 1
        return live, freed

    def _live_in_group(self, i: int, at: float) -> Life | None:
        group, times = self.groups[i], self.times[i]
        j = bisect.bisect_right(times, at) - 1
        if j < 0:
            return None
        life = group[j]
        # Only the newest life begun by `at` can be live: older ones at this start ended first.
        return life if life.t1 is None or life.t1 > at else None

    def nearest_below(self, address: int, at: float) -> Life | None:
        """The live allocation ending at or before ``address`` with the highest end."""
        best: Life | None = None
        i = bisect.bisect_right(self.starts, address) - 1
        while i >= 0:
            if best is not None and self.maxend[i] <= best.end:
                break
            life = self._live_in_group(i, at)
            if life is not None and life.end <= address and (best is None or life.end > best.end):
                best = life
            i -= 1
        return best

    def nearest_above(self, address: int, at: float) -> Life | None:
        """The live allocation starting after ``address`` with the lowest start."""
        i = bisect.bisect_right(self.starts, address)
        while i < len(self.starts):
            life = self._live_in_group(i, at)
            if life is not None:
                return life
            i += 1
        return None

    def _begun_in_group(self, i: int, at: float) -> Life | None:
        j = bisect.bisect_right(self.times[i], at) - 1
        return self.groups[i][j] if j >= 0 else None

    def nearest_below_any(self, address: int, at: float) -> Life | None:
        """Like :meth:`nearest_below`, but freed allocations count too (the newest begun by ``at``)."""
        best: Life | None = None
        i = bisect.bisect_right(self.starts, address) - 1
        while i >= 0:
            if best is not None and self.maxend[i] <= best.end:
                break
            life = self._begun_in_group(i, at)
            if life is not None and life.end <= address and (best is None or life.end > best.end):
                best = life
            i -= 1
        return best

    def nearest_above_any(self, address: int, at: float) -> Life | None:
        """Like :meth:`nearest_above`, but freed allocations count too."""
        i = bisect.bisect_right(self.starts, address)
        while i < len(self.starts):
            life = self._begun_in_group(i, at)
            if life is not None:
                return life
            i += 1
        return None

    def intersecting(self, lo: int, hi: int) -> list[Life]:
        """Every life (any time) overlapping bytes [lo, hi]."""
        out: list[Life] = []
        i = bisect.bisect_right(self.starts, hi) - 1
        while i >= 0 and self.maxend[i] > lo:
            out.extend(lf for lf in self.groups[i] if lf.end > lo)
            i -= 1
        return out

    def any_overlapping(self, lo: int, hi: int, t0: float, t1: float | None) -> bool:
        """Is there a life starting in [lo, hi) whose time span overlaps [t0, t1)?"""
        k = bisect.bisect_left(self.starts, lo)
        end_t = _INF if t1 is None else t1
        while k < len(self.starts) and self.starts[k] < hi:
            for lf in self.groups[k]:
                if lf.t0 < end_t and (lf.t1 is None or lf.t1 > t0):
                    return True
            k += 1
        return False


@dataclasses.dataclass
class PidLedger:
    """Everything recorded for one process, indexed."""

    pid: int | None
    containers: LevelIndex
    blocks: LevelIndex
    launches: list[dict[str, Any]]
    launch_times: list[float]
    sync_times: list[float]
    #: (t, nodeid) at each change of the running test, in time order
    tests: list[tuple[float, str | None]]
    t_first: float
    t_last: float
    #: wall minus monotonic clock, from records carrying both (None when none did)
    mono_offset: float | None
    unmatched_frees: int = 0
    test_times: list[float] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.test_times = [t for t, _ in self.tests]

    def test_at(self, at: float) -> str | None:
        """The test running at ``at`` (the nodeid of the last record at or before it)."""
        i = bisect.bisect_right(self.test_times, at) - 1
        return self.tests[i][1] if i >= 0 else None


@dataclasses.dataclass
class Ledger:
    """A loaded ledger: per-pid indexes, plus what could not be read."""

    pids: dict[int | None, PidLedger]
    records: int
    #: malformed lines and records with a problem (torn last lines included); never fatal
    skipped: int
    torn_files: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    #: why records were skipped, a few examples (record_problem text)
    problems: tuple[str, ...] = ()

    @property
    def t_last(self) -> float | None:
        ends = [p.t_last for p in self.pids.values()]
        return max(ends) if ends else None

    def pid(self, pid: int | None) -> PidLedger | None:
        return self.pids.get(pid)


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector (reference counting still frees everything).

    Loading makes millions of long-lived objects and no cycles; the cyclic collector would
    rescan them again and again (it more than doubled load time of a 1M-record ledger). Mapping
    against a loaded ledger allocates small results, and each collection they trigger rescans
    the whole ledger too (two thirds of mapping 10,000 addresses against 1M records).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _level_of(kind: str) -> int:
    return 1 if kind == KIND_BLOCK else 0


def build_ledger(records: Iterable[dict[str, Any]], *, skipped: int = 0,
                 files: tuple[str, ...] = (), torn_files: tuple[str, ...] = ()) -> Ledger:
    """Replay records (any order; sorted by ``t`` per pid here) into a :class:`Ledger`. Pure."""
    with no_gc():
        return _build(records, skipped, files, torn_files)


def _build(records: Iterable[dict[str, Any]], skipped: int, files: tuple[str, ...],
           torn_files: tuple[str, ...]) -> Ledger:
    by_pid: dict[int | None, list[dict[str, Any]]] = {}
    problems: list[str] = []
    count = 0
    for rec in records:
        count += 1
        if _well_formed(rec):
            pid = rec.get("pid")
            by_pid.setdefault(pid if type(pid) is int else None, []).append(rec)
            continue
        skipped += 1
        if len(problems) < 5:
            problems.append(record_problem(rec) or "malformed record")
    pids = {pid: _replay(pid, recs) for pid, recs in by_pid.items()}
    return Ledger(pids, count, skipped, torn_files, files, tuple(problems))


_NUM = (int, float)
_KINDS_OK = (None, KIND_DEVICE, KIND_SEGMENT, KIND_BLOCK)


def _well_formed(rec: dict[str, Any]) -> bool:
    """Fast check of the common case; anything it rejects goes to record_problem for the why."""
    if type(rec.get("t")) not in _NUM:
        return False
    event = rec.get("event")
    if event == EVENT_ALLOC:
        a, n = rec.get("address"), rec.get("size")
        return type(a) is int and a >= 0 and type(n) is int and n >= 0 and rec.get("kind") in _KINDS_OK
    if event == EVENT_FREE:
        a = rec.get("address")
        return type(a) is int and a >= 0
    if event == EVENT_LAUNCH:
        return type(rec.get("kernel")) is str
    return record_problem(rec) is None


def _replay(pid: int | None, recs: list[dict[str, Any]]) -> PidLedger:
    recs.sort(key=_T)  # stable: equal times keep file order
    lives: tuple[list[Life], list[Life]] = ([], [])
    live_at: tuple[dict[int, Life], dict[int, Life]] = ({}, {})
    last_closed: tuple[dict[int, Life], dict[int, Life]] = ({}, {})
    launches: list[dict[str, Any]] = []
    syncs: list[float] = []
    tests: list[tuple[float, str | None]] = []
    current_test: object = object()
    unmatched = 0
    mono_offset: float | None = None
    alloc_, free_, launch_, sync_, block_ = EVENT_ALLOC, EVENT_FREE, EVENT_LAUNCH, EVENT_SYNC, KIND_BLOCK
    for rec in recs:
        event = rec["event"]
        t = rec["t"]
        if type(t) is not float:
            t = float(t)
        nodeid = rec.get("nodeid")
        if nodeid != current_test:
            tests.append((t, nodeid))
            current_test = nodeid
        if mono_offset is None and isinstance(rec.get("t_mono"), (int, float)):
            mono_offset = t - float(rec["t_mono"])
        if event == alloc_:
            kind = rec.get("kind") or KIND_DEVICE
            level = 1 if kind == block_ else 0
            addr = rec["address"]
            old = live_at[level].get(addr)
            if old is not None:
                if old.size == rec["size"]:
                    # The same allocation seen by two sources (CUPTI and a framework hook).
                    src = rec.get("source")
                    if src and src != old.rec.get("source") and src not in old.also:
                        old.also = (*old.also, src)
                    if kind == KIND_SEGMENT:
                        old.kind = KIND_SEGMENT
                    if old.rec.get("stack") is None and rec.get("stack") is not None:
                        old.rec = {**old.rec, "stack": rec["stack"]}
                    continue
                # A new allocation where one is still live: its free was never recorded.
                old.t1 = t
                old.free = {"t": t, "implied": True, "source": "replay"}
                last_closed[level][addr] = old
            life = Life(rec, kind, addr, rec["size"], t)
            lives[level].append(life)
            live_at[level][addr] = life
        elif event == free_:
            addr = rec["address"]
            kind = rec.get("kind")
            order = (1,) if kind == KIND_BLOCK else (0,) if kind in (KIND_DEVICE, KIND_SEGMENT) else (0, 1)
            for level in order:
                life = live_at[level].pop(addr, None)
                if life is not None:
                    life.t1 = t
                    life.free = rec
                    if rec.get("phase") in (None, PHASE_COMPLETED):
                        life.completed = t
                    last_closed[level][addr] = life
                    break
            else:
                # Deferred driver free after the program's own free: annotate, don't double count.
                for level in order:
                    closed = last_closed[level].get(addr)
                    if closed is not None and closed.completed is None:
                        closed.completed = t
                        break
                else:
                    unmatched += 1
        elif event == launch_:
            launches.append(rec)
        elif event == sync_:
            syncs.append(t)
    t_first = float(recs[0]["t"]) if recs else 0.0
    t_last = float(recs[-1]["t"]) if recs else 0.0
    return PidLedger(
        pid=pid, containers=LevelIndex(lives[0]), blocks=LevelIndex(lives[1]),
        launches=launches, launch_times=[float(r["t"]) for r in launches], sync_times=syncs,
        tests=tests, t_first=t_first, t_last=t_last, mono_offset=mono_offset,
        unmatched_frees=unmatched,
    )


def _ledger_files(source: Path | Iterable[Path]) -> list[Path]:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            return sorted(path.glob("*.jsonl"))
        if not path.exists():
            raise InputError(f"ledger {path} does not exist",
                             fix="pass --ledger FILE|DIR of a run (run_dir/ledger) or --run RUN")
        return [path]
    return [Path(p) for p in source]


def _pid_from_name(path: Path) -> int | None:
    m = _PID_FILE.match(path.name)
    return int(m.group(1)) if m else None


def read_ledger_file(path: Path) -> JsonlRead:
    """Read one ledger file: the whole file in one JSON parse when every line is good (ledgers
    run to a million lines), else line by line through the tolerant reader."""
    try:
        data = path.read_bytes()
    except OSError:
        return read_jsonl(path)  # raises the RunDirError with the reason
    if data.endswith(b"\0"):  # the unwritten reserve of a writer that died (writer.seal)
        data = data.rstrip(b"\0")
    text = data.decode("utf-8", "replace")
    if text.endswith("\n"):
        # One parse for the whole file; a blank, torn or junk line breaks it and we fall back.
        try:
            objs = json.loads("[" + text[:-1].replace("\n", ",") + "]")
        except ValueError:
            objs = None
        if (objs is not None and len(objs) == text.count("\n")
                and all(type(o) is dict for o in objs)):
            return JsonlRead(tuple(objs), 0, False)
    return parse_jsonl(text)


def iter_file_records(path: Path) -> tuple[Iterator[dict[str, Any]], JsonlRead]:
    got = read_ledger_file(path)
    pid = _pid_from_name(path)

    if pid is None:
        return iter(got.records), got
    return iter([rec if "pid" in rec else {**rec, "pid": pid} for rec in got.records]), got


def load_ledger(source: Path | Iterable[Path]) -> Ledger:
    """Load a ledger directory (every ``*.jsonl``) or files; malformed lines are skipped, counted.

    A record without ``pid`` takes it from its file name (``<pid>.jsonl``).
    """
    files = _ledger_files(source)
    all_records: list[dict[str, Any]] = []
    skipped = 0
    torn: list[str] = []
    with no_gc():
        for path in files:
            gen, got = iter_file_records(path)
            all_records.extend(gen)
            skipped += got.skipped
            if got.torn_tail:
                torn.append(str(path))
    return build_ledger(all_records, skipped=skipped, files=tuple(str(p) for p in files),
                        torn_files=tuple(torn))


def parse_ledger_text(text: str) -> Ledger:
    """A ledger from JSONL text (pure; for tests and pipes)."""
    got = parse_jsonl(text)
    return build_ledger(got.records, skipped=got.skipped)



# --- the mapping core (harness/mapper.py) ---

PAGE_SIZE = 4096
#: addresses below this are a null pointer plus an offset (the first 64 KiB are never mapped)
NULL_PAGE_LIMIT = 0x10000
#: an overrun this close to an allocation is attributed to it whatever its size (2 MiB: the
#: driver's large-page granularity; overruns inside it are silent on the GPU, see device notes)
NEAR_BYTES = 2 << 20
#: launches listed when no synchronization was recorded before the fault
LAUNCHES_WITHOUT_SYNC = 5
MAX_LAUNCHES = 20

VERDICTS = ("inside", "past_end", "before_start", "freed", "pool_slack", "unmapped", "null_page")
#: which piece of a page names the page: the likeliest explanation of a fault comes first
_PAGE_PRIORITY = ("freed", "past_end", "before_start", "pool_slack", "null_page", "unmapped", "inside")
#: which pid explains an address best when no pid is given
_PID_PRIORITY = ("inside", "pool_slack", "freed", "past_end", "before_start", "null_page", "unmapped")

_HEX = re.compile(r"^0[xX][0-9a-fA-F_]+$")
_DEC = re.compile(r"^[0-9_]+$")


def parse_address(text: str) -> int:
    """``0x7f7d_dbe00000`` (the Xid form), ``0x7f7ddbe00000`` or decimal -> int."""
    s = text.strip()
    if _HEX.match(s) and s.strip("_")[2:].replace("_", ""):
        return int(s[2:].replace("_", ""), 16)
    if _DEC.match(s) and s.replace("_", ""):
        return int(s.replace("_", ""), 10)
    raise UsageError(f"not an address: {text!r}",
                     fix="give 0x-prefixed hex (0x7f7d_dbe00000 as Xid prints it) or decimal")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What one fault address is, against one process's ledger at one time."""

    address: int
    page: bool
    pid: int | None
    at: float | None
    verdict: str
    #: the allocation the verdict names (alloc record + replay facts: kind, end, freed), or None
    allocation: dict[str, Any] | None
    #: address minus allocation start: an int for a byte, (lo, hi) for a page; None when no allocation
    offset: int | tuple[int, int] | None
    #: the pool chunk around a block / the slack (pool_slack, inside a block, freed block)
    container: dict[str, Any] | None = None
    #: nearest live allocations {"allocation", "distance"} (distance: bytes; (lo, hi) for a page)
    below: dict[str, Any] | None = None
    above: dict[str, Any] | None = None
    #: kernels this pid launched since its last synchronization before ``at`` (newest last)
    launches: tuple[dict[str, Any], ...] = ()
    launches_since: float | None = None
    nodeid: str | None = None
    #: for a page: every piece [lo, hi] of it with its own verdict
    pieces: tuple[dict[str, Any], ...] = ()
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``faulthunt map --json`` object."""
        def off(v: int | tuple[int, int] | None) -> int | list[int] | None:
            return list(v) if isinstance(v, tuple) else v

        out: dict[str, Any] = {
            "address": hex(self.address),
            "address_int": self.address,
            "page": self.page,
            "pid": self.pid,
            "at": self.at,
            "verdict": self.verdict,
            "allocation": self.allocation,
            "offset": off(self.offset),
            "container": self.container,
            "nearest": {"below": _near_json(self.below), "above": _near_json(self.above)},
            "launches": list(self.launches),
            "launches_since": self.launches_since,
            "nodeid": self.nodeid,
            "note": self.note,
        }
        if self.page:
            out["page_range"] = [hex(self.address), hex(self.address + PAGE_SIZE - 1)]
            out["pieces"] = list(self.pieces)
        return out


def _near_json(near: dict[str, Any] | None) -> dict[str, Any] | None:
    if near is None:
        return None
    d = near["distance"]
    return {"allocation": near["allocation"], "distance": list(d) if isinstance(d, tuple) else d}


# --- classification of one byte -------------------------------------------------------------

@dataclasses.dataclass
class _Byte:
    verdict: str
    life: Life | None = None
    container: Life | None = None
    below: Life | None = None
    above: Life | None = None
    #: for ``freed`` outside the freed allocation's bytes: where the address is relative to it
    detail: str | None = None

    def key(self) -> tuple[str, int, str | None]:
        return (self.verdict, id(self.life), self.detail)


def _smallest(lives: list[Life]) -> Life:
    return min(lives, key=lambda lf: (lf.size, -lf.t0))


def _is_pool(pl: PidLedger, c: Life) -> bool:
    return c.kind == KIND_SEGMENT or pl.blocks.any_overlapping(c.address, c.end, c.t0, c.t1)


def _reach(life: Life) -> int:
    return max(NEAR_BYTES, life.size)


def _nearest(pl: PidLedger, a: int, at: float) -> tuple[Life | None, Life | None]:
    below = pl.containers.nearest_below(a, at)
    above = pl.containers.nearest_above(a, at)
    # Ledgers with only framework blocks (no driver-level source) still get neighbours.
    if len(pl.blocks):
        b2 = pl.blocks.nearest_below(a, at)
        a2 = pl.blocks.nearest_above(a, at)
        if b2 is not None and (below is None or b2.end > below.end):
            below = b2
        if a2 is not None and (above is None or a2.address < above.address):
            above = a2
    return below, above


def _classify(pl: PidLedger, a: int, at: float) -> _Byte:
    if a < NULL_PAGE_LIMIT:
        return _Byte("null_page")
    blive, bfreed = pl.blocks.containing(a, at)
    clive, cfreed = pl.containers.containing(a, at)
    if blive:
        return _Byte("inside", _smallest(blive), _smallest(clive) if clive else None)
    if clive:
        c = _smallest(clive)
        # A block freed back into a live chunk: the driver still maps it, so no Xid, but it is
        # a use after free all the same.
        fb = [b for b in bfreed if b.address >= c.address and b.end <= c.end and (b.t1 or 0) >= c.t0]
        if fb:
            return _Byte("freed", max(fb, key=lambda lf: lf.t1 or 0.0), c)
        if _is_pool(pl, c):
            below = pl.blocks.nearest_below(a, at)
            above = pl.blocks.nearest_above(a, at)
            return _Byte("pool_slack", c, c,
                         below if below is not None and below.address >= c.address else None,
                         above if above is not None and above.end <= c.end else None)
        return _Byte("inside", c)
    freed = bfreed + cfreed
    below, above = _nearest(pl, a, at)
    if freed:
        return _Byte("freed", max(freed, key=lambda lf: lf.t1 or 0.0), None, below, above)
    d_below = a - below.end if below is not None else None
    d_above = above.address - a if above is not None else None
    near_below = below is not None and d_below is not None and d_below < _reach(below)
    near_above = above is not None and d_above is not None and d_above <= _reach(above)
    # Freed neighbours: an overrun of an allocation that was freed by `at` (at the end of a ledger
    # every allocation of a process that exited cleanly is freed) is a use of freed memory; it is
    # named "freed" with where it lies, never "unmapped" with no neighbours.
    fbelow, fabove = _nearest_any(pl, a, at)
    fd_below = a - fbelow.end if fbelow is not None and _freed_by(fbelow, at) else None
    fd_above = fabove.address - a if fabove is not None and _freed_by(fabove, at) else None
    cands: list[tuple[int, int, str, Life]] = []
    if near_below:
        cands.append((d_below or 0, 0, "past_end", below))  # type: ignore[arg-type]
    if near_above:
        cands.append((d_above or 0, 1, "before_start", above))  # type: ignore[arg-type]
    if fd_below is not None and fd_below < _reach(fbelow):  # type: ignore[arg-type]
        cands.append((fd_below, 2, "freed_past_end", fbelow))  # type: ignore[arg-type]
    if fd_above is not None and fd_above <= _reach(fabove):  # type: ignore[arg-type]
        cands.append((fd_above, 3, "freed_before_start", fabove))  # type: ignore[arg-type]
    nb = below if below is not None else fbelow
    na = above if above is not None else fabove
    if cands:
        _d, _o, what, life = min(cands, key=lambda c: (c[0], c[1]))
        if what == "past_end":
            return _Byte("past_end", life, None, nb, na)
        if what == "before_start":
            return _Byte("before_start", life, None, nb, na)
        return _Byte("freed", life, None, nb, na, detail=what[len("freed_"):])
    return _Byte("unmapped", None, None, nb, na)


def _freed_by(life: Life, at: float) -> bool:
    return life.t0 <= at and life.t1 is not None and life.t1 <= at


def _detail_note(b: _Byte, lo: int, hi: int) -> str | None:
    if not b.detail or b.life is None:
        return None
    lf = b.life
    off = f"{lo - lf.address}" if lo == hi else f"{lo - lf.address}..{hi - lf.address}"
    where = "past its end" if b.detail == "past_end" else "before its start"
    return f"offset {off} of the {lf.size}-byte allocation ({where}), which was freed by then"


def _nearest_any(pl: PidLedger, a: int, at: float) -> tuple[Life | None, Life | None]:
    """Nearest allocations on both sides, freed ones included (begun by ``at``, else at any time)."""
    out: list[Life | None] = []
    for fn in ("nearest_below_any", "nearest_above_any"):
        best: Life | None = None
        for when in (at, float("inf")):
            for index in (pl.containers, pl.blocks):
                if not len(index):
                    continue
                got = getattr(index, fn)(a, when)
                if got is None:
                    continue
                if best is None or (got.end > best.end if fn == "nearest_below_any" else got.address < best.address):
                    best = got
            if best is not None:
                break
        out.append(best)
    return out[0], out[1]


def _offset(b: _Byte, lo: int, hi: int) -> int | tuple[int, int] | None:
    if b.verdict == "null_page":
        return lo if lo == hi else (lo, hi)
    if b.life is None:
        return None
    start = b.life.address
    return lo - start if lo == hi else (lo - start, hi - start)


def _distances(b: _Byte, lo: int, hi: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    below = above = None
    if b.below is not None:
        d = (lo - b.below.end, hi - b.below.end)
        below = {"allocation": b.below.to_json(), "distance": d[0] if lo == hi else d}
    if b.above is not None:
        d = (b.above.address - hi, b.above.address - lo)
        above = {"allocation": b.above.to_json(), "distance": d[0] if lo == hi else d}
    return below, above


def _pieces(pl: PidLedger, lo: int, hi: int, at: float) -> list[tuple[int, int, _Byte]]:
    """Split [lo, hi] where the verdict (or its allocation) changes."""
    edges = {lo, hi + 1}
    for index in (pl.containers, pl.blocks):
        for life in index.intersecting(lo, hi):
            for e in (life.address, life.end):
                if lo < e <= hi:
                    edges.add(e)
    if lo < NULL_PAGE_LIMIT <= hi:
        edges.add(NULL_PAGE_LIMIT)
    cuts = sorted(edges)
    out: list[tuple[int, int, _Byte]] = []
    for s, e in zip(cuts, cuts[1:]):
        _split(pl, s, e - 1, at, out)
    return out


def _split(pl: PidLedger, lo: int, hi: int, at: float, out: list[tuple[int, int, _Byte]]) -> None:
    # Between allocation edges the verdict changes only where a reach ends (past_end ->
    # unmapped -> before_start), monotonically; binary search finds each change exactly.
    while lo <= hi:
        first = _classify(pl, lo, at)
        last = _classify(pl, hi, at)
        if first.key() == last.key():
            _append(out, lo, hi, first)
            return
        good, bad = lo, hi  # classify(good) has first's key, classify(bad) does not
        while bad - good > 1:
            mid = (good + bad) // 2
            if _classify(pl, mid, at).key() == first.key():
                good = mid
            else:
                bad = mid
        _append(out, lo, good, first)
        lo = bad


def _append(out: list[tuple[int, int, _Byte]], lo: int, hi: int, b: _Byte) -> None:
    if out and out[-1][1] + 1 == lo and out[-1][2].key() == b.key():
        out[-1] = (out[-1][0], hi, out[-1][2])
    else:
        out.append((lo, hi, b))


# --- context: launches, test -----------------------------------------------------------------

def _launch_json(rec: dict[str, Any]) -> dict[str, Any]:
    keep = ("kernel", "t", "nodeid", "correlation_id", "stack", "source", "grid", "block")
    return {k: rec[k] for k in keep if k in rec}


def launches_before(pl: PidLedger, at: float) -> tuple[tuple[dict[str, Any], ...], float | None, str | None]:
    """Kernels launched since the last synchronization at or before ``at``; (launches, since, note)."""
    end = bisect.bisect_right(pl.launch_times, at)
    s = bisect.bisect_right(pl.sync_times, at) - 1
    note = None
    if s >= 0:
        since: float | None = pl.sync_times[s]
        start = bisect.bisect_right(pl.launch_times, since)
    else:
        since = None
        start = max(0, end - LAUNCHES_WITHOUT_SYNC)
        if end:
            note = (f"no synchronization recorded before the fault: the last {end - start} "
                    "launch(es) are listed")
    if end - start > MAX_LAUNCHES:
        note = f"{end - start} launches since the last synchronization; the newest {MAX_LAUNCHES} are listed"
        start = end - MAX_LAUNCHES
    return tuple(_launch_json(r) for r in pl.launches[start:end]), since, note


# --- the public mapping --------------------------------------------------------------------

def _map_in_pid(pl: PidLedger, address: int, at: float | None, page: bool) -> Verdict:
    when = pl.t_last if at is None else at
    launches, since, lnote = launches_before(pl, when)
    notes = [lnote] if lnote else []
    if page:
        lo = address - address % PAGE_SIZE
        hi = lo + PAGE_SIZE - 1
        pieces = _pieces(pl, lo, hi, when)
        rank = {v: i for i, v in enumerate(_PAGE_PRIORITY)}
        plo, phi, main = min(pieces, key=lambda p: (rank[p[2].verdict], p[0]))
        dn = _detail_note(main, plo, phi)
        if dn:
            notes.append(dn)
        if len(pieces) > 1:
            notes.append(f"the page spans {len(pieces)} verdicts; the likeliest is shown, all are in pieces")
        piece_json = []
        for s, e, b in pieces:
            bl, ab = _distances(b, s, e)
            off = _offset(b, s, e)
            piece_json.append({"range": [hex(s), hex(e)], "verdict": b.verdict,
                               "allocation": b.life.to_json() if b.life else None,
                               "offset": list(off) if isinstance(off, tuple) else off,
                               "nearest": {"below": _near_json(bl), "above": _near_json(ab)}})
        below, above = _distances(main, plo, phi)
        offset = _offset(main, plo, phi)
        if isinstance(offset, int):
            offset = (offset, offset)
        return Verdict(lo, True, pl.pid, when, main.verdict,
                       main.life.to_json() if main.life else None, offset,
                       main.container.to_json() if main.container else None, below, above,
                       launches, since, pl.test_at(when), tuple(piece_json),
                       "; ".join(notes) or None)
    b = _classify(pl, address, when)
    dn = _detail_note(b, address, address)
    if dn:
        notes.append(dn)
    below, above = _distances(b, address, address)
    return Verdict(address, False, pl.pid, when, b.verdict, b.life.to_json() if b.life else None,
                   _offset(b, address, address), b.container.to_json() if b.container else None,
                   below, above, launches, since, pl.test_at(when), (), "; ".join(notes) or None)


def map_address(ledger: Ledger, address: int, *, pid: int | None = None, at: float | None = None,
                page: bool = False) -> Verdict:
    """Map one address against ``ledger`` (pure).

    ``pid``: the faulting process (GPU virtual addresses are per process); without it every pid
    in the ledger is tried and the best explanation wins (the note says so). ``at``: wall-clock
    time of the fault (default: the end of that pid's ledger). ``page``: ``address`` names a 4 KiB
    page (Xid 31), not a byte. Raises :class:`InputError` when the ledger has no such pid.
    """
    if address < 0:
        raise UsageError(f"negative address {address}", fix="give the address as Xid or compute-sanitizer printed it")
    if pid is not None:
        pl = ledger.pid(pid)
        if pl is None:
            known = ", ".join(str(p) for p in sorted(k for k in ledger.pids if k is not None)) or "none"
            raise InputError(f"the ledger has no records for pid {pid} (pids in it: {known})",
                             fix="leave --pid out to try every pid in the ledger, or pass one listed; "
                                 "a faulting process missing from the list was not one of the run's, "
                                 "ran with the ledger off (faulthunt stress --ledger auto, "
                                 "FAULTHUNT_LEDGER), or never reached a call the ledger sees (a "
                                 "process leaves no ledger file until its first record)")
        return _map_in_pid(pl, address, at, page)
    if not ledger.pids:
        raise InputError("the ledger is empty: no allocation records to map against",
                         fix="run with the ledger on (faulthunt stress --ledger auto) on a machine with a GPU")
    results = [_map_in_pid(pl, address, at, page) for pl in ledger.pids.values()]
    if len(results) == 1:
        return results[0]
    rank = {v: i for i, v in enumerate(_PID_PRIORITY)}
    results.sort(key=lambda v: rank[v.verdict])
    best = results[0]
    same = [v.pid for v in results if v.verdict == best.verdict and v.verdict != "unmapped"]
    note = f"no pid given: checked {len(results)} pids, best match in pid {best.pid}"
    if len(same) > 1:
        note += f"; pids {', '.join(map(str, same))} also give {best.verdict}: pass --pid"
    return dataclasses.replace(best, note="; ".join(n for n in (best.note, note) if n))


