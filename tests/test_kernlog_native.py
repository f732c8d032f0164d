"""The compiled line finder (harness/kernlog/_scan.c) against the pure-Python one it stands in for.

``parse.find_text_lines`` is the compiled finder when pip install built it, else ``find_lines`` +
``decode_lines``; both must give the same lines, keep offset and skipping flag on every input,
every range and every cut length (test_kernlog_stream.py runs its streamed scans on both).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.kernlog import parse as P

native = P._native_lines()
pytestmark = pytest.mark.skipif(native is None, reason="the compiled line finder (kernlog/_scan.c) is not built here")

_pieces = st.sampled_from([b"\n", b"X", b"Xid", b"NVRM: ", b"NVRM: X", P.MARKER_B, b"NVRM: NVRM: Xid", b"a",
                           b"abcdefgh", b"\xff", b"\xc3\xa9", b"\xe2\x80", b"\0"])


def _python(buf: bytes, pos: int, end: int, final: bool, side: int) -> tuple[list[str], int, bool]:
    """The pure-Python route with the cut at ``side`` bytes either side of a marker."""
    saved = P.MAX_SIDE
    P.MAX_SIDE = side
    try:
        return P._find_text_lines(buf, pos, end, final)
    finally:
        P.MAX_SIDE = saved


def _compiled(buf: bytes, pos: int, end: int, final: bool, side: int) -> tuple[list[str], int, bool]:
    import importlib

    lines = importlib.import_module("faulthunt.kernlog._scan").lines
    return lines(buf, pos, end, final, P.MARKER_B, side)  # type: ignore[no-any-return]


@settings(max_examples=600, deadline=None)
@given(st.lists(_pieces, max_size=80), st.integers(0, 400), st.integers(0, 400), st.booleans(),
       st.sampled_from([0, 1, 5, 9, 16, 40, P.MAX_SIDE]))
def test_compiled_finder_equals_the_python_one(pieces: list[bytes], a: int, b: int, final: bool, side: int) -> None:
    buf = b"".join(pieces)
    pos, end = min(a, b, len(buf)), min(max(a, b), len(buf))
    assert _compiled(buf, pos, end, final, side) == _python(buf, pos, end, final, side)


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_compiled_finder_reads_any_buffer_and_decodes_like_python(kind: type) -> None:
    line = "[ 1.0] NVRM: Xid (PCI:0000:00:06): 43, pid=7, name=ä\udcff, channel 0x0000000a"
    buf = kind(b"junk \xff\n" + line.encode("utf-8", "surrogateescape") + b"\nmore")
    got = P.find_text_lines(buf, 0, len(buf), True)
    assert got == P._find_text_lines(buf, 0, len(buf), True)
    assert got[0] == [line.replace("\udcff", "\ufffd")]


def test_the_module_uses_the_compiled_finder_when_built() -> None:
    assert P.find_text_lines is not P._find_text_lines
