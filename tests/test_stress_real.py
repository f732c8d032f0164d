"""Real `faulthunt stress` processes on tiny suites: stops by signal, full disks, runs where
nothing ran, bad options, run-directory refusal, parametrized ids with --count, secrets.

Each case failed on the main branch before this work (a hang, a traceback, orphans, a silent
run, or a missing message) and is checked here as a user would see it: exit status, the
terminal's words, and the run directory read back.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from faulthunt.rundir import RunDir, read_jsonl_dir

pytestmark = pytest.mark.slow

SLEEPERS = """
    import time
    def test_fast(): pass
    def test_sleeps_a():
        time.sleep(120)
    def test_sleeps_b():
        time.sleep(120)
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FAULTHUNT_RUN_DIR", None)
    return env


def _stress(args: list[str], cwd: Path, timeout: float = 180,
            preexec=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "faulthunt", "stress", *args], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec)


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def _wait_for_starts(run: Path, names: set[str], proc: subprocess.Popen,
                     limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        started = {r["nodeid"].split("::")[-1] for r in read_jsonl_dir(run / "events").records
                   if r.get("event") == "start"}
        if names <= started:
            return
        time.sleep(0.2)
    pytest.fail(f"tests {names} never started; faulthunt exited {proc.poll()}")


def _processes_of(run: Path) -> list[int]:
    """Live processes whose environment names this run directory (pytest and its workers)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("FAULTHUNT_RUN_DIR") == str(run.resolve()):
                out.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return out


# --- stops ---------------------------------------------------------------------------------------

def _stopped_run(tmp_path: Path, argv_prefix: list[str], send) -> tuple[int, str, Path]:
    _write(tmp_path / "test_sleepers.py", SLEEPERS)
    run = tmp_path / "run"
    proc = subprocess.Popen([*argv_prefix, sys.executable, "-m", "faulthunt", "stress", "-n", "2",
                             "--xid-source", "none", "--run-dir", str(run), "test_sleepers.py"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_starts(run, {"test_sleeps_a", "test_sleeps_b"}, proc)
        send(proc)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, run


def _assert_stopped(run: Path, out: str, signame: str, status: int) -> None:
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped_by"] == signame and summary["exit_status"] == status
    assert sorted(summary["interrupted"]) == ["test_sleepers.py::test_sleeps_a",
                                              "test_sleepers.py::test_sleeps_b"]
    assert summary["failures"] == []  # stopped is not failed: nothing for sanitize to chase
    assert f"stopped by {signame}" in out
    assert json.loads((run / "run.json").read_text())["exit_status"] == status
    assert _processes_of(run) == [], "pytest processes of the run survived it"


def test_sigterm_from_timeout_ends_like_ctrl_c(tmp_path):
    """`timeout -s TERM` (what CI timeouts send) passes SIGTERM to faulthunt: the workers are
    ended, the summary is written, no pytest process of the run survives."""
    rc, out, run = _stopped_run(tmp_path, ["timeout", "-s", "TERM", "600"],
                                lambda p: p.send_signal(signal.SIGTERM))
    assert rc == 143, out
    _assert_stopped(run, out, "SIGTERM", 143)


def test_sighup_ends_like_ctrl_c(tmp_path):
    rc, out, run = _stopped_run(tmp_path, [], lambda p: p.send_signal(signal.SIGHUP))
    assert rc == 129, out
    _assert_stopped(run, out, "SIGHUP", 129)


def test_default_timeout_reports_a_hang(tmp_path):
    """No --timeout: the default is in force (said on the terminal and in the summary); here the
    suite's own pytest.ini shortens it, which faulthunt keeps."""
    _write(tmp_path / "test_hang.py", """
        import time
        def test_hangs():
            time.sleep(600)
    """)
    _write(tmp_path / "pytest.ini", "[pytest]\ntimeout = 2\n")
    run = tmp_path / "run"
    proc = _stress(["-n", "1", "--xid-source", "none", "--run-dir", str(run), "test_hang.py"],
                   tmp_path, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert [f["outcome"] for f in summary["failures"]] == ["hung"]
    assert summary["timeout"] == {"seconds": 2.0, "from": "pytest.ini",
                                  "text": "per-test timeout 2 s (the suite's pytest.ini; "
                                          "--timeout 0 turns it off)"}
    assert "per-test timeout 2 s" in proc.stdout


# --- runs where nothing ran ----------------------------------------------------------------------

@pytest.mark.parametrize(("args", "status", "words"), [
    (["-k", "nothing_matches", "test_ok.py"], 2, "no tests ran"),
    (["test_ok.py", "--", "--bogus-flag"], 2, "unrecognized arguments: --bogus-flag"),
    (["-n", "0", "test_ok.py", "test_bad1.py", "test_bad2.py"], 1,
     "No module named 'no_such_module_1'"),
])
def test_nothing_ran_says_why_in_pytests_words(tmp_path, args, status, words):
    _write(tmp_path / "test_ok.py", "def test_a(): pass\ndef test_b(): pass\n")
    for i in (1, 2):
        _write(tmp_path / f"test_bad{i}.py", f"import no_such_module_{i}\ndef test_x(): pass\n")
    run = tmp_path / "run"
    proc = _stress(["--xid-source", "none", "--run-dir", str(run), *args], tmp_path)
    assert proc.returncode == status, proc.stdout + proc.stderr
    assert words in proc.stdout and "no ERROR line" not in proc.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tests_run"] == 0 and summary["no_tests_reason"].startswith("pytest")
    assert words in summary["no_tests_reason"] + json.dumps(summary["collection_errors"])


def test_collection_errors_are_failures_of_the_run(tmp_path):
    """Modules failing to import beside passing ones: not "2 passed" and exit 0."""
    _write(tmp_path / "test_ok.py", "def test_a(): pass\ndef test_b(): pass\n")
    for i in (1, 2, 3):
        _write(tmp_path / f"test_bad{i}.py", f"import no_such_module_{i}\ndef test_x(): pass\n")
    run = tmp_path / "run"
    proc = _stress(["-n", "2", "--xid-source", "none", "--run-dir", str(run), "."], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "3 collection errors" in proc.stdout
    assert "test_bad2.py: ModuleNotFoundError: No module named 'no_such_module_2'" in proc.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["tests_run"] == 2 and summary["collection_error_count"] == 3


# --- options checked before anything starts ------------------------------------------------------

@pytest.mark.parametrize(("args", "words"), [
    (["--xid-source", "bogus"], "unknown kernel-log source 'bogus'"),
    (["--ledger", "bogus"], "--ledger 'bogus' is not a ledger mode"),
    (["--timeout", "-1"], "--timeout must be a finite number >= 0 of seconds, not -1"),
    (["--timeout", "nan"], "--timeout must be a finite number >= 0 of seconds, not nan"),
    (["nope.py"], "test path 'nope.py' does not exist"),
    (["--xid-source", "file:/no/such/kern.log"], "cannot read /no/such/kern.log"),
])
def test_bad_options_refused_before_anything_starts(tmp_path, args, words):
    _write(tmp_path / "test_ok.py", "def test_a(): pass\n")
    proc = _stress(["-q", *args, "test_ok.py"], tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr and "fix:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / ".faulthunt").exists()  # no run directory, pytest never started


def test_gpu_index_checked_against_nvml(tmp_path):
    """With NVML seeing 2 GPUs (a stand-in pynvml on the path), --gpus 7 is refused."""
    fake = tmp_path / "fake"
    fake.mkdir()
    _write(fake / "pynvml.py", """
        def nvmlInit(): pass
        def nvmlShutdown(): pass
        def nvmlDeviceGetCount(): return 2
    """)
    _write(tmp_path / "test_ok.py", "def test_a(): pass\n")
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-q", "--gpus", "7",
                           "test_ok.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no GPU 7 on this machine (NVML sees 2: 0-1)" in proc.stderr


def test_run_dir_with_an_earlier_run_is_refused(tmp_path):
    _write(tmp_path / "test_ok.py", "def test_a(): pass\n")
    run = tmp_path / "run"
    first = _stress(["-n", "0", "-q", "--xid-source", "none", "--run-dir", str(run),
                     "test_ok.py"], tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    again = _stress(["-n", "0", "-q", "--xid-source", "none", "--run-dir", str(run),
                     "test_ok.py"], tmp_path, timeout=60)
    assert again.returncode == 2 and "already holds a run" in again.stderr
    assert RunDir(run).summary().tests_run == 1  # the first run is untouched


def test_parametrized_id_runs_count_times(tmp_path):
    _write(tmp_path / "test_mine.py", """
        import pytest
        @pytest.mark.parametrize("v", ["a b", "x/y", "[bold]"])
        def test_odd(v): pass
    """)
    run = tmp_path / "run"
    proc = _stress(["-n", "2", "--count", "3", "--xid-source", "none", "--run-dir", str(run),
                    "--", "test_mine.py::test_odd[a b]"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = RunDir(run).summary()
    assert summary.tests_run == 3
    assert [t.base_nodeid for t in summary.by_test] == ["test_mine.py::test_odd[a b]"]


# --- secrets -------------------------------------------------------------------------------------

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_secrets_not_written_to_the_log_or_run_json(tmp_path):
    _write(tmp_path / "conftest.py", """
        def pytest_addoption(parser):
            parser.addoption("--api-token")
    """)
    _write(tmp_path / "test_leak.py", f"""
        def test_prints_a_token():
            print("token {TOKEN} and https://user:hunter2pw@example.com/x")
            assert 0
    """)
    run = tmp_path / "run"
    proc = _stress(["-n", "0", "--xid-source", "none", "--run-dir", str(run), "test_leak.py",
                    "--", f"--api-token={TOKEN}"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    log = (run / "reproducer.log").read_text()
    assert "test_prints_a_token" in log and "<redacted>" in log
    for name in ("reproducer.log", "run.json"):
        text = (run / name).read_text()
        assert TOKEN not in text and "hunter2pw" not in text, name


# --- full disk, file size limit, memory ----------------------------------------------------------

BIG_OUTPUT = textwrap.dedent("""
    import sys
    def test_prints_4mb():
        line = "x" * 999 + "\\n"
        for _ in range(4000):
            sys.stdout.write(line)
""") + "".join(f"def test_after_{i}(): pass\n" for i in range(60))


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs here ({got.stderr.strip() or 'not root'}); "
                    "the ulimit -f case covers the same code")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _limit_file_size(limit: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def _assert_disk_full_ended(proc: subprocess.CompletedProcess[str], run: Path) -> None:
    said = proc.stdout + proc.stderr
    assert proc.returncode == 3, said
    assert "disk full at" in said and "Traceback" not in said
    # everything already recorded stays readable
    assert json.loads((run / "run.json").read_text())["kind"] == "stress"
    assert RunDir(run).spans() and not [p for p in RunDir(run).problems()
                                        if "torn" not in p.why]


def test_output_filling_the_disk_ends_with_a_message(tmp_path, small_disk):
    """pytest's output fills a 1 MiB disk: faulthunt keeps draining (pytest never blocks),
    the workers keep running without their records, and the run ends saying so."""
    _write(tmp_path / "test_big.py", BIG_OUTPUT)
    run = small_disk / "run"
    proc = _stress(["-n", "0", "--xid-source", "none", "--run-dir", str(run), "test_big.py",
                    "--", "-s"], tmp_path, timeout=240)
    _assert_disk_full_ended(proc, run)
    assert "reproducer.log" in proc.stdout and "bytes of pytest's output" in proc.stdout
    # the worker could not write all its events and said so; the test run was not crashed
    assert "events/main-" in proc.stdout and "INTERNALERROR" not in proc.stdout


def test_output_past_ulimit_f_ends_with_a_message(tmp_path):
    _write(tmp_path / "test_big.py", BIG_OUTPUT)
    run = tmp_path / "run"
    proc = _stress(["-n", "0", "--xid-source", "none", "--run-dir", str(run), "test_big.py",
                    "--", "-s"], tmp_path, timeout=240, preexec=_limit_file_size(256 * 1024))
    _assert_disk_full_ended(proc, run)
    assert "ulimit -f" in proc.stdout
    assert json.loads((run / "summary.json").read_text())["tests_run"] == 61


def test_disk_full_at_start_and_report_on_a_full_disk(tmp_path, small_disk):
    _write(tmp_path / "test_ok.py", "def test_a(): pass\n")
    run = small_disk / "run"
    ok = _stress(["-n", "0", "-q", "--xid-source", "none", "--run-dir", str(run), "test_ok.py"],
                 tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    with open(small_disk / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    report = subprocess.run([sys.executable, "-m", "faulthunt", "report", "--format", "all",
                             "--run", str(run)], cwd=tmp_path, env=_env(), capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 3 and "disk full at" in report.stderr, report.stderr
    assert "Traceback" not in report.stderr
    second = _stress(["-n", "0", "--xid-source", "none", "--run-dir", str(small_disk / "run2"),
                      "test_ok.py"], tmp_path, timeout=60)
    assert second.returncode == 3 and "disk full at" in second.stderr, second.stderr
    assert "Traceback" not in second.stderr
    assert RunDir(run).summary().tests_run == 1


def test_a_100mb_line_does_not_grow_faulthunt(tmp_path):
    """The parent reads pytest's output in bounded pieces: a 100 MB line costs it no more
    memory than a short one (it was 328 MB)."""
    _write(tmp_path / "test_line.py", """
        import sys
        def test_one_line():
            sys.stdout.write("y" * (100 * 1024 * 1024) + "\\n")
    """)
    run = tmp_path / "run"
    # VmHWM, not ru_maxrss: the latter carries over exec from the process that forked this one
    # (here the whole test session)
    code = ("import runpy, sys\n"
            "sys.argv = ['faulthunt'] + sys.argv[1:]\n"
            "try:\n    runpy.run_module('faulthunt', run_name='__main__')\n"
            "finally:\n"
            "    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')]\n"
            "    print('MAXRSS', hwm[0].split()[1], file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, "stress", "-n", "0", "-q", "--xid-source",
                           "none", "--ledger", "off", "--run-dir", str(run), "test_line.py",
                           "--", "-s"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    maxrss_kib = int(proc.stderr.rsplit("MAXRSS", 1)[1].split()[0])
    assert maxrss_kib < 150 * 1024, f"faulthunt grew to {maxrss_kib // 1024} MiB"
    assert (run / "reproducer.log").stat().st_size > 100 * 1024 * 1024
