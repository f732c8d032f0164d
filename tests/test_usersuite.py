"""Real `faulthunt stress` runs on tests/usersuite, a suite written as users write theirs: odd
parameter ids, unittest classes with subTest, doctests, tests with child processes, a seeded
flaky test and (behind USERSUITE_BROKEN=1) a module that does not import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.records.events import ChildProcess
from faulthunt.rundir import RunDir

SUITE = Path(__file__).parent / "usersuite"
#: with --count 2 this seed fails the flaky test's second run only (test_flaky.py says how)
FLAKY_SEED = "4"


def _stress(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "faulthunt", "stress", *args], cwd=tmp_path,
                          env=full_env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_usersuite_every_test_repeats_and_every_id_survives(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _stress(["-n", "2", "--count", "2", "--timeout", "60", "--run-dir", str(run),
                    "--xid-source", "none", str(SUITE)], tmp_path, USERSUITE_FLAKY_SEED=FLAKY_SEED)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the flaky test failed once
    summary = json.loads((run / "summary.json").read_text())
    runs = {r["base_nodeid"]: (r["runs"], r["failures"]) for r in summary["by_test"]}
    assert runs == {
        "ops.py::ops": (2, 0), "ops.py::ops.scale": (2, 0),
        "test_ids.py::test_odd[x/y]": (2, 0), "test_ids.py::test_odd[a b]": (2, 0),
        "test_ids.py::test_odd[[bold]]": (2, 0),
        "test_ids.py::test_odd[<script>alert(1)</script>]": (2, 0),
        "test_unit.py::TestScale::test_each_factor": (2, 0),
        "test_unit.py::TestScale::test_empty": (2, 0),
        "test_procs.py::test_subprocess_helper": (2, 0),
        "test_procs.py::test_multiprocessing_pool": (2, 0),
        "test_flaky.py::test_sometimes": (2, 1),
    }
    (fail,) = summary["failures"]
    assert fail["nodeid"] == "test_flaky.py::test_sometimes[2-2]"
    assert fail["message"].startswith("AssertionError: flaky: draw 0.259 below 0.3 (seed 4)")
    assert summary["subtests"] == {"passed": 6}  # 3 factors, 2 runs
    assert summary["workers"]["slots"] == 2 and summary["workers"]["restarts"] == 0
    kids = [e for e in RunDir(run).worker_events() if isinstance(e, ChildProcess)]
    by_test = {k.base_nodeid for k in kids}
    assert {"test_procs.py::test_subprocess_helper",
            "test_procs.py::test_multiprocessing_pool"} <= by_test
    assert any("2 DoctestItem, 2 TestCaseFunction" in n for n in summary["notes"])


@pytest.mark.slow
def test_usersuite_collection_error_is_a_failure_of_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _stress(["-n", "2", "--run-dir", str(run), "--xid-source", "none", str(SUITE)],
                   tmp_path, USERSUITE_BROKEN="1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["collection_errors"] == [{
        "nodeid": "test_broken.py",
        "message": "ModuleNotFoundError: No module named 'a_module_that_is_not_installed'"}]
    assert summary["failures"] == [] and summary["tests_run"] == 11  # the rest still ran
