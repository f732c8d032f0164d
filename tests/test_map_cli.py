"""``faulthunt map`` and map_run on constructed run directories.

xid.jsonl records follow contracts.md's XidEvent.to_json shape (constructed here; the ``raw``
lines are real ones from tests/data/h200/nvrm_lines.txt); sanitizer.json follows the contract's
findings shape (constructed).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faulthunt.cli import main
from faulthunt.mapper import map_run
from faulthunt.rundir import Layout, append_jsonl, read_json

BASE = 0x7F6F_E7E0_0000
WILD_RAW = ("NVRM: Xid (PCI:0000:00:06): 31, pid=543, name=faults, channel 0x0000000a, intr 00000000. "
            "MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ 0x7faf_e7e00000. "
            "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE")


def _ledger(run: Path, pid: int, records: list[dict]) -> None:
    for r in records:
        append_jsonl(run / Layout.LEDGER_DIR / f"{pid}.jsonl", {"pid": pid, **r})


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    (run / Layout.LEDGER_DIR).mkdir(parents=True)
    _ledger(run, 543, [
        {"event": "alloc", "address": BASE, "size": 4000, "t": 100.0, "t_mono": 30.0,
         "nodeid": "t.py::test_wild", "source": "cupti", "kind": "device"},
        {"event": "launch", "kernel": "_Z10wild_writePix", "t": 100.5, "t_mono": 30.5, "nodeid": "t.py::test_wild"},
        {"event": "alloc", "address": BASE + (8 << 20), "size": 4096, "t": 101.0, "t_mono": 31.0,
         "nodeid": "t.py::test_other", "source": "cupti"},
    ])
    xid = {"xid": 31, "pci": "0000:00:06", "pid": 543, "process": "faults", "category": "application",
           "message": "...", "mmu": {"address": 0x7FAFE7E00000, "engine": "GRAPHICS", "gpc": 1,
                                     "client": "GPCCLIENT_T1_8", "fault_type": "FAULT_PDE",
                                     "access_type": "ACCESS_TYPE_VIRT_WRITE"},
           "seq": 812, "ts": 30.6, "wall": None, "caused_by": None, "raw": WILD_RAW,
           "worker": "gw0", "nodeid": "t.py::test_wild", "base_nodeid": "t.py::test_wild"}
    append_jsonl(run / Layout.XID, xid)
    append_jsonl(run / Layout.XID, {**xid, "xid": 13, "mmu": None})  # not an MMU fault: not mapped
    return run


def test_map_json_shape_and_address_forms(run_dir, capsys):
    rc = main(["map", "0x7f6f_e7e00fa0", str(BASE + 8), "--ledger", str(run_dir / "ledger"), "--json"])
    assert rc == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [o["verdict"] for o in out] == ["past_end", "inside"]
    assert out[0]["offset"] == 4000 and out[0]["allocation"]["address"] == BASE
    assert out[0]["allocation"]["source"] == "cupti"
    assert {"verdict", "allocation", "offset", "nearest", "launches", "nodeid"} <= set(out[0])


def test_map_page_human_output(run_dir, capsys):
    rc = main(["map", "0x7f6f_e7e00000", "--ledger", str(run_dir / "ledger" / "543.jsonl"), "--page",
               "--pid", "543", "--at", "100.6"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "PAST_END" in text and "offset [4000, 4095]" in text
    assert "_Z10wild_writePix" in text and "t.py::test_wild" in text


def test_map_run_maps_xid31_at_its_kernel_time(run_dir, capsys):
    entries = map_run(run_dir)
    assert len(entries) == 1
    e = entries[0]
    assert e["origin"] == "xid" and e["verdict"] == "unmapped" and e["pid"] == 543
    assert e["at"] == pytest.approx(100.6)  # ts 30.6 on the monotonic clock -> wall via the ledger
    assert e["nearest"]["below"]["allocation"]["address"] == BASE
    assert [k["kernel"] for k in e["launches"]] == ["_Z10wild_writePix"]
    assert e["nodeid"] == "t.py::test_wild"
    assert read_json(run_dir / Layout.MAPPING) == entries


def test_cli_map_run_without_addresses(run_dir, capsys):
    assert main(["map", "--run", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "[xid 31, seq 812]" in out and "UNMAPPED" in out and "mapping.json" in out


def test_cli_map_run_an_xid_without_a_sequence_number_prints_none_of_it(run_dir, capsys):
    # kernels before 3.5 and the simulated kernel log give no sequence numbers
    lines = (run_dir / Layout.XID).read_text().splitlines()
    (run_dir / Layout.XID).write_text("".join(
        json.dumps({**json.loads(x), "seq": None}) + "\n" for x in lines))
    assert main(["map", "--run", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "[xid 31] " in out and "seq None" not in out


def test_map_run_sanitizer_findings_use_the_rerun_ledger(run_dir):
    san = run_dir / Layout.SANITIZER_DIR
    _ledger(san / "run", 900, [
        {"event": "alloc", "address": 0x7000_0000_0000, "size": 4000, "t": 5.0, "source": "cupti"},
        {"event": "launch", "kernel": "max_reduce_off_by_one(const float *, float *, int)", "t": 6.0},
        {"event": "free", "address": 0x7000_0000_0000, "t": 7.0},  # freed while unwinding, after the fault
    ])
    finding = {"tool": "memcheck", "kind": "Invalid __global__ write of size 4 bytes",
               "kernel": "max_reduce_off_by_one(const float *, float *, int)", "file": "faults.cu", "line": 14,
               "access": "write", "size": 4, "address_range": [0x7000_0000_0FA0, 0x7000_0000_0FA3],
               "count": 1, "threads": None, "blocks": None, "example": None, "host_stack": [], "nodeid": "t.py::x"}
    (san).mkdir(exist_ok=True)
    (san / "sanitizer.json").write_text(json.dumps({"findings": [finding, {**finding, "address_range": None}],
                                                     "records": 2, "tests": [], "exit_status": 1}))
    entries = map_run(run_dir)
    s = [e for e in entries if e["origin"] == "sanitizer"]
    assert len(s) == 1
    assert s[0]["verdict"] == "past_end" and s[0]["offset"] == 4000 and s[0]["at"] == 6.0
    assert s[0]["time_basis"].startswith("the last recorded launch")


def test_map_run_without_ledger_says_why(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    append_jsonl(run / Layout.XID, {"xid": 31, "pid": 1, "mmu": {"address": 0x7F00_0000_0000}, "raw": WILD_RAW})
    entries = map_run(run)
    assert entries[0]["verdict"] is None and "no ledger" in entries[0]["reason"]


def test_map_unknown_pid_and_bad_address_exit_codes(run_dir, capsys):
    assert main(["map", "0x10", "--ledger", str(run_dir / "ledger"), "--pid", "1"]) == 3
    err = capsys.readouterr().err
    assert "no records for pid 1" in err and "fix:" in err
    assert main(["map", "zzz", "--ledger", str(run_dir / "ledger")]) == 2
    assert "not an address" in capsys.readouterr().err


def test_map_reports_skipped_torn_lines(run_dir, capsys):
    with open(run_dir / "ledger" / "543.jsonl", "a") as fh:
        fh.write('{"event": "alloc", "addr')
    assert main(["map", hex(BASE), "--ledger", str(run_dir / "ledger"), "--json"]) == 0
    captured = capsys.readouterr()
    assert "skipped 1 malformed" in captured.err and "torn last line" in captured.err
    assert json.loads(captured.out)["verdict"] == "inside"


def test_map_run_on_a_real_kmsg_xid_parsed_by_kernlog(tmp_path):
    """The H200's raw /dev/kmsg record of `faults uaf` (tests/data/h200/kmsg_raw.txt), parsed by
    faulthunt.kernlog into xid.jsonl as stress writes it; the ledger is constructed from what the
    program printed (plain_uaf.txt: freed=0x7fe33de00000, 4000 bytes), on the kmsg clock."""
    parse = pytest.importorskip("faulthunt.kernlog.parse")
    raw = next(ln for ln in (Path(__file__).parent / "data" / "h200" / "kmsg_raw.txt").read_text().splitlines()
               if " 31," in ln and "pid=583" in ln)
    ev = parse.parse_line(raw)
    assert ev is not None and ev.ts is not None
    run = tmp_path / "run"
    (run / Layout.LEDGER_DIR).mkdir(parents=True)
    off = 1_764_683_000.0  # wall minus monotonic, as the worker's records carry it
    _ledger(run, 583, [
        {"event": "alloc", "address": 0x7FE33DE00000, "size": 4000, "t": off + ev.ts - 0.3,
         "t_mono": ev.ts - 0.3, "source": "cupti", "nodeid": "t.py::test_uaf"},
        {"event": "free", "address": 0x7FE33DE00000, "t": off + ev.ts - 0.2, "t_mono": ev.ts - 0.2,
         "source": "cupti", "nodeid": "t.py::test_uaf"},
        {"event": "launch", "kernel": "_Z5scalePfif", "t": off + ev.ts - 0.1, "t_mono": ev.ts - 0.1,
         "nodeid": "t.py::test_uaf"},
        # after the fault: a later test reuses the address; at the Xid's time it was still freed
        {"event": "alloc", "address": 0x7FE33DE00000, "size": 4000, "t": off + ev.ts + 1.0,
         "t_mono": ev.ts + 1.0, "source": "cupti", "nodeid": "t.py::test_next"},
    ])
    append_jsonl(run / Layout.XID, {**ev.to_json(), "worker": "gw0", "nodeid": "t.py::test_uaf"})
    [e] = map_run(run)
    assert e["verdict"] == "freed" and e["offset"] == [0, 3999]
    assert e["allocation"]["freed"]["nodeid"] == "t.py::test_uaf"
    assert e["time_basis"].startswith("kernel-log timestamp")
    assert [k["kernel"] for k in e["launches"]] == ["_Z5scalePfif"]


# --- batch input: --addresses FILE / - ------------------------------------------------------------

def test_map_addresses_file_with_pids_times_comments(run_dir, tmp_path, capsys):
    f = tmp_path / "addrs.txt"
    f.write_text(f"# from xid.jsonl\n0x7f6f_e7e00fa0\n\n{BASE + 8} 543 -   # a comment\n"
                 f"{hex(BASE + 8)} - 99.0\n{hex(BASE + 8)} 1\n")
    rc = main(["map", "--ledger", str(run_dir / "ledger"), "--addresses", str(f), "--json"])
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert rc == 3  # one line names a pid the ledger does not have
    assert [g["verdict"] for g in got] == ["past_end", "inside", "unmapped", None]
    assert got[2]["at"] == 99.0 and "no records for pid 1" in got[3]["reason"]


def test_map_addresses_from_stdin_and_bad_line_says_which(run_dir, monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(f"{hex(BASE)}\n{hex(BASE + 1)} 543\n"))
    assert main(["map", "--ledger", str(run_dir / "ledger"), "--addresses", "-", "--json"]) == 0
    assert [json.loads(x)["verdict"] for x in capsys.readouterr().out.splitlines()] == ["inside", "inside"]
    monkeypatch.setattr("sys.stdin", io.StringIO("0x10\nzzz 5\n"))
    assert main(["map", "--ledger", str(run_dir / "ledger"), "--addresses", "-"]) == 2
    err = capsys.readouterr().err
    assert "standard input line 2" in err and "fix:" in err


def test_map_addresses_missing_file_is_input_error(run_dir, tmp_path, capsys):
    assert main(["map", "--ledger", str(run_dir / "ledger"), "--addresses", str(tmp_path / "nope")]) == 3
    assert "cannot read addresses" in capsys.readouterr().err


def test_a_run_that_cannot_be_written_still_gets_its_mapping(tmp_path, capsys):
    """A read-only run (an unpacked artifact): the mapping is shown, then mapping.json's failure
    is a warning (it used to end the command with only the write error, the mapping unseen)."""
    from faulthunt.cli import main
    from faulthunt.rundir import create_run_dir

    run = create_run_dir(tmp_path / "r")
    (run / "mapping.json").mkdir()  # unwritable, as a read-only directory is to root too
    (run / "mapping.json" / "keep").write_text("x")
    assert main(["map", "--run", str(run)]) == 0
    out, err = capsys.readouterr()
    assert out == "no Xid 31 and no sanitizer finding with an address in this run\n"
    assert f"faulthunt map: not written: cannot write {run / 'mapping.json'}" in err


def test_map_addresses_file_names_a_bad_line_once_escaped(run_dir, tmp_path, capsys):
    junk = tmp_path / "junk.txt"
    junk.write_bytes(b"ab\x00\x1b[31mcd\n")
    assert main(["map", "--addresses", str(junk), "--ledger", str(run_dir / "ledger")]) == 2
    err = capsys.readouterr().err
    assert "line 1: not an address: 'ab\\x00\\x1b[31mcd'" in err and "\x1b" not in err
    junk.write_text("0x7f00 x\n")
    assert main(["map", "--addresses", str(junk), "--ledger", str(run_dir / "ledger")]) == 2
    assert "line 1: '0x7f00 x': " in capsys.readouterr().err  # which column: the line is shown
