"""Shared test helpers. GPU-only tests are marked ``gpu`` and skip with a reason without one."""

from __future__ import annotations

import os

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

DATA = Path(__file__).parent / "data"

# Property tests judge what a function returns, never how fast: Hypothesis's defaults (a 200 ms
# deadline for each example, a health check on slow generation) fail on a loaded 2-core CI
# machine. A test's own @settings still sets anything else (its examples, other health checks).
settings.register_profile("faulthunt", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("faulthunt")

pytest_plugins = ["pytester"]

# a user-style suite that tests drive with real `faulthunt stress` runs (tests/test_usersuite.py);
# never part of this suite's own collection (it has failing tests and a module that cannot import)
collect_ignore = ["usersuite"]


def _have_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    from faulthunt import nvml

    return nvml.device_count() > 0


HAVE_GPU = _have_gpu()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; validated on the H200 (docs/validation.md)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def data_dir() -> Path:
    return DATA


#: pytest plugins of the test extra that change what a run does by being installed (test order):
#: kept out of every pytest this suite starts (pytester, faulthunt stress), as pyproject.toml's
#: addopts keep them out of the suite itself; a test that wants one loads it with -p NAME
NO_AUTOLOAD = "-p no:randomly"
# Session-wide too: module- and session-scoped fixtures start pytest (real stress runs) before any
# function-scoped fixture could set it.
os.environ["PYTEST_ADDOPTS"] = " ".join(filter(None, (os.environ.get("PYTEST_ADDOPTS"), NO_AUTOLOAD)))


@pytest.fixture(autouse=True)
def _no_shuffling_plugins(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")  # first: it clears PYTEST_ADDOPTS when it starts
    monkeypatch.setenv("PYTEST_ADDOPTS", NO_AUTOLOAD)
