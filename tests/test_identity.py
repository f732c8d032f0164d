from __future__ import annotations

import json
from pathlib import Path

import pytest

from faulthunt import identity

DATA = Path(__file__).parent / "data" / "h200"


def test_collect_basic_without_gpu_is_complete_and_json() -> None:
    info = identity.collect_basic()
    for key in ("host", "os", "kernel", "python", "gpus", "gpu_note", "driver", "driver_module",
                "cuda_driver", "nvml", "packages"):
        assert key in info, key
    json.dumps(info)  # run.json/identity.json must be able to hold it
    assert isinstance(info["gpus"], list)
    if not info["gpus"]:
        assert info["gpu_note"]
    assert info["packages"].get("pytest")


def test_collect_basic_survives_missing_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    # nvidia-ml-py absent: `import pynvml` raises ImportError and find_spec finds nothing
    monkeypatch.setitem(sys.modules, "pynvml", None)
    info = identity.collect_basic()
    assert info["gpus"] == [] and info["nvml"] is False
    assert "nvidia-ml-py" in info["gpu_note"]


def test_driver_banner_from_the_h200() -> None:
    # identity.txt is the H200 capture: `cat /proc/driver/nvidia/version` is part of it.
    text = (DATA / "identity.txt").read_text()
    parsed = identity.parse_driver_banner(text)
    assert parsed["version"] == "580.159.04"
    assert parsed["module"] == "open"


@pytest.mark.parametrize("text,module,version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n",
     "proprietary", "535.104.05"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build\n",
     "open", "550.54.14"),
    ("", None, None),
    ("\x00\xff garbage\n", None, None),
    ("NVRM version:\n", None, None),
])
def test_driver_banner_table(text: str, module: str | None, version: str | None) -> None:
    parsed = identity.parse_driver_banner(text)
    assert parsed["module"] == module and parsed["version"] == version


@pytest.mark.parametrize("encoded,text", [(13000, "13.0"), (12040, "12.4"), (11080, "11.8"),
                                          (0, None), (None, None)])
def test_cuda_version_text(encoded: int | None, text: str | None) -> None:
    assert identity.cuda_version_text(encoded) == text


def test_format_basic_mentions_missing_gpu() -> None:
    info = identity.collect_basic()
    text = identity.format_basic(info)
    assert "host:" in text
    if not info["gpus"]:
        assert "gpus:        none" in text
