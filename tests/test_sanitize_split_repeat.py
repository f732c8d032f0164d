"""``split_repeat`` reads a repeat step off any id in linear time, and never raises (issue 18).

Its old expression ``^(.*?)\\[(.*)\\]$`` retried the rest of the id from every ``[``: an id of
100k characters, most of them ``[`` and no ``]``, took about a minute. The ids come from a run
directory, which is data.
"""
from __future__ import annotations

import random
import re
import time

import pytest

from faulthunt.sanitizer.plan import split_repeat

_OLD = re.compile(r"^(?P<head>.*?)\[(?P<ids>.*)\]$")


def _old_split(nodeid: str) -> tuple[str, int | None]:
    """The former implementation (on ids where it finished and did not raise)."""
    m = _OLD.match(nodeid)
    if not m:
        return nodeid, None
    parts = m.group("ids").split("-")
    for i in range(len(parts) - 2, -1, -1):
        a, b = parts[i], parts[i + 1]
        if a.isdigit() and b.isdigit() and len(b) <= 9 and 1 <= int(a) <= int(b):
            rest = parts[:i] + parts[i + 2:]
            return (f"{m.group('head')}[{'-'.join(rest)}]" if rest else m.group("head")), int(b)
    return nodeid, None


@pytest.mark.parametrize("hostile", [
    "t.py::test_a" + "[" * 100_000,
    "t.py::test_a[" + "[x-" * 33_000,
    "t.py::test_a" + "[1-2" * 25_000,
])
def test_a_hostile_id_is_linear(hostile: str) -> None:
    t0 = time.perf_counter()
    assert split_repeat(hostile) == (hostile, None)
    assert time.perf_counter() - t0 < 5.0  # quadratic: about a minute; linear: well under 0.1 s


@pytest.mark.parametrize("nodeid, expected", [
    ("t.py::a[f32-3-50]", ("t.py::a[f32]", 50)),
    ("t.py::a[2-5]", ("t.py::a", 5)),
    ("t.py::a[x[1]-2-5]", ("t.py::a[x[1]]", 5)),
    ("t.py::a[\u00b2-3]", ("t.py::a[\u00b2-3]", None)),            # int() refuses "²"
    ("t.py::a[" + "1" * 5000 + "-3]", ("t.py::a[" + "1" * 5000 + "-3]", None)),  # and 5000 digits
    ("t.py::a[1-" + "9" * 5000 + "]", ("t.py::a[1-" + "9" * 5000 + "]", None)),
    ("t.py::a[1-2]\n", ("t.py::a[1-2]\n", None)),                  # a line break: no node id
    ("t.py::a]", ("t.py::a]", None)), ("t.py::a[]", ("t.py::a[]", None)),
])
def test_steps_and_odd_ids(nodeid: str, expected: tuple[str, int | None]) -> None:
    assert split_repeat(nodeid) == expected


def test_same_answers_as_before_on_ordinary_ids() -> None:
    rnd = random.Random(18)
    for _ in range(50_000):
        nodeid = "".join(rnd.choice("[]-0123a:") for _ in range(rnd.randint(0, 16)))
        assert split_repeat(nodeid) == _old_split(nodeid), nodeid
