"""Importing a script of scripts/gpu/ in a test (they are scripts, not a package)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

GPU_SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "gpu"


def load_gpu_script(name: str) -> ModuleType:
    """``scripts/gpu/<name>.py`` as a module, registered under ``name``."""
    spec = importlib.util.spec_from_file_location(name, GPU_SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod
