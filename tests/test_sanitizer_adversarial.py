"""Hostile and huge inputs to the sanitizer parsers: linear time, bounded memory, no exception.

Issue 16: ``sanitize parse`` of a 40 KB log with long runs of spaces in host frames took 40-47 s
(the host-frame expression backtracked: 4x per doubling). Every input family here is 200 KB or
more, five times that line, so a quadratic path would take many minutes and an exponential one
forever; the parsers take milliseconds. The CPU-time limits are generous on purpose (they only catch a
catastrophe, never a slow machine), and a pytest-timeout backstop keeps a regression from hanging
the suite. Issue 18: numbers of thousands of digits and lone surrogates raised; they do not.
"""

from __future__ import annotations

import json
import re
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from faulthunt.cli import main
from faulthunt.records.sanitizer import MEMORY_ACCESS, SanitizerRecord
from faulthunt.sanitizer import demangle, frames, parse_text_log, parse_xml
from faulthunt.sanitizer.parse_text import MAX_LINE, MAX_RECORD_LINES, TextLogParser, iter_lines
from faulthunt.sanitizer.parse_xml import parse_xml_stream
from faulthunt.sanitizer.reduce import EXACT_POINTS, Reducer, _Points

sys.path.insert(0, str(Path(__file__).parent.parent / "scripts"))
from benchrows.sanitizer import make_adversarial_log, make_log

N = 200_000
#: seconds: linear code takes well under a second for any of these; quadratic code, hours
LIMIT = 20.0

#: one long stretch of each shape that made an expression backtrack, or that a parser must survive
FAMILIES = {
    "spaces": " " * N,
    "spaces then text": " " * N + "x",
    "tabs and spaces": " \t" * (N // 2) + "y",
    "digits": "1" * N,
    "digits then junk": "9" * N + "z",
    "hex": "f" * N,
    "colons": ":" * N,
    "colon digits": ":1" * (N // 2),
    " in ": " in " * (N // 4),
    "in file": " in a" * (N // 5) + ":1" * 10 + "x",
    ":0x1 in ": ":0x1 in " * (N // 8),
    "+0x1 in ": "+0x1 in " * (N // 8) + ":1",
    "[0x": "[0x" * (N // 3),
    "brackets": "[" * (N // 2) + "]" * (N // 2),
    "parens": "(" * (N // 2) + ")" * (N // 2),
    " (": " (" * (N // 2) + " : 0x1)",
    " + 0x": "a (" + " + 0x1" * (N // 6) + ") [0x1]",
    "[abi:": "k" + "[abi:" * (N // 5),
    " at ": " at x" * (N // 5) + ",",
    "dots": "." * N,
    "no anchor": "abcdefghij" * (N // 10),
    "equals": "=" * N,
    "is is": " is" * (N // 3),
}


# CPU seconds of this process, not wall: the other processes of a loaded machine do not count
# against a limit that is there to catch this code's own catastrophe
def timed(fn, *args):
    t0 = time.process_time()
    fn(*args)
    return time.process_time() - t0


@pytest.mark.timeout(600)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_frames_and_locations_are_linear(family):
    text = FAMILIES[family]
    for fn in (frames.parse_location, frames.parse_device_frame, frames.parse_host_frame,
               demangle.short_name, demangle.strip_params):
        assert timed(fn, text) < LIMIT, fn.__name__
        assert timed(fn, "main" + text + " [0x1] in faults") < LIMIT, fn.__name__


#: where a long stretch can sit in a log: in each kind of line the parser reads
PLACES = [
    "========= {x}",
    "========= Invalid __global__ read of size 4 bytes{x}",
    "=========     at kernel{x}+0x10 in f.cu:3",
    "=========     by thread (1,2,3) in block (4,5,6){x}",
    "=========     Access to 0x10 is{x}out of bounds",
    "=========     and is 1 bytes after the nearest allocation at 0x10 of size 4 bytes{x}",
    "=========     and Write access at k{x}[3 hazards]",
    "=========     Saved host backtrace up to driver entry point at {x}.",
    "=========         Host Frame: main{x}[0x99d3] in faults",
    "=========         Host Frame:{x}",
    "=========         Device Frame: k{x}:0x10 in f.cu:3",
    "=========     Read Thread (1,2,3) at {x}",
    "========= Error: Race reported between Read access at {x}",
    "========= Malloc/Free error encountered : {x}",
    "========= Barrier error detected.{x}.",
    "========= Deadlock detected in {x} called by threads starting at (0,0,0) in block (0,0,0){x} at k",
    "========= Program hit {x} (error 1) on CUDA API call to cudaFree.",
    "{x} COMPUTE-SANITIZER",
]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_whole_logs_with_hostile_lines_are_linear(family):
    head = "========= COMPUTE-SANITIZER\n========= Invalid __global__ read of size 4 bytes\n"
    text = head + "\n".join(p.format(x=FAMILIES[family]) for p in PLACES) + "\n========= \n"
    assert timed(parse_text_log, text) < LIMIT


@pytest.mark.timeout(300)
def test_issue_16_log_with_long_space_runs_in_host_frames():
    # the issue's case, ten times longer: 400 KB of host frames padded with spaces
    log = make_adversarial_log(400_000)
    t0 = time.process_time()
    parsed = parse_text_log(log)
    assert time.process_time() - t0 < LIMIT
    assert parsed.records and all(r.host_frames for r in parsed.records)
    assert parsed.records[0].host_frames[0].func == "main"


#: the expressions the parsers search with (``search``, ``finditer``, ``sub``); the others are only
#: matched at a position, so only matching them is their real use
SEARCHED = {"_L_COLON_PC", "_L_PLUS_PC", "_TAIL_START", "_BRACKET", "_H_DEADLOCK_MID", "_FIRST_BREAK",
            "_CI_STAMP", "_SPACE", "_CUDA_API"}


@pytest.mark.timeout(300)
def test_every_expression_of_the_parsers_is_linear_on_every_family():
    # a guard for expressions added later: each compiled pattern, used as the code uses it, on each
    # family (100 KB), stays far from a quadratic blow-up
    import faulthunt.sanitizer.reduce as reduce_mod

    modules = [frames, sys.modules["faulthunt.sanitizer.parse_text"], sys.modules["faulthunt.sanitizer.parse_xml"],
               demangle, reduce_mod]
    patterns = [(k, v) for m in modules for k, v in vars(m).items() if isinstance(v, re.Pattern)]
    assert len(patterns) > 30 and SEARCHED <= {k for k, _ in patterns}
    t0 = time.process_time()
    for text in FAMILIES.values():
        text = text[: N // 2]
        for name, rx in patterns:
            for s in (text, "a" + text, "0x" + text):
                rx.match(s)
                rx.match(s, 1)
                rx.fullmatch(s)
                if name in SEARCHED:
                    rx.search(s)
                    list(rx.finditer(s))
    assert time.process_time() - t0 < 3 * LIMIT


@pytest.mark.timeout(300)
def test_deeply_nested_xml_ends_cleanly():
    deep = "<ComputeSanitizerOutput>" + "<record>" * 100_000 + "</record>" * 100_000 + "</ComputeSanitizerOutput>"
    t0 = time.process_time()
    records, complete = parse_xml_stream(deep)
    assert time.process_time() - t0 < LIMIT
    assert records == [] and not complete  # deeper than any sanitizer file: the parse stops there
    wide = "<ComputeSanitizerOutput>" + "<record><kind>Precise</kind></record>" * 20_000 + "</ComputeSanitizerOutput>"
    assert len(parse_xml(wide)) == 20_000


# --- issue 18: huge numbers, lone surrogates ---------------------------------------------------

BIG = "9" * 5000


@pytest.mark.parametrize("line", [
    f"========= Invalid __global__ read of size {BIG} bytes",
    f"========= Leaked {BIG} bytes at 0x{'f' * 5000}",
    f"========= ERROR SUMMARY: {BIG} errors",
    f"========= LEAK SUMMARY: {BIG} bytes leaked in {BIG} allocations",
    f"========= RACECHECK SUMMARY: {BIG} hazards displayed ({BIG} errors, 0 warnings)",
    f"========= Program hit cudaErrorX (error {BIG}) due to \"x\" on CUDA API call to cudaFree.",
    f"========= Error: Potential RAW hazard detected at __shared__ 0x{BIG} in block ({BIG},0,0) :",
    f"========= Deadlock detected in x called by threads starting at ({BIG},0,0) in block (0,0,0)",
])
def test_huge_numbers_in_heads_do_not_raise(line):
    log = parse_text_log("========= COMPUTE-SANITIZER\n" + line + "\n========= \n")
    for r in log.records:
        json.dumps(r.to_json())
        assert r.size is None or r.size < 10**40


@pytest.mark.parametrize("detail", [
    f"by thread ({BIG},0,0) in block (0,0,0)",
    f"by thread (0,0,0) in block (0,{BIG},0)",
    f"Access to 0x{'f' * 5000} is out of bounds",
    f"and is {BIG} bytes after the nearest allocation at 0x10 of size {BIG} bytes",
    f"and Write access at k in f.cu:3 [{BIG} hazards]",
    f"at kernel+0x{'a' * 5000} in f.cu:{BIG}",
    f"Read Thread ({BIG},0,0) at k+0x1 in f.cu:2",
    f"    Host Frame: main [0x{'b' * 5000}] in faults",
    f"    Host Frame: main in x.py:{BIG}",
    f"    Device Frame: f.cu:{BIG}:k (k : 0x1)",
])
def test_huge_numbers_in_details_do_not_raise(detail):
    log = parse_text_log(f"========= Invalid __global__ read of size 4 bytes\n=========     {detail}\n========= \n")
    (r,) = log.records
    assert r.thread is None or max(r.thread) < 10**40
    assert r.json_text() == json.dumps(r.to_json())


def test_thread_with_a_huge_index_is_kept_as_an_unread_line():
    line = f"by thread ({BIG},0,0) in block (0,0,0)"
    (r,) = parse_text_log(f"========= Invalid __global__ read of size 4 bytes\n=========     {line}\n").records
    assert r.thread is None and r.extra == (line,)


def test_xml_lone_surrogates_and_huge_numbers():
    doc = ("<ComputeSanitizerOutput><record><kind>Precise</kind><who><threadIdx><x>" + BIG + "</x><y>0</y>"
           "<z>0</z></threadIdx></who><what><text>bad \ud800 text \udfff</text><size>" + BIG + "</size>"
           "<address>0x" + "f" * 5000 + "</address></what><where><func>k\udc80</func></where></record>"
           "</ComputeSanitizerOutput>")
    records, complete = parse_xml_stream(doc)
    assert complete and len(records) == 1
    r = records[0]
    assert r.message == "bad ? text ?" and r.function == "k?"
    assert r.size is None and r.address is None and r.thread is None
    json.dumps(r.to_json())


# --- streaming and bounded memory ----------------------------------------------------------------

def test_one_enormous_line_is_cut_and_the_rest_still_read():
    chunks = [b"x" * (1 << 20)] * 3 + [b"tail\n========= Invalid __global__ read of size 4 bytes\n"]
    lines = list(iter_lines(chunks))
    assert [len(line) for line in lines] == [MAX_LINE, 49]  # the rest of the long line is skipped
    assert len(parse_text_log("\n".join(lines)).records) == 1


def test_a_record_of_a_million_lines_keeps_a_bounded_number():
    lines = ["========= Invalid __global__ read of size 4 bytes"] + ["=========     junk line"] * 5000
    (r,) = list(TextLogParser().records(lines))
    assert len(r.lines) == MAX_RECORD_LINES
    assert r.extra[-1] == f"[faulthunt: {5001 - MAX_RECORD_LINES} further line(s) of this record not kept]"


def test_records_waiting_for_the_logs_tool_are_bounded_and_in_order():
    hw = ["========= Illegal instruction", "=========     at k+0x10 in f.cu:3", "========= "]
    oob = ["========= Invalid __global__ read of size 4 bytes", "=========     at k+0x10 in f.cu:3", "========= "]
    parser = TextLogParser()
    seen = []
    waiting = []
    for r in parser.records(hw * 1000 + oob):
        seen.append(r)
        waiting.append(len(parser._pending))
    assert len(seen) == 1001 and max(waiting) < 300
    assert [r.index for r in seen] == sorted(r.index for r in seen)
    # the first hardware exceptions wait until memcheck records name the tool
    mixed = list(TextLogParser().records(hw + oob + hw))
    assert [r.tool for r in mixed] == ["memcheck"] * 3


def _generated_log(tmp_path: Path, n: int) -> Path:
    path = tmp_path / f"memcheck{n}.log"
    make_log(path, n)
    return path


def test_memory_is_bounded_by_findings_not_records(tmp_path, capsys):
    path = _generated_log(tmp_path, 20_000)
    tracemalloc.start()
    try:
        rc = main(["sanitize", "parse", str(path)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rc == 1 and "offending kernel" in capsys.readouterr().out
    # the records list alone would be ~80 MB here; streaming holds a chunk, a record, the caches
    assert peak < 24 * 2**20, peak


def test_a_sparse_file_streams_in_bounded_memory(tmp_path, capsys):
    sparse = tmp_path / "sparse.log"
    with open(sparse, "wb") as fh:
        fh.truncate(64 * 2**20)  # 64 MiB of NUL bytes, no line break (the 1 GB case of issue 16, smaller)
    tracemalloc.start()
    try:
        rc = main(["sanitize", "parse", str(sparse), "--json"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out = capsys.readouterr()
    assert rc == 0 and out.out == "" and "looks binary" in out.err
    assert peak < 16 * 2**20, peak


def test_distinct_points_past_the_bound_are_estimated_in_fixed_memory():
    pts = _Points()
    n = EXACT_POINTS + 50_000
    for i in range(n):
        pts.add((i % 1024, i // 1024, 0))
    rng = pts.range()
    assert not rng.exact and abs(rng.distinct - n) < 0.03 * n
    assert rng.lo == (0, 0, 0) and rng.hi == (1023, (n - 1) // 1024, 0)
    assert pts.points == set() and len(pts.bits) == 2**17
    assert rng.render().endswith(f"[~{rng.distinct}]") and rng.to_json()["estimated"] is True


def test_reducer_counts_past_the_bound():
    red = Reducer()
    base = {"kind": MEMORY_ACCESS, "message": "Invalid __global__ read of size 4 bytes", "tool": "memcheck",
            "kernel": "k", "function": "k", "file": "f.cu", "line": 3, "space": "__global__", "access": "read",
            "size": 4}
    n = EXACT_POINTS + 10_000
    for i in range(n):
        red.add(SanitizerRecord.from_fields(base | {"block": (i, 0, 0), "thread": (i % 32, 0, 0), "index": i}))
    (f,) = red.findings()
    assert f.count == n and f.threads.exact and f.threads.distinct == 32
    assert not f.blocks.exact and f.blocks.hi == (n - 1, 0, 0)


def test_json_output_of_long_records_streams_in_bounded_memory(tmp_path, capsys):
    log = tmp_path / "spaces.log"
    log.write_text(make_adversarial_log(8_000_000))  # 266 records of 40 KB host frames
    tracemalloc.start()
    try:
        rc = main(["sanitize", "parse", str(log), "--json"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rc == 0 and len(capsys.readouterr().out.splitlines()) == log.read_text().count("Invalid __global__")
    assert peak < 24 * 2**20, peak
