"""The H200 recheck of scripts/gpu/kernlog_validate.sh (after the one-parse-path change) still reads
the same with today's code (tests/data/kernlog/h200_recheck/PROVENANCE.md).

Same checks as tests/test_kernlog_h200_validate.py on the first run's records: every recorded raw
/dev/kmsg record re-parses to the very record written on the machine, and grouping gives the recorded
incidents.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faulthunt.kernlog.incident import group_incidents
from faulthunt.kernlog.parse import parse_line, scan_text
from faulthunt.records.xid import XidEvent

D = Path(__file__).parent / "data" / "kernlog" / "h200_recheck"


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (D / name).read_text().splitlines() if line.startswith("{")]


SINCE = [r for r in _jsonl("since.jsonl") if "xid" in r]


def _pid(name: str) -> int:
    return int((D / name).read_text().split("pid=")[1].split()[0])


def test_all_four_checks_passed_and_nothing_was_lost() -> None:
    checks = (D / "checks.txt").read_text().splitlines()
    assert [c.split()[:2] for c in checks] == [["PASS", "1"], ["PASS", "2"], ["PASS", "3"], ["PASS", "4"]]
    assert (D / "console.txt").read_text() == (D / "checks.txt").read_text()
    summary = _jsonl("since.jsonl")[-1]
    assert summary["lost"] == 0 and summary["source"] == "kmsg" and len(SINCE) == 4


@pytest.mark.parametrize("name", ["since.jsonl", "watch.jsonl"])
def test_reparsing_each_raw_kmsg_record_gives_the_recorded_event(name: str) -> None:
    records = [r for r in _jsonl(name) if "xid" in r]
    assert records
    for rec in records:
        ev = parse_line(rec["raw"])
        assert ev is not None and ev.to_json() == rec
        assert XidEvent.from_json(rec) == ev


def test_the_wild_write_is_at_its_target_page_and_watch_saw_the_same_lines() -> None:
    cursor = json.loads((D / "cursor.json").read_text())
    target = int((D / "wild.txt").read_text().split("target=")[1].split()[0], 16)
    assert all(r["seq"] > cursor["seq"] for r in SINCE)
    (x31,) = [r for r in SINCE if r["xid"] == 31]
    assert x31["pid"] == _pid("wild.txt") and x31["process"] == "faults"
    assert x31["mmu"]["address"] == target & ~0xFFF and x31["mmu"]["access_type"] == "ACCESS_TYPE_VIRT_WRITE"
    seen = [(r["seq"], r["xid"], r["pid"]) for r in _jsonl("watch.jsonl")]
    assert seen == [(r["seq"], r["xid"], r["pid"]) for r in SINCE]


def test_grouping_gives_the_recorded_incidents() -> None:
    got = [inc.to_json() for inc in group_incidents(scan_text("\n".join(r["raw"] for r in SINCE)).events)]
    assert got == _jsonl("incidents.jsonl")
    assert [(i["xids"], i["pid"]) for i in got] == [([31], _pid("wild.txt")), ([13], _pid("misaligned.txt"))]
    assert len(got[1]["events"]) == 3 and "Misaligned Address" in got[1]["errors"]


def test_nvml_gave_the_xid_numbers_only() -> None:
    nv = [XidEvent.from_json(r) for r in _jsonl("nvml.jsonl")]
    assert [e.xid for e in nv] == [31, 13]
    assert all(e.pid is None and e.mmu is None for e in nv) and {e.pci for e in nv} == {"0000:00:06"}
