"""faulthunt stress's pure and in-process pieces: pytest's output scanned and pumped (bounded,
redacted, never blocked by a full disk), the writers on a full disk, option checks, the exit rule,
interrupted runs, and the terminal lines for what the run could not do."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from faulthunt.errors import UsageError
from faulthunt.records.events import Crash
from faulthunt.records.run import TestSpan
from faulthunt.rundir import DiskFullError, JsonlWriter, RunDir
from faulthunt.stress import StressOptions, build_pytest_argv, exit_status_for
from faulthunt.stress.analyse import INTERRUPTED, label_unended
from faulthunt.stress.options import (Timeout, check, check_gpus, check_run_dir, check_targets,
                                      resolve_timeout, split_targets, suite_timeout)
from faulthunt.stress.output import (PREFIX, READ_CHUNK, SEGMENT, OutputPump, PytestOutput,
                                     redact_lines)

# pytest 9.2.0 + pytest-xdist 3.8.0 output, captured on the CPU dev machine (2026-12-03) with
# `python -m pytest -p faulthunt -p xdist -p repeat -p timeout ...` as faulthunt stress runs it.
COLLECTION_ERRORS_XDIST = """\
created: 2/2 workers
2 workers [2 items]

..                                                                       [100%]
==================================== ERRORS ====================================
________________________ ERROR collecting test_bad1.py _________________________
ImportError while importing test module '/tmp/sx/ce/test_bad1.py'.
Hint: make sure your test modules/packages have valid Python names.
Traceback:
test_bad1.py:1: in <module>
    import no_such_module_1
E   ModuleNotFoundError: No module named 'no_such_module_1'
________________________ ERROR collecting test_bad2.py _________________________
E   ModuleNotFoundError: No module named 'no_such_module_2'
=========================== short test summary info ============================
ERROR test_bad1.py - ImportError while importing test module '/tmp/sx/ce/test...
ERROR test_bad2.py - ImportError while importing test module '/tmp/sx/ce/test...
ERROR test_bad3.py
========================= 2 passed, 3 errors in 6.09s ==========================
"""
USAGE_ERROR = """\
ERROR: usage: python -m pytest [options] [file_or_dir] [file_or_dir] [...]
python -m pytest: error: unrecognized arguments: --bogus-flag
  inifile: None
  rootdir: /tmp/sx/ce
"""
NOT_FOUND = """\
collected 0 items

============================ no tests ran in 0.01s =============================
ERROR: file or directory not found: nope.py

"""
DESELECTED = """\
collected 2 items / 2 deselected / 0 selected

============================ 2 deselected in 1.41s =============================
"""


def scan(text: str) -> PytestOutput:
    out = PytestOutput()
    for line in text.splitlines():
        out.feed(line)
    return out


def test_scanner_collection_errors_in_pytests_words():
    out = scan(COLLECTION_ERRORS_XDIST)
    assert out.total == 2
    assert out.collection_errors == 3
    assert out.collect_errors[:2] == [
        ("test_bad1.py", "ModuleNotFoundError: No module named 'no_such_module_1'"),
        ("test_bad2.py", "ModuleNotFoundError: No module named 'no_such_module_2'")]
    assert out.collect_errors[2] == ("test_bad3.py", None)
    assert out.final == "2 passed, 3 errors in 6.09s"


# a fixture that raises (pytest 9.2, -n 0 and -n 2 --tb=no): the tests ran, with outcome error
SETUP_ERRORS = """\
collected 4 items

..EE                                                                     [100%]
==================================== ERRORS ====================================
__________________________ ERROR at setup of test_a[1-2] __________________________
E   RuntimeError: fixture boom
=========================== short test summary info ============================
ERROR test_fx.py::test_a[2-2] - RuntimeError: fixture boom
ERROR test_fx.py::test_a[1-2] - RuntimeError: fixture boom
========================= 2 passed, 2 errors in 2.56s ==========================
"""
MIXED_ERRORS = """\
collected 2 items / 2 errors
_______________________ ERROR collecting test_broken.py ________________________
E   ModuleNotFoundError: No module named 'nonexistent_mod'
_______________________ ERROR collecting test_c.py::TestC ________________________
___________________________ ERROR at setup of test_a ___________________________
E   RuntimeError: fixture boom
ERROR test_broken.py
ERROR test_c.py::TestC - TypeError: bad
ERROR test_fx.py::test_a - RuntimeError: fixture boom
========================= 1 passed, 3 errors in 0.54s ==========================
"""


def test_scanner_setup_errors_are_not_collection_errors():
    out = scan(SETUP_ERRORS)
    assert (out.collection_errors, out.collect_errors) == (0, [])
    assert out.final == "2 passed, 2 errors in 2.56s"
    mixed = scan(MIXED_ERRORS)
    assert mixed.collect_errors == [
        ("test_broken.py", "ModuleNotFoundError: No module named 'nonexistent_mod'"),
        ("test_c.py::TestC", "TypeError: bad")]
    assert mixed.collection_errors == 2


@pytest.mark.parametrize(("text", "reason"), [
    (USAGE_ERROR, "pytest: unrecognized arguments: --bogus-flag"),
    (NOT_FOUND, "pytest: file or directory not found: nope.py"),
    (DESELECTED, "pytest: 2 deselected in 1.41s"),
    ("!!!!!!!!!!! Interrupted: 8 errors during collection !!!!!!!!!!!\n",
     "pytest stopped at 8 collection errors (without xdist pytest does not run the rest); fix "
     "them or pass `-- --continue-on-collection-errors`"),
    (COLLECTION_ERRORS_XDIST.replace("2 passed, ", ""), "pytest: 3 collection errors"),
    # xdist's own crash on a bad -k expression (pytest-xdist 3.8): the last line is the error
    ("INTERNALERROR> Traceback (most recent call last):\nINTERNALERROR>   File \"x.py\", line 1\n"
     "INTERNALERROR> assert not 'test_k.py::test_a'\nINTERNALERROR>\n",
     "pytest stopped on an internal error (assert not 'test_k.py::test_a'); the same command "
     "with -n 0 shows pytest's own message (xdist hides some usage errors, such as a bad -k "
     "expression, behind one)"),
    ("nothing pytest would say\n", None),
    # a conftest.py that raises at import (pytest 9.2, exit 4, no summary line; D14)
    ("ImportError while loading conftest '/tmp/x/conftest.py'.\nconftest.py:1: in <module>\n"
     "    raise RuntimeError(\"conftest boom\")\nE   RuntimeError: conftest boom\n"
     "ImportError while loading conftest '/tmp/x/conftest.py'.\nE   RuntimeError: other\n",
     "pytest could not import /tmp/x/conftest.py: RuntimeError: conftest boom (fix that "
     "conftest.py: pytest loads it before collecting any test)"),
    # a SyntaxError quotes the source first, indented further
    ("ImportError while loading conftest '/tmp/x/conftest.py'.\n"
     "E     File \"/tmp/x/conftest.py\", line 1\nE       def (\nE           ^\n"
     "E   SyntaxError: invalid syntax\n",
     "pytest could not import /tmp/x/conftest.py: SyntaxError: invalid syntax (fix that "
     "conftest.py: pytest loads it before collecting any test)"),
    ("ERROR: test id 't.py::t[x]' matches no collected test; fix: ...\n",
     "pytest: test id 't.py::t[x]' matches no collected test; fix: ..."),
])
def test_scanner_reason(text, reason):
    assert scan(text).reason() == reason


def test_scanner_sees_workers_disk_full_lines():
    said = "disk full at /r/events/gw0-1.jsonl: No space left on device; records..."
    assert scan(f"...faulthunt: {said}\n").disk_full == [said]


def _pump(chunks: list[bytes], log: Path, **kw) -> tuple[OutputPump, list[str]]:
    """Run a pump over a real pipe fed by a thread; returns it and the line heads it saw."""
    r, w = os.pipe()
    heads: list[str] = []
    pump = OutputPump(r, log, PytestOutput(), on_line=heads.append, **kw)
    pump.start()

    def feed() -> None:
        for c in chunks:
            os.write(w, c)
        os.close(w)

    feeder = threading.Thread(target=feed)
    feeder.start()
    feeder.join(60)
    assert not feeder.is_alive(), "the writer blocked: the pump stopped draining"
    assert pump.join(60)
    os.close(r)
    return pump, heads


def test_pump_bounded_long_line(tmp_path):
    """A 10 MB line is handled in segments: the scanner sees only its start (redacted), the log
    gets it all."""
    seen: list[int] = []

    def redact(text: str) -> str:
        seen.append(len(text))
        return text.replace("ghp_", "<t>")

    big = b"x" * (10 * 1024 * 1024)
    chunks = [b"collected 3 items\n", big[: 3 * 1024 * 1024], big[3 * 1024 * 1024:],
              b"\nghp_after\nlast line without newline"]
    pump, heads = _pump(chunks, tmp_path / "log", redact=redact)
    data = (tmp_path / "log").read_bytes()
    assert data == b"collected 3 items\n" + big + b"\n<t>after\nlast line without newline"
    assert pump.scan.total == 3
    assert heads[0] == "collected 3 items" and len(heads[1]) == PREFIX
    assert heads[2:] == ["<t>after", "last line without newline"]
    assert max(seen) <= READ_CHUNK + SEGMENT  # bounded, whatever the length of a line
    assert pump.disk_full is None and pump.dropped == 0


def test_redact_lines_only_touches_lines_that_may_hold_a_secret():
    token = "ghp_" + "a" * 36
    text = f"....... [ 10%]\nE   assert x == y\nGITHUB_TOKEN={token} next\nhttps://u:pw@h/x\nlast"
    assert redact_lines(text) == ("....... [ 10%]\nE   assert x == y\nGITHUB_TOKEN=<redacted> next"
                                  "\nhttps://u:<redacted>@h/x\nlast")
    plain = "..........\n" * 1000
    assert redact_lines(plain) is plain  # nothing to redact: the same text, not a copy


def test_pump_keeps_draining_on_a_full_disk():
    """/dev/full fails every write with ENOSPC: the writer still finishes (never blocks)."""
    chunks = [b"line %d\n" % i * 100 for i in range(2000)]
    pump, _ = _pump(chunks, Path("/dev/full"))
    assert pump.disk_full == "disk full at /dev/full: No space left on device"
    assert pump.dropped == sum(map(len, chunks)) and pump.written == 0


def test_pump_multibyte_split_across_segments(tmp_path):
    text = "é" * (SEGMENT // 2 + 7) + "\n"  # 2 bytes each: a segment boundary cuts one in half
    _pump([text.encode()], tmp_path / "log", redact=lambda t: t)
    assert (tmp_path / "log").read_text(encoding="utf-8") == text


def test_jsonl_writer_on_full_counts_and_says_once():
    said: list[str] = []
    w = JsonlWriter("/dev/full", on_full=said.append)
    for i in range(3):
        w.write({"i": i})
    w.close()
    assert w.dropped == 3 and len(said) == 1
    assert said[0].startswith("disk full at /dev/full: No space left on device")
    with pytest.raises(DiskFullError, match="disk full at /dev/full"):
        JsonlWriter("/dev/full").write({"i": 1})


def test_jsonl_writer_ends_a_torn_line(tmp_path, monkeypatch):
    """A line cut short by a full disk is ended before the next record: both sides read."""
    path = tmp_path / "e.jsonl"
    w = JsonlWriter(path, on_full=lambda msg: None)
    real_write = os.write
    calls = {"n": 0}

    def short_then_full(fd, data):
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[:5]))
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", short_then_full)
    w.write({"event": "worker", "pid": 1})
    w.write({"event": "worker", "pid": 2})
    monkeypatch.setattr(os, "write", real_write)
    w.close()
    lines = path.read_bytes().split(b"\n")
    assert lines[0] == b'{"eve' and json.loads(lines[1]) == {"event": "worker", "pid": 2}


def test_write_text_atomic_under_ulimit_f_says_disk_full(tmp_path):
    code = ("import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096));"
            "from faulthunt.rundir import write_text_atomic, DiskFullError\n"
            "try:\n write_text_atomic(%r, 'x' * 100000)\n"
            "except DiskFullError as e:\n print(e)\n" % str(tmp_path / "s.json"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "disk full at" in out.stdout and "ulimit -f" in out.stdout, out.stderr
    assert not list(tmp_path.iterdir())  # no temporary file left behind


# --- options -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "kept", "ids", "after"), [
    (["tests/", "-x"], ["tests/", "-x"], [], []),
    (["t.py::test_p[a b]"], [], ["t.py::test_p[a b]"], []),
    (["--deselect", "t.py::test_p[1]", "t.py"], ["--deselect", "t.py::test_p[1]", "t.py"], [], []),
    # beside a parametrized id every node id is selected by id (D10): left to pytest, the
    # selection would leave it out
    (["-k", "x", "t.py::C::test[1]", "t.py::plain"], ["-k", "x"],
     ["t.py::C::test[1]", "t.py::plain"], []),
    (["t.py::plain", "t.py::C::test"], ["t.py::plain", "t.py::C::test"], [], []),
    (["t.py::C::t", "--", "t.py::p[1]", "t.py::q"], [], ["t.py::C::t", "t.py::p[1]", "t.py::q"],
     []),
    (["-x", "--", "t.py::test_p[1]", "-odd"], ["-x"], ["t.py::test_p[1]"], ["-odd"]),
])
def test_split_targets(args, kept, ids, after):
    assert split_targets(args) == (kept, ids, after)


def test_argv_parametrized_ids_selected_last():
    argv = build_pytest_argv(StressOptions(pytest_args=("-p", "no:randomly", "t.py::test_odd[a b]"),
                                           count=3), python="py")
    assert argv[-5:] == ["-p", "no:randomly", "--faulthunt-id=t.py::test_odd[a b]", "--",
                         "t.py::test_odd"]
    assert "--count" in argv


def test_argv_timeout_default_and_off():
    joined = " ".join(build_pytest_argv(StressOptions(), python="py"))
    assert "--timeout 300 --timeout-method thread" in joined or (
        "--timeout-method thread --timeout 300" in joined)
    off = build_pytest_argv(StressOptions(timeout=0), python="py")
    assert off[off.index("--timeout") + 1] == "0"
    suite = build_pytest_argv(StressOptions(), python="py",
                              timeout=resolve_timeout(None, ("pytest.ini", 60.0)))
    assert "--timeout" not in suite and "thread" in suite  # the suite's own value stays in force


def test_suite_timeout_found_as_pytest_finds_it(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\ntimeout = 45\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    assert suite_timeout(sub) == ("pyproject.toml", 45.0)
    (sub / "pytest.ini").write_text("[pytest]\naddopts = -q\n")
    assert suite_timeout(sub) is None  # the nearer pytest.ini wins, and sets none
    t = resolve_timeout(None, None)
    assert (t.seconds, t.source) == (300.0, "default") and "--timeout 0" in t.text()
    assert resolve_timeout(0, ("pytest.ini", 9.0)) == Timeout(None, "off")


@pytest.mark.parametrize(("name", "text", "source"), [
    ("pytest.toml", '[pytest]\ntimeout = "7"\n', "pytest.toml"),
    (".pytest.toml", '[pytest]\naddopts = ["-q", "--timeout", "7"]\n', ".pytest.toml addopts"),
    ("pyproject.toml", '[tool.pytest]\ntimeout = "7"\n', "pyproject.toml"),
    ("pyproject.toml", '[tool.pytest.ini_options]\naddopts = "--timeout=7"\n',
     "pyproject.toml addopts"),
    ("pytest.ini", "[pytest]\naddopts = -q --timeout 7\n", "pytest.ini addopts"),
    ("tox.ini", "[pytest]\ntimeout = 7\n", "tox.ini"),
    ("setup.cfg", "[tool:pytest]\ntimeout = 7\n", "setup.cfg"),
])
def test_suite_timeout_every_way_a_suite_sets_it(tmp_path, name, text, source):
    """pytest 9's own files ([pytest] tables, [tool.pytest]) and --timeout in addopts count:
    stress passing its default over them would cut the suite's long tests short as hung."""
    (tmp_path / name).write_text(text)
    assert suite_timeout(tmp_path, env={}) == (source, 7.0)
    plan_argv = build_pytest_argv(StressOptions(), python="py",
                                  timeout=resolve_timeout(None, suite_timeout(tmp_path, env={})))
    assert "--timeout" not in plan_argv  # the suite's own value stays in force


def test_suite_timeout_precedence_as_pytest_timeout_reads_it(tmp_path):
    """pytest's arguments, then PYTEST_ADDOPTS, then the file's addopts (pytest puts them on one
    command line in reverse order), then PYTEST_TIMEOUT, then the file's timeout."""
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 5\naddopts = --timeout 4\n")
    env = {"PYTEST_ADDOPTS": "--timeout=3", "PYTEST_TIMEOUT": "9"}
    assert suite_timeout(tmp_path, ("t.py", "--timeout", "2"), env) == ("pytest arguments", 2.0)
    assert suite_timeout(tmp_path, ("t.py",), env) == ("PYTEST_ADDOPTS", 3.0)
    assert suite_timeout(tmp_path, (), {"PYTEST_TIMEOUT": "9"}) == ("pytest.ini addopts", 4.0)
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 5\n")
    assert suite_timeout(tmp_path, (), {"PYTEST_TIMEOUT": "9"}) == ("PYTEST_TIMEOUT", 9.0)
    assert suite_timeout(tmp_path, (), {}) == ("pytest.ini", 5.0)
    assert suite_timeout(tmp_path, ("-o", "timeout=6"), {}) == ("-o timeout", 6.0)
    assert suite_timeout(tmp_path, (), {"PYTEST_ADDOPTS": "--override-ini=timeout=6"}) == (
        "-o timeout", 6.0)
    assert suite_timeout(tmp_path, ("-otimeout=6",), {"PYTEST_TIMEOUT": "9"}) == (
        "PYTEST_TIMEOUT", 9.0)  # pytest-timeout reads the environment before the ini setting
    # after pytest's own "--" a word is a test path, not an option
    assert suite_timeout(tmp_path, ("--", "--timeout", "2"), {}) == ("pytest.ini", 5.0)
    with pytest.raises(UsageError, match="--timeout among pytest's arguments sets the per-test "
                       "timeout to 'x', which is not a finite number of seconds") as info:
        suite_timeout(tmp_path, ("--timeout", "x"), {})
    assert str(info.value.fix) == "set seconds there"  # pytest's parser stops on it: ours cannot win
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = abc\n")
    with pytest.raises(UsageError, match=r"the suite's pytest\.ini sets the per-test timeout to 'abc'") as info:
        check(StressOptions(cwd=tmp_path, xid_source="none"), warn=lambda _msg: None)
    assert "--timeout S" in str(info.value.fix)
    plan = check(StressOptions(cwd=tmp_path, xid_source="none", timeout=9), warn=lambda _m: None)
    assert (plan.timeout.seconds, plan.timeout.source) == (9.0, "--timeout")  # ours wins
    # an option's value stops pytest whatever follows: refused with faulthunt's --timeout too
    with pytest.raises(UsageError, match="the environment's PYTEST_ADDOPTS sets the per-test"):
        check(StressOptions(cwd=tmp_path, xid_source="none", timeout=9,
                            env={"PYTEST_ADDOPTS": "--timeout=abc"}), warn=lambda _m: None)


@pytest.mark.parametrize("value", ["[1]", "{a = 1}", "true", "inf", "nan", '"1e400"'])
def test_suite_timeout_that_is_no_finite_number_is_refused(tmp_path, value):
    """A TOML list, table or boolean raised a TypeError or read as 1 s; infinity wrote
    ``Infinity`` into summary.json, which strict JSON readers refuse."""
    (tmp_path / "pytest.toml").write_text(f"[pytest]\ntimeout = {value}\n")
    with pytest.raises(UsageError, match=r"the suite's pytest\.toml sets the per-test timeout to"):
        suite_timeout(tmp_path, (), {})


def test_suite_timeout_below_zero_turns_it_off(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = -5\n")
    t = resolve_timeout(None, suite_timeout(tmp_path, (), {}))
    assert t.seconds is None and "the suite's pytest.ini turns it off" in t.text()


def test_suite_timeout_from_the_file_pytest_takes(tmp_path):
    """The file is found from the test paths' common ancestor up, or named with -c."""
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 5\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "tox.ini").write_text("[pytest]\ntimeout = 6\n")
    (sub / "test_a.py").write_text("def test_a(): pass\n")
    assert suite_timeout(tmp_path, ("sub/test_a.py::test_a",), {}) == ("tox.ini", 6.0)
    assert suite_timeout(tmp_path, ("sub/test_a.py", "."), {}) == ("pytest.ini", 5.0)
    assert suite_timeout(tmp_path, ("missing.py",), {}) == ("pytest.ini", 5.0)  # cwd's
    (tmp_path / "ci.toml").write_text('[pytest]\ntimeout = "8"\n')
    assert suite_timeout(tmp_path, ("-c", "ci.toml"), {}) == ("ci.toml", 8.0)
    assert suite_timeout(tmp_path, (), {"PYTEST_ADDOPTS": "--config-file=sub/tox.ini"}) == (
        "tox.ini", 6.0)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no pytest table
    (tmp_path / "pytest.ini").unlink()
    assert suite_timeout(tmp_path, (), {}) is None
    (tmp_path / "pyproject.toml").write_text("not toml [\n")  # pytest will say what is wrong
    assert suite_timeout(tmp_path, (), {}) is None
    (tmp_path / "pyproject.toml").write_text("tool = 1\npytest = 'x'\n")  # odd shapes: no config
    assert suite_timeout(tmp_path, (), {}) is None


def test_timeout_text_says_where_it_came_from():
    assert "the environment's PYTEST_TIMEOUT" in Timeout(9.0, "PYTEST_TIMEOUT").text()
    assert "the suite's pytest.ini addopts" in Timeout(4.0, "pytest.ini addopts").text()
    assert "--timeout among pytest's arguments" in Timeout(2.0, "pytest arguments").text()
    assert "the suite's tox.ini turns it off" in Timeout(None, "tox.ini").text()
    assert "(--timeout 0)" in Timeout(None, "off").text()
    assert "unless a timeout mark of its own sets one" in Timeout(None, "off").text()


def test_two_timeouts_refused(tmp_path):
    opts = StressOptions(timeout=5, pytest_args=("--timeout", "1"), cwd=tmp_path,
                         xid_source="none")
    with pytest.raises(UsageError, match="two per-test timeouts") as info:
        check(opts, warn=lambda _msg: None)
    assert "give one of them" in str(info.value.fix)


def test_run_dir_holding_a_run_is_refused(tmp_path):
    check_run_dir(tmp_path / "new")          # does not exist: fine
    (tmp_path / "empty").mkdir()
    check_run_dir(tmp_path / "empty")        # empty: fine
    (tmp_path / "old" / "events").mkdir(parents=True)
    (tmp_path / "old" / "events" / "gw0-1.jsonl").write_text("{}\n")
    with pytest.raises(UsageError, match="already holds a run") as info:
        check_run_dir(tmp_path / "old")
    assert "new directory" in (info.value.fix or "")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is a file"):
        check_run_dir(tmp_path / "file")


def test_gpu_indexes_checked_against_nvml():
    with pytest.raises(UsageError, match="no GPU 7 on this machine"):
        check_gpus(("0", "7"), device_count=lambda: 2)
    assert check_gpus(("0", "1"), device_count=lambda: 2) == []
    (note,) = check_gpus(("7",), device_count=lambda: None)
    assert "cannot check" in note
    assert check_gpus(("GPU-f443d679-49ad-ee2e-df61-53505888c8f0",), device_count=lambda: 0) == []


def test_targets_checked(tmp_path):
    (tmp_path / "t.py").write_text("")
    check_targets(["t.py", "-p", "no:x", "-m", "not slow", "--deselect", "gone.py::t[1]"], tmp_path)
    with pytest.raises(UsageError, match=r"'nope\.py' does not exist"):
        check_targets(["nope.py"], tmp_path)
    with pytest.raises(UsageError, match=r"test paths \(t\.py\) cannot be mixed"):
        check_targets(["t.py::test_a[1]", "t.py"], tmp_path)
    # full ids mix, parametrized or not, class methods and classes included (D10)
    check_targets(["t.py::test_ids[a b]", "t.py::TestUnit::test_fail", "t.py::TestC"], tmp_path)
    with pytest.raises(UsageError, match=r"'gone\.py' does not exist"):
        check_targets(["t.py::test_ids[a b]", "gone.py::TestUnit::test_fail"], tmp_path)


# --- analysis ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kw", "status"), [
    ({"stopped_by": 15}, 143), ({"stopped_by": 1}, 129), ({"stopped_by": 2}, 130),
    ({"disk_full": True}, 3), ({"collection_errors": 2}, 1),
    ({"stopped_by": 15, "disk_full": True}, 143),
])
def test_exit_rule_stops_disk_and_collection_errors(kw, status):
    assert exit_status_for(2, False, **kw) == status


def test_stopped_runs_in_flight_are_interrupted_not_crashed():
    def span(nodeid, ended, worker="gw0"):
        return TestSpan(nodeid=nodeid, base_nodeid=nodeid, worker=worker, pid=1, t0=1.0,
                        t0_mono=1.0, t1=2.0 if ended else None,
                        outcome="passed" if ended else "crashed")

    spans = [span("t::a", True), span("t::b", False), span("t::c", False, "gw1")]
    crash = Crash(kind="crashed", nodeid="t::c", worker="gw1")
    got = {s.nodeid: s.outcome for s in label_unended(spans, [crash], INTERRUPTED, "stopped")}
    assert got == {"t::a": "passed", "t::b": "interrupted", "t::c": "crashed"}


# --- terminal ------------------------------------------------------------------------------------

def _render(summary: dict) -> str:
    from faulthunt.report.terminal import render_summary

    buf = io.StringIO()
    render_summary({"tests_run": 0, "by_test": [], "xids": [], "failures": [], **summary},
                   Path("/r"), Console(file=buf, width=300, color_system=None), mapping=())
    return buf.getvalue()


def test_terminal_counts_worker_slots_and_restarts():
    text = _render({"tests_run": 40, "outcomes": {"passed": 30},
                    "workers": {"slots": 4, "restarts": 10, "processes": 14, "crashed": 6,
                                "hung": 0, "recycled": 4}})
    assert "4 worker slots, 10 restarts (crashed 6, hung 0, recycled 4)" in text
    assert "14" not in text


def test_terminal_says_stop_disk_full_collection_errors_and_timeout():
    text = _render({
        "stopped_by": "SIGTERM", "interrupted": ["t.py::test_p[x/y]"],
        "disk_full": ["disk full at /r/reproducer.log: No space left on device"],
        "output_dropped_bytes": 1234,
        "collection_errors": [{"nodeid": "t_bad.py", "message": "ImportError: [bold] x"}],
        "collection_error_count": 1,
        "timeout": {"seconds": 300.0, "from": "default", "text": "per-test timeout 300 s"}})
    assert "stopped by SIGTERM" in text and "t.py::test_p[x/y]" in text
    assert "DISK FULL: disk full at /r/reproducer.log" in text and "1234 bytes" in text
    assert "1 collection error" in text and "t_bad.py: ImportError: [bold] x" in text
    assert "per-test timeout 300 s" in text


def test_run_dir_reads_a_stopped_summary(tmp_path):
    """The new summary.json keys read back through RunDir (typed), unknown ones ignored."""
    (tmp_path / "summary.json").write_text(json.dumps({
        "tests_run": 1, "stopped_by": "SIGHUP", "no_tests_reason": None,
        "timeout": {"seconds": None, "from": "off", "text": "x"}, "disk_full": ["d"],
        "output_dropped_bytes": 5, "interrupted": ["t::a"]}))
    s = RunDir(tmp_path).summary()
    assert s is not None
    assert (s.stopped_by, s.disk_full, s.interrupted) == ("SIGHUP", ["d"], ["t::a"])


# --- the redaction shortcut the pump relies on ---------------------------------------------------

_SECRETISH = ["ghp_" + "a" * 36, "AKIA" + "B" * 16, "https://u:p@h", "TOKEN=x", "--password=y",
              "--api-key z", "Authorization: Bearer q", "hf_" + "c" * 30, "sk-" + "d" * 20,
              "xoxb-1234567890", "-----BEGIN RSA PRIVATE KEY-----", "npm_" + "e" * 36]


@pytest.mark.parametrize("secret", _SECRETISH)
def test_secret_hint_finds_every_secret_shape(secret):
    from faulthunt.redact import SECRET_HINT, _redact_text_fully

    text = f"some output {secret} more"
    assert _redact_text_fully(text) != text and SECRET_HINT.search(text)


def test_secret_hint_is_a_superset_of_the_patterns():
    """Whatever the full redaction changes, the shortcut's scan finds (so it never skips one)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from faulthunt.redact import SECRET_HINT, _redact_text_fully

    pieces = st.sampled_from([*_SECRETISH, "=", ":", "//", "@", "-", "_", " ", "\n", "a", "Z",
                              "token", "KEY", "Authorization", "ghp", "eyJ", "x" * 12])

    @settings(max_examples=2000, deadline=None)
    @given(st.lists(pieces, max_size=12).map("".join))
    def check(text: str) -> None:
        if _redact_text_fully(text) != text:
            assert SECRET_HINT.search(text), text

    check()


def test_ledger_modes_match_the_ledger():
    from faulthunt.ledger import MODES
    from faulthunt.stress.defaults import LEDGER_MODES

    assert tuple(LEDGER_MODES) == tuple(MODES)


# --- the hang watchdog (faulthunt.supervise): one thread for every test of a process ------------

def test_hang_watchdog_one_thread_fires_only_when_not_cancelled():
    import threading

    from faulthunt.recorder import HangWatchdog

    fired: list[str] = []
    before = threading.active_count()
    for i in range(500):  # a test each: armed and cancelled without a thread each
        dog = HangWatchdog(30.0, lambda i=i: fired.append(f"t{i}"))
        dog.start()
        dog.cancel()
    assert threading.active_count() <= before + 1 and fired == []
    done = threading.Event()
    HangWatchdog(0.05, lambda: (fired.append("hung"), done.set())).start()
    assert done.wait(10) and fired == ["hung"]


@pytest.mark.parametrize(("argv", "pytest_args"), [
    (["-n", "2", "-p", "no:randomly", "tests/"], ("-p", "no:randomly", "tests/")),
    (["tests/", "--lf", "-m", "not slow"], ("-m", "not slow", "tests/", "--lf")),
    (["--deselect=a.py::t[1]", "t.py"], ("--deselect", "a.py::t[1]", "t.py")),
    (["t.py", "--", "-p", "no:y"], ("t.py", "-p", "no:y")),
])
def test_cli_keeps_pytest_option_values_with_their_option(argv, pytest_args):
    """`faulthunt stress -p no:randomly tests/` once reached pytest as `no:randomly tests/ -p`."""
    from faulthunt.cli import build_parser
    from faulthunt.cli.stress import options

    args, extra = build_parser().parse_known_args(["stress", *argv])
    args.extra = extra
    assert options(args).pytest_args == pytest_args


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["pytest.toml", "pyproject.toml", "pytest.ini", "tox.ini", "setup.cfg"]),
       text=st.text(st.characters(codec="utf-8"), max_size=200) | st.builds(
           lambda key, value: f"[{key}]\ntimeout = {value}\naddopts = --timeout {value}\n",
           st.sampled_from(["pytest", "tool.pytest", "tool.pytest.ini_options", "tool:pytest"]),
           st.text(max_size=12)),
       addopts=st.text(max_size=40))
def test_suite_timeout_on_any_config_text(tmp_path, name, text, addopts):
    """Whatever a configuration file or PYTEST_ADDOPTS holds: a timeout, none, or a UsageError
    that says which setting is not a number; never another exception."""
    (tmp_path / name).write_text(text, encoding="utf-8")
    try:
        got = suite_timeout(tmp_path, (), {"PYTEST_ADDOPTS": addopts})
    except UsageError as exc:
        assert "not a finite number of seconds" in exc.message
    else:
        assert got is None or (isinstance(got[0], str) and isinstance(got[1], float))
