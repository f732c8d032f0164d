"""Reading a ledger: JSONL files -> per-pid interval indexes the mapper can query quickly.

Read-only: files are opened for reading and never changed. A dead memory-mapped writer's file
ends in NUL bytes (its unwritten reserve) and perhaps a torn line; both are read past here (the
NULs ignored, the torn line skipped and counted) instead of cutting the file.

Files are read in chunks and each line is decoded by msgspec into the few fields the replay
needs (event, time, pid, test, address, size, kind, phase, source, kernel, monotonic time); a
line it cannot decode goes through :mod:`json` and the same checks as a hand-made record, so a
bad line is skipped and counted with its reason, never fatal. What is kept is columns (arrays),
not records: a life is a row of :class:`~faulthunt.ledger.index.LevelIndex`, and a whole record
(its stack, its other fields) is read back from its file at its byte offset only when a verdict
shows it. Records of unknown events are skipped and counted by reason (``Ledger.skipped_by``);
unknown sources are ordinary records.

Per process, records are replayed in time order (stable: equal times keep file order) into
allocation lives: the same allocation seen by two sources (CUPTI and a framework hook) is merged
(``also_recorded_by``), an allocation at a still-live address closes the old one (``implied``
free), a second free of an already-freed address annotates it (``free_completed_t``).
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import re
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, islice
from operator import ne
from pathlib import Path
from typing import Any

import msgspec

from faulthunt.errors import InputError
from faulthunt.ledger.index import LevelIndex
from faulthunt.records.ledger import (
    EVENT_ALLOC,
    EVENT_FREE,
    EVENT_LAUNCH,
    EVENT_NOTE,
    EVENT_SYNC,
    KIND_BLOCK,
    KIND_DEVICE,
    KIND_SEGMENT,
    PHASE_COMPLETED,
    Allocation,
    format_stack,
    record_problem,
)
from faulthunt.rundir import JsonlRead, RunDirError, parse_jsonl

_PID_FILE = re.compile(r"^(\d+)")
#: bytes read from a file at a time (bounded memory whatever the file's size)
CHUNK = 8 << 20
#: a "line" longer than this (no newline in sight) is junk: skipped without being held
MAX_LINE = 64 << 20
_NL = re.compile(b"\n")
#: two JSON values on one line: msgspec's line decoder would take both, a JSONL reader neither
_TWO_ON_A_LINE = re.compile(rb"}[ \t\r]*{")
_OFFSET_BITS = 40
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1
_U64 = 1 << 64

# event codes in the columns
_ALLOC, _FREE, _LAUNCH, _SYNC, _OTHER = 0, 1, 2, 3, 4
# alloc flag: the kind; free flag: which levels it may close (+4 when it completes the free)
_KIND_CODE = {None: 0, KIND_DEVICE: 0, KIND_SEGMENT: 1, KIND_BLOCK: 2}
_KIND_NAME = (KIND_DEVICE, KIND_SEGMENT, KIND_BLOCK)
_FREE_CONTAINERS, _FREE_BLOCKS, _FREE_EITHER, _COMPLETES = 0, 1, 2, 4
_FREED_IMPLIED = -2


class _Rec(msgspec.Struct, gc=False):
    """The fields of a ledger line the replay reads; anything else stays in the file."""

    event: str
    t: float
    pid: int | None | msgspec.UnsetType = msgspec.UNSET
    nodeid: str | None = None
    source: str | None = None
    address: int | None = None
    size: int | None = None
    kind: str | None = None
    phase: str | None = None
    kernel: str | None = None
    t_mono: float | None = None


_DECODER = msgspec.json.Decoder(_Rec)
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


# --- reading -------------------------------------------------------------------------------------

class _Columns:
    """One process's records as read, in file order (the replay sorts them by time)."""

    __slots__ = ("t", "ev", "ref", "addr", "size", "flag", "nid", "src", "mono")

    def __init__(self) -> None:
        self.t = array("d")
        self.ev = array("b")
        self.ref = array("q")
        self.addr = array("Q")
        self.size = array("Q")
        self.flag = array("b")
        self.nid: list[Any] = []
        #: alloc: its source (merging); launch: its kernel; else None
        self.src: list[Any] = []
        #: (t, order, t_mono) of the earliest record carrying a monotonic time
        self.mono: tuple[float, int, float] | None = None


class _Collector:
    """Everything read so far, per pid; counts of what was skipped and why."""

    def __init__(self) -> None:
        self.pids: dict[int | None, _Columns] = {}
        self.records = 0
        self.skipped = 0
        self.problems: list[str] = []
        self.skipped_by: dict[str, int] = {}
        self._strings: dict[str, str] = {}

    def columns(self, pid: int | None) -> _Columns:
        cols = self.pids.get(pid)
        if cols is None:
            cols = self.pids[pid] = _Columns()
        return cols

    def problem(self, why: str) -> None:
        self.skipped += 1
        if len(self.problems) < 5:
            self.problems.append(why)
        key = why if len(self.skipped_by) < 50 or why in self.skipped_by else "other"
        self.skipped_by[key] = self.skipped_by.get(key, 0) + 1

    def add_dict(self, rec: dict[str, Any], ref: int) -> None:
        """A record as :mod:`json` gives it (hand-made ledgers, lines msgspec would not take)."""
        self.records += 1
        why = _dict_problem(rec)
        if why is not None:
            self.problem(why)
            return
        pid = rec.get("pid")
        cols = self.columns(pid if type(pid) is int else None)
        event = rec["event"]
        t = float(rec["t"])
        addr = size = flag = 0
        src = None
        if event == EVENT_ALLOC:
            code, addr, size, src = _KIND_CODE[rec.get("kind")], rec["address"], rec["size"], rec.get("source")
            flag = code
            ev = _ALLOC
        elif event == EVENT_FREE:
            ev, addr = _FREE, rec["address"]
            flag = _free_flag(rec.get("kind"), rec.get("phase"))
        elif event == EVENT_LAUNCH:
            ev, src = _LAUNCH, rec["kernel"]
        else:
            ev = _SYNC if event == EVENT_SYNC else _OTHER
        tm = rec.get("t_mono")
        if isinstance(tm, (int, float)):
            self._mono(cols, t, float(tm))
        nid = rec.get("nodeid")
        self._append(cols, t, ev, ref, addr, size, flag, self._intern(nid), self._intern(src))

    def _intern(self, s: Any) -> Any:
        if type(s) is str:
            return self._strings.setdefault(s, s)
        return s

    @staticmethod
    def _mono(cols: _Columns, t: float, tm: float) -> None:
        if cols.mono is None or t < cols.mono[0]:
            cols.mono = (t, len(cols.t), tm)

    @staticmethod
    def _append(cols: _Columns, t: float, ev: int, ref: int, addr: int, size: int, flag: int,
                nid: Any, src: Any) -> None:
        cols.t.append(t)
        cols.ev.append(ev)
        cols.ref.append(ref)
        cols.addr.append(addr)
        cols.size.append(size)
        cols.flag.append(flag)
        cols.nid.append(nid)
        cols.src.append(src)

    def add_lines(self, objs: list[_Rec], starts: Sequence[int], base: int, buf: bytes,
                  file_pid: int | None) -> None:
        """Decoded lines of one chunk (``starts``: each line's offset in ``buf``; ``base``: the
        reference of the chunk's first byte). The common, well-typed record is appended here;
        anything else goes through :meth:`add_dict` from its own text."""
        unset = msgspec.UNSET
        strings = self._strings
        intern = strings.setdefault
        kind_code = _KIND_CODE
        cur_pid: Any = unset
        for k, r in enumerate(objs):
            pid = r.pid
            if pid is unset:
                pid = file_pid
            if pid is not cur_pid and pid != cur_pid:
                cur_pid = pid
                cols = self.columns(pid)
                t_, ev_, ref_, addr_, size_, flag_ = (cols.t.append, cols.ev.append, cols.ref.append,
                                                      cols.addr.append, cols.size.append, cols.flag.append)
                nid_, src_ = cols.nid.append, cols.src.append
            event = r.event
            if event == "alloc":
                a, n, code = r.address, r.size, kind_code.get(r.kind, -1)
                if a is None or n is None or code < 0 or a < 0 or n < 0 or a + n >= _U64:
                    self._slow(buf, starts, k, base, file_pid)
                    continue
                src = r.source
                ev, flag = _ALLOC, code
                if src is not None:
                    src = intern(src, src)
            elif event == "free":
                a = r.address
                if a is None or a < 0 or a >= _U64:
                    self._slow(buf, starts, k, base, file_pid)
                    continue
                n, src, ev = 0, None, _FREE
                flag = _free_flag(r.kind, r.phase)
            elif event == "launch":
                src = r.kernel
                if src is None:
                    self._slow(buf, starts, k, base, file_pid)
                    continue
                a = n = flag = 0
                ev = _LAUNCH
                src = intern(src, src)
            elif event == "sync" or event == "note":
                a = n = flag = 0
                src = None
                ev = _SYNC if event == "sync" else _OTHER
            else:
                self._slow(buf, starts, k, base, file_pid)
                continue
            t = r.t
            if r.t_mono is not None and (cols.mono is None or t < cols.mono[0]):
                cols.mono = (t, len(cols.t), r.t_mono)
            nid = r.nodeid
            t_(t)
            ev_(ev)
            ref_(base + starts[k])
            addr_(a)
            size_(n)
            flag_(flag)
            nid_(nid if nid is None else intern(nid, nid))
            src_(src)
        self.records += len(objs) - self._slow_count
        self._slow_count = 0

    _slow_count = 0

    def _slow(self, buf: bytes, starts: Sequence[int], k: int, base: int, file_pid: int | None) -> None:
        end = starts[k + 1] if k + 1 < len(starts) else len(buf)
        self._slow_count += 1
        self.add_text(buf[starts[k]:end], base + starts[k], file_pid)

    def add_text(self, line: bytes, ref: int, file_pid: int | None) -> None:
        """One line that the fast decoder did not take: :mod:`json`, then :meth:`add_dict`."""
        try:
            rec = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            self.skipped += 1
            return
        if type(rec) is not dict:
            self.skipped += 1
            return
        if file_pid is not None and "pid" not in rec:
            rec["pid"] = file_pid
        self.add_dict(rec, ref)


def _free_flag(kind: Any, phase: Any) -> int:
    levels = (_FREE_BLOCKS if kind == KIND_BLOCK
              else _FREE_CONTAINERS if kind == KIND_DEVICE or kind == KIND_SEGMENT else _FREE_EITHER)
    return levels | (_COMPLETES if phase is None or phase == PHASE_COMPLETED else 0)


_NUM = (int, float)
_KINDS_OK = (None, KIND_DEVICE, KIND_SEGMENT, KIND_BLOCK)


def _dict_problem(rec: dict[str, Any]) -> str | None:
    """Why a record cannot be replayed (record_problem's words), or None."""
    t = rec.get("t")
    event = rec.get("event")
    ok = type(t) in _NUM
    if ok and event == EVENT_ALLOC:
        a, n = rec.get("address"), rec.get("size")
        ok = (type(a) is int and a >= 0 and type(n) is int and n >= 0
              and rec.get("kind") in _KINDS_OK)
        if ok and a + n >= _U64:
            return "allocation beyond the 64-bit address space"
    elif ok and event == EVENT_FREE:
        a = rec.get("address")
        ok = type(a) is int and a >= 0
        if ok and a >= _U64:
            return "address beyond the 64-bit address space"
    elif ok and event == EVENT_LAUNCH:
        ok = type(rec.get("kernel")) is str
    elif ok:
        ok = record_problem(rec) is None
    if ok:
        try:
            float(t)
        except OverflowError:
            return "t out of range"
        return None
    return record_problem(rec) or "malformed record"


def _read_file(path: Path, fid: int, file_pid: int | None, sink: _Collector) -> bool:
    """Stream one ledger file into ``sink``; True when its last line is torn (no newline)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; read-only, never modified
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror}") from exc
    base = fid << _OFFSET_BITS
    offset = 0       # file offset of the next byte read
    carry = b""      # a partial line (no newline yet), trailing NULs held back in `nuls`
    carry_at = 0
    nuls = 0         # NUL bytes after carry: a dead writer's reserve if nothing else follows
    junk = False     # the current line is known bad: skip it up to its newline
    with fh:
        while True:
            try:
                data = fh.read(CHUNK)
            except OSError as exc:
                raise RunDirError(f"cannot read {path}: {exc.strerror}") from exc
            if not data:
                break
            at = offset
            offset += len(data)
            if nuls:
                if not data.strip(b"\0"):
                    nuls += len(data)
                    continue
                nuls = 0
                carry, junk = b"", True  # NULs with more after them, inside a line: a bad line
            if junk:
                nl = data.find(b"\n")
                if nl < 0:
                    continue
                sink.skipped += 1
                junk = False
                data, at = data[nl + 1:], at + nl + 1
            cut = data.rfind(b"\n")
            if cut >= 0:
                buf = carry + data[:cut + 1] if carry else data[:cut + 1]
                _read_lines(buf, base + (carry_at if carry else at), file_pid, sink)
                carry, carry_at = data[cut + 1:], at + cut + 1
            else:
                if not carry:
                    carry_at = at
                carry += data
            stripped = carry.rstrip(b"\0")
            if len(stripped) < len(carry):
                nuls, carry = len(carry) - len(stripped), stripped
            if len(carry) > MAX_LINE:
                carry, junk = b"", True
    if junk:
        sink.skipped += 1
        return True
    if carry.strip():
        sink.add_text(carry, base + carry_at, file_pid)
    return bool(carry)


def _read_lines(buf: bytes, base: int, file_pid: int | None, sink: _Collector) -> None:
    """Complete lines (``buf`` ends with a newline) into ``sink``."""
    try:
        objs = _DECODER.decode_lines(buf)
    except _DECODE_ERRORS:
        objs = None
    ends = [m.end() for m in _NL.finditer(buf)]
    if objs is not None and len(objs) == len(ends) and not _TWO_ON_A_LINE.search(buf):
        starts = [0, *islice(ends, len(ends) - 1)]
        sink.add_lines(objs, starts, base, buf, file_pid)
        return
    start = 0
    for end in ends:
        line = buf[start:end]
        if line.strip():
            try:
                r = _DECODER.decode(line)
            except _DECODE_ERRORS:
                sink.add_text(line, base + start, file_pid)
            else:
                sink.add_lines([r], [0], base + start, line, file_pid)
        start = end


# --- the record store: a whole record, read back when shown ---------------------------------------

class RecordStore:
    """Whole records by reference: a file's line at its byte offset, or a record given in memory.

    Mapping shows a handful of records per verdict (the allocation, its free, the launches); the
    rest of a million-line ledger is never held. Files are only read.
    """

    def __init__(self) -> None:
        self.files: list[tuple[Path, int | None]] = []
        self.memory: list[dict[str, Any]] = []
        self._fds: dict[int, int] = {}
        self._cache: dict[int, dict[str, Any]] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    def add_file(self, path: Path, file_pid: int | None) -> int:
        self.files.append((path, file_pid))
        return len(self.files)

    def get(self, ref: int) -> dict[str, Any]:
        fid = ref >> _OFFSET_BITS
        if fid == 0:
            return self.memory[ref]
        got = self._cache.get(ref)
        if got is None:
            got = self._read(fid, ref & _OFFSET_MASK)
            if len(self._cache) >= 4096:
                self._cache.clear()
            self._cache[ref] = got
        return got

    def _read(self, fid: int, offset: int) -> dict[str, Any]:
        path, file_pid = self.files[fid - 1]
        fd = self._fds.get(fid)
        try:
            if fd is None:
                if len(self._fds) >= 64:
                    os.close(self._fds.pop(next(iter(self._fds))))
                fd = self._fds[fid] = os.open(path, os.O_RDONLY)
            data = b""
            while True:
                more = os.pread(fd, 8192, offset + len(data))
                data += more
                if len(more) < 8192 or b"\n" in more:
                    break
            rec = json.loads(data.split(b"\n", 1)[0].rstrip(b"\0").decode("utf-8", "replace"))
        except (OSError, ValueError) as exc:
            raise InputError(f"ledger file {path} changed while it was being mapped ({exc})",
                             fix="map again (a ledger being written is read as far as it went)") from exc
        if type(rec) is not dict:
            raise InputError(f"ledger file {path} changed while it was being mapped",
                             fix="map again (a ledger being written is read as far as it went)")
        if file_pid is not None and "pid" not in rec:
            rec["pid"] = file_pid
        return rec

    def close(self) -> None:
        _close_all(self._fds)


def _close_all(fds: dict[int, int]) -> None:
    for fd in fds.values():
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


# --- lives -------------------------------------------------------------------------------------------

class _LevelLives:
    """Lives of one level of one process while replaying, in the order they began."""

    __slots__ = ("addr", "end", "r0", "r1", "ref", "free", "done", "kind", "src", "extra")

    def __init__(self) -> None:
        self.addr = array("Q")
        self.end = array("Q")
        self.r0 = array("q")
        self.r1 = array("q")
        self.ref = array("q")
        #: the closing free's reference; -1 open, -2 closed by a new allocation at its address
        self.free = array("q")
        #: rank of the free that completed it (driver got it back); -1 none
        self.done = array("q")
        self.kind = array("b")
        self.src: list[Any] = []
        #: life -> (other sources, references of the same allocation's other records)
        self.extra: dict[int, tuple[tuple[Any, ...], tuple[int, ...]]] = {}


class Life:
    """One allocation's life, as the mapper sees it (a view of a :class:`Level` row)."""

    __slots__ = ("level", "i", "address", "end", "size", "kind", "t0", "t1", "ident")

    def __init__(self, level: Level, i: int) -> None:
        self.level = level
        self.i = i
        self.address = level.index.addr[i]
        self.end = level.index.end[i]
        self.size = self.end - self.address
        n = level.index.lives[i]
        self.kind = _KIND_NAME[level.lives.kind[n]]
        times = level.times
        self.t0 = times[level.index.r0[i]]
        r1 = level.index.r1[i]
        self.t1: float | None = times[r1] if r1 < len(times) else None
        #: stable identity of the allocation (the page splitter compares lives across queries)
        self.ident = (id(level), i)

    def live_at(self, t: float) -> bool:
        return self.t0 <= t and (self.t1 is None or self.t1 > t)

    def _parts(self) -> tuple[dict[str, Any], dict[str, Any] | None, float | None, tuple[Any, ...]]:
        lv = self.level
        n = lv.index.lives[self.i]
        lives = lv.lives
        rec = lv.store.get(lives.ref[n])
        also, dups = lives.extra.get(n, ((), ()))
        if rec.get("stack") is None:
            for ref in dups:  # the first other record of the allocation with a stack lends it
                dup = lv.store.get(ref)
                if dup.get("stack") is not None:
                    rec = {**rec, "stack": dup["stack"]}
                    break
        fref = lives.free[n]
        free = (None if fref == -1 else {"t": self.t1, "implied": True, "source": "replay"}
                if fref == _FREED_IMPLIED else lv.store.get(fref))
        done = lives.done[n]
        return rec, free, (lv.times[done] if done >= 0 else None), also

    def to_json(self) -> dict[str, Any]:
        """The alloc record as recorded, plus what the replay learned (kind, free)."""
        rec, free, completed, also = self._parts()
        out = dict(rec)
        out["kind"] = self.kind
        out["end"] = self.end
        if also:
            out["also_recorded_by"] = list(also)
        if free is not None:
            out["freed"] = {k: v for k, v in free.items() if k != "event"}
            if free.get("implied"):
                out["freed"]["implied"] = True
        else:
            out["freed"] = None
        if completed is not None:
            out["free_completed_t"] = completed
        return out

    def to_allocation(self) -> Allocation:
        rec, free, completed, also = self._parts()
        free = free or {}
        return Allocation(
            address=self.address, size=self.size, kind=self.kind, t=self.t0,
            pid=rec.get("pid"), nodeid=rec.get("nodeid"), source=rec.get("source"),
            t_free=self.t1, free_nodeid=free.get("nodeid"), free_source=free.get("source"),
            t_free_completed=completed, stack=format_stack(rec.get("stack")),
            free_stack=format_stack(free.get("stack")), also=tuple(also),
        )


class Level:
    """One level (containers or blocks) of one process: its index, and what shows a life."""

    def __init__(self, which: int, lives: _LevelLives, times: Sequence[float], store: RecordStore) -> None:
        self.which = which
        self.lives = lives
        self.times = times
        self.store = store
        n = len(lives.addr)
        self.index = LevelIndex(lives.addr, lives.end, lives.r0, lives.r1, range(n), len(times))
        # the replay's own order is not needed past this point
        self._views: dict[int, Life] = {}

    def __len__(self) -> int:
        return len(self.index)

    def rank(self, at: float) -> int:
        """The rank of the last record at or before ``at`` (-1: before every record)."""
        return bisect.bisect_right(self.times, at) - 1

    def life(self, i: int) -> Life | None:
        if i < 0:
            return None
        got = self._views.get(i)
        if got is None:
            got = self._views[i] = Life(self, i)
        return got

    def containing(self, address: int, at: float) -> tuple[list[Life], list[Life]]:
        """(lives containing ``address`` live at ``at``, lives that contained it and were freed by ``at``)."""
        live, freed = self.index.containing(address, self.rank(at))
        return [self.life(i) for i in live], [self.life(i) for i in freed]  # type: ignore[misc]

    def nearest_below(self, address: int, at: float) -> Life | None:
        """The live allocation ending at or before ``address`` with the highest end."""
        return self.life(self.index.nearest_below(address, self.rank(at)))

    def nearest_above(self, address: int, at: float) -> Life | None:
        """The live allocation starting after ``address`` with the lowest start."""
        return self.life(self.index.nearest_above(address, self.rank(at)))

    def nearest_below_any(self, address: int, at: float) -> Life | None:
        """Like :meth:`nearest_below`, but freed allocations count too (the newest begun by ``at``)."""
        return self.life(self.index.nearest_below_any(address, self.rank(at)))

    def nearest_above_any(self, address: int, at: float) -> Life | None:
        """Like :meth:`nearest_above`, but freed allocations count too."""
        return self.life(self.index.nearest_above_any(address, self.rank(at)))

    def edges(self, lo: int, hi: int) -> list[int]:
        """Starts and ends of allocations (any time) in (lo, hi]."""
        return self.index.edges(lo, hi)

    def any_overlapping(self, lo: int, hi: int, t0: float, t1: float | None) -> bool:
        """Is there a life starting in [lo, hi) whose time span overlaps [t0, t1)?"""
        before = len(self.times) + 1 if t1 is None else bisect.bisect_left(self.times, t1)
        return self.index.any_overlapping(lo, hi, before, bisect.bisect_right(self.times, t0))


class _LazyRecords(Sequence):  # type: ignore[type-arg]
    """Records by reference, read when asked for (launches)."""

    def __init__(self, refs: Sequence[int], store: RecordStore) -> None:
        self._refs, self._store = refs, store

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if isinstance(i, slice):
            return [self._store.get(r) for r in self._refs[i]]
        return self._store.get(self._refs[i])


@dataclasses.dataclass
class PidLedger:
    """Everything recorded for one process, indexed."""

    pid: int | None
    containers: Level
    blocks: Level
    #: launch records (read back on demand), their times and kernel names, in time order
    launches: Sequence[dict[str, Any]]
    launch_times: Sequence[float]
    launch_kernels: Sequence[str]
    sync_times: Sequence[float]
    #: times at which the running test changed, and the test from then on
    test_times: Sequence[float]
    test_nodeids: Sequence[Any]
    t_first: float
    t_last: float
    #: wall minus monotonic clock, from records carrying both (None when none did)
    mono_offset: float | None
    unmatched_frees: int = 0
    #: the mapper's memo: container life -> is it a framework pool (blocks inside it)?
    pools: dict[Any, bool] = dataclasses.field(default_factory=dict)

    @property
    def tests(self) -> list[tuple[float, Any]]:
        """(t, nodeid) at each change of the running test, in time order."""
        return list(zip(self.test_times, self.test_nodeids))

    def test_at(self, at: float) -> str | None:
        """The test running at ``at`` (the nodeid of the last record at or before it)."""
        i = bisect.bisect_right(self.test_times, at) - 1
        return self.test_nodeids[i] if i >= 0 else None


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
    #: records skipped, by reason (unknown events and kinds included)
    skipped_by: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def t_last(self) -> float | None:
        ends = [p.t_last for p in self.pids.values()]
        return max(ends) if ends else None

    def pid(self, pid: int | None) -> PidLedger | None:
        return self.pids.get(pid)


def _replay(pid: int | None, cols: _Columns, store: RecordStore) -> PidLedger:
    n = len(cols.t)
    ts = cols.t
    if all(map(float.__le__, ts, islice(ts, 1, None))):
        order: Sequence[int] = range(n)
        times = ts
    else:
        order = sorted(range(n), key=ts.__getitem__)  # stable: equal times keep file order
        times = array("d", map(ts.__getitem__, order))
    lives = (_LevelLives(), _LevelLives())
    unmatched = _replay_lives(cols, order, lives)
    ev = cols.ev
    evs = bytes(map(ev.__getitem__, order)) if not isinstance(order, range) else ev.tobytes()
    at_launch = [k for k in compress(range(n), map(_LAUNCH.__eq__, evs))]
    launch_idx = [order[k] for k in at_launch]
    nids = cols.nid if isinstance(order, range) else list(map(cols.nid.__getitem__, order))
    changes = [0, *compress(range(1, n), map(ne, nids, islice(nids, 1, None)))] if n else []
    mono = None if cols.mono is None else cols.mono[0] - cols.mono[2]
    containers = Level(0, lives[0], times, store)
    blocks = Level(1, lives[1], times, store)
    return PidLedger(
        pid=pid, containers=containers, blocks=blocks,
        launches=_LazyRecords(array("q", map(cols.ref.__getitem__, launch_idx)), store),
        launch_times=array("d", map(times.__getitem__, at_launch)),
        launch_kernels=list(map(cols.src.__getitem__, launch_idx)),
        sync_times=array("d", compress(times, map(_SYNC.__eq__, evs))),
        test_times=array("d", map(times.__getitem__, changes)),
        test_nodeids=list(map(nids.__getitem__, changes)),
        t_first=times[0] if n else 0.0, t_last=times[-1] if n else 0.0,
        mono_offset=mono, unmatched_frees=unmatched,
    )


def _replay_lives(cols: _Columns, order: Sequence[int], lives: tuple[_LevelLives, _LevelLives]) -> int:
    """Alloc and free records in time order -> lives; returns the frees that matched nothing."""
    ev, addr_, size_, flag_, ref_, src_ = cols.ev, cols.addr, cols.size, cols.flag, cols.ref, cols.src
    live: tuple[dict[int, int], dict[int, int]] = ({}, {})
    closed: tuple[dict[int, int], dict[int, int]] = ({}, {})
    unmatched = 0
    both, only = (0, 1), ((0,), (1,))
    for rank, i in enumerate(order):
        e = ev[i]
        if e == _ALLOC:
            code = flag_[i]
            level = 1 if code == 2 else 0
            L = lives[level]
            addr = addr_[i]
            size = size_[i]
            old = live[level].get(addr)
            if old is not None:
                if L.end[old] - L.addr[old] == size:
                    # The same allocation seen by two sources (CUPTI and a framework hook).
                    src = src_[i]
                    also, dups = L.extra.get(old, ((), ()))
                    if src and src != L.src[old] and src not in also:
                        also = (*also, src)
                    L.extra[old] = (also, (*dups, ref_[i]))
                    if code == 1:
                        L.kind[old] = 1
                    continue
                # A new allocation where one is still live: its free was never recorded.
                L.r1[old] = rank
                L.free[old] = _FREED_IMPLIED
                closed[level][addr] = old
            live[level][addr] = len(L.addr)
            L.addr.append(addr)
            L.end.append(addr + size)
            L.r0.append(rank)
            L.r1.append(len(order))
            L.ref.append(ref_[i])
            L.free.append(-1)
            L.done.append(-1)
            L.kind.append(code)
            L.src.append(src_[i])
        elif e == _FREE:
            addr = addr_[i]
            flag = flag_[i]
            order_ = both if flag & 3 == _FREE_EITHER else only[flag & 3]
            for level in order_:
                n = live[level].pop(addr, None)
                if n is not None:
                    L = lives[level]
                    L.r1[n] = rank
                    L.free[n] = ref_[i]
                    if flag & _COMPLETES:
                        L.done[n] = rank
                    closed[level][addr] = n
                    break
            else:
                # Deferred driver free after the program's own free: annotate, don't double count.
                for level in order_:
                    n = closed[level].get(addr)
                    if n is not None and lives[level].done[n] < 0:
                        lives[level].done[n] = rank
                        break
                else:
                    unmatched += 1
    return unmatched


# --- loading ---------------------------------------------------------------------------------------

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


def _finish(sink: _Collector, store: RecordStore, files: tuple[str, ...] = (),
            torn: tuple[str, ...] = ()) -> Ledger:
    pids = {pid: _replay(pid, cols, store) for pid, cols in sink.pids.items() if len(cols.t)}
    return Ledger(pids, sink.records, sink.skipped, torn, files, tuple(sink.problems), dict(sink.skipped_by))


def load_ledger(source: Path | Iterable[Path]) -> Ledger:
    """Load a ledger directory (every ``*.jsonl``) or files; malformed lines are skipped, counted.

    A record without ``pid`` takes it from its file name (``<pid>.jsonl``). Files are only read.
    """
    files = _ledger_files(source)
    sink = _Collector()
    store = RecordStore()
    torn: list[str] = []
    for path in files:
        file_pid = _pid_from_name(path)
        fid = store.add_file(path, file_pid)
        if _read_file(path, fid, file_pid, sink):
            torn.append(str(path))
    return _finish(sink, store, tuple(str(p) for p in files), tuple(torn))


def build_ledger(records: Iterable[dict[str, Any]], *, skipped: int = 0,
                 files: tuple[str, ...] = (), torn_files: tuple[str, ...] = ()) -> Ledger:
    """Replay records (any order; sorted by ``t`` per pid here) into a :class:`Ledger`. Pure."""
    sink = _Collector()
    sink.skipped = skipped
    store = RecordStore()
    for rec in records:
        if type(rec) is not dict:  # not a record at all
            sink.records += 1
            sink.problem("malformed record")
            continue
        store.memory.append(rec)
        sink.add_dict(rec, len(store.memory) - 1)
    return _finish(sink, store, files, torn_files)


def parse_ledger_text(text: str) -> Ledger:
    """A ledger from JSONL text (pure; for tests and pipes)."""
    got = parse_jsonl(text)
    return build_ledger(got.records, skipped=got.skipped)


def read_ledger_file(path: Path) -> JsonlRead:
    """Every record of one ledger file as a dict (for scripts that count what a ledger holds;
    mapping does not use this: it keeps columns, not records)."""
    from faulthunt.rundir import read_jsonl

    return read_jsonl(path)


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of one ledger file, one at a time (a record without pid takes the file's)."""
    pid = _pid_from_name(Path(path))
    for rec in read_ledger_file(Path(path)).records:
        yield rec if pid is None or "pid" in rec else {**rec, "pid": pid}


__all__ = ["Ledger", "PidLedger", "Level", "Life", "RecordStore", "load_ledger", "build_ledger",
           "parse_ledger_text", "read_ledger_file", "KIND_SEGMENT", "EVENT_NOTE"]
