from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faulthunt import rundir
from faulthunt.errors import RunDirError


def test_create_points_latest_and_resolves(tmp_path: Path) -> None:
    base = tmp_path / "runs"
    first = rundir.create_run_dir(base=base)
    second = rundir.create_run_dir(base=base)
    assert first != second
    assert (first / "events").is_dir() and (first / "ledger").is_dir()
    assert rundir.resolve_run_dir(None, base=base) == second.resolve()
    assert rundir.resolve_run_dir(first.name, base=base) == first
    assert rundir.resolve_run_dir(str(first)) == first


def test_explicit_run_dir_leaves_latest(tmp_path: Path) -> None:
    exact = rundir.create_run_dir(run_dir=tmp_path / "mine")
    assert exact == tmp_path / "mine"
    with pytest.raises(RunDirError, match="no run found"):
        rundir.resolve_run_dir(None, base=tmp_path / "runs")


def test_missing_run_says_fix(tmp_path: Path) -> None:
    with pytest.raises(RunDirError) as info:
        rundir.resolve_run_dir("nope", base=tmp_path)
    assert info.value.fix


def test_jsonl_torn_tail_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    with rundir.JsonlWriter(path) as w:
        w.write({"a": 1})
        w.write({"a": 2})
    with open(path, "a") as fh:
        fh.write('{"a": 3, "b"')  # a writer killed mid-line
    got = rundir.read_jsonl(path)
    assert [r["a"] for r in got.records] == [1, 2]
    assert got.skipped == 1 and got.torn_tail


def test_jsonl_junk_lines(tmp_path: Path) -> None:
    got = rundir.parse_jsonl('{"x":1}\n\x00\xff garbage\n[1,2]\n\n{"x":2}\n')
    assert [r["x"] for r in got.records] == [1, 2]
    assert got.skipped == 2 and not got.torn_tail


def test_sigkilled_writer_keeps_every_line(tmp_path: Path) -> None:
    path = tmp_path / "k.jsonl"
    code = textwrap.dedent(f"""
        import os, sys
        from faulthunt.rundir import JsonlWriter
        w = JsonlWriter({str(path)!r})
        for i in range(200):
            w.write({{"i": i}})
        print("ready", flush=True)
        sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    got = rundir.read_jsonl(path)
    assert [r["i"] for r in got.records] == list(range(200))


def test_atomic_json_roundtrip(tmp_path: Path) -> None:
    p = tmp_path / "s.json"
    rundir.write_json_atomic(p, {"b": (1, 2), "p": Path("x")})
    assert json.loads(p.read_text()) == {"b": [1, 2], "p": "x"}
    assert rundir.read_json(tmp_path / "missing.json", default=None) is None
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(RunDirError, match="not valid JSON"):
        rundir.read_json(tmp_path / "bad.json")
