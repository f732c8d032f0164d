"""Shared test helpers. GPU-only tests are marked ``gpu`` and skip with a reason without one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

pytest_plugins = ["pytester"]


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
