"""Streamed scanning (faulthunt.kernlog.stream.StreamScan): the same lines as the whole-buffer scan, in
bounded memory, whatever the chunking and however long (or unending) the lines."""

from __future__ import annotations

import io
import os
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.kernlog import parse as P
from faulthunt.kernlog import stream as S

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True, params=["native", "python"])
def route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on both line finders: the compiled one (when built) and the pure-Python one."""
    if request.param == "python":
        monkeypatch.setattr(P, "find_text_lines", P._find_text_lines)
    elif P._native_lines() is None:
        pytest.skip("the compiled line finder (kernlog/_scan.c) is not built here")
    return str(request.param)
LINE = b"[ 5.0] NVRM: Xid (PCI:0000:00:06): 43, pid=7, name=a, channel 0x0000000a"


class Trickle(io.RawIOBase):
    """A stream that returns at most ``step`` bytes per read (a pipe delivering small pieces)."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data, self._pos, self._step = data, 0, step

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
        n = min(len(b), self._step, len(self._data) - self._pos)
        b[:n] = self._data[self._pos:self._pos + n]
        self._pos += n
        return n


def _streamed(data: bytes, chunk: int = S.CHUNK, step: int | None = None) -> tuple[list, list]:  # type: ignore[type-arg]
    stream = Trickle(data, step) if step else io.BytesIO(data)
    events, unparsed = [], []
    for ev, line in S.StreamScan(stream, chunk=chunk):
        (unparsed if ev is None else events).append(line.rstrip("\r") if ev is None else ev)
    return events, unparsed


def _whole(data: bytes) -> tuple[list, list]:  # type: ignore[type-arg]
    scan = P.scan_bytes(data)
    return list(scan.events), list(scan.unparsed)


@pytest.mark.parametrize("name", ["h200/dmesg.txt", "h200/kmsg_raw.txt", "h200/dmesg_T.txt", "kernlog/names_talos.log"])
@pytest.mark.parametrize(("chunk", "step"), [(S.CHUNK, None), (64, None), (7, None), (4096, 3)])
def test_streamed_equals_whole_on_the_captures(name: str, chunk: int, step: int | None) -> None:
    data = (DATA / name).read_bytes()
    assert _streamed(data, chunk, step) == _whole(data)
    assert _whole(data)[0]


_pieces = st.sampled_from([b"\n", b"\r\n", b"x", b"NVRM: Xid", b"NVRM: X", b"id (PCI:0000:00:06): 31, ", LINE,
                           LINE + b"\n",
                           b"\xff\xfe", b"\0" * 7, b" " * 40, b"[ 1.0] ", b"4,1,2,-;"])


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(_pieces, max_size=40), chunk=st.integers(1, 40), step=st.one_of(st.none(), st.integers(1, 9)))
def test_streamed_equals_whole_on_any_chunking(pieces: list[bytes], chunk: int, step: int | None) -> None:
    data = b"".join(pieces)
    assert _streamed(data, chunk, step) == _whole(data)


@pytest.mark.parametrize("before", [0, 100, P.MAX_SIDE - 1, P.MAX_SIDE, P.MAX_SIDE + 1, 3 * P.MAX_SIDE])
@pytest.mark.parametrize("after", [0, P.MAX_SIDE - 20, 3 * P.MAX_SIDE])
@pytest.mark.parametrize("newline", [True, False])
def test_over_long_lines_are_cut_the_same_way(before: int, after: int, newline: bool) -> None:
    data = (b"x" * before + LINE + b"y" * after + (b"\n" if newline else b"") + LINE + b"\n"
            + b"NVRM: Xid (PCI:0000:00:06): 79, z" + b"z" * after)
    whole = _whole(data)
    assert _streamed(data, 1000) == whole == _streamed(data, 100_000, 333)
    first = whole[0][0].raw
    assert len(first) <= 2 * P.MAX_SIDE and first.lstrip("x").startswith("[ 5.0] NVRM: Xid")
    # one event per line: without the newline the first two reports are one (over-long) line
    assert [e.xid for e in whole[0]] == ([43, 43, 79] if newline else [43, 79])


def test_a_sparse_file_streams_in_bounded_memory(tmp_path: Path) -> None:
    """No newline and no marker in 64 MiB: memory stays one chunk (the 1 GB case of issue 16, smaller)."""
    sparse = tmp_path / "sparse.log"
    with open(sparse, "wb") as fh:
        fh.truncate(64 << 20)
        fh.seek(32 << 20)
        fh.write(LINE)  # one report in the middle of nowhere
    tracemalloc.start()
    try:
        with open(sparse, "rb", buffering=0) as fh:
            scan = S.StreamScan(fh)
            got = [ev for ev, _ in scan]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert scan.bytes_read == 64 << 20 and [e.xid for e in got if e] == [43]
    assert peak < S.CHUNK + 8 * P.MAX_SIDE + (256 << 10)


def test_limit_stops_an_endless_stream() -> None:
    class Zeros(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # type: ignore[no-untyped-def, override]
            b[:] = bytes(len(b))
            return len(b)

    scan = S.StreamScan(Zeros(), limit=5 << 20)
    assert list(scan) == [] and scan.truncated and scan.bytes_read == 5 << 20


def test_head_is_the_start_of_the_stream() -> None:
    data = os.urandom(5000)
    scan = S.StreamScan(io.BytesIO(data))
    list(scan)
    assert scan.head == data[:4096] and not scan.truncated


def _sparse(path: Path, pieces: list[tuple[int, bytes]], size: int) -> bytes:
    """A file of ``size`` bytes, zeros (holes) but for ``pieces`` written at their offsets."""
    with open(path, "wb") as fh:
        fh.truncate(size)
        for offset, data in pieces:
            fh.seek(offset)
            fh.write(data)
    return path.read_bytes()


@pytest.mark.parametrize("layout", [
    [(0, LINE + b"\n"), (1 << 20, LINE + b"\n")],                     # lines between holes
    [(0, b"x" * 10 + LINE), (1 << 20, b"tail\n" + LINE + b"\n")],      # a report line running into a hole
    [(0, b"start of a line"), ((1 << 20) - 5, b"NVRM: Xid (PCI:0000:00:06): 79, z\n")],  # marker right after one
    [(512 << 10, LINE + b"\n"), (3 << 20, LINE)],                      # holes at both ends
    [],                                                                # nothing but a hole
])
def test_holes_of_a_sparse_file_are_skipped_with_the_same_result(tmp_path: Path, layout: list) -> None:  # type: ignore[type-arg]
    path = tmp_path / "sparse.log"
    data = _sparse(path, layout, 4 << 20)
    with open(path, "rb", buffering=0) as fh:
        scan = S.StreamScan(fh, chunk=64 << 10)
        got = [(ev, line) for ev, line in scan]
    events = [ev for ev, _ in got if ev is not None]
    unparsed = [line.rstrip("\r") for ev, line in got if ev is None]
    assert (events, unparsed) == _whole(data) and scan.bytes_read == len(data)


# --- finding the marker: its rare character first, the whole marker where that is -----------------------

def _oracle(text: bytes) -> list[bytes]:
    """The candidate lines by the plainest reading: every line holding the marker (lines here are short)."""
    return [ln for ln in text.split(b"\n") if P.MARKER_B in ln]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([b"X", b"XX", b"Xid", b"NVRM: ", b"NVRM: X", b"NVRM: Xi", P.MARKER_B, b"\n", b"a",
                                 b"NVRM: NVRM: Xid", b"id X", b"\xff"]), max_size=60),
       st.integers(min_value=0, max_value=3))
def test_find_lines_finds_exactly_the_lines_holding_the_marker(pieces: list[bytes], rotate: int) -> None:
    text = b"".join(pieces[rotate:] + pieces[:rotate])
    lines, _, _ = P.find_lines(text, 0, len(text), True, P.MARKER_B, b"\n")
    assert lines == _oracle(text)
    as_text = text.decode("latin-1")
    assert P.find_lines(as_text, 0, len(as_text), True, P.MARKER, "\n")[0] == [x.decode("latin-1") for x in lines]
    assert _streamed(text, chunk=16)[0] == _whole(text)[0]


@pytest.mark.parametrize("fill", [b"X", b"NVRM: X\n", b"EXT4-fs XFS Xeon XSAVE\n"])
def test_text_dense_in_the_rare_character_still_finds_every_marker(fill: bytes) -> None:
    """Past one miss per 512 bytes the rare-character search hands over to find(marker): same lines."""
    text = fill * 5000 + LINE + b"\n" + fill * 5000 + LINE + b"\n" + fill * 3
    assert P.find_lines(text, 0, len(text), True, P.MARKER_B, b"\n")[0] == _oracle(text)
    assert [ev.xid for ev in P.scan_bytes(text).events] == [43, 43]
    assert len(_streamed(text, chunk=4096)[0]) == 2


def test_a_marker_is_found_within_the_range_asked_only() -> None:
    """A marker whose rare character lies past ``end`` (or before ``pos``) is not in the range."""
    text = b"ab NVRM: Xid (x\nNVRM: Xid"
    for end in range(len(text) + 1):
        lines, _, _ = P.find_lines(text, 0, end, True, P.MARKER_B, b"\n")
        assert lines == _oracle(text[:end]), end
    lines, _, _ = P.find_lines(text, 4, len(text), True, P.MARKER_B, b"\n")
    assert lines == [b"NVRM: Xid"]
