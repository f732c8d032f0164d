"""The H200 captures of scripts/gpu/timeout_sources.sh (tests/data/stress/h200_timeout_sources,
PROVENANCE.md there): numba-cuda's tests under `faulthunt stress` keep the suite's own timeout,
however the suite set it. Replayed here: each capture's line is what the code says for that
source, and the run went as the script checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from faulthunt.stress.options import Timeout

DATA = Path(__file__).parent / "data" / "stress" / "h200_timeout_sources"


@pytest.mark.parametrize(("case", "seconds", "source"), [
    ("toml", 77.0, "pytest.toml"), ("addopts", 78.0, "pytest.ini addopts"),
    ("env", 79.0, "PYTEST_TIMEOUT"), ("args", 80.0, "pytest arguments")])
def test_each_way_a_suite_sets_its_timeout_was_kept(case, seconds, source):
    text = (DATA / f"{case}.txt").read_text()
    line = Timeout(seconds, source).text()
    assert f"\n{line}\n" in text and f"timeout: {line}\n" in text
    assert "26 test runs: 26 passed, 0 failing" in text and "stress rc=0" in text
    ours = [] if case != "args" else ["'80'"]  # only the user's own --timeout 80
    assert f"--timeout values in pytest's command: [{', '.join(ours)}]" in text
    assert text.rstrip().endswith("OK")


def test_a_timeout_pytest_timeout_rejects_is_said_in_pytests_words():
    """pytest-timeout 2.5 types `timeout` a float in a TOML file: a string there stops pytest
    before any test; the no-test line carries pytest's own error."""
    text = (DATA / "toml_string_pytest_timeout_2.5.txt").read_text()
    assert ("no test ran: pytest stopped on an internal error (TypeError: "
            in text and "config option 'timeout' expects a float, got str: '77'" in text)
    assert "stress rc=3" in text and "UNEXPECTED" in text
