"""Hypothesis fuzzing of the sanitizer parsers: no input text makes them raise (issue 18).

Two sources of input: any text hypothesis makes (lone surrogates included: ``parse_xml`` raised
UnicodeEncodeError on 6,778 of 110,000 such inputs), and real H200 captures mutated by a byte
string hypothesis makes (tokens such as 5,000-digit numbers, surrogates, markup and prefixes
spliced in, spans cut and repeated), which reach the parsers' deep paths that random text never
does. The quick tests run in every suite; the slow one runs 100,000 examples (``-m slow``; 0.75 ms
of CPU an example on the busy 2-core development machine, about 75 s).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from faulthunt.records.sanitizer import KINDS
from faulthunt.sanitizer import parse_text_log, parse_xml
from faulthunt.sanitizer.reduce import reduce_records

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200"
OLD = DATA / "sanitizer" / "text"
#: real logs of every tool and era, cut short (each example parses one, mutated)
TEXTS = [(H200 / "san_memcheck_oob1.txt").read_text(), (H200 / "san_racecheck_shared.txt").read_text()[:1500],
         (H200 / "san_synccheck_div.txt").read_text()[:1200], (H200 / "san_numba.txt").read_text()[:2000],
         (OLD / "docs_2026_4_samples.txt").read_text(), (OLD / "legacy_cuda_memcheck.txt").read_text(),
         (OLD / "cs2022_two_line_frames.txt").read_text(), (OLD / "ci_timestamped_oob1.txt").read_text()]


def _first_record(name: str) -> str:
    xml = (H200 / name).read_text()
    return xml[: xml.index("</record>") + len("</record>")] + "</ComputeSanitizerOutput>"


#: the first record of real XML files, closed
XMLS = [_first_record(n) for n in ("xml_memcheck_oob1.xml", "xml_racecheck_sharedrace.xml",
                                   "xml_memcheck_leak.xml", "xml_memcheck_numba.xml")]

#: every code point, lone surrogates included (hypothesis leaves them out by default)
ANY_CHAR = st.characters(exclude_categories=())

TOKENS = ["\ud800", "\udfff", "9" * 5000, "f" * 5000, " " * 3000, "\t" * 100, "0x", "<record>",
          "</record>", "<what>", "<size>", "</size>", "&amp;", "&#0;", "\x00", "]]>", "<![CDATA[",
          "=========     ", "========= ", "\n", "\r", "Host Frame: ", " in ", "[0x1]", ":1", "(", ")",
          "by thread (", "Invalid __global__ read of size ", "<!DOCTYPE x [<!ENTITY a 'b'>]>"]


def mutate(base: str, seed: bytes) -> str:
    """``base`` edited by ``seed``, three bytes an edit: splice a token, cut, insert a surrogate,
    repeat a span, overwrite a character."""
    s = base
    for i in range(0, len(seed) - 2, 3):
        op, a, b = seed[i] % 5, seed[i + 1], seed[i + 2]
        pos = a * len(s) // 256
        if op == 0:
            s = s[:pos] + TOKENS[b % len(TOKENS)] + s[pos:]
        elif op == 1:
            s = s[:pos] + s[pos + b:]
        elif op == 2:
            s = s[:pos] + chr(0xD800 + b * 8) + s[pos:]
        elif op == 3:
            s = s[:pos] + s[pos:pos + b] * 3 + s[pos:]
        else:
            s = s[:pos] + chr(b) + s[pos + 1:]
    return s


def check_text(text: str, *, thorough: bool = True) -> None:
    log = parse_text_log(text)
    for r in log.records:
        assert r.kind in KINDS
        assert r.thread is None or len(r.thread) == 3
        if thorough:
            assert r.json_text() == json.dumps(r.to_json())
    json.dumps(log.to_json())
    if thorough:
        for f in reduce_records(log.records):
            json.dumps(f.to_json())


def check_xml(text: str, *, thorough: bool = True) -> None:
    for r in parse_xml(text):
        assert r.kind
        if thorough:
            assert r.json_text() == json.dumps(r.to_json())


def fuzz_once(text: str, seed: bytes, *, thorough: bool = True) -> None:
    check_text(text, thorough=thorough)
    pick = seed[0] if seed else 0
    check_text(mutate(TEXTS[pick % len(TEXTS)], seed), thorough=thorough)
    if text.startswith("<"):
        check_xml(text, thorough=thorough)
    check_xml(mutate(XMLS[pick % len(XMLS)], seed), thorough=thorough)


_QUICK = settings(max_examples=300, deadline=None)


@_QUICK
@given(st.text(ANY_CHAR), st.binary(max_size=30))
def test_parsers_never_raise_quick(text, seed):
    fuzz_once(text, seed)


@_QUICK
@given(st.text(ANY_CHAR, max_size=50), st.binary(max_size=30))
def test_xml_with_lone_surrogates_quick(text, seed):
    check_xml("<ComputeSanitizerOutput><record><kind>Precise</kind><what><text>" + text
              + "</text></what></record></ComputeSanitizerOutput>")
    check_xml(mutate(XMLS[0], b"\x02" + seed))


def utf16_text(data: bytes) -> str:
    """Any BMP text, lone surrogates included (about 3% of its characters), from bytes: a cheap
    source for 100,000 examples (hypothesis makes bytes faster than text)."""
    return data[: len(data) & ~1].decode("utf-16-le", "surrogatepass")


@pytest.mark.slow
@settings(max_examples=100_000, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=224))
def test_parsers_never_raise_100k(data):
    # one byte string (cheaper for hypothesis than two): the edits, then the text; the parsers
    # only (the quick tests check the JSON and the reduction of what they return)
    fuzz_once(utf16_text(data[24:]), data[:24], thorough=False)
