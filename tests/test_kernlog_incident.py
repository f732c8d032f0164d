"""Grouping Xid lines into incidents: real H200 sequences and the documented consequence rules."""

from __future__ import annotations

from pathlib import Path

from faulthunt.kernlog.incident import group_incidents, summarize_incidents
from faulthunt.kernlog.parse import parse_text

DATA = Path(__file__).parent / "data"


def _h200(name: str):
    return parse_text((DATA / "h200" / name).read_text(encoding="utf-8", errors="replace"))


def test_h200_misaligned_lines_form_one_incident_with_the_pid_of_the_last_line() -> None:
    """Real capture: warp + ESR lines without pid, then the line with pid=553: one fault of pid 553."""
    incs = group_incidents(_h200("dmesg.txt"))
    faults = [i for i in incs if i.culprit == "application"]
    assert [(i.root.xid, i.pid) for i in faults] == [(31, 543), (13, 553), (31, 583), (31, 1503), (31, 1532), (13, 1539)]
    mis = faults[1]
    assert len(mis.events) == 3 and mis.errors == ("Misaligned Address",) and mis.addresses == ()
    assert faults[0].addresses == (0x7FAFE7E00000,) and len(faults[0].events) == 1


def test_same_grouping_without_kernel_times() -> None:
    """dmesg -T has whole seconds only: grouping falls back to line order and the pid-burst rule."""
    key = lambda incs: [(i.root.xid, i.pid, len(i.events)) for i in incs]  # noqa: E731
    assert key(group_incidents(_h200("dmesg_T.txt"))) == key(group_incidents(_h200("dmesg.txt")))


def test_lone_43_of_a_killed_process_is_its_own_incident() -> None:
    incs = group_incidents(_h200("dmesg.txt"))
    lone = [i for i in incs if i.root.xid == 43]
    assert len(lone) == 16 and all(i.culprit == "consequence" and not i.consequences for i in lone)


LINES = """\
[10.000000] NVRM: Xid (PCI:0000:01:00): 31, pid=100, name=py, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_1 faulted @ 0x7f00_00200000. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_READ
[10.000500] NVRM: Xid (PCI:0000:01:00): 13, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): MMU Fault
[10.100000] NVRM: Xid (PCI:0000:01:00): 43, pid=100, name=py, channel 0x0000000a
[10.200000] NVRM: Xid (PCI:0000:01:00): 45, pid=200, name=other, Ch 00000001 caused by previous Xid 31
[10.300000] NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)
[11.000000] NVRM: Xid (PCI:0000:02:00): 31, pid=300, name=py, channel 0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 UNRECOGNIZED_CLIENT faulted @ 0x182400_0030198d. Fault is of type UNRECOGNIZED_FAULT UNRECOGNIZED_ACCESS_TYPE
[12.000000] NVRM: Xid (PCI:0000:01:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected
"""


def test_consequences_attach_to_their_fault() -> None:
    incs = group_incidents(parse_text(LINES))
    first = incs[0]
    assert [e.xid for e in first.events] == [31, 13]
    assert [e.xid for e in first.consequences] == [43, 45, 154]
    assert first.xids == (13, 31, 43, 45, 154) and first.pid == 100
    assert "then Xid 43, Xid 45, Xid 154" in first.describe()
    other_gpu = incs[1]
    assert other_gpu.pci == "0000:02:00" and other_gpu.addresses == ()
    assert "undecodable" in other_gpu.describe()
    assert incs[2].root.xid == 48 and incs[2].culprit == "machine"
    assert summarize_incidents(incs) == {"incidents": 3, "by_culprit": {"application": 2, "machine": 1},
                                         "by_category": {"app_memory_fault": 2, "ecc_memory": 1}}
    assert incs[0].to_json()["consequences"][0]["xid"] == 43


def test_43_of_another_pid_is_not_a_consequence() -> None:
    text = LINES.splitlines()[0] + "\n[10.1] NVRM: Xid (PCI:0000:01:00): 43, pid=999, name=x, channel 0x0000000b\n"
    incs = group_incidents(parse_text(text))
    assert [(i.root.xid, i.pid) for i in incs] == [(31, 100), (43, 999)]


def test_empty() -> None:
    assert group_incidents([]) == []
