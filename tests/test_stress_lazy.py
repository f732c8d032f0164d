"""What a CPU-only stress worker no longer pays for (issue 16), and that nothing recorded is lost.

- without CUPTI the ledger's file, its mapping and the compiled flush thread wait for the first
  record; the set-up notes are then written first, with the times they were made; a worker
  killed after that record keeps it;
- the CUPTI probe imports neither the CUPTI source nor cupti-python when cupti-python is not
  installed or no driver library loads, and says the same as the full probe;
- the child-process watch imports multiprocessing only when the tests do, and a poll of a
  worker without children reads no /proc file (one waitid).

Work is counted, never timed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from faulthunt import context
from faulthunt.children import ChildWatch, has_children


def _py(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("FAULTHUNT_")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=full,
                          capture_output=True, text=True, timeout=120, check=False)


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_bytes().rstrip(b"\0").decode().splitlines()]


LAZY = """
    import json, os, sys, threading
    from pathlib import Path
    from faulthunt import ledger
    d = Path(sys.argv[1])
    h = ledger.install(d, "auto", quiet=True)
    threads = len(os.listdir("/proc/self/task"))
    state = {"plan_cupti": h.plan.cupti, "files": sorted(p.name for p in d.glob("*")),
             "imported": sorted(m for m in ("faulthunt.ledger.cupti_source",
                                            "faulthunt.ledger.writer", "faulthunt.ledger.native",
                                            "faulthunt.records.ledger") if m in sys.modules),
             "threads": threads}
    state["opened"] = h.writer.opened  # makes the writer, not its file
    if sys.argv[2] != "none":
        from faulthunt.records.ledger import KIND_DEVICE
        h.writer.alloc("numba", 0x7000, 256, KIND_DEVICE)
        state["opened_after"] = h.writer.opened
        state["threads_after"] = len(os.listdir("/proc/self/task"))
    print(json.dumps(state), flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), 9)
"""


@pytest.fixture
def no_cupti() -> None:
    if ledger_cupti_problem() is None:
        pytest.skip("CUPTI is usable here: the ledger's file is made at once")


def ledger_cupti_problem() -> str | None:
    from faulthunt.ledger import cupti_problem

    return cupti_problem()


def test_ledger_without_cupti_makes_no_file_until_a_record(tmp_path, no_cupti):
    got = _py(LAZY, str(tmp_path / "ledger"), "none")
    assert got.returncode == 0, got.stderr
    state = json.loads(got.stdout)
    assert state["plan_cupti"] is False and state["opened"] is False
    assert state["files"] == []  # no file, so no mapping and no flush thread
    # neither the probe nor the install imported the CUPTI source, the writer or the library
    assert state["imported"] == []
    assert not list((tmp_path / "ledger").glob("*.jsonl"))  # at exit either


def test_first_record_makes_the_file_with_the_set_up_notes_first(tmp_path, no_cupti):
    got = _py(LAZY, str(tmp_path / "ledger"), "alloc")
    assert got.returncode == 0, got.stderr
    state = json.loads(got.stdout)
    assert state["opened_after"] is True
    [path] = (tmp_path / "ledger").glob("*.jsonl")
    recs = _lines(path)
    assert [r["event"] for r in recs] == ["note", "note", "note", "alloc"]
    assert recs[0]["message"].startswith("ledger opened") and isinstance(recs[0]["t_mono"], float)
    assert recs[1]["message"].startswith("ledger route: ")
    assert "CUPTI unavailable" in recs[2]["message"] and "pip install" in recs[2]["message"]
    # every record keeps the time it was made: the plan's note (at install), the route's (when
    # the writer was made), then the allocation, which made the file (its opening note is the
    # file's first line, with the clocks read together)
    assert recs[2]["t"] <= recs[1]["t"] <= recs[3]["t"] <= recs[0]["t"]
    assert all(r["pid"] == int(path.stem) for r in recs)
    assert recs[3]["address"] == 0x7000 and recs[3]["size"] == 256


def test_a_killed_worker_keeps_its_first_record(tmp_path, no_cupti):
    got = _py(LAZY, str(tmp_path / "ledger"), "kill")
    assert got.returncode == -signal.SIGKILL
    [path] = (tmp_path / "ledger").glob("*.jsonl")
    recs = _lines(path)  # nothing closed the file: the reserve past the last line reads as NULs
    assert [r["event"] for r in recs] == ["note", "note", "note", "alloc"]
    from faulthunt.ledger.reader import load_ledger

    pl = load_ledger(tmp_path / "ledger").pid(int(path.stem))
    assert pl is not None


def test_a_forked_child_of_a_lazy_writer_writes_its_own_pid(tmp_path):
    from faulthunt.ledger.writer import LedgerWriter
    from faulthunt.records.ledger import KIND_DEVICE

    w = LedgerWriter(tmp_path, lazy=True)
    w.note_when_open("set-up")
    pid = os.fork()
    if pid == 0:  # the child records: its own file, its own pid, without the parent's notes
        try:
            w.alloc("numba", 0x10, 16, KIND_DEVICE)
            w.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    w.close()
    assert [p.name for p in tmp_path.glob("*.jsonl")] == [f"{pid}.jsonl"]
    recs = _lines(tmp_path / f"{pid}.jsonl")
    assert [r["event"] for r in recs] == ["note", "alloc"] and recs[1]["pid"] == pid


def test_a_lazy_writer_that_cannot_make_its_file_drops_and_never_raises(tmp_path, capsys):
    from faulthunt.ledger.writer import LedgerWriter
    from faulthunt.records.ledger import KIND_DEVICE

    blocker = tmp_path / "file"
    blocker.write_text("")
    w = LedgerWriter(blocker / "ledger", lazy=True)  # a directory under a file: mkdir fails
    w.alloc("numba", 0x10, 16, KIND_DEVICE)
    w.alloc("numba", 0x20, 16, KIND_DEVICE)
    assert w.dropped == 2 and not w.opened
    assert capsys.readouterr().err.count("records are being lost") == 1
    w.close()


def test_notes_of_an_open_writer_are_written_at_once(tmp_path):
    from faulthunt.ledger.writer import LedgerWriter

    w = LedgerWriter(tmp_path)
    w.note_when_open("now", arrays=False)
    w.close()
    recs = _lines(tmp_path / f"{os.getpid()}.jsonl")
    assert recs[1]["message"] == "now" and recs[1]["arrays"] is False


# the CUPTI probe -----------------------------------------------------------------------------

PROBE = """
    import json, sys
    from faulthunt.ledger import cupti_problem
    find = (lambda name: None) if sys.argv[1] == "absent" else (lambda name: object())
    driver = lambda: "no CUDA driver library here (test)"
    got = cupti_problem(find=find, driver=driver)
    print(json.dumps([got, "faulthunt.ledger.cupti_source" in sys.modules]))
"""


def test_probe_without_cupti_python_says_what_the_full_probe_says():
    from faulthunt.ledger import NOT_INSTALLED

    got, imported = json.loads(_py(PROBE, "absent").stdout)
    assert got == NOT_INSTALLED and imported is False
    try:
        import cupti  # noqa: F401
    except ImportError:
        from faulthunt.ledger.cupti_source import problem

        assert problem() == NOT_INSTALLED  # the same words either way


def test_probe_without_a_driver_library_imports_nothing_of_cupti():
    got, imported = json.loads(_py(PROBE, "present").stdout)
    assert got == "no CUDA driver library here (test)" and imported is False


def test_driver_problem_names_the_library_when_it_does_not_load(monkeypatch):
    import ctypes

    from faulthunt.ledger import _driver_problem

    def refuse(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", refuse)
    got = _driver_problem()
    assert got is not None and "libcuda.so.1" in got and "driver" in got


# the child-process watch ---------------------------------------------------------------------

HAS = """
    import json, os, subprocess, sys
    from faulthunt.children import has_children
    out = [has_children()]
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    out.append(has_children())
    proc.wait()  # reaped by Popen: gone
    out.append(has_children())
    pid = os.fork()
    if pid == 0:
        os._exit(3)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    out.append(has_children())  # a zombie still counts
    out.append(os.waitpid(pid, 0)[1] >> 8)  # and waitid left it to its owner, status intact
    out.append(has_children())
    print(json.dumps(out))
"""


def test_has_children_sees_running_and_unreaped_children_and_reaps_nothing():
    got = _py(HAS)  # a fresh process: the test process may have children of its own
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == [False, True, False, True, 3, False]


def test_a_child_started_by_another_thread_counts():
    procs: list[subprocess.Popen] = []
    t = threading.Thread(target=lambda: procs.append(subprocess.Popen(["sleep", "5"])))
    t.start()
    t.join()
    try:
        assert has_children() is True
    finally:
        procs[0].kill()
        procs[0].wait()


NO_READ = """
    import json, os, subprocess
    from faulthunt import context
    from faulthunt.children import ChildWatch
    watch = ChildWatch(lambda rec: None, worker="gw0", pid=os.getpid(), poll_s=0)
    reads = []
    real = watch._own.children
    watch._own.children = lambda: reads.append(1) or real()
    context.set_current("t.py::test_a", "t.py::test_a")
    watch.poll_once()
    out = [len(reads)]
    proc = subprocess.Popen(["sleep", "5"])
    watch.poll_once()
    out.append(len(reads))
    proc.kill()
    proc.wait()
    print(json.dumps(out))
"""


def test_a_poll_without_children_reads_no_proc_file():
    got = _py(NO_READ)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == [0, 1]


def test_a_poll_still_records_a_child_python_did_not_start():
    got: list = []
    watch = ChildWatch(got.append, worker="gw0", pid=os.getpid(), poll_s=0)
    proc = subprocess.Popen(["sleep", "5"])  # Popen is not wrapped here: only the poll can see it
    context.set_current("t.py::test_b", "t.py::test_b")
    try:
        watch.poll_once()
    finally:
        context.set_current(None, None)
        proc.kill()
        proc.wait()
    # (this process's other children, left by earlier tests or plugins, are recorded too)
    mine = [r for r in got if r["child_pid"] == proc.pid]
    assert [(r["how"], r["nodeid"]) for r in mine] == [("poll", "t.py::test_b")]


def test_a_child_polled_before_its_exec_is_recorded_again_under_its_new_name(monkeypatch):
    # a poll between a shell's fork and its exec sees the shell's name; the next poll the real one
    import faulthunt.children as children

    got: list = []
    watch = ChildWatch(got.append, worker="gw0", pid=os.getpid(), poll_s=0)
    proc = subprocess.Popen(["sleep", "5"])
    names = iter(["sh", "sleep", "sleep", "sleep"])
    monkeypatch.setattr(children, "proc_name", lambda pid: next(names) if pid == proc.pid else None)
    context.set_current("t.py::test_c", "t.py::test_c")
    try:
        watch.poll_once()
        watch.poll_once()
        watch.poll_once()  # renamed once: recorded once more, not once a poll
    finally:
        context.set_current(None, None)
        proc.kill()
        proc.wait()
    mine = [r for r in got if r["child_pid"] == proc.pid]  # not this process's other children
    assert [(r["how"], r["name"]) for r in mine] == [("poll", "sh"), ("exec", "sleep")]


MP = """
    import json, os, sys
    from faulthunt import context
    from faulthunt.children import ChildWatch
    got = []
    watch = ChildWatch(got.append, worker="gw0", pid=os.getpid(), poll_s=0)
    watch.install()
    before = "multiprocessing" in sys.modules
    import multiprocessing
    context.set_current("t.py::test_mp", "t.py::test_mp")
    p = multiprocessing.get_context("fork").Process(target=int)
    p.start()
    p.join()
    watch.uninstall()
    print(json.dumps([before, [(r["child_pid"] == p.pid, r["how"], r["nodeid"]) for r in got]]))
"""


def test_multiprocessing_is_hooked_when_the_tests_import_it():
    got = _py(MP)
    assert got.returncode == 0, got.stderr
    before, recs = json.loads(got.stdout)
    assert before is False  # installing the watch did not import it
    assert [True, "multiprocessing", "t.py::test_mp"] in recs


def test_uninstall_removes_the_import_hook():
    import sys as _sys

    watch = ChildWatch(lambda rec: None, worker="gw0", pid=os.getpid(), poll_s=0)
    watch.install()
    hooks = watch._hooks
    watch.uninstall()
    assert hooks not in _sys.meta_path


def test_the_engine_names_the_guard_variable_of_the_guard_package():
    from faulthunt.guard.config import GUARD_ENV
    from faulthunt.stress import defaults

    assert defaults.GUARD_ENV == GUARD_ENV


def test_stress_without_guard_options_does_not_import_the_guard_package(tmp_path):
    import argparse

    from faulthunt.cli import stress as cli_stress

    parser = argparse.ArgumentParser()
    cli_stress.add_arguments(parser)
    code = """
        import argparse, json, sys
        from faulthunt.cli import stress as s
        p = argparse.ArgumentParser(); s.add_arguments(p)
        opts = s.options(p.parse_args(["-n", "2", "tests/"]))
        print(json.dumps([opts.guard, [m for m in sys.modules if m.startswith("faulthunt.guard")]]))
    """
    got = _py(code)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == [None, []]
    assert cli_stress.options(parser.parse_args(["--guard", "5", "t/"])).guard is not None


NVML = """
    import json, sys
    from faulthunt import nvml
    try:
        with nvml.session():
            got = "ok"
    except nvml.NvmlUnavailable as exc:
        got = [str(exc), exc.missing]
    print(json.dumps([got, "pynvml" in sys.modules]))
"""


def test_nvml_without_its_library_says_what_pynvml_says_without_importing_it():
    import importlib.util

    if importlib.util.find_spec("pynvml") is None:
        pytest.skip("nvidia-ml-py is not installed here")
    from faulthunt import nvml

    if nvml._library_loads():
        pytest.skip("NVML's library loads here")
    (message, missing), imported = json.loads(_py(NVML).stdout)
    assert imported is False and missing is False
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # the words the full path gives
        assert message.startswith(f"NVML unavailable: {exc}")


def test_the_ledger_names_the_note_event_of_the_record_module():
    from faulthunt import ledger
    from faulthunt.records.ledger import EVENT_NOTE

    assert ledger.EVENT_NOTE == EVENT_NOTE


REFINE = """
    import json, sys, types
    from pathlib import Path
    from faulthunt import ledger
    d = Path(sys.argv[1])
    h = ledger.install(d, "auto", quiet=True)
    before = "faulthunt.ledger.writer" in sys.modules
    started = []
    fake = types.ModuleType("faulthunt.ledger.torch_trace")
    class Src:
        name = "torch"
        def stop(self): pass
    def start(writer):
        started.append(writer)
        return Src()
    fake.start = start
    sys.modules["faulthunt.ledger.torch_trace"] = fake
    sys.modules["torch"] = types.ModuleType("torch")
    ledger.active().hooks.add("torch", lambda m: None)  # already imported: runs now
    h.arm("torch")  # as the import hook does when torch is imported
    print(json.dumps([before, len(started), h.source_names]), flush=True)
"""


def test_a_refinement_makes_the_writer_and_its_note_makes_the_file(tmp_path, no_cupti):
    got = _py(REFINE, str(tmp_path / "ledger"))
    assert got.returncode == 0, got.stderr
    before, started, names = json.loads(got.stdout)
    assert before is False and started == 1 and names == ["torch"]
    [path] = (tmp_path / "ledger").glob("*.jsonl")
    msgs = [r["message"] for r in _lines(path)]
    assert msgs[0].startswith("ledger opened") and msgs[1].startswith("ledger route: ")
    assert "CUPTI unavailable" in msgs[2] and msgs[3] == "torch refinement installed"


CLOCK = """
    import json, os, subprocess, sys, time
    from faulthunt import children, context
    got = []
    watch = children.ChildWatch(got.append, worker="gw0", pid=os.getpid(), poll_s=0.02)
    watch._start_poller()  # the poller alone: no creation hooks, only a poll can see the child
    route = "compiled" if watch._clock is not None else "python"
    context.set_current("t.py::test_c", "t.py::test_c")
    proc = subprocess.Popen(["sleep", "5"])
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    context.set_current(None, None)
    proc.kill()
    proc.wait()
    watch.uninstall()
    watch._thread.join(10)
    print(json.dumps([route, [(r["child_pid"] == proc.pid, r["how"], r["nodeid"]) for r in got],
                      watch._thread.is_alive(), watch.polling]))
"""


@pytest.mark.parametrize("wake", ["compiled", "python"])
def test_the_poller_sees_a_child_python_did_not_start_on_either_clock(wake):
    from faulthunt.children import WAKE_ENV, wake_library

    if wake == "compiled" and wake_library() is None:
        pytest.skip("the compiled clock is not built here (no compiler at install)")
    got = _py(CLOCK, env={WAKE_ENV: "python"} if wake == "python" else None)
    assert got.returncode == 0, got.stderr
    route, recs, alive, polling = json.loads(got.stdout)
    assert route == wake
    assert recs[:1] == [[True, "poll", "t.py::test_c"]]
    assert alive is False  # uninstall ends the poller's thread on both clocks
    assert polling == "every 0.02s during a test"


def test_the_compiled_clock_answers_as_waitid_does():
    from faulthunt.children import wake_library

    lib = wake_library()
    if lib is None:
        pytest.skip("the compiled clock is not built here")
    got = _py("""
        import json, subprocess, sys
        from faulthunt.children import has_children, wake_library
        lib = wake_library()
        out = [lib.cw_has_children(), has_children()]
        p = subprocess.Popen(["sleep", "5"])
        out += [lib.cw_has_children(), has_children()]
        p.kill(); p.wait()
        out += [lib.cw_has_children(), has_children()]
        print(json.dumps(out))
    """)
    assert json.loads(got.stdout) == [0, False, 1, True, 0, False]


def test_a_missing_or_foreign_clock_library_means_python(monkeypatch):
    import sys
    import types

    import faulthunt
    from faulthunt import children

    monkeypatch.delattr(faulthunt, "_childwake", raising=False)  # as in a process that never imported it
    monkeypatch.setitem(sys.modules, "faulthunt._childwake", None)  # not built: ImportError
    assert children.wake_library() is None
    foreign = types.ModuleType("faulthunt._childwake")
    foreign.cw_abi = lambda: children._WAKE_ABI + 1  # type: ignore[attr-defined]
    monkeypatch.setattr(faulthunt, "_childwake", foreign, raising=False)  # another build
    assert children.wake_library() is None
    monkeypatch.setattr(faulthunt, "_childwake", types.ModuleType("x"))  # no cw_abi
    assert children.wake_library() is None
