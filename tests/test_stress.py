"""faulthunt stress: the pure pieces, then real `faulthunt stress` subprocess runs on tiny suites."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from faulthunt.errors import UsageError
from faulthunt.rundir import read_jsonl, read_jsonl_dir
from faulthunt.stress import (Progress, StressOptions, build_env, build_pytest_argv,
                              exit_status_for, parse_gpus, parse_total)


def test_argv_plain():
    argv = build_pytest_argv(StressOptions(pytest_args=("tests/", "-x"), workers=8, count=50,
                                           keyword="cuda", maxfail=3, timeout=30), python="py")
    assert argv[:10] == ["py", "-m", "pytest", "-p", "faulthunt", "-p", "xdist", "-p", "repeat",
                         "-p"]
    joined = " ".join(argv)
    for part in ("-n 8", "--count 50", "-k cuda", "--maxfail 3", "--timeout 30",
                 "--timeout-method thread", "--max-worker-restart 1000"):
        assert part in joined
    assert argv[-2:] == ["tests/", "-x"]


def test_argv_gpus_round_robin_specs():
    argv = build_pytest_argv(StressOptions(workers=3, gpus=("0", "1")), python="py")
    specs = [argv[i + 1] for i, a in enumerate(argv) if a == "--tx"]
    assert specs == ["popen//env:CUDA_VISIBLE_DEVICES=0", "popen//env:CUDA_VISIBLE_DEVICES=1",
                     "popen//env:CUDA_VISIBLE_DEVICES=0"]
    assert "-n" not in argv and "--dist" in argv


def test_argv_no_xdist():
    argv = build_pytest_argv(StressOptions(workers=0), python="py")
    assert "-n" not in argv and "--max-worker-restart" not in argv


@pytest.mark.parametrize(("spec", "expected"), [
    ("0,1", ("0", "1")), (" 2 ", ("2",)), ("all", ("0", "1", "2")),
    ("GPU-f443d679-49ad-ee2e-df61-53505888c8f0,1", ("GPU-f443d679-49ad-ee2e-df61-53505888c8f0", "1")),
])
def test_parse_gpus(spec, expected):
    assert parse_gpus(spec, device_count=lambda: 3) == expected


@pytest.mark.parametrize("spec", ["", ",", "zero", "all"])
def test_parse_gpus_rejects(spec):
    with pytest.raises(UsageError) as info:
        parse_gpus(spec, device_count=lambda: 0)
    assert info.value.fix


def test_env():
    env = build_env(StressOptions(gpus=("0",), ledger="off"), Path("/r"), base={"A": "1"})
    assert env["FAULTHUNT_RUN_DIR"] == str(Path("/r").resolve())
    assert (env["CUDA_LAUNCH_BLOCKING"], env["PYTHONFAULTHANDLER"]) == ("1", "1")
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["FAULTHUNT_LEDGER"] == "off"
    assert "CUDA_LAUNCH_BLOCKING" not in build_env(StressOptions(launch_blocking=False), Path("/r"),
                                                   base={})


@pytest.mark.parametrize(("pytest_status", "found", "ours"), [
    (0, False, 0), (0, True, 1), (1, False, 1), (2, True, 1), (2, False, 130), (5, False, 2),
    (4, False, 2), (3, False, 3), (-9, False, 1),
])
def test_exit_status(pytest_status, found, ours):
    assert exit_status_for(pytest_status, found) == ours


@pytest.mark.parametrize(("line", "total"), [
    ("8 workers [400 items]", 400), ("collected 12 items", 12), ("collected 1 item", 1),
    ("nothing here", None),
])
def test_parse_total(line, total):
    assert parse_total(line) == total


def test_progress_reads_incrementally_and_waits_for_whole_lines(tmp_path):
    (tmp_path / "events").mkdir()
    f = tmp_path / "events" / "gw0-1.jsonl"
    f.write_text('{"event": "start", "nodeid": "t::a"}\n'
                 '{"event": "end", "nodeid": "t::a", "outcome": "failed"}\n'
                 '{"event": "end", "nodeid": "t::b", "ou')
    p = Progress(tmp_path)
    p.poll()
    assert (p.started, p.done) == (1, 1)
    with open(f, "a") as fh:
        fh.write('tcome": "hung"}\n')
    p.poll()
    assert p.outcomes["hung"] == 1 and "hung 1" in p.line()


# --- real runs -----------------------------------------------------------------------------------

def _stress(args: list[str], cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("FAULTHUNT_RUN_DIR", None)
    return subprocess.run([sys.executable, "-m", "faulthunt", "stress", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.slow
def test_stress_gpus_pinning_kept_across_restart(tmp_path):
    _write(tmp_path / "test_pin.py", """
        import os, signal
        from pathlib import Path
        def test_kill_once():
            # O_EXCL: two workers running a repeat of this test at once must not both die
            flag = Path(__file__).with_name("killed")
            try:
                fd = os.open(flag, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                return
            os.write(fd, os.environ["CUDA_VISIBLE_DEVICES"].encode())
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
        def test_a(): pass
        def test_b(): pass
    """)
    run = tmp_path / "run"
    proc = _stress(["--gpus", "0,1", "--count", "4", "--xid-source", "none", "-q",
                    "--run-dir", str(run), "test_pin.py", "--", "-p", "no:cacheprovider"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    killed_dev = (tmp_path / "killed").read_text()
    workers = [r for r in read_jsonl_dir(run / "events").records if r["event"] == "worker"]
    per_device = Counter(r["cuda_visible_devices"] for r in workers)
    other = "1" if killed_dev == "0" else "0"
    # two slots; the replacement of the SIGKILLed worker came back on the same device
    assert per_device == {killed_dev: 2, other: 1}
    starts = [r for r in read_jsonl_dir(run / "events").records if r["event"] == "start"]
    assert {r["device"] for r in starts} == {"0", "1"}
    summary = json.loads((run / "summary.json").read_text())
    (crash,) = summary["failures"]
    assert (crash["outcome"], crash["signal"], crash["device"]) == ("crashed", 9, killed_dev)
    assert crash["base_nodeid"] == "test_pin.py::test_kill_once"
    assert {d["device"] for d in summary["by_device"]} == {"0", "1"}
    env = json.loads((run / "env.json").read_text())
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


@pytest.mark.slow
def test_stress_maxfail_keyword_and_passthrough(tmp_path):
    _write(tmp_path / "test_mk.py", """
        import pytest
        def test_good(): pass
        def test_bad(): assert 0, "planted"
        def test_other(): pass
        @pytest.mark.excluded
        def test_good_but_marked(): pass
    """)
    _write(tmp_path / "pytest.ini", """
        [pytest]
        markers = excluded: left out with -m
    """)
    run = tmp_path / "run"
    proc = _stress(["-n", "2", "--count", "3", "-k", "good or bad", "--maxfail", "1",
                    "--xid-source", "none", "--run-dir", str(run), "test_mk.py",
                    "--", "-m", "not excluded"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "test_mk.py::test_bad" in proc.stdout and str(run) in proc.stdout
    summary = json.loads((run / "summary.json").read_text())
    bases = {r["base_nodeid"] for r in summary["by_test"]}
    assert bases <= {"test_mk.py::test_good", "test_mk.py::test_bad"}   # -k and -m both applied
    assert any(f["base_nodeid"] == "test_mk.py::test_bad" and f["outcome"] == "failed"
               for f in summary["failures"])
    assert summary["stopped_early"]
    run_json = json.loads((run / "run.json").read_text())
    assert run_json["pytest_argv"][-2:] == ["-m", "not excluded"]
    assert run_json["exit_status"] == 1
    assert (run / "reproducer.log").read_text().count("test_bad") >= 1
    for key in ("tests_run", "failures", "xids", "by_test"):
        assert key in summary


@pytest.mark.slow
def test_stress_all_passed_exit_zero_and_latest(tmp_path):
    _write(tmp_path / "test_ok.py", "def test_ok(): pass\n")
    proc = _stress(["-n", "0", "--count", "2", "--xid-source", "none", "-q", "test_ok.py"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    latest = tmp_path / ".faulthunt" / "runs" / "latest"
    summary = json.loads((latest / "summary.json").read_text())
    assert (summary["tests_run"], summary["passed"], summary["failures"]) == (2, 2, [])


@pytest.mark.slow
def test_stress_xid_from_file_source_attributed_to_test_and_worker(tmp_path):
    # Simulation of the driver: the test itself appends a real-format Xid 31 line (H200 text,
    # tests/data/h200/dmesg.txt) carrying its own pid and the kernel-style monotonic timestamp,
    # then fails with the CUDA error the fault would raise.
    log = tmp_path / "kern.log"
    log.write_text("")
    _write(tmp_path / "test_xid.py", f"""
        import os, time
        def test_clean(): pass
        def test_wild_write():
            line = ("[%12.6f] NVRM: Xid (PCI:0000:00:06): 31, pid=%d, name=python, channel "
                    "0x0000000a, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 "
                    "faulted @ 0x7faf_e7e00000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"
                    % (time.monotonic(), os.getpid()))
            with open({str(log)!r}, "a") as fh:
                fh.write(line + "\\n")
            time.sleep(0.6)  # let the follower see it while the test runs
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
    """)
    run = tmp_path / "run"
    proc = _stress(["-n", "2", "--xid-source", f"file:{log}", "-q", "--run-dir", str(run),
                    "test_xid.py"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (x,) = read_jsonl(run / "xid.jsonl").records
    events = read_jsonl_dir(run / "events").records
    start = next(r for r in events if r["event"] == "start" and "wild" in r["nodeid"])
    assert (x["xid"], x["pid"], x["nodeid"], x["worker"]) == (
        31, start["pid"], "test_xid.py::test_wild_write", start["worker"])
    assert x["attributed_by"].startswith("pid+")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["xids"][0]["nodeid"] == "test_xid.py::test_wild_write"
    assert (run / "kmsg_added.txt").read_text().count("Xid") == 1
    # the kernel-log source's ReadResult fields reach summary.json: nothing lost here, and it says so
    kl = summary["kernel_log"]
    assert (kl["source"], kl["lost"], kl["unparsed"]) == ("file", 0, 0)
    assert isinstance(kl["lost_unknown"], bool) and isinstance(kl["warnings"], list)


@pytest.mark.slow
def test_stress_ctrl_c_keeps_results(tmp_path):
    import signal
    import time

    _write(tmp_path / "test_slow.py", """
        import time
        def test_fast(): pass
        def test_slow():
            time.sleep(60)  # the stop comes first however loaded the machine; bounded all the same
    """)
    run = tmp_path / "run"
    env = dict(os.environ)
    env.pop("FAULTHUNT_RUN_DIR", None)
    proc = subprocess.Popen([sys.executable, "-m", "faulthunt", "stress", "-n", "0",
                             "--xid-source", "none", "-q", "--run-dir", str(run), "test_slow.py"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        starts = [r for r in read_jsonl_dir(run / "events").records
                  if r.get("event") == "start" and r["nodeid"].endswith("::test_slow")]
        if starts:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)   # only to faulthunt: it stops pytest's process group once
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["exit_status"] == 130
    ends = {r["nodeid"]: r["outcome"] for r in read_jsonl_dir(run / "events").records
            if r["event"] == "end"}
    assert ends["test_slow.py::test_fast"] == "passed"
    # cut short by the stop, and said so (not "passed")
    assert ends["test_slow.py::test_slow"] == "interrupted"
    assert summary["stopped_by"] == "SIGINT"
    assert (run / "run.json").exists() and json.loads((run / "run.json").read_text())["ended"]


def test_kernel_log_watch_against_the_contract(tmp_path, monkeypatch):
    """KernelLogWatch drives a source exactly as contracts.md specifies (cursor -> snapshot ->
    Follower.start ... Follower.stop -> snapshot). The source here is a test double written to
    that contract, so this runs whether or not faulthunt.kernlog is in the build."""
    import dataclasses
    import types

    from faulthunt.stress import KernelLogWatch

    calls: list[str] = []

    @dataclasses.dataclass(frozen=True)
    class Ev:
        seq: int
        raw: str

        def to_json(self):
            return {"xid": 31, "pid": 7, "seq": self.seq, "ts": 1.0, "raw": self.raw}

    class Cursor:
        def to_json(self):
            return {"seq": 41}

    class Source:
        name = "double"

        def cursor(self):
            calls.append("cursor")
            return Cursor()

        def snapshot(self):
            calls.append("snapshot")
            return "line\n"

    class Follower:
        def __init__(self, source, cursor, on_event, interval=0.25):
            self.on_event = on_event

        def start(self):
            calls.append("start")
            self.on_event(Ev(42, "NVRM: Xid (PCI:0000:00:06): 31, pid=7, ..."))

        def stop(self):
            calls.append("stop")
            return types.SimpleNamespace(lines=("NVRM: Xid ...",), lost=2, lost_unknown=True,
                                         warnings=("kmsg: EPIPE at seq 40",),
                                         unparsed=("NVRM: Xid (PCI:0000:00:06): garbage",),
                                         events=(Ev(42, "NVRM: Xid (PCI:0000:00:06): 31, pid=7, ..."),))

    mod = types.ModuleType("faulthunt.kernlog.sources")
    mod.open_source = lambda spec, warn=None: Source()
    mod.Follower = Follower
    pkg = types.ModuleType("faulthunt.kernlog")
    pkg.sources = mod
    monkeypatch.setitem(sys.modules, "faulthunt.kernlog", pkg)
    monkeypatch.setitem(sys.modules, "faulthunt.kernlog.sources", mod)
    live, warned = [], []
    watch = KernelLogWatch(tmp_path, mod.open_source("auto"), warned.append, live.append)
    watch.mark()  # before pytest starts
    assert calls == ["cursor"] and not (tmp_path / "kmsg_cursor.json").exists()
    watch.follow()  # while it starts
    got = watch.stop()
    assert calls == ["cursor", "snapshot", "start", "stop", "snapshot"]
    assert json.loads((tmp_path / "kmsg_cursor.json").read_text()) == {"source": "double",
                                                                        "cursor": {"seq": 41}}
    assert (tmp_path / "kmsg_before.txt").read_text() == "line\n"
    assert (tmp_path / "kmsg_added.txt").read_text() == "NVRM: Xid ...\n"
    assert live[0]["seq"] == 42 and "t_seen_mono" in live[0]
    # the final list carries the time the live follower first saw each line
    assert got[0]["t_seen_mono"] == live[0]["t_seen_mono"]
    # what the source could not read is kept for summary.json (kernel_log) and said at once
    assert watch.status == {"source": "double", "error": None, "lost": 2, "lost_unknown": True,
                            "warnings": ["kmsg: EPIPE at seq 40"], "unparsed": 1,
                            "unparsed_sample": ["NVRM: Xid (PCI:0000:00:06): garbage"]}
    said = "\n".join(warned)
    for phrase in ("2 records were overwritten", "cannot count them", "EPIPE at seq 40",
                   "could not be parsed"):
        assert phrase in said


@pytest.mark.parametrize(("status", "expect"), [
    ({"source": "kmsg", "error": None, "lost": 0, "lost_unknown": False, "warnings": []}, []),
    (None, []),
    ({"source": None, "error": "kernel log not followed (--xid-source none)"},
     ["kernel log: not followed: kernel log not followed (--xid-source none) (no Xids were captured)"]),
    ({"source": "kmsg", "lost": 3}, ["kernel log: 3 record(s) LOST (overwritten before read): "
                                     "Xids among them are missing from this run"]),
    ({"source": "dmesg", "lost_unknown": True},
     ["kernel log: records may have been lost (this source cannot count them)"]),
    ({"source": "kmsg", "unparsed": 2}, ["kernel log: 2 Xid line(s) not parsed (see kmsg_added.txt)"]),
    ({"source": "kmsg", "warnings": ["a", "b", "c", "d", "e"]},
     ["kernel log warning: a", "kernel log warning: b", "kernel log warning: c",
      "kernel log: 2 more warning(s) in summary.json kernel_log"]),
])
def test_kernel_log_lines(status, expect):
    from faulthunt.report.terminal import kernel_log_lines

    assert kernel_log_lines(status) == expect


def test_render_says_why_nothing_ran(tmp_path):
    """A run where nothing ran says why, in pytest's words carried by the summary (the log is
    not read again)."""
    import io

    from rich.console import Console

    from faulthunt.report.terminal import render_summary

    buf = io.StringIO()
    render_summary({"tests_run": 0, "pytest_exit_status": 4, "by_test": [], "xids": [],
                    "failures": [], "no_tests_reason": "pytest: unrecognized arguments: --bogus"},
                   tmp_path, Console(file=buf, width=400))
    text = buf.getvalue()
    assert "no test ran: pytest: unrecognized arguments: --bogus" in text
    assert "reproducer.log" in text


def test_stress_typo_option_is_a_usage_error_before_anything_is_created(tmp_path, monkeypatch,
                                                                      capsys):
    from faulthunt.cli import main

    _write(tmp_path / "test_ok.py", "def test_ok(): pass\n")
    monkeypatch.chdir(tmp_path)
    assert main(["stress", "--cuont", "3"]) == 2
    err = capsys.readouterr().err
    assert "unknown option --cuont (did you mean --count?)" in err and "after `--`" in err
    assert not (tmp_path / ".faulthunt").exists()


def test_stress_own_options_list_is_the_parsers():
    import argparse

    from faulthunt.cli import stress

    parser = argparse.ArgumentParser()
    stress.add_arguments(parser)
    longs = {o for a in parser._actions if a.help != argparse.SUPPRESS
             for o in a.option_strings if o.startswith("--") and o != "--help"}
    assert longs == set(stress._OWN_OPTIONS)


def test_ledger_cupti_unavailable_is_said_and_falls_back_to_auto():
    from faulthunt.stress.options import check_ledger

    said: list[str] = []
    opts = check_ledger(StressOptions(ledger="cupti"), said.append,
                        cupti_problem=lambda: "cupti-python is not installed")
    assert opts.ledger == "auto"
    assert said == ["--ledger cupti: CUPTI is unavailable (cupti-python is not installed); falling "
                    "back to --ledger auto (framework allocations only, no launch records)"]
    kept = check_ledger(StressOptions(ledger="cupti"), said.append, cupti_problem=lambda: None)
    assert kept.ledger == "cupti" and len(said) == 1
    assert check_ledger(StressOptions(ledger="off"), said.append).ledger == "off"


def test_stress_no_xdist_hang_says_what_never_ran(tmp_path):
    """-n 0: the first hang ends the one pytest process; the runs it cut off are said."""
    _write(tmp_path / "test_h.py", """
        import time
        def test_a(): pass
        def test_hang(): time.sleep(120)
        def test_b(): pass
        def test_c(): pass
    """)
    proc = _stress(["-n", "0", "--timeout", "1", "--count", "2", "-p", "no:randomly",
                    "--run-dir", "run", "--xid-source", "none", "test_h.py"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["outcomes"] == {"passed": 2, "hung": 1} and summary["workers"]["hung"] == 1
    assert summary["stopped_early"] == (
        "the hang of test_h.py::test_hang[1-2] ended the single pytest process (-n 0): 5 of 8 "
        "collected test runs never ran (use -n 1 or more: a hung worker is replaced and the rest run)")
    assert "5 of 8 collected test runs never ran" in proc.stdout


def test_a_full_disk_while_pytest_starts_loses_the_log_s_files_not_its_follower(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel log is written down and followed once pytest runs: a full disk then costs
    kmsg_cursor.json and kmsg_before.txt, said in disk_full, and the follower still starts."""
    import types

    from faulthunt.kernlog import sources
    from faulthunt.rundir import DiskFullError
    from faulthunt.stress import collect

    started: list[object] = []

    class Follower:
        def __init__(self, source: object, cursor: object, on_event: object) -> None:
            started.append(cursor)

        def start(self) -> None:
            pass

    def full(path: Path, *args: object, **kwargs: object) -> None:
        raise DiskFullError(f"disk full at {path}: No space left on device")

    cursor = types.SimpleNamespace(to_json=lambda: {"seq": 1})
    source = types.SimpleNamespace(name="double", cursor=lambda: cursor, snapshot=lambda: "x\n")
    monkeypatch.setattr(sources, "Follower", Follower)
    monkeypatch.setattr(collect, "write_json_atomic", full)
    watch = collect.KernelLogWatch(tmp_path, source, lambda msg: None, lambda rec: None)
    watch.mark()
    watch.follow()
    assert started == [cursor] and watch.status["source"] == "double"
    assert watch.disk_full == [f"disk full at {tmp_path / 'kmsg_cursor.json'}: No space left on "
                               "device"]


def test_an_error_while_pytest_starts_leaves_no_pytest_running(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What runs while pytest starts runs after its exec: an error there stops pytest's whole
    process group before it reaches the caller."""
    from faulthunt.stress import StressOptions, collect, run_stress
    from faulthunt.stress.child import group_members

    children: list[collect.PytestChild] = []

    class Child(collect.PytestChild):
        def __init__(self, *args: object) -> None:
            super().__init__(*args)
            children.append(self)

    def broken() -> None:
        raise RuntimeError("broken while pytest starts")

    monkeypatch.setattr(collect, "PytestChild", Child)
    (tmp_path / "test_slow.py").write_text("import time\n\ndef test_slow():\n    time.sleep(60)\n")
    with pytest.raises(RuntimeError, match="broken while pytest starts"):
        run_stress(StressOptions(pytest_args=("test_slow.py", "-p", "no:cacheprovider"),
                                 workers=0, count=1, cwd=tmp_path, quiet=True, xid_source="none",
                                 run_dir=tmp_path / "run"), once_started=broken)
    [child] = children
    assert child.wait(0) and child.stop_signal is not None
    assert group_members(child.pgid) == []


# --- which plugins need -p ----------------------------------------------------------------------

_ALL_PLUGINS = frozenset({"faulthunt", "xdist", "repeat", "timeout"})


def _all_installed(dists: tuple[str, ...]) -> dict[str, str]:
    return {dist: "1.0" for dist in dists}


def test_argv_names_only_the_plugins_pytest_would_not_load_itself():
    opts = StressOptions(workers=2, count=3)
    assert build_pytest_argv(opts, python="py", autoloaded=_ALL_PLUGINS)[:4] == [
        "py", "-m", "pytest", "-n"]
    argv = build_pytest_argv(opts, python="py", autoloaded={"xdist", "repeat"})
    assert argv[:7] == ["py", "-m", "pytest", "-p", "faulthunt", "-p", "timeout"]
    assert "xdist" not in argv and "repeat" not in argv


@pytest.fixture
def no_autoload_env(monkeypatch):
    for name in ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(name, raising=False)


def test_autoloaded_are_the_installed_distributions(tmp_path, no_autoload_env):
    from faulthunt.stress.options import autoloaded_plugins

    assert autoloaded_plugins(StressOptions(), tmp_path, _all_installed) == _ALL_PLUGINS
    # faulthunt run from a source tree (no distribution, so no entry point): -p faulthunt
    only_deps = lambda dists: {d: "1" for d in dists if d != "faulthunt"}  # noqa: E731
    assert autoloaded_plugins(StressOptions(), tmp_path, only_deps) == _ALL_PLUGINS - {"faulthunt"}


@pytest.mark.parametrize("where", ["env", "args", "addopts", "ini", "parent-toml", "-c", "-cFILE",
                                   "run-env", "pytest-toml", "path-dir", "addopts-c"])
def test_every_plugin_is_named_when_autoloading_may_be_off(tmp_path, no_autoload_env,
                                                            monkeypatch, where):
    from faulthunt.stress.options import autoloaded_plugins

    suite = tmp_path / "suite"
    suite.mkdir()
    args: tuple[str, ...] = ("test_a.py",)
    env = None
    if where == "env":
        monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    elif where == "args":
        args += ("--disable-plugin-autoload",)
    elif where == "addopts":
        monkeypatch.setenv("PYTEST_ADDOPTS", "-q --disable-plugin-autoload")
    elif where == "ini":
        (suite / "pytest.ini").write_text("[pytest]\naddopts = --disable-plugin-autoload\n")
    elif where == "parent-toml":
        (tmp_path / "pyproject.toml").write_text(
            '[tool.pytest.ini_options]\naddopts = "--disable-plugin-autoload"\n')
    elif where in ("-c", "-cFILE"):
        (tmp_path / "ci.ini").write_text("[pytest]\naddopts = --disable-plugin-autoload\n")
        args += ("-c", "../ci.ini") if where == "-c" else ("-c../ci.ini",)
    elif where == "pytest-toml":  # pytest 9's own file
        (suite / "pytest.toml").write_text('[pytest]\naddopts = ["--disable-plugin-autoload"]\n')
    elif where == "path-dir":  # found from the test path, not from the directory of the run
        (suite / "inner").mkdir()
        (suite / "inner" / "tox.ini").write_text("[pytest]\naddopts = --disable-plugin-autoload\n")
        args = ("inner/test_a.py",)
    elif where == "addopts-c":
        (tmp_path / "ci.ini").write_text("[pytest]\naddopts = --disable-plugin-autoload\n")
        monkeypatch.setenv("PYTEST_ADDOPTS", f"-q -c {tmp_path / 'ci.ini'}")
    else:  # the run's own environment moves where Python finds packages
        env = {"PYTHONPATH": str(tmp_path)}
    opts = StressOptions(pytest_args=args, env=env)
    assert autoloaded_plugins(opts, suite, _all_installed) == frozenset()
    assert build_pytest_argv(opts, python="py", autoloaded=frozenset())[3:11] == [
        "-p", "faulthunt", "-p", "xdist", "-p", "repeat", "-p", "timeout"]


@pytest.mark.slow
@pytest.mark.parametrize("autoload", ["on", "off"])
def test_stress_records_with_and_without_plugin_autoloading(tmp_path, autoload):
    _write(tmp_path / "test_ok.py", """
        import pytest
        @pytest.mark.parametrize("x", ["a b", "x/y"])
        def test_ok(x): pass
        def test_bad(): assert 0
    """)
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items()
           if k not in ("FAULTHUNT_RUN_DIR", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS")}
    if autoload == "off":
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-n", "2", "--count", "2",
                           "--xid-source", "none", "-q", "--run-dir", str(run), "test_ok.py",
                           "--", "-p", "no:cacheprovider", "-p", "no:randomly"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    argv = json.loads((run / "run.json").read_text())["pytest_argv"]
    named = [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]
    if autoload == "off":
        assert named[:4] == ["faulthunt", "xdist", "repeat", "timeout"]
    else:  # this environment installs all four: pytest loads them from their entry points
        assert not {"faulthunt", "xdist", "repeat", "timeout"} & set(named)
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["tests_run"], summary["passed"]) == (6, 4)
    assert {f["base_nodeid"] for f in summary["failures"]} == {"test_ok.py::test_bad"}
    assert summary["timeout"]["seconds"] > 0  # pytest-timeout loaded either way


def test_plugins_left_to_autoloading_are_named_when_pytest_did_not_know_their_options():
    from faulthunt.stress.analyse import _unloaded_plugins

    said = _unloaded_plugins(["py", "-m", "pytest", "-p", "faulthunt", "-n", "2"])
    assert "pytest-xdist, pytest-repeat, pytest-timeout" in said and "faulthunt," not in said
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1" in said
    named = ["py", "-m", "pytest", "-p", "faulthunt", "-p", "xdist", "-p", "repeat", "-p",
             "timeout"]
    assert _unloaded_plugins(named) == ""


@pytest.mark.slow
def test_stress_says_why_pytest_did_not_know_the_plugins_options(tmp_path, monkeypatch):
    """Autoloading turned off where the check does not look (a sitecustomize here): pytest
    rejects -n and --timeout-method, and the reason says which plugins it did not load."""
    _write(tmp_path / "test_ok.py", "def test_ok(): pass\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if 'pytest' in sys.orig_argv:  # the stress run's `python -m pytest`, not its parent\n"
        "    os.environ['PYTEST_DISABLE_PLUGIN_AUTOLOAD'] = '1'\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("FAULTHUNT_RUN_DIR", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-n", "2", "--xid-source",
                           "none", "-q", "--run-dir", str(run), "test_ok.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    summary = json.loads((run / "summary.json").read_text())
    reason = summary["no_tests_reason"]
    assert "unrecognized arguments" in reason and "pytest did not load" in reason, reason
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1" in proc.stdout + proc.stderr
