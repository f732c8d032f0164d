"""Reading a kernel log from a stream (a file, a pipe) in bounded memory, for the parser.

:class:`StreamScan` is the I/O edge of :mod:`faulthunt.kernlog.parse`: it reads chunks, finds the
candidate lines with :func:`~faulthunt.kernlog.parse.find_text_lines` (the routine ``scan_bytes`` uses)
and hands them to :func:`~faulthunt.kernlog.parse.parse_lines`, so a streamed
scan gives exactly the events of a whole-buffer scan (tests/test_kernlog_stream.py).
"""

from __future__ import annotations

import errno
import io
import os
import stat
from collections.abc import Iterator
from typing import Protocol

from faulthunt.kernlog import parse
from faulthunt.kernlog.parse import MARKER_B, MAX_SIDE
from faulthunt.records.xid import XidEvent

class Readable(Protocol):
    """A binary stream: a file opened ``rb``, ``sys.stdin.buffer``, a socket's file."""

    def readinto(self, buffer: memoryview, /) -> int | None: ...

    def close(self) -> None: ...


#: bytes read per chunk (1 MiB was faster than 256 KiB, 4 MiB and windows of a memory map)
CHUNK = 1 << 20


#: a hole of a sparse file reads as this many zeros, whatever its length (StreamScan says why)
_HOLE_RUN = 2 * MAX_SIDE + 2 * len(MARKER_B)


class StreamScan:
    """The Xid lines of a binary stream (a file, a pipe) read chunk by chunk, in bounded memory.

    Iterating yields ``(event, line)`` per candidate line in input order, ``event`` None for a line
    that mentions ``NVRM: Xid`` but does not parse. Memory is one chunk plus one line, however big
    the input (a 1 GB sparse file, a pipe from a long ``journalctl``). ``limit`` stops after that
    many bytes (``truncated`` then says so): a character device such as ``/dev/zero`` never ends.

    A regular file opened unbuffered (``open(path, "rb", buffering=0)``) has its holes skipped, as
    GNU grep does: a hole is zeros, which hold no marker and no newline, and the scan of any run of
    zeros longer than ``_HOLE_RUN`` ends in the same state as the scan of ``_HOLE_RUN`` of them (the
    line cut at ``MAX_SIDE`` either side of a marker), so that many stand in for the hole.
    """

    def __init__(self, stream: Readable, *, chunk: int = CHUNK, limit: int | None = None) -> None:
        self._stream = stream
        self._chunk = chunk
        self._limit = limit
        #: bytes of the stream covered so far (read, or skipped in a hole)
        self.bytes_read = 0
        #: True when ``limit`` stopped the scan before the end of the stream
        self.truncated = False
        #: the first bytes of the stream (to tell a binary file from a log)
        self.head = b""
        self._fd: int | None = None
        self._size = 0
        self._zeros = 0  # zeros still to hand out for the hole being skipped ...
        self._resume = 0  # ... before reading on from this offset
        if isinstance(stream, io.FileIO):
            try:
                st = os.fstat(stream.fileno())
                if stat.S_ISREG(st.st_mode):
                    self._fd, self._size = stream.fileno(), st.st_size
            except OSError:
                pass

    def _read(self, into: memoryview) -> int:
        if self._zeros:
            n = min(len(into), self._zeros)
            into[:n] = bytes(n)
            self._zeros -= n
            if not self._zeros:
                os.lseek(self._fd, self._resume, os.SEEK_SET)  # type: ignore[arg-type]
            return n
        if self._fd is not None:
            try:
                here = os.lseek(self._fd, 0, os.SEEK_CUR)
                try:
                    data = os.lseek(self._fd, here, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno != errno.ENXIO:  # ENXIO: nothing but a hole up to the end
                        raise
                    data = max(here, self._size)
                os.lseek(self._fd, here, os.SEEK_SET)
            except OSError:  # no SEEK_DATA here (EINVAL): read every byte
                self._fd = None
            else:
                if data - here > _HOLE_RUN:
                    self.bytes_read += data - here - _HOLE_RUN  # the part of the hole never handed out
                    self._zeros, self._resume = _HOLE_RUN, data
                    return self._read(into)
        return self._stream.readinto(into) or 0

    def __iter__(self) -> Iterator[tuple[XidEvent | None, str]]:
        for lines in self.batches():
            yield from zip(parse.parse_lines(lines), lines)

    def batches(self) -> Iterator[list[str]]:
        """The candidate lines (decoded, not yet parsed), a list per chunk read, in input order.

        A caller that parses a chunk's lines in one go pays no generator step per line.
        """
        # one buffer for the whole scan: the unfinished tail of a chunk moves to its front and the
        # next chunk is read in after it (the tail is at most 2 * MAX_SIDE + a marker)
        buf = bytearray(self._chunk + 2 * MAX_SIDE + len(MARKER_B))
        view = memoryview(buf)
        have = 0  # bytes of buf holding data not yet scanned past
        skipping = False
        eof = False
        find_text_lines = parse.find_text_lines  # compiled when built, else pure Python
        while not eof:
            want = len(buf) - have
            if self._limit is not None:
                want = min(want, self._limit - self.bytes_read)
            n = self._read(view[have:have + want]) if want > 0 else 0
            if not n:
                eof = True
                self.truncated = self._limit is not None and self.bytes_read >= self._limit
            else:
                if not self.bytes_read:
                    self.head = bytes(buf[have:have + min(n, 4096)])
                self.bytes_read += n
                have += n
            start = 0
            if skipping:
                nl = buf.find(b"\n", 0, have)
                if nl < 0:
                    have = 0  # still inside the over-long line: drop what was read
                    continue
                start, skipping = nl + 1, False
            lines, keep, skipping = find_text_lines(buf, start, have, eof)
            if lines:
                yield lines
            # the unfinished tail moves to the front; _lines needs nothing before it
            buf[:have - keep] = buf[keep:have]
            have -= keep
