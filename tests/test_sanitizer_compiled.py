"""The compiled parts of ``sanitize parse`` against their Python routes (issue 16).

``harness/sanitizer/_fold.c`` is the parser's line loop (``parse_text._fold``) and
``harness/records/_record_json.c`` is ``SanitizerRecord.json_text``; both are built at install
(setup.py, optional) and both have the Python route kept. Here the two routes must agree: the
same records and summaries on every capture, on the bench's generated logs and on mutated text,
the same JSON text for every record (and ``json.dumps(to_json())``'s), and the same command
output as recorded in tests/data/parse_identity.json with the compiled parts switched off. The
whole suite runs on the Python routes alone with ``FAULTHUNT_SANITIZER_PURE=1``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_parse_identity import CASES, MANIFEST, _digest
from test_sanitizer_fuzz import ANY_CHAR, TEXTS, mutate

import faulthunt.records.sanitizer as rs
import faulthunt.sanitizer.parse_text  # noqa: F401  (the module; the package exports a function of its name)
from faulthunt.records.sanitizer import Frame, SanitizerRecord
from faulthunt.sanitizer import parse_xml

PT = sys.modules["faulthunt.sanitizer.parse_text"]
DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from benchrows.sanitizer import make_adversarial_log, make_log, make_mixed_log  # noqa: E402

NATIVE_FOLD = PT._fold_native
NATIVE_JSON = rs._native_json
needs_fold = pytest.mark.skipif(NATIVE_FOLD is None, reason="the compiled fold is not built (no compiler at install)")
needs_json = pytest.mark.skipif(NATIVE_JSON is None, reason="the compiled JSON writer is not built")


def _captures() -> list[Path]:
    return sorted((DATA / "sanitizer" / "text").glob("*")) + sorted((DATA / "h200").glob("san_*.txt"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    tmp = tmp_path_factory.mktemp("gen")
    make_log(tmp / "mem.log", 400)
    make_mixed_log(tmp / "mixed.log", 400)
    return [(tmp / "mem.log").read_text(), (tmp / "mixed.log").read_text(), make_adversarial_log(300_000, run=3000)]


def _parse(text: str, fold: object, batch: int | None = None,
           monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[list[SanitizerRecord], object]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PT, "_fold_native", fold)
        if batch is not None:
            mp.setattr(PT, "_BATCH", batch)
        parser = PT.TextLogParser()
        records = list(parser.records(text.splitlines()))
        return records, parser.summary()


def _same(text: str, batch: int | None = None) -> None:
    py = _parse(text, None, batch)
    assert _parse(text, NATIVE_FOLD, batch) == py
    if batch is not None:
        assert py == _parse(text, None)  # batch boundaries inside records change nothing


@needs_fold
@pytest.mark.parametrize("path", _captures(), ids=lambda p: p.name)
def test_fold_routes_agree_on_every_capture(path: Path) -> None:
    text = path.read_text(errors="replace")
    _same(text)
    _same(text, batch=3)


@needs_fold
def test_fold_routes_agree_on_generated_logs(generated: list[str]) -> None:
    for text in generated:
        _same(text)
        _same(text, batch=7)


@needs_fold
@settings(max_examples=200, deadline=None)
@given(st.text(ANY_CHAR), st.binary(max_size=30))
def test_fold_routes_agree_on_mutated_text(text: str, seed: bytes) -> None:
    _same(text, batch=5)
    _same(mutate(TEXTS[(seed[:1] or b"\0")[0] % len(TEXTS)], seed), batch=2)


def _json_both(r: SanitizerRecord) -> str:
    """The record's JSON text by both routes, which must agree with each other and with json.dumps."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rs, "_native_json", None)
        py = r.json_text()
    assert py == json.dumps(r.to_json())
    assert r.json_text() == py
    return py


def _records_everywhere(generated: list[str]) -> list[SanitizerRecord]:
    out: list[SanitizerRecord] = []
    for path in _captures():
        out += _parse(path.read_text(errors="replace"), NATIVE_FOLD)[0]
    for text in generated:
        out += _parse(text, NATIVE_FOLD)[0]
    for path in sorted((DATA / "h200").glob("xml_*.xml")):
        out += parse_xml(path.read_text(errors="replace"))
    return out


@needs_json
def test_json_routes_agree_on_every_record(generated: list[str]) -> None:
    records = _records_everywhere(generated)
    assert len(records) > 1000
    for r in records:
        _json_both(r)
        assert NATIVE_JSON(r.__dict__, rs._jframes, rs._json_str) is not None  # parser values: compiled


ODD_STRINGS = ["", "é", "\ud800", 'a"b', "a\\b", "tab\there", "\x7f", "\x1f", "line\nbreak", "\u2028", "😀"]


@needs_json
def test_json_routes_agree_on_odd_values() -> None:
    base = SanitizerRecord.from_fields({"kind": "memory_access", "message": "Invalid", "index": 3})
    for s in ODD_STRINGS:
        _json_both(dataclasses.replace(base, message=s, problem=s, extra=(s, "x"), kernel=s))
    for n in (0, -1, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**70, 10**40):
        r = dataclasses.replace(base, line=n, address=n, alloc_base=n, alloc_size=n, thread=(n, 0, 1),
                                index=n, hazards=n)
        _json_both(r)
    frames = (Frame("f\u00e9", "a.py", 3, None, 2**64), Frame(None))
    _json_both(dataclasses.replace(base, host_frames=frames, device_frames=frames[:1]))


@needs_json
def test_values_of_other_types_are_left_to_python() -> None:
    base = SanitizerRecord.from_fields({"kind": "memory_access", "message": "Invalid"})

    class Sub(str):
        pass

    for odd in (dataclasses.replace(base, line=True), dataclasses.replace(base, address=2.5),
                dataclasses.replace(base, thread=(1, 2, True)), dataclasses.replace(base, message=Sub("m")),
                dataclasses.replace(base, extra=("x", Sub("y"))), dataclasses.replace(base, host_frames=[Frame("f")])):
        assert NATIVE_JSON(odd.__dict__, rs._jframes, rs._json_str) is None
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(rs, "_native_json", None)
            want = odd.json_text()
        assert odd.json_text() == want


def test_pure_switch_turns_both_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rs.PURE_ENV, "1")
    assert PT._load_native() is None
    assert rs._load_native_json() is None


SAN_CASES = [(k, a) for k, a in CASES if k.startswith("sanitize parse")]


@pytest.mark.parametrize(("key", "argv"), SAN_CASES, ids=[k for k, _ in SAN_CASES])
def test_python_routes_print_what_is_recorded(key: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's output with the compiled parts absent (as on a machine without a compiler)."""
    monkeypatch.setattr(PT, "_fold_native", None)
    monkeypatch.setattr(rs, "_native_json", None)
    assert _digest(argv) == json.loads(MANIFEST.read_text())[key]


WHO_LINES = ["by thread (1,2,3) in block (4,5,6)", "by thread (1,2,3) in block (4,5,6) ", "by thread (1,2,3) in block (4,5,6)x",
             "by thread (1, 2,3) in block (4,5,6)", "by thread (123456789012345678,0,0) in block (0,0,9)",
             "by thread (1234567890123456789,0,0) in block (0,0,9)", "by thread (99999999999999999999,0,0) in block (1,1,1)",
             "by thread (\u0661,0,0) in block (1,1,1)", "by thread (007,0,0) in block (1,1,1)", "by thread (,0,0) in block (1,1,1)",
             "by thread (1,0,0) in block (1,1,1", "by thread (1,0,0)  in block (1,1,1)", "by thread (1,0,0) in block (1,1,1)\u00a0"]


@needs_fold
@pytest.mark.parametrize("indent", ["", " ", "  ", "   ", "    ", "\t\t\t", " \t ", "     "])
def test_thread_lines_read_alike(indent: str) -> None:
    """The compiled fold reads ``by thread`` lines itself: every near miss of their shape is the same."""
    head = "========= Invalid __global__ write of size 4 bytes\n"
    text = "".join(f"{head}========= {indent}{who}\n=========\n" for who in WHO_LINES)
    records, _ = _parse(text, None)
    assert len(records) == len(WHO_LINES)
    _same(text)
    _same(text.replace("=========", "==== PFX"))  # another prefix: the common-line path is off


HW_PIECES = [*PT.HW_EXCEPTIONS, "İllegal address", "ILLEGAL ADDRESS", "Warp Illegal Address:", "Lane  user",
             "\u212aernel", "ΣΣ illegal address", "out-of-range shared or local address.", "warning: x", " illegal address"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(HW_PIECES), st.text(ANY_CHAR, max_size=8), st.text(ANY_CHAR, max_size=8))
def test_hardware_names_prefilter_changes_no_answer(piece: str, before: str, after: str) -> None:
    """head_fields tries the hardware names only where a name's first word begins the line."""
    assert max(map(len, PT._HW_FIRST_WORDS)) <= 16
    for body in (piece, piece + after, before + piece, piece + " " + after, piece + ":" + after):
        full = PT._HW_NAME.match(body.lower().rstrip(". ")) is not None
        assert not full or body[:16].lower().startswith(PT._HW_FIRST_WORDS)
        if full:
            assert PT.head_fields(body) == (PT.HARDWARE_EXCEPTION, {})


def test_small_numbers_read_as_int_reads_them() -> None:
    for text in ("0", "7", "4095", "4096", "007", "00", "-1", "+1", " 1", "\u0661", "1_0"):
        got = PT._dim((text, "1", "2"), 0)
        try:
            want = (int(text), 1, 2)
        except ValueError:
            want = None
        assert got == want or (got is None and want is None)


@needs_json
def test_json_lines_agree_and_fall_back_per_record(generated: list[str]) -> None:
    records = _records_everywhere(generated)[:3000]
    base = SanitizerRecord.from_fields({"kind": "memory_access", "message": "Invalid"})
    odd = [dataclasses.replace(base, line=True), dataclasses.replace(base, message="é\"\\"), base]
    mixed = records[:5] + odd + records[5:]
    want = [r._json_text_py() for r in mixed]  # (json.dumps writes line=True as true, json_text as 1)
    assert rs.json_lines(mixed) == want
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rs, "_native_json", None)
        assert rs.json_lines(mixed) == want
    assert rs.json_lines([]) == []


@pytest.mark.parametrize("path", _captures()[:6] + [DATA / "h200" / "san_numba.txt"], ids=lambda p: p.name)
def test_every_way_in_reads_the_same(path: Path) -> None:
    """Lines as a list, as a stream, and as the reader's lists of lines (the banner found in any of them)."""
    raw = path.read_bytes()
    text = raw.decode("utf-8", "replace")
    want = _parse(text, PT._fold_native)
    for prefix_lines in (0, 3000):  # a banner past the first list of lines, or in it
        padded = "app output\n" * prefix_lines + text
        want = _parse(padded, PT._fold_native)
        p1 = PT.TextLogParser()
        assert (list(p1.records(iter(padded.splitlines()))), p1.summary()) == want
        data = padded.encode()
        chunks = [data[i:i + 997] for i in range(0, len(data), 997)]
        p2 = PT.TextLogParser()
        got = [r for batch in p2.record_batches(PT.iter_line_batches(chunks)) for r in batch]
        assert (got, p2.summary()) == want
