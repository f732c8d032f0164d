"""Kernel-log sources: the real /dev/kmsg (as root), files, dmesg, journalctl, NVML (fake module), Follower."""

from __future__ import annotations

import os
import stat
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from faulthunt.errors import FaulthuntError
from faulthunt.kernlog import sources as S
from faulthunt.kernlog.sources import (
    Cursor,
    FileSource,
    Follower,
    KernelLogUnreadable,
    KmsgRecord,
    KmsgSource,
    NullSource,
    open_source,
    parse_kmsg_record,
    select_after,
)

XID43 = "NVRM: Xid (PCI:0000:00:06): 43, pid={pid}, name={name}, channel 0x0000000a"
XID31 = ("NVRM: Xid (PCI:0000:00:06): 31, pid={pid}, name={name}, channel 0x0000000a, intr 00000000. MMU Fault: "
         "ENGINE GRAPHICS GPC1 GPCCLIENT_T1_6 faulted @ 0x7f7d_dbe00000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE")


def _kmsg_writable() -> bool:
    try:
        os.close(os.open("/dev/kmsg", os.O_WRONLY))
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
        return True
    except OSError:
        return False


#: Tests that write marked Xid lines into the real kernel log run only when asked: on a GPU host
#: those lines reach every reader of the log (gpud, DCGM health checks, a faulthunt stress run), and
#: a fake Xid 31 can page someone or drain the node. .ci/run asks (its machine is a throwaway VM).
KMSG_ENV = "FAULTHUNT_TEST_WRITE_KMSG"
needs_kmsg = pytest.mark.skipif(
    os.environ.get(KMSG_ENV) != "1" or not _kmsg_writable(),
    reason=(f"writes marked Xid lines into the real kernel log: set {KMSG_ENV}=1 on a machine whose "
            "log no one else watches (needs root)" if os.environ.get(KMSG_ENV) != "1"
            else "/dev/kmsg is not readable and writable here (needs root)"))


def _inject(line: str) -> None:
    fd = os.open("/dev/kmsg", os.O_WRONLY)
    try:
        os.write(fd, ("<4>" + line + "\n").encode())
    finally:
        os.close(fd)


# --- the real kernel log -------------------------------------------------------------------------------

@needs_kmsg
def test_real_kmsg_cursor_reads_exactly_what_came_after() -> None:
    """A marked Xid line written to the real /dev/kmsg is read back through the sequence cursor."""
    mark = "fh" + uuid.uuid4().hex[:8]
    src = KmsgSource()
    before = src.cursor()
    _inject(XID31.format(pid=os.getpid(), name=mark))
    res = src.read_since(before)
    assert res.lost == 0 and res.source == "kmsg"
    mine = [e for e in res.events if e.process == mark]
    assert len(mine) == 1
    ev = mine[0]
    assert ev.pid == os.getpid() and ev.mmu.address == 0x7F7DDBE00000
    assert ev.seq is not None and ev.seq >= before.seq and ev.ts is not None and ev.level == 4
    assert res.cursor.seq > ev.seq
    # reading again from the new cursor gives nothing of ours: exactly-after semantics
    again = src.read_since(res.cursor)
    assert not [e for e in again.events if e.process == mark]
    # and a fresh source (new descriptor) from the old cursor sees it again
    assert [e.process for e in KmsgSource().read_since(before).events].count(mark) == 1
    assert mark in src.snapshot()
    src.close()


@needs_kmsg
def test_real_kmsg_follower_sees_live_lines_and_stop_drains() -> None:
    mark = "fh" + uuid.uuid4().hex[:8]
    src = open_source("kmsg")
    seen = []
    f = Follower(src, src.cursor(), lambda e: seen.append(e) if e.process == mark else None, interval=0.05)
    f.start()
    _inject(XID43.format(pid=1, name=mark))
    deadline = time.monotonic() + 60  # generous: a loaded machine delays the thread
    while not seen and time.monotonic() < deadline:
        time.sleep(0.02)
    _inject(XID43.format(pid=2, name=mark))  # written just before stop: the final drain must get it
    res = f.stop()
    assert [e.pid for e in res.events if e.process == mark] == [1, 2]
    assert [e.pid for e in seen] == [1, 2]
    assert res.lost == 0 and not res.warnings


def test_kmsg_unreadable_says_why_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(KernelLogUnreadable) as ei:
        KmsgSource(str(tmp_path / "no-kmsg")).check()
    assert ei.value.fix
    err = S._kmsg_error(PermissionError(1, "Operation not permitted"), "/dev/kmsg")
    assert "CAP_SYSLOG" in err.fix and "nvml" in err.fix and "dmesg_restrict" in err.fix


# --- kmsg records and lost-record accounting (pure) ---------------------------------------------------

def test_parse_kmsg_record_with_dictionary() -> None:
    rec = parse_kmsg_record(b"4,361,33034470,c;" + XID43.format(pid=5, name="x").encode()
                            + b"\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:06.0\n")
    assert (rec.level, rec.facility, rec.seq, rec.ts_usec, rec.flags) == (4, 0, 361, 33034470, "c")
    assert rec.dictionary == ("SUBSYSTEM=pci", "DEVICE=+pci:0000:00:06.0")
    assert rec.line.startswith("4,361,33034470,c;NVRM: Xid")
    assert parse_kmsg_record(b"not a record") is None
    assert parse_kmsg_record(b"\xff\xfe") is None


def _rec(seq: int) -> KmsgRecord:
    return KmsgRecord(level=6, facility=0, seq=seq, ts_usec=seq * 1000, flags="-", message=f"m{seq}")


@pytest.mark.parametrize("seqs,start,kept,lost,nxt", [
    ([1, 2, 3], 2, [2, 3], 0, 4),          # exactly after the cursor
    ([5, 6], 2, [5, 6], 3, 7),             # 2..4 overwritten before we read
    ([2, 3, 7, 8], 2, [2, 3, 7, 8], 3, 9),  # overwritten mid-read (EPIPE)
    ([1, 2], 3, [], 0, 3),                 # nothing new
    ([], 10, [], 0, 10),
])
def test_select_after_counts_lost_records(seqs, start, kept, lost, nxt) -> None:
    k, lo, n = select_after([_rec(s) for s in seqs], start)
    assert ([r.seq for r in k], lo, n) == (kept, lost, nxt)


def test_kmsg_epipe_is_counted_as_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated ring-buffer overrun: the kernel answers EPIPE and then resumes at a later record."""
    script = [b"6,10,1,-;a\n", BrokenPipeError(), b"6,14,2,-;" + XID43.format(pid=9, name="late").encode() + b"\n",
              BlockingIOError()]

    def fake_read(fd: int, n: int) -> bytes:
        item = script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    src = KmsgSource()
    monkeypatch.setattr(S.os, "open", lambda *a, **k: 99)
    monkeypatch.setattr(S.os, "close", lambda fd: None)
    monkeypatch.setattr(S.os, "read", fake_read)
    res = src.read_since(Cursor(source="kmsg", seq=10))
    assert res.lost == 3 and [e.pid for e in res.events] == [9] and res.events[0].seq == 14
    assert any("overwritten" in w and "log_buf_len" in w for w in res.warnings)
    assert res.cursor.seq == 15


# --- files ------------------------------------------------------------------------------------------

def test_file_source_offset_cursor_and_partial_lines(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[1.0] boot\n")
    src = open_source(f"file:{log}")
    cur = src.cursor()
    with log.open("a") as fh:
        fh.write(f"[2.0] {XID43.format(pid=os.getpid(), name='w')}\n[3.0] {XID43.format(pid=2, name='cut')}")
    res = src.read_since(cur)
    assert [e.pid for e in res.events] == [os.getpid()]  # the unfinished last line waits
    res2 = src.read_since(res.cursor)
    assert res2.events == ()
    with log.open("a") as fh:
        fh.write("\n")
    assert [e.pid for e in src.read_since(res.cursor).events] == [2]
    assert [e.pid for e in src.read_since(res.cursor, final=True).events] == [2]


def test_file_source_final_read_takes_an_unfinished_line(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    src = FileSource(log)
    cur = src.cursor()
    log.write_text(XID43.format(pid=3, name="x"))
    assert src.read_since(cur).events == ()
    assert [e.pid for e in src.read_since(cur, final=True).events] == [3]


def test_file_source_rotation_is_reported(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("x" * 100 + "\n")
    src = FileSource(log)
    cur = src.cursor()
    log.write_text(XID43.format(pid=4, name="x") + "\n")  # truncated and rewritten: shorter than the offset
    res = src.read_since(cur)
    assert [e.pid for e in res.events] == [4] and res.lost_unknown and "rotated" in res.warnings[0]


def test_file_source_missing_file(tmp_path: Path) -> None:
    with pytest.raises(KernelLogUnreadable) as ei:
        FileSource(tmp_path / "nope").cursor()
    assert ei.value.fix


# --- dmesg and journalctl: the real dmesg here, a stand-in journalctl (no journal on this machine) ------

def _tool(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return p


@pytest.mark.slow
@needs_kmsg
def test_real_dmesg_source_reads_after_its_cursor() -> None:
    mark = "fh" + uuid.uuid4().hex[:8]
    src = open_source("dmesg")
    cur = src.cursor()
    _inject(XID43.format(pid=11, name=mark))
    res = src.read_since(cur)
    assert [e.pid for e in res.events if e.process == mark] == [11]
    assert not [e for e in src.read_since(res.cursor).events if e.process == mark]


def test_dmesg_source_timestamps_and_wrap(tmp_path: Path) -> None:
    log = tmp_path / "out.txt"
    log.write_text("[1.000000] a\n[2.000000] b\n[2.000000] c\n")
    tool = _tool(tmp_path, "dmesg", f'cat "{log}"\n')
    src = S.DmesgSource((str(tool),))
    cur = src.cursor()
    assert (cur.ts, cur.count) == (2.0, 2)
    log.write_text("[1.000000] a\n[2.000000] b\n[2.000000] c\n[2.000000] " + XID43.format(pid=1, name="x")
                   + "\n  continuation\n")
    res = src.read_since(cur)
    assert [e.pid for e in res.events] == [1] and res.lines[-1] == "  continuation" and not res.lost_unknown
    log.write_text("[9.000000] " + XID43.format(pid=2, name="x") + "\n")  # the buffer wrapped past the cursor
    res = src.read_since(cur)
    assert [e.pid for e in res.events] == [2] and res.lost_unknown


def test_dmesg_permission_denied_gives_the_fix(tmp_path: Path) -> None:
    tool = _tool(tmp_path, "dmesg", 'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2; exit 1\n')
    with pytest.raises(KernelLogUnreadable) as ei:
        S.DmesgSource((str(tool),)).cursor()
    assert "CAP_SYSLOG" in ei.value.fix


def test_journalctl_source_with_a_stand_in_tool(tmp_path: Path) -> None:
    """journalctl's output format (short-monotonic + --show-cursor) through a stand-in script."""
    args = tmp_path / "args"
    tool = _tool(tmp_path, "journalctl", f'echo "$@" >> "{args}"\n'
                 'echo "[   43.047891] host kernel: ' + XID43.format(pid=7, name="j") + '"\n'
                 'echo "-- cursor: s=abc;i=12"\n')
    src = S.JournalctlSource((str(tool),))
    cur = src.cursor()
    assert cur.journal == "s=abc;i=12"
    res = src.read_since(cur)
    assert [(e.pid, e.ts) for e in res.events] == [(7, 43.047891)]
    assert "--after-cursor=s=abc;i=12" in args.read_text().splitlines()[-1]
    assert "-k" in args.read_text()


def test_missing_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil  # imported where the dmesg and journalctl sources run their tool

    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(KernelLogUnreadable, match="not installed"):
        S.DmesgSource().cursor()


# --- NVML (simulated: this machine has no GPU, so a fake pynvml module stands in) ----------------------

class _Timeout(Exception):
    value = 10


def fake_pynvml(xids: list[int], supported: int = 0x8) -> SimpleNamespace:
    """A stand-in for pynvml with the calls NvmlSource makes; delivers ``xids`` then times out."""
    queue = list(xids)
    dev = object()

    def wait(es, ms):
        if queue:
            return SimpleNamespace(eventType=0x8, eventData=queue.pop(0), device=dev,
                                   gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
        time.sleep(ms / 1000)
        raise _Timeout()

    return SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlEventSetCreate=lambda: "es",
        nvmlEventSetFree=lambda es: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: dev, nvmlDeviceGetSupportedEventTypes=lambda h: supported,
        nvmlDeviceRegisterEvents=lambda h, mask, es: None, nvmlEventTypeXidCriticalError=0x8,
        nvmlEventSetWait=wait, nvmlDeviceGetIndex=lambda h: 0,
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=b"00000000:00:06.0"),
    )


def test_nvml_source_xid_number_only() -> None:
    src = S.NvmlSource(fake_pynvml([]), poll_ms=10)
    cur = src.cursor()
    src2 = S.NvmlSource(fake_pynvml([31, 13, 43]), poll_ms=10)
    seen = []
    f = Follower(src2, Cursor(source="nvml", seq=0), seen.append, interval=0.02)
    f.start()
    deadline = time.monotonic() + 60  # generous: a loaded machine delays the thread
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    res = f.stop()
    src2.close()
    assert [e.xid for e in res.events] == [31, 13, 43]
    ev = res.events[0]
    assert (ev.pid, ev.mmu, ev.pci, ev.gpu_instance) == (None, None, "0000:00:06", None)
    assert ev.category == "app_memory_fault" and "Xid number only" in ev.message
    assert src.read_since(cur).events == ()
    src.close()


def test_nvml_without_xid_events_is_unreadable() -> None:
    with pytest.raises(KernelLogUnreadable, match="reports Xid events"):
        S.NvmlSource(fake_pynvml([], supported=0x1), poll_ms=10)


# --- choosing a source --------------------------------------------------------------------------------

def test_auto_falls_back_once_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(*a, **k):
        raise KernelLogUnreadable("cannot read /dev/kmsg: Operation not permitted", fix=S.FIX_UNREADABLE)

    monkeypatch.setattr(KmsgSource, "check", lambda self: unreadable())
    monkeypatch.setattr(S.DmesgSource, "cursor", lambda self: unreadable())
    monkeypatch.setattr(S.JournalctlSource, "cursor", lambda self: unreadable())
    warnings: list[str] = []
    src = open_source("auto", warn=warnings.append, nvml=fake_pynvml([]))
    assert src.name == "nvml" and len(warnings) == 1
    assert "Xid numbers only" in warnings[0] and "fix:" in warnings[0]
    src.close()
    warnings.clear()
    monkeypatch.setattr(S, "NvmlSource", lambda n: unreadable())
    src = open_source("auto", warn=warnings.append)
    assert isinstance(src, NullSource) and len(warnings) == 1 and "capture is off" in warnings[0]
    assert src.read_since(src.cursor()).events == ()


def test_unknown_spec_and_none() -> None:
    with pytest.raises(FaulthuntError) as ei:
        open_source("syslog")
    assert "kmsg" in ei.value.fix
    assert open_source("none").snapshot() == ""


def test_cursor_json_roundtrip_and_bad_cursor() -> None:
    c = Cursor(source="kmsg", seq=12, boot_id="b")
    assert Cursor.from_json(c.to_json()) == c
    for bad in ({}, {"source": 3}, {"source": "kmsg", "seq": "x"}, [1]):
        with pytest.raises(FaulthuntError):
            Cursor.from_json(bad)  # type: ignore[arg-type]


def test_follower_survives_a_failing_consumer(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    src = FileSource(log)

    def boom(ev):
        raise RuntimeError("consumer bug")

    f = Follower(src, src.cursor(), boom, interval=0.02)
    f.start()
    log.write_text(XID43.format(pid=1, name="a") + "\n" + XID43.format(pid=2, name="b") + "\n")
    res = f.stop()
    assert [e.pid for e in res.events] == [1, 2]
    assert sum("consumer bug" in w for w in res.warnings) == 2


def test_nvml_replays_the_real_h200_events() -> None:
    """The events NVML delivered on the H200 (tests/data/h200/nvml_events.jsonl), replayed by the fake module."""
    import json

    rows = [json.loads(x) for x in (Path(__file__).parent / "data" / "h200" / "nvml_events.jsonl").read_text().splitlines()]
    xids = [r["eventData"] for r in rows if r.get("eventType") == 8]
    assert xids == [31, 13]
    src = S.NvmlSource(fake_pynvml(xids), poll_ms=10)
    deadline = time.monotonic() + 60  # generous: a loaded machine delays the thread
    res = src.read_since(Cursor(source="nvml", seq=0))
    while len(res.events) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
        res = src.read_since(Cursor(source="nvml", seq=0))
    src.close()
    assert [(e.xid, e.category) for e in res.events] == [(31, "app_memory_fault"), (13, "app_memory_fault")]
    assert res.cursor.seq == 2


def test_kmsg_records_are_parsed_from_their_own_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one parse path: seq, time and level come from the record's header, raw is the record line."""
    records = [
        S.parse_kmsg_record(b"4,100,33034470,-;NVRM: Xid (PCI:0000:00:06): 43, pid=5, name=a, channel 0x0000000a\n"
                            b" SUBSYSTEM=pci\n DEVICE=+pci:0000:00:06.0\n"),
        S.parse_kmsg_record(b"6,101,33034471,c;usb 1-1: new device"),
        S.parse_kmsg_record(b"3,102,33034472,-;NVRM: Xid (PCI:0000:0"),  # cut: counted, not dropped
        S.parse_kmsg_record(b"4,103,33034473,-;NVRM: Xid (PCI:0000:00:06 GPU-I:05 GPU-CI:01): 31, pid=6, name=b, Ch 00000010, "
                            b"intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_1 faulted @ 0x7f00_00200000. "
                            b"Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"),
    ]
    src = S.KmsgSource(path=os.devnull)
    monkeypatch.setattr(src, "_drain", lambda fd, start=0: (list(records), 0))
    res = src.read_since(Cursor(source="kmsg", seq=100))
    src.close()
    assert [(e.xid, e.seq, e.ts, e.level, e.pid) for e in res.events] == [(43, 100, 33.03447, 4, 5),
                                                                           (31, 103, 33.034473, 4, 6)]
    assert res.events[0].raw == records[0].line and res.events[1].gpu_instance == 5
    assert res.unparsed == (records[2].line,) and res.cursor.seq == 104


class _PipeSource:
    """A source whose records are the bytes written to a pipe; it offers the pipe to wait on."""

    name = "pipe"

    def __init__(self, consume: bool = True) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.consume = consume
        self.reads = 0

    def wait_fd(self) -> int:
        return self.r

    def cursor(self) -> Cursor:
        return Cursor(source="pipe", seq=0)

    def read_since(self, cursor: Cursor, *, final: bool = False):
        from faulthunt.kernlog.sources import ReadResult

        self.reads += 1
        try:
            data = os.read(self.r, 4096).decode() if self.consume else ""
        except BlockingIOError:
            data = ""
        seq = (cursor.seq or 0) + len(data)
        return ReadResult(tuple(data), (), 0, Cursor(source="pipe", seq=seq), "pipe")

    def snapshot(self) -> str:
        return ""

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


def test_follower_sleeps_on_the_source_s_descriptor_until_a_record_comes() -> None:
    src = _PipeSource()
    f = Follower(src, src.cursor(), lambda ev: None, interval=0.001)
    f.start()
    try:
        time.sleep(0.2)  # a timer of 1 ms would have read ~200 times by now
        assert src.reads == 0
        os.write(src.w, b"ab")
        deadline = time.monotonic() + 30
        while src.reads == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert src.reads == 1  # woken by the record, before stop()
    finally:
        res = f.stop()
        src.close()
    assert res.lines == ("a", "b") and res.cursor.seq == 2


def test_follower_on_a_descriptor_that_is_always_readable_falls_back_to_the_timer() -> None:
    src = _PipeSource(consume=False)
    os.write(src.w, b"x")  # readable for good: nothing reads it
    f = Follower(src, src.cursor(), lambda ev: None, interval=0.05)
    f.start()
    time.sleep(0.5)
    f.stop()
    src.close()
    assert 1 <= src.reads < 100  # a spin would read thousands of times


@pytest.mark.parametrize("cls,args", [
    (Cursor, {"source": "kmsg", "seq": 3, "boot_id": "b", "taken": 1.5}),
    (KmsgRecord, {"level": 6, "facility": 0, "seq": 1, "ts_usec": 2, "flags": "-", "message": "m"}),
    (S.ReadResult, {"lines": ("a",), "events": (), "lost": 0, "cursor": Cursor(source="kmsg"),
                    "source": "kmsg"}),
])
def test_the_frozen_values_behave_as_the_frozen_dataclasses_they_were(cls, args) -> None:
    """Cursor, KmsgRecord and ReadResult are plain slotted classes (a dataclass costs ~4 M
    instructions to make at import): the same constructor, repr, equality, hash, copies and
    refusal to change as the frozen dataclass of the same fields."""
    import copy
    import dataclasses
    import pickle

    twin_cls = dataclasses.make_dataclass(cls.__name__, [(f, object, dataclasses.field(
        default=getattr(cls(**args), f))) for f in cls._fields], frozen=True)
    value, twin = cls(**args), twin_cls(**args)
    positional = cls(*[args.get(f, getattr(value, f)) for f in cls._fields])
    assert repr(value) == repr(twin) and value == positional and hash(value) == hash(positional)
    assert value._asdict() == dataclasses.asdict(twin)
    assert value != twin and value.__eq__(object()) is NotImplemented
    for copied in (copy.copy(value), copy.deepcopy(value), pickle.loads(pickle.dumps(value))):
        assert copied == value and type(copied) is cls
    changed = value._replace(**{cls._fields[0]: "x"})
    assert getattr(changed, cls._fields[0]) == "x" and changed != value
    with pytest.raises(AttributeError):
        value.source = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del value.lost  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        value.other = 1  # no field of that name: no place for it either
    with pytest.raises(TypeError):
        cls(**args, nosuchfield=1)
