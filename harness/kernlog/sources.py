"""Kernel-log sources: where Xid reports are read from, with a cursor to read exactly what came after.

Every source has the same three operations (:class:`KernelLogSource`): ``cursor()`` is "now",
``read_since(cursor)`` returns everything after a cursor (and how many records were lost in
between), ``snapshot()`` is the whole readable log. :func:`open_source` picks one:

- ``kmsg``: ``/dev/kmsg`` records ``PRI,SEQ,TS_USEC,FLAGS;MSG``; the cursor is the next sequence
  number. /dev/kmsg cannot seek to a sequence number (only ``SEEK_SET`` 0 = oldest record,
  ``SEEK_DATA`` = after the last ``dmesg -C``, ``SEEK_END`` = after the newest), so a reader starts
  from the oldest record still buffered and skips what is before the cursor. Records the ring
  buffer overwrote before we read them show up as a gap in the sequence numbers (the kernel also
  answers one ``read`` with ``EPIPE`` when it happens under an open descriptor): they are counted
  in ``ReadResult.lost``, never hidden.
- ``dmesg``: the ``dmesg`` command; the cursor is the last kernel timestamp (and how many lines
  carried it).
- ``journalctl``: ``journalctl -k``; the cursor is the journal's own cursor string.
- ``file:PATH``: a log file; the cursor is a byte offset (a rotated or truncated file is re-read
  from the start, with a warning).
- ``nvml``: NVML ``XidCriticalError`` events -- needs no root, but carries the Xid number only (no
  pid, no message, no address) and only from the moment faulthunt starts listening.
- ``none``: nothing (kernel-log capture off).

``auto`` tries kmsg, dmesg, journalctl, then NVML, and says once (through ``warn``) why it fell
back and how to fix it. :class:`Follower` follows any source live in a daemon thread.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import re
import select
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from faulthunt.errors import FaulthuntError
from faulthunt.kernlog import SPECS as _SPECS
from faulthunt.kernlog.pci import normalize_pci

if TYPE_CHECKING:
    from faulthunt.records.xid import XidEvent

# The parser, the catalog and the Xid record are imported when a log holds an Xid line (or a
# source needs them): a stress run of a healthy suite follows the log without them (about 11 M
# instructions of its start-up). MARKER is faulthunt.kernlog.parse.MARKER (a test checks).
MARKER = "NVRM: Xid"

KMSG_PATH = "/dev/kmsg"
#: one read() of /dev/kmsg returns one record; the buffer must hold the largest (8 KiB + dictionary)
_KMSG_READ = 16384
_BOOT_ID = "/proc/sys/kernel/random/boot_id"

FIX_UNREADABLE = (
    "run as root, grant CAP_SYSLOG (`sudo setcap cap_syslog+ep $(readlink -f $(which python3))`), "
    "allow it for everyone (`sudo sysctl kernel.dmesg_restrict=0`), or use `--xid-source nvml` "
    "(Xid numbers only, no root needed)"
)


class KernelLogUnreadable(FaulthuntError):
    """The kernel log cannot be read (``kernel.dmesg_restrict=1`` without CAP_SYSLOG, no tool, no file)."""

    exit_code = 3


# --- cursor and result ------------------------------------------------------------------------------


class _Frozen:
    """Base of the frozen value classes below: what ``@dataclass(frozen=True)`` gives them (each
    field set once by ``__init__``, ``==`` within the class, ``hash``, ``repr``, assignment
    refused, copy and pickle), without the ~4 M instructions of generated code a dataclass costs
    to make at import (``faulthunt stress`` and ``faulthunt xid`` import this module at start)."""

    __slots__ = ()
    #: the fields, in ``__init__``'s order
    _fields: tuple[str, ...] = ()

    def _set(self, *values: Any) -> None:
        for name, value in zip(self._fields, values, strict=True):
            object.__setattr__(self, name, value)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self._values(), strict=True))

    def _replace(self, **changes: Any) -> Any:
        """A copy with ``changes`` (as the dataclass module's replace makes)."""
        return type(self)(**{**self._asdict(), **changes})

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__qualname__}({inner})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return type(self), self._values()


class Cursor(_Frozen):
    """A position in one source's log: read_since(cursor) returns what came after it.

    kmsg: ``seq`` is the next sequence number to read (``boot_id`` detects a reboot, which restarts
    sequence numbers); file: ``offset`` in bytes (``inode`` detects rotation); dmesg: ``ts`` of the
    last line and ``count`` lines that carried exactly that timestamp (``lines`` when the log has no
    timestamps); journalctl: ``journal`` cursor string; nvml: ``seq`` is an index into the events
    this process has received.
    """

    __slots__ = _fields = ("source", "seq", "offset", "inode", "path", "ts", "count", "lines",
                           "journal", "boot_id", "taken")
    source: str
    seq: int | None
    offset: int | None
    inode: int | None
    path: str | None
    ts: float | None
    count: int | None
    lines: int | None
    journal: str | None
    boot_id: str | None
    #: when the cursor was taken (time.time()), for humans
    taken: float | None

    def __init__(self, source: str, seq: int | None = None, offset: int | None = None,
                 inode: int | None = None, path: str | None = None, ts: float | None = None,
                 count: int | None = None, lines: int | None = None, journal: str | None = None,
                 boot_id: str | None = None, taken: float | None = None) -> None:
        self._set(source, seq, offset, inode, path, ts, count, lines, journal, boot_id, taken)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self._asdict().items() if v is not None}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Cursor:
        """Read a :meth:`to_json` dict; raises :class:`FaulthuntError` (with the fix) on a bad one.

        Every field is checked for its type and range (a cursor file may be hand-edited, cut short
        or another file altogether), so a bad cursor is a message, never a traceback later.
        """
        if not isinstance(d, Mapping) or not isinstance(d.get("source"), str):
            raise FaulthuntError(
                f"not a kernel-log cursor: {str(d)[:120]!r}",
                fix="pass what `faulthunt xid cursor` printed (a JSON object with a \"source\" key), "
                "or a file holding it (e.g. a run's kmsg_cursor.json)",
            )
        names = set(cls._fields)
        kw = {k: v for k, v in d.items() if k in names}
        for k in ("seq", "offset", "inode", "count", "lines"):
            v = kw.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise _bad_cursor(f"{k!r} must be a whole number >= 0, not {str(v)[:40]!r}")
        for k in ("ts", "taken"):
            v = kw.get(k)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise _bad_cursor(f"{k!r} must be a number, not {str(v)[:40]!r}")
                kw[k] = float(v)
        for k in ("source", "path", "journal", "boot_id"):
            v = kw.get(k)
            if v is not None and (not isinstance(v, str) or "\0" in v):
                raise _bad_cursor(f"{k!r} must be text, not {str(v)[:40]!r}")
        return cls(**kw)


def _bad_cursor(why: str) -> FaulthuntError:
    return FaulthuntError(f"bad kernel-log cursor: {why}", fix="take a new one with `faulthunt xid cursor`")


class ReadResult(_Frozen):
    """What one read_since returned."""

    __slots__ = _fields = ("lines", "events", "lost", "cursor", "source", "lost_unknown",
                           "warnings", "unparsed")
    #: the log lines after the cursor, in the source's own format (kmsg: ``PRI,SEQ,TS,FLAGS;MSG``)
    lines: tuple[str, ...]
    events: tuple[XidEvent, ...]
    #: records lost between the cursor and what could be read (ring-buffer overrun); 0 when none
    lost: int
    #: the cursor after the last record returned: pass it to the next read_since
    cursor: Cursor
    source: str
    #: True when records may have been lost but the source cannot count them (dmesg, rotated file)
    lost_unknown: bool
    warnings: tuple[str, ...]
    #: lines mentioning ``NVRM: Xid`` that could not be parsed
    unparsed: tuple[str, ...]

    def __init__(self, lines: tuple[str, ...], events: tuple[XidEvent, ...], lost: int,
                 cursor: Cursor, source: str, lost_unknown: bool = False,
                 warnings: tuple[str, ...] = (), unparsed: tuple[str, ...] = ()) -> None:
        self._set(lines, events, lost, cursor, source, lost_unknown, warnings, unparsed)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "lines": len(self.lines), "events": len(self.events), "lost": self.lost,
            "lost_unknown": self.lost_unknown, "warnings": list(self.warnings),
            "unparsed": list(self.unparsed), "cursor": self.cursor.to_json(),
        }


def _result(source: str, lines: list[str], cursor: Cursor, lost: int = 0, *, lost_unknown: bool = False,
            warnings: list[str] | None = None, events: list[XidEvent] | None = None) -> ReadResult:
    if events is None:
        from faulthunt.kernlog.parse import scan_text

        scan = scan_text("\n".join(lines))
        evs, unparsed = scan.events, scan.unparsed
    else:
        evs, unparsed = tuple(events), ()
    return ReadResult(tuple(lines), tuple(evs), lost, cursor, source, lost_unknown, tuple(warnings or ()),
                      tuple(unparsed))


@runtime_checkable
class KernelLogSource(Protocol):
    """A kernel log faulthunt can read from (see the module docstring for each kind)."""

    name: str

    def cursor(self) -> Cursor:
        """'Now': the position after the last record."""

    def read_since(self, cursor: Cursor, *, final: bool = False) -> ReadResult:
        """Everything after ``cursor`` (``final``: also a last line not yet ended by a newline)."""

    def snapshot(self) -> str:
        """The whole readable log now (for kmsg_before.txt / kmsg_after.txt)."""


def _boot_id() -> str | None:
    try:
        return Path(_BOOT_ID).read_text(errors="replace").strip() or None
    except OSError:
        return None


# --- /dev/kmsg ---------------------------------------------------------------------------------------


class KmsgRecord(_Frozen):
    """One /dev/kmsg record: ``PRI,SEQ,TS_USEC,FLAGS[,...];MSG`` plus dictionary lines (`` KEY=value``)."""

    __slots__ = _fields = ("level", "facility", "seq", "ts_usec", "flags", "message", "dictionary")
    level: int
    facility: int
    seq: int
    ts_usec: int
    flags: str
    message: str
    dictionary: tuple[str, ...]

    def __init__(self, level: int, facility: int, seq: int, ts_usec: int, flags: str,
                 message: str, dictionary: tuple[str, ...] = ()) -> None:
        self._set(level, facility, seq, ts_usec, flags, message, dictionary)

    @property
    def line(self) -> str:
        """The record's header line, exactly as /dev/kmsg wrote it."""
        return _header_line(self.facility * 8 + self.level, self.seq, self.ts_usec, self.flags, self.message)


def _header_line(priority: int, seq: int, ts_usec: int, flags: str, message: str) -> str:
    """A /dev/kmsg record's header line: ``priority,seq,usec,flags;message``."""
    return f"{priority},{seq},{ts_usec},{flags};{message}"


_KMSG_HEAD = re.compile(r"(\d{1,5}),(\d{1,20}),(\d{1,20}),([^;,]*)[^;]*;")


def parse_kmsg_record(data: bytes | str) -> KmsgRecord | None:
    """Parse one record as one read() of /dev/kmsg returns it; None when it is not one.

    The message is the first line; the following lines that start with a space are the record's
    dictionary (``SUBSYSTEM=pci``, ``DEVICE=+pci:0000:00:06.0``). The kernel escapes newlines and
    other control bytes in the message as ``\\xNN``, so a record's message is always one line.
    """
    text = data.decode("utf-8", "replace") if isinstance(data, (bytes, bytearray)) else data
    m = _KMSG_HEAD.match(text)
    if m is None:
        return None
    rest = text[m.end():]
    first, _, more = rest.partition("\n")
    dictionary = tuple(x[1:] for x in more.split("\n") if x.startswith(" "))
    pri = int(m.group(1))
    return KmsgRecord(level=pri & 7, facility=pri >> 3, seq=int(m.group(2)), ts_usec=int(m.group(3)),
                      flags=m.group(4), message=first, dictionary=dictionary)


def kmsg_line(data: bytes) -> str | None:
    """``parse_kmsg_record(data).line`` (None where that is None) without making the record: a
    snapshot takes the line of every record in the buffer."""
    head, sep, _ = data.partition(b";")
    if sep and b"\n" not in head:
        parts = head.split(b",")
        if len(parts) == 4 and _plain_number(parts[0], 5) and _plain_number(parts[1], 20) \
                and _plain_number(parts[2], 20):
            # the header as the record's line writes it (numbers without leading zeros, flags
            # without a ",..." tail): the line is the record's first line as the kernel wrote it
            return data.partition(b"\n")[0].decode("utf-8", "replace")
    text = data.decode("utf-8", "replace")
    m = _KMSG_HEAD.match(text)
    if m is None:
        return None
    message = text[m.end():].partition("\n")[0]
    # the record's facility * 8 + level is its priority itself
    return _header_line(int(m[1]), int(m[2]), int(m[3]), m[4], message)


def _plain_number(digits: bytes, most: int) -> bool:
    """1 to ``most`` ASCII digits that ``int()`` and ``str()`` give back unchanged."""
    return (0 < len(digits) <= most and digits.isdigit()
            and (digits[0] != 0x30 or len(digits) == 1))  # 0x30: "0"


def _seq_below(data: bytes, start: int) -> bool:
    """True when ``data``'s header plainly gives a sequence number below ``start`` (1-5 and
    1-20 ASCII digits before the first two commas, as :data:`_KMSG_HEAD` reads them: its record,
    if it parses, has that seq); False when it does not, or cannot be read that cheaply."""
    parts = data.split(b",", 2)
    return (len(parts) == 3 and 0 < len(parts[0]) <= 5 and 0 < len(parts[1]) <= 20
            and parts[0].isdigit() and parts[1].isdigit() and int(parts[1]) < start)


def select_after(records: list[KmsgRecord], start: int) -> tuple[list[KmsgRecord], int, int]:
    """The records at or after sequence number ``start``; how many are missing; the next seq.

    Sequence numbers are consecutive, so every gap -- before the first record kept (the ring
    buffer overwrote them before this read) or between two (overwritten mid-read, when the kernel
    answered EPIPE) -- is records lost.
    """
    lost = 0
    expected = start
    kept: list[KmsgRecord] = []
    for rec in records:
        if rec.seq < expected:
            continue
        if rec.seq > expected:
            lost += rec.seq - expected
        kept.append(rec)
        expected = rec.seq + 1
    return kept, lost, expected


def _kmsg_error(exc: OSError, path: str) -> KernelLogUnreadable:
    if exc.errno in (errno.EPERM, errno.EACCES):
        restrict = ""
        try:
            restrict = Path("/proc/sys/kernel/dmesg_restrict").read_text(errors="replace").strip()
        except OSError:
            pass
        why = " (kernel.dmesg_restrict=1 and this process lacks CAP_SYSLOG)" if restrict == "1" else ""
        return KernelLogUnreadable(f"cannot read {path}: {exc.strerror}{why}", fix=FIX_UNREADABLE)
    if exc.errno == errno.ENOENT:
        return KernelLogUnreadable(f"{path} does not exist (not Linux, or a container without it)",
                                   fix="use `--xid-source dmesg`, `journalctl`, `file:PATH` or `nvml`")
    return KernelLogUnreadable(f"cannot read {path}: {exc}", fix=FIX_UNREADABLE)


class KmsgSource:
    """``/dev/kmsg``, the kernel's record interface, with a sequence-number cursor.

    A follower polling this source keeps one descriptor open and only reads new records; any other
    read_since opens a fresh descriptor and reads from the oldest buffered record.
    """

    name = "kmsg"

    def __init__(self, path: str = KMSG_PATH) -> None:
        self.path = path
        self._fd: int | None = None
        self._fd_next: int | None = None  # the seq the open descriptor will return next
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raise :class:`KernelLogUnreadable` unless the log can be opened for reading."""
        try:
            os.close(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK))
        except OSError as exc:
            raise _kmsg_error(exc, self.path) from None

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise _kmsg_error(exc, self.path) from None

    def _drain(self, fd: int, start: int = 0) -> tuple[list[KmsgRecord], int]:
        """Read every record available on ``fd`` now; returns those that parse, less those whose
        header shows a sequence number below ``start`` (which :func:`select_after` would drop
        anyway: a fresh descriptor starts at the oldest record, and a run's follower would
        otherwise parse the whole buffer once), and the number of EPIPEs seen."""
        raw, epipes = self._drain_raw(fd)
        records = [rec for rec in map(parse_kmsg_record, raw if start <= 0 else
                                      (r for r in raw if not _seq_below(r, start)))
                   if rec is not None]
        return records, epipes

    def _drain_raw(self, fd: int) -> tuple[list[bytes], int]:
        """The records available on ``fd`` now as read, unparsed; the number of EPIPEs seen."""
        records: list[bytes] = []
        epipes = 0
        while True:
            try:
                data = os.read(fd, _KMSG_READ)
            except BlockingIOError:
                break
            except BrokenPipeError:
                # Records were overwritten under us; the kernel moved the position to the oldest
                # one left. The sequence gap tells how many were lost.
                epipes += 1
                continue
            except InterruptedError:
                continue
            if not data:
                break
            records.append(data)
        return records, epipes

    def _read_all_raw(self) -> list[bytes]:
        fd = self._open()
        try:
            return self._drain_raw(fd)[0]
        finally:
            os.close(fd)

    def cursor(self) -> Cursor:
        # only the last record that parses counts: the buffer's others are not parsed (a stress
        # run takes a cursor and two snapshots of the whole buffer)
        last = next(filter(None, map(parse_kmsg_record, reversed(self._read_all_raw()))), None)
        nxt = last.seq + 1 if last is not None else 0
        return Cursor(source=self.name, seq=nxt, boot_id=_boot_id(), path=self.path, taken=time.time())

    def read_since(self, cursor: Cursor, *, final: bool = False) -> ReadResult:
        warnings: list[str] = []
        start = cursor.seq if cursor.seq is not None else 0
        boot = _boot_id()
        if cursor.boot_id and boot and cursor.boot_id != boot:
            warnings.append("the machine rebooted since the cursor was taken: reading the whole new log")
            start = 0
        with self._lock:
            records: list[KmsgRecord]
            if self._fd is not None and self._fd_next == start:
                records, _ = self._drain(self._fd)
            else:
                if self._fd is not None:
                    os.close(self._fd)
                    self._fd = None
                fd = self._open()
                records, _ = self._drain(fd, start)
                self._fd = fd
            kept, lost, expected = select_after(records, start)
            self._fd_next = expected
        if lost:
            warnings.append(f"{lost} kernel-log record(s) were overwritten in the ring buffer before they "
                            f"could be read (seq {start}..{expected - 1}); Xid reports among them are lost. "
                            "Fix: read more often, or enlarge the buffer (boot with log_buf_len=16M)")
        lines = [r.line for r in kept]
        events: list[XidEvent] = []
        unparsed: list[str] = []
        for r in kept:
            if MARKER not in r.message:
                continue
            # the record's own line: its header gives the event's seq, time and level
            from faulthunt.kernlog.parse import parse_line

            ev = parse_line(r.line)
            if ev is None:
                unparsed.append(r.line)
            else:
                events.append(ev)
        nxt = Cursor(source=self.name, seq=expected, boot_id=boot, path=self.path, taken=time.time())
        res = _result(self.name, lines, nxt, lost, warnings=warnings, events=events)
        return res._replace(unparsed=tuple(unparsed))

    def snapshot(self) -> str:
        return "".join(line + "\n" for line in map(kmsg_line, self._read_all_raw()) if line is not None)

    def wait_fd(self) -> int | None:
        """The descriptor read_since goes on reading from (None before the first read): poll()
        says it is readable when a record follows what was read (:class:`Follower` blocks on it
        instead of waking on a timer)."""
        return self._fd

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __del__(self) -> None:  # a source dropped without close() must not leak its descriptor
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit os may already be torn down: nothing left to close with
            pass


# --- dmesg / journalctl -------------------------------------------------------------------------------

_DMESG_TS = re.compile(r"^\[\s*(\d+\.\d+)\]")


def _run_tool(argv: list[str], what: str, timeout: float = 30.0) -> str:
    import shutil  # with bz2, lzma and zlib: only for the dmesg and journalctl sources

    exe = shutil.which(argv[0])
    if exe is None:
        raise KernelLogUnreadable(f"`{argv[0]}` is not installed", fix=f"install it, or choose another --xid-source ({what})")
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, timeout=timeout,
                              env={**os.environ, "LC_ALL": "C", "SYSTEMD_PAGER": "", "PAGER": "cat"})
    except subprocess.TimeoutExpired:
        raise KernelLogUnreadable(f"`{' '.join(argv)}` did not finish in {timeout:.0f} s",
                                  fix="choose another --xid-source") from None
    except OSError as exc:
        raise KernelLogUnreadable(f"cannot run `{' '.join(argv)}`: {exc}", fix="choose another --xid-source") from None
    err = proc.stderr.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        if "not permitted" in err.lower() or "permission" in err.lower():
            raise KernelLogUnreadable(f"`{' '.join(argv)}` failed: {err}", fix=FIX_UNREADABLE)
        raise KernelLogUnreadable(f"`{' '.join(argv)}` exited {proc.returncode}: {err or '(no message)'}",
                                  fix="choose another --xid-source")
    return proc.stdout.decode("utf-8", "replace")


class DmesgSource:
    """The ``dmesg`` command (plain ``[uptime] message`` lines); the cursor is the last timestamp."""

    name = "dmesg"

    def __init__(self, argv: tuple[str, ...] = ("dmesg",)) -> None:
        self.argv = list(argv)

    def _read(self) -> list[str]:
        return _run_tool(self.argv, "dmesg").splitlines()

    @staticmethod
    def _position(lines: list[str]) -> Cursor:
        last_ts: float | None = None
        count = 0
        for line in lines:
            m = _DMESG_TS.match(line)
            if m is None:
                continue
            ts = float(m.group(1))
            if ts == last_ts:
                count += 1
            else:
                last_ts, count = ts, 1
        return Cursor(source="dmesg", ts=last_ts, count=count if last_ts is not None else None,
                      lines=len(lines), boot_id=_boot_id(), taken=time.time())

    def cursor(self) -> Cursor:
        return self._position(self._read())

    def read_since(self, cursor: Cursor, *, final: bool = False) -> ReadResult:
        lines = self._read()
        warnings: list[str] = []
        lost_unknown = False
        boot = _boot_id()
        if cursor.boot_id and boot and cursor.boot_id != boot:
            warnings.append("the machine rebooted since the cursor was taken: reading the whole new log")
            out = lines
        elif cursor.ts is None:
            # a log without timestamps (printk.time=0): fall back to the line count
            n = cursor.lines or 0
            if n > len(lines):
                lost_unknown = True
                warnings.append("the kernel log shrank since the cursor (ring buffer wrapped or cleared): "
                                "some records may be lost")
                n = 0
            out = lines[n:]
        else:
            out = []
            seen_at_ts = 0
            first_ts: float | None = None
            keep = False  # continuation lines (no timestamp) follow their head line
            for line in lines:
                m = _DMESG_TS.match(line)
                if m is None:
                    if keep:
                        out.append(line)
                    continue
                ts = float(m.group(1))
                if first_ts is None:
                    first_ts = ts
                if ts > cursor.ts:
                    keep = True
                elif ts == cursor.ts:
                    seen_at_ts += 1
                    keep = seen_at_ts > (cursor.count or 0)
                else:
                    keep = False
                if keep:
                    out.append(line)
            if first_ts is not None and first_ts > cursor.ts:
                lost_unknown = True
                warnings.append("the oldest buffered record is newer than the cursor: the ring buffer wrapped "
                                "and an unknown number of records were lost (use the kmsg source to count them)")
        nxt = self._position(lines) if lines else cursor
        return _result(self.name, out, nxt, 0, lost_unknown=lost_unknown, warnings=warnings)

    def snapshot(self) -> str:
        return "".join(line + "\n" for line in self._read())


_JOURNAL_CURSOR = re.compile(r"^-- cursor: (\S.*)$")


class JournalctlSource:
    """``journalctl -k`` (this boot's kernel messages, ``short-monotonic``); cursor: the journal's own."""

    name = "journalctl"

    def __init__(self, argv: tuple[str, ...] = ("journalctl",)) -> None:
        self.argv = list(argv)

    def _read(self, *extra: str) -> tuple[list[str], str | None]:
        text = _run_tool([*self.argv, "-k", "-o", "short-monotonic", "--no-pager", "--show-cursor", "-q", *extra],
                         "journalctl")
        lines = text.splitlines()
        cur = None
        while lines and (m := _JOURNAL_CURSOR.match(lines[-1])):
            cur = m.group(1).strip()
            lines.pop()
        lines = [ln for ln in lines if not ln.startswith("-- ")]
        return lines, cur

    def cursor(self) -> Cursor:
        _, cur = self._read("-n", "1")
        return Cursor(source=self.name, journal=cur, boot_id=_boot_id(), taken=time.time())

    def read_since(self, cursor: Cursor, *, final: bool = False) -> ReadResult:
        extra = [f"--after-cursor={cursor.journal}"] if cursor.journal else []
        lines, cur = self._read(*extra)
        nxt = Cursor(source=self.name, journal=cur or cursor.journal, boot_id=_boot_id(), taken=time.time())
        return _result(self.name, lines, nxt)

    def snapshot(self) -> str:
        lines, _ = self._read()
        return "".join(line + "\n" for line in lines)


# --- files ---------------------------------------------------------------------------------------------


class FileSource:
    """A log file (a saved dmesg, a syslog, a file tests append to); the cursor is a byte offset.

    Only whole lines are returned; a last line without its newline waits for the next read (or is
    returned by a ``final`` read), so a writer caught mid-line is never split in two.
    """

    name = "file"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _stat(self) -> os.stat_result:
        try:
            return self.path.stat()
        except OSError as exc:
            raise KernelLogUnreadable(f"cannot read {self.path}: {exc.strerror}",
                                      fix="check the path (the file is created by whoever writes the log)") from None

    def cursor(self) -> Cursor:
        st = self._stat()
        return Cursor(source=self.name, path=str(self.path), offset=st.st_size, inode=st.st_ino, taken=time.time())

    def read_since(self, cursor: Cursor, *, final: bool = False) -> ReadResult:
        st = self._stat()
        offset = cursor.offset or 0
        warnings: list[str] = []
        lost_unknown = False
        if (cursor.inode is not None and cursor.inode != st.st_ino) or st.st_size < offset:
            warnings.append(f"{self.path} was rotated or truncated since the cursor: reading it from the start")
            lost_unknown = True
            offset = 0
        try:
            with open(self.path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError as exc:
            raise KernelLogUnreadable(f"cannot read {self.path}: {exc.strerror}", fix="check the file's permissions") from None
        end = len(data) if final else data.rfind(b"\n") + 1
        chunk = data[:end]
        lines = chunk.decode("utf-8", "replace").splitlines()
        nxt = Cursor(source=self.name, path=str(self.path), offset=offset + end, inode=st.st_ino, taken=time.time())
        return _result(self.name, lines, nxt, lost_unknown=lost_unknown, warnings=warnings)

    def snapshot(self) -> str:
        try:
            return self.path.read_bytes().decode("utf-8", "replace")
        except OSError as exc:
            raise KernelLogUnreadable(f"cannot read {self.path}: {exc.strerror}", fix="check the path") from None


# --- NVML ----------------------------------------------------------------------------------------------

_NVML_NO_INSTANCE = 0xFFFFFFFF


class NvmlSource:
    """NVML ``XidCriticalError`` events: a trigger that needs no root, with the Xid number only.

    NVML delivers an event to an event set registered *before* it happens, so this source starts a
    listener thread when created and keeps every event it receives; the cursor is an index into
    them. An event carries the Xid number, the GPU and (MIG) instance ids: no pid, no message, no
    address. ``ts`` of an event is the monotonic time faulthunt received it (not a kernel time).
    ``nvml`` is the module (pynvml from nvidia-ml-py); tests pass a fake one, since a CPU-only
    machine has no NVML.
    """

    name = "nvml"

    def __init__(self, nvml: Any = None, *, poll_ms: int = 200) -> None:
        from faulthunt import nvml as nvml_session

        # the session lives as long as the source: close() (or a failed start) ends it
        self._session = contextlib.ExitStack()
        try:
            nvml = self._session.enter_context(nvml_session.session(nvml))
        except nvml_session.NvmlUnavailable as exc:
            raise KernelLogUnreadable(exc.message, fix=f"{exc.fix}, or use another --xid-source") from None
        self._n = nvml
        self._poll_ms = poll_ms
        self._events: list[XidEvent] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.errors: list[str] = []
        try:
            self._set = nvml.nvmlEventSetCreate()
            self._pci: dict[int, str | None] = {}
            count = nvml.nvmlDeviceGetCount()
            registered = 0
            for i in range(count):
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                try:
                    sup = nvml.nvmlDeviceGetSupportedEventTypes(h)
                except Exception:  # noqa: BLE001 - NVMLError_NotSupported on old drivers (a pynvml class): try to register anyway
                    sup = nvml.nvmlEventTypeXidCriticalError
                if not sup & nvml.nvmlEventTypeXidCriticalError:
                    self.errors.append(f"GPU {i} does not report Xid events through NVML")
                    continue
                nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, self._set)
                registered += 1
            if registered == 0:
                raise KernelLogUnreadable(f"no GPU ({count} found) reports Xid events through NVML",
                                          fix="use a kernel-log source (--xid-source kmsg/dmesg) as root")
        except KernelLogUnreadable:
            self._shutdown()
            raise
        except Exception as exc:  # noqa: BLE001 - any NVMLError while registering: this source cannot work here
            self._shutdown()
            raise KernelLogUnreadable(f"NVML event registration failed: {exc}",
                                      fix="use a kernel-log source (--xid-source kmsg/dmesg) as root") from None
        self._thread = threading.Thread(target=self._listen, name="faulthunt-nvml-xid", daemon=True)
        self._thread.start()

    def _device_index(self, handle: Any) -> int | None:
        try:
            return int(self._n.nvmlDeviceGetIndex(handle))
        except Exception:  # noqa: BLE001 - an NVMLError for a GPU that fell off the bus: the event still counts
            return None

    def _pci_of(self, handle: Any) -> str | None:
        try:
            info = self._n.nvmlDeviceGetPciInfo(handle)
            bus = info.busId.decode() if isinstance(info.busId, bytes) else str(info.busId)
        except Exception:  # noqa: BLE001 - as above: an event whose GPU cannot be asked keeps no PCI address
            return None
        return normalize_pci(bus)

    def _listen(self) -> None:
        n = self._n
        while not self._stop.is_set():
            try:
                data = n.nvmlEventSetWait(self._set, self._poll_ms)
            except Exception as exc:  # noqa: BLE001 - NVMLError_Timeout (nothing happened) or a real failure, told apart below
                if type(exc).__name__.endswith("Timeout") or getattr(exc, "value", None) == 10:
                    continue
                self.errors.append(f"NVML event wait failed: {exc}")
                self._stop.wait(1.0)
                continue
            if getattr(data, "eventType", None) != n.nvmlEventTypeXidCriticalError:
                continue
            xid = int(data.eventData)
            gi = getattr(data, "gpuInstanceId", _NVML_NO_INSTANCE)
            ci = getattr(data, "computeInstanceId", _NVML_NO_INSTANCE)
            pci = self._pci_of(data.device)
            idx = self._device_index(data.device)
            unknown = " (NVML 999: unknown Xid)" if xid == 999 else ""
            raw = f"NVML: Xid {xid} on GPU {idx if idx is not None else '?'} ({pci or 'unknown PCI'}){unknown}"
            from faulthunt.kernlog.catalog import classify
            from faulthunt.records.xid import XidEvent

            ev = XidEvent(
                xid=xid, pci=pci,
                gpu_instance=None if gi in (None, _NVML_NO_INSTANCE) else int(gi),
                compute_instance=None if ci in (None, _NVML_NO_INSTANCE) else int(ci),
                pid=None, process=None,
                message="NVML XidCriticalError event: Xid number only (no pid, message or address)",
                category=classify(xid).category, mmu=None, caused_by=None, raw=raw,
                ts=time.monotonic(), wall=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            )
            with self._lock:
                self._events.append(ev)

    def cursor(self) -> Cursor:
        with self._lock:
            return Cursor(source=self.name, seq=len(self._events), taken=time.time())

    def read_since(self, cursor: Cursor, *, final: bool = False) -> ReadResult:
        with self._lock:
            evs = self._events[cursor.seq or 0:]
            nxt = Cursor(source=self.name, seq=len(self._events), taken=time.time())
        warnings = list(self.errors)
        return _result(self.name, [e.raw for e in evs], nxt, warnings=warnings, events=list(evs))

    def snapshot(self) -> str:
        with self._lock:
            return "".join(e.raw + "\n" for e in self._events)

    def _shutdown(self) -> None:
        try:
            if getattr(self, "_set", None) is not None:
                self._n.nvmlEventSetFree(self._set)
        except Exception:  # noqa: BLE001 - freeing on the way out: NVML may already be gone with the driver
            pass
        self._set = None
        self._session.close()

    def close(self) -> None:
        self._stop.set()
        if getattr(self, "_thread", None) is not None:
            self._thread.join(timeout=2 * self._poll_ms / 1000 + 1)
        self._shutdown()


class NullSource:
    """No kernel log (``--xid-source none``, or nothing was readable): reads nothing, says why."""

    name = "none"

    def __init__(self, reason: str = "kernel-log capture is off") -> None:
        self.reason = reason

    def cursor(self) -> Cursor:
        return Cursor(source=self.name, taken=time.time())

    def read_since(self, cursor: Cursor, *, final: bool = False) -> ReadResult:
        return _result(self.name, [], cursor, events=[])

    def snapshot(self) -> str:
        return ""


# --- choosing a source ----------------------------------------------------------------------------------

SPECS = _SPECS  # defined with the package, so the CLI can name them without importing this module


def _probe(source: KernelLogSource) -> KernelLogSource:
    """Fail now (KernelLogUnreadable) rather than in the middle of a run."""
    if isinstance(source, KmsgSource):
        source.check()
    else:
        source.cursor()
    return source


def open_source(spec: str = "auto", *, warn: Callable[[str], None] | None = None,
                nvml: Any = None) -> KernelLogSource:
    """Open the kernel-log source ``spec`` names (see :data:`SPECS`).

    An explicit spec that cannot be read raises :class:`KernelLogUnreadable` with the fix. ``auto``
    tries kmsg, dmesg, journalctl and NVML in turn and, when it has to fall back, calls ``warn``
    once with why and how to fix it; when nothing works it returns a :class:`NullSource` (a run
    must not fail because the log is unreadable) after saying so.
    """
    spec = (spec or "auto").strip()
    if spec.startswith("file:"):
        path = spec[5:]
        if not path:
            raise FaulthuntError("`file:` needs a path", fix="e.g. --xid-source file:/var/log/kern.log")
        return FileSource(path)
    makers: dict[str, Callable[[], KernelLogSource]] = {
        "kmsg": KmsgSource,
        "dmesg": DmesgSource,
        "journalctl": JournalctlSource,
        "nvml": lambda: NvmlSource(nvml),
    }
    if spec == "none":
        return NullSource()
    if spec in makers:
        return _probe(makers[spec]())
    if spec != "auto":
        raise FaulthuntError(f"unknown kernel-log source {spec!r}", fix=f"use one of: {', '.join(SPECS)}")
    failures: list[str] = []
    first_fix: str | None = None
    for name in ("kmsg", "dmesg", "journalctl", "nvml"):
        try:
            source = _probe(makers[name]())
        except KernelLogUnreadable as exc:
            failures.append(f"{name}: {exc.message}")
            first_fix = first_fix or exc.fix
            continue
        if failures and warn is not None:
            note = " (Xid numbers only: no pid, no message, no fault address)" if name == "nvml" else ""
            warn(f"kernel log: using {name}{note}; " + "; ".join(failures) + (f"\n  fix: {first_fix}" if first_fix else ""))
        return source
    reason = "no kernel-log source is readable: " + "; ".join(failures)
    if warn is not None:
        warn(f"kernel log: Xid capture is off; {reason}" + (f"\n  fix: {first_fix}" if first_fix else ""))
    return NullSource(reason)


# --- following live -------------------------------------------------------------------------------------


class Follower:
    """Follows a source in a daemon thread, calling ``on_event`` for each Xid as it appears.

    ``stop()`` does a final drain and returns everything read since the start cursor as one
    :class:`ReadResult` (lines, events, the total lost, the last cursor, every warning). A failing
    ``on_event`` or a failed read is recorded as a warning and following goes on: nothing the log
    held is dropped because a consumer raised.
    """

    def __init__(self, source: KernelLogSource, cursor: Cursor, on_event: Callable[[XidEvent], None],
                 interval: float = 0.25) -> None:
        self.source = source
        self.start_cursor = cursor
        self.on_event = on_event
        self.interval = interval
        self._cursor = cursor
        self._lines: list[str] = []
        self._events: list[XidEvent] = []
        self._unparsed: list[str] = []
        self._warnings: list[str] = []
        self._lost = 0
        self._lost_unknown = False
        self._stop = threading.Event()
        # re-entrant: on_event runs under the lock and may read .events
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        #: a pipe stop() writes to, to end a wait on a source's descriptor (see _loop)
        self._wake: tuple[int, int] | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        if getattr(self.source, "wait_fd", None) is not None:
            self._wake = os.pipe()
        self._thread = threading.Thread(target=self._loop, name=f"faulthunt-follow-{self.source.name}", daemon=True)
        self._thread.start()

    def _poll(self, final: bool = False) -> None:
        with self._lock:
            try:
                res = self.source.read_since(self._cursor, final=final)
            except (FaulthuntError, OSError) as exc:
                msg = f"kernel-log read failed: {exc}"
                if not self._warnings or self._warnings[-1] != msg:
                    self._warnings.append(msg)
                return
            self._cursor = res.cursor
            self._lines.extend(res.lines)
            self._events.extend(res.events)
            self._unparsed.extend(res.unparsed)
            self._lost += res.lost
            self._lost_unknown = self._lost_unknown or res.lost_unknown
            for w in res.warnings:
                if w not in self._warnings:
                    self._warnings.append(w)
            for ev in res.events:
                try:
                    self.on_event(ev)
                except Exception as exc:  # noqa: BLE001 - a consumer bug must not stop the capture
                    self._warnings.append(f"on_event failed for Xid {ev.xid}: {type(exc).__name__}: {exc}")

    def _loop(self) -> None:
        """Poll every ``interval``; with a source that offers a descriptor to wait on (kmsg),
        sleep in poll() until it has a record or stop() is called: a quiet log costs nothing. A
        descriptor that says readable while the read finds nothing new (a device that does not
        implement poll) costs one ``interval`` of sleep, as the timer would."""
        wait_fd = getattr(self.source, "wait_fd", None)
        while True:
            fd = wait_fd() if wait_fd is not None and self._wake is not None else None
            if fd is None or self._readable(fd):
                if self._stop.wait(self.interval):
                    return
            elif self._stop.is_set():
                return
            before = self._progress()
            self._poll()
            if fd is not None and self._progress() == before and self._stop.wait(self.interval):
                return

    def _progress(self) -> tuple[int | None, int, int]:
        """What a read that found something moves (the cursor's ``taken`` moves on every read)."""
        with self._lock:
            return self._cursor.seq, len(self._lines), self._lost

    def _readable(self, fd: int) -> bool:
        """Block until ``fd`` or the wake pipe is readable; False when that wait worked, True
        when it could not be waited on (then the caller sleeps an interval)."""
        assert self._wake is not None
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        try:
            poller.poll()
        except OSError:
            return True
        return False

    @property
    def events(self) -> tuple[XidEvent, ...]:
        """The events seen so far (a copy)."""
        with self._lock:
            return tuple(self._events)

    def stop(self) -> ReadResult:
        """Stop following; drain what is left; return everything since the start cursor."""
        self._stop.set()
        if self._wake is not None:
            os.write(self._wake[1], b"x")
        if self._thread is not None:
            self._thread.join()
        if self._wake is not None:
            for end in self._wake:
                os.close(end)
            self._wake = None
        self._poll(final=True)
        with self._lock:
            return ReadResult(tuple(self._lines), tuple(self._events), self._lost, self._cursor, self.source.name,
                              self._lost_unknown, tuple(self._warnings), tuple(self._unparsed))
