"""Real `faulthunt stress` runs of small suites, as a new user tried them: what the run says
when a fixture raises, when pytest itself dies or stops at a collection error under ``-n 0``,
and when nothing matched the selection."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from stresscli import run_stress as _stress

pytestmark = pytest.mark.slow


def _write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))


def _summary(cwd: Path) -> dict[str, Any]:
    return json.loads((cwd / "run" / "summary.json").read_text())


def test_fixture_errors_are_runs_with_outcome_error_not_collection_errors(tmp_path):
    _write(tmp_path / "test_fx.py", """
        import pytest
        @pytest.fixture
        def broken():
            raise RuntimeError("fixture boom")
        def test_a(broken): pass
        def test_ok(): pass
    """)
    proc = _stress(["--count", "2", "test_fx.py"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "collection error" not in proc.stdout
    summary = _summary(tmp_path)
    assert (summary["collection_error_count"], summary["collection_errors"]) == (0, [])
    assert summary["outcomes"] == {"error": 2, "passed": 2}


def test_no_xdist_crash_says_pytest_died_and_what_never_ran(tmp_path):
    """-n 0: a test that kills pytest itself ends the run; the runs it cut off are said, and the
    one process counts as the crashed worker (it read as a complete 1-test suite)."""
    _write(tmp_path / "test_abort.py", """
        import os
        def test_abort(): os.abort()
    """)
    _write(tmp_path / "test_many.py", "".join(f"def test_p{i}(): pass\n" for i in range(18)))
    proc = _stress(["-n", "0", "--count", "3", "-p", "no:randomly", ".", "--",
                    "--continue-on-collection-errors"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = _summary(tmp_path)
    assert summary["workers"]["crashed"] == 1 and summary["tests_run"] == 1
    said = ("pytest died (SIGABRT) while running test_abort.py::test_abort[1-3], ending the single "
            "pytest process (-n 0): 56 of 57 collected test runs never ran (use -n 1 or more: a "
            "crashed worker is replaced and the rest run)")
    assert summary["stopped_early"] == said
    assert "(crashed 1, hung 0" in proc.stdout and "56 of 57 collected test runs never ran" in proc.stdout
    report = subprocess.run([sys.executable, "-m", "faulthunt", "report", "--run", "run"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    headline = report.stdout.splitlines()[2]
    assert "1 of 1 runs" in headline and f"stopped early: {said}" in headline, report.stdout


def test_no_xdist_stop_at_one_collection_error_says_so_with_the_fix(tmp_path):
    """-n 0: one module of ten fails to import and pytest runs nothing; the reason is that stop,
    not "every collected module failed to import"."""
    for i in range(9):
        _write(tmp_path / f"test_m{i}.py", "def test_a(): pass\n")
    _write(tmp_path / "test_bad.py", "import no_such_module_zz\n")
    proc = _stress(["-n", "0", "."], tmp_path)
    said = ("pytest stopped at 1 collection error (without xdist pytest does not run the rest); "
            "fix it or pass `-- --continue-on-collection-errors`")
    assert _summary(tmp_path)["no_tests_reason"] == said
    assert f"no test ran: {said}" in proc.stdout
    report = subprocess.run([sys.executable, "-m", "faulthunt", "report", "--run", "run"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert f"No test ran: {said}." in report.stdout and "every collected" not in report.stdout


def test_selection_said_faithfully_quoted_and_redacted():
    from faulthunt.stress import StressOptions
    from faulthunt.stress.analyse import SELECTION_CHARS, selection_text

    opts = StressOptions(keyword="a and not b", pytest_args=(
        "--ignore", "dir x/test_broken.py", "-m", "not slow", "--password", "hunter2", "."))
    assert selection_text(opts) == ("-k 'a and not b' --ignore 'dir x/test_broken.py' -m "
                                    "'not slow' --password '<redacted>' .")
    many = selection_text(StressOptions(pytest_args=tuple(f"t{i}.py" for i in range(200))))
    assert len(many) == SELECTION_CHARS and many.endswith("...")


def test_nothing_matched_says_the_options_with_their_values(tmp_path):
    _write(tmp_path / "test_ok.py", "def test_a(): pass\n")
    _write(tmp_path / "test_broken.py", "import no_such_module_zz\n")
    proc = _stress(["-k", "zzznomatch", "--ignore=test_broken.py", "."], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    reason = _summary(tmp_path)["no_tests_reason"]
    assert reason.endswith("(with -k zzznomatch --ignore test_broken.py .)"), reason


def test_an_id_that_names_no_test_under_xdist_gets_the_fix(tmp_path):
    """xdist's workers drop a node id that names no test without a word ("no tests ran"): the
    reason says so and how to find the ids. Without xdist pytest's own "not found" is said."""
    _write(tmp_path / "test_ok.py", "def test_a(): pass\n")
    proc = _stress(["-n", "2", "test_ok.py::test_typo"], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    reason = _summary(tmp_path)["no_tests_reason"]
    assert "(with test_ok.py::test_typo); under xdist pytest does not say" in reason, reason
    assert "python -m pytest --collect-only -q test_ok.py" in reason
    assert "under xdist" in proc.stdout


def test_ids_under_xdist_hint_only_for_positional_ids():
    from faulthunt.stress import StressOptions
    from faulthunt.stress.analyse import _ids_under_xdist

    assert _ids_under_xdist(StressOptions(workers=2, pytest_args=("--deselect", "a.py::t"))) == ""
    assert _ids_under_xdist(StressOptions(workers=0, pytest_args=("a.py::t",))) == ""
    assert "a.py" in _ids_under_xdist(StressOptions(workers=2, pytest_args=("--", "a.py::t")))
    assert "-q 'my dir/a.py'" in _ids_under_xdist(
        StressOptions(workers="auto", pytest_args=("my dir/a.py::t",)))


def test_an_id_pytest_did_not_find_gets_how_to_list_the_ids(tmp_path):
    """Without xdist pytest says `not found: <id>`; the line adds how to list the ids."""
    _write(tmp_path / "test_ok.py", "def test_a(): pass\n")
    proc = _stress(["-n", "0", "test_ok.py::test_typo"], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    reason = _summary(tmp_path)["no_tests_reason"]
    assert reason.startswith("pytest: not found: ") and reason.endswith(
        "test_ok.py::test_typo (fix: list the ids with python -m pytest --collect-only -q "
        "test_ok.py)"), reason
