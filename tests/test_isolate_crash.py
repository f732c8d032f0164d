"""isolate on a test that takes its process down (a SIGSEGV, os.abort()): the crash is the probe's
failure, never "pytest exited -11 without running the test"; a predecessor that crashes is named."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from faulthunt.errors import FaulthuntError
from faulthunt.hunt.isolate import isolate, probe_argv, pytest_probe

SUITE = '''
import os

import pytest

_CACHE = {}


def test_segv():
    if os.environ.get("CRASH_ONLY_AFTER") and "armed" not in _CACHE:
        return
    import ctypes
    ctypes.string_at(0)


def test_abort():
    os.abort()


def test_arm():
    _CACHE["armed"] = 1


def test_ok():
    pass


def test_hang():
    import time
    time.sleep(3600)
'''


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="signals as on Linux")
@pytest.mark.parametrize("name", ["test_segv", "test_abort"])
def test_a_crashing_target_counts_as_failing_alone(tmp_path: Path, name: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.py").write_text(SUITE)
    monkeypatch.delenv("CRASH_ONLY_AFTER", raising=False)
    target = f"t.py::{name}"
    res = isolate(target, ["t.py::test_ok"], pytest_probe(target, cwd=tmp_path, repeats=1))
    assert res["alone"] == {"failed": 1, "runs": 1}
    assert res["reading"].startswith("fails alone, every run")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="signals as on Linux")
def test_a_crash_that_needs_a_polluter_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.py").write_text(SUITE)
    monkeypatch.setenv("CRASH_ONLY_AFTER", "1")
    target = "t.py::test_segv"
    res = isolate(target, ["t.py::test_ok", "t.py::test_arm"],
                  pytest_probe(target, cwd=tmp_path, repeats=3))
    assert res["fails_alone"] is False and res["minimal"] == ["t.py::test_arm"]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="signals as on Linux")
def test_a_predecessor_that_crashes_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.py").write_text(SUITE)
    monkeypatch.delenv("CRASH_ONLY_AFTER", raising=False)
    probe = pytest_probe("t.py::test_ok", cwd=tmp_path, repeats=1)
    with pytest.raises(FaulthuntError) as err:
        probe(["t.py::test_abort"])
    assert "killed by SIGABRT while running t.py::test_abort, before t.py::test_ok ran" in err.value.message
    assert "faulthunt isolate t.py::test_abort" in (err.value.fix or "")
    assert os.environ.get("FAULTHUNT_PROBE_TRACE") is None


@pytest.mark.slow
def test_a_hanging_target_ends_at_the_timeout_and_counts_as_failing(tmp_path: Path) -> None:
    # a test that hung in the run used to hang isolate's first probe for good (no per-test timeout)
    (tmp_path / "t.py").write_text(SUITE)
    res = isolate("t.py::test_hang", [], pytest_probe("t.py::test_hang", cwd=tmp_path, repeats=1,
                                                     timeout=1))
    assert res["alone"] == {"failed": 1, "runs": 1}


def test_a_probe_has_a_per_test_timeout(tmp_path: Path) -> None:
    def timeout_of(argv: list[str]) -> str | None:
        return argv[argv.index("--timeout") + 1] if "--timeout" in argv else None

    assert timeout_of(probe_argv("t.py::test_a", [], timeout=7)) == "7"
    assert timeout_of(probe_argv("t.py::test_a", [], timeout=0)) == "0"  # off, as asked
    assert timeout_of(probe_argv("t.py::test_a", [], cwd=tmp_path)) == "300"  # faulthunt's default
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 9\n")
    assert timeout_of(probe_argv("t.py::test_a", [], cwd=tmp_path)) is None  # the suite's own, left to it
    assert "--timeout-method" in probe_argv("t.py::test_a", [], cwd=tmp_path)
