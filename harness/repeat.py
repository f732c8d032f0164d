"""Repeating the test items pytest-repeat leaves alone: unittest methods, doctests, plugin items.

pytest-repeat repeats a test by parametrizing it (``__pytest_repeat_step_number``), which only
works for pytest's own test functions: a ``unittest.TestCase`` method, a doctest or an item a
plugin makes (a YAML case, a notebook cell) runs once whatever ``--count`` says, silently. A
stress run whose runs do not repeat is lying, so the plugin repeats those items itself, at
collection time, in the same shape as pytest-repeat: ``--count 3`` turns
``test_u.py::TestU::test_a`` into ``test_u.py::TestU::test_a[1-3]`` ... ``[3-3]`` (and
``test_y.yaml::case[x]`` into ``case[x-1-3]``), each copy a distinct item with its own node id, so
xdist schedules the copies like any other items (every worker makes the same copies, so the
collections agree) and the rest of faulthunt treats them alike. Each copy keeps its base node id
(the original id) in its stash; ``faulthunt.recorder.base_nodeid`` reads it.

A copy is the original item shallow-copied with its per-run state made fresh: node id, markers,
keywords, stash, report sections, fixture request, a cached TestCase instance (unittest creates
one per item), and a doctest's globals (doctest clears them after each run). pytest has no public
way to make a renamed copy of an arbitrary item (each item type has its own constructor), so the
node id is set through pytest's own attribute for it (``_id`` from pytest 9.2, ``_nodeid``
before); an item that cannot be copied is run once and named in :class:`RepeatResult.not_repeated`,
which the run reports.
"""

from __future__ import annotations

import copy
import sys
from collections import Counter
from typing import Any

import pytest

#: pytest-repeat's parametrization argument
REPEAT_PARAM = "__pytest_repeat_step_number"
#: the base node id of a copy made here (the id of the item it was copied from)
BASE_KEY = pytest.StashKey[str]()


class RepeatResult:
    """What :func:`repeat_items` did: items copied per item type, and items it could not copy.

    A plain class, not a dataclass: every process of a run imports this module, and making a
    frozen dataclass is about 3.7 M instructions (its generated methods are compiled)."""

    __slots__ = ("count", "repeated", "not_repeated")

    def __init__(self, count: int = 1, repeated: dict[str, int] | None = None,
                 not_repeated: tuple[tuple[str, str], ...] = ()) -> None:
        self.count = count
        self.repeated: dict[str, int] = {} if repeated is None else repeated
        self.not_repeated = not_repeated

    def __repr__(self) -> str:
        return (f"RepeatResult(count={self.count!r}, repeated={self.repeated!r}, "
                f"not_repeated={self.not_repeated!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RepeatResult):
            return NotImplemented
        return (self.count, self.repeated, self.not_repeated) == (
            other.count, other.repeated, other.not_repeated)

    __hash__ = None  # type: ignore[assignment]  # mutable dict inside, as the dataclass had


def repeat_count(item: pytest.Item) -> int:
    """How often pytest-repeat would run ``item``: its ``repeat`` marker, else ``--count``."""
    marker = item.get_closest_marker("repeat")
    if marker is not None and marker.args:
        try:
            return int(marker.args[0])
        except (TypeError, ValueError):
            return 1
    count = item.config.getoption("count", None)
    return count if isinstance(count, int) else 1


def repeated_by_pytest_repeat(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and REPEAT_PARAM in callspec.params


def step_nodeid(nodeid: str, step: int, count: int) -> str:
    """``nodeid`` with pytest-repeat's step: ``t[1-3]``, or ``t[x-1-3]`` for a parametrized ``t[x]``."""
    last = nodeid.rsplit("::", 1)[-1]
    if last.endswith("]") and "[" in last:
        return f"{nodeid[:-1]}-{step}-{count}]"
    return f"{nodeid}[{step}-{count}]"


def repeat_items(items: list[pytest.Item]) -> RepeatResult:
    """Replace every item pytest-repeat did not repeat (and that should run more than once) by
    its copies, in place, each next to the others as pytest-repeat places its steps."""
    out: list[pytest.Item] = []
    repeated: Counter[str] = Counter()
    failed: list[tuple[str, str]] = []
    count_seen = 1
    for item in items:
        if repeated_by_pytest_repeat(item):  # first: its markers need no walk (a few us an item)
            out.append(item)
            continue
        count = repeat_count(item)
        count_seen = max(count_seen, count)
        if count <= 1:
            out.append(item)
            continue
        try:
            copies = [copy_item(item, step_nodeid(item.nodeid, i, count), f"{i}-{count}")
                      for i in range(1, count + 1)]
        except Exception as exc:  # noqa: BLE001 - any item type: run it once and say so
            failed.append((item.nodeid, f"cannot be copied ({type(exc).__name__}: {exc})"))
            out.append(item)
            continue
        repeated[type(item).__name__] += 1
        out.extend(copies)
    items[:] = out
    return RepeatResult(count_seen, dict(repeated), tuple(failed))


def copy_item(item: pytest.Item, nodeid: str, step: str) -> pytest.Item:
    """A copy of ``item`` named ``nodeid``, sharing nothing that a run of it changes."""
    from _pytest.mark.structures import NodeKeywords  # the type of Node.keywords

    new = copy.copy(item)
    _set_nodeid(new, nodeid)
    keywords = NodeKeywords(new)
    for key in item.keywords:
        keywords[key] = item.keywords[key]
    new.keywords = keywords
    new.own_markers = list(item.own_markers)
    # -k matches the step as it matches pytest-repeat's "test_a[2-3]"
    new.extra_keyword_matches = {*item.extra_keyword_matches, step}
    new.stash = _copied_stash(item.stash)
    new.stash[BASE_KEY] = item.stash.get(BASE_KEY, item.nodeid)
    if hasattr(new, "_store"):
        new._store = new.stash  # pytest's deprecated alias of the stash
    new.user_properties = list(getattr(item, "user_properties", ()))
    new._report_sections = []
    state = vars(new)
    instance = state.pop("_instance", None)
    if instance is not None and getattr(state.get("_obj"), "__self__", None) is instance:
        del state["_obj"]  # a method bound to the shared instance: looked up again per copy
    # doctest as pytest imported it: a process that imported no doctest has no doctest item, and
    # importing it here would cost every worker pdb, unittest and difflib
    doctest = sys.modules.get("doctest")
    if doctest is not None and isinstance(getattr(new, "dtest", None), doctest.DocTest):
        # the doctest runner clears a test's globals after running it
        dtest = copy.copy(new.dtest)  # type: ignore[attr-defined]
        dtest.globs = dict(dtest.globs)
        new.dtest = dtest  # type: ignore[attr-defined]
    if hasattr(new, "_initrequest"):
        new._initrequest()  # fresh fixture request and funcargs
    return new


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    try:
        from _pytest.nodeid import coerce_node_id  # pytest >= 9.2: a structured NodeId
    except ImportError:
        item._nodeid = nodeid  # type: ignore[attr-defined]
        return
    item._id = coerce_node_id(nodeid)  # type: ignore[attr-defined, unused-ignore]  # private, per pytest version
    if item.nodeid != nodeid:  # pragma: no cover - a pytest that keeps it elsewhere
        raise RuntimeError("this pytest keeps node ids where faulthunt cannot set them")


def _copied_stash(stash: Any) -> Any:
    """A new stash holding what the item's stash held at collection time (later writes apart)."""
    fresh = pytest.Stash()
    storage = getattr(stash, "_storage", None)
    if isinstance(storage, dict):
        fresh._storage.update(storage)  # type: ignore[attr-defined, unused-ignore]  # private, per pytest version
    return fresh
