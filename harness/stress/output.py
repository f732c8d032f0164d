"""pytest's output as it passes through: read in bounded chunks, scanned, redacted, written down.

:class:`PytestOutput` is pure: fed the start of each line, it keeps what a stress run needs to say
in pytest's own words (how many tests, why nothing ran, collection errors, workers that could not
write their records). :class:`OutputPump` is the I/O edge: a thread that drains the child's pipe
until it closes whatever happens to the disk, so pytest never blocks on a full pipe.

Bounds: the pipe is read 64 KiB at a time; a line is handled in pieces of at most
:data:`SEGMENT` bytes (a 100 MB line is never held whole); the scanner sees at most
:data:`PREFIX` characters of a line. Secrets are redacted piece by piece
(:func:`faulthunt.redact.redact_text`), so a secret cut by a piece boundary of a line longer than
:data:`SEGMENT` can slip through; lines that long are test output, not pytest's.
"""

from __future__ import annotations

import codecs
import os
import re
import select
import threading
from collections.abc import Callable
from pathlib import Path

from faulthunt.rundir import disk_full_text, is_full

#: bytes read from the pipe at a time
READ_CHUNK = 64 * 1024
#: the most of one line handled (decoded, redacted, written) at once
SEGMENT = 64 * 1024
#: the most of one line the scanner sees
PREFIX = 4096
#: collection errors kept by name (the rest are counted)
KEEP_ERRORS = 20

# Pattern sources, compiled (and kept) by the re module's cache at their first use: each use
# below is behind a plain test of what its pattern needs (a prefix, a word), so a healthy run's
# output compiles none of them (about 4 M instructions of the stress parent's start-up).
_TOTAL_RES = (r"\[(\d+) items?\]", r"collected (\d+) items?")
_COLLECT_HEAD = r"_+ ERROR collecting (?P<path>.+?) _+$"
_SECTION_HEAD = r"_{3,} .+ _{3,}$"
_SHORT_ERROR = r"ERROR (?P<path>\S+)(?: - (?P<msg>.*))?$"
_FINAL = r"=+ (?P<text>.*\bin [\d.]+s\b.*?) =+$"
_INTERRUPTED = r"Interrupted: (?P<n>\d+) errors? during collection"
#: pytest could not import a conftest.py it loads before collecting (exit 4, no summary line)
_CONFTEST = r"ImportError while loading conftest (?P<path>'.+'|\".+\")\.$"
_USAGE = r"(?:\S.*?: )?error: (?P<msg>.+)$"
# anywhere in a line: a worker's message may follow pytest's progress dots (-s)
_DISK_FULL = r"faulthunt(?: [a-z]+)?: (?P<msg>disk full at .+)$"


def redact_lines(text: str) -> str:
    """``text`` with every line that may hold a secret redacted (faulthunt.redact.redact_text,
    line by line); the lines with nothing a secret starts with are found in one C-speed scan
    and copied as they are."""
    from faulthunt.redact import SECRET_HINT, redact_text

    out: list[str] = []
    pos = 0
    for m in SECRET_HINT.finditer(text):
        if m.start() < pos:
            continue  # in a line already redacted
        start = text.rfind("\n", 0, m.start()) + 1
        end = text.find("\n", m.end())
        end = len(text) if end < 0 else end + 1
        out.append(text[pos:start])
        out.append(redact_text(text[start:end]))
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def parse_total(line: str) -> int | None:
    """Number of tests from pytest/xdist's collection line."""
    if "item" not in line:  # what both patterns need
        return None
    for rx in _TOTAL_RES:
        m = re.search(rx, line)
        if m:
            return int(m.group(1))
    return None


class PytestOutput:
    """What pytest's output said, from the start of each line (pure; fed by the pump)."""

    def __init__(self) -> None:
        self.total: int | None = None
        #: (path, first error line) of each module that failed to collect, in order
        self.collect_errors: list[tuple[str, str | None]] = []
        self.collect_error_count = 0
        #: "Interrupted: N errors during collection" said N
        self.interrupted_errors: int | None = None
        #: pytest's "ERROR: ..." (a path not found, a usage error) and "...: error: ..." lines
        self.errors: list[str] = []
        self.internal_error: str | None = None
        #: (conftest path, its error line) when pytest could not import a conftest.py
        self.conftest_error: tuple[str, str | None] | None = None
        #: the last "=== ... in 1.23s ===" line (pytest's own verdict)
        self.final: str | None = None
        #: "disk full at ..." said by a worker or the controller (faulthunt.rundir.JsonlWriter)
        self.disk_full: list[str] = []
        self._collecting: str | None = None
        #: collectors inside a file ("ERROR collecting t.py::TestC") whose section was seen
        self._headed: set[str] = set()

    def feed(self, line: str) -> None:
        """One line (or its first :data:`PREFIX` characters), without the newline."""
        line = line[:PREFIX].rstrip()
        if self.total is None:
            self.total = parse_total(line)
        head = re.match(_COLLECT_HEAD, line) if line.startswith("_") else None
        if head:
            self._collecting = head["path"]
            if "::" in head["path"] and len(self._headed) < 10_000:
                self._headed.add(head["path"])
            self._add_error(head["path"], None)
            return
        # another section ("ERROR at setup of t.py::test_a")
        if line.startswith("___") and re.match(_SECTION_HEAD, line):
            self._collecting = None
            return
        if line.startswith(("ImportError while", "E   ")) and self._conftest(line):
            return
        if self._collecting is not None and line.startswith("E   "):
            self._set_message(self._collecting, line[1:].strip())
            self._collecting = None
            return
        if line.startswith("ERROR: "):
            self._keep(self.errors, line[len("ERROR: "):])
            return
        short = re.match(_SHORT_ERROR, line) if line.startswith("ERROR ") else None
        if short and self._is_collector(short["path"]):
            self._add_error(short["path"], short["msg"])
            return
        self._other(line)

    def _conftest(self, line: str) -> bool:
        """pytest's "ImportError while loading conftest 'PATH'." and then its traceback: keeps
        the path and the exception's line (the first ``E   `` line not indented further: a
        SyntaxError's quoted source comes first)."""
        if self.conftest_error is None:
            m = re.match(_CONFTEST, line) if line.startswith("ImportError while") else None
            if m:
                self.conftest_error = (m["path"][1:-1], None)
            return m is not None
        path, message = self.conftest_error
        if message is None and line.startswith("E   ") and line[4:5] not in ("", " "):
            self.conftest_error = (path, line[4:].strip())
            return True
        return False

    def _other(self, line: str) -> None:
        if line.startswith("INTERNALERROR>"):
            # the last line of pytest's internal traceback is the error itself; the first is
            # only "Traceback (most recent call last):"
            text = line[len("INTERNALERROR>"):].strip()
            if text:
                self.internal_error = text
        elif "Interrupted: " in line and (m := re.search(_INTERRUPTED, line)):
            self.interrupted_errors = int(m["n"])
        elif line.startswith("=") and (m := re.match(_FINAL, line)):
            self.final = m["text"]
        elif "disk full at " in line and (m := re.search(_DISK_FULL, line)):
            self._keep(self.disk_full, m["msg"])
        elif self.errors and (m := re.match(_USAGE, line)):
            # argparse's "python -m pytest: error: unrecognized arguments: --bogus" follows
            # pytest's "ERROR: usage: ..." line
            self._keep(self.errors, m["msg"])

    def _is_collector(self, nodeid: str) -> bool:
        """A short summary's ``ERROR <id>`` names a collection error when the id is a file (a
        test's id has ``::``) or headed an "ERROR collecting" section; otherwise it is a test's
        setup or teardown error, which pytest counts among its "N errors" of tests that ran."""
        return "::" not in nodeid or nodeid in self._headed

    @staticmethod
    def _keep(bucket: list[str], text: str) -> None:
        if len(bucket) < KEEP_ERRORS:
            bucket.append(text)

    def _add_error(self, path: str, message: str | None) -> None:
        for i, (known, msg) in enumerate(self.collect_errors):
            if known == path:
                if msg is None and message:
                    self.collect_errors[i] = (path, message)
                return
        self.collect_error_count += 1
        if len(self.collect_errors) < KEEP_ERRORS:
            self.collect_errors.append((path, message))

    def _set_message(self, path: str, message: str) -> None:
        for i, (known, msg) in enumerate(self.collect_errors):
            if known == path and msg is None:
                self.collect_errors[i] = (path, message)

    @property
    def collection_errors(self) -> int:
        """Modules (or other collectors) that failed to collect."""
        return max(self.collect_error_count, self.interrupted_errors or 0)

    def reason(self) -> str | None:
        """Why nothing ran, in one line of pytest's own words (None when it did not say)."""
        if self.conftest_error is not None:
            path, message = self.conftest_error
            return (f"pytest could not import {path}: {message or 'see reproducer.log'} (fix "
                    "that conftest.py: pytest loads it before collecting any test)")
        if self.errors:
            usage = [e for e in self.errors if not e.startswith("usage:")]
            return "pytest: " + "; ".join((usage or self.errors)[:2])
        if self.interrupted_errors:  # the errors are named one by one under the table
            n = self.collection_errors
            return (f"pytest stopped at {n} collection error{'s' if n != 1 else ''} (without "
                    "xdist pytest does not run the rest); fix "
                    f"{'it' if n == 1 else 'them'} or pass `-- --continue-on-collection-errors`")
        if self.collection_errors:
            n = self.collection_errors
            return f"pytest: {n} collection error{'s' if n != 1 else ''}"
        if self.internal_error:
            return (f"pytest stopped on an internal error ({self.internal_error}); the same "
                    "command with -n 0 shows pytest's own message (xdist hides some usage "
                    "errors, such as a bad -k expression, behind one)")
        if self.final:
            return f"pytest: {self.final}"
        return None


class OutputPump:
    """A thread copying the child's output into ``reproducer.log`` until the pipe closes.

    Never stops draining: a write that fails for lack of room (a full disk, ``ulimit -f``)
    records ``disk full at <path>`` and from then on the output is counted and dropped, so pytest
    never blocks on a full pipe. Each line is redacted before it is written; the start of each
    line goes to ``scan`` (and ``on_line``).
    """

    def __init__(self, fd: int, log_path: Path, scan: PytestOutput, *,
                 redact: Callable[[str], str] | None = None,
                 on_line: Callable[[str], None] | None = None) -> None:
        self._fd = fd
        self.log_path = log_path
        self.scan = scan
        self._redact = redact or redact_lines
        self._on_line = on_line
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        self._pending = b""          # the unfinished end of the last chunk (< SEGMENT bytes)
        self._mid_line = False       # the next piece continues a line already started
        self._log_fd = -1
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="faulthunt-pytest-output",
                                        daemon=True)
        #: bytes of (redacted) output written to the log / dropped for lack of room
        self.written = 0
        self.dropped = 0
        #: "disk full at <path>: ..." once a write failed for lack of room
        self.disk_full: str | None = None
        #: another reason the log could not be written (the output was still drained)
        self.error: str | None = None

    def start(self) -> None:
        try:
            self._log_fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            self._failed(exc)
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Wait for the end of the output; after ``timeout`` stop reading (something outside
        the child's process group still holds the pipe). True when it ended by itself."""
        self._thread.join(timeout)
        ended = not self._thread.is_alive()
        if not ended:
            os.write(self._wake_w, b"x")
            self._thread.join(5.0)
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        return ended

    # -- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        poller = select.poll()  # not select(): descriptors above 1023 are fine
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._wake_r in ready:
                    break
                data = os.read(self._fd, READ_CHUNK)
                if not data:
                    break
                self._chunk(data)
            if self._pending:
                self._chunk(b"", final=True)
        except BaseException as exc:  # noqa: BLE001 - never let the pump die: pytest would block
            self.error = f"reading pytest's output failed: {type(exc).__name__}: {exc}"
            self._drain()
        finally:
            if self._log_fd >= 0:
                os.close(self._log_fd)
                self._log_fd = -1

    def _drain(self) -> None:
        """After an unexpected failure: keep emptying the pipe (counted as dropped) till it ends."""
        try:
            while data := os.read(self._fd, READ_CHUNK):
                self.dropped += len(data)
        except OSError:
            return

    def _chunk(self, data: bytes, final: bool = False) -> None:
        buf = self._pending + data if self._pending else data
        out: list[str] = []
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0 or nl - start >= SEGMENT:
                # no line end within a segment: handle a segment of the line now
                if len(buf) - start >= SEGMENT:
                    out.append(self._piece(buf[start:start + SEGMENT], ends_line=False))
                    start += SEGMENT
                    continue
                break
            out.append(self._piece(buf[start:nl + 1], ends_line=True))
            start = nl + 1
        self._pending = buf[start:]
        if final and self._pending:
            out.append(self._piece(self._pending, ends_line=True))
            self._pending = b""
        if out:
            # whole lines (or one segment of a long line): at most READ_CHUNK + SEGMENT bytes
            text = self._redact("".join(out))
            self._write(text.encode("utf-8", "backslashreplace"))

    def _piece(self, raw: bytes, *, ends_line: bool) -> str:
        text = self._decode(raw, final=ends_line)
        if not self._mid_line:
            # redacted before it is scanned: what the scan keeps (pytest's usage error echoing
            # an argv value, a collection error's message) ends up in summary.json
            head = self._redact(text[:PREFIX].rstrip("\n"))
            self.scan.feed(head)
            if self._on_line is not None:
                self._on_line(head)
        self._mid_line = not ends_line
        return text

    def _write(self, data: bytes) -> None:
        if self._log_fd < 0:
            self.dropped += len(data)
            return
        view = memoryview(data)
        try:
            while view:
                n = os.write(self._log_fd, view)
                self.written += n
                view = view[n:]
        except OSError as exc:
            self.dropped += len(view)
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        if is_full(exc):
            self.disk_full = disk_full_text(self.log_path, exc)
        else:
            self.error = f"cannot write {self.log_path}: {exc.strerror or exc}"
        if self._log_fd >= 0:
            os.close(self._log_fd)
        self._log_fd = -1
