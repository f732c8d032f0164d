"""The streaming parser gives what the parser before it gave (issue 16: "nothing recorded changes").

Two references, both from commit eed7246 (tests/data/sanitizer/PROVENANCE.md):
- ``golden_findings.json``: for every committed capture, the SHA-256 of what ``sanitize parse
  --json`` printed and of the findings, the log summary, one readable line per finding;
- ``oracle/parse_text_v1.py``: that parser itself, compared record by record with the new one on
  generated logs and frames small enough for its backtracking expressions.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from faulthunt.sanitizer import frames
from faulthunt.sanitizer.parse_text import parse_text_log
from faulthunt.sanitizer.parse_xml import looks_like_xml, parse_xml_stream
from faulthunt.sanitizer.reduce import reduce_records

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data" / "sanitizer"
GOLDEN = json.loads((DATA / "golden_findings.json").read_text())
KEEP = ("tool", "kind", "error", "kernel", "file", "line", "count", "first_index")


def _load_oracle():
    spec = importlib.util.spec_from_file_location("sanitizer_text_oracle_v1", DATA / "oracle" / "parse_text_v1.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


OLD = _load_oracle()


@pytest.mark.parametrize("rel", sorted(GOLDEN))
def test_every_capture_parses_and_reduces_as_before(rel):
    want = GOLDEN[rel]
    text = (ROOT / rel).read_bytes().decode("utf-8", "replace")
    if looks_like_xml(text):
        records, intact = parse_xml_stream(text)
        summary = {"xml": True, "intact": intact}
    else:
        log = parse_text_log(text)
        records, summary = list(log.records), log.to_json()
    printed = "".join(r.json_text() + "\n" for r in records)
    assert printed == "".join(json.dumps(r.to_json()) + "\n" for r in records)
    findings = [f.to_json() for f in reduce_records(records)]
    assert summary == want["summary"]
    assert len(records) == want["records"]
    assert [" | ".join(str(f[k]) for k in KEEP) for f in findings] == want["findings"]
    assert hashlib.sha256(printed.encode()).hexdigest() == want["records_sha256"]
    assert hashlib.sha256(json.dumps(findings, sort_keys=True).encode()).hexdigest() == want["findings_sha256"]


# --- generated logs against the old parser -------------------------------------------------------

def _capture_lines() -> list[str]:
    lines: set[str] = set()
    for rel in GOLDEN:
        if not rel.endswith(".xml"):
            lines.update((ROOT / rel).read_text(errors="replace").splitlines()[:400])
    return sorted(lines)


#: lines of every record shape (the captures plus the documented heads), and edits to them
LINES = _capture_lines() + [
    "CSAN> COMPUTE-SANITIZER", "=====  1 failed =====", "========= Illegal instruction",
    "=========     at 0x10 in k",
    "========= Deadlock detected in x called by threads starting at (0,0,0) in block (1,1,1), z at k+0x10 in a.cu:3",
    "========= Barrier error detected. Divergent.", "=========     in /lib/x.so",
    "=========         Host Frame:f [0x1]",
    "=========     Read Thread (1,2,3) at k+0x1 in f.cu:2",
    "=========     Uninitialized access at 0x10 on access by cudaMemcpy",
    "========= Host API memory access error at host access to 0x10 of size 4 bytes",
    "=========     and Write access at k in f.cu:3 [12 hazards]",
    "========= Malloc/Free error encountered :  Double free ",
    "========= Leaked 1,024 bytes at 0x10 on the device heap",
    "    =========     Access to 0x10 is out of bounds.", "2024-01-01T00:00:00Z ========= ERROR SUMMARY: 3 errors",
    "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)",
]
EDITS = [" ", "  ", ".", ":", "0x1", "[", "]", " in ", "(", ")", ",", "\t", "1", "é", "is ", " at ", "+0x2"]


@st.composite
def edited_line(draw):
    line = draw(st.sampled_from(LINES))
    if draw(st.booleans()):
        pos = draw(st.integers(0, len(line)))
        if draw(st.booleans()):
            line = line[:pos] + draw(st.sampled_from(EDITS)) + line[pos:]
        else:
            line = line[:pos] + line[pos + 1:]
    return line


def _same(text: str) -> None:
    try:
        old = OLD.parse_text_log(text)
    except ValueError:  # the old parser's int() of a huge number (issue 18); not in these inputs
        assume(False)
    new = parse_text_log(text)
    assert [(r.to_json(), r.lines) for r in new.records] == [(r.to_json(), r.lines) for r in old.records]
    assert new.to_json() == old.to_json()


@settings(max_examples=300, deadline=None)
@given(st.lists(edited_line(), min_size=1, max_size=40))
def test_generated_logs_parse_as_with_the_old_parser(lines):
    _same("\n".join(lines))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(LINES), min_size=1, max_size=80), st.sampled_from(["\n", "\r\n", "\r"]))
def test_real_lines_in_any_order_parse_as_before(lines, end):
    _same(end.join(lines))


FRAME_TOKENS = ["in ", " in ", " ", "  ", "\t", ":", ":12", "1", "0x", "0x1f", "[", "]", "[0x", "[0x2a]", "a",
                "main", "/", "x.py", ".so", "+", "+0x", "(", ")", " (", " : 0x", " + 0x", ") [0x", "_", ".",
                "é", "\u00a0", "in", "f.cu:3"]


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(FRAME_TOKENS), min_size=1, max_size=14))
def test_frames_and_locations_read_as_with_the_old_expressions(tokens):
    text = "".join(tokens)
    for name in ("parse_location", "parse_device_frame", "parse_host_frame"):
        assert getattr(frames, name)(text) == getattr(OLD, name)(text), (name, text)
