"""Three real stress runs of the H200 round 3 (2026-12-03), replayed through today's analysis.

tests/data/stress/h200_children, h200_numba_suite and h200_sigterm (each with its PROVENANCE.md)
hold run directories written on the H200. Each is fed again through the stress analysis that
wrote its summary.json (`faulthunt.stress.analyse.analyse`): the Xids re-parsed from the run's
own kernel-log lines, pytest's status and output re-read from reproducer.log, the stop signal
the live run saw. The summary it gives must be the recorded one, key for key; the facts the
docs quote (child attribution, 227 tests twice, stopped by SIGTERM with 4 interrupted) are then
asserted on that replayed summary, not on the stored file.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from faulthunt import cli
from faulthunt.kernlog.jsonl import event_json
from faulthunt.kernlog.parse import parse_text
from faulthunt.report import build_model, render
from faulthunt.rundir import RunDir
from faulthunt.stress.analyse import StressResult, analyse
from faulthunt.stress.options import Timeout
from faulthunt.stress.output import PytestOutput

D = Path(__file__).parent / "data" / "stress"
CHILDREN = D / "h200_children" / "run"
NUMBA = D / "h200_numba_suite" / "run"
SIGTERM = D / "h200_sigterm" / "run"


def _recorded(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


def replay(path: Path, stopped_by: int | None = None) -> StressResult:
    """The run analysed again. What only the live run knew comes from the run's own files:
    pytest's output (reproducer.log), its exit status and timeout (summary.json, as the live run
    saw them) and the Xids (the kernel-log lines it captured, parsed again)."""
    run, old = RunDir(path), _recorded(path)
    output = PytestOutput()
    for line in (run.text("reproducer.log") or "").splitlines():
        output.feed(line)
    xids = [json.loads(event_json(e)) for e in parse_text(run.text("kmsg_added.txt") or "")]
    timeout = Timeout(old["timeout"]["seconds"], old["timeout"]["from"])
    workers = json.loads((path / "run.json").read_text())["options"]["workers"]
    opts = SimpleNamespace(guard=None, keyword=None, pytest_args=[], workers=workers)
    got = SimpleNamespace(xids=xids, stopped_by=stopped_by, disk_full=(), output=output,
                          pytest_status=old["pytest_exit_status"],
                          plan=SimpleNamespace(timeout=timeout, opts=opts), output_dropped=0,
                          leftovers=(), kernel_log=old["kernel_log"], warnings=())
    return analyse(run, got)  # type: ignore[arg-type]  # the fields analyse reads


@pytest.mark.parametrize(("path", "stopped_by"), [(CHILDREN, None), (NUMBA, None),
                                                  (SIGTERM, signal.SIGTERM)],
                         ids=["children", "numba_suite", "sigterm"])
def test_the_replayed_summary_is_the_recorded_one(path: Path, stopped_by: int | None) -> None:
    assert RunDir(path).problems() == ()
    result = replay(path, stopped_by)
    recorded = _recorded(path)
    if path == NUMBA:
        # Recorded before rates left out the runs that could not fail: the 4 skipped runs no
        # longer count among the device's runs (runs, unpinned_runs 454 -> 450); the rest is as
        # recorded.
        assert [d["runs"] for d in recorded["by_device"]] == [454]
        assert [d["runs"] for d in result.summary["by_device"]] == [450]
        recorded["by_device"] = [{**d, "runs": 450, "unpinned_runs": 450} for d in recorded["by_device"]]
    assert result.summary == recorded
    assert result.exit_status == json.loads((path / "run.json").read_text())["exit_status"]


def test_each_xid31_of_a_child_goes_to_the_test_that_started_it() -> None:
    result = replay(CHILDREN)
    xids = result.summary["xids"]
    got = {(x["pid"], x["worker"], x["worker_pid"], x["attributed_by"], x["nodeid"]) for x in xids}
    assert got == {
        (4353, "gw1", 4233, "child+kernel_time", "test_child_fault.py::test_subprocess_child[2-4]"),
        (4456, "gw2", 4395, "child+kernel_time", "test_child_fault.py::test_multiprocessing_child[4-4]")}
    for x in xids:  # the Xid's pid is no worker's: only the child record can name the test
        assert x["xid"] == 31 and x["process"] == "python3"
        assert x["attribution"] == (f"child pid {x['pid']} (python3) of worker {x['worker']} "
                                    f"(pid {x['worker_pid']}), started by {x['nodeid']}")
        assert x["attribution"] in (D / "h200_children" / "children.txt").read_text()
    assert sorted(f["nodeid"] for f in result.summary["failures"]) == sorted(x["nodeid"] for x in xids)
    workers = {s.pid for s in RunDir(CHILDREN).spans()}
    assert not workers & {4353, 4456}
    children = [c for s in RunDir(CHILDREN).spans() for c in s.children]
    assert len(children) == 16  # "children recorded: 16"
    assert {4353, 4456} <= {c.child_pid for c in children}


def test_the_childrens_xids_are_mapped_as_recorded() -> None:
    """Their pids have no ledger (the children did not load faulthunt): mapping says so."""
    result = replay(CHILDREN)
    assert result.mapping is not None and result.mapping_error is None
    assert list(result.mapping) == json.loads((CHILDREN / "mapping.json").read_text())
    assert all(m["verdict"] is None and "has no records for pid" in m["reason"] for m in result.mapping)


def test_every_numba_cuda_test_ran_twice() -> None:
    s = replay(NUMBA).summary
    assert s["tests_run"] == 454 and s["outcomes"] == {"passed": 450, "skipped": 4}
    # every one of 227 tests ran twice (by_test's `runs` leaves skips out: 2 tests skip both times)
    assert len(s["by_test"]) == 227 and all(sum(t["outcomes"].values()) == 2 for t in s["by_test"])
    assert sorted(t["runs"] for t in s["by_test"] if t["runs"] != 2) == [0, 0]
    assert s["xids"] == [] and s["failures"] == []
    assert s["workers"]["slots"] == 8 and s["workers"]["restarts"] == 0
    assert s["subtests"] == {"passed": 84}
    assert ("faulthunt repeated 226 item(s) 2 times that pytest-repeat leaves alone "
            "(226 TestCaseFunction)") in s["notes"]
    # the plain `pytest -n 8 --count 2` beside it ran each unittest item once: 226 + 2 = 228
    numba_txt = (D / "h200_numba_suite" / "numba.txt").read_text()
    assert "226 passed, 2 skipped, 42 subtests passed in 24.95s" in numba_txt
    assert "wall: faulthunt stress 38.9 s; plain pytest: in 24.95s" in numba_txt


def test_the_sigterm_run_says_it_was_stopped_and_what_was_running() -> None:
    s = replay(SIGTERM, signal.SIGTERM).summary
    assert s["stopped_by"] == "SIGTERM" and s["exit_status"] == 143
    assert sorted(s["interrupted"]) == [f"test_busy.py::test_busy_gpu[{i}-4]" for i in range(1, 5)]
    assert s["outcomes"] == {"interrupted": 4} and s["xids"] == []
    # the workers recorded each running test's end as interrupted themselves; the signal the
    # controller saw is what makes the run "stopped by SIGTERM" with exit status 128 + 15
    assert all(s.outcome == "interrupted" and s.ended for s in RunDir(SIGTERM).spans())
    unstopped = replay(SIGTERM)
    assert unstopped.summary["stopped_by"] is None and unstopped.exit_status == 1
    check = (D / "h200_sigterm" / "check.txt").read_text()
    assert "processes of the run left: []" in check and "GPU compute apps of the run's pids after it ended: []" in check


@pytest.mark.parametrize("path", [CHILDREN, NUMBA, SIGTERM], ids=["children", "numba_suite", "sigterm"])
def test_the_report_renders(path: Path, tmp_path: Path) -> None:
    for fmt in ("md", "json", "html"):
        assert render(build_model(path), fmt)
    run = tmp_path / "run"
    shutil.copytree(path, run)
    assert cli.main(["report", "--run", str(run), "--format", "all", "-o", str(tmp_path / "out")]) == 0
