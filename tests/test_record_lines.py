"""faulthunt.records.lines writes the bytes msgspec writes for every event kind."""

from __future__ import annotations

import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest

from faulthunt.records import events, lines
from faulthunt.rundir import JsonlWriter

ALL_EVENTS = events.WORKER_EVENT_TYPES + events.CONTROLLER_EVENT_TYPES
NESTED = {"StickyError": events.StickyError, "ProcessInfo": events.ProcessInfo,
          "SubtestFailure": events.SubtestFailure, "NotRepeated": events.NotRepeated}
ODD_STRINGS = ["", "plain", 'quote " and \\ backslash', "\x00\x01\x1f\x7f\x80 controls",
               "tab\tnew\nline\r", "é€😀 \u2028\u2029", "test_odd[a b-1-3]", "x" * 300]


def _table(type_: Any) -> tuple[tuple[str, Any], ...]:
    out = []
    for f in msgspec.structs.fields(type_):
        if f.default is not msgspec.NODEFAULT:
            out.append((f.name, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            out.append((f.name, f.default_factory()))
        else:
            out.append((f.name, lines._NO))
    return tuple(out)


def test_field_tables_are_the_structs() -> None:
    assert set(lines.EVENT_FIELDS) == {t.__struct_config__.tag for t in ALL_EVENTS}
    for type_ in ALL_EVENTS:
        assert lines.EVENT_FIELDS[type_.__struct_config__.tag] == _table(type_), type_.__name__
    for name, type_ in NESTED.items():
        assert lines.NESTED_FIELDS[name] == _table(type_), name


def _random_float(rng: random.Random) -> float:
    pick = rng.random()
    if pick < 0.5:
        return rng.uniform(-2, 2) * 10.0 ** rng.randint(-12, 25)
    if pick < 0.6:
        return round(rng.random() * 10.0 ** rng.randint(-7, 1), 6)  # durations as recorded
    return struct.unpack("d", rng.getrandbits(64).to_bytes(8, "little"))[0]  # any bits


def test_floats_as_msgspec_writes_them() -> None:
    rng = random.Random(16)
    edges = [0.0, -0.0, 1e-5, 9.999999999999999e-06, 1e-4, 1e16, 9999999999999998.0, 5e-324,
             1.7976931348623157e308, -1.5e-05, math.nan, math.inf, -math.inf, 1796335914.9023733]
    for x in edges + [_random_float(rng) for _ in range(20000)]:
        assert lines._value(x) == msgspec.json.encode(x).decode(), repr(x)


def _value_for(tag: str, name: str, rng: random.Random) -> Any:
    if name in ("t", "t_mono", "duration", "timeout"):
        return _random_float(rng)
    if name in ("pid", "ppid", "child_pid", "parent_pid", "exit_status", "signal", "reruns",
                "items", "count", "random_seed", "exitstatus", "testsfailed", "limit", "down"):
        return rng.choice([0, 1, 4242, 2**40, -9])
    if name in ("recycle", "xdist", "started"):
        return rng.choice([True, False])
    if name == "plugins":
        return {rng.choice(ODD_STRINGS): rng.choice(ODD_STRINGS) for _ in range(3)}
    if name in ("subtests", "repeated"):
        return {rng.choice(ODD_STRINGS): rng.randint(0, 9) for _ in range(3)}
    if name == "argv":
        return rng.sample(ODD_STRINGS, 3)
    if name == "subtests_failed":
        return [lines.nested("SubtestFailure", label=rng.choice(ODD_STRINGS), message=None)]
    if name == "not_repeated":
        return [lines.nested("NotRepeated", nodeid=rng.choice(ODD_STRINGS), why="cannot")]
    if name == "process_tree":
        return [lines.nested("ProcessInfo", pid=1, name="x", cmdline=rng.sample(ODD_STRINGS, 2)),
                lines.nested("ProcessInfo", cmdline="a b")]
    if name == "sticky_cuda_error" or (name == "error" and tag == "recycle"):
        return lines.nested("StickyError", code=700, name="cudaErrorIllegalAddress",
                            sticky=True, text=rng.choice(ODD_STRINGS))
    return rng.choice(ODD_STRINGS)


@pytest.mark.parametrize("type_", ALL_EVENTS, ids=lambda t: t.__name__)
def test_every_event_kind_byte_for_byte(type_: Any) -> None:
    tag = type_.__struct_config__.tag
    rng = random.Random(tag)
    spec = lines.EVENT_FIELDS[tag]
    for i in range(60):
        # all fields, some of them, or only the required ones (defaults written)
        values = {name: _value_for(tag, name, rng) for name, default in spec
                  if default is lines._NO or i % 3 == 0 or rng.random() < 0.5}
        want = msgspec.json.encode(msgspec.convert(values, type_)) + b"\n"
        assert lines.event_line(tag, values) == want, values


def test_a_lone_surrogate_as_jsonlwriter_writes_it(tmp_path: Path) -> None:
    values = {"nodeid": "test_\udcff.py::t", "worker": "gw0", "duration": 1e-05}
    with JsonlWriter(tmp_path / "a.jsonl") as writer:
        writer.write(events.TestEnd(**values))  # type: ignore[arg-type]
    assert lines.event_line("end", values) == (tmp_path / "a.jsonl").read_bytes()
    assert json.loads(lines.event_line("end", values))["nodeid"] == "test_\udcff.py::t"


def test_bad_fields_are_said() -> None:
    with pytest.raises(TypeError, match="missing required field 'nodeid'"):
        lines.event_line("start", {"worker": "gw0"})
    with pytest.raises(TypeError, match=r"unexpected field.*bogus"):
        lines.event_line("start", {"nodeid": "t", "bogus": 1})
    with pytest.raises(TypeError, match="cannot hold"):
        lines.event_line("start", {"nodeid": object()})
    assert lines.nested_from("StickyError", {"code": 1, "extra": 2}) == lines.nested(
        "StickyError", code=1)


def test_linewriter_lines_read_back(tmp_path: Path) -> None:
    from faulthunt.rundir import RunDir

    (tmp_path / "events").mkdir()
    writer = lines.LineWriter(tmp_path / "events" / "gw0-1.jsonl")
    writer.event("worker", worker="gw0", pid=1, recycle=True)
    writer.event("start", worker="gw0", pid=1, nodeid="t.py::a", base_nodeid="t.py::a")
    writer.event("end", worker="gw0", pid=1, nodeid="t.py::a", outcome="passed", duration=0.5)
    writer.close()
    read = RunDir(tmp_path).worker_events()
    assert [type(r).__name__ for r in read] == ["WorkerHello", "TestStart", "TestEnd"]
    assert read[2].outcome == "passed" and RunDir(tmp_path).problems() == ()


def test_a_tests_two_lines_are_event_lines_and_msgspecs() -> None:
    rng = random.Random(8)
    for worker, pid, device in (("gw0", 4242, None), ("main", 1, "0,1"), ("gw%s", 2**40, "é")):
        test_lines = lines.TestLines(worker, pid, device)
        for _ in range(300):
            t, t_mono, duration = (_random_float(rng) for _ in range(3))
            nodeid, base, outcome = (rng.choice(ODD_STRINGS) for _ in range(3))
            start = {"worker": worker, "pid": pid, "t": t, "t_mono": t_mono, "nodeid": nodeid,
                     "base_nodeid": base, "device": device}
            end = {"worker": worker, "pid": pid, "t": t, "t_mono": t_mono, "nodeid": nodeid,
                   "base_nodeid": base, "outcome": outcome, "duration": duration}
            got = test_lines.start(t, t_mono, nodeid, base)
            assert got == lines.event_line("start", start)
            assert got == msgspec.json.encode(events.TestStart(**start)) + b"\n"
            got = test_lines.end(t, t_mono, nodeid, base, outcome, duration)
            assert got == lines.event_line("end", end)
            assert got == msgspec.json.encode(events.TestEnd(**end)) + b"\n"
    # a lone surrogate takes event_line's way (escaped as JsonlWriter writes it)
    test_lines = lines.TestLines("gw0", 1, None)
    assert test_lines.start(1.0, 2.0, "t_\udcff", "b") == lines.event_line(
        "start", {"worker": "gw0", "pid": 1, "t": 1.0, "t_mono": 2.0, "nodeid": "t_\udcff",
                  "base_nodeid": "b", "device": None})
