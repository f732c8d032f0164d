"""The ledger writer: one append-only JSONL file per process, ``ledger/<pid>.jsonl``.

Every completed line survives the process: by default (:data:`WRITE_ENV` ``mmap``) lines are
copied into a shared mapping of the file, whose pages belong to the kernel's page cache, so a
worker that aborts, is SIGKILLed, or whose CUDA context is poisoned keeps every record written
before that moment without a system call per record; ``write`` issues one ``write(2)`` per line on
an ``O_APPEND`` descriptor. Post-mortem CUDA queries are impossible there, so nothing is left to be
asked later.

The writer sits on the allocation and launch paths of the code under test, so it is built to be
cheap (measured in ``scripts/benchrows/ledger.py`` and, on the GPU, scripts/gpu/ledger_breakdown.py):
the hot records (:meth:`LedgerWriter.alloc`, ``free``, ``launch``) are formatted directly, other
records go through :func:`encode_record` (the C JSON encoder, with already-encoded stacks spliced
in), and stacks are taken by :func:`stack_json`, which walks frames with ``sys._getframe`` and
caches the encoded JSON of each distinct stack, so a loop that allocates from the same line pays
dictionary lookups, not formatting and escaping. Which records carry stacks is :data:`STACKS_ENV`.
"""

from __future__ import annotations

import bisect
import collections
import functools
import json
import mmap
import os
import sys
import threading
import time
import weakref
from json.encoder import encode_basestring_ascii as _esc
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from faulthunt import context

#: frames from the ledger package itself are left out of recorded stacks
_SKIP_PREFIX = str(Path(__file__).resolve().parent) + os.sep
STACK_LIMIT = 8
#: ``alloc`` (default): stacks on allocations only; ``all``: also on launches and frees; ``off``;
#: ``sampled`` (what ``--ledger auto`` sets when this is unset): stacks on the driver allocations
#: that CUPTI records only while the sampling bucket has a token (:data:`SAMPLE_BURST` at each
#: change of the running test, one back every :data:`SAMPLE_REFILL` seconds)
STACKS_ENV = "FAULTHUNT_LEDGER_STACKS"
STACK_MODES = ("alloc", "all", "off", "sampled")
#: sampled stacks: tokens at each test change (a test's first allocations keep their stacks)
SAMPLE_BURST = 64
#: sampled stacks: seconds for one token to come back (at most 100 stacks a second after the burst)
SAMPLE_REFILL = 0.01
#: distinct stacks whose encoding is kept; cleared when full (a bound, not an LRU: cheap)
_CACHE_MAX = 8192


class RawJSON(str):
    """Text that is already JSON: :func:`encode_record` writes it as it is."""

    __slots__ = ()


#: id(code) -> (code, left out?). Keyed by id, not by the code object: hashing a code object
#: hashes its whole bytecode on every lookup (CPython 3.12 walks each instruction), which made a
#: stack cost tens of microseconds. Holding the code object here keeps its id from being reused.
_codes: dict[int, tuple[CodeType, bool]] = {}
#: (id(code), line, ...) -> the encoded stack; valid while _codes holds those codes
_stack_cache: dict[tuple[Any, ...], RawJSON] = {}  # (code id, offset)... or ("line", code id, line)...


def _skipped(code: CodeType) -> bool:
    got = _codes.get(id(code))
    if got is None:
        got = _codes[id(code)] = (code, code.co_filename.startswith(_SKIP_PREFIX))
    return got[1]


def _make_room() -> None:
    """Bound the caches (called before a walk, which adds a few dozen entries at most)."""
    if len(_codes) >= _CACHE_MAX:
        _codes.clear()
        _stack_cache.clear()  # its keys name ids only _codes kept valid


def python_stack(frame: FrameType | None = None, limit: int = STACK_LIMIT) -> list[str]:
    """The calling Python stack, innermost first, as ``file:line in func`` (faulthunt frames left out).

    Walks frames directly: cheaper than :mod:`traceback`, which reads source lines.
    """
    f: FrameType | None = frame if frame is not None else sys._getframe(1)
    _make_room()
    out: list[str] = []
    while f is not None and len(out) < limit:
        code = f.f_code
        if not _skipped(code):
            out.append(f"{code.co_filename}:{f.f_lineno} in {code.co_name}")
        f = f.f_back
    return out


def _stack_json_by_offset(frame: FrameType | None = None, limit: int = STACK_LIMIT) -> RawJSON:
    """:func:`python_stack` as encoded JSON, cached per distinct (code, instruction offset)
    sequence.

    Keyed by ``f_lasti``, not ``f_lineno``: a frame's line number is computed from the code's
    line table, walked from its start on every read (CPython 3.11+), so a stack through a large
    framework function cost tens of microseconds; the offset is a field. Line numbers are worked
    out once, when a stack is first seen.
    """
    f: FrameType | None
    f = start = frame if frame is not None else sys._getframe(1)
    _make_room()
    key: list[int] = []
    codes = _codes
    n = 0
    while f is not None and n < limit:
        code = f.f_code
        got = codes.get(id(code))
        if got is None:
            _skipped(code)
            got = codes[id(code)]
        if not got[1]:
            key.append(id(code))
            key.append(f.f_lasti)
            n += 1
        f = f.f_back
    k = tuple(key)
    stack = _stack_cache.get(k)
    if stack is None:
        if len(_stack_cache) >= _CACHE_MAX:
            _stack_cache.clear()
        stack = _stack_cache[k] = RawJSON(json.dumps(python_stack(start, limit)))
    return stack


def _stack_json_by_line(frame: FrameType | None = None, limit: int = STACK_LIMIT) -> RawJSON:
    """The same, cached per (code, line) sequence: the earlier key, kept for comparisons
    (``FAULTHUNT_LEDGER_STACK_KEY=line``)."""
    f: FrameType | None = frame if frame is not None else sys._getframe(1)
    _make_room()
    key: list[int] = []
    codes = _codes
    n = 0
    while f is not None and n < limit:
        code = f.f_code
        got = codes.get(id(code))
        if got is None:
            _skipped(code)
            got = codes[id(code)]
        if not got[1]:
            key.append(id(code))
            key.append(f.f_lineno)
            n += 1
        f = f.f_back
    k: tuple[Any, ...] = ("line", *key)
    stack = _stack_cache.get(k)
    if stack is None:
        if len(_stack_cache) >= _CACHE_MAX:
            _stack_cache.clear()
        stack = _stack_cache[k] = RawJSON("[" + ",".join(
            _esc(f"{codes[k[i]][0].co_filename}:{k[i + 1]} in {codes[k[i]][0].co_name}")
            for i in range(1, len(k), 2)) + "]")
    return stack


#: ``offset`` (default) or ``line``: what the stack cache is keyed by (see _stack_json_by_offset)
STACK_KEY_ENV = "FAULTHUNT_LEDGER_STACK_KEY"
stack_json = _stack_json_by_line if os.environ.get(STACK_KEY_ENV) == "line" else _stack_json_by_offset


#: the C encoder, compact, no circularity check (records are flat and built here)
_dumps = json.JSONEncoder(default=str, separators=(",", ":"), check_circular=False, allow_nan=False).encode


def encode_record(rec: dict[str, Any]) -> str:
    """One JSON object line (no newline) for a record; equal to ``json.dumps`` after parsing.

    The C encoder does the record; :class:`RawJSON` values (cached stacks) are spliced in as
    they are, so a stack is never re-encoded. Non-finite floats become null (JSON has none).
    """
    raw = None
    for k, v in rec.items():
        if type(v) is RawJSON:
            if raw is None:
                raw = []
            raw.append((k, v))
    if raw is None:
        try:
            return _dumps(rec)
        except ValueError:
            return _dumps(_finite(rec))
    rest = {k: v for k, v in rec.items() if type(v) is not RawJSON}
    try:
        body = _dumps(rest)
    except ValueError:
        body = _dumps(_finite(rest))
    tail = ",".join(_esc(k) + ":" + v for k, v in raw)
    return (body[:-1] + "," + tail + "}") if len(body) > 2 else ("{" + tail + "}")


def _finite(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if type(v) is float and (v != v or v in (float("inf"), float("-inf"))) else v)
            for k, v in rec.items()}


#: allocations a framework refinement is making (and recording, with its stack), per thread: on the
#: activity route the CUPTI callback then takes no stack of its own (the compiled route keeps the
#: same count in C: fl_refine)
_refine = threading.local()


def refining() -> int:
    return getattr(_refine, "depth", 0)


def _refine_enter() -> None:
    _refine.depth = getattr(_refine, "depth", 0) + 1


def _refine_leave() -> None:
    _refine.depth -= 1


def stack_mode() -> str:
    """The stack policy from :data:`STACKS_ENV` (unknown values mean the default, ``alloc``)."""
    m = os.environ.get(STACKS_ENV, "alloc")
    return m if m in STACK_MODES else "alloc"


class StackSampler:
    """The Python routes' twin of ``_native.c``'s sampled-stack bucket: :meth:`due` says whether
    this driver allocation gets its stack. Full (``burst`` tokens) whenever the running test
    changes, one token back every ``refill`` seconds, never more than ``burst``. ``clock`` and
    ``nodeid`` are injectable for tests."""

    def __init__(self, burst: int | None = None, refill: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 nodeid: Callable[[], Any] = lambda: context.current_nodeid) -> None:
        self.burst = SAMPLE_BURST if burst is None else burst
        self.refill = SAMPLE_REFILL if refill is None else refill
        self.clock, self.nodeid = clock, nodeid
        burst = self.burst
        self.tokens, self.since, self.test = burst, clock(), nodeid()
        self.taken = self.left_out = 0

    def due(self) -> bool:
        test = self.nodeid()
        if test is not self.test:
            self.test, self.tokens, self.since = test, self.burst, self.clock()
        elif self.tokens <= 0 and self.refill > 0:
            now = self.clock()
            back = int((now - self.since) / self.refill)
            if back > 0:
                self.tokens, self.since = min(back, self.burst), now
        if self.tokens > 0:
            self.tokens -= 1
            self.taken += 1
            return True
        self.left_out += 1
        return False


#: ``mmap`` (default on the Python routes): records are copied into a shared mapping of the file
#: (no system call per record; the kernel keeps the pages when the process dies); ``native`` (the
#: default on the compiled routes): the same mapping, kept by the compiled library, which writes its
#: own CUPTI records there too; ``write``: one ``write(2)`` per record
WRITE_ENV = "FAULTHUNT_LEDGER_WRITE"
BACKENDS = ("native", "mmap", "write")
#: seconds between drains of the queued records of the ``activity`` route
DRAIN_GAP = 0.1
#: test changes kept for finding the test at a time (activity records arrive after the fact)
HISTORY = 4096
#: bytes mapped (and reserved on disk) at a time by the mmap backend
CHUNK = 4 << 20


def _json_str(s: str | None) -> str:
    return "null" if s is None else _esc(s)


def seal(path: Path | str) -> bool:
    """Cut the reserved, never-written tail (NUL bytes) off a ledger file whose writer died.

    A writer that exits normally does this itself; after a SIGKILL or an abort the file keeps the
    zero-filled reserve past its last record, which every faulthunt reader ignores but other tools
    (``jq``) do not. Returns True when the file was shortened. Never shortens past a record.
    """
    path = Path(path)
    try:
        with open(path, "r+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            end = size
            step = 1 << 16
            while end > 0:
                lo = max(0, end - step)
                fh.seek(lo)
                block = fh.read(end - lo)
                stripped = block.rstrip(b"\0")
                if stripped:
                    end = lo + len(stripped)
                    break
                end = lo
            if end == size:
                return False
            fh.truncate(end)
            return True
    except OSError:
        return False


def seal_dead(directory: Path | str) -> list[Path]:
    """:func:`seal` every ``<pid>.jsonl`` in ``directory`` whose process is gone; the files cut."""
    cut = []
    for path in Path(directory).glob("*.jsonl"):
        try:
            os.kill(int(path.stem), 0)
            continue  # still running (or the pid was reused): leave it
        except ValueError:
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        if seal(path):
            cut.append(path)
    return cut


class LedgerWriter:
    """Writes ledger records for this process; safe to share between threads and sources.

    After a ``fork`` the child writes its own ``<pid>.jsonl``. ``stacks``: which records carry a
    Python stack (:data:`STACK_MODES`); sources ask :attr:`alloc_stacks` / :attr:`all_stacks`.

    Backends (:data:`WRITE_ENV`): ``mmap`` copies each line into a ``MAP_SHARED`` mapping of the
    file, reserved ahead with ``posix_fallocate`` in :data:`CHUNK` pieces: no system call per
    record, and a process killed by SIGKILL or ``abort()`` still leaves every completed line in the
    file (the pages belong to the kernel's page cache, not the process). The unused reserve past
    the last line reads as NUL bytes until :meth:`close` (or :func:`seal`) cuts it; the readers skip
    it. ``write`` (also chosen when ``fsync`` is asked or the reserve cannot be made) issues one
    ``write(2)`` per line on an ``O_APPEND`` descriptor. ``native`` is ``mmap`` done by the
    compiled library (:mod:`.native`): its CUPTI callback and activity decoding write into the same
    mapping, under the same lock, as this writer's own lines.

    ``route`` (:mod:`.route`, default: the environment's) picks the backend when none is given, and
    on the ``activity`` route the refinements' hot paths (:meth:`alloc`, :meth:`free`) queue their
    records for a drain every :data:`DRAIN_GAP` seconds (and at every forced CUPTI flush and at
    close) instead of writing them at once.

    The hot paths :meth:`alloc`, :meth:`free` and :meth:`launch` format their line directly (the
    wall clock as integer nanoseconds with an ``e-9`` exponent: a JSON number that reads back as
    ``time.time()`` would, at a third of the cost of formatting a float); :meth:`record` takes any
    fields through the JSON encoder. Records carry ``t`` only; the file's first record (a note)
    carries ``t_mono`` too, which is how readers relate the ledger to monotonic clocks.
    """

    def __init__(self, ledger_dir: Path | str, fsync: bool = False, stacks: str | None = None,
                 backend: str | None = None, route: Any = None, lazy: bool = False) -> None:
        from faulthunt.ledger.route import choose

        self.route = route if route is not None else choose()
        self.ledger_dir = Path(ledger_dir)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._fd = -1
        self._mm: mmap.mmap | None = None
        self._pos = 0          # file offset of the next byte
        self._win = 0          # file offset of the mapped window
        self.records = 0
        self.dropped = 0
        self.set_stacks(stacks if stacks in STACK_MODES else stack_mode())
        want = backend or os.environ.get(WRITE_ENV) or ("native" if self.route.compiled else "mmap")
        self.backend = "write" if fsync or want not in BACKENDS else want
        self._nid_src: object = object()
        self._nid_json = "null"
        self._names: dict[str, str] = {}
        self._sink: int | None = None
        self._lib: Any = None
        #: (wall time, nodeid) at each test change, when following tests (follow_tests)
        self._hist_t: list[float] = []
        self._hist_n: list[str | None] = []
        self._following = False
        #: the name of the CUPTI source recording driver-level allocations and frees into this
        #: writer, once one started (refinements leave to it what it records)
        self.cupti: str | None = None
        #: encoded notes about the ledger's own set-up, waiting for the file (:meth:`note_when_open`)
        self._held: list[bytes] = []
        self._reopen = threading.Lock()
        if lazy:
            # the file, its mapping and the compiled library's flush thread wait for the first
            # record: a process that never records (a CPU-only suite) makes none of them
            self._put = self._put_first
        else:
            self._open()
        _writers.add(self)
        if self.route.deferred:
            self._defer()

    def set_stacks(self, mode: str) -> None:
        """Which records carry stacks (:data:`STACK_MODES`), before any source starts. ``sampled``:
        :attr:`sampler` decides for CUPTI's driver allocations (the compiled library keeps its own
        bucket); a refinement's records, when one is on, keep their stacks."""
        self.stacks = mode
        self.alloc_stacks = mode != "off"
        self.all_stacks = mode == "all"
        self.sampler = StackSampler() if mode == "sampled" else None

    # opening, forking, closing -----------------------------------------------------------------
    def _open(self) -> None:
        self._pid = os.getpid()
        self._mm = None
        self.ledger_dir.mkdir(parents=True, exist_ok=True)
        path = self.ledger_dir / f"{self._pid}.jsonl"
        why = None
        if self.backend == "native":
            lib = self.route.lib
            if lib is None:
                from faulthunt.ledger.native import load

                lib = load()[0]
            try:
                if lib is None:
                    raise OSError(self.route.why or "the compiled ledger library is not built")
                self._open_native(path, lib)
            except OSError as exc:
                why = f"native backend unavailable ({exc}); mmap"
                self.backend = "mmap"
        if self.backend == "mmap":
            try:
                self._open_mmap(path)
            except (OSError, ValueError) as exc:
                why = f"mmap backend unavailable ({exc}); writing with write(2)"
                self.backend = "write"
        if self.backend == "write":
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._put = self._put_write
        self.record("note", "ledger", t_mono=time.monotonic(),
                    message=f"ledger opened ({self.backend})" + (f": {why}" if why else ""))
        held, self._held = self._held, []
        for data in held:
            self._put(data)

    @property
    def opened(self) -> bool:
        """Whether this process's file exists yet (a lazy writer makes it at its first record)."""
        return self._fd >= 0

    def note_when_open(self, message: str, t: float | None = None, **fields: Any) -> None:
        """A note about the ledger's own set-up: written now when the file is open, else kept
        (encoded now, with its time: ``t``, default now) and written right after the file's opening note, when the
        first record makes the file. A process that never records leaves no file."""
        rec = self._make("note", "ledger", t, None, os.getpid(), context, {"message": message, **fields})
        with self._reopen:  # not racing the first record's opening (which writes what is held)
            if self._fd < 0 and self._put == self._put_first:
                self._held.append((encode_record(rec) + "\n").encode("utf-8"))
                return
        self.write(rec)

    @staticmethod
    def _continue(fd: int, path: Path) -> tuple[int, bool]:
        """(where to write next, whether a torn last line needs its newline) in a file that may
        hold an earlier process's records (a reused pid): after its last byte."""
        if not os.fstat(fd).st_size:
            return 0, False
        seal(path)
        pos = os.fstat(fd).st_size
        return pos, bool(pos) and os.pread(fd, 1, pos - 1) != b"\n"

    def _open_mmap(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            pos, torn = self._continue(fd, path)
            self._fd = fd
            self._pos = pos
            self._map(pos - pos % CHUNK)
            if torn:
                self._put_mmap(b"\n")  # its torn last line stays a line of its own
        except BaseException:
            os.close(fd)
            self._fd = -1
            raise
        self._put = self._put_mmap

    def _open_native(self, path: Path, lib: Any) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            pos, torn = self._continue(fd, path)
            sink = lib.fl_sink_open(fd, pos, CHUNK, self._pid)
            if not sink:
                raise OSError(f"cannot map {path}")
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._sink, self._lib = fd, sink, lib
        put = lib.fl_put

        def put_native(data: bytes) -> None:
            if put(sink, data, len(data)):
                raise ValueError("ledger writer is closed")
            self.records += 1

        self._put = put_native
        if torn:
            put_native(b"\n")
        # the library's thread faults in the pages the next lines go to, off the recording threads
        lib.fl_use_sink(sink)
        lib.fl_start_flusher()
        self.follow_tests()

    def _map(self, offset: int) -> None:
        os.posix_fallocate(self._fd, offset, CHUNK)  # ENOSPC here, not SIGBUS later
        mm = mmap.mmap(self._fd, CHUNK, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        if self._mm is not None:
            self._mm.close()
        self._mm = mm
        self._win = offset

    def _unmap(self) -> None:
        """Drop the mapped window, if any (a view still exported keeps it; that is harmless)."""
        if self._mm is not None:
            try:
                self._mm.close()
            except (BufferError, ValueError):
                pass
            self._mm = None

    def _after_fork(self) -> None:
        # The child shares the parent's mapping: drop it (unmapping in the child leaves the
        # parent's untouched); the child's own file is made by its first record, so a forked
        # child that records nothing leaves no file. A native sink is dead in the child already
        # (the library's fork handler): forget it.
        self._lock = threading.Lock()
        self._reopen = threading.Lock()
        self._held = []  # the parent's set-up notes: the parent writes them (or, never opened, none)
        if self._fd < 0 and self._put == self._put_first:  # lazy, never opened: the child's own pid
            self._pid = os.getpid()
        if self.route.deferred:
            self._q.clear()  # the parent's queue: the parent writes it
            self._drain_lock = threading.Lock()
            self._start_drainer()
        if self._fd >= 0:
            self._sink = None
            self._unmap()
            os.close(self._fd)
            self._fd = -1
            self._nid_src = object()
            self._pid = os.getpid()
            self._put = self._put_first

    def _put_first(self, data: bytes) -> None:
        with self._reopen:  # not self._lock: opening writes the opening note through it
            if self._fd < 0:
                try:
                    self._open()  # replaces self._put
                except OSError as exc:  # on the allocation path of the code under test: never raise
                    self._put = self._put_lost
                    print(f"faulthunt ledger: cannot create {self.path} ({exc}); records are being lost",
                          file=sys.stderr)
        self._put(data)

    def _put_lost(self, data: bytes) -> None:
        self.dropped += 1

    @property
    def path(self) -> Path:
        return self.ledger_dir / f"{self._pid}.jsonl"

    def close(self) -> None:
        if self.route.deferred:
            self._drain_stop.set()
            self.drain()
        if self._following:
            context.remove_listener(self._on_test)
            self._following = False
        with self._lock:
            self._put = self._put_write  # which says "closed" from now on
            if self._fd < 0:
                return
            if self._sink is not None:
                self._lib.fl_sink_close(self._sink)
                self._sink = None
            if self._mm is not None:
                self._mm.close()
                self._mm = None
                os.ftruncate(self._fd, self._pos)  # cut the unused reserve
            os.close(self._fd)
            self._fd = -1
        _writers.discard(self)

    # putting bytes -------------------------------------------------------------------------------
    def _put_write(self, data: bytes) -> None:
        with self._lock:
            if self._fd < 0:
                raise ValueError("ledger writer is closed")
            try:
                os.write(self._fd, data)
                if self._fsync:
                    os.fsync(self._fd)
            except OSError as exc:  # a full disk must not fail the allocation being recorded
                self.dropped += 1
                if self.dropped == 1:
                    print(f"faulthunt ledger: cannot write {self.path} ({exc}); records are being lost",
                          file=sys.stderr)
                return
            self.records += 1

    def _put_mmap(self, data: bytes) -> None:
        with self._lock:
            mm = self._mm
            if mm is None:
                raise ValueError("ledger writer is closed")
            lo = self._pos - self._win
            hi = lo + len(data)
            if hi <= CHUNK:
                mm[lo:hi] = data
            else:  # the line crosses into the next window
                cut = CHUNK - lo
                mm[lo:CHUNK] = data[:cut]
                self._pos += cut
                rest = data[cut:]
                try:
                    while rest:
                        self._map(self._win + CHUNK)
                        n = min(len(rest), CHUNK)  # a line longer than a window: several
                        self._mm[0:n] = rest[:n]  # type: ignore[index]
                        self._pos += n
                        rest = rest[n:]
                except OSError as exc:  # no room for the next window (disk full, a quota)
                    self._spill(rest, exc)
                    return
                self.records += 1
                return
            self._pos += len(data)
            self.records += 1

    def _spill(self, rest: bytes, exc: OSError) -> None:
        """Go on with write(2) when the next window cannot be reserved; the caller holds the lock.

        The ledger sits on the allocation path of the code under test, so this never raises into
        it: the file is cut to what was written, reopened for appending, and the rest of the line
        goes there (if even that fails, the record is dropped and counted in ``dropped``).
        """
        self._unmap()
        try:
            os.ftruncate(self._fd, self._pos)
            os.close(self._fd)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self.backend = "write"
            self._put = self._put_write
            os.write(self._fd, rest)
            note = (f'{{"event":"note","t":{time.time_ns()}e-9,"pid":{self._pid},"nodeid":null,'
                    f'"source":"ledger","message":{_esc(f"mmap reserve failed ({exc}); writing with write(2)")}}}\n')
            os.write(self._fd, note.encode())
            self.records += 2
        except OSError as exc2:
            self.dropped += 1
            print(f"faulthunt ledger: cannot write {self.path} ({exc2}); records are being lost",
                  file=sys.stderr)
            self._put = self._put_write  # which counts what it cannot write

    #: replaced per instance (_open, close, fork): an attribute, so no call pays a method lookup chain
    _put: Callable[[bytes], None] = _put_write  # type: ignore[assignment]  # bound on access like any method

    def put_line(self, line: str) -> None:
        """Write one already-encoded JSON line (no newline) as it is."""
        self._put((line + "\n").encode("utf-8"))

    # records -------------------------------------------------------------------------------------
    def stack(self, frame: FrameType | None = None) -> RawJSON:
        """The caller's stack, encoded (for a record's ``stack`` field)."""
        return stack_json(frame if frame is not None else sys._getframe(1))

    def _nid(self) -> str:
        n = context.current_nodeid
        if n is not self._nid_src:
            self._nid_src = n
            self._nid_json = _json_str(n)
            if self._sink is not None:  # a test set without set_current: the C side learns it here
                self._lib.fl_set_test(self._nid_json.encode(), len(self._nid_json))
        return self._nid_json

    def refine_marks(self) -> tuple[Callable[[], Any] | None, Callable[[], Any] | None]:
        """(enter, leave) for a refinement to call around its own allocation call, so that CUPTI's
        callback does not take the same stack again; (None, None) on the ``python`` route, whose
        CUPTI source always takes its own."""
        if self._sink is not None:
            return functools.partial(self._lib.fl_refine, 1), functools.partial(self._lib.fl_refine, -1)
        if self.route.launches == "activity":
            return _refine_enter, _refine_leave
        return None, None

    # the test at a time ---------------------------------------------------------------------------
    def follow_tests(self) -> None:
        """Keep the test running at each time from now on (:meth:`test_at`; the compiled library
        keeps its own copy): records that arrive after the fact are attributed by their time."""
        if self._following:
            return
        self._following = True
        context.add_listener(self._on_test)
        self._on_test(context.current_nodeid)

    def _on_test(self, nodeid: str | None) -> None:
        if len(self._hist_t) >= 2 * HISTORY:
            del self._hist_t[:HISTORY], self._hist_n[:HISTORY]
        self._hist_t.append(time.time())
        self._hist_n.append(nodeid)
        if self._sink is not None:
            j = _json_str(nodeid)
            self._lib.fl_set_test(j.encode(), len(j))

    def test_changed_at(self) -> float | None:
        """When the running test last changed (wall time), as followed; None before any."""
        return self._hist_t[-1] if self._hist_t else None

    def test_at(self, t: float) -> str | None:
        """The test running at wall time ``t`` (as followed since :meth:`follow_tests`), else the
        one running now."""
        if not self._hist_t:
            return context.current_nodeid
        i = bisect.bisect_right(self._hist_t, t) - 1
        return self._hist_n[i] if i >= 0 else None

    # the activity route: refinements queue, a drain writes -------------------------------------
    def _defer(self) -> None:
        self._q: collections.deque[tuple[Any, ...]] = collections.deque()
        self._drain_lock = threading.Lock()
        self.alloc = self._alloc_later  # type: ignore[method-assign]
        self.free = self._free_later  # type: ignore[method-assign]
        self._start_drainer()

    def _start_drainer(self) -> None:
        self._drain_stop = threading.Event()
        threading.Thread(target=self._drain_loop, name="faulthunt-ledger-drain", daemon=True).start()

    def _drain_loop(self) -> None:
        while not self._drain_stop.wait(DRAIN_GAP):
            try:
                self.drain()
            except ValueError:  # closed under us
                return

    def _alloc_later(self, source: str, address: int, size: int, kind: str, stack: str | None = None,
                     tail: str = "") -> None:
        if context.current_nodeid is not self._nid_src:
            self._nid()
        self._q.append((time.time_ns(), self._nid_json, source, address, size, kind, stack, tail))

    def _free_later(self, source: str, address: int, kind: str, phase: str | None = None,
                    stack: str | None = None, tail: str = "") -> None:
        if context.current_nodeid is not self._nid_src:
            self._nid()
        self._q.append((time.time_ns(), self._nid_json, source, address, None, kind, stack,
                        (f',"phase":"{phase}"' if phase else "") + tail))

    def drain(self) -> int:
        """Write every queued record now (one put); the number written."""
        q = getattr(self, "_q", None)
        if not q:
            return 0
        with self._drain_lock:
            lines = []
            pid = self._pid
            pop = q.popleft
            while True:
                try:
                    t, nid, src, addr, size, kind, stack, tail = pop()
                except IndexError:
                    break
                lines.append(
                    f'{{"event":"{"free" if size is None else "alloc"}","t":{t}e-9,"pid":{pid},"nodeid":{nid},'
                    f'"source":"{src}","address":{addr}'
                    + ("" if size is None else f',"size":{size}') + f',"kind":"{kind}"{tail}'
                    + (f',"stack":{stack}}}\n' if stack else "}\n"))
            if lines:
                self._put("".join(lines).encode())
                self.records += len(lines) - 1  # _put counted one
            return len(lines)

    def record(self, event: str, source: str, *, t: float | None = None,
               t_mono: float | None = None, nodeid: Any = context, **fields: Any) -> dict[str, Any]:
        """Write one record; ``t`` defaults to now, ``nodeid`` to the test running."""
        rec = self._make(event, source, t, t_mono, self._pid, nodeid, fields)
        self.write(rec)
        return rec

    @staticmethod
    def _make(event: str, source: str, t: float | None, t_mono: float | None, pid: int, nodeid: Any,
              fields: dict[str, Any]) -> dict[str, Any]:
        """A record's fields in the order :meth:`record` writes them; None values left out."""
        rec: dict[str, Any] = {"event": event, "t": time.time() if t is None else t}
        if t_mono is not None:
            rec["t_mono"] = t_mono
        rec["pid"] = pid
        rec["nodeid"] = context.current_nodeid if nodeid is context else nodeid
        rec["source"] = source
        for k, v in fields.items():
            if v is not None:
                rec[k] = v
        return rec

    def write(self, rec: dict[str, Any]) -> None:
        """Write a prepared record as it is (one line)."""
        self._put((encode_record(rec) + "\n").encode("utf-8"))

    def alloc(self, source: str, address: int, size: int, kind: str, stack: str | None = None,
              tail: str = "") -> None:
        """An ``alloc`` record, now, for the test running. ``tail``: more fields as ``,"k":v``."""
        if context.current_nodeid is not self._nid_src:
            self._nid()
        self._put((f'{{"event":"alloc","t":{time.time_ns()}e-9,"pid":{self._pid},"nodeid":{self._nid_json},'
                   f'"source":"{source}","address":{address},"size":{size},"kind":"{kind}"{tail}'
                   + (f',"stack":{stack}}}\n' if stack else "}\n")).encode())

    def free(self, source: str, address: int, kind: str, phase: str | None = None,
             stack: str | None = None, tail: str = "") -> None:
        """A ``free`` record, now, for the test running."""
        if context.current_nodeid is not self._nid_src:
            self._nid()
        self._put((f'{{"event":"free","t":{time.time_ns()}e-9,"pid":{self._pid},"nodeid":{self._nid_json},'
                   f'"source":"{source}","address":{address},"kind":"{kind}"'
                   + (f',"phase":"{phase}"' if phase else "") + tail
                   + (f',"stack":{stack}}}\n' if stack else "}\n")).encode())

    def launch(self, source: str, kernel: str, api: str, correlation_id: int | None = None,
               stack: str | None = None) -> None:
        """A ``launch`` record, now, for the test running."""
        if context.current_nodeid is not self._nid_src:
            self._nid()
        name = self._names.get(kernel)
        if name is None:
            if len(self._names) >= _CACHE_MAX:
                self._names.clear()
            name = self._names[kernel] = _esc(kernel)
        self._put((f'{{"event":"launch","t":{time.time_ns()}e-9,"pid":{self._pid},"nodeid":{self._nid_json},'
                   f'"source":"{source}","kernel":{name},"api":"{api}"'
                   + (f',"correlation_id":{correlation_id}' if correlation_id is not None else "")
                   + (f',"stack":{stack}}}\n' if stack else "}\n")).encode())


#: open writers, so a fork can give each its child file
_writers: weakref.WeakSet[LedgerWriter] = weakref.WeakSet()


def _reopen_after_fork() -> None:
    for w in list(_writers):
        try:
            w._after_fork()
        except Exception as exc:  # noqa: BLE001 - never break the forked child
            print(f"faulthunt ledger: cannot reopen after fork: {exc!r}", file=sys.stderr)


os.register_at_fork(after_in_child=_reopen_after_fork)
