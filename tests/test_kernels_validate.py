"""The validation table's judging (kernels/validate.py): pure, table-driven, plus one real
work folder made on this CPU by `faulthunt stress` over the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.kernels import SUITE_DIR, catalog
from faulthunt.kernels.validate import Observed, judge, render, rows_for

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "tests" / "data" / "h200"


def obs(**kw: object) -> Observed:
    base = dict(planted_outcome="passed", planted_message="", planted_xids=(), twin_outcome="passed",
                twin_xids=(), san_bug_text=None, san_twin_rc=0, san_twin_text="", findings=None,
                finding_kinds=(), mapping=())
    base.update(kw)
    return Observed(**base)  # type: ignore[arg-type]


REAL_OOB1 = (H200 / "san_memcheck_oob1.txt").read_text()
REAL_WILD = (H200 / "san_memcheck_wild.txt").read_text()
REAL_STREAM_PLAIN = (H200 / "san_memcheck_streamrace_plain.txt").read_text()


@pytest.mark.parametrize("name,o,cell,want", [
    # silent bug: the plain run passes and memcheck names it (real H200 memcheck text)
    ("oob_write", obs(san_bug_text=REAL_OOB1, findings=1), "plain", "yes: passed"),
    ("oob_write", obs(san_bug_text=REAL_OOB1, findings=1), "sanitizer", "yes: memcheck; faulthunt sanitize: 1 finding(s)"),
    ("oob_write", obs(planted_outcome="failed"), "plain", "NO: failed"),
    ("oob_write", obs(san_bug_text="========= ERROR SUMMARY: 0 errors"), "sanitizer", "NO: memcheck"),
    ("oob_write", obs(planted_outcome=None), "plain", "not run"),
    ("oob_write", obs(), "sanitizer", "not run"),
    # wild write: error name in the message and the Xid attributed
    ("wild_write", obs(planted_outcome="failed", planted_message="CUDA_ERROR_ILLEGAL_ADDRESS (700) in cuCtxSynchronize",
                       planted_xids=(31,), san_bug_text=REAL_WILD), "plain", "yes: failed"),
    ("wild_write", obs(planted_outcome="failed", planted_xids=(31, 43)), "xid", "yes: 31, 43"),
    ("wild_write", obs(planted_outcome="failed"), "xid", "NO: none"),
    ("wild_write", obs(planted_outcome="failed", planted_message="AssertionError"), "plain", "NO: failed"),
    # an unexpected Xid on a fault that must leave none
    ("oob_read", obs(planted_xids=(31,)), "xid", "NO: 31"),
    ("oob_read", obs(), "xid", "yes: none"),
    # the stream-ordered race needs its option: plain memcheck's clean output is not the evidence
    ("stream_ordered", obs(san_bug_text=REAL_STREAM_PLAIN), "sanitizer", "NO: memcheck"),
    ("bounded_hang", obs(planted_outcome="hung"), "plain", "yes: hung"),
    ("bounded_hang", obs(planted_outcome="failed"), "plain", "NO: failed"),
    ("stale_cache", obs(planted_outcome="failed", san_bug_text="ERROR SUMMARY: 0 errors"), "sanitizer", "yes: clean, as expected"),
    ("shared_race", obs(planted_outcome="failed"), "plain", "(reported) failed"),
    # twins
    ("oob_write", obs(), "twin", "yes: plain passed, memcheck clean"),
    ("oob_write", obs(san_twin_rc=99), "twin", "NO: plain passed, memcheck NOT clean"),
    ("oob_write", obs(twin_outcome="collateral"), "twin", "NO: plain collateral, memcheck clean"),
    ("oob_write", obs(twin_xids=(31,)), "twin", "NO: plain passed, memcheck clean"),
    ("oob_write", obs(twin_outcome=None), "twin", "not run"),
    # a kernel that could not run (no cuda.core) sees nothing: never a "yes"
    ("stale_cache", obs(planted_outcome="skipped"), "plain", "not run (skipped)"),
    ("stale_cache", obs(planted_outcome="skipped"), "xid", "not run"),
    ("stale_cache", obs(twin_outcome="skipped"), "twin", "not run (skipped)"),
    ("stale_cache", obs(san_bug_text='FAULTHUNT-KERNEL-RESULT {"status": "unavailable"}\n'
                                     "========= ERROR SUMMARY: 0 errors"),
     "sanitizer", "not run (the kernel could not run under it)"),
])
def test_judge(name: str, o: Observed, cell: str, want: str) -> None:
    row = judge(catalog.get(name), "cuda", o)
    assert getattr(row, cell) == want


def test_row_ok_and_render() -> None:
    good = judge(catalog.get("oob_write"), "cuda", obs(san_bug_text=REAL_OOB1))
    bad = judge(catalog.get("oob_write"), "cuda", obs(planted_outcome="crashed", san_bug_text=REAL_OOB1))
    assert good.ok and not bad.ok
    text = render([good, bad])
    assert text.splitlines()[0].startswith("| # | planted fault |") and "1 of 2 rows as expected" in text


def test_empty_workdir_reads_as_not_run(tmp_path: Path) -> None:
    rows = rows_for(tmp_path)
    assert len(rows) == sum(len(f.flavours) for f in catalog.CATALOG)
    assert all(r.plain == "not run" and not r.ok for r in rows)


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
