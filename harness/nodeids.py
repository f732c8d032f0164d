"""Test node ids as data: checked, split, and handed to pytest so they can never read as options.

A node id (``tests/test_k.py::TestA::test_b[float32-x/y]``) comes from a run directory that may
have been edited by hand, so everything that passes ids to pytest (stress, sanitize, isolate,
bisect, the repro kit) goes through :func:`pytest_selection`: one ``--faulthunt-id=ID`` per test
(the plugin keeps exactly those items, whatever pytest-repeat appended to their names) and the
collection roots after ``--``, where pytest's argument parser no longer looks for options.

Selecting by ``--faulthunt-id`` instead of the node id itself is what makes a parametrized id work
with ``--count``: pytest-repeat renames ``test_odd[a b]`` to ``test_odd[a b-1-3]``, so the id given
on the command line matches nothing ("0 test runs").
"""

from __future__ import annotations

from collections.abc import Iterable

from faulthunt.errors import UsageError

#: the plugin option that keeps only the named tests (see faulthunt.plugin)
SELECT_OPTION = "--faulthunt-id"


def problem(text: object) -> str | None:
    """Why ``text`` is not a usable node id, or None when it is one."""
    if not isinstance(text, str) or not text.strip():
        return "empty"
    if any(c in text for c in "\0\r\n"):
        return "contains a control character (NUL or a line break)"
    if text.startswith("-"):
        return "starts with '-' (it would read as an option)"
    path = text.split("::", 1)[0]
    if not path or path.startswith("-"):
        return "has no file path before '::'"
    if "::" in text and not text.split("::", 1)[1].split("[", 1)[0].strip(":"):
        return "has no test name after '::'"
    return None


def is_node_id(text: object) -> bool:
    return problem(text) is None


def check_node_id(text: object, where: str = "") -> str:
    """``text`` if it is a node id, else a UsageError naming the id and where it came from."""
    why = problem(text)
    if why is not None:
        origin = f" (from {where})" if where else ""
        raise UsageError(f"{text!r}{origin} is not a test node id: it {why}",
                         fix="node ids look like tests/test_k.py::test_a[param]; check the "
                             "run directory was not edited, or name the test yourself")
    return str(text)


def collection_root(nodeid: str) -> str:
    """The node id without its parameters: what pytest must collect to find the test."""
    path, sep, rest = nodeid.partition("::")
    if not sep:
        return nodeid
    return f"{path}::{rest.split('[', 1)[0]}"


def pytest_selection(ids: Iterable[str], where: str = "") -> list[str]:
    """pytest arguments that run exactly ``ids`` (with any ``--count``), options first.

    The result ends with ``--`` and the collection roots, so append nothing after it.
    """
    checked = [check_node_id(i, where) for i in ids]
    roots = list(dict.fromkeys(collection_root(i) for i in checked))
    return [f"{SELECT_OPTION}={i}" for i in checked] + ["--", *roots]
