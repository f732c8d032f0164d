"""`faulthunt xid ...` end to end through the real dispatcher (faulthunt.cli.main)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faulthunt.cli import main
from test_kernlog_sources import needs_kmsg  # one check of /dev/kmsg access for both modules

DATA = Path(__file__).parent / "data"
H200_DMESG = DATA / "h200" / "dmesg.txt"
KEYS = {"xid", "pci", "pid", "process", "message", "category", "mmu"}


def test_parse_json_lines_in_input_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "parse", "--json", str(H200_DMESG), str(DATA / "kernlog" / "names_talos.log")]) == 0
    objs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(objs) == 26 + 3 and all(KEYS <= set(o) for o in objs)
    assert objs[0]["mmu"]["address"] == 0x7FAFE7E00000 and objs[1]["mmu"] is None and objs[1]["pid"] is None
    assert [o["process"] for o in objs[-3:]] == ["VLLM::EngineCor", "nvc:[driver]", "Web Content"]
    assert all(isinstance(o["xid"], int) for o in objs)


def test_parse_table_says_whose_fault_and_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "parse", str(DATA / "kernlog" / "era_515_unknown_ctime.log")]) == 0
    out = capsys.readouterr().out
    assert "0x7f2fcca58000" in out and "[your code]" in out and "[the machine]" in out
    assert "what to do:" in out and "compute-sanitizer" in out


def test_parse_incidents_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "parse", "--json", "--incidents", str(H200_DMESG)]) == 0
    incs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(incs) == 22 and incs[1]["pid"] == 553 and incs[1]["errors"] == ["Misaligned Address"]


def test_parse_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io
    import sys

    fake = io.TextIOWrapper(io.BytesIO(b"\xff\x00junk\n[1.0] NVRM: Xid (PCI:0000:00:06): 43, pid=5, name=a, channel 0x1\n"))
    monkeypatch.setattr(sys, "stdin", fake)
    assert main(["xid", "parse", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["pid"] == 5


def test_missing_file_fails_only_when_nothing_was_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "parse", str(tmp_path / "nope.log")]) == 3
    err = capsys.readouterr().err
    assert "no such file" in err and "fix:" in err
    assert main(["xid", "parse", "--json", str(tmp_path / "nope.log"), str(H200_DMESG)]) == 0
    captured = capsys.readouterr()
    assert "no such file" in captured.err and len(captured.out.splitlines()) == 26
    assert main(["xid", "parse", str(tmp_path)]) == 3


def test_binary_and_truncated_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(os.urandom(4096) + b"\n[1.0] NVRM: Xid (PCI:0000:0")
    assert main(["xid", "parse", str(junk)]) == 0
    cap = capsys.readouterr()
    assert "no Xid reports found" in cap.out and "could not be parsed" in cap.err


def test_explain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "explain", "31", "79"]) == 0
    out = capsys.readouterr().out
    assert "whose fault: your code" in out and "whose fault: the machine" in out
    assert main(["xid", "explain", "--json", "13"]) == 0
    assert json.loads(capsys.readouterr().out)["category"] == "app_memory_fault"



def test_explain_an_id_the_catalog_lacks_says_so_once_in_its_head(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "explain", "99999"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head == "Xid 99999: not in the catalog"

def test_cursor_and_since_on_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[1.0] boot\n")
    assert main(["xid", "cursor", "--source", f"file:{log}"]) == 0
    cur = capsys.readouterr().out.strip()
    assert json.loads(cur)["source"] == "file"
    with log.open("a") as fh:
        fh.write("[2.0] NVRM: Xid (PCI:0000:00:06): 43, pid=77, name=t, channel 0x0000000a\n")
    curfile = tmp_path / "kmsg_cursor.json"
    curfile.write_text(cur)
    assert main(["xid", "since", "--json", str(curfile)]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["pid"] == 77 and lines[-1]["cursor"]["offset"] == log.stat().st_size
    # the trailer of `since --json` is itself a valid cursor: nothing new after it
    assert main(["xid", "since", "--json", json.dumps(lines[-1])]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


@pytest.mark.parametrize("bad", ["garbage", "{not json", '{"source": 5}', '{"source": "nvml", "seq": 0}'])
def test_since_bad_cursor(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "since", bad]) == 2
    assert "fix:" in capsys.readouterr().err


@needs_kmsg
def test_cursor_and_since_on_the_real_kmsg(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "cursor", "--source", "kmsg"]) == 0
    cur = capsys.readouterr().out.strip()
    mark = "fh" + uuid.uuid4().hex[:8]
    fd = os.open("/dev/kmsg", os.O_WRONLY)
    os.write(fd, f"<4>NVRM: Xid (PCI:0000:00:06): 43, pid=4321, name={mark}, channel 0x0000000a\n".encode())
    os.close(fd)
    assert main(["xid", "since", "--json", cur]) == 0
    objs = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    mine = [o for o in objs[:-1] if o["process"] == mark]
    assert len(mine) == 1 and mine[0]["seq"] >= json.loads(cur)["seq"] and objs[-1]["lost"] == 0


def test_watch_for_a_moment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    assert main(["xid", "watch", "--source", f"file:{log}", "--duration", "0.1", "--interval", "0.05"]) == 0
    assert "0 Xid report(s), 0 record(s) lost" in capsys.readouterr().err


def test_no_action_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid"]) == 2


def test_parse_the_live_log_when_nothing_is_readable(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from faulthunt.kernlog import sources as S

    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(S, "open_source", lambda spec, warn=None: S.NullSource("kmsg: denied"))
    assert main(["xid", "parse"]) == 3
    err = capsys.readouterr().err
    assert "kmsg: denied" in err and "fix:" in err


# --- where `xid parse` reads from (issue 13: --source was ignored when stdin was not a terminal) -------

XID_LINE = "[2.0] NVRM: Xid (PCI:0000:00:06): 43, pid=77, name=t, channel 0x0000000a\n"


@pytest.mark.parametrize("stdin", ["devnull", "pipe", "closed"])
def test_parse_source_file_is_read_whatever_stdin_is(tmp_path: Path, stdin: str) -> None:
    """CI and cron run with stdin from /dev/null, a pipe, or none at all: --source must still be read."""
    import subprocess
    import sys

    log = tmp_path / "kern.log"
    log.write_text("[1.0] boot\n" + XID_LINE)
    argv = [sys.executable, "-m", "faulthunt", "xid", "parse", "--json", "--source", f"file:{log}"]
    if stdin == "closed":
        argv = ["sh", "-c", '"$@" <&-', "sh", *argv]
    feed = {"input": b"[9.0] unrelated\n"} if stdin == "pipe" else {"stdin": subprocess.DEVNULL}
    proc = subprocess.run(argv, capture_output=True, **feed)  # type: ignore[call-overload]
    assert proc.returncode == 0, proc.stderr
    (obj,) = [json.loads(x) for x in proc.stdout.decode().splitlines()]
    assert obj["pid"] == 77


def test_parse_without_input_reads_the_kernel_log_when_stdin_is_devnull(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    from faulthunt.kernlog import sources as S

    log = tmp_path / "kern.log"
    log.write_text(XID_LINE)
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115
    asked: list[str] = []

    def fake_open(spec: str, warn=None):  # type: ignore[no-untyped-def]
        asked.append(spec)
        return S.FileSource(log)

    monkeypatch.setattr(S, "open_source", fake_open)
    assert main(["xid", "parse", "--json"]) == 0
    assert asked == ["auto"] and json.loads(capsys.readouterr().out)["pid"] == 77
    sys.stdin.close()


def test_parse_paths_and_source_together_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "parse", str(H200_DMESG), "--source", "kmsg"]) == 2
    assert "fix:" in capsys.readouterr().err


def test_parse_refuses_devices_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "parse", "/dev/zero"]) == 3
    err = capsys.readouterr().err
    assert "is a device" in err and "--source kmsg" in err


def test_parse_streams_json_lines_of_the_records(capsys: pytest.CaptureFixture[str]) -> None:
    """One line per event, each its to_json object (keys in order), as kernlog.jsonl encodes it."""
    from faulthunt.kernlog.jsonl import event_json
    from faulthunt.kernlog.parse import scan_bytes

    assert main(["xid", "parse", "--json", str(H200_DMESG)]) == 0
    events = scan_bytes(H200_DMESG.read_bytes()).events
    out = capsys.readouterr().out
    assert out == "".join(event_json(e) + "\n" for e in events)
    assert [list(json.loads(line).items()) for line in out.splitlines()] == [list(e.to_json().items()) for e in events]


def test_parse_incidents_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xid", "parse", "--incidents", str(H200_DMESG)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("22 incident(s):") and out[1].startswith("[your code] Xid 13 on 0000:00:06, pid 553")


# --- damaged cursors (issue 18): a message with the fix, never a traceback -----------------------------

BAD_CURSOR_FILES = {
    "invalid utf-8": b'{"source": "file", "path": "/tmp/x\xff\xfe"}',
    "binary": bytes(range(256)) * 4,
    "cut short": b'{"source": "kmsg", "se',
    "empty": b"",
    "a list": b"[1, 2]",
    "wrong types": b'{"source": "kmsg", "seq": "ten"}',
    "a list for an int": b'{"source": "kmsg", "seq": [1]}',
    "negative offset": b'{"source": "file", "path": "/tmp/x", "offset": -1}',
    "infinite time": b'{"source": "dmesg", "ts": 1e999}',
    "a bool": b'{"source": "kmsg", "seq": true}',
    "a path of numbers": b'{"source": "file", "path": 5}',
    "a NUL in the path": b'{"source": "file", "path": "/tmp/\\u0000x"}',
    "huge number": b'{"source": "kmsg", "seq": ' + b"9" * 5000 + b"}",
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "huge file": b'{"source": "kmsg", "seq": 1, "pad": "' + b"x" * (100 << 10) + b'"}',
    "source is a number": b'{"source": 5}',
    "unknown source": b'{"source": "bogus"}',
}


@pytest.mark.parametrize("name", sorted(BAD_CURSOR_FILES))
def test_since_with_a_damaged_cursor_file(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cur = tmp_path / "kmsg_cursor.json"
    cur.write_bytes(BAD_CURSOR_FILES[name])
    assert main(["xid", "since", str(cur)]) == 2
    err = capsys.readouterr().err
    assert "fix:" in err and "Traceback" not in err


def test_since_with_a_cursor_that_is_a_directory_or_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for target in (str(tmp_path), "/dev/zero"):
        assert main(["xid", "since", target]) == 2
        assert "fix:" in capsys.readouterr().err


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=100).map(str.encode),
                      st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
                                   lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
                                       st.sampled_from(["source", "seq", "offset", "path", "ts", "cursor", "x"]),
                                       kids, max_size=4), max_leaves=8).map(lambda v: json.dumps(v).encode())))
def test_load_cursor_never_raises_anything_but_a_faulthunt_error(data: bytes) -> None:
    import tempfile

    from faulthunt.cli.xid import load_cursor
    from faulthunt.errors import FaulthuntError
    from faulthunt.kernlog.sources import Cursor

    with tempfile.NamedTemporaryFile(suffix=".json") as fh:
        fh.write(data)
        fh.flush()
        for arg in (fh.name, data.decode("utf-8", "surrogateescape")):
            try:
                assert isinstance(load_cursor(arg), Cursor)
            except FaulthuntError as exc:
                assert exc.fix


def test_parse_the_quadratic_mix_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 16's case through the command: 40k lines of Xid 31 + Xid 43 of unrelated processes took 44 s.

    The work is asserted in tests/test_kernlog_incident.py (steps per line); here only a wall limit
    far above what linear work takes and below what the quadratic grouping took.
    """
    import time

    lines = []
    for k in range(40_000):
        ts = f"[{100 + k * 0.001:.6f}] "
        lines.append(ts + ("NVRM: Xid (PCI:0000:3b:00): 31, pid=4242, name=train, channel 0x0000000a, intr 00000000. "
                           "MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_3 faulted @ 0x7f00_00200000. "
                           "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE" if k % 2 == 0 else
                           f"NVRM: Xid (PCI:0000:3b:00): 43, pid={10**6 + k}, name=other, channel 0x0000000b"))
    log = tmp_path / "storm.log"
    log.write_text("\n".join(lines) + "\n")
    t0 = time.monotonic()
    assert main(["xid", "parse", "--incidents", str(log)]) == 0
    assert time.monotonic() - t0 < 30
    assert capsys.readouterr().out.splitlines()[-1].startswith("20001 incident(s):")


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60))
def test_the_control_check_answers_as_the_expression_on_every_route(text: str) -> None:
    """The guard's check (compiled where built, a byte deletion otherwise) is the expression's."""
    from faulthunt.cli.xid import _CONTROL
    from faulthunt.kernlog import parse

    want = _CONTROL.search(text) is not None
    assert parse.has_control(text) is want and parse._has_control(text) is want


def test_the_guard_leaves_a_clean_table_to_the_check_and_replaces_only_when_needed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Work counted: a clean multi-megabyte table is one has_control call and no expression search
    (the search over the 31+43 log's 3.3 MB table cost 16% of the command); text with a control
    character goes through the expression's replacement."""
    import io
    import re

    from faulthunt.cli import xid

    calls: list[str] = []

    class Counting:
        def search(self, text: str) -> None:
            calls.append("search")

        def sub(self, repl, text: str) -> str:  # type: ignore[no-untyped-def]
            calls.append("sub")
            return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", repl, text)

    monkeypatch.setattr(xid, "_CONTROL", Counting())
    out = io.StringIO()
    guard = xid._Visible(out)
    table = "0.000000  31  0000:3b:00  1234  python  application memory fault  Ch 00000008\n" * 40_000
    guard.write(table)
    assert calls == [] and out.getvalue() == table
    guard.write("name=py\x1b[31m\n")
    assert calls == ["sub"] and out.getvalue().endswith("name=py\\x1b[31m\n")


def test_control_characters_of_the_log_are_shown_not_acted_on(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A process name is what the program set (prctl): an ESC in it used to reach the terminal
    raw from the table, the incidents and `since --lines`."""
    log = tmp_path / "kern.log"
    log.write_text("[  123.456] NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=py\x1b[31mEVIL\x07, "
                   "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
                   "0x7f4a_fbe00000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE\n")
    for argv in (["xid", "parse", str(log)], ["xid", "parse", "--incidents", str(log)]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out
        assert "py\\x1b[31mEVIL\\x07" in out
    assert main(["xid", "parse", str(log)]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    # the columns are measured as shown: the escaped name pushes none of the row's cells out of line
    assert row.index("application memory fault") == header.index("category")
    assert row.index("py\\x1b") == header.index("process")
    assert main(["xid", "parse", "--json", str(log)]) == 0  # JSON keeps the data exact
    assert json.loads(capsys.readouterr().out.splitlines()[0])["process"] == "py\x1b[31mEVIL\x07"
    assert main(["xid", "cursor", "--source", f"file:{log}"]) == 0
    cursor = capsys.readouterr().out.strip()
    with log.open("a") as fh:
        fh.write("[  124.000] NVRM: Xid (PCI:0000:3b:00): 13, pid=9, name=a\x1bb, Graphics Exception\n")
    for argv in (["xid", "since", cursor], ["xid", "since", "--lines", cursor]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "a\\x1bb" in out
