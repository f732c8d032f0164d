"""`faulthunt map` names a fault in a guard slot exactly: the guard's verdict, not a guess.

Over the real H200 guard run (tests/data/guard/h200/faults_run: four Xid 31 pages, PROVENANCE.md
there) through `map_run` and `faulthunt map --run`, and over ledgers made by the guard allocator
driving the fake driver: the alignment slack reads "inside the slack, not guardable" even where a
driver-level record of the mapped granule would make the rules say `inside`; guard records are
read back alone (not the whole ledger), also by forked readers.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from faulthunt.cli import main
from faulthunt.guard import parse_spec
from faulthunt.guard.allocator import GuardAllocator
from faulthunt.guard.fake import FakeVmmDriver
from faulthunt.ledger import reader as reader_mod
from faulthunt.ledger.reader import build_ledger, load_ledger
from faulthunt.mapper import map_address, map_run

H200 = Path(__file__).parent / "data" / "guard" / "h200"
PRINTED = {r["test"]: r for r in json.loads((H200 / "results.json").read_text())["faults"]["rows"]}
G = 2 << 20


def test_map_run_gives_each_h200_xid31_page_the_guard_text_the_h200_printed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(H200 / "faults_run", run)
    entries = map_run(run)
    assert len(entries) == 4
    for e in entries:
        name = e["attributed_nodeid"].split("::")[-1]
        want = PRINTED[name]
        assert e["basis"] == "guard" and e["caught"] is True
        assert (e["verdict"], e["text"], e["address"]) == (want["verdict"], want["text"], want["page"])
        assert e["allocation"]["source"] == "guard" and e["allocation"]["nodeid"].endswith(name)
        # what the nearest-allocation rules would have said stays beside it
        assert e["ledger_verdict"] == want["verdict"]
    assert json.loads((run / "mapping.json").read_text()) == entries


def test_map_cli_over_the_h200_run_prints_the_guard_text(tmp_path: Path, capsys: Any) -> None:
    run = tmp_path / "run"
    shutil.copytree(H200 / "faults_run", run)
    assert main(["map", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    for row in PRINTED.values():
        if row["want"] != "clean":
            assert f"  {row['text']}\n" in out
    assert out.count("(a guard slot: exact)") == 4
    assert main(["map", "--run", str(run), "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert sorted(x["text"] for x in lines) == sorted(r["text"] for r in PRINTED.values() if r.get("text"))


# --- ledgers made by the allocator over the fake driver -------------------------------------------

class Sink:
    """A ledger writer's records, in memory (increasing times, one pid)."""

    def __init__(self, pid: int = 7) -> None:
        self.records: list[dict[str, Any]] = []
        self.t = 1000.0
        self.pid = pid

    def record(self, event: str, source: str, *, nodeid: str | None = None, **fields: Any) -> None:
        self.t += 1.0
        rec = {"event": event, "t": self.t, "pid": self.pid, "nodeid": nodeid, "source": source,
               **{k: v for k, v in fields.items() if v is not None}}
        self.records.append(json.loads(json.dumps(rec)))


def _slack_ledger(with_granule: bool) -> tuple[list[dict[str, Any]], int]:
    """A 4000-byte allocation guarded at align 256 (96 bytes of slack), live; optionally a
    driver-level record of the slot's mapped granule (what CUPTI may see of cuMemMap)."""
    sink = Sink()
    guard = GuardAllocator(parse_spec("1"), FakeVmmDriver(), sink)
    guard.begin_test("tests/t.py::test_planted[oob_write-cuda]")
    slot = guard.allocate(4000, "cuda_bindings")
    assert slot is not None
    recs = list(sink.records)
    if with_granule:
        lo, hi = slot.mapped
        recs.insert(0, {"event": "alloc", "t": recs[0]["t"] - 0.5, "pid": 7, "source": "cupti",
                        "address": lo, "size": hi - lo, "kind": "device"})
    return recs, slot.address


@pytest.mark.parametrize("with_granule", [False, True])
def test_an_access_in_the_slack_reads_not_guardable_never_inside(with_granule: bool) -> None:
    recs, a = _slack_ledger(with_granule)
    ledger = build_ledger(recs)
    v = map_address(ledger, a + 4000, pid=7).to_json()
    assert v["verdict"] == "slack" and v["basis"] == "guard" and v["caught"] is False
    assert v["text"].startswith("inside the slack, not guardable: 0 bytes past the end of the "
                                "4000-byte cuda_bindings allocation")
    assert "96 bytes its 256-byte alignment leaves before the guard" in v["text"]
    assert v["beyond"] == 0 and v["offset"] == 4000
    # the rules alone: inside the mapped granule, or just past the end of the allocation
    assert v["ledger_verdict"] == ("inside" if with_granule else "past_end")
    # the last byte of the slack, as a byte and as its page; the guard right after it
    assert map_address(ledger, a + 4095, pid=7).verdict == "slack"
    page = map_address(ledger, a + 4000, pid=7, page=True).to_json()
    assert page["verdict"] == "inside" and page["caught"] is False   # the page holds the allocation
    assert "mapped: a fault here is not a guard catch" in page["note"]
    past = map_address(ledger, a + 4096, pid=7, page=True).to_json()
    assert past["verdict"] == "past_end" and past["caught"] and past["beyond"] == [96, 4191]
    # without a pid the guard's catch wins, and the slack is still not called inside
    assert map_address(ledger, a + 4000).verdict == "slack"


def test_map_cli_prints_the_slack_text(tmp_path: Path, capsys: Any) -> None:
    recs, a = _slack_ledger(True)
    path = tmp_path / "7.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["map", hex(a + 4010), "--ledger", str(path)]) == 0
    out = capsys.readouterr().out
    assert "SLACK (a guard slot: exact)" in out
    assert "  inside the slack, not guardable: 10 bytes past the end" in out


def test_outside_every_slot_the_rules_decide_as_before() -> None:
    recs, a = _slack_ledger(False)
    recs.append({"event": "alloc", "t": 2000.0, "pid": 7, "source": "cupti", "address": 0x1000_0000,
                 "size": 4096, "kind": "device"})
    v = map_address(build_ledger(recs), 0x1000_0000 + 4100, pid=7).to_json()
    assert v["verdict"] == "past_end" and "basis" not in v and "ledger_verdict" not in v


def _many_launches_ledger(tmp_path: Path, pids: tuple[int, ...]) -> dict[int, int]:
    """One file per pid: a guard slot (allocated, freed) among 5,000 launches."""
    addresses = {}
    for pid in pids:
        sink = Sink(pid)
        guard = GuardAllocator(parse_spec("1"), FakeVmmDriver(), sink)
        guard.begin_test(f"t.py::test_{pid}")
        slot = guard.allocate(4096, "cupy")
        assert slot is not None
        addresses[pid] = slot.address
        lines = [json.dumps(r) for r in sink.records]
        t = sink.t
        lines += [json.dumps({"event": "launch", "t": t + i * 1e-3, "pid": pid, "kernel": "k",
                              "source": "cupti", "nodeid": f"t.py::test_{pid}"}) for i in range(5000)]
        guard.free(slot.address)
        lines += [json.dumps({**r, "t": t + 10.0}) for r in sink.records[-1:]]
        (tmp_path / f"{pid}.jsonl").write_text("\n".join(lines) + "\n")
    return addresses


def test_only_guard_records_are_read_back_whole(tmp_path: Path, monkeypatch: Any) -> None:
    addresses = _many_launches_ledger(tmp_path, (11,))
    ledger = load_ledger(tmp_path)
    reads: list[int] = []
    real = reader_mod.RecordStore.get
    monkeypatch.setattr(reader_mod.RecordStore, "get", lambda self, ref: reads.append(ref) or real(self, ref))
    assert len(ledger.pid(11).guard) == 2                  # the slot's alloc and its free
    v = map_address(ledger, addresses[11] + 100, pid=11)
    assert v.verdict == "freed" and v.guard is not None
    # the guard's two records, and what the verdict shows (the test running, the launches): a
    # handful, never the ledger's 5,000 records
    assert len(reads) < 20


def test_forked_readers_keep_the_guard_records(tmp_path: Path) -> None:
    addresses = _many_launches_ledger(tmp_path, (21, 22))
    ledger = load_ledger(tmp_path, jobs=2)
    for pid, a in addresses.items():
        v = map_address(ledger, a + 4096, pid=pid, page=True).to_json()
        assert v["basis"] == "guard" and v["verdict"] == "past_end"
        assert v["allocation"]["address"] == a and v["allocation"]["freed"] is not None
