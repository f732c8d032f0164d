"""Reading a ledger: JSONL files -> per-pid interval indexes the mapper can query quickly.

Read-only: files are opened for reading and never changed. A dead memory-mapped writer's file
ends in NUL bytes (its unwritten reserve) and perhaps a torn line; both are read past here (the
NULs ignored, the torn line skipped and counted) instead of cutting the file.

Files are read in 8 MiB chunks and each line is decoded by msgspec into the few fields the
replay needs (event, time, pid, address, size, kind, phase, source, kernel, monotonic time); a
line it cannot decode goes through :mod:`json` and the same checks as a hand-made record, so a
bad line is skipped and counted with its reason, never fatal. What is kept is columns (arrays),
not records: a life is a row of :class:`~faulthunt.ledger.index.LevelIndex`, and a whole record
(its stack, its test, its other fields) is read back from its file by line number only when a
verdict shows it. Records of unknown events are skipped and counted by reason
(``Ledger.skipped_by``); unknown sources are ordinary records. A large ledger in several files
is read by forked processes, a file each (:func:`load_ledger`).

Per process, records are replayed in time order (stable: equal times keep file order) into
allocation lives: the same allocation seen by two sources (CUPTI and a framework hook) is merged
(``also_recorded_by``), an allocation at a still-live address closes the old one (``implied``
free), a second free of an already-freed address annotates it (``free_completed_t``).
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
import json
import os
import pickle
import re
import threading
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress, islice, repeat
from operator import add, and_, eq, gt, itemgetter
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec.structs import astuple

from faulthunt.errors import InputError
from faulthunt.ledger.index import LevelIndex, compiled_part
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
    PHASE_REQUESTED,
    Allocation,
    format_stack,
    record_problem,
)
from faulthunt.rundir import JsonlRead, RunDirError, parse_jsonl

#: the optional compiled scanner and replay (None: the pure-Python route)
_FAST = compiled_part()

#: the ``source`` of guard mode's records (faulthunt.guard.records.SOURCE; kept here so reading
#: a ledger imports nothing of guard mode)
GUARD_SOURCE = "guard"
_PID_FILE = re.compile(r"^(\d+)")
#: bytes read from a file at a time (bounded memory whatever the file's size)
CHUNK = 8 << 20
#: a "line" longer than this (no newline in sight) is junk: skipped without being held
MAX_LINE = 64 << 20
#: the record store's mark spacing: a line is found again with one read of about this size
MARK = 8192
#: two JSON values on one line: msgspec's line decoder would take both, a JSONL reader neither
_TWO_ON_A_LINE = re.compile(rb"}[ \t\r]*{")
#: a record's reference: file number << _REF_BITS | line number (file 0: records given in memory)
_REF_BITS = 40
_REF_MASK = (1 << _REF_BITS) - 1
_U64 = 1 << 64

# event codes in the columns
_ALLOC, _FREE, _LAUNCH, _SYNC, _OTHER = 0, 1, 2, 3, 4
_KIND_CODE = {None: 0, KIND_DEVICE: 0, KIND_SEGMENT: 1, KIND_BLOCK: 2}
_KIND_NAME = (KIND_DEVICE, KIND_SEGMENT, KIND_BLOCK)
_FREED_IMPLIED = -2


#: a JSON key no record has: where a kind of line keeps a field it does not read
_UNREAD = " faulthunt: not read "


class _Line(msgspec.Struct, gc=False, tag_field="event", kw_only=True):
    """The fields of a ledger line the replay reads, by event; anything else stays in the file.

    Every event has the same attributes (``address``, ``size``, ``kind``, ``x``: the source of an
    alloc, the phase of a free, the kernel of a launch) so a chunk's lines become columns with
    one list comprehension each; a field an event does not read maps to a key no line has.
    """

    code: ClassVar[int] = _OTHER
    t: float
    pid: int | msgspec.UnsetType | None = msgspec.UNSET
    t_mono: float | None = None


_ADDRESS = Annotated[int, msgspec.Meta(ge=0)]  # and < 2**64: checked per chunk


class _AllocLine(_Line, tag=EVENT_ALLOC, kw_only=True):
    code: ClassVar[int] = _ALLOC
    address: _ADDRESS
    size: _ADDRESS
    kind: Literal["device", "segment", "block"] | None = None
    x: str | None = msgspec.field(default=None, name="source")


class _FreeLine(_Line, tag=EVENT_FREE, kw_only=True):
    code: ClassVar[int] = _FREE
    address: _ADDRESS
    size: int = msgspec.field(default=0, name=_UNREAD + "size")
    # other kinds and phases are legal (a free of an unknown kind may close either level): such
    # a line goes the slow way, through json
    kind: Literal["device", "segment", "block"] | None = None
    x: Literal["requested", "completed"] | None = msgspec.field(default=None, name="phase")


class _LaunchLine(_Line, tag=EVENT_LAUNCH, kw_only=True):
    code: ClassVar[int] = _LAUNCH
    address: int = msgspec.field(default=0, name=_UNREAD + "address")
    size: int = msgspec.field(default=0, name=_UNREAD + "size")
    kind: None = msgspec.field(default=None, name=_UNREAD + "kind")
    x: str = msgspec.field(name="kernel")


class _SyncLine(_Line, tag=EVENT_SYNC, kw_only=True):
    code: ClassVar[int] = _SYNC
    address: int = msgspec.field(default=0, name=_UNREAD + "address")
    size: int = msgspec.field(default=0, name=_UNREAD + "size")
    kind: None = msgspec.field(default=None, name=_UNREAD + "kind")
    x: None = msgspec.field(default=None, name=_UNREAD + "x")


class _NoteLine(_SyncLine, tag=EVENT_NOTE, kw_only=True):
    code: ClassVar[int] = _OTHER


_LINES = (_AllocLine, _FreeLine, _LaunchLine, _SyncLine, _NoteLine)
_DECODER = msgspec.json.Decoder(_AllocLine | _FreeLine | _LaunchLine | _SyncLine | _NoteLine)
_CODE_OF: dict[type, int] = {cls: cls.code for cls in _LINES}
# every kind of line has its fields in this order, so a chunk becomes columns in one zip
assert all(tuple(cls.__struct_fields__) == ("t", "pid", "t_mono", "address", "size", "kind", "x")
           for cls in _LINES)
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)
#: the objects the compiled part puts in the kind and x columns (the same ones msgspec gives)
_FAST_CONSTS = (KIND_DEVICE, KIND_SEGMENT, KIND_BLOCK, PHASE_REQUESTED, PHASE_COMPLETED)
_ANY = msgspec.json.Decoder()
#: whole records kept once read back (a verdict shows the same allocations and launches again)
CACHED_RECORDS = 16384


# --- reading -------------------------------------------------------------------------------------

class _Columns:
    """One process's records as read, in file order (the replay sorts them by time)."""

    __slots__ = ("t", "ev", "ref", "addr", "size", "kind", "x", "mono")

    def __init__(self) -> None:
        self.t = array("d")
        self.ev = array("b")
        self.ref = array("q")
        self.addr = array("Q")
        self.size = array("Q")
        #: alloc/free: the record's kind (any JSON value for a free); else None
        self.kind: list[Any] = []
        #: alloc: its source (merging); free: its phase; launch: its kernel; else None
        self.x: list[Any] = []
        #: (t, order, t_mono) of the earliest record carrying a monotonic time
        self.mono: tuple[float, int, float] | None = None


class _Collector:
    """Everything read so far, per pid; counts of what was skipped and why."""

    def __init__(self) -> None:
        self.pids: dict[int | None, _Columns] = {}
        self.records = 0
        self.skipped = 0
        #: (file number, why) of the first few records skipped for a reason, in file order
        self.problems: list[tuple[int, str]] = []
        self.skipped_by: dict[str, int] = {}
        self.file_index = 0
        #: pid -> the file its first record was in (the order pids are tried in without --pid)
        self.first_file: dict[int | None, int] = {}
        self._strings: dict[Any, Any] = {}

    def columns(self, pid: int | None) -> _Columns:
        cols = self.pids.get(pid)
        if cols is None:
            cols = self.pids[pid] = _Columns()
            self.first_file[pid] = self.file_index
        return cols

    def problem(self, why: str) -> None:
        self.skipped += 1
        if len(self.problems) < 5:
            self.problems.append((self.file_index, why))
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
        addr = size = 0
        kind = x = None
        if event == EVENT_ALLOC:
            ev, addr, size, kind, x = _ALLOC, rec["address"], rec["size"], rec.get("kind"), rec.get("source")
        elif event == EVENT_FREE:
            ev, addr, kind, x = _FREE, rec["address"], rec.get("kind"), rec.get("phase")
        elif event == EVENT_LAUNCH:
            ev, x = _LAUNCH, rec["kernel"]
        else:
            ev = _SYNC if event == EVENT_SYNC else _OTHER
        tm = rec.get("t_mono")
        if isinstance(tm, (int, float)) and (cols.mono is None or t < cols.mono[0]):
            cols.mono = (t, len(cols.t), float(tm))
        cols.t.append(t)
        cols.ev.append(ev)
        cols.ref.append(ref)
        cols.addr.append(addr)
        cols.size.append(size)
        cols.kind.append(self._intern(kind))
        cols.x.append(self._intern(x))

    def _intern(self, s: Any) -> Any:
        if type(s) is str:
            return self._strings.setdefault(s, s)
        return s

    def add_lines(self, pid: int | None, objs: list[_Line], refs: Iterable[int],
                  fields: list[tuple[Any, ...]] | None = None) -> None:
        """Decoded lines of one process, in file order, as columns (no loop over records here;
        ``fields``: the lines' fields as columns, when the caller has them already). Kinds and
        phases are msgspec's literals (shared objects); sources and kernels are interned."""
        cols = self.columns(pid)
        first = len(cols.t)
        ts, _pids, tms, addrs, sizes, kinds, xs = fields or _fields(objs)
        cols.t.fromlist(list(ts))
        cols.ev.frombytes(bytes(map(_CODE_OF.__getitem__, map(type, objs))))
        cols.ref.extend(refs)
        cols.addr.fromlist(list(addrs))
        cols.size.fromlist(list(sizes))
        strings = self._strings.setdefault
        cols.kind.extend(kinds)
        cols.x.extend(map(strings, xs, xs))
        if tms.count(None) < len(tms):
            t, k, tm = min(compress(zip(ts, range(first, first + len(ts)), tms), map(_is_not_none, tms)))
            if cols.mono is None or t < cols.mono[0]:
                cols.mono = (t, k, tm)
        self.records += len(objs)

    def add_scanned(self, columns: tuple[Any, ...], mono: tuple[float, int, float] | None) -> None:
        """One chunk as the compiled scanner gives it: one process's columns, in file order."""
        pid, ts, evs, addrs, sizes, refs, kinds, xs = columns
        cols = self.columns(pid)
        first = len(cols.t)
        cols.t.frombytes(ts)
        cols.ev.frombytes(evs)
        cols.ref.frombytes(refs)
        cols.addr.frombytes(addrs)
        cols.size.frombytes(sizes)
        cols.kind.extend(kinds)
        cols.x.extend(xs)
        if mono is not None:
            t, k, tm = mono
            if cols.mono is None or t < cols.mono[0]:
                cols.mono = (t, first + k, tm)
        self.records += len(kinds)

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


def _fields(objs: list[_Line]) -> list[tuple[Any, ...]]:
    """Decoded lines as columns: t, pid, t_mono, address, size, kind, x.

    The one place loading makes many container objects (a tuple per line, alive until the zip
    is done): the cyclic collector would rescan them at every young collection, which made this
    3-4x slower, so it is paused here. Nothing else needs it paused: what a loaded ledger keeps
    is arrays, and the lines themselves are untracked msgspec structs.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        return list(zip(*map(astuple, objs)))
    finally:
        if was:
            gc.enable()


def _is_not_none(v: Any) -> bool:
    return v is not None


_NUM = (int, float)
_KINDS_OK = (None, KIND_DEVICE, KIND_SEGMENT, KIND_BLOCK)


def _dict_problem(rec: dict[str, Any]) -> str | None:
    """Why a record cannot be replayed (record_problem's words), or None."""
    t = rec.get("t")
    event = rec.get("event")
    ok = type(t) in _NUM
    if ok and event == EVENT_ALLOC:
        a, n = rec.get("address"), rec.get("size")
        if type(a) is int and type(n) is int and a >= 0 and n >= 0 and rec.get("kind") in _KINDS_OK:
            if a + n >= _U64:
                return "allocation beyond the 64-bit address space"
        else:
            ok = False
    elif ok and event == EVENT_FREE:
        a = rec.get("address")
        if type(a) is int and a >= 0:
            if a >= _U64:
                return "address beyond the 64-bit address space"
        else:
            ok = False
    elif ok and event == EVENT_LAUNCH:
        ok = type(rec.get("kernel")) is str
    elif ok:
        ok = record_problem(rec) is None
    if ok:
        try:
            float(rec["t"])
        except OverflowError:
            return "t out of range"
        return None
    return record_problem(rec) or "malformed record"


def _read_file(path: Path, fid: int, file_pid: int | None, sink: _Collector,
               marks: array[int]) -> bool:
    """Stream one ledger file into ``sink``; True when its last line is torn (no newline).

    ``marks`` gets, for every :data:`MARK` bytes of the file, how many lines lie before that
    byte: with it a record is found again by its line number (:class:`RecordStore`).
    """
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; read-only, never modified
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror}") from exc
    base = fid << _REF_BITS
    offset = 0       # file offset of the next byte read
    seen = 0         # newlines in the file before `offset`
    line = 0         # number of the line `carry` belongs to
    carry = b""      # a partial line (no newline yet), trailing NULs held back in `nuls`
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
            at, offset = offset, offset + len(data)
            before = seen
            if _FAST is not None:  # the same counts in one call
                got, seen = _FAST.newlines(data, at, MARK, len(marks) * MARK, seen)
                marks.frombytes(got)
            else:
                mark, last = len(marks) * MARK, 0
                while mark < offset:
                    seen += data.count(b"\n", last, mark - at)
                    last = mark - at
                    marks.append(seen)
                    mark += MARK
                seen += data.count(b"\n", last)
            lines = seen - before  # newlines in data: the one count of them
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
                line += 1
                lines -= 1
                data = data[nl + 1:]
            cut = data.rfind(b"\n")
            if cut >= 0:
                start = 0
                if carry:  # the line carried over ends here: on its own, so the chunk is not copied
                    nl = data.find(b"\n")
                    line = _read_lines(carry + data[:nl + 1], base + line, file_pid, sink, 1) - base
                    start, lines = nl + 1, lines - 1
                if start <= cut:
                    line = _read_lines(memoryview(data)[start:cut + 1], base + line, file_pid, sink,
                                       lines) - base
                carry = data[cut + 1:]
            else:
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
        sink.add_text(carry, base + line, file_pid)
    return bool(carry)


def _read_lines(buf: bytes | memoryview, first: int, file_pid: int | None, sink: _Collector,
                count: int) -> int:
    """``count`` complete lines (``buf`` ends with a newline; ``first``: the first one's
    reference) into ``sink``; returns the reference of the line after them."""
    if _FAST is not None:  # the compiled scanner takes the chunk whole, or leaves it to msgspec
        got = _FAST.scan(buf, count, first, file_pid, sink._strings, _FAST_CONSTS)
        if got is not None:
            sink.add_scanned(*got)
            return first + count
    try:
        objs = _DECODER.decode_lines(buf)
    except _DECODE_ERRORS:
        objs = None
    fields = None
    # One object a line: as many objects as lines, and no line holding two (which a blank line
    # elsewhere could hide from the count).
    if objs is not None and len(objs) == count and count and not _TWO_ON_A_LINE.search(buf):
        fields = _fields(objs)
        if max(fields[3]) + max(fields[4]) >= _U64:
            fields = None
    if fields is not None and objs is not None:
        pids = set(fields[1])
        if len(pids) == 1 or pids == {msgspec.UNSET, file_pid}:
            pid = pids.pop()
            sink.add_lines(file_pid if pid is msgspec.UNSET or pid == file_pid else pid, objs,
                           range(first, first + count), fields)
            return first + count
        groups: dict[Any, tuple[list[_Line], list[int]]] = {}
        for ref, o in enumerate(objs, first):  # several processes in one file: a hand-made ledger
            g = groups.setdefault(file_pid if o.pid is msgspec.UNSET else o.pid, ([], []))
            g[0].append(o)
            g[1].append(ref)
        for pid, (got, refs) in groups.items():
            sink.add_lines(pid, got, refs)
        return first + count
    lines = bytes(buf).split(b"\n")
    lines.pop()  # after the last newline: nothing
    for ref, line in enumerate(lines, first):  # a bad line in this chunk: line by line
        if not line.strip():
            continue
        try:
            o = _DECODER.decode(line)
        except _DECODE_ERRORS:
            o = None
        if o is None or o.address + o.size >= _U64:
            sink.add_text(line, ref, file_pid)
        else:
            sink.add_lines(file_pid if o.pid is msgspec.UNSET else o.pid, [o], [ref])
    return first + count


# --- the record store: a whole record, read back when shown ---------------------------------------

class RecordStore:
    """Whole records by reference: a file's line by its number, or a record given in memory.

    Mapping shows a handful of records per verdict (the allocation, its free, the launches); the
    rest of a million-line ledger is never held. Files are only read. A line is found again from
    the file's marks (lines before every :data:`MARK` bytes): one read of a few KiB.
    """

    def __init__(self) -> None:
        self.files: list[tuple[Path, int | None, array[int]]] = []
        self.memory: list[dict[str, Any]] = []
        self._fds: dict[int, int] = {}
        self._cache: dict[int, dict[str, Any]] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    def add_file(self, path: Path, file_pid: int | None) -> tuple[int, array[int]]:
        marks = array("q")
        self.files.append((path, file_pid, marks))
        return len(self.files), marks

    def get(self, ref: int) -> dict[str, Any]:
        fid = ref >> _REF_BITS
        if fid == 0:
            return self.memory[ref]
        got = self._cache.get(ref)
        if got is None:
            got = self._read(fid, ref & _REF_MASK)
            cache = self._cache
            if len(cache) >= CACHED_RECORDS:  # the older half goes (verdicts reuse recent ones)
                for old in list(islice(cache, CACHED_RECORDS // 2)):
                    del cache[old]
            cache[ref] = got
        return got

    def _line(self, fid: int, number: int) -> bytes:
        path, _pid, marks = self.files[fid - 1]
        fd = self._fds.get(fid)
        if fd is None:
            if len(self._fds) >= 64:
                os.close(self._fds.pop(next(iter(self._fds))))
            fd = self._fds[fid] = os.open(path, os.O_RDONLY)
        m = max(0, bisect.bisect_left(marks, number) - 1)  # lines before mark m: fewer than number
        skip = number - marks[m] if number else 0
        offset = m * MARK if number else 0
        data = os.pread(fd, 2 * MARK, offset)
        if _FAST is not None:
            got = _FAST.nth_line(data, skip)
            if got is not None:
                return got  # type: ignore[no-any-return]
        pos = 0
        for _ in range(skip + 1):  # past `skip` newlines, then to the end of the wanted line
            nl = data.find(b"\n", pos)
            while nl < 0:
                more = os.pread(fd, 2 * MARK, offset + len(data))
                if not more:  # the end of the file: the wanted line is the rest, if it began
                    if _ < skip:
                        raise OSError(f"line {number + 1} is not there any more")
                    return data[pos:]
                data += more
                nl = data.find(b"\n", pos)
            if _ == skip:
                return data[pos:nl]
            pos = nl + 1
        raise AssertionError("unreachable")  # pragma: no cover

    def _read(self, fid: int, number: int) -> dict[str, Any]:
        path, file_pid, _marks = self.files[fid - 1]
        try:
            line = self._line(fid, number).rstrip(b"\0")
            try:  # the same dict json gives, faster; json itself for what msgspec refuses (NaN)
                rec = _ANY.decode(line)
            except _DECODE_ERRORS:
                rec = json.loads(line.decode("utf-8", "replace"))
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
    """Lives of one level of one process, in the order they began (a life is its number here).

    ``r0``/``r1``: ranks of the record that began it and of the one that closed it (``r1`` = the
    process's record count while open); ``free``: the closing free's reference (-1 open, -2 closed
    by a new allocation at its address); ``done``: rank of the free that completed it (-1 none).
    """

    __slots__ = ("r0", "r1", "free", "done", "ref", "kind", "extra", "began", "span")

    def __init__(self) -> None:
        self.r0 = array("q")
        self.r1 = array("q")
        self.free = array("q")
        self.done = array("q")
        self.ref = array("q")
        self.kind = array("b")
        #: life -> (other sources, references of the same allocation's other records)
        self.extra: dict[int, tuple[tuple[Any, ...], tuple[int, ...]]] = {}
        #: while loading: 1 for each record (by rank) that began a life of this level
        self.began = bytearray()
        #: while loading: the lives' (start, end) columns when the compiled replay made them
        self.span: tuple[array[int], array[int]] | None = None


class Life:
    """One allocation's life, as the mapper sees it (a view of a :class:`Level` row)."""

    __slots__ = ("level", "i", "n", "address", "end", "size", "kind", "t0", "t1", "ident")

    def __init__(self, level: Level, i: int) -> None:
        self.level = level
        self.i = i
        index = level.index
        self.n = n = index.lives[i]
        self.address = index.addr[i]
        self.end = index.end[i]
        self.size = self.end - self.address
        self.kind = _KIND_NAME[level.lives.kind[n]]
        times = level.times
        self.t0 = times[index.r0[i]]
        r1 = index.r1[i]
        self.t1: float | None = times[r1] if r1 < len(times) else None
        #: stable identity of the allocation (the page splitter compares lives across queries)
        self.ident = (id(level), i)

    def live_at(self, t: float) -> bool:
        return self.t0 <= t and (self.t1 is None or self.t1 > t)

    def _parts(self) -> tuple[dict[str, Any], dict[str, Any] | None, float | None, tuple[Any, ...]]:
        lv, n = self.level, self.n
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

    def __init__(self, which: int, lives: _LevelLives, addr: Sequence[int], end: Sequence[int],
                 times: Sequence[float], store: RecordStore) -> None:
        self.which = which
        self.lives = lives
        self.times = times
        self.store = store
        self.index = LevelIndex(addr, end, lives.r0, lives.r1, range(len(addr)), len(times))
        lives.r0 = lives.r1 = array("q")  # the index has them, in its own order
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
    t_first: float
    t_last: float
    #: wall minus monotonic clock, from records carrying both (None when none did)
    mono_offset: float | None
    unmatched_frees: int = 0
    #: every record in time order, by reference (the test running is read from the record)
    records: Sequence[dict[str, Any]] = ()
    times: Sequence[float] = ()
    #: guard mode's alloc records and the frees at their addresses, in time order, read back
    #: by reference when asked for (:meth:`guard_records`)
    guard: Sequence[dict[str, Any]] = ()
    #: the mapper's memos: container life -> is it a framework pool (blocks inside it)?; the
    #: launches shown for a range of launch numbers; the guard slots' index (built on first need)
    pools: dict[Any, bool] = dataclasses.field(default_factory=dict)
    launch_views: dict[tuple[int, int], tuple[dict[str, Any], ...]] = dataclasses.field(default_factory=dict)
    guard_index: Any = None

    def guard_records(self) -> list[dict[str, Any]]:
        """Guard mode's records of this process (its slots' allocs and frees), whole: only these
        are read back from the files, never the rest of the ledger."""
        return list(self.guard[:]) if len(self.guard) else []

    def test_at(self, at: float) -> str | None:
        """The test running at ``at``: the nodeid of the last record at or before it."""
        q = bisect.bisect_right(self.times, at) - 1
        return self.records[q].get("nodeid") if q >= 0 else None

    @property
    def tests(self) -> list[tuple[float, Any]]:
        """(t, nodeid) at each change of the running test, in time order (reads every record)."""
        out: list[tuple[float, Any]] = []
        for t, rec in zip(self.times, self.records):
            nid = rec.get("nodeid")
            if not out or nid != out[-1][1]:
                out.append((t, nid))
        return out


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
    if _in_order(ts):
        times, ev, addr, size, kind, x, ref = ts, cols.ev, cols.addr, cols.size, cols.kind, cols.x, cols.ref
    else:  # CUPTI's activity records arrive after the launches they precede
        order = sorted(range(n), key=ts.__getitem__)  # stable: equal times keep file order
        take = itemgetter(*order)  # n > 1 here: one record is always in order
        times = array("d", take(ts))
        ev = array("b", take(cols.ev))
        addr = array("Q", take(cols.addr))
        size = array("Q", take(cols.size))
        kind = list(take(cols.kind))
        x = list(take(cols.x))
        ref = array("q", take(cols.ref))
    lives = (_LevelLives(), _LevelLives())
    unmatched = _replay_lives(ev, addr, size, kind, x, ref, lives)
    levels = []
    for which, lv in enumerate(lives):
        if lv.span is not None:
            a, e = lv.span
        else:
            a = array("Q", compress(addr, lv.began))
            e = array("Q", map(add, a, compress(size, lv.began)))
        lv.began, lv.span = bytearray(), None
        levels.append(Level(which, lv, a, e, times, store))
    evs = ev.tobytes()
    at_launch = list(compress(range(n), evs.translate(_IS_LAUNCH)))
    guard_refs = array("q", map(ref.__getitem__, _guard_ranks(evs, addr, x)))
    return PidLedger(
        pid=pid, containers=levels[0], blocks=levels[1],
        launches=_LazyRecords(array("q", map(ref.__getitem__, at_launch)), store),
        launch_times=array("d", map(times.__getitem__, at_launch)),
        launch_kernels=list(map(x.__getitem__, at_launch)),
        sync_times=array("d", compress(times, evs.translate(_IS_SYNC))),
        t_first=times[0] if n else 0.0, t_last=times[-1] if n else 0.0,
        mono_offset=None if cols.mono is None else cols.mono[0] - cols.mono[2],
        unmatched_frees=unmatched, records=_LazyRecords(ref, store), times=times,
        guard=_LazyRecords(guard_refs, store),
    )


#: event code -> 1 for a launch / a sync (bytes.translate: a mask of a whole column in one call)
_IS_LAUNCH = bytes(c == _LAUNCH for c in range(256))
_IS_SYNC = bytes(c == _SYNC for c in range(256))


def _in_order(ts: array[float]) -> bool:
    if _FAST is not None:
        return bool(_FAST.nondecreasing(ts))
    return all(map(float.__le__, ts, islice(ts, 1, None)))


def _guard_ranks(evb: bytes, addrs: Sequence[int], xs: Sequence[Any]) -> list[int]:
    """Ranks (time order) of guard mode's ``alloc`` records and of every free at their
    addresses: the records an exact guard verdict is made of (docs/guard.md). One C-level scan
    when the process has none; the frees' own source is checked when they are read back."""
    if GUARD_SOURCE not in xs:
        return []
    n = len(evb)
    allocs = [i for i in compress(range(n), map(eq, repeat(GUARD_SOURCE), xs)) if evb[i] == _ALLOC]
    at = {addrs[i] for i in allocs}
    frees = [i for i in compress(range(n), map(_FREE.__eq__, evb)) if addrs[i] in at]
    return sorted(allocs + frees)


def _replay_lives(ev: array[int], addrs: Sequence[int], sizes: Sequence[int], kinds: Sequence[Any],
                  xs: Sequence[Any], refs: Sequence[int], lives: tuple[_LevelLives, _LevelLives]) -> int:
    """Alloc and free records in time order -> lives; returns the frees that matched nothing.

    The one loop over records in loading: it only touches alloc and free records, and a new
    life costs one number (its begin rank): the other columns are made to size beforehand and
    everything else about a life is read from its record's row.
    """
    n = len(ev)
    evb = ev.tobytes()
    if _FAST is not None and type(kinds) is list and type(xs) is list:
        got = _FAST.replay(evb, addrs, sizes, kinds, xs, refs, _FAST_CONSTS)
        if got is not None:
            return _replayed(got, kinds, xs, refs, lives)
    n_alloc = evb.count(_ALLOC)
    n_block = list(compress(kinds, map(_ALLOC.__eq__, evb))).count(KIND_BLOCK)
    for lv, cap in zip(lives, (n_alloc - n_block, n_block)):
        lv.r0 = array("q", bytes(8 * cap))
        lv.r1 = array("q", [n]) * cap
        lv.free = array("q", [-1]) * cap
        lv.done = array("q", [-1]) * cap
    count = [0, 0]
    live: tuple[dict[int, int], dict[int, int]] = ({}, {})
    closed: tuple[dict[int, int], dict[int, int]] = ({}, {})
    r0s = (lives[0].r0, lives[1].r0)
    r1s = (lives[0].r1, lives[1].r1)
    frees = (lives[0].free, lives[1].free)
    dones = (lives[0].done, lives[1].done)
    upgraded: tuple[dict[int, int], dict[int, int]] = ({}, {})
    merged: list[int] = []  # ranks of alloc records merged into a live allocation (no life)
    unmatched = 0
    mask = bytes(map(_ALLOC_OR_FREE.__contains__, evb))
    rows = zip(*(compress(col, mask) for col in (range(n), evb, addrs, kinds)))
    for rank, e, addr, k in rows:
        if e == _ALLOC:
            level = 1 if k == KIND_BLOCK else 0
            old = live[level].get(addr)
            if old is not None:
                o = r0s[level][old]
                if sizes[o] == sizes[rank]:
                    # The same allocation seen by two sources (CUPTI and a framework hook).
                    src = xs[rank]
                    extra = lives[level].extra
                    also, dups = extra.get(old, ((), ()))
                    if src and src != xs[o] and src not in also:
                        also = (*also, src)
                    extra[old] = (also, (*dups, refs[rank]))
                    if k == KIND_SEGMENT:
                        upgraded[level][old] = 1
                    merged.append(rank)
                    continue
                # A new allocation where one is still live: its free was never recorded.
                r1s[level][old] = rank
                frees[level][old] = _FREED_IMPLIED
                closed[level][addr] = old
            i = count[level]
            count[level] = i + 1
            live[level][addr] = i
            r0s[level][i] = rank
            continue
        levels = _BLOCKS if k == KIND_BLOCK else _CONTAINERS if k in (KIND_DEVICE, KIND_SEGMENT) else _EITHER
        for level in levels:
            life = live[level].pop(addr, None)
            if life is not None:
                r1s[level][life] = rank
                frees[level][life] = refs[rank]
                phase = xs[rank]
                if phase is None or phase == PHASE_COMPLETED:
                    dones[level][life] = rank
                closed[level][addr] = life
                break
        else:
            # Deferred driver free after the program's own free: annotate, don't double count.
            for level in levels:
                life = closed[level].get(addr)
                if life is not None and dones[level][life] < 0:
                    dones[level][life] = rank
                    break
            else:
                unmatched += 1
    # Which records began a life, per level: lives began in rank order, so a life's columns are
    # those records' columns, taken whole (compress) rather than one life at a time.
    is_alloc = bytes(map(_ALLOC.__eq__, evb))
    is_block = bytes(map(eq, repeat(KIND_BLOCK), kinds))
    began = [bytearray(map(gt, is_alloc, is_block)), bytearray(map(and_, is_alloc, is_block))]
    for rank in merged:
        began[1 if kinds[rank] == KIND_BLOCK else 0][rank] = 0
    for level, lv in enumerate(lives):
        m = count[level]
        for col in (lv.r0, lv.r1, lv.free, lv.done):
            del col[m:]
        lv.began = began[level]
        lv.ref = array("q", compress(refs, lv.began))
        lv.kind = array("b", map(_KIND_CODE.__getitem__, compress(kinds, lv.began)))
        for life in upgraded[level]:
            lv.kind[life] = 1
    return unmatched


def _replayed(got: tuple[Any, ...], kinds: Sequence[Any], xs: Sequence[Any], refs: Sequence[int],
              lives: tuple[_LevelLives, _LevelLives]) -> int:
    """The compiled replay's lives into ``lives`` (the loop of :func:`_replay_lives`, done in C);
    the merges of one allocation seen by two sources are applied here, in the loop's order."""
    unmatched, pairs, *levels = got
    for lv, (r0, r1, free, done, ref, kind, began, starts, ends) in zip(lives, levels):
        for name, data in (("r0", r0), ("r1", r1), ("free", free), ("done", done), ("ref", ref)):
            col = array("q")
            col.frombytes(data)
            setattr(lv, name, col)
        lv.kind = array("b")
        lv.kind.frombytes(kind)
        lv.began = began
        lv.span = (array("Q"), array("Q"))
        lv.span[0].frombytes(starts)
        lv.span[1].frombytes(ends)
    for level, old, rank in pairs:
        lv = lives[level]
        o = lv.r0[old]
        src = xs[rank]
        also, dups = lv.extra.get(old, ((), ()))
        if src and src != xs[o] and src not in also:
            also = (*also, src)
        lv.extra[old] = (also, (*dups, refs[rank]))
        if kinds[rank] == KIND_SEGMENT:
            lv.kind[old] = 1
    return int(unmatched)


_BLOCKS, _CONTAINERS, _EITHER = (1,), (0,), (0, 1)


_ALLOC_OR_FREE = frozenset((_ALLOC, _FREE))


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
    return Ledger(pids, sink.records, sink.skipped, torn, files,
                  tuple(why for _f, why in sink.problems), dict(sink.skipped_by))


#: ledgers at least this large are read by several processes (one per core, a file each)
PARALLEL_BYTES = 16 << 20
#: environment: how many processes read a ledger (1: this process only)
JOBS_ENV = "FAULTHUNT_MAP_JOBS"


def load_ledger(source: Path | Iterable[Path], *, jobs: int | None = None) -> Ledger:
    """Load a ledger directory (every ``*.jsonl``) or files; malformed lines are skipped, counted.

    A record without ``pid`` takes it from its file name (``<pid>.jsonl``). Files are only read.
    ``jobs``: processes that read files side by side (default: one per core for a ledger of
    :data:`PARALLEL_BYTES` or more in several files, else 1; :data:`JOBS_ENV` overrides).
    """
    files = _ledger_files(source)
    store = RecordStore()
    for path in files:
        store.add_file(path, _pid_from_name(path))
    jobs = _jobs(files) if jobs is None else jobs
    if jobs > 1:
        got = _load_forked(files, store, jobs)
        if got is not None:
            return got
    sink, torn = _read_files(store, range(1, len(files) + 1))
    return _finish(sink, store, tuple(str(p) for p in files), tuple(str(files[f - 1]) for f in torn))


def _read_files(store: RecordStore, fids: Iterable[int]) -> tuple[_Collector, list[int]]:
    sink = _Collector()
    torn = []
    for fid in fids:
        path, file_pid, marks = store.files[fid - 1]
        sink.file_index = fid
        if _read_file(path, fid, file_pid, sink, marks):
            torn.append(fid)
    return sink, torn


def _jobs(files: list[Path]) -> int:
    env = os.environ.get(JOBS_ENV, "")
    if env.isdigit():
        return max(1, int(env))
    if len(files) < 2 or not hasattr(os, "fork") or threading.active_count() > 1:
        return 1  # forking a process with other threads running can deadlock the child
    try:
        if sum(p.stat().st_size for p in files) < PARALLEL_BYTES:
            return 1
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        # Forked readers cost about a fifth more CPU in all (results cross a pipe): worth it only
        # on cores nobody else is using.
        idle = cores - int(os.getloadavg()[0]) if hasattr(os, "getloadavg") else cores
    except OSError:
        return 1
    return max(1, min(len(files), idle, 8))


def _load_forked(files: list[Path], store: RecordStore, jobs: int) -> Ledger | None:
    """Read and index files in ``jobs`` forked processes (each whole files, balanced by size),
    results back through pipes; None when a process failed or a pid spans two of them (then the
    caller reads everything itself, the same way)."""
    sizes = []
    for p in files:
        try:
            sizes.append(p.stat().st_size)
        except OSError:
            sizes.append(0)
    bins: list[list[int]] = [[] for _ in range(jobs)]
    load = [0] * jobs
    for fid in sorted(range(1, len(files) + 1), key=lambda f: -sizes[f - 1]):
        k = load.index(min(load))
        bins[k].append(fid)
        load[k] += sizes[fid - 1]
    children: list[tuple[int, int]] = []
    for fids in bins:
        if not fids:
            continue
        fids.sort()
        r, w = os.pipe()
        try:
            child = os.fork()
        except OSError:  # no process to be had: read here, what the others read is discarded
            os.close(r)
            os.close(w)
            for started, fd in children:
                os.close(fd)
                os.waitpid(started, 0)
            return None
        if child == 0:  # pragma: no cover - runs in the child, which reports through the pipe
            status = 1
            try:
                os.close(r)
                with os.fdopen(w, "wb") as out:
                    pickle.dump(_load_bin(store, fids), out, protocol=pickle.HIGHEST_PROTOCOL)
                status = 0
            finally:
                os._exit(status)
        os.close(w)
        children.append((child, r))
    results = []
    for child, r in children:
        try:
            with os.fdopen(r, "rb") as fh:
                results.append(pickle.load(fh))
        except (EOFError, pickle.UnpicklingError, OSError):
            results.append(None)
        os.waitpid(child, 0)
    if any(got is None for got in results):
        return None
    pids: dict[int | None, PidLedger] = {}
    records = skipped = 0
    problems: list[tuple[int, str]] = []
    skipped_by: dict[str, int] = {}
    torn: list[int] = []
    first: dict[int | None, tuple[int, int]] = {}
    for marks, got_pids, counts, got_problems, got_by, got_torn, got_first in results:
        if set(got_pids) & set(pids):
            return None  # one process's records in files read apart: replay them together
        for fid, m in marks.items():
            path, file_pid, _old = store.files[fid - 1]
            store.files[fid - 1] = (path, file_pid, m)
        for pl in got_pids.values():
            _attach(pl, store)
        pids.update(got_pids)
        first.update((pid, (f, k)) for k, (pid, f) in enumerate(got_first.items()))
        records += counts[0]
        skipped += counts[1]
        problems.extend(got_problems)
        for why, n in got_by.items():
            skipped_by[why] = skipped_by.get(why, 0) + n
        torn.extend(got_torn)
    problems.sort(key=lambda p: p[0])
    pids = {pid: pids[pid] for pid in sorted(pids, key=first.__getitem__)}  # as one reader orders them
    return Ledger(pids, records, skipped, tuple(str(files[f - 1]) for f in sorted(torn)),
                  tuple(str(p) for p in files), tuple(why for _f, why in problems[:5]), skipped_by)


def _load_bin(store: RecordStore, fids: list[int]) -> tuple[Any, ...]:
    """A forked reader's part: its files read, replayed and indexed (trees built here too)."""
    sink, torn = _read_files(store, fids)
    pids = {pid: _replay(pid, cols, store) for pid, cols in sink.pids.items() if len(cols.t)}
    for pl in pids.values():
        for level in (pl.containers, pl.blocks):
            level.index.build()
        _attach(pl, None)
    marks = {fid: store.files[fid - 1][2] for fid in fids}
    first = {pid: sink.first_file[pid] for pid in pids}
    return (marks, pids, (sink.records, sink.skipped), sink.problems, sink.skipped_by, torn, first)


def _attach(pl: PidLedger, store: RecordStore | None) -> None:
    """Point a process's record views at ``store`` (None: detached, to send to another process)."""
    for level in (pl.containers, pl.blocks):
        level.store = store  # type: ignore[assignment]
    for seq in (pl.launches, pl.records, pl.guard):
        if isinstance(seq, _LazyRecords):
            seq._store = store  # type: ignore[assignment]


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


_GUARD_MARK = b'"' + GUARD_SOURCE.encode() + b'"'


def iter_guard_records(source: Path | Iterable[Path]) -> Iterator[dict[str, Any]]:
    """Guard mode's records (``source: guard``: slots, frees, its notes) of a ledger directory or
    files, one at a time, in file order; every other record is passed over without being decoded
    (a chunk without the word is skipped whole). Bounded memory whatever the ledger's size; a bad
    line is skipped. A record without ``pid`` takes it from its file name."""
    for path in _ledger_files(source):
        file_pid = _pid_from_name(path)
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed below; read-only
        except OSError:
            continue
        with fh:
            carry = b""
            while True:
                try:
                    data = fh.read(CHUNK)
                except OSError:
                    break
                if not data:
                    break
                cut = data.rfind(b"\n")
                if cut < 0:
                    carry = carry + data if len(carry) < MAX_LINE else b""
                    continue
                block, carry = carry + data[:cut + 1], data[cut + 1:]
                if _GUARD_MARK in block:
                    yield from _guard_lines(block, file_pid)
            if _GUARD_MARK in carry:
                yield from _guard_lines(carry.rstrip(b"\0"), file_pid)


def _guard_lines(block: bytes, file_pid: int | None) -> Iterator[dict[str, Any]]:
    for line in block.split(b"\n"):
        if _GUARD_MARK not in line:
            continue
        try:
            rec = _ANY.decode(line.strip(b"\0 \t\r"))
        except _DECODE_ERRORS:
            continue
        if type(rec) is dict and rec.get("source") == GUARD_SOURCE:
            if file_pid is not None and "pid" not in rec:
                rec["pid"] = file_pid
            yield rec


def read_ledger_file(path: Path) -> JsonlRead:
    """Every record of one ledger file as a dict (for scripts that count what a ledger holds;
    mapping does not use this: it keeps columns, not records)."""
    from faulthunt.rundir import read_jsonl

    return read_jsonl(path)


__all__ = ["Ledger", "PidLedger", "Level", "Life", "RecordStore", "load_ledger", "build_ledger",
           "parse_ledger_text", "read_ledger_file", "iter_guard_records", "KIND_SEGMENT", "EVENT_NOTE"]
