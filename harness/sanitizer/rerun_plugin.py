"""The pytest side of a sanitizer rerun, loaded with ``-p faulthunt.sanitizer.rerun_plugin``.

Two options, both written by ``faulthunt sanitize`` and read by nothing else:

- ``--faulthunt-pidfile=PATH``: the pytest process writes its pid there. compute-sanitizer sits
  between ``faulthunt sanitize`` and pytest, so the rerun cannot know pytest's pid otherwise; with
  it, the rerun's own test spans (``sanitizer/run/events/main-<pid>.jsonl``) say what each test of
  *this* run did, even with several sanitizer processes running at once.
- ``--faulthunt-order=PATH``: a JSON list of node ids; the selected tests run in that order. pytest
  runs items in collection order, and a stress worker under xdist ran its tests in whatever order
  the scheduler sent them, so replaying a worker's sequence (``--with-predecessors``) needs an
  explicit order. The hook wraps every other ``pytest_collection_modifyitems`` (pytest-randomly,
  ordering plugins, faulthunt's own ``--faulthunt-id`` selection) and sorts last.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from pathlib import Path

import pytest

PIDFILE_OPTION = "--faulthunt-pidfile"
ORDER_OPTION = "--faulthunt-order"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faulthunt-rerun", "faulthunt: sanitizer reruns")
    group.addoption(PIDFILE_OPTION, dest="faulthunt_pidfile", default=None, metavar="PATH",
                    help="write this pytest process's pid to PATH")
    group.addoption(ORDER_OPTION, dest="faulthunt_order", default=None, metavar="PATH",
                    help="run the selected tests in the order of the node ids listed in PATH (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("faulthunt_pidfile", None)
    if path:
        Path(path).write_text(f"{os.getpid()}\n", encoding="utf-8")


def read_order(path: str | Path) -> list[str]:
    """The node ids of an order file (written by :func:`write_order`)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise pytest.UsageError(f"{ORDER_OPTION} {path}: not a JSON list of node ids")
    return data


def write_order(path: Path, nodeids: list[str]) -> None:
    path.write_text(json.dumps(nodeids), encoding="utf-8")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config,
                                  items: list[pytest.Item]) -> Generator[None, None, None]:
    yield
    path = config.getoption("faulthunt_order", None)
    if not path:
        return
    rank = {nodeid: i for i, nodeid in enumerate(read_order(path))}
    # stable: anything not listed keeps its place after the listed ones
    items.sort(key=lambda item: rank.get(item.nodeid, len(rank)))
