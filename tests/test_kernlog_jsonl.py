"""faulthunt.kernlog.jsonl writes each event as its to_json object: same keys, same order, same values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.kernlog.jsonl import event_json, events_jsonl
from faulthunt.kernlog.parse import parse_line, scan_bytes, scan_text
from faulthunt.records.xid import GrException, MmuFault, XidEvent

DATA = Path(__file__).parent / "data"


def _reads_back(ev: XidEvent, text: str) -> None:
    obj = json.loads(text)
    assert obj == ev.to_json() and list(obj) == list(ev.to_json())  # the same object, keys in the same order
    if obj["mmu"] is not None:
        assert list(obj["mmu"]) == list(ev.to_json()["mmu"])
    assert XidEvent.from_json(obj) == ev


@pytest.mark.parametrize("path", sorted((DATA / "kernlog").glob("*.log")) + sorted((DATA / "h200").glob("*.txt")),
                         ids=lambda p: p.name)
def test_every_capture_event(path: Path) -> None:
    events = list(scan_bytes(path.read_bytes()).events)
    for ev in events:
        text = event_json(ev)
        assert text == msgspec.json.encode(ev).decode()
        _reads_back(ev, text)
    assert events_jsonl(events) == "".join(event_json(ev) + "\n" for ev in events).encode()


@settings(max_examples=500, deadline=None)
@given(prefix=st.sampled_from(["", "[ 1.5] ", "4,9,123,-;", "[Wed Dec  2 14:42:29 2026] "]),
       body=st.text(max_size=120), pid=st.sampled_from(["", "pid=12, ", "pid='<unknown>', "]),
       name=st.sampled_from(["", "name=p\u00e9 \"q\"\\, ", "name=\u2603, ", "name=\ud800x, "]),
       xid=st.sampled_from(["13", "31", "43", "45"]))
def test_generated_lines(prefix: str, body: str, pid: str, name: str, xid: str) -> None:
    events = list(scan_text(f"{prefix}NVRM: Xid (PCI:0000:00:06): {xid}, {pid}{name}{body}").events)
    for ev in events:
        _reads_back(ev, event_json(ev))
    data = events_jsonl(events + events)
    assert data.isascii()  # as json.dumps wrote it: U+2028 and the like escaped, never a line break
    assert [json.loads(x) for x in data.decode().splitlines()] == [ev.to_json() for ev in events + events]


def test_nested_records_and_odd_values() -> None:
    mmu = MmuFault(address=None, engine="GRAPHICS", gpc=None, client=None, fault_type=None, access_type=None,
                   decodable=False, address_text="0x1_2", reason="low half \"0x2\"")
    gr = GrException(kind="esr", esr=((0x519730, 0x500000F), (1, 2)))
    ev = XidEvent(xid=13, pci=None, gpu_instance=5, compute_instance=1, pid=None, process=None, message="\x00\n\u2028",
                  category="x", mmu=mmu, caused_by=31, raw="r", seq=2**70, ts=0.1 + 0.2, wall="w", channel=0, gr=gr,
                  level=4)
    _reads_back(ev, event_json(ev))
    assert '"esr":[[5347120,83886095],[1,2]]' in event_json(ev)


@pytest.mark.parametrize("changes", [{"pid": "12"}, {"pid": True}, {"pid": [1]}, {"process": 5}, {"xid": 1.5},
                                     {"process": "\udcff"}, {"message": {"a": [1, None]}}])
def test_records_of_other_types_give_json_that_reads_back_equal(changes: dict) -> None:  # type: ignore[type-arg]
    """A record read back from a damaged file may hold anything: still one line of valid JSON, the same values."""
    ev = parse_line("[1.0] NVRM: Xid (PCI:0000:00:06): 43, pid=7, name=a, channel 0x1").replace(**changes)
    text = event_json(ev)
    assert "\n" not in text and json.loads(text) == ev.to_json()
    assert events_jsonl([ev, ev]) == (text + "\n" + text + "\n").encode()


@pytest.mark.parametrize("ts", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_time_is_null(ts: float) -> None:
    """JSON has no NaN or Infinity (json.dumps wrote them anyway, and strict readers such as jq refuse
    them); the parser never makes one."""
    ev = parse_line("[1.0] NVRM: Xid (PCI:0000:00:06): 43, pid=7, name=a, channel 0x1").replace(ts=ts)
    assert json.loads(event_json(ev))["ts"] is None
    assert json.loads(event_json(ev.replace(process="\u00e9")))["ts"] is None  # the standard library's way too
    assert math.isfinite(parse_line("[99999999999.999999999] NVRM: Xid (PCI:0000:00:06): 79, x").ts)
