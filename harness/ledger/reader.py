"""Reading a ledger: JSONL files -> per-pid interval indexes the mapper can query quickly.

Pure apart from :func:`load_ledger` reading files (through the tolerant
:func:`faulthunt.rundir.read_jsonl`: a torn last line after a SIGKILL is skipped and counted).

The index, per pid and per level (driver-level allocations and pool chunks are *containers*;
framework objects inside chunks are *blocks*): allocation lives grouped by start address, the
distinct starts sorted, each group sorted by allocation time, plus a running maximum of the ends.
A point query bisects the starts and walks back only while an earlier group can still reach the
address, so address reuse over time costs a bisect in the group, not a scan of the ledger.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import json
import operator
import dataclasses
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from faulthunt.errors import InputError
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


__all__ = ["no_gc", "Ledger", "PidLedger", "LevelIndex", "Life", "load_ledger", "build_ledger",
           "parse_ledger_text", "KIND_SEGMENT"]
