"""Round 8's H200 run of ``scripts/gpu/suites_validate.sh`` on main at 5ee114b: the plugin as round 7
left it (nothing of faulthunt imported at load, the recorders imported at configure) on a real
public suite and on Xids from tests' child processes, replayed with today's code.

The captures are tests/data/stress/h200_children_r8 and h200_numba_suite_r8 (PROVENANCE.md in
tests/data/stress/). Checked: the replayed summary is the recorded one; each child's Xid 31 goes to
the test that started the child; every one of numba-cuda's 227 tests ran twice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faulthunt.rundir import RunDir
from test_stress_h200_round3 import replay

D = Path(__file__).parent / "data" / "stress"
CHILDREN = D / "h200_children_r8" / "run"
NUMBA = D / "h200_numba_suite_r8" / "run"


@pytest.mark.parametrize("path", [CHILDREN, NUMBA], ids=["children", "numba_suite"])
def test_the_replayed_summary_is_the_recorded_one(path: Path) -> None:
    assert RunDir(path).problems() == ()
    result = replay(path)
    assert result.summary == json.loads((path / "summary.json").read_text())
    assert result.exit_status == json.loads((path / "run.json").read_text())["exit_status"]


def test_each_xid31_of_a_child_goes_to_the_test_that_started_it() -> None:
    xids = replay(CHILDREN).summary["xids"]
    got = {(x["pid"], x["worker"], x["worker_pid"], x["attributed_by"], x["nodeid"]) for x in xids}
    assert got == {
        (740, "gw0", 627, "child+kernel_time", "test_child_fault.py::test_subprocess_child[2-4]"),
        (839, "gw2", 781, "child+kernel_time", "test_child_fault.py::test_multiprocessing_child[4-4]")}
    printed = (D / "h200_children_r8" / "children.txt").read_text()
    for x in xids:
        assert x["xid"] == 31 and x["attribution"] in printed
    assert len([c for s in RunDir(CHILDREN).spans() for c in s.children]) == 16


def test_every_numba_cuda_test_ran_twice() -> None:
    s = replay(NUMBA).summary
    assert s["tests_run"] == 454 and s["outcomes"] == {"passed": 450, "skipped": 4}
    assert len(s["by_test"]) == 227 and all(sum(t["outcomes"].values()) == 2 for t in s["by_test"])
    assert s["xids"] == [] and s["failures"] == [] and s["subtests"] == {"passed": 84}
    assert s["workers"]["slots"] == 8 and s["workers"]["restarts"] == 0
