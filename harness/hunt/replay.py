"""pytest plugin of isolate's probes: run the ``--faulthunt-id`` tests in the order they are named.

``faulthunt.nodeids.pytest_selection`` keeps exactly the named tests but in collection order; a
probe replays a worker's history, where the order is the point (the polluter before the test it
pollutes, a parameter of one test after another test). Loaded only by the probe
(``-p faulthunt.hunt.replay``); named tests move to the front in the order given, others keep
their place after them.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = {nodeid: i for i, nodeid in enumerate(config.getoption("faulthunt_ids", None) or ())}
    items.sort(key=lambda item: order.get(item.nodeid, len(order)))
