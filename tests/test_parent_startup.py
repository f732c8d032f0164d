"""The `faulthunt stress` parent's start-up: what it does not import or compile until needed,
and that the shortcuts taken for it give the same answers as the full work."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from faulthunt import redact
from faulthunt.rundir import _mkstemp

#: modules a healthy stress run's parent never needs (each was part of its start-up)
NOT_AT_START = ("tempfile", "socket", "difflib", "glob", "csv", "shutil",
                "faulthunt.kernlog.parse", "faulthunt.kernlog.catalog")


def _fresh(code: str) -> object:
    """What ``code`` (which sets ``out``) leaves in a new interpreter, decoded from JSON."""
    prog = f"import json\n{code}\nprint(json.dumps(out))"
    done = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                          check=True, timeout=120)
    return json.loads(done.stdout)


def test_the_parent_imports_leave_out_what_a_run_without_xids_does_not_use() -> None:
    loaded = _fresh(
        "import sys\n"
        "import faulthunt.cli.stress, faulthunt.stress.options, faulthunt.stress.collect\n"
        "import faulthunt.stress.analyse, faulthunt.kernlog.sources, faulthunt.identity\n"
        "import faulthunt.summary, faulthunt.rundir\n"
        f"out = [m for m in {NOT_AT_START!r} if m in sys.modules]")
    assert loaded == []


def test_the_kernel_log_sources_make_no_dataclass() -> None:
    """`faulthunt xid cursor` and the stress parent's kernel-log cursor need neither dataclasses
    nor inspect (42 M instructions to import; a frozen dataclass ~4 M more to make)."""
    loaded = _fresh("import sys\nimport faulthunt.kernlog.sources\n"
                    "out = [m for m in ('dataclasses', 'inspect', 'msgspec') if m in sys.modules]")
    assert loaded == []


def test_redact_compiles_its_patterns_only_for_text_that_may_hold_a_secret() -> None:
    compiled = _fresh(
        "from faulthunt import redact\n"
        "lazy = [v for v in vars(redact).values() if isinstance(v, redact._Lazy)]\n"
        "redact.redact_env({'PATH': '/usr/bin:/bin', 'HOME': '/root', 'LANG': 'C.UTF-8'})\n"
        "redact.redact_argv(['-n', '8', 'tests/test_x.py::test_a[1-2]'])\n"
        "redact.redact_text('test_x.py::test_a PASSED  [ 50%]')\n"
        "redact.redact_text(\"pip install 'cupti-python==13.*' (e.g. 13.* for CUDA 13)\")\n"
        "out = [len(lazy), sum('rx' in vars(v) for v in lazy)]\n"
        "redact.redact_env({'TOX_TESTENV_PASSENV': 'X'})\n"
        "out.append(sum('rx' in vars(v) for v in lazy))")
    # names and text holding no secret word compile nothing (the pip line hits SECRET_HINT's
    # `\w=`); a name with "pass" in it takes is_secret_name's pattern
    assert compiled == [9, 0, 1]


#: fragments every redaction pattern starts with or needs, and near misses, so that random
#: text often reaches each pattern and each shortcut
_PIECES = ["=", "==", "?", "&", "://", "u:p@", "Authorization: ", "authoriZation=", "Bearer ",
           "bearer ", "--token ", "--api_key=", "-password=", "TOKEN", "token", "PAT", "_pat",
           "dsn", "_PWD", "pass", "MY_KEY", "KEY", "secret", "session_id", "ghp_", "gho_",
           "github_pat_", "glpat-", "xoxb-", "hf_", "sk-", "rk_live_", "sk_test_", "ya29.", "eyJ",
           "AIza", "npm_", "pypi-AgE", "dckr_pat_", "AKIA", "ASIA", "-----BEGIN RSA PRIVATE KEY-----",
           "hooks.slack.com/services/", "...", "\u2026", "\u212a", "\u017f", "'", '"', "\\", " ",
           "\n", ".", "-", "_", "abcdefghijklmnopqrstuvwxyz0123456789", "ABCDEFGHIJKLMNOPQRST"]


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=4), max_size=14).map("".join))
def test_redact_shortcuts_give_the_full_answer(text: str) -> None:
    """Each pattern is skipped only where it cannot match: the same text as running them all."""
    assert redact.redact_text(text) == redact._redact_text_fully(text)
    assert redact.redact_value(text) == redact._redact_value_fully(text)
    assert redact.is_secret_name(text) == redact._is_secret_name_fully(text)


@pytest.mark.parametrize("name", [
    "PAT", "pat", "GH_PAT", "PATH", "SENTRY_DSN", "DB_PWD", "PWD", "PGPASSFILE", "MY_PASS",
    "API_KEY", "apikey", "X_KEY", "KEYTIMEOUT", "MONKEY", "SESSIONID", "SESSION_ID", "JWT_X",
    "SSH_AUTH_SOCK", "COOKIE", "SIGNATURE", "WEBHOOK_URL", "CREDENTIALS", "BEARER", "HOME",
    "LANG", "dsn\n", "PAT\n", "x_pat\n\n", "\u212aEY", "A_\u212aEY", "\u017fECRET"])
def test_is_secret_name_shortcut_gives_the_full_answer(name: str) -> None:
    assert redact.is_secret_name(name) == redact._is_secret_name_fully(name)
    assert redact.is_secret_name(name + "=") == redact._is_secret_name_fully(name + "=")


@pytest.mark.parametrize("value", [
    "/usr/bin:/bin", "ghp_" + "a" * 36, "https://user:pw@host/x", "https://h/x?token=abc&b=1",
    "Authorization: Bearer abcdefghijklmnopqrstu", "--api-key=abc", "--password hunter2",
    "sk-" + "b" * 30, "AKIA" + "A" * 16, "eyJ" + "a" * 12 + "." + "b" * 12 + "." + "c" * 12,
    "-----BEGIN RSA PRIVATE KEY-----abc", "plain words", "a=b", "rs=0:di=01;34",
    "\u212aey=1 toKen=x",  # KELVIN SIGN: (?i) matches it as k, in the hint as in the patterns
])
def test_redact_value_shortcut_gives_the_full_answer(value: str) -> None:
    assert redact.redact_value(value) == redact._redact_value_fully(value)
    assert redact._takes_value(value) == ("=" not in value and bool(
        redact._SECRET_OPTION.rx.fullmatch(value + " x")))


def test_the_marker_is_the_parser_s() -> None:
    from faulthunt.kernlog import parse, sources

    assert sources.MARKER == parse.MARKER


def test_mkstemp_makes_a_new_private_file_and_skips_taken_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    taken = tmp_path / (".x." + (b"\0" * 6).hex())
    taken.write_text("keep")
    draws = iter([b"\0" * 6, b"\1" * 6])
    monkeypatch.setattr(os, "urandom", lambda n: next(draws))
    fd, name = _mkstemp(tmp_path, ".x.")
    os.close(fd)
    assert name == str(tmp_path / (".x." + (b"\1" * 6).hex()))
    assert stat.S_IMODE(os.stat(name).st_mode) == 0o600
    assert taken.read_text() == "keep"


KMSG_SAMPLES = [b"6,1,2,-;hello\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:06.0\n",
                b"006,0012,00034,-,caller=T1;msg; with ;semicolons\n", b"garbage", b"12,5,7,c;",
                b"4,9,9,-;caf\xc3\xa9 \xff\n", b"99999,1,1,-;m", b"3,1,1,;m\n", b""]


@pytest.mark.parametrize("data", KMSG_SAMPLES)
def test_a_snapshot_line_is_the_record_s_line(data: bytes) -> None:
    from faulthunt.kernlog.sources import kmsg_line, parse_kmsg_record

    rec = parse_kmsg_record(data)
    assert kmsg_line(data) == (rec.line if rec is not None else None)


def test_the_cursor_follows_the_last_record_that_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    from faulthunt.kernlog.sources import KmsgSource

    src = KmsgSource("/nonexistent/kmsg")
    for raw, seq in ((KMSG_SAMPLES, 2), ([b"6,41,1,-;a", b"junk"], 42), ([b"junk"], 0), ([], 0)):
        monkeypatch.setattr(src, "_read_all_raw", lambda raw=raw: list(raw))
        assert src.cursor().seq == seq


#: kmsg-like records: headers with plain and odd numbers (leading zeros, too long, not ASCII),
#: flags with a ",caller=" tail or a newline, messages with dictionaries and bad UTF-8
_KMSG_HEAD_PARTS = st.sampled_from(["0", "6", "12", "006", "99999", "123456", "\u0661", "", "x", "-"])
_KMSG_NUMBERS = st.sampled_from(["0", "1", "41", "42", "0042", "9" * 20, "9" * 21, "\u0664", "", "a"])
_KMSG_FLAGS = st.sampled_from(["-", "c", "", "-,caller=T1", "+\n", "-;x", ",", "\u00e9"])
_KMSG_TAILS = st.sampled_from(["msg", "", "m\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:06.0",
                               "NVRM: Xid (PCI:0000:3b:00): 31, pid=7", "a;b,c", "\n", "x\n\ny"])


@st.composite
def _kmsg_records(draw: st.DrawFn) -> bytes:
    fields = [draw(_KMSG_HEAD_PARTS), draw(_KMSG_NUMBERS), draw(_KMSG_NUMBERS), draw(_KMSG_FLAGS)]
    text = ",".join(fields[:draw(st.integers(1, 4))]) + draw(st.sampled_from([";", "", ";;"]))
    data = (text + draw(_KMSG_TAILS)).encode()
    return data + draw(st.sampled_from([b"", b"\xff", b"\xe2\x82", b"\xe2\x82\n z"]))


@settings(max_examples=400, deadline=None)
@given(_kmsg_records())
def test_a_snapshot_line_is_the_record_s_line_for_any_header(data: bytes) -> None:
    from faulthunt.kernlog.sources import kmsg_line, parse_kmsg_record

    rec = parse_kmsg_record(data)
    assert kmsg_line(data) == (rec.line if rec is not None else None)


@settings(max_examples=400, deadline=None)
@given(_kmsg_records(), st.integers(0, 50))
def test_a_record_skipped_by_its_header_is_one_select_after_drops(data: bytes, start: int) -> None:
    """read_since skips, unparsed, what its header shows to be before the cursor: only records
    that would not parse or that select_after would drop."""
    from faulthunt.kernlog.sources import _seq_below, parse_kmsg_record

    if _seq_below(data, start):
        rec = parse_kmsg_record(data)
        assert rec is None or rec.seq < start


def test_read_since_from_a_fresh_descriptor_parses_only_what_follows_the_cursor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from faulthunt.kernlog import sources
    from faulthunt.kernlog.sources import Cursor, KmsgSource

    raw = [f"6,{seq},{seq * 10},-;m{seq}\n".encode() for seq in range(5, 40)] + [b"junk"]
    parsed: list[bytes] = []

    def parse(data: bytes | str) -> object:
        parsed.append(data if isinstance(data, bytes) else data.encode())
        return real(data)

    real = sources.parse_kmsg_record
    src = KmsgSource("/nonexistent/kmsg")
    monkeypatch.setattr(src, "_open", lambda: -1)
    monkeypatch.setattr(src, "_drain_raw", lambda fd: (list(raw), 0))
    monkeypatch.setattr(sources, "parse_kmsg_record", parse)
    monkeypatch.setattr(sources.os, "close", lambda fd: None)
    res = src.read_since(Cursor(source="kmsg", seq=37))
    assert [line.split(";")[1] for line in res.lines] == ["m37", "m38", "m39"]
    assert (res.lost, res.cursor.seq) == (0, 40)
    assert parsed == raw[-4:]  # 37, 38, 39 and the record that is not one


def test_a_healthy_run_s_output_takes_no_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of PytestOutput's patterns is behind a plain test of what it needs: the lines of a
    passing run's output reach none of them (none is compiled); the totals are still read."""
    import types

    from faulthunt.stress import output

    used: list[str] = []

    def record(name: str) -> object:
        def call(pattern: str, line: str) -> object:
            used.append(pattern)
            return getattr(__import__("re"), name)(pattern, line)
        return call

    monkeypatch.setattr(output, "re", types.SimpleNamespace(match=record("match"),
                                                            search=record("search")))
    out = output.PytestOutput()
    for line in ["bringing up nodes...", "faulthunt ledger: auto: CUPTI unavailable (pip install "
                 "'cupti-python==13.*')", "." * 80 + " [ 14%]", "550 passed in 9.80s"]:
        out.feed(line)
    assert used == [] and out.total is None
    out.feed("8 workers [550 items]")
    assert out.total == 550 and len(used) == 1


def test_the_run_s_collector_freeze_is_thawed_for_a_caller_in_the_same_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`faulthunt stress` freezes what start-up made; main() called in-process gives the caller
    its collector back as it was, the console script (the process ends after) keeps it frozen."""
    import gc

    from faulthunt import cli
    from faulthunt.cli import stress as stress_cli

    frozen_during: list[int] = []

    def fake_run(args: object, opts: object, once_started: object = None) -> int:
        assert callable(once_started)
        once_started()  # what the run does once pytest is running
        frozen_during.append(gc.get_freeze_count())
        return 0

    monkeypatch.setattr(stress_cli, "_run", fake_run)
    before = gc.get_freeze_count()
    try:
        assert cli.main(["stress", "--xid-source", "none", "t.py"]) == 0
        assert gc.get_freeze_count() == before
        assert cli.main(["stress", "--xid-source", "none", "t.py"], exiting=True) == 0
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
    assert frozen_during[0] > before


def test_the_console_script_starts_with_the_collector_off_and_runs_commands_with_it_on(
        tmp_path: Path) -> None:
    """console_main turns the cyclic collector off while faulthunt starts; every command runs
    with it on: stress from the moment pytest has started, the others from their start."""
    code = (
        "import gc, json, sys\n"
        "from faulthunt import cli\n"
        "from faulthunt.cli import stress as stress_cli\n"
        "seen = {}\n"
        "def fake_run(args, opts, once_started=None):\n"
        "    seen['stress before pytest'] = gc.isenabled()\n"
        "    once_started()\n"
        "    seen['stress after'] = gc.isenabled()\n"
        "    return 0\n"
        "stress_cli._run = fake_run\n"
        "import atexit\n"
        "atexit.register(lambda: print(json.dumps(seen)))\n"
        "sys.argv = ['faulthunt'] + sys.argv[1:]\n"
        "cli.console_main()\n")
    def seen(*argv: str) -> dict[str, bool]:
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        return json.loads(done.stdout.strip().splitlines()[-1])
    assert seen("stress", "--xid-source", "none", "t.py") == {
        "stress before pytest": False, "stress after": True}
    other = ("import gc, sys\nfrom faulthunt import cli\nfrom faulthunt.cli import xid\n"
             "def run(args):\n    print('collector', gc.isenabled())\n    return 0\n"
             "xid.run = run\nsys.argv = ['faulthunt', 'xid', 'parse', 'k.log']\n"
             "cli.console_main()\n")
    done = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.stdout.strip() == "collector True", done.stdout + done.stderr


def test_a_stop_before_pytest_starts_still_settles_the_start(tmp_path: Path) -> None:
    """A stop signal that came before pytest started: nothing runs, and the steps done while
    pytest starts are still done (``once_started`` turns the collector back on)."""
    import signal

    from faulthunt.stress import StressOptions
    from faulthunt.stress.collect import _Stopper, collect
    from faulthunt.stress.options import check

    (tmp_path / "test_a.py").write_text("def test_a(): pass\n")
    plan = check(StressOptions(pytest_args=("test_a.py",), cwd=tmp_path, xid_source="none",
                               run_dir=tmp_path / "run"), lambda _msg: None)
    stopper = _Stopper()
    stopper.early = signal.SIGINT
    settled: list[bool] = []
    got = collect(plan, stopper, warn=lambda _msg: None, warnings=[],
                  once_started=lambda: settled.append(True))
    assert settled == [True]
    assert got.pytest_status is None and got.stopped_by == signal.SIGINT


def test_the_records_decoders_compile_no_forward_references() -> None:
    """The records the parent decodes carry their annotations as types, not strings: msgspec
    evaluates a string annotation through typing.ForwardRef, which compiles it (~10 M
    instructions of the parent's decoders for ~180 fields)."""
    made = _fresh(
        "import typing\n"
        "refs = []\n"
        "real = typing.ForwardRef.__init__\n"
        "def spy(self, arg, *a, **k):\n    refs.append(arg)\n    real(self, arg, *a, **k)\n"
        "import msgspec\n"
        "typing.ForwardRef.__init__ = spy\n"
        "from faulthunt.records import codec, documents, events\n"
        "for kind in (*events.WORKER_EVENT_TYPES, *events.CONTROLLER_EVENT_TYPES):\n"
        "    codec.decoder(kind)\n"
        "for doc in (documents.RunInfo, documents.Summary, documents.Identity):\n"
        "    codec.decoder(doc)\n"
        "out = refs")
    assert made == []


#: what the parent does not import before pytest starts: the analysis (imported once pytest
#: runs), and dataclasses with inspect, ast, dis and tokenize (each was on the way to pytest's
#: start; since TestSpan is a Struct, the analysis does not import them either: see below)
NOT_BEFORE_PYTEST = ("faulthunt.stress.analyse", "faulthunt.summary", "faulthunt.records.run",
                     "dataclasses", "inspect", "ast", "dis", "tokenize")


def test_what_the_parent_imports_before_pytest_starts_leaves_out_the_analysis() -> None:
    loaded = _fresh(
        "import sys\n"
        "from faulthunt.leanimport import msgspec_without_typing_extensions\n"
        "msgspec_without_typing_extensions()  # as the console script does\n"
        "import faulthunt.cli.stress, faulthunt.stress.options, faulthunt.stress.collect\n"
        "import faulthunt.stress.child, faulthunt.stress.output, faulthunt.kernlog.sources\n"
        "import faulthunt.rundir, faulthunt.records.codec, faulthunt.redact\n"
        f"out = [m for m in {NOT_BEFORE_PYTEST!r} if m in sys.modules]")
    assert loaded == []


def test_the_parents_analysis_imports_no_dataclasses() -> None:
    """The analysis after pytest's end (spans, summary, the stress result) makes no dataclass:
    the dataclasses module brings inspect, ast, dis and tokenize, and making a dataclass
    compiles its methods, ~35 M instructions of the parent's run."""
    loaded = _fresh(
        "import sys\n"
        "from faulthunt.leanimport import msgspec_without_typing_extensions\n"
        "msgspec_without_typing_extensions()  # as the console script does\n"
        "import faulthunt.cli.stress, faulthunt.stress.collect, faulthunt.stress.analyse\n"
        "import faulthunt.summary, faulthunt.records.run\n"
        "from faulthunt.records.run import TestSpan\n"
        "span = TestSpan('t.py::a', 't.py::a', 'gw0', 1, 0.0, 0.0)\n"
        "import msgspec\n"
        "assert msgspec.structs.replace(span, outcome='failed').outcome == 'failed'\n"
        "out = [m for m in ('dataclasses', 'inspect', 'ast', 'dis', 'tokenize') "
        "if m in sys.modules]")
    assert loaded == []


def test_pytest_starts_after_the_cursor_and_before_the_rest(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel-log cursor is taken before pytest starts; the log written down and followed,
    the analysis's imports and the caller's ``once_started`` come after it started."""
    from faulthunt.stress import StressOptions, collect, run_stress

    order: list[str] = []
    watch = collect.KernelLogWatch
    monkeypatch.setattr(watch, "mark", lambda self, m=watch.mark: (order.append("cursor"),
                                                                   m(self))[1])
    monkeypatch.setattr(watch, "follow", lambda self, f=watch.follow: (order.append("follow"),
                                                                       f(self))[1])

    class Child(collect.PytestChild):
        def __init__(self, *args: object) -> None:
            order.append("pytest started")
            super().__init__(*args)

    monkeypatch.setattr(collect, "PytestChild", Child)

    def started() -> None:
        order.append("once_started")
        assert "faulthunt.stress.analyse" in sys.modules

    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    result = run_stress(StressOptions(pytest_args=("test_one.py", "-p", "no:cacheprovider"),
                                      workers=0, count=1, cwd=tmp_path, quiet=True,
                                      xid_source="none", run_dir=tmp_path / "run"),
                        once_started=started)
    assert result.exit_status == 0 and result.summary["tests_run"] == 1
    assert order == ["cursor", "pytest started", "follow", "once_started"]
