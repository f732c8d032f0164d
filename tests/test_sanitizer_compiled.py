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


@needs_json
def test_fields_under_names_built_at_run_time_read_alike(generated: list[str]) -> None:
    """The compiled writer gathers a record's values in one pass, matching the interned names by
    identity; a dict whose names are other objects (equal, not the same) is read by lookups."""
    for r in _records_everywhere(generated)[:300]:
        fields = {"".join(list(k)): v for k, v in r.__dict__.items()}
        assert any(k is not n for k, n in zip(fields, r.__dict__, strict=True))
        fields["".join(["unk", "nown"])] = 1  # a name the writer does not know
        odd = SanitizerRecord.from_fields(fields)
        assert odd.json_text() == r.json_text() == r._json_text_py()


@needs_json
def test_remembered_stack_text_follows_the_writer_given(generated: list[str]) -> None:
    """The compiled writer remembers the text of the stacks it wrote, for the stack-writing
    function it was given: another function gets its own text, and the first its own again."""
    r = next(r for r in _records_everywhere(generated) if r.host_frames)
    want = r.json_text()
    other = NATIVE_JSON(r.__dict__, lambda frames: '["x"]', rs._json_str)
    assert '"host_frames": ["x"]' in other and other.replace('["x"]', rs._jframes(r.host_frames), 1) == want
    assert r.json_text() == want == r._json_text_py()


def test_pure_switch_turns_both_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(rs.PURE_ENV, "1")
    assert PT._load_native() is None
    assert PT._native_module() is None
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


# --- the lines the compiled fold reads itself (new in nearly every record) -------------------------

ADDRESS_LINES = ["Access to 0x7f592a801fa0 is out of bounds", "Access to 0x7f59 is out of bounds.",
                 "Access at 0x10 is misaligned", "Address 0x7fe5b2800800", "Address 0x7fe5b2800800.",
                 "Address 0x", "Address 0xg", "Address 0x12x", "Access to 0x12  is   out", "Access to 0x12 is",
                 "Access to 0x12 is.", "Access to 0x12 .", "Access to 0x12 x.", "Access to 0x12 is x",
                 "Access to 0x12 is isn't", "Access to 0x" + "f" * 16 + " is out", "Access to 0x" + "f" * 17 + " is out",
                 "Address 0x" + "1" * 33, "Access to 0x12\tis out", "Access to 0x12 is out\x1f of",
                 "Access to 0x12 is out \u00e9", "Access from 0x12", "Address  0x12", "Access to 0X12", "Access to 0x12 ..",
                 "Access to 0x12 is out=", "Access to 0x12 is out\x7f", "Access to 0x12 is a.b.",
                 "Access to 0x12 is\tout", "Access to 0x12 \tis out", "Access to 0x12 is \x1cout", "Access to 0x12\x0b"]
NEAR_LINES = ["and is 1 bytes after the nearest allocation at 0x7f592a801000 of size 4,000 bytes",
              "and is 1 byte before the nearest allocation at 0x10 of size 1 byte",
              "and is inside the nearest allocation at 0x10 of size 64 bytes",
              "and is 1,,2, bytes after the nearest allocation at 0x10 of size 3,, bytes",
              "and is ,1 bytes after the nearest allocation at 0x10 of size 3 bytes",
              "and is 1bytes after the nearest allocation at 0x10 of size 3 bytes",
              "and is 1 bytes  after the nearest allocation at 0x10 of size 3 bytes",
              "and is 1 bytess after the nearest allocation at 0x10 of size 3 bytes",
              "and is 1 bytes inside the nearest allocation at 0x10 of size 3 bytes",
              "and is 123456789012345678 bytes after the nearest allocation at 0x1 of size 1 bytes",
              "and is 1234567890123456789 bytes after the nearest allocation at 0x1 of size 1 bytes",
              "and is 1 bytes after the nearest allocation at 0x1 of size " + "9" * 41 + " bytes",
              "and is 1 bytes after the nearest allocation at 0x of size 1 bytes",
              "and is 1 bytes after the nearest allocation at 0x1 of size 1 bytes and more",
              "and is 1 bytes after the nearest allocation at 0x1 of size 1 byt",
              "and is 1 bytes after the nearest allocation at 0x1 of size  1 bytes",
              "and is inside the nearest allocation at 0x10 of size 64 bytesX",
              "and is insider the nearest allocation at 0x10 of size 64 bytes",
              "and Write access at f(int *)+0x10 in a.cu:3 [4 hazards]", "and is \u0661 bytes after the nearest allocation"]
HAZARD_HEADS = ["Warning: (Warp Level Programming) Potential RAW hazard detected at __shared__ 0x604 in block (0,0,0) :",
                "Error: Potential WAW hazard detected at __shared__ 0x1 in block (1,2,3) :",
                "Warning:Potential WAR hazard detected at __global__ 0xAbC in block (1,2,3)",
                "Warning:   (Warp Level Programming)Potential RAW hazard detected at __shared__ 0x1 in block (1,2,3) x",
                "Info: Potential RAW hazard detected at __shared__ 0x1 in block (1,2,3) :",
                "warning: Potential RAW hazard detected at __shared__ 0x1 in block (1,2,3) :",
                "Warning: Potential RWW hazard detected at __shared__ 0x1 in block (1,2,3) :",
                "Warning: Potential RAW hazard detected at __sh_ared__ 0x1 in block (1,2,3) :",
                "Warning: Potential RAW hazard detected at ____ 0x1 in block (1,2,3) :",
                "Warning: Potential RAW hazard detected at __shared__ 0x in block (1,2,3) :",
                "Warning: Potential RAW hazard detected at __shared__ 0x" + "f" * 17 + " in block (1,2,3) :",
                "Warning: Potential RAW hazard detected at __shared__ 0x1 in block (1, 2,3) :",
                "Warning: Potential RAW hazard detected at __shared__ 0x1 in block (1,2,3",
                "Warning: Potential RAW hazard detected at __shared__ 0x1 in block (1,2,3) :=",
                "Warning: Potential RAW hazard detected at __shared__ 0x1 in block (1,2,3) : \u00e9",
                "Warning: Potential RAW hazard detected at __shared__ 0x1 in block (1234567890123456789,2,3) :",
                "Warning:\tPotential RAW hazard detected at __shared__ 0x1 in block (1,2,3) :",
                "Error: Race reported between Write access at f(int *)+0x10 in a.cu:3"]
HAZARD_DETAILS = ["Write Thread (129,0,0) at shared_race(int *)+0x150 in faults.cu:30",
                  "Read Thread (128,0,0) at shared_race(int *)+0x1d0 in faults.cu:31", "Current Value : 129"]


def _near_misses_alike(text: str) -> None:
    _same(text)
    _same(text, batch=3)
    _same(text.replace("=========", "==== PFX"))  # another prefix: the common-line path is off


@needs_fold
@pytest.mark.parametrize("indent", ["", "  ", "   ", "    ", "\t\t\t", " \t "])
def test_address_lines_read_alike(indent: str) -> None:
    """Every near miss of the address and nearest-allocation lines reads as classify reads it."""
    head = "========= Invalid __global__ write of size 4 bytes\n"
    text = "".join(f"{head}========= {indent}{line}\n=========\n" for line in ADDRESS_LINES + NEAR_LINES)
    records, _ = _parse(text, None)
    assert len(records) == len(ADDRESS_LINES + NEAR_LINES)
    _near_misses_alike(text)
    _near_misses_alike(text.replace("Invalid __global__", "Uninitialized __global__ memory read of size 4 bytes\n"
                                    "========= Invalid __global__"))


@needs_fold
@pytest.mark.parametrize("indent", ["", " ", "  ", "   "])
def test_hazard_heads_read_alike(indent: str) -> None:
    """Every near miss of a hazard's head (and the Thread lines after it) reads as classify reads it."""
    details = "".join(f"=========     {d}\n" for d in HAZARD_DETAILS)
    text = "".join(f"========= {indent}{head}\n{details}=========\n" for head in HAZARD_HEADS)
    _near_misses_alike(text)
    _near_misses_alike(text.replace("Write Thread", "Read Thread", 1))


def _piece(canonical: str, *misses: str) -> st.SearchStrategy[str]:
    return st.sampled_from([canonical, canonical, *misses]) | st.text(ANY_CHAR, max_size=3)


#: the shapes of those lines, piece by piece, each piece its own text or a near miss
SHAPES = [
    [_piece("Access to 0x", "Address 0x", "Access at 0x", "Access 0x"), _piece("7f59a", "", "F" * 17, "0"),
     _piece(" is ", "  is  ", " ", " .", ""), _piece("out of bounds", ".", "is", "")],
    [_piece("and is "), _piece("1,024", "inside", ",1", "1" * 19), _piece(" bytes ", " byte ", " bytes", ""),
     _piece("after", "before", "inside"), _piece(" the nearest allocation at 0x"), _piece("10", "", "g"),
     _piece(" of size "), _piece("4,000", "9" * 41, ""), _piece(" bytes", " byte", "")],
    [_piece("Warning:", "Error:", "Info:"), _piece(" ", "", "  \t"), _piece("(Warp Level Programming) ", ""),
     _piece("Potential RAW", "Potential WAR", "Potential WAW", "Potential XAW"), _piece(" hazard detected at "),
     _piece("__shared__", "__a_b__", "____"), _piece(" 0x604", " 0x", " 0x" + "1" * 17),
     _piece(" in block (0,0,0)", " in block (1, 2,3)", " in block (9" + "9" * 18 + ",0,0)"), _piece(" :", "", " : =")],
    [_piece("by thread "), _piece("(1,2,3)", "(1,2)", "(,1,2)"), _piece(" in block "), _piece("(4,5,6)", "(4,5,6) x")],
]


@needs_fold
@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from(SHAPES), st.sampled_from(["", " ", "   ", "    ", "\t\t\t"]))
def test_new_lines_read_alike_property(data: st.DataObject, shape: list[st.SearchStrategy[str]], indent: str) -> None:
    """The lines the compiled fold reads itself, built from their pieces and near misses of each:
    both routes make the same records."""
    line = "".join(data.draw(piece) for piece in shape)
    head = "========= Invalid __global__ write of size 4 bytes\n"
    text = f"{head}========= {indent}{line}\n=========     {HAZARD_DETAILS[0]}\n========= {indent}{line}\n=========\n"
    _same(text)


@needs_fold
def test_new_lines_are_read_without_classify(monkeypatch: pytest.MonkeyPatch) -> None:
    """The common shapes do take the compiled way (so the tests above compare two routes), and
    only the lines that repeat are remembered."""
    seen: list[str] = []
    classify = PT.TextLogParser._classify

    def counting(self: object, raw: str) -> tuple[object, ...]:
        seen.append(raw)
        return classify(self, raw)  # type: ignore[arg-type]

    monkeypatch.setattr(PT.TextLogParser, "_classify", counting)
    lines = [ADDRESS_LINES[0], ADDRESS_LINES[1], ADDRESS_LINES[3], NEAR_LINES[0], NEAR_LINES[1], NEAR_LINES[2],
             "by thread (1,2,3) in block (4,5,6)"]
    text = "".join(f"========= Invalid __global__ write of size 4 bytes\n=========     {line}\n=========\n"
                   for line in lines)
    text += "".join(f"========= {h}\n=========     {HAZARD_DETAILS[0]}\n=========\n" for h in HAZARD_HEADS[:3])
    parser = PT.TextLogParser()
    records = list(parser.records(text.splitlines()))
    assert len(records) == len(lines) + 3
    assert sorted(seen) == sorted({"========= Invalid __global__ write of size 4 bytes", "=========",
                                   f"=========     {HAZARD_DETAILS[0]}"})  # each once: remembered
    assert records[-1].hazard == "WAR" and records[-1].space == "__global__" and records[-1].address == 0xABC
