"""The compiled line finder (harness/kernlog/_scan.c) against the pure-Python one it stands in for.

``parse.find_text_lines`` is the compiled finder when pip install built it, else ``find_lines`` +
``decode_lines``; both must give the same lines, keep offset and skipping flag on every input,
every range and every cut length (test_kernlog_stream.py runs its streamed scans on both).
"""

from __future__ import annotations

from pathlib import Path

import msgspec
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


# --- the compiled reader of the commonest line shapes (parse_lines) ----------------------------------
# tests/test_kernlog_fastpath.py compares it with parse_line on every line it checks (every capture,
# every container and device edge, generated lines); here: that it takes the lines it is for, and
# lines generated on the edges of its own bounds.

DATA = Path(__file__).parent / "data"


def _taken(lines: list[str]) -> list[bool]:
    """Which lines the compiled reader reads itself (the others go to the fallback)."""
    assert native is not None
    module = P._native()
    return [ev != "fallback" for ev in module.parse_lines(lines, lambda line: "fallback")]


def test_the_compiled_reader_takes_the_real_dmesg_kmsg_and_journal_lines() -> None:
    for name in ("h200/dmesg.txt", "h200/kmsg_raw.txt", "h200/dmesg_T.txt", "h200/dmesg_iso.txt",
                 "kernlog/era_418_nopid_syslog.log"):
        lines = [ln for ln in (DATA / name).read_text().splitlines() if P.MARKER in ln]
        assert lines and all(_taken(lines)), name
        assert P.parse_lines(lines) == P._parse_lines(lines)


def _agree(line: str) -> None:
    module = P._native()
    got, want = module.parse_lines([line], P.parse_line)[0], P.parse_line(line)
    assert got == want, line
    assert msgspec.json.encode(got) == msgspec.json.encode(want), line
    assert want == P._parse_line_general(line), line


#: the wall-clock containers on and off their bounds (dmesg -T, --time-format iso, syslog/journalctl)
_WALLS = [
    "[Wed Dec  2 14:42:29 2026] ", "[Wed Dec 12 14:42:29 2026] ", "[wed Dec  2 14:42:29 2026] ",
    "[Wed Dec  2 14:42:29 2026]  ", "[Wed Dec  2 14:42:29 20261] ", "[Wed Dec  2 14:42:29 2026]",
    "2026-12-02T14:42:29,250180+00:00 ", "2026-12-02 14:42:29 ", "2026-12-02T14:42:29.{f}Z ",
    "2026-12-02T14:42:29+0100 ", "2026-12-02T14:42:29+01:0 ", "2026-12-02T14:42:29+01:000 ", "2026-12-02T14:42:29. ",
    "2026-12-02T14:42:29-01 ", "20261-12-02T14:42:29 ", "2026-12-02X14:42:29 ",
    "Dec  2 11:38:47 worker4 kernel: [{sp}{n}.{f}] ", "Dec 12 11:38:47.{f} h kernel: ", "Dec   2 11:38:47 h kernel: ",
    "dec  2 11:38:47 h kernel: ", "Dec  2 11:38:47 " + "h" * 64 + " kernel: ", "Dec  2 11:38:47 " + "h" * 65 + " kernel: ",
    "Dec  2 11:38:47 h[1] kernel: ", "Dec  2 11:38:47 h kernel: [Wed Dec  2 14:42:29 2026] ", "Dec 123 11:38:47 h kernel: ",
    "Dec  2 11:38:47 h kernel:  ", "Dec  2 11:38:47 a kernel: kernel: ", "Dec  2 1:38:47 h kernel: ", "De  2 11:38:47 h kernel: ",
]

_MMU = ("channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC{g} GPCCLIENT_T1_8 faulted @ 0x{hi}_{lo}. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE{end}")


@settings(max_examples=500, deadline=None)
@given(cont=st.sampled_from(["", "[{sp}{n}.{f}] ", "{n},{n},{n},-;", "{n},{n},{n},c,x=1;", "{n},{n},{n},;",
                             "[{sp}{n}.{f}]  ", "[{sp}{n}] ", *_WALLS]),
       sp=st.sampled_from(["", " ", " " * 19, " " * 20, " " * 21, "\t"]),
       n=st.sampled_from(["0", "5", "123456789012", "1234567890123", "999999999999999", "1234567890123456",
                          "12345", "123456", "\u0661"]),
       f=st.sampled_from(["0", "123456789", "1234567890", ""]),
       dev=st.sampled_from(["PCI:0000:3b:00", "0000:3B:00", "PCI:00000000:3b:00", "PCI:000000000:3b:00",
                            "PCI:0000:3b:0", "PCI:0000:3b:000", "PCI:0000:3b:00.0", "PCI:0000:3b:00 GPU-I:05"]),
       xid=st.sampled_from(["31", "43", "123456", "1234567", "013"]),
       pid=st.sampled_from(["", "pid=7, ", "pid=1234567890, ", "pid=12345678901, ", "pid='<unknown>', ",
                            "pid=7,", "pid=, "]),
       name=st.sampled_from(["", "name=p, ", "name=, ", "name= \x1c a b\x0b , ", "name=<unknown>, ",
                             "name='<unknown>', ", "name= <unknown> , ", "name=a,b, ", "name=a", "name=a,"]),
       msg=st.one_of(
           st.builds(_MMU.format, g=st.sampled_from(["0", "1234", "12345"]),
                     hi=st.sampled_from(["7f69", "0", "ffffffff", "1ffffff", "123456789"]),
                     lo=st.sampled_from(["f2000000", "f2000123", "f200000", "0f2000000", "F2000000"]),
                     end=st.sampled_from(["", " ", " \x1c\t", "\r", " x", "\x85"])),
           st.sampled_from(["channel 0x0000000b", "Ch 00000001 caused by previous Xid 31", " lead", "",
                            "Graphics SM Warp Exception on (GPC 1, TPC 4, SM 0): Misaligned Address  ",
                            "Graphics Exception: ESR 0x5=0x1 0x6=0x2", "pid=3, x", "name=x, y", "x\x1f",
                            "GPU has fallen off the bus.\r"])),
       end=st.sampled_from(["", "\r", "\r\r", " \r"]))
def test_the_compiled_reader_agrees_on_the_edges_of_its_bounds(cont: str, sp: str, n: str, f: str, dev: str, xid: str,
                                                               pid: str, name: str, msg: str, end: str) -> None:
    line = cont.format(sp=sp, n=n, f=f) + f"NVRM: Xid ({dev}): {xid}, {pid}{name}{msg}{end}"
    _agree(line)


def test_the_compiled_reader_declines_what_it_does_not_read() -> None:
    declined = ["kern  :warn  : [ 5.0] NVRM: Xid (PCI:0000:3b:00): 43, pid=7, name=a, channel 0x0000000b",
                "<4>[ 5.0] NVRM: Xid (PCI:0000:3b:00): 43, pid=7, name=a, channel 0x0000000b",
                "NVRM: Xid (PCI:0000:3b:00 GPU-I:05 GPU-CI:01): 43, pid=7, name=a, channel 0x0000000b",
                "[ 5.0] NVRM: Xid (PCI:0000:3b:00): 43, pid=7, name=\u00e4, channel 0x0000000b",
                "[ 5.0] NVRM: Xid (PCI:0000:3b:00): 43,  channel"]
    assert _taken(declined) == [False] * len(declined)
    for line in declined:
        _agree(line)


def test_parse_lines_keeps_order_and_the_lines_that_do_not_parse() -> None:
    lines = ["[ 5.0] NVRM: Xid (PCI:0000:3b:00): 43, pid=7, name=a, channel 0x0000000b", "NVRM: Xid (PCI:0",
             "Dec  2 11:38:47 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."]
    got = P.parse_lines(lines)
    assert got == P._parse_lines(lines) and got[1] is None and [ev.xid for ev in got if ev] == [43, 79]


@pytest.mark.parametrize("gap", [0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 100])
def test_the_compiled_finder_finds_markers_at_every_offset_of_its_wide_steps(gap: int) -> None:
    """Markers at every offset modulo the 16- and 32-byte steps of the vector search, near their ends too."""
    parts = []
    for k in range(70):
        parts.append(b"N" * (k % 5) + b"x" * gap + b"NVRM: X" + b"\n"[: k % 2] + P.MARKER_B + b"id" * (k % 3) + b"\n")
    buf = b"".join(parts)
    for end in (len(buf), len(buf) - 1, len(buf) - 9, len(buf) - 40):
        for pos in (0, 1, 5, 33):
            for final in (True, False):
                assert _compiled(buf, pos, end, final, P.MAX_SIDE) == _python(buf, pos, end, final, P.MAX_SIDE)


# --- has_control: the terminal guard of `xid` output (cli/xid.py _Visible) --------------------------

_text_pieces = st.sampled_from(["a", "abcdefg", "\n", "\t", "\r", "\x1b", "\x00", "\x08", "\x0b", "\x1f", " ",
                                "\x7f", "\x80", "\x9b", "\xff", "é", "\u2028", "\ud800", "\U0001f600", "~"])


def _regex(text: str) -> bool:
    from faulthunt.cli.xid import _CONTROL

    return _CONTROL.search(text) is not None


@settings(max_examples=800, deadline=None)
@given(st.lists(_text_pieces, max_size=60) | st.text(max_size=80))
def test_has_control_compiled_and_python_answer_as_the_expression(pieces: list[str] | str) -> None:
    """Every string kind (1, 2 and 4 bytes a character, lone surrogates), every offset of the
    8-byte steps: the compiled check, the byte-deletion route and the expression agree."""
    import importlib

    text = "".join(pieces)
    compiled = importlib.import_module("faulthunt.kernlog._scan").has_control
    assert compiled(text) == P._has_control(text) == _regex(text)


@pytest.mark.parametrize("at", [0, 1, 7, 8, 9, 15, 16, 63, 64, 99])
@pytest.mark.parametrize("char", ["\x00", "\x07", "\x0b", "\x0d", "\x1b", "\x1f", "\x7f"])
def test_has_control_finds_one_control_character_anywhere_in_a_long_text(at: int, char: str) -> None:
    clean = "x" * 50 + "\t\n" + "\xe9" * 48  # tab and newline are text; Latin-1 keeps one byte a char
    assert not P.has_control(clean) and not P._has_control(clean)
    text = clean[:at] + char + clean[at:]
    assert P.has_control(text) and P._has_control(text)
