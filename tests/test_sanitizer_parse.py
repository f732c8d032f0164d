"""compute-sanitizer text and XML parsers, on the real H200 captures and the documented older formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.records.sanitizer import KINDS
from faulthunt.sanitizer import parse_text, parse_text_log, parse_xml
from faulthunt.sanitizer.parse_text import (
    TextLogParser, iter_lines, parse_device_frame, parse_host_frame, parse_location,
)
from faulthunt.sanitizer.parse_xml import parse_xml_stream

H200 = Path(__file__).parent / "data" / "h200"
OLD = Path(__file__).parent / "data" / "sanitizer" / "text"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


# --- real captures (compute-sanitizer 2025.3.1 on the H200; tests/data/h200/PROVENANCE.md) -------

# file, tool, records, kinds of the first two, kernel of the first, file:line, first address,
# thread, block, ERROR SUMMARY, not printed
REAL_TEXT = [
    ("san_memcheck_oob1.txt", "memcheck", 2, ["memory_access", "api_error"],
     "max_reduce_off_by_one(const float *, float *, int)", "faults.cu", 18, 0x7F592A801FA0,
     (232, 0, 0), (3, 0, 0), 2, 0),
    ("san_memcheck_wild.txt", "memcheck", 2, ["memory_access", "api_error"],
     "wild_write(int *, long long)", "faults.cu", 20, 0x7FDFFC800000, (0, 0, 0), (0, 0, 0), 2, 0),
    ("san_memcheck_readpast.txt", "memcheck", 9, ["memory_access", "memory_access"],
     "read_past_end(const int *, int *, int)", "faults.cu", 24, 0x7FE4C4800FA0, (224, 0, 0), (3, 0, 0), 9, 0),
    ("san_memcheck_uaf.txt", "memcheck", 20, ["memory_access", "memory_access"],
     "scale(float *, int, float)", "faults.cu", 26, 0x7F2656800800, (0, 0, 0), (2, 0, 0), 1001, 981),
    ("san_memcheck_streamrace.txt", "memcheck", 20, ["memory_access", "memory_access"],
     "scale(float *, int, float)", "faults.cu", 26, 0x48EA000800, (0, 0, 0), (2, 0, 0), 1001, 981),
    ("san_memcheck_misaligned.txt", "memcheck", 20, ["memory_access", "memory_access"],
     "misaligned_write(char *)", "faults.cu", 21, 0x7F116A800001, (0, 0, 0), (0, 0, 0), 33, 13),
    ("san_memcheck_prefix.txt", "memcheck", 2, ["memory_access", "api_error"],
     "max_reduce_off_by_one(const float *, float *, int)", "faults.cu", 18, 0x7FC9D6801FA0,
     (232, 0, 0), (3, 0, 0), 2, 0),
    ("san_initcheck_uninit.txt", "initcheck", 20, ["uninitialized_read", "uninitialized_read"],
     "read_uninit(const int *, int *, int)", "faults.cu", 27, 0x7FE5B2800800, (0, 0, 0), (2, 0, 0), 1000, 980),
    ("san_synccheck_div.txt", "synccheck", 16, ["sync_error", "sync_error"],
     "divergent_sync(int *)", "faults.cu", 34, None, (0, 0, 0), (0, 0, 0), 16, 0),
    ("san_racecheck_shared.txt", "racecheck", 20, ["race", "race"],
     "shared_race(int *)", "faults.cu", 30, 0x604, (129, 0, 0), (0, 0, 0), None, 0),
    ("san_racecheck_analysis.txt", "racecheck", 1, ["race"],
     "shared_race(int *)", "faults.cu", 30, None, None, None, None, 0),
    ("san_memcheck_leak.txt", "memcheck", 2, ["leak", "leak"], None, None, None, 0x7FB7FC800000,
     None, None, 2, 0),
    ("san_memcheck_apierror.txt", "memcheck", 2, ["api_error", "api_error"], None, None, None, None,
     None, None, 2, 0),
    ("san_numba.txt", "memcheck", 2, ["memory_access", "api_error"],
     "__main__::max_reduce[abi:v1,cw51cXTLSUwv1sDUaKthqaNgoKmjgMVuW1AiA8rAEg2UjxRKtuAI0FEA2gSVRE8cSMKQdIgkgJq2YBJIfrWtVofFgLqVAjQm1YGSQJ5xrSYA]"
     "(Array<float, (int)1, C, mutable, aligned>, Array<float, (int)1, C, mutable, aligned>)",
     "numba_oob.py", 10, 0x7F7292801FA0, (232, 0, 0), (3, 0, 0), 2, 0),
]


@pytest.mark.parametrize("name,tool,n,kinds,kernel,file,line,addr,thread,block,summary,not_printed", REAL_TEXT,
                         ids=[r[0] for r in REAL_TEXT])
def test_real_text_captures(name, tool, n, kinds, kernel, file, line, addr, thread, block, summary, not_printed):
    log = parse_text_log(read(H200 / name))
    recs = log.records
    assert len(recs) == n
    assert [r.kind for r in recs[: len(kinds)]] == kinds
    assert log.tool == tool and recs[0].tool == tool
    first = recs[0]
    assert first.kernel == kernel
    assert (first.file, first.line) == (file, line)
    assert first.address == addr
    assert first.thread == thread and first.block == block
    assert log.error_summary == summary
    assert log.not_printed == not_printed
    assert not log.truncated and log.banners == 1


def test_oob1_record_in_full():
    r = parse_text(read(H200 / "san_memcheck_oob1.txt"))[0]
    assert (r.space, r.access, r.size, r.problem, r.pc) == ("__global__", "write", 4, "out of bounds", 0x120)
    # "1 bytes after the nearest allocation at 0x7f592a801000 of size 4,000 bytes"
    assert (r.alloc_base, r.alloc_size, r.alloc_relation, r.alloc_distance) == (0x7F592A801000, 4000, "after", 1)
    assert r.host_stack_at == "kernel launch time"
    assert [f.render() for f in r.host_frames] == ["main [0x99d3] in faults"]
    api = parse_text(read(H200 / "san_memcheck_oob1.txt"))[1]
    assert (api.error, api.error_code, api.api) == ("cudaErrorLaunchFailure", 719, "cudaDeviceSynchronize")
    assert api.host_stack_at == "error"


def test_stream_ordered_race_problem_text():
    r = parse_text(read(H200 / "san_memcheck_streamrace.txt"))[0]
    assert r.problem == "potentially accessed before it is allocated"
    assert r.alloc_relation == "before" and r.alloc_distance == 139_779_518_232_576


def test_numba_python_host_frames():
    recs = parse_text(read(H200 / "san_numba.txt"))
    launch = recs[0].host_frames
    assert [(f.func, f.file, f.line) for f in launch] == [("main", "numba_oob.py", 15)]
    assert launch[0].is_python
    api = recs[1]
    assert api.error == "CUDA_ERROR_LAUNCH_FAILED" and api.api == "cuCtxSynchronize"
    # native frames with no function name, then the Python frames last
    assert api.host_frames[0].func is None and api.host_frames[0].module == "cydriver.cpython-312-x86_64-linux-gnu.so"
    assert [f.render() for f in api.host_frames if f.is_python] == [
        "safe_cuda_api_call in driver.py:324", "synchronize in driver.py:1283", "synchronize in api.py:292",
        "main in numba_oob.py:16"]


def test_racecheck_hazard_and_analysis():
    hz = parse_text(read(H200 / "san_racecheck_shared.txt"))[0]
    assert (hz.severity, hz.hazard, hz.space, hz.access) == ("Warning", "RAW", "__shared__", "write")
    assert hz.race_other == "Read Thread (128,0,0) at shared_race(int *)+0x1d0 in faults.cu:31"
    assert "Current Value : 129" in hz.extra
    an = parse_text(read(H200 / "san_racecheck_analysis.txt"))[0]
    assert (an.severity, an.access, an.hazards) == ("Error", "write", 1024)
    assert an.race_other == "Read access at shared_race(int *)+0x1d0 in faults.cu:31"
    log = parse_text_log(read(H200 / "san_racecheck_shared.txt"))
    assert log.racecheck_summary == (20, 33, 992)


def test_leak_with_thousands_separators_and_summary():
    log = parse_text_log(read(H200 / "san_memcheck_leak.txt"))
    assert [(r.size, r.address) for r in log.records] == [(12345, 0x7FB7FC800000), (4096, 0x7FB7FC803200)]
    assert log.leak_summary == (16441, 2)
    # "Host Frame: cudaError cudaMalloc<int>(int**, unsigned long) [0xcb0b] in faults"
    f = log.records[0].host_frames[1]
    assert (f.func, f.pc, f.module) == ("cudaError cudaMalloc<int>(int**, unsigned long)", 0xCB0B, "faults")


def test_clean_and_killed_runs_have_no_records():
    ok = parse_text_log(read(H200 / "san_memcheck_ok.txt"))
    assert ok.records == () and ok.error_summary == 0
    killed = parse_text_log(read(H200 / "san_killed.txt"))
    assert killed.records == () and killed.error_summary is None and killed.banners == 1


def test_target_processes_all_log():
    log = parse_text_log(read(H200 / "san_memcheck_targetall.txt"))
    assert [r.kind for r in log.records] == ["memory_access", "api_error"]


def test_custom_prefix_detected_from_banner_and_given():
    text = read(H200 / "san_memcheck_prefix.txt")
    assert parse_text_log(text).prefix == "CSAN> "
    assert len(parse_text(text, prefix="CSAN> ")) == 2
    assert parse_text(text, prefix="=========") == []  # a wrong prefix finds nothing, quietly


# --- XML (real files from the H200) ------------------------------------------------------------

REAL_XML = [
    ("xml_memcheck_oob1.xml", 2, "memory_access", "max_reduce_off_by_one", 18, 0x7FF930801FA0, (232, 0, 0)),
    ("xml_memcheck_streamrace.xml", 100, "memory_access", "scale", 26, 0x48EA000800, (0, 0, 0)),
    ("xml_memcheck_uaf.xml", 100, "memory_access", "scale", 26, 0x7FA1B6800800, (0, 0, 0)),
    ("xml_initcheck_uninit.xml", 100, "uninitialized_read", "read_uninit", 27, 0x7F2020800800, (0, 0, 0)),
    ("xml_synccheck_syncdiv.xml", 16, "sync_error", "divergent_sync", 34, None, (0, 0, 0)),
    ("xml_racecheck_sharedrace.xml", 1, "race", "shared_race", 30, None, None),
    ("xml_memcheck_leak.xml", 2, "leak", None, None, 0x7FDAB6800000, None),
    ("xml_memcheck_numba.xml", 2, "memory_access",
     "max_reduce[abi:v1,cw51cXTLSUwv1sDUaKthqaNgoKmjgMVuW1AiA8rAEg2UjxRKtuAI0FEA2gSVRE8cSMKQdIgkgJq2YBJIfrWtVofFgLqVAjQm1YGSQJ5xrSYA]",
     10, 0x7F094E801FA0, (232, 0, 0)),
]


@pytest.mark.parametrize("name,n,kind,kernel,line,addr,thread", REAL_XML, ids=[r[0] for r in REAL_XML])
def test_real_xml(name, n, kind, kernel, line, addr, thread):
    recs, intact = parse_xml_stream(read(H200 / name))
    assert intact and len(recs) == n
    r = recs[0]
    assert (r.kind, r.kernel, r.line, r.address, r.thread) == (kind, kernel, line, addr, thread)


def test_xml_details():
    oob, api = parse_xml(read(H200 / "xml_memcheck_oob1.xml"))
    assert (oob.space, oob.size, oob.access, oob.problem, oob.pc) == ("__global__", 4, "write", "out of bounds", 0x120)
    assert oob.file == "/work/main/scripts/gpu/capture/faults.cu"
    assert oob.host_stack_at == "kernel launch time"
    assert oob.host_frames[0].func == "cuLaunchKernel"  # innermost first, as the text
    assert oob.host_frames[-1].func == "_start"
    assert (api.api, api.error, api.error_code, api.tool) == ("cudaDeviceSynchronize", "cudaErrorLaunchFailure", 719, "memcheck")
    race = parse_xml(read(H200 / "xml_racecheck_sharedrace.xml"))[0]
    assert (race.access, race.hazards, race.severity) == ("write", 1024, "Error")
    assert race.race_other == "Read access at shared_race in /work/main/scripts/gpu/capture/faults.cu:31"
    sync = parse_xml(read(H200 / "xml_synccheck_syncdiv.xml"))[0]
    assert sync.problem == "Divergent thread(s) in warp"
    numba_api = parse_xml(read(H200 / "xml_memcheck_numba.xml"))[1]
    assert [f.line for f in numba_api.host_frames if f.is_python][:2] == [324, 1283]


def test_text_and_xml_of_the_same_fault_agree():
    text = parse_text(read(H200 / "xmlrun_memcheck_oob1.txt"))[0]
    xml = parse_xml(read(H200 / "xml_memcheck_oob1.xml"))[0]
    assert (text.line, text.thread, text.block, text.address, text.size, text.access) == (
        xml.line, xml.thread, xml.block, xml.address, xml.size, xml.access)


def test_truncated_xml_keeps_complete_records():
    text = read(H200 / "xml_memcheck_uaf.xml")
    cut = text[: len(text) // 2]
    recs, intact = parse_xml_stream(cut)
    assert not intact
    assert 0 < len(recs) < 100
    assert all(r.kernel == "scale" for r in recs)


# --- older formats, built from the documented grammar (tests/data/sanitizer/PROVENANCE.md) ---------

def test_legacy_cuda_memcheck():
    log = parse_text_log(read(OLD / "legacy_cuda_memcheck.txt"))
    assert log.legacy and log.error_summary == 4
    oob, hw, api, api_old = log.records
    # "at 0x00000060 in /home/user/vecadd.cu:12:vecAdd(...)", "of size 4" without "bytes"
    assert (oob.function, oob.file, oob.line, oob.pc, oob.size) == (
        "vecAdd(float*, float const*, int)", "/home/user/vecadd.cu", 12, 0x60, 4)
    assert oob.problem == "out of bounds" and oob.alloc_base is None
    assert oob.device_frames[0].file == "/home/user/vecadd.cu" and oob.device_frames[0].pc == 0x60
    assert (oob.host_frames[0].func, oob.host_frames[0].module, oob.host_frames[0].pc) == (
        "cuLaunchKernel", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x24C3AD)
    assert oob.host_frames[1].module == "./vecadd" and oob.host_frames[1].func is None
    assert hw.kind == "hardware_exception" and hw.kernel == "reduce(float*)" and hw.line == 30
    assert (api.error, api.error_code) == ("cudaErrorLaunchFailure", 4)
    assert (api_old.error, api_old.error_code, api_old.api) == ("invalid copy direction for memcpy", 21, "cudaMemcpy")


def test_legacy_racecheck():
    log = parse_text_log(read(OLD / "legacy_cuda_memcheck_racecheck.txt"))
    race, hazard = log.records
    assert (race.severity, race.function, race.file, race.line, race.hazards) == (
        "Error", "Basic(void)", "raceGroupBasic.cu", 13, 4)
    assert (hazard.severity, hazard.hazard, hazard.block, hazard.thread, hazard.line) == (
        "Warn", "RAW", (0, 0, 0), (35, 0, 0), 44)
    assert log.racecheck_summary == (2, 1, 1) and log.tool == "racecheck"


def test_two_line_host_frames_of_2021_2024():
    recs = parse_text(read(OLD / "cs2022_two_line_frames.txt"))
    frames = recs[0].host_frames
    assert [(f.func, f.module) for f in frames] == [
        (None, "/lib/x86_64-linux-gnu/libcuda.so.1"), ("__cudart798", "/home/u/./k"),
        ("cudaLaunchKernel", "/home/u/./k"), ("main", "/home/u/./k")]
    assert (recs[0].function, recs[0].pc, recs[0].size) == ("kern(int4 *, int)", 0x70, 16)
    assert recs[1].space == "__shared__" and recs[1].address == 0x400
    assert recs[2].kind == "leak" and recs[2].size == 1_048_576


def test_documented_record_heads_of_2026_4():
    log = parse_text_log(read(OLD / "docs_2026_4_samples.txt"))
    kinds = [r.kind for r in log.records]
    assert kinds == ["memory_access", "memory_access", "malloc_free", "leak", "guardrail", "memory_access",
                     "sync_error", "sync_error", "sync_error", "unused_memory", "host_api_access",
                     "hardware_exception"]
    r = log.records
    assert (r[0].function, r[0].pc, r[0].line) == ("unaligned_kernel()", 0x160, 6)
    assert r[1].kernel == "out_of_bounds_kernel()" and r[1].function == "out_of_bounds_function()"
    assert r[2].problem == "Double free" and r[2].address == 0x400AFF920
    assert r[3].problem == "on the device heap" and r[3].size == 16
    assert r[5].tool == "racecheck" and r[5].problem == "located in a block that might not have entered yet"
    assert r[6].tool == "racecheck" and r[6].line == 98 and r[6].problem == "deadlock in Cuda::barrier wait"
    assert r[7].kernel == "myKernel(int *, int *)"  # the [clone ...] device function's kernel
    # no line info at the fault (a system header): the user's frame is the outermost device frame
    assert r[8].kernel == "myKernel(int *)" and r[8].file.endswith("sm_30_intrinsics.hpp")
    assert r[9].address == 0x7FED9F400000 and r[9].size == 100
    assert r[10].address == 0x7F3C7EC00000 and r[10].size == 64
    # notices are not records; the trace log line ("Barrier called by ...") is not an error
    assert any(n.startswith("Internal Sanitizer Error") for n in log.notices)
    assert any(n.startswith("Barrier called by") for n in log.notices)
    assert log.app_failed and log.error_summary == 12


def test_ci_timestamps_and_indentation():
    recs = parse_text(read(OLD / "ci_timestamped_oob1.txt"))
    assert [r.kind for r in recs] == ["memory_access", "api_error"] and recs[0].line == 18


def test_pytest_banner_lines_are_not_sanitizer_lines():
    text = ("============================= test session starts ==============================\n"
            "========= 1 failed, 199 passed, 3 warnings, 2 errors in 123.45s (0:02:03) =========\n"
            "========== Invalid __global__ write of size 4 bytes\n")
    log = parse_text_log(text)
    assert log.records == () and log.notices == ()


# --- locations and frames, table-driven ----------------------------------------------------------

@pytest.mark.parametrize("loc,expected", [
    ("max_reduce_off_by_one(const float *, float *, int)+0x120 in faults.cu:18",
     ("max_reduce_off_by_one(const float *, float *, int)", "faults.cu", 18, 0x120)),
    ("0x00000060 in /home/user/vecadd.cu:12:vecAdd(float*)", ("vecAdd(float*)", "/home/user/vecadd.cu", 12, 0x60)),
    ("0x160 in kernel(int)", ("kernel(int)", None, None, 0x160)),
    ("0x79d8", (None, None, None, 0x79D8)),
    ("unaligned_kernel():0x160 in memcheck_demo.cu:6", ("unaligned_kernel()", "memcheck_demo.cu", 6, 0x160)),
    ("unaligned_kernel()+0x50", ("unaligned_kernel()", None, None, 0x50)),
    ("cp_async_bulk_cp_mask in cp_async_bulk.h:236", ("cp_async_bulk_cp_mask", "cp_async_bulk.h", 236, None)),
    ("operator+(int)+0x10 in ops.cu:3", ("operator+(int)", "ops.cu", 3, 0x10)),
    ("weird location text", ("weird location text", None, None, None)),
])
def test_locations(loc, expected):
    assert parse_location(loc) == expected


@pytest.mark.parametrize("text,expected", [
    ("main [0x99d3] in faults", ("main", None, None, "faults", 0x99D3)),
    ("main in numba_oob.py:15", ("main", "numba_oob.py", 15, None, None)),
    (" [0x26781] in cydriver.cpython-312-x86_64-linux-gnu.so", (None, None, None, "cydriver.cpython-312-x86_64-linux-gnu.so", 0x26781)),
    ("f(args) in file.cu:456 [0x593df4d] in lib.so", ("f(args)", "file.cu", 456, "lib.so", 0x593DF4D)),
    ("cudaLaunchKernel [0x70aae]", ("cudaLaunchKernel", None, None, None, 0x70AAE)),
    ("/usr/lib/libcuda.so (cuLaunchKernel + 0x2cd) [0x24c3ad]", ("cuLaunchKernel", None, None, "/usr/lib/libcuda.so", 0x24C3AD)),
    ("<module> in nb.py:10", ("<module>", "nb.py", 10, None, None)),
    ("", (None, None, None, None, None)),
])
def test_host_frames(text, expected):
    f = parse_host_frame(text)
    assert (f.func, f.file, f.line, f.module, f.pc) == expected


def test_device_frames():
    f = parse_device_frame("out_of_bounds_kernel()+0x30 in memcheck_demo.cu:44")
    assert (f.func, f.file, f.line, f.pc) == ("out_of_bounds_kernel()", "memcheck_demo.cu", 44, 0x30)
    f = parse_device_frame("NVIDIA Internal [0x520]")
    assert (f.func, f.pc) == ("NVIDIA Internal", 0x520)
    f = parse_device_frame("/home/u/k.cu:12:kern(int*) (kern(int*) : 0x46c0)")
    assert (f.func, f.file, f.line, f.pc) == ("kern(int*)", "/home/u/k.cu", 12, 0x46C0)


# --- malformed input, table-driven ---------------------------------------------------------------

OOB = read(H200 / "san_memcheck_oob1.txt")


@pytest.mark.parametrize("text,n_records", [
    ("", 0),
    ("\x00\x01\x02\xff" * 100, 0),
    ("=========", 0),
    ("========= \n========= \n", 0),
    (OOB[: OOB.index("by thread")], 1),                    # cut inside the first record
    (OOB[: OOB.index("Access to") + 12], 1),               # cut inside the address
    ("========= Invalid __global__ write of size  bytes\n", 1),   # a size with no digits
    ("========= Invalid __global__ write of size 4 bytes\n=========     by thread (1,2) in block (3,4,5)\n", 1),
    ("========= Leaked ,,, bytes at 0xzz\n", 0),
    ("========= Program hit\n", 1),
    ("=========     at orphan detail line with no record\n", 0),
    (OOB.replace("\n", "\r\n"), 2),                        # Windows line ends
    ("\n".join(OOB.splitlines()[1::2]), 2),                # every other line lost
])
def test_malformed(text, n_records):
    assert len(parse_text(text)) == n_records


def test_truncated_log_flags_the_cut():
    cut = OOB[: OOB.index("by thread") + 5]  # the log stops in the middle of a line
    log = parse_text_log(cut)
    assert log.truncated and log.error_summary is None
    assert log.records[0].function == "max_reduce_off_by_one(const float *, float *, int)"


@pytest.mark.parametrize("text", [
    "", "<", "<?xml version='1.0'?>", "<ComputeSanitizerOutput><record><kind>Precise", "\x00\xff junk",
    "<ComputeSanitizerOutput><record><kind>Precise</kind><who><threadIdx><x>a</x></threadIdx></who>"
    "<what><size>zz</size><address>0xqq</address></what></record></ComputeSanitizerOutput>",
    "<!DOCTYPE x [<!ENTITY a 'aaaa'>]><x>&a;&a;</x>",
])
def test_malformed_xml_never_raises(text):
    recs, intact = parse_xml_stream(text)
    assert isinstance(recs, list)
    if "zz" in text:
        assert intact and recs[0].size is None and recs[0].address is None and recs[0].thread is None


# --- properties ----------------------------------------------------------------------------------

_LINES = st.sampled_from(OOB.splitlines() + read(H200 / "san_racecheck_shared.txt").splitlines()[:12]
                         + read(OLD / "docs_2026_4_samples.txt").splitlines())


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parse_text_never_raises_on_any_text(text):
    for r in parse_text(text):
        assert r.kind in KINDS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_LINES, st.text(max_size=40)), max_size=60))
def test_parse_text_never_raises_on_shuffled_real_lines(lines):
    text = "\n".join(lines)
    log = parse_text_log(text)
    for r in log.records:
        assert r.kind in KINDS
        assert r.thread is None or len(r.thread) == 3
        json.dumps(r.to_json())  # always serialisable


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_parse_xml_never_raises_on_bytes(data):
    parse_xml(data.decode("utf-8", "replace"))
    parse_xml(data.decode("utf-8", "surrogateescape"))  # lone surrogates (issue 18)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=len(read(H200 / "xml_memcheck_oob1.xml"))))
def test_xml_cut_anywhere(cut):
    text = read(H200 / "xml_memcheck_oob1.xml")
    recs = parse_xml(text[:cut])
    assert len(recs) <= 2


# --- streaming ----------------------------------------------------------------------------------

_BYTES = st.lists(st.sampled_from([b"a", b"=========", b" ", b"\n", b"\r", b"\r\n", b"\x0b", b"\x1c",
                                   "\u2028".encode(), "\x85".encode(), "é".encode(), b"\xe2\x80", b"\xa8",
                                   b"\xff", b"\xc3", b"\x00"]), max_size=60).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(_BYTES, st.lists(st.integers(1, 7), min_size=1, max_size=20))
def test_iter_lines_splits_like_decode_then_splitlines(data, cuts):
    chunks, pos, i = [], 0, 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        chunks.append(data[pos:pos + step])
        pos, i = pos + step, i + 1
    assert list(iter_lines(chunks)) == data.decode("utf-8", "replace").splitlines()


@settings(max_examples=300, deadline=None)
@given(_BYTES, st.lists(st.integers(1, 7), min_size=1, max_size=20), st.integers(1, 6))
def test_iter_lines_cuts_long_lines_and_skips_their_rest(data, cuts, max_line):
    chunks, pos, i = [], 0, 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        chunks.append(data[pos:pos + step])
        pos, i = pos + step, i + 1
    want = [line[:max_line] for line in data.decode("utf-8", "replace").splitlines()]
    assert list(iter_lines(chunks, max_line=max_line)) == want


@pytest.mark.parametrize("name", ["san_memcheck_uaf.txt", "san_racecheck_shared.txt", "san_memcheck_prefix.txt",
                                  "san_numba.txt", "xmlrun_memcheck_streamrace.txt"])
def test_streamed_records_equal_the_whole_text_parse(name):
    data = (H200 / name).read_bytes()
    whole = parse_text_log(data.decode("utf-8", "replace"))
    parser = TextLogParser()
    streamed = list(parser.records(iter_lines(data[i:i + 100] for i in range(0, len(data), 100))))
    assert streamed == list(whole.records)
    assert parser.summary(tuple(streamed)) == whole


def test_parse_from_stdin(monkeypatch, capsys):
    import io
    import sys

    from faulthunt.cli import main

    data = (H200 / "san_memcheck_oob1.txt").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["sanitize", "parse", "-", "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
