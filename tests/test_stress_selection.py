"""Real `faulthunt stress` runs of a small suite, as a new user tried them: full node ids mixed
in one run, an id that matches no test, and a conftest.py that raises at import."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from stresscli import run_stress as _stress

pytestmark = pytest.mark.slow

ODD = """
import unittest
import pytest

@pytest.mark.parametrize("x", ["a b", "x/y", "bold"])
def test_ids(x):
    pass

class TestUnit(unittest.TestCase):
    def test_fail(self):
        self.fail("no")
    def test_ok(self):
        pass
"""


def _summary(cwd: Path) -> dict[str, Any]:
    return json.loads((cwd / "run" / "summary.json").read_text())


def test_full_ids_mix_parametrized_and_class_methods(tmp_path):
    """D10: both are full ids; each runs --count times, nothing else runs."""
    (tmp_path / "test_odd.py").write_text(ODD)
    proc = _stress(["--count", "2", "test_odd.py::test_ids[a b]",
                    "test_odd.py::TestUnit::test_fail"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert _summary(tmp_path)["outcomes"] == {"failed": 2, "passed": 2}


def test_a_path_beside_parametrized_ids_is_still_refused(tmp_path):
    (tmp_path / "test_odd.py").write_text(ODD)
    proc = _stress(["test_odd.py::test_ids[a b]", "test_odd.py"], tmp_path)
    assert proc.returncode == 2
    assert "test paths (test_odd.py) cannot be mixed" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("workers", ["0", "1"])
def test_an_id_matching_no_test_is_named(tmp_path, workers):
    """D11: the run names the id that matched nothing, not "no tests ran"."""
    (tmp_path / "test_odd.py").write_text(ODD)
    proc = _stress(["-n", workers, "test_odd.py::test_ids[nonexistent]"], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert ("no test ran: pytest: test id 'test_odd.py::test_ids[nonexistent]' matches no "
            "collected test") in proc.stdout, proc.stdout


def test_conftest_that_raises_at_import_is_named(tmp_path):
    """D14: the reason names the conftest and its error line, not "said nothing about why"."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        raise RuntimeError("conftest boom")
    """))
    (tmp_path / "test_a.py").write_text("def test_a(): pass\n")
    proc = _stress([], tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    conftest = tmp_path / "conftest.py"
    assert (f"no test ran: pytest could not import {conftest}: RuntimeError: conftest boom"
            in proc.stdout), proc.stdout
