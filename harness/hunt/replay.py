"""pytest plugin of isolate's probes: run the ``--faulthunt-id`` tests in the order they are named.

``faulthunt.nodeids.pytest_selection`` keeps exactly the named tests but in collection order; a
probe replays a worker's history, where the order is the point (the polluter before the test it
pollutes, a parameter of one test after another test). Loaded only by the probe
(``-p faulthunt.hunt.replay``); named tests move to the front in the order given, others keep
their place after them.

A probe's process may die inside a test (a SIGSEGV, ``os.abort()``, a native crash): pytest then
prints no summary. Each test's id is appended to the file named by :data:`TRACE_ENV` before it
runs, so the probe can tell the target that took its process down from a predecessor that did.
"""

from __future__ import annotations

import os

import pytest

#: the file a probe reads back: one started node id a line, the last one running when it died
TRACE_ENV = "FAULTHUNT_PROBE_TRACE"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = {nodeid: i for i, nodeid in enumerate(config.getoption("faulthunt_ids", None) or ())}
    items.sort(key=lambda item: order.get(item.nodeid, len(order)))


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    path = os.environ.get(TRACE_ENV)
    if path:  # written and closed before the test runs: a crash in it keeps the line
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(nodeid.replace("\n", " ") + "\n")
