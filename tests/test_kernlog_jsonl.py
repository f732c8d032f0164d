"""faulthunt.kernlog.jsonl.event_json writes exactly what json.dumps(ev.to_json()) writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.kernlog.jsonl import event_json
from faulthunt.kernlog.parse import parse_line, scan_bytes
from faulthunt.records.xid import GrException, MmuFault, XidEvent

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("path", sorted((DATA / "kernlog").glob("*.log")) + sorted((DATA / "h200").glob("*.txt")),
                         ids=lambda p: p.name)
def test_every_capture_event(path: Path) -> None:
    for ev in scan_bytes(path.read_bytes()).events:
        assert event_json(ev) == json.dumps(ev.to_json())


@settings(max_examples=500, deadline=None)
@given(prefix=st.sampled_from(["", "[ 1.5] ", "4,9,123,-;", "[Wed Dec  2 14:42:29 2026] "]),
       body=st.text(max_size=120), pid=st.sampled_from(["", "pid=12, ", "pid='<unknown>', "]),
       name=st.sampled_from(["", "name=p\u00e9 \"q\"\\, ", "name=\u2603, "]),
       xid=st.sampled_from(["13", "31", "43", "45"]))
def test_generated_lines(prefix: str, body: str, pid: str, name: str, xid: str) -> None:
    ev = parse_line(f"{prefix}NVRM: Xid (PCI:0000:00:06): {xid}, {pid}{name}{body}")
    if ev is not None:
        assert event_json(ev) == json.dumps(ev.to_json())


def test_nested_records_and_odd_values() -> None:
    mmu = MmuFault(address=None, engine="GRAPHICS", gpc=None, client=None, fault_type=None, access_type=None,
                   decodable=False, address_text="0x1_2", reason="low half \"0x2\"")
    gr = GrException(kind="esr", esr=((0x519730, 0x500000F), (1, 2)))
    ev = XidEvent(xid=13, pci=None, gpu_instance=5, compute_instance=1, pid=None, process=None, message="\x00\n\u2028",
                  category="x", mmu=mmu, caused_by=31, raw="r", seq=0, ts=0.1 + 0.2, wall="w", channel=0, gr=gr,
                  level=4)
    assert event_json(ev) == json.dumps(ev.to_json())


@pytest.mark.parametrize("changes", [{"ts": float("nan")}, {"ts": float("inf")}, {"pid": "12"}, {"pid": True},
                                     {"pid": [1]}, {"process": 5}, {"xid": 1.5}])
def test_records_of_other_types_give_json_that_reads_back_equal(changes: dict) -> None:  # type: ignore[type-arg]
    """A record read back from a damaged file may hold anything: still valid JSON of the same values."""
    ev = parse_line("[1.0] NVRM: Xid (PCI:0000:00:06): 43, pid=7, name=a, channel 0x1").replace(**changes)
    text = event_json(ev)
    assert json.loads(text) == json.loads(json.dumps(ev.to_json())) or text == json.dumps(ev.to_json())
