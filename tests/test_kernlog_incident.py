"""Grouping Xid lines into incidents: real H200 sequences and the documented consequence rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.kernlog.incident import group_incidents, summarize_incidents
from faulthunt.kernlog.parse import parse_text
from faulthunt.records.xid import XidEvent

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


# --- the linear grouper against the literal scan it replaced -----------------------------------------

def _reference(events, *, window=0.5, same_pid_window=5.0, consequence_window=60.0, max_gap=16):
    """The rules of faulthunt.kernlog.incident as a literal newest-first scan over every incident so far
    (the implementation before the linear one: quadratic, kept here as the specification)."""
    from faulthunt.kernlog.catalog import classify
    from faulthunt.kernlog.incident import APP_FAULT_XIDS, CONSEQUENCE_XIDS, _same_burst
    from faulthunt.kernlog.pci import normalize_pci

    class Open:
        def __init__(self, ev, i, pci):
            self.events, self.consequences, self.last_index, self.last_ts = [ev], [], i, ev.ts
            self.pid, self.pci = ev.pid, pci

    def near(inc, ev, i, w, gap):
        if ev.ts is not None and inc.last_ts is not None:
            return 0 <= ev.ts - inc.last_ts <= w
        return i - inc.last_index <= gap

    incidents = []
    for i, ev in enumerate(events):
        pci = normalize_pci(ev.pci)
        target, as_consequence = None, False
        if ev.xid in APP_FAULT_XIDS:
            for inc in reversed(incidents):
                if inc.pci != pci or inc.events[0].xid not in APP_FAULT_XIDS:
                    continue
                if not near(inc, ev, i, same_pid_window, max_gap) or inc.consequences:
                    break
                same_pid = ev.pid is not None and inc.pid == ev.pid
                has_times = ev.ts is not None and inc.last_ts is not None
                if same_pid or ((ev.pid is None or inc.pid is None) and near(inc, ev, i, window, max_gap // 4)
                                and (has_times or _same_burst(inc, ev))):
                    target = inc
                    break
        elif ev.xid in CONSEQUENCE_XIDS or classify(ev.xid).category == "informational_or_recovery":
            as_consequence = True
            for inc in reversed(incidents):
                if inc.pci != pci or not near(inc, ev, i, consequence_window, max_gap * 4):
                    continue
                if ev.caused_by is not None:
                    if any(e.xid == ev.caused_by for e in inc.events):
                        target = inc
                        break
                    continue
                if ev.xid == 43 and ev.pid is not None and inc.pid is not None:
                    if inc.pid == ev.pid:
                        target = inc
                        break
                    continue
                if inc.events[0].xid not in CONSEQUENCE_XIDS:
                    target = inc
                    break
        if target is None:
            incidents.append(Open(ev, i, pci))
            continue
        (target.consequences if as_consequence else target.events).append(ev)
        target.last_index = i
        target.last_ts = ev.ts if ev.ts is not None else target.last_ts
        if target.pid is None and ev.pid is not None and not as_consequence:
            target.pid = ev.pid
    return [(tuple(map(id, inc.events)), tuple(map(id, inc.consequences))) for inc in incidents]


def _shape(incs):
    return [(tuple(map(id, inc.events)), tuple(map(id, inc.consequences))) for inc in incs]


def _ev(xid, pid, pci, ts, *, caused_by=None, warp=None):
    from faulthunt.records.xid import GrException

    gr = GrException(kind="warp", gpc=0, tpc=0, sm=0, error=warp) if warp else None
    return XidEvent(xid=xid, pci=pci, gpu_instance=None, compute_instance=None, pid=pid, process=None, message="",
                    category="", mmu=None, caused_by=caused_by, raw="", ts=ts, gr=gr)


# time steps on the edges of every window (0.5 s, 5 s, 60 s) and equal times
_STEPS = st.sampled_from([0.0, 0.0, 0.001, 0.1, 0.3, 0.5, 0.50001, 0.6, 1.0, 2.5, 4.9, 5.0, 5.1, 30.0, 59.0, 60.0, 61.0])


_LINE = st.tuples(_STEPS, st.sampled_from([13, 13, 31, 31, 43, 43, 45, 154, 79]), st.sampled_from([None, None, 1, 2, 3]),
                  st.sampled_from(["0000:01:00", "0000:01:00", "PCI:0000:01:00.0", "0000:02:00"]),
                  st.sampled_from([None, None, 13, 31, 43, 79]), st.sampled_from([None, "MMU Fault", "Misaligned Address"]))


def _events(timed: bool) -> st.SearchStrategy[list[XidEvent]]:
    def build(lines: list[tuple]) -> list[XidEvent]:  # type: ignore[type-arg]
        out, t = [], 100.0
        for step, xid, pid, pci, caused_by, warp in lines:
            t += step
            out.append(_ev(xid, pid, pci, t if timed else None, caused_by=caused_by if xid in (43, 45) else None,
                           warp=warp if xid == 13 else None))
        return out

    return st.lists(_LINE, max_size=45).map(build)


@settings(max_examples=1000, deadline=None)
@given(events=st.one_of(_events(timed=True), _events(timed=False)))
def test_linear_grouper_equals_the_literal_scan(events: list[XidEvent]) -> None:
    assert _shape(group_incidents(events)) == _reference(events)


@settings(max_examples=200, deadline=None)
@given(events=st.one_of(_events(timed=True), _events(timed=False)),
       windows=st.tuples(st.sampled_from([0.0, 0.1, 1.0]), st.sampled_from([0.5, 2.0, 30.0]),
                         st.sampled_from([1.0, 10.0, 120.0]), st.sampled_from([0, 3, 8, 16])))
def test_linear_grouper_equals_the_literal_scan_for_other_windows(events, windows) -> None:  # type: ignore[no-untyped-def]
    w, same, cons, gap = windows
    kw = {"window": w, "same_pid_window": same, "consequence_window": cons, "max_gap": gap}
    assert _shape(group_incidents(events, **kw)) == _reference(events, **kw)


def test_real_captures_group_as_the_literal_scan_does() -> None:
    for name in ("dmesg.txt", "dmesg_T.txt", "kmsg_raw.txt", "dmesg_iso.txt"):
        events = _h200(name)
        assert _shape(group_incidents(events)) == _reference(events), name


# --- adversarial inputs: the work done stays linear ---------------------------------------------------

def _storm(n: int, *, distinct_31: bool, timed: bool = True, step: float = 0.001) -> list[XidEvent]:
    """Xid 31s and Xid 43s of unrelated processes (every 43 a pid no fault has): each 43 is a lone
    incident, and the literal scan walked past all of them for every later line."""
    return [_ev(31, 1000 + k if distinct_31 else 500, "0000:3b:00", 100.0 + k * step if timed else None)
            if k % 2 == 0 else _ev(43, 10**6 + k, "0000:3b:00", 100.0 + k * step if timed else None)
            for k in range(n)]


@pytest.mark.parametrize(("distinct_31", "timed"), [(False, True), (True, True), (True, False), (False, False)])
def test_31_and_43_of_unrelated_processes_take_linear_work(distinct_31: bool, timed: bool) -> None:
    from faulthunt.kernlog.incident import IncidentGrouper

    n = 40_000  # 44 s with the literal scan (issue 16); here a few steps per line
    grouper = IncidentGrouper()
    for ev in _storm(n, distinct_31=distinct_31, timed=timed):
        grouper.add(ev)
    incs = grouper.incidents()
    assert grouper.steps <= 3 * n
    lone_43 = [i for i in incs if i.root.xid == 43]
    assert len(lone_43) == n // 2 and not any(i.consequences for i in incs)
    faults = [i for i in incs if i.root.xid == 31]
    if not distinct_31:  # one process faulting all along: one incident while the lines keep coming
        assert len(faults) == 1 and len(faults[0].events) == n // 2
    else:
        assert len(faults) == n // 2


def test_a_fault_storm_of_many_processes_within_the_window_takes_linear_work() -> None:
    """2,000 processes fault 20 times each, interleaved, within 5 s on one GPU (plus pid-less warp lines)."""
    from faulthunt.kernlog.incident import IncidentGrouper

    events = []
    for k in range(40_000):
        ts = 100.0 + k * 0.0001
        events.append(_ev(13, None, "0000:3b:00", ts, warp="Misaligned Address") if k % 10 == 9
                      else _ev(31, k % 2000, "0000:3b:00", ts))
    grouper = IncidentGrouper()
    for ev in events:
        grouper.add(ev)
    assert grouper.steps <= 3 * len(events)
    processes = {k % 2000 for k in range(40_000) if k % 10 != 9}
    assert len(grouper.incidents()) == len(processes)  # each process's lines are one fault


def test_time_going_back_starts_a_new_epoch() -> None:
    first = [_ev(31, 7, "0000:01:00", 500.0), _ev(43, 7, "0000:01:00", 500.1)]
    # a reboot: times restart near 0; the 43 of the same pid is not a consequence of the old fault
    again = [_ev(43, 7, "0000:01:00", 3.0)]
    incs = group_incidents(first + again)
    assert [(i.root.xid, len(i.consequences)) for i in incs] == [(31, 1), (43, 0)]
    # a line printed a moment out of order (within 1 s) still belongs to its fault
    wobble = [_ev(31, 7, "0000:01:00", 500.0), _ev(13, None, "0000:01:00", 499.9999, warp="MMU Fault")]
    assert [len(i.events) for i in group_incidents(wobble)] == [2]


def test_lines_without_kernel_times_after_timed_ones_start_a_new_epoch() -> None:
    events = [_ev(31, 7, "0000:01:00", 500.0), _ev(31, 7, "0000:01:00", None), _ev(31, 7, "0000:01:00", None)]
    assert [len(i.events) for i in group_incidents(events)] == [1, 2]


def test_damaged_fields_never_raise() -> None:
    """Events read back from a hand-edited xid.jsonl: pids, times and causes of any JSON type."""
    bad = [_ev(31, [1], ["x"], "soon"), _ev(43, {"a": 1}, None, float("nan"), caused_by=[31]),  # type: ignore[arg-type]
           _ev(13, True, 5, float("inf"))]  # type: ignore[arg-type]
    assert len(group_incidents(bad)) >= 1


@pytest.mark.parametrize("events", [
    # a pid-less line joins the newest of two faults within the window, not the first
    [_ev(31, 1, "0000:01:00", 100.0), _ev(31, 2, "0000:01:00", 100.1), _ev(13, None, "0000:01:00", 100.2)],
    # a fault touched again stays reachable for 5 s after its latest line, not its first
    [_ev(31, 1, "0000:01:00", 100.0), _ev(31, 1, "0000:01:00", 104.0), _ev(31, 1, "0000:01:00", 105.5)],
    # ... and so does a stale fault's older neighbour stay out of reach behind it
    [_ev(31, 1, "0000:01:00", 100.0), _ev(31, 2, "0000:01:00", 100.5), _ev(31, 1, "0000:01:00", 104.0),
     _ev(31, 1, "0000:01:00", 105.6)],
    # the same without kernel times, by line distance
    [_ev(31, 1, "0000:01:00", None), _ev(31, 2, "0000:01:00", None), _ev(13, None, "0000:01:00", None)],
    [_ev(31, 1, "0000:01:00", None)] + [_ev(79, None, "0000:01:00", None)] * 10 + [_ev(31, 1, "0000:01:00", None)]
    + [_ev(79, None, "0000:01:00", None)] * 10 + [_ev(31, 1, "0000:01:00", None)],
])
def test_window_edges_as_the_literal_scan(events: list[XidEvent]) -> None:
    assert _shape(group_incidents(events)) == _reference(events)


def test_a_long_incident_is_described_in_one_short_line() -> None:
    """One process faulting 10k times in a row: one incident, its properties linear, its line bounded."""
    from faulthunt.records.xid import MmuFault

    def fault(k: int) -> XidEvent:
        mmu = MmuFault(address=k << 12, engine="GRAPHICS", gpc=0, client="GPCCLIENT_T1_0", fault_type="FAULT_PDE",
                       access_type="ACCESS_TYPE_VIRT_WRITE", decodable=True)
        return _ev(31, 7, "0000:01:00", 100.0 + k * 0.001).replace(mmu=mmu)

    events = [fault(k) for k in range(10_000)] + [_ev(43, 7, "0000:01:00", 110.5)] * 20
    (inc,) = group_incidents(events)
    assert len(inc.addresses) == 10_000 and inc.addresses[:2] == (0, 0x1000)
    line = inc.describe()
    assert len(line) < 400 and "(9992 more)" in line and "(12 more)" in line


def _describe_by_the_properties(inc) -> str:  # type: ignore[no-untyped-def]
    """Incident.describe as the properties spell it out (the specification describe's one pass keeps)."""
    from faulthunt.kernlog.catalog import classify
    from faulthunt.kernlog.incident import DESCRIBE_ITEMS

    def some(items: list[str], sep: str) -> str:
        if len(items) <= DESCRIBE_ITEMS:
            return sep.join(items)
        return sep.join(items[:DESCRIBE_ITEMS]) + f"{sep}... ({len(items) - DESCRIBE_ITEMS} more)"

    who = f"pid {inc.pid}" if inc.pid is not None else "pid unknown"
    if inc.process:
        who += f" ({inc.process})"
    bits = [f"Xid {'/'.join(str(x) for x in inc.xids)} on {inc.pci or '?'}, {who}: {classify(inc.root.xid).title}"]
    if inc.addresses:
        bits.append("page " + some([f"0x{a:x}" for a in inc.addresses], ", "))
    undecodable = sum(1 for e in inc.events if e.mmu is not None and not e.mmu.decodable)
    if undecodable:
        bits.append(f"{undecodable} undecodable MMU fault(s), not a user address")
    if inc.errors:
        bits.append(some(list(inc.errors), "; "))
    if inc.consequences:
        bits.append("then " + some([f"Xid {e.xid}" for e in inc.consequences], ", "))
    return " - ".join(bits)


@settings(max_examples=300, deadline=None)
@given(events=st.one_of(_events(timed=True), _events(timed=False)))
def test_describe_says_what_the_properties_say(events: list[XidEvent]) -> None:
    for inc in group_incidents(events):
        assert inc.describe() == _describe_by_the_properties(inc)


def test_describe_says_what_the_properties_say_on_the_captures() -> None:
    for name in ("dmesg.txt", "dmesg_T.txt", "kmsg_raw.txt", "dmesg_iso.txt"):
        for inc in group_incidents(_h200(name)):
            assert inc.describe() == _describe_by_the_properties(inc), name
