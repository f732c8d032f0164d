"""The Xid table laid out in C (kernlog/_scan.c ``table``) is the text the Python layout writes.

``faulthunt xid parse`` (the table) lays out its rows in C where the compiled module is built and
in Python otherwise; both must write the same characters for any events: missing values, empty
strings, non-ASCII and wide characters, details longer than a line has room for, narrow widths
(where C declines and Python lays it out), and every capture.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.cli import xid as X
from faulthunt.kernlog import parse as P
from faulthunt.records.xid import MmuFault, XidEvent

DATA = Path(__file__).parent / "data"
pytestmark = pytest.mark.skipif(P.native_table is None, reason="the compiled module (kernlog/_scan.c) is not built here")


def _both(events: list[XidEvent], width: int, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    native, python = io.StringIO(), io.StringIO()
    X.render_table(events, native, width)
    with monkeypatch.context() as m:
        m.setattr(P, "native_table", None)
        X.render_table(events, python, width)
    return native.getvalue(), python.getvalue()


_text = st.one_of(st.none(), st.sampled_from(["", "python3", "VLLM::EngineCor", "ä", "名前", "\U0001f600x", "a b"]),
                  st.text(max_size=12))


@st.composite
def _events(draw: st.DrawFn) -> XidEvent:
    xid = draw(st.sampled_from([31, 13, 43, 45, 79, 999, 0]))
    mmu = None
    if draw(st.booleans()):
        mmu = MmuFault(draw(st.one_of(st.none(), st.integers(0, 1 << 57))), draw(_text), draw(st.one_of(st.none(), st.integers(0, 99))),
                       draw(_text), draw(_text), draw(_text), draw(st.booleans()), draw(_text), draw(_text))
    return XidEvent(xid, draw(_text), None, None, draw(st.one_of(st.none(), st.integers(0, 1 << 40))), draw(_text),
                    draw(st.text(max_size=300)), "x", mmu, draw(st.one_of(st.none(), st.integers(0, 200))), None, None,
                    None, draw(st.one_of(st.none(), st.floats(allow_nan=False), st.floats(0, 1e7))), draw(_text), None, "")


@settings(max_examples=300, deadline=None)
@given(st.lists(_events(), min_size=1, max_size=12), st.sampled_from([160, 80, 40, 20, 0, 400]))
def test_the_c_layout_writes_what_the_python_layout_writes(events: list[XidEvent], width: int) -> None:
    mp = pytest.MonkeyPatch()
    try:
        native, python = _both(events, width, mp)
    finally:
        mp.undo()
    assert native == python


@pytest.mark.parametrize("name", ["h200/dmesg.txt", "h200/kmsg_raw.txt", "h200/dmesg_T.txt", "kernlog/names_talos.log"])
def test_the_c_layout_writes_every_capture_like_python(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    events = list(P.scan_bytes((DATA / name).read_bytes()).events)
    assert events
    native, python = _both(events, 160, monkeypatch)
    assert native == python


def test_the_c_layout_declines_what_it_does_not_lay_out() -> None:
    ev = XidEvent(31, "0000:3b:00", None, None, 7, "p", "m", "x", None, None)
    assert P.native_table is not None
    assert isinstance(P.native_table([ev], {31: "t"}, X._detail, 160), str)
    assert P.native_table([ev], {31: "t"}, X._detail, 20) is None  # no room for a detail: Python cuts each line
    odd = XidEvent(31, "0000:3b:00", None, None, 7, "p", "m", "x", None, None, ts=5)  # type: ignore[arg-type]
    assert P.native_table([odd], {31: "t"}, X._detail, 160) is None  # an int time: Python formats it
    for hostile in (XidEvent(31, "0000:3b:00", None, None, 7, "p\x1bq", "m", "x", None, None),
                    XidEvent(31, "0000:3b:00", None, None, 7, "p", "m\x07", "x", None, None)):
        # a control character in a cell (process, detail): shown escaped, so Python measures it
        assert P.native_table([ev, hostile], {31: "t"}, X._detail, 160) is None


_TIMES = [0.0078125, 0.0000005, 5.0000005, 1e-7, 4.9999995, 999999999.9999995, 999999999.999999, 1e9, 2.0 ** -20,
          123.4567895, 82659.755847, 35.371957, 5.07, 0.5e-6, 1.5e-6, 2.5e-6, -0.0, 0.0, -5.5, 1e300, float("inf"),
          math.nextafter(5.0000005, 0), math.nextafter(5.0000005, 10), 7.2e8 + 0.0000005]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_TIMES), st.floats(0, 1e9), st.floats(allow_nan=False),
                          st.integers(0, 10**15).map(lambda k: k / 1e6), st.integers(0, 2**40).map(lambda k: k / 2**20)),
                min_size=1, max_size=20))
def test_the_c_layout_prints_every_time_as_python_does(times: list[float]) -> None:
    """The time column's "%.6f": computed in C for kernel times, by Python's formatting at ties and beyond."""
    events = [XidEvent(43, "0000:3b:00", None, None, 7, "p", "m", "x", None, None, ts=t) for t in times]
    mp = pytest.MonkeyPatch()
    try:
        native, python = _both(events, 160, mp)
    finally:
        mp.undo()
    assert native == python
