"""A CPU rehearsal of scripts/gpu/suites_validate.sh: its suites and checkers, run the way the
script runs them, with the GPU replaced by what stands in for it here.

(a) scripts/gpu/suites_child in its simulation mode (SUITES_SIM_XID_LOG): the wild child appends
    the Xid 31 line the driver would print, with its own pid, to a file read as the kernel log;
    check_children.py must find every Xid attributed to the test that started the child.
(b) numba's own unittest-style cudapy tests (shipped in numba, the package numba-cuda grew from)
    on numba's CUDA simulator, with scripts/gpu/suites_numba's conftest: check_numba.py must find
    every test run --count times and its subtests counted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "scripts" / "gpu"


def _run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=400)


@pytest.mark.slow
def test_child_xids_rehearsal(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    run = tmp_path / "children"
    stress = _run([sys.executable, "-m", "faulthunt", "stress", "-n", "2", "--count", "4",
                   "--timeout", "60", "--xid-source", f"file:{log}", "--run-dir", str(run),
                   str(GPU / "suites_child"), "--", "-p", "no:cacheprovider"], tmp_path,
                  SUITES_SIM_XID_LOG=str(log))
    assert stress.returncode == 1, stress.stdout + stress.stderr  # the two wild runs failed
    check = _run([sys.executable, str(GPU / "suites_child" / "check_children.py"), str(run)],
                 tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count("child+kernel_time -> test_child_fault.py::") == 2
    summary = json.loads((run / "summary.json").read_text())
    # the child's CUDA error in the test's failure text did not make faulthunt recycle a worker
    # whose own process never loaded the CUDA driver
    assert summary["workers"]["recycled"] == 0


@pytest.mark.slow
def test_numba_unittest_suite_rehearsal(tmp_path: Path) -> None:
    numba_tests = pytest.importorskip("numba.cuda.tests")
    suite = tmp_path / "numba_suite"
    suite.mkdir()
    for name in ("conftest.py", "pytest.ini"):
        shutil.copy(GPU / "suites_numba" / name, suite)
    shutil.copy(Path(numba_tests.__file__).parent / "cudapy" / "test_array.py", suite)
    run = tmp_path / "numba_run"
    stress = _run([sys.executable, "-m", "faulthunt", "stress", "-n", "2", "--count", "2",
                   "--timeout", "120", "--xid-source", "none", "--run-dir", str(run), ".", "--",
                   "-p", "no:cacheprovider"], suite, NUMBA_ENABLE_CUDASIM="1")
    assert stress.returncode == 0, stress.stdout[-3000:] + stress.stderr[-3000:]
    check = _run([sys.executable, str(GPU / "suites_numba" / "check_numba.py"), str(run), "2"],
                 tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["subtests"].get("passed", 0) > 0
    assert all(sum(r["outcomes"].values()) == 2 for r in summary["by_test"])
