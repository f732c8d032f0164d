"""The validation table's judging (kernels/validate.py): pure, table-driven, plus one real
work folder made on this CPU by `faulthunt stress` over the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.kernels import SUITE_DIR, catalog
from faulthunt.kernels.validate import MapEntry, Observed, SanFinding, judge, kernel_span, render, rows_for

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "tests" / "data" / "h200"


def obs(**kw: object) -> Observed:
    base = dict(planted_outcome="passed", planted_message="", planted_xids=(), twin_outcome="passed",
                twin_xids=(), san_tests=None, san_findings=(), san_bug_text=None, san_twin_rc=None,
                san_twin_text=None, source=(REPO / "kernels" / "planted.cu").read_text())
    base.update(kw)
    return Observed(**base)  # type: ignore[arg-type]


REAL_OOB1 = (H200 / "san_memcheck_oob1.txt").read_text()
REAL_STREAM_PLAIN = (H200 / "san_memcheck_streamrace_plain.txt").read_text()
FIRST = REPO / "tests" / "data" / "validate" / "first_run"


def planted(name: str, fl: str = "cuda") -> tuple[str, ...]:
    return (f"/x/test_planted.py::test_planted[{name}-{fl}]",)


def both(name: str, fl: str = "cuda") -> tuple[str, ...]:
    return planted(name, fl) + (f"/x/test_planted.py::test_twin[{name}-{fl}]",)


def finding(name: str, kernel: str | None, line: int | None, text: str, *, test: str = "test_planted",
            fl: str = "cuda", file: str = "planted.cu") -> SanFinding:
    return SanFinding(f"/x/test_planted.py::{test}[{name}-{fl}]", "memcheck", kernel, file, line, text)


OOB_HIT = finding("oob_write", "max_reduce_off_by_one", 13, "Invalid __global__ write of size 4 bytes")


@pytest.mark.parametrize("name,o,cell,want", [
    # silent bug: the plain run passes and faulthunt sanitize names the kernel and a line in it
    ("oob_write", obs(san_tests=planted("oob_write"), san_findings=(OOB_HIT,)), "plain", "yes: passed"),
    ("oob_write", obs(san_tests=planted("oob_write"), san_findings=(OOB_HIT,)), "sanitizer",
     "yes: memcheck: max_reduce_off_by_one at planted.cu:13"),
    ("oob_write", obs(planted_outcome="failed"), "plain", "NO: failed"),
    ("oob_write", obs(san_tests=planted("oob_write")), "sanitizer", "NO: memcheck: 0 findings"),
    ("oob_write", obs(planted_outcome=None), "plain", "not run"),
    ("oob_write", obs(), "sanitizer", "not run (faulthunt sanitize left no result for the planted test)"),
    # the right words in the wrong kernel, or a line outside the kernel, is not the evidence
    ("oob_write", obs(san_tests=planted("oob_write"), san_findings=(
        finding("oob_write", "max_reduce", 20, "Invalid __global__ write of size 4 bytes"),)),
     "sanitizer", "NO: memcheck: 1 finding(s), none is 'Invalid __global__ write of size 4 bytes' in "
                  "max_reduce_off_by_one (first: max_reduce at planted.cu:20)"),
    ("oob_write", obs(san_tests=planted("oob_write"), san_findings=(
        finding("oob_write", "max_reduce_off_by_one", 40, "Invalid __global__ write of size 4 bytes"),)),
     "sanitizer", "NO: memcheck: 1 finding(s), none is 'Invalid __global__ write of size 4 bytes' in "
                  "max_reduce_off_by_one (first: max_reduce_off_by_one at planted.cu:40 (outside "
                  "max_reduce_off_by_one))"),
    # a finding of the twin test does not count for the planted one, but dirties the twin
    ("oob_write", obs(san_tests=both("oob_write"), san_findings=(
        finding("oob_write", "max_reduce", 20, "x", test="test_twin"),)), "twin",
     "NO: plain passed, memcheck NOT clean (1 finding(s))"),
    ("oob_write", obs(san_tests=both("oob_write")), "twin", "yes: plain passed, memcheck clean"),
    # numba names the kernel by its dotted path
    ("oob_write_numba", None, None, None),
    # wild write: error name in the message and the Xid attributed
    ("wild_write", obs(planted_outcome="failed", planted_message="CUDA_ERROR_ILLEGAL_ADDRESS (700) in cuCtxSynchronize",
                       planted_xids=(31,)), "plain", "yes: failed"),
    ("wild_write", obs(planted_outcome="failed", planted_xids=(31, 43)), "xid", "yes: 31, 43"),
    ("wild_write", obs(planted_outcome="failed"), "xid", "NO: none"),
    ("wild_write", obs(planted_outcome="failed", planted_message="AssertionError"), "plain", "NO: failed"),
    # an unexpected Xid on a fault that must leave none
    ("oob_read", obs(planted_xids=(31,)), "xid", "NO: 31"),
    ("oob_read", obs(), "xid", "yes: none"),
    # API-level evidence: no kernel, no device line
    ("arch_gap", obs(planted_outcome="failed", planted_message="CUDA_ERROR_NO_BINARY_FOR_GPU",
                     san_tests=planted("arch_gap"), san_findings=(finding(
                         "arch_gap", None, None, 'Program hit CUDA_ERROR_NO_BINARY_FOR_GPU (error 209) '
                         'due to "no kernel image" on CUDA API call to cuLibraryGetKernel.', file=None),)),
     "sanitizer", "yes: memcheck: no source line"),
    ("bounded_hang", obs(planted_outcome="hung"), "plain", "yes: hung"),
    ("bounded_hang", obs(planted_outcome="failed"), "plain", "NO: failed"),
    ("stale_cache", obs(planted_outcome="failed", san_tests=planted("stale_cache")), "sanitizer",
     "yes: clean, as expected (memcheck: 0 findings)"),
    ("stale_cache", obs(planted_outcome="failed", san_tests=planted("stale_cache"),
                        san_findings=(finding("stale_cache", "scale_into", 104, "Invalid"),)),
     "sanitizer", "NO: memcheck: 1 finding(s), first in scale_into"),
    ("shared_race", obs(planted_outcome="failed"), "plain", "(reported) failed"),
    # direct runs: a cross-check, said separately; one that did not start decides nothing
    ("oob_write", obs(san_bug_text=REAL_OOB1, san_bug_rc=99, san_twin_text="========= ERROR SUMMARY: 0 errors",
                      san_twin_rc=0), "direct", "yes: bug line seen; twin memcheck clean"),
    ("oob_write", obs(san_bug_text="========= ERROR SUMMARY: 0 errors", san_bug_rc=0), "direct",
     "NO: bug NO: line not seen (rc 0); twin not run"),
    ("stream_ordered", obs(san_bug_text=REAL_STREAM_PLAIN, san_bug_rc=0), "direct",
     "NO: bug NO: line not seen (rc 0); twin not run"),
    ("oob_write", obs(san_twin_text="x", san_twin_rc=99), "direct", "NO: bug not run; twin NO: memcheck reported errors"),
    # twins without a faulthunt sanitize rerun fall back on the direct run, if it ran
    ("oob_write", obs(san_twin_text="========= ERROR SUMMARY: 0 errors", san_twin_rc=0), "twin",
     "yes: plain passed, direct memcheck clean"),
    ("oob_write", obs(), "twin", "yes: plain passed, memcheck not run on the twin"),
    ("oob_write", obs(twin_outcome="collateral"), "twin", "NO: plain collateral, memcheck not run on the twin"),
    ("oob_write", obs(twin_xids=(31,)), "twin", "NO: plain passed, memcheck not run on the twin"),
    ("oob_write", obs(twin_outcome=None), "twin", "not run"),
    # a kernel that could not run (no cuda.core) sees nothing: never a "yes"
    ("stale_cache", obs(planted_outcome="skipped"), "plain", "not run (skipped)"),
    ("stale_cache", obs(planted_outcome="skipped"), "xid", "not run"),
    ("stale_cache", obs(twin_outcome="skipped"), "twin", "not run (skipped)"),
    ("stale_cache", obs(san_bug_text='FAULTHUNT-KERNEL-RESULT {"status": "unavailable"}\n'
                                     "========= ERROR SUMMARY: 0 errors"),
     "direct", "not run"),
])
def test_judge(name: str, o: Observed | None, cell: str | None, want: str | None) -> None:
    if o is None:  # the numba case: its own source file and dotted kernel names
        src = (REPO / "kernels" / "numba_kernels.py").read_text()
        f = finding("oob_write", "faulthunt.kernels.numba_kernels.max_reduce_off_by_one", 24,
                    "Invalid __global__ write of size 4 bytes", fl="numba", file="numba_kernels.py")
        row = judge(catalog.get("oob_write"), "numba",
                    obs(san_tests=planted("oob_write", "numba"), san_findings=(f,), source=src))
        assert row.sanitizer == "yes: memcheck: max_reduce_off_by_one at numba_kernels.py:24"
        return
    row = judge(catalog.get(name), "cuda", o)
    assert getattr(row, cell) == want  # type: ignore[arg-type]


@pytest.mark.parametrize("text,want", [
    ("========= Error: Target application terminated before first instrumented API call",
     "did not start, no instrumented API call"),
    ('X\nFAULTHUNT-KERNEL-RESULT {"status": "error", "error": "PlantedCudaError: CUDA_ERROR_NOT_INITIALIZED '
     '(3) in cuMemAlloc"}\n========= Error: Target application terminated before first instrumented API call',
     "did not start: CUDA_ERROR_NOT_INITIALIZED, no instrumented API call"),
    ("the argument for option '--track-stream-ordered-races' is invalid\nUsage: compute-sanitizer [options]",
     "did not start: compute-sanitizer refused the argument of --track-stream-ordered-races"),
    ("Usage: compute-sanitizer [options]", "did not start: compute-sanitizer refused its command line"),
    ("", "NO: line not seen (rc 255)"),
    ("\x00\xff binary junk FAULTHUNT-KERNEL-RESULT {not json", "NO: line not seen (rc 255)"),
])
def test_direct_run_that_did_not_start(text: str, want: str) -> None:
    row = judge(catalog.get("oob_write"), "cuda", obs(san_bug_text=text, san_bug_rc=255))
    assert want.removeprefix("did not start") in row.direct
    assert row.direct_started == (not want.startswith("did not start"))


@pytest.mark.parametrize("kernel,flavour,lines", [
    ("max_reduce_off_by_one", "cuda", (9, 15)),
    ("wild_write", "cuda", (25, 27)),
    ("max_reduce_off_by_one", "numba", None),   # checked against the finding's line below
    ("no_such_kernel", "cuda", None),
])
def test_kernel_span(kernel: str, flavour: str, lines: tuple[int, int] | None) -> None:
    src = (REPO / "kernels" / ("planted.cu" if flavour == "cuda" else "numba_kernels.py")).read_text()
    span = kernel_span(src, kernel, flavour)
    if kernel == "no_such_kernel":
        assert span is None
    elif lines is None:
        assert span is not None and span[0] <= 24 <= span[1]  # the H200's numba finding line
    else:
        assert span == lines


def test_mapped_says_what_it_rested_on() -> None:
    entries = (
        MapEntry("xid", None, "the ledger has no records for pid 909 (pids in it: 923)", None, None, 31, 909),
        MapEntry("sanitizer", "unmapped", None, None, "/x::test_planted[oob_write-cuda]", None, 1499),
        MapEntry("xid", "inside", None, "ledger", "/x::test_planted[oob_write-cuda]", 31, 923),
        MapEntry("sanitizer", "past_end", None, "sanitizer", "/x::test_planted[oob_write-cuda]", None, 1499,
                 ledger_verdict="unmapped"),
    )
    row = judge(catalog.get("oob_write"), "cuda",
                obs(mapping=entries, rerun_ledger="0 allocation(s); CUPTI did not start under "
                                                  "compute-sanitizer (ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)"))
    assert row.mapped == (
        "sanitizer: unmapped [rerun ledger: 0 allocation(s); CUPTI did not start under compute-sanitizer "
        "(ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)]; Xid 31: inside [stress run's ledger, pid 923]; "
        "sanitizer: past_end [compute-sanitizer's nearest-allocation line; the ledger said unmapped (rerun "
        "ledger: 0 allocation(s); CUPTI did not start under compute-sanitizer (ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED))]; "
        "1 Xid page(s) of other processes (concurrent jobs), not this test's")


def test_row_ok_and_render() -> None:
    good = judge(catalog.get("oob_write"), "cuda", obs(san_tests=planted("oob_write"), san_findings=(OOB_HIT,)))
    bad = judge(catalog.get("oob_write"), "cuda", obs(planted_outcome="crashed", san_tests=planted("oob_write"),
                                                      san_findings=(OOB_HIT,)))
    assert good.ok and not bad.ok
    text = render([good, bad])
    assert text.splitlines()[0].startswith("| # | planted fault |") and "1 of 2 rows as expected" in text


def test_empty_workdir_reads_as_not_run(tmp_path: Path) -> None:
    rows = rows_for(tmp_path)
    assert len(rows) == sum(len(f.flavours) for f in catalog.CATALOG)
    assert all(r.plain == "not run" and not r.ok for r in rows)


# --- the real capture of the H200's first validation run (tests/data/validate/PROVENANCE.md) ----

def _first_rows() -> dict[str, object]:
    return {f"{r.name}-{r.flavour}": r for r in rows_for(FIRST) if (FIRST / f"{r.name}-{r.flavour}").is_dir()}


def test_first_run_capture_judged_on_faulthunt_sanitize() -> None:
    rows = _first_rows()
    assert set(rows) == {"oob_write-cuda", "oob_write-numba", "stale_cache-cuda", "arch_gap-cuda",
                         "stream_ordered-cuda"}
    oob = rows["oob_write-cuda"]
    # the verdict rests on faulthunt sanitize's finding, the direct run's failure is said apart
    assert oob.sanitizer == "yes: memcheck: max_reduce_off_by_one at planted.cu:13"
    assert oob.direct == "did not start (bug and twin): CUDA_ERROR_NOT_INITIALIZED, no instrumented API call"
    assert oob.ok and not oob.direct_started
    assert "CUPTI did not start under compute-sanitizer (ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)" in oob.mapped
    assert "2 Xid page(s) of other processes" in oob.mapped
    numba = rows["oob_write-numba"]
    assert numba.sanitizer == "yes: memcheck: max_reduce_off_by_one at numba_kernels.py:24"
    assert numba.direct == "yes: bug line seen; twin memcheck clean" and numba.ok
    # what the first judge called "the sanitizer reported something" was a run that never started
    stale = rows["stale_cache-cuda"]
    assert stale.sanitizer == "yes: clean, as expected (memcheck: 0 findings)" and stale.ok
    # the real miss of that run: faulthunt sanitize's default --report-api-errors no
    gap = rows["arch_gap-cuda"]
    assert gap.sanitizer == "NO: memcheck: 0 findings" and not gap.ok
    assert gap.direct == "yes: bug line seen; twin memcheck clean"
    so = rows["stream_ordered-cuda"]
    assert so.direct.startswith("did not start (bug and twin): compute-sanitizer refused the argument of "
                                "--track-stream-ordered-races")
    assert so.sanitizer == "yes: memcheck: scale at planted.cu:45" and so.ok


def test_first_run_capture_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json
    import shutil

    from faulthunt.kernels.validate import main

    work = tmp_path / "w"
    shutil.copytree(FIRST, work)
    assert main([str(work)]) == 1   # the 14 folders left out of the capture read as not run
    out = capsys.readouterr().out
    assert "row(s) whose direct compute-sanitizer run did not start" in out
    table = json.loads((work / "table.json").read_text())
    assert {r["name"] + "-" + r["flavour"] for r in table if r["ok"]} == {
        "oob_write-cuda", "oob_write-numba", "stale_cache-cuda", "stream_ordered-cuda"}


@pytest.mark.slow
def test_real_stress_run_folder_is_read(tmp_path: Path) -> None:
    folder = tmp_path / "stale_cache-numba"
    env = {**os.environ, "FAULTHUNT_KERNELS_BACKEND": "sim", "PYTHONWARNINGS": "ignore"}
    env.pop("FAULTHUNT_RUN_DIR", None)
    subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-n", "1", "--timeout", "30",
                    "--xid-source", "none", "-q", "-k", "stale_cache-numba", "--run-dir",
                    str(folder / "run"), str(SUITE_DIR), "--", "-p", "no:cacheprovider"],
                   cwd=tmp_path, env=env, capture_output=True, timeout=300)
    row = next(r for r in rows_for(tmp_path) if r.name == "stale_cache" and r.flavour == "numba")
    assert row.plain == "yes: failed" and row.twin.startswith("yes: plain passed") and row.xid == "yes: none"


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(text=st.text(), rc=st.one_of(st.none(), st.integers(-300, 300)),
       kernel=st.one_of(st.none(), st.text(max_size=40)), line=st.one_of(st.none(), st.integers(-5, 10**6)))
def test_judge_never_raises_on_junk(text: str, rc: int | None, kernel: str | None, line: int | None) -> None:
    f = finding("oob_write", kernel, line, text)
    for name in ("oob_write", "arch_gap", "stale_cache"):
        row = judge(catalog.get(name), "cuda", obs(san_bug_text=text, san_bug_rc=rc, san_twin_text=text,
                                                   san_twin_rc=rc, san_tests=both(name), san_findings=(f,)))
        assert row.direct and row.sanitizer and isinstance(row.ok, bool)
