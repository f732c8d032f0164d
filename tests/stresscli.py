"""`faulthunt stress` as a user runs it, in a subprocess, for tests that drive whole runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_stress(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``faulthunt stress --xid-source none --run-dir run ARGS`` in ``cwd``, outside any run the
    test process itself records into (FAULTHUNT_RUN_DIR dropped)."""
    env = dict(os.environ)
    env.pop("FAULTHUNT_RUN_DIR", None)
    return subprocess.run([sys.executable, "-m", "faulthunt", "stress", "--xid-source", "none",
                           "--run-dir", "run", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=180)
