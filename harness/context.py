"""Process-wide "what is running now" state, shared by the pytest plugin and the ledger.

The plugin sets the current test before each test and clears it after; the ledger (and anything
else that records events inside a worker) reads it so that every record names the test that was
running. Plain module globals: a worker runs one test at a time.
"""

from __future__ import annotations

import os

current_nodeid: str | None = None
current_base_nodeid: str | None = None
worker_id: str = os.environ.get("PYTEST_XDIST_WORKER", "main")


def set_current(nodeid: str | None, base_nodeid: str | None) -> None:
    """Record the test now running in this process (``None`` between tests)."""
    global current_nodeid, current_base_nodeid
    current_nodeid = nodeid
    current_base_nodeid = base_nodeid
