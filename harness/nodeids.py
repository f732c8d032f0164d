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

import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

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


def rebase(nodeid: str, rootdir: str | Path, cwd: str | Path | None = None) -> str:
    """``nodeid`` (relative to pytest's ``rootdir``) with its file path as seen from ``cwd``.

    pytest names tests relative to its rootdir, which is not the directory it ran in when the
    suite has its own ini file in a subfolder (``cd repo; pytest sub/tests`` with
    ``sub/pytest.ini`` names ``tests/t.py::test_a``). Relative to ``cwd`` when the file is under
    it, else absolute (also when ``cwd`` is None); ``./`` in front of a path that would start
    with ``-``.
    """
    path, sep, rest = nodeid.partition("::")
    full = os.path.normpath(os.path.join(os.fspath(rootdir), path))
    if cwd is not None:
        rel = os.path.relpath(full, os.fspath(cwd))
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            full = posixpath.join(".", rel) if rel.startswith("-") else rel
    return f"{full}{sep}{rest}"


def rootdir_option(rootdir: str | Path) -> list[str]:
    """``--rootdir=DIR``, or nothing when pytest would read DIR differently: it expands
    ``$NAME`` in the option's value, and a path cannot escape that."""
    text = os.fspath(rootdir)
    return [] if "$" in text else [f"--rootdir={text}"]


def pytest_selection(ids: Iterable[str], where: str = "", *, rootdir: str | Path | None = None,
                     cwd: str | Path | None = None) -> list[str]:
    """pytest arguments that run exactly ``ids`` (with any ``--count``), options first.

    ``rootdir``: the rootdir of the run the ids come from (its ``session_start`` record). The
    selection then pins it (``--rootdir``, so the ids mean what they meant, whichever ini file a
    narrower selection would find first) and names the roots as paths from ``cwd`` (the
    directory pytest will run in: :func:`rebase`). The result ends with ``--`` and the collection
    roots, so append nothing after it.
    """
    checked = [check_node_id(i, where) for i in ids]
    roots = list(dict.fromkeys(collection_root(i) for i in checked))
    head: list[str] = []
    if rootdir is not None:
        head = rootdir_option(rootdir)
        roots = [rebase(r, rootdir, cwd) for r in roots]
    return head + [f"{SELECT_OPTION}={i}" for i in checked] + ["--", *roots]


#: pytest-repeat's step at the end of a node id: ``t[2-5]`` or ``t[x-2-5]`` (the same shape
#: faulthunt.repeat gives its copies)
_STEP = re.compile(r"\[\d+-\d+\]$|-\d+-\d+(?=\]$)")


def without_step(nodeid: str) -> str:
    """``nodeid`` without a trailing pytest-repeat step, read from the text alone (``t[x-2-5]``
    -> ``t[x]``). A user parameter that looks like a step is cut too: callers also try the id
    as it is."""
    return _STEP.sub("", nodeid, count=1)


def selected_by(base: str) -> list[str]:
    """The ids that select a test whose id (without a repeat step) is ``base``, as pytest reads a
    node id given as an argument: the id itself, the test without its parameters, and each
    class or module node above it (``a.py::C::t[x]``: also ``a.py::C::t`` and ``a.py::C``)."""
    found = [base]
    node = collection_root(base)
    path, sep, rest = node.partition("::")
    parts = rest.split("::") if sep else []
    for n in range(len(parts), 0, -1):
        found.append("::".join([path, *parts[:n]]))
    return list(dict.fromkeys(found))


def unmatched(wanted: Mapping[str, str], collected: Iterable[str]) -> list[str]:
    """The asked ids (``wanted``: each form pytest may name it by -> the id as asked) that no id
    in ``collected`` (test ids, with or without a repeat step) is selected by, in asked order."""
    hit: set[str] = set()
    for nodeid in collected:
        for form in {nodeid, without_step(nodeid)}:
            hit.update(wanted[f] for f in selected_by(form) if f in wanted)
    return [asked for asked in dict.fromkeys(wanted.values()) if asked not in hit]


def not_found_text(missing: Sequence[str], collected: Iterable[str] = (), note: str = "") -> str:
    """One line saying which asked ids matched no collected test, the closest collected ids
    (when ``collected`` is given), ``note`` and the fix."""
    names = ", ".join(repr(m) for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
    what = "matches" if len(missing) == 1 else "match"
    text = f"test id {names} {what} no collected test"
    import difflib  # only for this message: not part of every importer's start-up

    close = difflib.get_close_matches(missing[0], list(dict.fromkeys(collected)), n=3) \
        if missing else []
    if close:
        text += f" (closest: {', '.join(close)})"
    listing = list_ids_command(missing[0]) if missing else "python -m pytest --collect-only -q FILE"
    return (text + note + f"; fix: name tests by the ids pytest lists ({listing}), with their "
            "parameters as they are written there")


def list_ids_command(nodeid: str) -> str:
    """The command that lists the ids pytest collects from ``nodeid``'s file, for the shell."""
    import shlex

    return f"python -m pytest --collect-only -q {shlex.quote(nodeid.split('::', 1)[0])}"
