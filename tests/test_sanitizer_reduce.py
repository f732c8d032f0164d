"""Reduction of sanitizer records to findings, and kernel-name demangling."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.sanitizer import parse_text, parse_xml, reduce_records
from faulthunt.sanitizer import demangle as dm
from faulthunt.sanitizer.render import render_headline, render_summary, render_table

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200"
OLD = DATA / "sanitizer" / "text"


def findings_of(name: str):
    text = (H200 / name).read_text()
    return reduce_records(parse_xml(text) if name.endswith(".xml") else parse_text(text))


def test_streamrace_reduces_to_one_finding():
    (f,) = findings_of("san_memcheck_streamrace.txt")
    assert (f.tool, f.kind, f.kernel, f.file, f.line, f.count) == ("memcheck", "memory_access", "scale", "faults.cu", 26, 20)
    assert f.error == "Invalid __global__ read (potentially accessed before it is allocated)"
    assert f.threads.lo == (0, 0, 0) and f.threads.hi == (19, 0, 0) and f.threads.distinct == 20
    assert f.blocks.lo == f.blocks.hi == (2, 0, 0)
    # 20 four-byte reads from 0x48ea000800: the last byte touched is 0x48ea00084f
    assert f.address_range == (0x48EA000800, 0x48EA00084F)
    assert f.host_stack == ("main [0xa574] in faults",)
    assert f.example.thread == (0, 0, 0)


def test_headline_is_the_device_error_not_the_api_error_after_it():
    findings = findings_of("san_memcheck_oob1.txt")
    assert [f.kind for f in findings] == ["memory_access", "api_error"]
    head = findings[0]
    assert head.kernel == "max_reduce_off_by_one" and head.line == 18
    assert render_headline(head) == (
        "Invalid __global__ write (out of bounds) in kernel max_reduce_off_by_one at faults.cu:18; "
        "1 bytes after the allocation at 0x7f592a801000 of 4000 bytes")


def test_device_findings_first_even_when_an_api_error_comes_first():
    text = ((OLD / "legacy_cuda_memcheck.txt").read_text().split("=========\n", 3)[2]  # API error first
            + "=========\n" + (H200 / "san_memcheck_readpast.txt").read_text())
    kinds = [f.kind for f in reduce_records(parse_text(text))]
    assert kinds[0] == "memory_access" and "api_error" in kinds


def test_numba_kernel_reads_as_python_name():
    (f, api) = findings_of("san_numba.txt")
    assert f.kernel == "__main__.max_reduce"
    assert f.kernel_full.startswith("__main__::max_reduce[abi:v1,")
    assert f.host_stack == ("main in numba_oob.py:15",)
    # the API error's host stack keeps the Python frames and drops the interpreter's
    assert api.host_stack[:2] == ("safe_cuda_api_call in driver.py:324", "synchronize in driver.py:1283")
    (fx, _) = findings_of("xml_memcheck_numba.xml")
    assert fx.kernel == "max_reduce"


def test_groups_split_by_location_and_error():
    findings = findings_of("san_memcheck_misaligned.txt")
    assert len(findings) == 1 and findings[0].error == "Invalid __global__ write (misaligned)"
    leaks = findings_of("san_memcheck_leak.txt")
    # two leaks from different call sites (main+0xb0f4, main+0xb19d) but one allocation helper frame
    assert [f.count for f in leaks] == [1, 1]
    assert leaks[0].address_range == (0x7FB7FC800000, 0x7FB7FC800000 + 12345 - 1)


def test_text_and_xml_reduce_to_the_same_finding():
    t = findings_of("xmlrun_memcheck_uaf.txt")[0]
    x = findings_of("xml_memcheck_uaf.xml")[0]
    assert (t.kernel, t.line, t.error) == (x.kernel, x.line, x.error)


@pytest.mark.parametrize("name,tool,error,kernel,line", [
    ("san_racecheck_analysis.txt", "racecheck", "Write-Read race", "shared_race", 30),
    ("san_racecheck_shared.txt", "racecheck", "RAW hazard (__shared__)", "shared_race", 30),
    ("san_synccheck_div.txt", "synccheck", "Barrier error: Divergent thread(s) in warp", "divergent_sync", 34),
    ("xml_synccheck_syncdiv.xml", "synccheck", "Barrier error: Divergent thread(s) in warp", "divergent_sync", 34),
    ("san_initcheck_uninit.txt", "initcheck", "Uninitialized __global__ read", "read_uninit", 27),
    ("xml_initcheck_uninit.xml", "initcheck", "Uninitialized __global__ read", "read_uninit", 27),
    ("san_memcheck_wild.txt", "memcheck", "Invalid __global__ write (out of bounds)", "wild_write", 20),
])
def test_each_tool_names_kernel_and_line(name, tool, error, kernel, line):
    f = findings_of(name)[0]
    assert (f.tool, f.error, f.kernel, f.line) == (tool, error, kernel, line)


def test_finding_json_has_the_documented_keys():
    f = findings_of("san_memcheck_oob1.txt")[0].to_json()
    for key in ("tool", "kind", "kernel", "file", "line", "access", "size", "address_range", "count",
                "threads", "blocks", "example", "host_stack", "nodeid"):
        assert key in f
    assert f["address_range"] == [0x7F592A801FA0, 0x7F592A801FA3]
    assert f["threads"] == {"min": [232, 0, 0], "max": [232, 0, 0], "distinct": 1}
    assert f["example"]["lines"][0] == "Invalid __global__ write of size 4 bytes"


def test_summary_text_golden():
    findings = findings_of("san_memcheck_oob1.txt")
    text = render_summary(findings, records=2, tool_version="2025.3.1.0")
    assert text.splitlines()[:3] == [
        "faulthunt sanitize: 2 finding(s) from 2 record(s), compute-sanitizer 2025.3.1.0", "",
        "Offending kernel: Invalid __global__ write (out of bounds) in kernel max_reduce_off_by_one at "
        "faults.cu:18; 1 bytes after the allocation at 0x7f592a801000 of 4000 bytes"]
    table = render_table(findings).splitlines()
    assert table[0].split() == ["#", "tool", "error", "kernel", "where", "count", "threads", "blocks", "addresses", "test"]
    assert "max_reduce_off_by_one" in table[2] and "faults.cu:18" in table[2]
    assert "host: main [0x9a75] in faults" in table[3]


def test_empty():
    assert reduce_records([]) == []
    assert render_summary([]).startswith("faulthunt sanitize: 0 finding(s)")


# --- demangling ----------------------------------------------------------------------------------

NUMBA_MANGLED = ("_ZN8__main__10max_reduceB2v1B4cw51E5ArrayIfLi1E1C7mutable7alignedE"
                 "5ArrayIfLi1E1C7mutable7alignedE")


@pytest.mark.parametrize("name,short", [
    ("max_reduce_off_by_one(const float *, float *, int)", "max_reduce_off_by_one"),
    ("void scale<float>(float *, int, float)", "scale<float>"),
    ("ns::Functor::operator()(int) const", "ns::Functor::operator()"),
    ("__main__::max_reduce[abi:v1,cw51c](Array<float, (int)1, C, mutable, aligned>)", "__main__.max_reduce"),
    ("cudapy::pkg::mod::k[abi:v1][abi:cw51](Array<double, 1, C, mutable, aligned>)", "pkg.mod.k"),
    ("max_reduce[abi:v1,cw51cXT]", "max_reduce"),
    ("[clone myKernel(int *, int *)] outlineSync()", "outlineSync"),
    ("unaligned_kernel()", "unaligned_kernel"),
    ("kernel", "kernel"),
    ("_Z21max_reduce_off_by_onePKfPfi", "max_reduce_off_by_one"),
    (NUMBA_MANGLED, "__main__.max_reduce"),
])
def test_short_names(name, short):
    assert dm.short_name(name) == short


@pytest.mark.parametrize("mangled,full", [
    ("_Z21max_reduce_off_by_onePKfPfi", "max_reduce_off_by_one(float const*, float*, int)"),
    ("_Z10wild_writePix", "wild_write(int*, long long)"),
    ("_Z6kernelIfEvPT_i", "void kernel<float>(float*, int)"),
    ("_ZN2ns3fooEv", "ns::foo()"),
    ("__device_stub__Z5scalePfif", "scale(float*, int, float)"),
    (NUMBA_MANGLED, "__main__::max_reduce[abi:v1][abi:cw51](Array<float, 1, C, mutable, aligned>, "
                    "Array<float, 1, C, mutable, aligned>)"),
    ("_Znot_really", "_Znot_really"),   # not a valid mangled name: shown as printed
    ("plain", "plain"),
])
def test_demangle(mangled, full):
    assert dm.demangle(mangled) == full


def _captured_mangled_names() -> list[str]:
    names: set[str] = set()
    rx = re.compile(r"(?:__device_stub_|\b)_Z[A-Za-z0-9_$.]+")
    for path in DATA.rglob("*"):
        if path.suffix in (".txt", ".log", ".xml", ".json", ".jsonl") and path.is_file():
            names.update(rx.findall(path.read_text(errors="replace")))
    return sorted(names)


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="binutils c++filt is not installed")
def test_demangled_names_are_what_cxxfilt_prints():
    names = _captured_mangled_names()
    assert len(names) > 20
    stubs = ["_" + n[len("__device_stub__"):] if n.startswith("__device_stub__") else n for n in names]
    proc = subprocess.run(["c++filt"], input="\n".join(stubs) + "\n", capture_output=True, text=True, check=True)
    assert [dm.demangle(n) for n in names] == proc.stdout.splitlines()


@pytest.fixture
def fresh_library(monkeypatch):
    monkeypatch.setattr(dm, "_CACHE", {})
    for attr, value in (("module", None), ("tried", False), ("broken", None), ("said", False)):
        monkeypatch.setattr(dm._Library, attr, value)
    return dm._Library


def test_without_the_library_names_stay_mangled_and_it_is_said_once(fresh_library, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cxxfilt", None)  # import cxxfilt -> ImportError
    assert dm.demangle("_Z5scalePfif") == "_Z5scalePfif"
    assert dm.short_name("_Z5scalePfif") == "_Z5scalePfif"
    assert dm.demangle_many(["_Z3foov", "plain"]) == {"_Z3foov": "_Z3foov", "plain": "plain"}
    err = capsys.readouterr().err
    assert err.count("C++ kernel names stay mangled") == 1 and "pip install cxxfilt" in err


def test_a_failing_library_is_said_once_and_not_called_again(fresh_library, monkeypatch, capsys):
    calls = []

    class Broken:
        class InvalidName(Exception):
            pass

        @staticmethod
        def demangle(name):
            calls.append(name)
            raise RuntimeError("libstdc++ not loadable")

    fresh_library.tried, fresh_library.module = True, Broken
    assert dm.demangle("_Z5scalePfif") == "_Z5scalePfif"
    assert dm.demangle("_Z3foov") == "_Z3foov"
    assert calls == ["_Z5scalePfif"]
    assert capsys.readouterr().err.count("libstdc++'s demangler failed") == 1


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(exclude_categories=()), max_size=60))
def test_demangling_never_raises(text):
    dm.demangle("_Z" + text)
    dm.short_name(text)
    dm.short_name("_Z" + text)
    dm.strip_params(text)
