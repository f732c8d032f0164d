"""Process-wide "what is running now" state, shared by the pytest plugin and the ledger.

The plugin sets the current test before each test and clears it after; the ledger (and anything
else that records events inside a worker) reads it so that every record names the test that was
running. Plain module globals: a worker runs one test at a time. Listeners (:func:`add_listener`)
hear each change: the ledger's compiled route and its activity records, which arrive after the
fact, learn the test running at a time from them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

current_nodeid: str | None = None
current_base_nodeid: str | None = None
worker_id: str = os.environ.get("PYTEST_XDIST_WORKER", "main")
_listeners: list[Callable[[str | None], None]] = []


def set_current(nodeid: str | None, base_nodeid: str | None) -> None:
    """Record the test now running in this process (``None`` between tests)."""
    global current_nodeid, current_base_nodeid
    current_nodeid = nodeid
    current_base_nodeid = base_nodeid
    for fn in _listeners:
        try:
            fn(nodeid)
        except Exception:  # noqa: BLE001 - a listener must never fail the test it is told about
            pass


def add_listener(fn: Callable[[str | None], None]) -> None:
    """Call ``fn(nodeid)`` at every :func:`set_current` from now on."""
    if fn not in _listeners:
        _listeners.append(fn)


def remove_listener(fn: Callable[[str | None], None]) -> None:
    if fn in _listeners:
        _listeners.remove(fn)
