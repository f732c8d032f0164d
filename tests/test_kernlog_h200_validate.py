"""What scripts/gpu/kernlog_validate.sh recorded on the H200 still holds for today's code.

The records in tests/data/kernlog/h200_validate/ were written by faulthunt itself on the real machine
(kmsg source, `xid since`, the live Follower, NvmlSource, incident grouping; PROVENANCE.md there).
Re-parsing each record's raw /dev/kmsg line must give the very record that was written, and grouping
them must give the recorded incidents: a change to the parser or the grouping that alters what a real
H200 run records fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faulthunt.kernlog.incident import group_incidents
from faulthunt.kernlog.parse import parse_line, scan_text
from faulthunt.records.xid import XidEvent

D = Path(__file__).parent / "data" / "kernlog" / "h200_validate"


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (D / name).read_text().splitlines() if line.startswith("{")]


SINCE = [r for r in _jsonl("since.jsonl") if "xid" in r]
WATCH = _jsonl("watch.jsonl")


def test_the_run_passed_and_the_files_are_what_provenance_says() -> None:
    checks = (D / "checks.txt").read_text().splitlines()
    assert [c.split()[:2] for c in checks] == [["PASS", "1"], ["PASS", "2"], ["PASS", "3"], ["PASS", "4"]]
    assert "driver 580.159.04" in (D / "PROVENANCE.md").read_text()
    summary = _jsonl("since.jsonl")[-1]
    assert summary["lost"] == 0 and summary["source"] == "kmsg" and "xid" not in summary


@pytest.mark.parametrize("name", ["since.jsonl", "watch.jsonl"])
def test_reparsing_each_raw_kmsg_record_gives_the_recorded_event(name: str) -> None:
    records = [r for r in _jsonl(name) if "xid" in r]
    assert records
    for rec in records:
        assert rec["raw"].split(";", 1)[0].count(",") == 3  # a raw /dev/kmsg record PRI,SEQ,USEC,FLAGS
        ev = parse_line(rec["raw"])
        assert ev is not None and ev.to_json() == rec
        assert XidEvent.from_json(rec) == ev


def test_since_after_the_cursor_has_the_wild_write_at_its_target_page() -> None:
    cursor = json.loads((D / "cursor.json").read_text())
    wild = (D / "wild.txt").read_text()
    pid = int(wild.split("pid=")[1].split()[0])
    target = int(wild.split("target=")[1].split()[0], 16)
    assert all(r["seq"] > cursor["seq"] for r in SINCE)
    x31 = [r for r in SINCE if r["xid"] == 31 and r["pid"] == pid]
    assert len(x31) == 1 and x31[0]["process"] == "faults"
    assert x31[0]["mmu"]["address"] == target & ~0xFFF and x31[0]["mmu"]["access_type"] == "ACCESS_TYPE_VIRT_WRITE"


def test_watch_saw_everything_since_saw_in_the_same_order() -> None:
    key = [(r["seq"], r["xid"], r["pid"]) for r in SINCE]
    seen = [(r["seq"], r["xid"], r["pid"]) for r in WATCH]
    assert set(key) <= set(seen) and [k for k in seen if k in key] == key


def test_grouping_the_since_lines_gives_the_recorded_incidents() -> None:
    events = scan_text("\n".join(r["raw"] for r in SINCE)).events
    got = [inc.to_json() for inc in group_incidents(events)]
    assert got == _jsonl("incidents.jsonl")
    # the misaligned run: an SM warp line and an ESR line without pid, then the pid line: one incident
    mis_pid = int((D / "misaligned.txt").read_text().split("pid=")[1].split()[0])
    mis = [i for i in got if i["pid"] == mis_pid]
    assert len(mis) == 1 and mis[0]["xids"] == [13] and len(mis[0]["events"]) == 3
    assert "Misaligned Address" in mis[0]["errors"]


def test_nvml_events_are_number_only_records() -> None:
    nv = [XidEvent.from_json(r) for r in _jsonl("nvml.jsonl")]
    assert [e.xid for e in nv] == [31, 31, 13, 43, 31, 31]
    assert all(e.pid is None and e.mmu is None and e.raw.startswith("NVML: Xid") for e in nv)
    assert {e.pci for e in nv} == {"0000:00:06"}
