"""Real `faulthunt stress` runs of small suites, as a new user tried them: what the run says
when a fixture raises, when pytest itself dies or stops at a collection error under ``-n 0``,
and when nothing matched the selection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def _stress(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("FAULTHUNT_RUN_DIR", None)
    return subprocess.run([sys.executable, "-m", "faulthunt", "stress", "--xid-source", "none",
                           "--run-dir", "run", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180)


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
