"""The Xid parser: real H200 captures, every driver era and container (fixtures), malformed input, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.kernlog.parse import (
    decode_mmu,
    normalize_pci,
    parse_container,
    parse_gpu_uuids,
    parse_line,
    parse_text,
    scan_bytes,
    scan_text,
)
from faulthunt.records.xid import XidEvent

DATA = Path(__file__).parent / "data"
H200 = DATA / "h200"
KERNLOG = DATA / "kernlog"

# The first real Xid 31 seen on the H200 (driver 580.159.04), as the GPU machine's notes recorded it.
H200_LINE = (
    "NVRM: Xid (PCI:0000:00:06): 31, pid=617, name=faults, channel 0x0000000a, intr 00000000. MMU Fault: "
    "ENGINE GRAPHICS GPC1 GPCCLIENT_T1_6 faulted @ 0x7f7d_dbe00000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
)


def test_real_h200_line_matches_the_issue_schema() -> None:
    ev = parse_line(H200_LINE)
    assert ev is not None
    d = ev.to_json()
    assert (d["xid"], d["pci"], d["pid"], d["process"]) == (31, "0000:00:06", 617, "faults")
    assert d["category"] == "app_memory_fault"
    assert d["message"].startswith("channel 0x0000000a, intr 00000000. MMU Fault:")
    assert d["mmu"]["address"] == 0x7F7DDBE00000 == (0x7F7D << 32) | 0xDBE00000
    assert {k: d["mmu"][k] for k in ("engine", "gpc", "client", "fault_type", "access_type")} == {
        "engine": "GRAPHICS", "gpc": 1, "client": "GPCCLIENT_T1_6", "fault_type": "FAULT_PDE",
        "access_type": "ACCESS_TYPE_VIRT_WRITE",
    }
    assert ev.channel == 0x0A and ev.mmu is not None and ev.mmu.from_sm and ev.mmu.is_write
    assert json.loads(json.dumps(d)) == d  # JSON-clean
    assert XidEvent.from_json(d) == ev


# --- real captures (tests/data/h200/PROVENANCE.md: H200, driver 580.159.04, dmesg/kmsg as root) ---

H200_CONTAINERS = ["dmesg.txt", "dmesg_T.txt", "dmesg_iso.txt", "dmesg_r.txt", "dmesg_decode.txt", "kmsg_raw.txt",
                   "nvrm_lines.txt"]


def _h200(name: str) -> str:
    return (H200 / name).read_text(encoding="utf-8", errors="replace")


@pytest.mark.parametrize("name", H200_CONTAINERS)
def test_h200_captures_every_container_gives_the_same_reports(name: str) -> None:
    events = parse_text(_h200(name))
    reference = parse_text(_h200("dmesg.txt"))
    assert len(events) == len(reference) == 26
    strip = lambda e: (e.xid, e.pci, e.pid, e.process, e.message, e.mmu, e.gr)  # noqa: E731
    assert [strip(e) for e in events] == [strip(e) for e in reference]
    assert scan_text(_h200(name)).unparsed == ()


def test_h200_capture_contents() -> None:
    events = parse_text(_h200("dmesg.txt"))
    assert [e.xid for e in events].count(31) == 4
    assert [e.xid for e in events].count(13) == 6
    assert [e.xid for e in events].count(43) == 16
    wild = events[0]
    assert (wild.pid, wild.ts, wild.mmu.address, wild.mmu.access_type) == (
        543, 33.03447, 0x7FAFE7E00000, "ACCESS_TYPE_VIRT_WRITE")
    uaf = next(e for e in events if e.pid == 583)
    assert uaf.mmu.address == 0x7FE33DE00000 and uaf.mmu.access_type == "ACCESS_TYPE_VIRT_READ"
    warp, esr, owner = events[1:4]
    assert (warp.pid, warp.gr.kind, warp.gr.gpc, warp.gr.tpc, warp.gr.sm, warp.gr.error) == (
        None, "warp", 1, 4, 0, "Misaligned Address")
    assert esr.gr.kind == "esr" and esr.gr.esr[0] == (0x519730, 0x500000F)
    assert (owner.pid, owner.process, owner.gr.kind, owner.channel) == (553, "faults", "other", 0x0A)
    assert all(e.process == "faults" and e.channel == 0x0A for e in events if e.xid == 43 and e.pid < 1300)


def test_h200_kmsg_records_carry_seq_level_and_usec_time() -> None:
    events = parse_text(_h200("kmsg_raw.txt"))
    assert [e.seq for e in events[:3]] == [361, 362, 363]
    assert events[0].ts == pytest.approx(33.034470) and events[0].level == 4


def test_h200_dmesg_T_and_iso_keep_the_wall_time() -> None:
    assert parse_text(_h200("dmesg_T.txt"))[0].wall == "Wed Dec  2 14:43:01 2026"
    iso = parse_text(_h200("dmesg_iso.txt"))[0]
    assert iso.wall == "2026-12-02T14:43:01,696665+00:00" and iso.ts is None


def test_h200_gpu_uuid_line() -> None:
    assert parse_gpu_uuids(_h200("dmesg.txt")) == {"0000:00:06": "GPU-f443d679-49ad-ee2e-df61-53505888c8f0"}


# --- every era and container (tests/data/kernlog, each file with its provenance line) ---

def _row(e: XidEvent) -> tuple:
    mmu = None if e.mmu is None else (e.mmu.address, e.mmu.gpc, e.mmu.client, e.mmu.access_type, e.mmu.decodable)
    return (e.xid, e.pci, e.gpu_instance, e.compute_instance, e.pid, e.process, e.channel, e.caused_by, mmu)


FIXTURES = {
    "era_legacy_nopci.log": [
        (3, "0000:01:00", None, None, None, None, None, None, None),
        (31, "0000:01:00", None, None, None, None, 3, None, None),
    ],
    "era_418_nopid_syslog.log": [
        (31, "0000:3b:00", None, None, None, None, 8, None, (0x7F2FCCA58000, None, "GPCCLIENT_T1_14", "ACCESS_TYPE_READ", True)),
        (13, "0000:3b:00", None, None, None, None, None, None, None),
    ],
    "era_450_pid_dmesg.log": [
        (31, "0000:65:00", None, None, 1234, None, 8, None, (0x7FD790743000, None, "GPCCLIENT_T1_3", "ACCESS_TYPE_VIRT_READ", True)),
        (43, "0000:65:00", None, None, 1234, None, 8, None, None),
    ],
    "era_515_unknown_ctime.log": [
        (13, "0000:af:00", None, None, None, None, None, None, None),
        (13, "0000:af:00", None, None, None, None, None, None, None),
        (31, "0000:af:00", None, None, 626486, "pt_main_thread", 8, None, (0x7F2FCCA58000, None, "GPCCLIENT_T1_14", "ACCESS_TYPE_VIRT_READ", True)),
        (48, "0001:6c:00", None, None, None, None, None, None, None),
        (79, "0001:6c:00", None, None, None, None, None, None, None),
    ],
    "era_570_nopid_localized.log": [
        (13, "0000:01:00", None, None, None, None, None, None, None),
        (62, "0000:01:00", None, None, None, None, None, None, None),
        (154, "0000:01:00", None, None, None, None, None, None, None),
    ],
    "era_580_channel_iso.log": [
        (31, "0000:2b:00", None, None, 13705, "UnrealEditor", 0x0C, None, (0, 2, "GPCCLIENT_PROP_0", "ACCESS_TYPE_VIRT_READ", True)),
        (45, "0000:2b:00", None, None, 2171, "xdg-desktop-por", 0x0A, None, None),
        (109, "0000:2b:00", None, None, 4242, "python3", 0x0D, None, None),
    ],
    "era_590_caused_by_kmsg.log": [
        (149, "0018:01:00", None, None, None, None, None, None, None),
        (45, "0018:01:00", None, None, 1818990, "python3", 1, 149, None),
    ],
    "mig_console.log": [
        (94, "0000:01:00", 5, None, 7194, None, None, None, None),
        (31, "0000:01:00", 1, 2, 8100, "python", 0x11, None, (0x7F0012345000, 0, "GPCCLIENT_T1_2", "ACCESS_TYPE_VIRT_ATOMIC", True)),
    ],
    "names_talos.log": [
        (43, "0000:3B:00", None, None, 99, "VLLM::EngineCor", 0x0A, None, None),
        (43, "0000:3B:00", None, None, 100, "nvc:[driver]", 0x0B, None, None),
        (31, "0000:3B:00", None, None, 101, "Web Content", 0x0C, None, (0x7FFF00001000, None, "HUBCLIENT_CE0", "ACCESS_TYPE_VIRT_WRITE", True)),
    ],
    "undecodable_decode.log": [
        (31, "0000:04:00", None, None, 777, "bench", 2, None, (None, 0, "UNRECOGNIZED_CLIENT", "UNRECOGNIZED_ACCESS_TYPE", False)),
    ],
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_eras_and_containers(name: str) -> None:
    text = (KERNLOG / name).read_text()
    assert text.startswith("# provenance:")
    scan = scan_text(text)
    assert [_row(e) for e in scan.events] == FIXTURES[name]
    assert scan.unparsed == ()
    assert scan_bytes(text.encode()).events == scan.events


def test_every_fixture_file_is_checked() -> None:
    assert sorted(p.name for p in KERNLOG.glob("*.log")) == sorted(FIXTURES)


# --- containers, one line each ---

BODY = "NVRM: Xid (PCI:0000:00:06): 43, pid=680, name=faults, channel 0x0000000a"

CONTAINERS = [
    # (prefix, ts, seq, wall, level)
    ("", None, None, None, None),
    ("[   43.047891] ", 43.047891, None, None, None),
    ("[Wed Dec  2 14:43:11 2026] ", None, None, "Wed Dec  2 14:43:11 2026", None),
    ("2026-12-02T14:43:11,123456+00:00 ", None, None, "2026-12-02T14:43:11,123456+00:00", None),
    ("kern  :warn  : [   43.047891] ", 43.047891, None, None, 4),
    ("<4>[   43.047891] ", 43.047891, None, None, 4),
    ("4,366,43047891,c;", 43.047891, 366, None, 4),
    ("4,366,43047891,-,caller=T12;", 43.047891, 366, None, 4),
    ("Nov 29 11:28:11 zeus kernel: ", None, None, "Nov 29 11:28:11", None),
    ("Feb 15 17:37:45 Gipfeli kernel: [82659.755847] ", 82659.755847, None, "Feb 15 17:37:45", None),
    ("Dec  2 11:38:47 worker4 kernel: [  219.470994] ", 219.470994, None, "Dec 2 11:38:47", None),
    ("kwi 15 07:56:59 testowy kernel: ", None, None, "kwi 15 07:56:59", None),
    ("mar. 15 07:56:59 hôte kernel: ", None, None, "mar. 15 07:56:59", None),
    ("Dec 02 11:38:47.123456 host kernel: ", None, None, "Dec 02 11:38:47.123456", None),
    ("[   43.047891] host kernel: ", 43.047891, None, None, None),  # journalctl -o short-monotonic
    ("2025-01-21T04:41:44.285060+00:00 host kernel: ", None, None, "2025-01-21T04:41:44.285060+00:00", None),
    ("192.168.11.119: kern: warning: [2026-04-22T21:30:51.870495804Z]: ", None, None,
     "2026-04-22T21:30:51.870495804Z", 4),
    ("something unknown | ", None, None, None, None),
]


@pytest.mark.parametrize("prefix,ts,seq,wall,level", CONTAINERS)
def test_each_container_is_stripped(prefix: str, ts: float | None, seq: int | None, wall: str | None,
                                    level: int | None) -> None:
    ev = parse_line(prefix + BODY + "\r\n")
    assert ev is not None
    assert (ev.xid, ev.pid, ev.process, ev.message) == (43, 680, "faults", "channel 0x0000000a")
    assert (ev.ts, ev.seq, ev.wall, ev.level) == (ts, seq, wall, level)
    assert ev.raw == prefix + BODY


def test_parse_container_directly() -> None:
    c = parse_container("Feb 15 17:37:45 Gipfeli kernel: [82659.755847] ")
    assert c.kinds == ("syslog", "uptime") and c.host == "Gipfeli"


# --- the pid/name/message grammar, table-driven ---

GRAMMAR = [
    # (after "NVRM: Xid (PCI:0000:01:00): ", xid, pid, process, message)
    ("46", 46, None, None, ""),
    ("79, GPU has fallen off the bus.", 79, None, None, "GPU has fallen off the bus."),
    ("79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", 79, None, None, "GPU has fallen off the bus."),
    ("43, pid=<unknown>, name=<unknown>, Ch 00000001", 43, None, None, "Ch 00000001"),
    ("43, pid=35521, Ch 00000008", 43, 35521, None, "Ch 00000008"),
    ("45, pid=1, name=a, b, channel 0x1", 45, 1, "a", "b, channel 0x1"),
    ("43, pid=7, name=my proc, channel 0x00000002", 43, 7, "my proc", "channel 0x00000002"),
    ("43, pid=7, name=x", 43, 7, "x", ""),
    ("43, pid=7, name=, channel 0x2", 43, 7, None, "channel 0x2"),
    ("13, Graphics Exception: ChID 0052, Class 00000000, Offset 00001b0c, Data 1000f010", 13, None, None,
     "Graphics Exception: ChID 0052, Class 00000000, Offset 00001b0c, Data 1000f010"),
    ("119, pid=55, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 "
     "(GSP_RM_CONTROL) sequence 1 (0x20800a4c 0x4).", 119, 55, "nvidia-smi",
     "Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) sequence 1 "
     "(0x20800a4c 0x4)."),
]


@pytest.mark.parametrize("tail,xid,pid,process,message", GRAMMAR)
def test_pid_name_message_grammar(tail: str, xid: int, pid: int | None, process: str | None, message: str) -> None:
    ev = parse_line("NVRM: Xid (PCI:0000:01:00): " + tail)
    assert ev is not None
    assert (ev.xid, ev.pid, ev.process, ev.message) == (xid, pid, process, message)


def test_pid_unknown_is_null_in_json() -> None:
    ev = parse_line("NVRM: Xid (PCI:0000:01:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: x")
    assert ev.to_json()["pid"] is None and ev.to_json()["process"] is None


def test_full_bdf_and_upper_case_and_domain() -> None:
    assert parse_line("NVRM: Xid (PCI:0000:3b:00.0): 79, GPU has fallen off the bus.").pci == "0000:3b:00.0"
    assert normalize_pci("00000000:00:06.0") == normalize_pci("0000:00:06") == "0000:00:06"
    assert normalize_pci("0000:3B:00") == "0000:3b:00"


# --- Xid 31 decode ---

MMU = [
    ("MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_T1_7 faulted @ 0x725f_fb800000. Fault is of type FAULT_PTE "
     "ACCESS_TYPE_VIRT_READ", 0x725FFB800000, True, None),
    ("MMU Fault: ENGINE GRAPHICS GPC0 UNRECOGNIZED_CLIENT faulted @ 0x182400_0030198d. Fault is of type "
     "UNRECOGNIZED_FAULT UNRECOGNIZED_ACCESS_TYPE", None, False, "unrecognized"),
    ("MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x2000000_00301000. Fault is of type FAULT_PDE "
     "ACCESS_TYPE_VIRT_READ", None, False, "beyond"),
    ("MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x100000000_00000000. Fault is of type FAULT_PDE "
     "ACCESS_TYPE_VIRT_READ", None, False, "wider"),
    ("MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f00_0000123. Fault is of type FAULT_PDE "
     "ACCESS_TYPE_VIRT_READ", None, False, "8 hex"),
    ("MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f00_00001234. Fault is of type FAULT_PDE "
     "ACCESS_TYPE_VIRT_READ", None, False, "aligned"),
    ("MMU Fault: ENGINE HOST0 HUBCLIENT_HOST faulted @ 0x0_00019000. Fault is of type FAULT_PDE ACCESS_TYPE_PHYS_WRITE",
     0x19000, True, None),
    # cut mid-way: the address is whole, the fault type is missing
    ("MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_6 faulted @ 0x7f7d_dbe00000", 0x7F7DDBE00000, True, None),
]


@pytest.mark.parametrize("text,address,decodable,reason", MMU)
def test_mmu_decode(text: str, address: int | None, decodable: bool, reason: str | None) -> None:
    mmu = decode_mmu("channel 0x0000000a, intr 00000000. " + text)
    assert mmu is not None
    assert (mmu.address, mmu.decodable) == (address, decodable)
    if reason:
        assert reason in (mmu.reason or "")
    else:
        assert mmu.reason is None


def test_mmu_not_present() -> None:
    assert decode_mmu("Ch 00000003, engmask 00000101, intr 10000000") is None


# --- malformed input ---

MALFORMED = [
    "",
    "NVRM: Xid",
    "NVRM: Xid (PCI:0000:0",
    "NVRM: Xid (PCI:0000:00:06): ",
    "NVRM: Xid (PCI:0000:00:06): abc, pid=1",
    "NVRM: Xid (PCI:0000:00:06): 9999999999999999999999999999, pid=1",
    "NVRM: Xid ((((((",
    "\x00\x01\x02NVRM: Xid \xff\xfe",
    "NVRM: GPU at PCI:0000:00:06: GPU-f443d679-49ad-ee2e-df61-53505888c8f0",
]


@pytest.mark.parametrize("line", MALFORMED)
def test_malformed_lines_give_none(line: str) -> None:
    assert parse_line(line) is None


def test_truncated_reports_are_counted_not_dropped_silently() -> None:
    text = "[1.0] NVRM: Xid (PCI:0000:0\n[2.0] " + BODY + "\n[3.0] NVRM: Xid (PCI:0000:00:06): 31, pid=5"
    scan = scan_text(text)
    assert [e.xid for e in scan.events] == [43, 31]
    assert scan.events[1].pid == 5  # what was printed before the cut is kept
    assert scan.unparsed == ("[1.0] NVRM: Xid (PCI:0000:0",)


def test_binary_junk_around_reports() -> None:
    data = b"\x00\xff\xfe garbage \x89PNG\r\n" + (b"[ 5.000000] " + BODY.encode() + b"\n") + bytes(range(256)) + b"\n"
    scan = scan_bytes(data)
    assert [e.pid for e in scan.events] == [680]
    assert [e.pid for e in parse_text(data.decode("utf-8", "replace"))] == [680]


def test_two_reports_glued_on_one_line_give_the_first() -> None:
    assert [e.xid for e in parse_text(BODY + " " + BODY.replace("43", "45", 1))] == [43]


# --- property-based: the parser never raises, and finds reports wherever they sit ---

@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parse_text_never_raises(text: str) -> None:
    events = parse_text(text)
    assert all(isinstance(e, XidEvent) for e in events)
    for line in text.splitlines():
        parse_line(line)


@settings(max_examples=200, deadline=None)
@given(st.binary())
def test_scan_bytes_never_raises(data: bytes) -> None:
    scan_bytes(data)


_pieces = st.sampled_from(["NVRM: Xid (", "PCI:", "0000:00:06", " GPU-I:", "): ", "31", ", ", "pid=", "'<unknown>'",
                           "name=", "faulted @ 0x", "_", "MMU Fault: ENGINE ", "Graphics SM Warp Exception on (GPC ",
                           "caused by previous Xid ", "7f7d", "dbe00000", "[", "]", "4,1,2,-;", "\n", "<4>", "1"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_pieces, st.text(max_size=5)), max_size=40))
def test_parser_never_raises_on_near_miss_reports(parts: list[str]) -> None:
    for ev in parse_text("".join(parts)):
        json.dumps(ev.to_json())


@settings(max_examples=100, deadline=None)
@given(prefix=st.sampled_from([c[0] for c in CONTAINERS]), pid=st.integers(1, 2**22),
       name=st.text(st.characters(blacklist_characters="\n\r,", blacklist_categories=("Cs",)), min_size=1,
                    max_size=15).filter(lambda s: s.strip() == s and s != "<unknown>"),
       hi=st.integers(0, 0x1FFFF), page=st.integers(0, 0xFFFFF))
def test_roundtrip_generated_xid31(prefix: str, pid: int, name: str, hi: int, page: int) -> None:
    lo = page << 12
    line = (f"{prefix}NVRM: Xid (PCI:0000:00:06): 31, pid={pid}, name={name}, channel 0x0000000a, intr 00000000. "
            f"MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_6 faulted @ 0x{hi:x}_{lo:08x}. "
            f"Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE")
    ev = parse_line(line)
    assert ev is not None and (ev.pid, ev.process) == (pid, name)
    assert ev.mmu.address == (hi << 32) | lo and ev.mmu.decodable


def test_fast_event_construction_matches_the_record() -> None:
    from msgspec.structs import fields

    ev = parse_line("[ 1.5] " + H200_LINE)
    assert ev == XidEvent(**{f.name: getattr(ev, f.name) for f in fields(XidEvent)})
    with pytest.raises(AttributeError):  # frozen
        ev.pid = 1  # type: ignore[misc]
    assert hash(ev) == hash(XidEvent.from_json(ev.to_json()))


def test_the_parser_passes_the_record_fields_in_their_declared_order() -> None:
    """The parser builds the records by position (cheaper on every line); the JSON object's keys
    are the fields in that same order."""
    from msgspec.structs import fields

    from faulthunt.kernlog import parse
    from faulthunt.records.xid import MmuFault

    assert parse.EVENT_FIELDS == tuple(f.name for f in fields(XidEvent))
    assert parse.MMU_FIELDS == tuple(f.name for f in fields(MmuFault))
    ev = parse_line("[ 1.5] " + H200_LINE)
    assert tuple(ev.to_json()) == parse.EVENT_FIELDS and tuple(ev.to_json()["mmu"]) == parse.MMU_FIELDS
