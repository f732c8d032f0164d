"""The run directory: the spine that every faulthunt command reads and adds to.

Layout (documented in ``docs/rundir.md``)::

    .faulthunt/runs/<id>/          one hunt; ``.faulthunt/runs/latest`` points at the newest
        run.json                   id, argv, cwd, start/end times, faulthunt version
        identity.json              system identity basics (GPU, driver, host)
        env.json                   the environment, secrets redacted
        reproducer.log             pytest's own output
        events/<worker>-<pid>.jsonl  worker-side test spans, one record a line
        controller.jsonl           controller-side events: crashes, hangs, restarts
        ledger/<pid>.jsonl         allocation / free / launch records
        xid.jsonl                  Xid events, attributed to worker and test
        kmsg_before.txt kmsg_after.txt kmsg_added.txt kmsg_cursor.json
        summary.json               the result of the run
        mapping.json               fault address -> verdict
        sanitizer/                 compute-sanitizer rerun
        report.md report.html      rendered reports
        stage/                     repro kit

Everything here is written so that a process killed at any moment leaves what it had recorded
readable: JSON documents are replaced atomically, JSONL is appended one flushed line at a time, and
readers skip (and count) a torn last line instead of failing.

:class:`RunDir` is the one reader of a run directory: every command reads the run through it and
gets typed documents (:mod:`faulthunt.records.documents`, :mod:`faulthunt.records.events`). It
never writes, and never raises on bad data: what it could not read is a
:class:`~faulthunt.records.codec.Problem` (file, line, why) in :meth:`RunDir.problems`.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar, cast

import msgspec

from faulthunt.errors import RunDirError, UsageError
from faulthunt.records import codec
from faulthunt.records.codec import Doc, Problem
from faulthunt.records.documents import (Identity, KmsgCursorDoc, MappingEntry, RunInfo,
                                         SanitizerDoc, Summary, XidLine)
from faulthunt.records.events import (ControllerEvent, OtherEvent, SessionStart, WorkerEvent,
                                      decode_controller_event, decode_worker_event)
# the append-only file and its full-disk words live with the light line writer (the pytest
# processes of a run write through it without this module); named here as before
from faulthunt.records.lines import FULL_ERRNOS as FULL_ERRNOS
from faulthunt.records.lines import LineWriter, disk_full_text, is_full

if TYPE_CHECKING:
    # imported by spans(): only the analysis reads spans, and a pytest process of a run need
    # not import the module
    from faulthunt.records.run import TestSpan

T = TypeVar("T")

#: Environment variable through which the controller tells workers where the run directory is.
RUN_DIR_ENV = "FAULTHUNT_RUN_DIR"
#: Where runs go when no ``--run-dir`` is given (relative to the current directory).
DEFAULT_BASE = Path(".faulthunt") / "runs"
LATEST = "latest"


class Layout:
    """File names inside one run directory (one place, so readers and writers agree)."""

    RUN = "run.json"
    IDENTITY = "identity.json"
    ENV = "env.json"
    REPRODUCER_LOG = "reproducer.log"
    EVENTS_DIR = "events"
    CONTROLLER = "controller.jsonl"
    LEDGER_DIR = "ledger"
    XID = "xid.jsonl"
    KMSG_BEFORE = "kmsg_before.txt"
    KMSG_AFTER = "kmsg_after.txt"
    KMSG_ADDED = "kmsg_added.txt"
    KMSG_CURSOR = "kmsg_cursor.json"
    SUMMARY = "summary.json"
    MAPPING = "mapping.json"
    SANITIZER_DIR = "sanitizer"
    REPORT_MD = "report.md"
    REPORT_HTML = "report.html"
    REPORT_JSON = "report.json"
    STAGE_DIR = "stage"
    HANGS_DIR = "hangs"
    FAULTHANDLER_DIR = "faulthandler"
    SANITIZER_JSON = "sanitizer/sanitizer.json"
    #: the sanitize rerun's own run directory (its events and ledger)
    SANITIZER_RUN = "sanitizer/run"


def new_run_id(now: float | None = None) -> str:
    """A sortable, collision-resistant run id: ``20261202-142900-1a2b``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    return f"{stamp}-{os.urandom(2).hex()}"  # secrets.token_hex(2) (os.urandom) without its import


def create_run_dir(run_dir: Path | str | None = None, base: Path | str | None = None) -> Path:
    """Make a new run directory and point ``latest`` at it.

    With ``run_dir`` that exact directory is used (created if needed, ``latest`` untouched);
    otherwise a fresh ``<base>/<id>`` is made and ``<base>/latest`` is updated.
    """
    if run_dir is not None:
        path = Path(run_dir)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError(f"cannot create run directory {path}: {exc.strerror}",
                              fix="choose a writable --run-dir") from exc
        _make_subdirs(path)
        return path
    base_path = Path(base) if base is not None else DEFAULT_BASE
    for _ in range(10):
        path = base_path / new_run_id()
        try:
            path.mkdir(parents=True, exist_ok=False)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunDirError(f"cannot create run directory under {base_path}: {exc.strerror}",
                              fix="run from a writable directory or pass --run-dir") from exc
    else:  # pragma: no cover - ten collisions of a 16-bit suffix in one second
        raise RunDirError(f"could not pick a fresh run id under {base_path}")
    _make_subdirs(path)
    set_latest(base_path, path)
    return path


def _make_subdirs(path: Path) -> None:
    for sub in (Layout.EVENTS_DIR, Layout.LEDGER_DIR):
        (path / sub).mkdir(exist_ok=True)


def set_latest(base: Path, run: Path) -> None:
    """Point ``base/latest`` at ``run`` (a relative symlink, replaced atomically)."""
    link = base / LATEST
    tmp = base / f".{LATEST}.{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(run.name, tmp)
        os.replace(tmp, link)
    except OSError:
        # Filesystems without symlinks: a one-line file naming the run instead.
        write_text_atomic(link, run.name + "\n")


def resolve_run_dir(run: str | Path | None = None, base: Path | str | None = None) -> Path:
    """Find a run directory: ``None`` is the latest, else a path, else an id under ``base``."""
    base_path = Path(base) if base is not None else DEFAULT_BASE
    if run is None:
        latest = base_path / LATEST
        if latest.is_symlink() or latest.is_dir():
            target = latest.resolve()
        elif latest.is_file():
            target = base_path / latest.read_text().strip()
        else:
            raise RunDirError(f"no run found: {latest} does not exist",
                              fix="run `faulthunt stress ...` first, or pass --run DIR")
        if not target.is_dir():
            raise RunDirError(f"{latest} points at {target}, which is gone",
                              fix="pass --run DIR naming an existing run directory")
        return target
    candidate = Path(run)
    if candidate.is_dir():
        return require_run(candidate)
    if (base_path / str(run)).is_dir():
        return require_run(base_path / str(run))
    raise RunDirError(f"run directory {run} not found (also looked in {base_path})",
                      fix="pass --run with a run directory path or an id under .faulthunt/runs")


#: files and folders of which a run directory holds at least one (``create_run_dir`` makes the
#: two folders at once; the plugin alone, stress, merge and a kit's copy write the rest)
RUN_MARKS = (Layout.RUN, Layout.SUMMARY, Layout.EVENTS_DIR, Layout.LEDGER_DIR, Layout.CONTROLLER,
             Layout.IDENTITY, Layout.XID, Layout.SANITIZER_DIR)


def require_run(path: Path) -> Path:
    """``path`` when it looks like a run directory. An empty or foreign directory given as --run
    is a mistake, not a run where nothing happened: reading it would report "no failures" and
    writing into it (mapping.json, reports) would litter someone's folder."""
    if not any((path / name).exists() for name in RUN_MARKS):
        raise UsageError(f"{path} is not a faulthunt run directory (none of "
                         f"{', '.join(RUN_MARKS)} is there)",
                         fix="pass --run a directory `faulthunt stress` wrote (ls .faulthunt/runs), "
                             "or leave --run out for the latest run")
    return path


# --- writing -----------------------------------------------------------------------------------

def _default(obj: Any) -> Any:
    if isinstance(obj, msgspec.Struct):
        return msgspec.to_builtins(obj)
    if hasattr(type(obj), "__dataclass_fields__"):  # an instance (a class has no such type)
        import dataclasses

        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def dumps(obj: Any, indent: int | None = None) -> str:
    """JSON text for records: dataclasses, paths and tuples are handled."""
    return json.dumps(obj, default=_default, indent=indent, sort_keys=indent is not None)


class DiskFullError(RunDirError):
    """A run file could not be written for lack of room (ENOSPC, EDQUOT, EFBIG)."""


def _write_error(path: Path, exc: OSError, fix: str) -> RunDirError:
    if is_full(exc):
        return DiskFullError(disk_full_text(path, exc),
                             fix="free space on that filesystem, or raise the file size limit "
                                 "(`ulimit -f`)")
    return RunDirError(f"cannot write {path}: {exc.strerror or exc}", fix=fix)


def _mkstemp(directory: Path, prefix: str) -> tuple[int, str]:
    """``tempfile.mkstemp(prefix=prefix, dir=directory)``'s file: a new name in ``directory``,
    created exclusively (never through a symlink), mode 0600. tempfile itself, with shutil,
    random, bz2 and lzma, is about 11 M instructions of a stress run's start-up."""
    flags = (os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_CLOEXEC", 0))
    for _ in range(100):
        name = os.path.abspath(os.path.join(directory, prefix + os.urandom(6).hex()))
        try:
            return os.open(name, flags, 0o600), name
        except FileExistsError:
            continue  # 48 random bits taken: another name
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(directory))


def write_text_atomic(path: Path | str, text: str, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``text`` so that a reader never sees half a file.

    The rename alone protects readers and a process killed at any moment; ``fsync`` also keeps the
    file through a machine crash (a GPU fault can take the machine down), at a few milliseconds
    a file. A place that cannot be written (a directory in the way, no permission) is a
    :class:`RunDirError` naming the file; no room (a full disk, ``ulimit -f``) is a
    :class:`DiskFullError` saying ``disk full at <path>``. Either way the old file stays whole.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _mkstemp(path.parent, f".{path.name}.")
    except OSError as exc:
        raise _write_error(path, exc, "make its directory writable (a file in the way of a "
                                      "directory?)") from exc
    try:
        data = text.encode("utf-8", "backslashreplace")  # a lone surrogate never stops a write
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException as exc:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise _write_error(path, exc, "remove what is in its place (a directory?) or free "
                                          "the disk") from exc
        raise


def write_json_atomic(path: Path | str, obj: Any, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``obj`` as indented JSON, atomically (:func:`write_text_atomic`)."""
    write_text_atomic(path, dumps(obj, indent=2) + "\n", fsync=fsync)


def write_run_info(run_dir: Path | str, info: RunInfo, *, fsync: bool = True) -> None:
    """Replace the run's ``run.json`` (built by :meth:`RunInfo.begin`, ended by ``finished``)."""
    write_json_atomic(Path(run_dir) / Layout.RUN, info, fsync=fsync)


_encode_lines = codec.encode_lines


class JsonlWriter(LineWriter):
    """Append-only JSON Lines, one record a line, flushed per record
    (:class:`~faulthunt.records.lines.LineWriter`: one ``write(2)`` a line, ``on_full``).
    Pytest processes write their events through :func:`faulthunt.records.lines.event_line`,
    without this module (its readers) or msgspec; the lines are the same."""

    def __init__(self, path: Path | str, fsync: bool = False,
                 on_full: Callable[[str], None] | None = None) -> None:
        super().__init__(Path(path), fsync=fsync, on_full=on_full)

    def write(self, record: Any) -> None:
        if isinstance(record, Doc):
            try:
                data = _encode_lines((record,))  # the record's JSON and its newline, one pass
            except UnicodeEncodeError:  # a lone surrogate (an undecodable file name): escape it
                data = (json.dumps(record.to_json()) + "\n").encode("utf-8")
        else:
            data = (dumps(record) + "\n").encode("utf-8")
        self.write_line(data)

    def __enter__(self) -> JsonlWriter:
        return self


def append_jsonl(path: Path | str, record: Any) -> None:
    """Append one record to a JSONL file (open, write one line, close)."""
    with JsonlWriter(path) as writer:
        writer.write(record)


# --- reading -----------------------------------------------------------------------------------

class JsonlRead(msgspec.Struct, frozen=True):
    """What a JSONL file held: the records that parsed, and how many lines did not. (A Struct:
    a frozen dataclass costs every process that imports this module ~3 M instructions to make.)"""

    records: tuple[dict[str, Any], ...]
    skipped: int = 0
    #: the last line had no newline (a writer killed mid-write)
    torn_tail: bool = False


def parse_jsonl(text: str) -> JsonlRead:
    """Parse JSON Lines text; malformed lines (a torn last line, junk) are skipped and counted."""
    records: list[dict[str, Any]] = []
    skipped = 0
    torn = bool(text) and not text.endswith("\n")
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # junk, a torn line, nesting past the stack
            skipped += 1
            continue
        if isinstance(obj, dict):
            records.append(obj)
        else:
            skipped += 1
    return JsonlRead(tuple(records), skipped, torn)


def read_jsonl(path: Path | str) -> JsonlRead:
    """Read a JSONL file tolerantly; a missing file reads as empty."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return JsonlRead(())
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror}") from exc
    if data.endswith(b"\0"):  # the unwritten reserve of a memory-mapped writer that died
        data = data.rstrip(b"\0")
    return parse_jsonl(data.decode("utf-8", "replace"))


def read_jsonl_dir(directory: Path | str, pattern: str = "*.jsonl") -> JsonlRead:
    """All records of every JSONL file in ``directory`` (sorted by file name), skips summed."""
    directory = Path(directory)
    records: list[dict[str, Any]] = []
    skipped = 0
    torn = False
    if directory.is_dir():
        for path in sorted(directory.glob(pattern)):
            got = read_jsonl(path)
            records.extend(got.records)
            skipped += got.skipped
            torn = torn or got.torn_tail
    return JsonlRead(tuple(records), skipped, torn)


def read_json(path: Path | str, default: Any = ..., ) -> Any:
    """Read a JSON document; ``default`` is returned for a missing file if given.

    Anything else that stops it being read (not UTF-8, not JSON, nested past the stack, a
    directory in its place) is a :class:`RunDirError` that names the file. Run files are read
    through :class:`RunDir`, which validates them; this is for other JSON files.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        if default is not ...:
            return default
        raise RunDirError(f"{path} does not exist",
                          fix="is this a faulthunt run directory? `faulthunt stress` makes one") from None
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from exc
    value, why = codec.decode_json(data)
    if why is not None:
        raise RunDirError(f"{path} is not valid JSON ({why})",
                          fix="the file was damaged; rerun the command that writes it")
    return value


def iter_lines(fh: IO[str]) -> Iterator[str]:
    """Lines of a text stream without their newline."""
    for line in fh:
        yield line.rstrip("\n")


def ensure_dir(path: Path | str) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def merge_jsonl(results: Iterable[JsonlRead]) -> JsonlRead:
    records: list[dict[str, Any]] = []
    skipped = 0
    torn = False
    for got in results:
        records.extend(got.records)
        skipped += got.skipped
        torn = torn or got.torn_tail
    return JsonlRead(tuple(records), skipped, torn)


# --- the reader ----------------------------------------------------------------------------------

#: bad lines of one file named one by one in RunDir.problems(); the rest are counted in one line
_NAMED_PER_FILE = 20


class RunDir:
    """A read-only view of one run directory: every run file, decoded and validated.

    Every reader of a run goes through this class. Each method reads its file once (later calls
    return the same objects), never writes, and never raises on damaged content: a missing file
    reads as ``None`` (documents) or empty (event files); a damaged one as ``None`` or without
    its bad lines, and what was wrong is in :meth:`problems` (file, line, why). A directory that
    is not there at all is not an error here either (``exists()`` says so); commands that need one
    resolve it with :func:`resolve_run_dir`, which raises with a fix.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._cache: dict[str, Any] = {}
        self._problems: list[Problem] = []
        self._skipped: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def exists(self) -> bool:
        return self.path.is_dir()

    # -- problems ---------------------------------------------------------------------------

    def problems(self) -> tuple[Problem, ...]:
        """What could not be read so far (each file is named once, bad lines up to a limit)."""
        return tuple(self._problems)

    def skipped_lines(self) -> dict[str, int]:
        """Lines left out of ``events``, ``controller`` and ``xid`` (malformed or torn), read now."""
        self.worker_events()
        self.controller()
        self.xids()
        return {"events": self._skipped.get(Layout.EVENTS_DIR, 0),
                "controller": self._skipped.get(Layout.CONTROLLER, 0),
                "xid": self._skipped.get(Layout.XID, 0)}

    def _problem(self, rel: str, why: str, line: int | None = None) -> None:
        self._problems.append(Problem(rel, line, why))

    # -- raw access -------------------------------------------------------------------------

    def _rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.path))
        except ValueError:
            return str(path)

    def _read_bytes(self, path: Path) -> bytes | None:
        """A file's bytes; None when it does not exist or cannot be read (the latter named)."""
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            self._problem(self._rel(path), "a directory where a file should be")
        except NotADirectoryError:
            self._problem(self._rel(path), "a parent of it is a file, not a directory")
        except OSError as exc:
            self._problem(self._rel(path), f"cannot be read: {exc.strerror or exc}")
        return None

    def _cached(self, key: str, make: Callable[[], T]) -> T:
        if key not in self._cache:
            self._cache[key] = make()
        return cast(T, self._cache[key])

    def file(self, rel: str) -> Path:
        """The path of ``rel`` inside the run (for commands that hand it on, e.g. to copy it)."""
        return self.path / rel

    def text(self, rel: str, limit: int | None = None) -> str | None:
        """A text file of the run (a log, a stack dump), invalid UTF-8 replaced; None if absent.

        ``rel`` may come from a record (a hang's dump path): it must name a file inside the run.
        """
        path = (self.path / rel)
        try:
            inside = path.resolve().is_relative_to(self.path.resolve())
        except (OSError, RuntimeError, ValueError):
            inside = False
        if not inside:
            self._problem(str(rel)[:200], "names a file outside the run directory; not read")
            return None
        data = self._read_bytes(path)
        if data is None:
            return None
        text = data.decode("utf-8", "replace")
        return text[:limit] if limit is not None else text

    # -- JSON documents -------------------------------------------------------------------------

    def _json(self, rel: str) -> tuple[Any, bool]:
        """(parsed value, found): found is False for a missing file, value None for a bad one."""
        data = self._read_bytes(self.path / rel)
        if data is None:
            return None, False
        if not data.strip():
            self._problem(rel, "empty file")
            return None, True
        value, why = codec.decode_json(data)
        if why is not None:
            self._problem(rel, f"not valid JSON: {why}")
        return value, True

    def _document(self, rel: str, type_: type[T], *, fieldwise: bool) -> T | None:
        value, _ = self._json(rel)
        if value is None:
            return None
        if fieldwise:
            doc, whys = codec.convert_fields(value, type_)
            for field_why in whys:
                self._problem(rel, field_why + ("" if doc is None else " (that field ignored)"))
            return doc
        whole, why = codec.convert(value, type_)
        if why is not None:
            self._problem(rel, f"not a valid {rel}: {why}")
        return whole

    def run_info(self) -> RunInfo | None:
        """``run.json`` (a field of the wrong type is ignored and named); None when missing."""
        return self._cached("run", lambda: self._document(Layout.RUN, RunInfo, fieldwise=True))

    def identity(self) -> Identity | None:
        """``identity.json`` (a field of the wrong type is ignored and named)."""
        return self._cached("identity",
                            lambda: self._document(Layout.IDENTITY, Identity, fieldwise=True))

    def env(self) -> dict[str, str] | None:
        """``env.json``: the run's environment (secrets already redacted); bad entries left out."""
        def read() -> dict[str, str] | None:
            value, _ = self._json(Layout.ENV)
            if value is None:
                return None
            if not isinstance(value, dict):
                self._problem(Layout.ENV, "not a JSON object")
                return None
            bad = [k for k, v in value.items() if not isinstance(v, str)]
            if bad:
                self._problem(Layout.ENV, f"{len(bad)} value(s) not text, left out: "
                                          + ", ".join(repr(k)[:40] for k in bad[:5]))
            return {k: v for k, v in value.items() if isinstance(v, str)}
        return self._cached("env", read)

    def summary(self) -> Summary | None:
        """``summary.json``, whole or not at all: a damaged one reads as None (and is named), so
        that a reader recomputes it (:func:`faulthunt.summary.summarize_run`) rather than trust
        half of it."""
        return self._cached("summary",
                            lambda: self._document(Layout.SUMMARY, Summary, fieldwise=False))

    def mapping(self) -> tuple[MappingEntry, ...] | None:
        """``mapping.json`` entries (a bad entry is left out and named); None when missing."""
        def read() -> tuple[MappingEntry, ...] | None:
            value, _ = self._json(Layout.MAPPING)
            if value is None:
                return None
            if isinstance(value, dict) and isinstance(value.get("verdicts"), list):
                value = value["verdicts"]  # an early shape: {"verdicts": [...]}
            if not isinstance(value, list):
                self._problem(Layout.MAPPING, "not a JSON list of verdicts")
                return None
            return tuple(self._entries(Layout.MAPPING, value, MappingEntry))
        return self._cached("mapping", read)

    def _entries(self, rel: str, items: list[Any], type_: type[T]) -> list[T]:
        out: list[T] = []
        bad = 0
        for i, item in enumerate(items):
            got, why = codec.convert(item, type_)
            if got is not None:
                out.append(got)
                continue
            bad += 1
            if bad <= _NAMED_PER_FILE:
                self._problem(rel, f"entry {i} left out: {why}")
        if bad > _NAMED_PER_FILE:
            self._problem(rel, f"{bad - _NAMED_PER_FILE} more bad entries left out")
        return out

    def sanitizer(self) -> SanitizerDoc | None:
        """``sanitizer/sanitizer.json`` (None when sanitize never ran here, or it is damaged)."""
        return self._cached("sanitizer", lambda: self._document(
            Layout.SANITIZER_JSON, SanitizerDoc, fieldwise=False))

    def kmsg_cursor(self) -> KmsgCursorDoc | None:
        """``kmsg_cursor.json``: the kernel-log cursor taken before the run."""
        return self._cached("kmsg_cursor", lambda: self._document(
            Layout.KMSG_CURSOR, KmsgCursorDoc, fieldwise=True))

    def kmsg_text(self) -> str:
        """The kernel-log snapshots and the lines added during the run, as one text."""
        return "".join(self.text(name) or "" for name in
                       (Layout.KMSG_BEFORE, Layout.KMSG_ADDED, Layout.KMSG_AFTER))

    # -- JSONL ----------------------------------------------------------------------------------

    def _jsonl(self, path: Path, decode: Any, counter: str) -> list[Any]:
        data = self._read_bytes(path)
        if not data:
            return []
        rel = self._rel(path)
        if data.endswith(b"\0"):  # the unwritten reserve of a memory-mapped writer that died
            data = data.rstrip(b"\0")
        torn = not data.endswith(b"\n")
        out: list[Any] = []
        bad = 0
        last = data.count(b"\n") + 1
        for number, line in codec.split_lines(data):
            record, why = decode(line)
            if record is not None:
                out.append(record)
                continue
            bad += 1
            if torn and number == last:
                why = f"torn last line (its writer was killed mid-write): {why}"
            if bad <= _NAMED_PER_FILE:
                self._problem(rel, str(why), number)
        if bad > _NAMED_PER_FILE:
            self._problem(rel, f"{bad - _NAMED_PER_FILE} more bad lines left out")
        self._skipped[counter] = self._skipped.get(counter, 0) + bad
        return out

    def worker_files(self, worker: str | None = None) -> tuple[Path, ...]:
        """``events/*.jsonl``, sorted by name (one per worker process); of one worker id
        (``gw0``: each process that slot had) when ``worker`` is given."""
        directory = self.path / Layout.EVENTS_DIR
        pattern = "*.jsonl"
        if worker:
            import glob  # for its escape: the one use

            pattern = f"{glob.escape(worker)}-*.jsonl"
        if directory.exists() and not directory.is_dir():
            self._cached("events-not-dir", lambda: self._problem(
                Layout.EVENTS_DIR, "a file where the events directory should be"))
            return ()
        try:
            return tuple(sorted(directory.glob(pattern)))
        except OSError as exc:
            self._problem(Layout.EVENTS_DIR, f"cannot be listed: {exc.strerror or exc}")
            return ()

    def records_digest(self) -> str | None:
        """A digest of the worker record files (names and bytes): the same for a copy of this
        run, whatever became of its run.json; None when it has none (or they cannot be read)."""
        import hashlib

        files = self.worker_files()
        if not files:
            return None
        digest = hashlib.sha256()
        try:
            for path in files:
                digest.update(path.name.encode() + b"\0")
                with open(path, "rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        digest.update(block)
        except OSError:
            return None
        return digest.hexdigest()

    def worker_events(self, worker: str | None = None) -> tuple[WorkerEvent | OtherEvent, ...]:
        """Every worker event of the run (of one worker id, when given), file by file (sorted by
        name), each file in write order."""
        def read() -> tuple[WorkerEvent | OtherEvent, ...]:
            out: list[Any] = []
            for path in self.worker_files(worker):
                out.extend(self._jsonl(path, decode_worker_event,
                                       Layout.EVENTS_DIR if worker is None else "events-of-worker"))
            return tuple(out)
        return self._cached("events" if worker is None else f"events:{worker}", read)

    def controller(self) -> tuple[ControllerEvent | OtherEvent, ...]:
        """``controller.jsonl``: session bounds, dead workers, crashes, recycles."""
        return self._cached("controller", lambda: tuple(self._jsonl(
            self.path / Layout.CONTROLLER, decode_controller_event, Layout.CONTROLLER)))

    def rootdir(self) -> str | None:
        """pytest's rootdir in the run (its first ``session_start`` that says): the directory
        the run's node ids are relative to. None for a run recorded before it was kept."""
        return next((c.rootdir for c in self.controller()
                     if isinstance(c, SessionStart) and c.rootdir), None)

    def xids(self) -> tuple[XidLine, ...]:
        """``xid.jsonl``: the run's Xid lines with their attribution."""
        return self._cached("xids", lambda: tuple(self._jsonl(
            self.path / Layout.XID, lambda line: codec.decode_as(line, XidLine), Layout.XID)))

    def spans(self) -> tuple[TestSpan, ...]:
        """Every test run of the run, paired from the worker events (a repeated test's runs stay
        distinct: :attr:`TestSpan.key`), collateral failures labelled."""
        from faulthunt.records.run import assemble_spans

        return self._cached("spans", lambda: tuple(assemble_spans(self.worker_events(),
                                                                  self.controller())))

    # -- directories ---------------------------------------------------------------------------

    def ledger_dir(self) -> Path:
        """``ledger/``: the allocation ledger (read by faulthunt.ledger.reader)."""
        return self.path / Layout.LEDGER_DIR

    def has_ledger(self) -> bool:
        """Whether ``ledger/`` holds any ledger file."""
        try:
            return self.ledger_dir().is_dir() and any(self.ledger_dir().glob("*.jsonl"))
        except OSError:
            return False

    def sanitizer_run(self) -> RunDir:
        """The sanitize rerun's own run directory (``sanitizer/run``)."""
        return RunDir(self.path / Layout.SANITIZER_RUN)


class RunTail:
    """The worker and controller events added to a live run since the last :meth:`poll`.

    For progress while a run is going: each file is read from where the last poll stopped, and a
    line still being written waits for the next poll.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._offsets: dict[Path, int] = {}

    def _new_lines(self, path: Path) -> list[bytes]:
        off = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(off)
                data = fh.read()
        except OSError:
            return []
        cut = data.rfind(b"\n") + 1
        self._offsets[path] = off + cut
        return [line for line in data[:cut].split(b"\n") if line.strip()]

    def poll(self) -> tuple[list[WorkerEvent | OtherEvent], list[ControllerEvent | OtherEvent]]:
        """(new worker events, new controller events); bad lines are passed over."""
        workers: list[Any] = []
        try:
            files = sorted((self.path / Layout.EVENTS_DIR).glob("*.jsonl"))
        except OSError:
            files = []
        for path in files:
            for line in self._new_lines(path):
                event, _ = decode_worker_event(line)
                if event is not None:
                    workers.append(event)
        controller: list[Any] = []
        for line in self._new_lines(self.path / Layout.CONTROLLER):
            done, _ = decode_controller_event(line)
            if done is not None:
                controller.append(done)
        return workers, controller
