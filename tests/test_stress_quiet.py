"""``faulthunt stress -q``: one line (outcome counts, the run directory, and what to run next when
the run did not pass), without the renderer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from faulthunt.cli.stress import quiet_line

QUIET = textwrap.dedent('''
    import json, sys
    from faulthunt.cli import main
    status = main(["stress", "-n", "0", "--count", "2", "-q", "--xid-source", "none",
                   "--ledger", "off", "--run-dir", sys.argv[1], "test_mixed.py", "--",
                   "-p", "no:cacheprovider", "-p", "no:randomly"])
    print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
''')


def test_quiet_run_with_failures_says_one_line_and_what_next(tmp_path: Path) -> None:
    (tmp_path / "test_mixed.py").write_text("def test_ok():\n    pass\n\n"
                                            "def test_bad():\n    assert 1 == 2\n")
    (tmp_path / "quiet.py").write_text(QUIET)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAULTHUNT_", "GITHUB_"))}
    run = tmp_path / "odd [run] dir"
    out = subprocess.run([sys.executable, "quiet.py", str(run)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    lines = out.stdout.strip().splitlines()
    got = json.loads(lines[-1])
    assert got["status"] == 1
    [line] = lines[:-1]  # one line, nothing else on stdout
    assert line.startswith("faulthunt stress: 4 test runs: 2 passed, 2 failing, 0 Xids; ")
    assert f"run directory: {run}" in line
    assert f"next: faulthunt report --run '{run}'" in line  # quoted: a path with spaces
    assert str(run / "reproducer.log") in line
    assert not {"rich", "rich.console", "faulthunt.report.terminal",
                "faulthunt.report.model"} & set(got["modules"])


def test_quiet_line_of_a_passing_run_has_no_next_step() -> None:
    summary = {"tests_run": 550, "outcomes": {"passed": 550}, "failures": [], "xids": []}
    assert quiet_line(summary, Path("/r/1"), 0) == (
        "faulthunt stress: 550 test runs: 550 passed, 0 failing, 0 Xids; run directory: /r/1")


def test_quiet_line_counts_xids_collection_errors_and_a_stop() -> None:
    summary = {"tests_run": 1, "outcomes": {"passed": 0}, "failures": [{}], "xids": [{}],
               "collection_errors": [{}, {}], "collection_error_count": 3,
               "stopped_early": "SIGINT"}
    line = quiet_line(summary, Path("/r/2"), 130)
    assert line.startswith("faulthunt stress: 1 test run: 0 passed, 1 failing, 1 Xid, "
                           "3 collection errors; stopped early: SIGINT; run directory: /r/2; "
                           "next: faulthunt report --run /r/2 ")


def test_quiet_line_of_a_run_stopped_by_a_signal_says_so() -> None:
    """A stop before any test ran is the reason for "0 test runs" (summary.json's stopped_by)."""
    summary = {"tests_run": 0, "outcomes": {}, "failures": [], "xids": [], "stopped_by": "SIGTERM"}
    line = quiet_line(summary, Path("/r/5"), 143)
    assert line.startswith("faulthunt stress: 0 test runs: 0 passed, 0 failing, 0 Xids; stopped by "
                           "SIGTERM: pytest and its workers were ended; run directory: /r/5; next:")


def test_quiet_line_of_an_empty_or_damaged_summary_still_names_the_run() -> None:
    line = quiet_line({"outcomes": None, "failures": None}, Path("/r/3"), 2)
    assert line.startswith("faulthunt stress: 0 test runs: 0 passed, 0 failing, 0 Xids; "
                           "run directory: /r/3; next:")


def test_quiet_line_of_a_run_that_ran_nothing_says_why() -> None:
    summary = {"tests_run": 0, "outcomes": {}, "failures": [], "xids": [],
               "no_tests_reason": "pytest: test id 'test_odd.py::test_ids[nope]' matches no collected test"}
    line = quiet_line(summary, Path("/r/4"), 2)
    assert ("0 test runs: 0 passed, 0 failing, 0 Xids; run directory: /r/4; no test ran: pytest: test id "
            "'test_odd.py::test_ids[nope]' matches no collected test (full output: /r/4/reproducer.log); "
            "next: faulthunt report --run /r/4") in line
