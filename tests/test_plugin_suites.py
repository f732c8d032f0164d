"""The plugin on what real suites bring: unittest classes, doctests, plugin items, subtests,
child processes, workers dying between tests, modules that do not import, huge output, and the
suite's own plugins (pytest-rerunfailures, -randomly, -benchmark, -cov).

Everything runs real pytest (pytester subprocesses, xdist where it matters); kills are real
SIGKILLs and aborts. Each case failed on the main branch before this file (issues 13, 18, 19).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from faulthunt.records.events import ChildProcess, TestStart
from faulthunt.rundir import RunDir
from faulthunt.summary import attribute_xids, exception_line, summarize_run

BASE = ("-p", "faulthunt", "-p", "no:cacheprovider")


@pytest.fixture
def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = pytester.path / "run"
    monkeypatch.setenv("FAULTHUNT_RUN_DIR", str(path))
    return path


def _ends(run: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for ev in RunDir(run).worker_events():
        if getattr(ev, "event", None) is None and type(ev).__name__ == "TestEnd":
            pass
    for path in sorted((run / "events").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["event"] == "end":
                out.setdefault(rec["nodeid"], []).append(rec)
    return out


def _starts(run: Path) -> dict[str, str]:
    return {e.nodeid: e.base_nodeid for e in RunDir(run).worker_events()
            if isinstance(e, TestStart)}


UNITTEST = """
    import unittest
    CALLS = []

    class TestU(unittest.TestCase):
        @classmethod
        def setUpClass(cls):
            CALLS.append("class")

        def setUp(self):
            self.value = 1
            CALLS.append("setUp")

        def tearDown(self):
            CALLS.append("tearDown")

        def test_a(self):
            self.value += 1          # fresh instance per run: always 2
            self.assertEqual(self.value, 2)

        def test_b(self):
            pass

    def test_z_calls():
        # after TestU's runs (file order): one class set-up, a set-up and tear-down per run
        assert CALLS.count("class") == 1, CALLS
        assert CALLS.count("setUp") == CALLS.count("tearDown") == 6, CALLS
"""

DOCTEST = '''
    FACTOR = 3

    def triple(x):
        """
        >>> triple(2)
        6
        >>> FACTOR
        3
        """
        return x * FACTOR
'''

PLUGIN_ITEMS = """
    import pytest

    class CaseItem(pytest.Item):
        def __init__(self, *, spec, **kw):
            super().__init__(**kw)
            self.spec = spec

        def runtest(self):
            assert self.spec == "ok"

        def reportinfo(self):
            return self.path, 0, f"case {self.name}"

    class CaseFile(pytest.File):
        def collect(self):
            for line in self.path.read_text().split():
                name, spec = line.split("=")
                yield CaseItem.from_parent(self, name=name, spec=spec)

    def pytest_collect_file(parent, file_path):
        if file_path.suffix == ".case":
            return CaseFile.from_parent(parent, path=file_path)
"""


def _mixed_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_u=UNITTEST, mod_doc=DOCTEST)
    pytester.makeconftest(PLUGIN_ITEMS)
    (pytester.path / "cases.case").write_text("first=ok second=ok\n")


def test_every_item_type_runs_count_times(pytester: pytest.Pytester, run: Path) -> None:
    _mixed_suite(pytester)
    result = pytester.runpytest_subprocess(*BASE, "-p", "repeat", "--count", "3",
                                           "--doctest-modules", "-v")
    # 2 unittest methods + 1 doctest + 2 plugin items, 3 times each; the function 3 times too
    result.assert_outcomes(passed=18)
    starts = _starts(run)
    for base in ("test_u.py::TestU::test_a", "test_u.py::TestU::test_b", "mod_doc.py::mod_doc.triple",
                 "cases.case::first", "cases.case::second"):
        steps = sorted(n for n, b in starts.items() if b == base)
        assert steps == [f"{base}[{i}-3]" for i in (1, 2, 3)], (base, starts)
    assert starts["test_u.py::test_z_calls[2-3]"] == "test_u.py::test_z_calls"
    collected = next(e for e in RunDir(run).worker_events() if type(e).__name__ == "Collected")
    assert collected.repeated == {"TestCaseFunction": 2, "DoctestItem": 1, "CaseItem": 2}
    assert collected.count == 3 and collected.not_repeated == []
    assert any("repeated 5 item(s) 3 times" in n for n in summarize_run(run)["notes"])


def test_repeated_counts_only_items_left_after_deselection(pytester: pytest.Pytester,
                                                           run: Path) -> None:
    """A -k that leaves out some repeated items: the note counts those that ran, not all."""
    _mixed_suite(pytester)
    result = pytester.runpytest_subprocess(*BASE, "-p", "repeat", "--count", "2",
                                           "--doctest-modules", "-k", "test_a or first")
    result.assert_outcomes(passed=4, deselected=8)
    collected = next(e for e in RunDir(run).worker_events() if type(e).__name__ == "Collected")
    assert collected.repeated == {"TestCaseFunction": 1, "CaseItem": 1}
    assert any("repeated 2 item(s) 2 times" in n for n in summarize_run(run)["notes"])


@pytest.mark.slow
def test_repeated_items_under_xdist_and_by_id(pytester: pytest.Pytester, run: Path) -> None:
    _mixed_suite(pytester)
    args = (*BASE, "-p", "xdist", "-p", "repeat", "-n", "2", "--count", "2", "--doctest-modules")
    result = pytester.runpytest_subprocess(
        *args, "--faulthunt-id=test_u.py::TestU::test_a", "--faulthunt-id=cases.case::second[2-2]",
        "--faulthunt-id=mod_doc.py::mod_doc.triple", "--", "test_u.py", "cases.case", "mod_doc.py")
    # the whole test_a and the doctest twice each (xdist spreads the copies), one step of a case
    result.assert_outcomes(passed=5)
    ends = _ends(run)
    assert sorted(ends) == ["cases.case::second[2-2]", "mod_doc.py::mod_doc.triple[1-2]",
                            "mod_doc.py::mod_doc.triple[2-2]", "test_u.py::TestU::test_a[1-2]",
                            "test_u.py::TestU::test_a[2-2]"]


KILL_BETWEEN = """
    import os, signal
    import pytest

    class Killer:
        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_protocol(self, item, nextitem):
            # the worker dies between two tests: after test_a ended, before test_b starts
            if item.name == "test_b":
                os.kill(os.getpid(), signal.SIGKILL)
            yield

    def pytest_sessionstart(session):
        # registered after every plugin's configure: its wrapper is the outermost one
        session.config.pluginmanager.register(Killer())
"""


@pytest.mark.slow
def test_test_lost_before_it_started(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makeconftest(KILL_BETWEEN)
    pytester.makepyfile(test_k="def test_a(): pass\ndef test_b(): pass\ndef test_c(): pass\n")
    result = pytester.runpytest_subprocess(*BASE, "-p", "xdist", "-n", "1")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*worker gw0 (pid *) died before test_k.py::test_b started "
                                 "(killed by SIGKILL), after test_k.py::test_a*"])
    crash = next(c for c in RunDir(run).controller() if type(c).__name__ == "Crash")
    assert (crash.nodeid, crash.started, crash.previous) == (
        "test_k.py::test_b", False, "test_k.py::test_a")
    summary = summarize_run(run)
    (lost,) = summary["failures"]
    assert lost["outcome"] == "lost" and lost["nodeid"] == "test_k.py::test_b"
    assert lost["message"].startswith("lost: worker gw0 died before it started (SIGKILL")
    assert summary["workers"]["lost"] == 1 and summary["outcomes"]["lost"] == 1
    row = next(r for r in summary["by_test"] if r["base_nodeid"] == "test_k.py::test_b")
    assert (row["runs"], row["failures"]) == (0, 0)  # not a run and not a failure: lost
    assert summary["tests_run"] == 2


def test_lost_base_id_from_the_node_id_alone() -> None:
    from faulthunt.recorder import base_from_nodeid

    assert base_from_nodeid("t.py::test_p[a b-2-3]", 3) == "t.py::test_p[a b]"
    assert base_from_nodeid("t.py::T::test_a[2-3]", 3) == "t.py::T::test_a"
    assert base_from_nodeid("t.py::test_p[x/y]", 3) == "t.py::test_p[x/y]"
    assert base_from_nodeid("t.py::test_a[2-3]", None) == "t.py::test_a[2-3]"


@pytest.mark.slow
def test_slots_restarts_and_collection_errors(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makepyfile(test_ab="""
        import os
        def test_1(): os.abort()
        def test_2(): pass
        def test_3(): os.abort()
        def test_4(): pass
    """, test_broken="import not_a_module_anywhere\ndef test_x(): pass\n")
    result = pytester.runpytest_subprocess(*BASE, "-p", "xdist", "-n", "2",
                                           "--max-worker-restart", "5")
    result.assert_outcomes(passed=2, failed=2, errors=1)
    summary = summarize_run(run)
    w = summary["workers"]
    assert (w["slots"], w["restarts"], w["crashed"]) == (2, 2, 2)
    assert w["processes"] >= 3  # a replacement that started after the last test ran nothing
    assert set(w["slot_of"].values()) == {"gw0", "gw1"} and len(w["slot_of"]) == 4
    (err,) = summary["collection_errors"]
    assert err["nodeid"] == "test_broken.py"
    assert err["message"] == "ModuleNotFoundError: No module named 'not_a_module_anywhere'"
    from faulthunt.summary import found_something
    assert found_something({"collection_errors": summary["collection_errors"]})


def test_collection_error_without_xdist_is_recorded(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makepyfile(test_ok="def test_a(): pass\n", test_bad="raise SystemError('boom')\n")
    pytester.runpytest_subprocess(*BASE)
    (err,) = summarize_run(run)["collection_errors"]
    assert err["nodeid"] == "test_bad.py" and "SystemError: boom" in err["message"]


SUBTESTS = """
    import unittest

    class TestU(unittest.TestCase):
        def test_sub(self):
            for i in range(3):
                with self.subTest(i=i):
                    self.assertNotEqual(i, 1)

    def test_fixture(subtests):
        for i in range(3):
            with subtests.test(msg="m", i=i):
                assert i != 2
"""


@pytest.mark.slow
def test_subtests_counted_and_failures_listed(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makepyfile(test_s=SUBTESTS)
    pytester.runpytest_subprocess(*BASE, "-p", "xdist", "-n", "1")
    summary = summarize_run(run)
    assert summary["subtests"] == {"failed": 2, "passed": 4}
    fails = {f["nodeid"]: f for f in summary["failures"]}
    assert set(fails) == {"test_s.py::TestU::test_sub", "test_s.py::test_fixture"}
    sub = fails["test_s.py::TestU::test_sub"]["subtests_failed"]
    assert sub == [{"label": "(i=1)", "message": "AssertionError: 1 == 1"}]
    assert fails["test_s.py::test_fixture"]["subtests_failed"][0]["label"] == "[m] (i=2)"
    assert any(n.startswith("subtests: 2 failed, 4 passed") for n in summary["notes"])


FLAKY = """
    import pathlib
    def test_flaky():
        mark = pathlib.Path(__file__).with_name("tried")
        if not mark.exists():
            mark.write_text("1")
            raise AssertionError("flaky: first attempt fails")
    def test_steady():
        pass
"""


@pytest.mark.slow
def test_rerunfailures_reruns_count_as_failures(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makepyfile(test_f=FLAKY)
    result = pytester.runpytest_subprocess(*BASE, "-p", "xdist", "-n", "1", "-p", "rerunfailures",
                                           "--reruns", "2")
    assert result.ret == 0  # pytest calls it a pass ...
    assert result.parseoutcomes() == {"passed": 2, "rerun": 1}
    summary = summarize_run(run)
    (fail,) = summary["failures"]  # ... faulthunt counts the failed attempt
    assert (fail["nodeid"], fail["reruns"], fail["outcome"]) == ("test_f.py::test_flaky", 1, "failed")
    assert fail["message"] == "AssertionError: flaky: first attempt fails"
    assert any("pytest-rerunfailures reran 1 time(s)" in n for n in summary["notes"])


@pytest.mark.slow
def test_randomly_seed_recorded_for_replay(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makepyfile(test_r="def test_a(): pass\ndef test_b(): pass\n")
    pytester.runpytest_subprocess(*BASE, "-p", "randomly", "-p", "xdist", "-n", "2",
                                  "--randomly-seed=4242")
    start = next(c for c in RunDir(run).controller() if type(c).__name__ == "SessionStart")
    assert start.random_seed == 4242 and "pytest-randomly" in start.plugins
    summary = summarize_run(run)
    assert summary["random_seed"] == 4242
    assert any("--randomly-seed=4242" in n for n in summary["notes"])


BENCH = """
    def test_speed(benchmark):
        assert benchmark(sum, range(100)) == 4950
"""
BENCH_WARNING = "Benchmarks are automatically disabled because xdist plugin is active"
# pytest-benchmark says its warning as the worker unconfigures, after the worker reported back:
# a loaded machine can end the worker first (xdist waits 5 s for it), so the decision is also
# said here, in the worker's session finish, before the worker reports back
BENCH_SAYS = "pytest-benchmark: will warn, disabled under xdist"
BENCH_CONFTEST = f"""
    import sys

    def pytest_sessionfinish(session):
        bench = session.config.pluginmanager.get_plugin("pytest-benchmark")
        if getattr(bench, "xdist_warning", False):
            print({BENCH_SAYS!r}, file=sys.stderr, flush=True)
"""


@pytest.mark.slow
def test_benchmark_quiet_under_faulthunt(pytester: pytest.Pytester, run: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_b=BENCH)
    pytester.makeconftest(BENCH_CONFTEST)
    args = ("-p", "no:cacheprovider", "-p", "benchmark", "-p", "xdist", "-n", "2")
    result = pytester.runpytest_subprocess("-p", "faulthunt", *args)
    result.assert_outcomes(passed=1)
    said = result.stdout.str() + result.stderr.str()
    assert BENCH_WARNING not in said and BENCH_SAYS not in said
    assert "test_b.py::test_speed" in _ends(run)
    monkeypatch.delenv("FAULTHUNT_RUN_DIR")
    # the warning faulthunt keeps out: pytest-benchmark says it only from gw0 (or without
    # xdist), so the plain run has one worker, which runs the benchmark every time
    plain = pytester.runpytest_subprocess(*args[:-1], "1")
    assert BENCH_SAYS in plain.stdout.str() + plain.stderr.str()


@pytest.mark.slow
def test_cov_coexists(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makepyfile(lib="def f(x):\n    return x + 1\n",
                        test_c="from lib import f\ndef test_f(): assert f(1) == 2\n")
    result = pytester.runpytest_subprocess(*BASE, "-p", "pytest_cov", "--cov=lib",
                                           "--cov-report=term", "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*lib.py*100%*"])
    assert "faulthunt:" not in result.stderr.str()
    assert list(_ends(run)) == ["test_c.py::test_f"]


LOUD = """
    def test_loud():
        print("x" * 3_000_000)
        token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
        assert token == "y" * 2_000_000, "the token " + token
"""


@pytest.mark.slow
def test_output_bounded_and_secrets_scrubbed(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makepyfile(test_l=LOUD)
    result = pytester.runpytest_subprocess(*BASE, "-p", "xdist", "-n", "1", "-vv")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # the controller got head and tail of each part and the size of the cut: not 5 MB
    assert "characters cut] ..." in out
    assert len(out) < 600_000
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
    (end,) = _ends(run)["test_l.py::test_loud"]
    assert token not in end["longrepr"] and "<redacted>" in end["longrepr"]
    assert token not in end["message"]
    summary = summarize_run(run)
    assert token not in json.dumps(summary)


CHAINED = """
    import pathlib

    def helper(faults_bin):
        raise KeyError("no kernel")

    def test_chained():
        faults_bin = pathlib.Path("/opt/faults_bin")
        try:
            helper(faults_bin)
        except KeyError as exc:
            raise RuntimeError("launch failed: cudaErrorIllegalAddress") from exc
"""


def test_failure_message_is_the_exception_line(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makepyfile(test_m=CHAINED)
    pytester.runpytest_subprocess(*BASE, "--showlocals")
    (fail,) = summarize_run(run)["failures"]
    assert fail["message"] == "RuntimeError: launch failed: cudaErrorIllegalAddress"


@pytest.mark.parametrize("text, want", [
    # --showlocals: locals come first when the head of a long text was all that was kept
    ("faults_bin = PosixPath('/opt/faults_bin')\nx          = 3\n\n    def test_a():\n"
     ">       assert x == 4\nE       assert 3 == 4\n\ntest_a.py:5: AssertionError",
     "assert 3 == 4"),
    # a chain: the cause first, the exception that failed the test last
    ("    def helper():\n>       raise KeyError('k')\nE       KeyError: 'k'\n\nt.py:2: KeyError\n\n"
     "The above exception was the direct cause of the following exception:\n\n"
     ">       raise RuntimeError('wrapped') from exc\nE       RuntimeError: wrapped\n\nt.py:9: RuntimeError",
     "RuntimeError: wrapped"),
    # --tb=native
    ("Traceback (most recent call last):\n  File \"t.py\", line 3, in test_a\n    f()\n"
     "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access",
     "cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access"),
    # only a location line
    ("faults_bin = PosixPath('/x')\n\nt.py:12: AssertionError", "AssertionError"),
    ("faults_bin = PosixPath('/x')\nworker died", "worker died"),
])
def test_exception_line(text: str, want: str) -> None:
    assert exception_line(text) == want


CHILDREN = """
    import multiprocessing, os, signal, subprocess, sys, time
    from faulthunt.records.events import ChildProcess
    from faulthunt.rundir import RunDir

    def _idle():
        time.sleep(0.05)

    def _recorded(pid):
        events = RunDir(os.environ["FAULTHUNT_RUN_DIR"]).worker_events()
        return any(isinstance(e, ChildProcess) and e.child_pid == pid and e.name == "sleep"
                   for e in events)

    def test_spawns():
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        for method in ("fork", "spawn"):
            p = multiprocessing.get_context(method).Process(target=_idle)
            p.start(); p.join()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        # a grandchild Python never sees start: found by polling, kept alive until it is recorded
        # (however loaded the machine; no fixed sleep to outlast the poll interval)
        sh = subprocess.Popen(["sh", "-c", "sleep 120 & echo $!; wait"], stdout=subprocess.PIPE,
                              text=True)
        grandchild = int(sh.stdout.readline())
        deadline = time.monotonic() + 60
        while not _recorded(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(grandchild, signal.SIGTERM)
        assert sh.wait() == 0

    def test_quiet():
        pass
"""


@pytest.mark.slow
def test_child_processes_recorded_per_test(pytester: pytest.Pytester, run: Path) -> None:
    pytester.makepyfile(test_ch=CHILDREN)
    result = pytester.runpytest_subprocess(*BASE, "-p", "xdist", "-n", "1")
    result.assert_outcomes(passed=2)
    kids = [e for e in RunDir(run).worker_events() if isinstance(e, ChildProcess)]
    hows = Counter(k.how for k in kids)
    # (libraries start processes of their own too: platform runs uname, multiprocessing a
    # resource tracker, which polling finds)
    assert hows["subprocess"] >= 2 and hows["fork"] >= 2 and hows["multiprocessing"] >= 1
    assert {"sh", "sleep"} <= {k.name for k in kids}
    assert hows["poll"] >= 1, kids  # the sleep under sh
    # none in test_quiet; plugins may start some between tests (py-cpuinfo runs uname, file)
    assert {k.nodeid for k in kids} - {None} == {"test_ch.py::test_spawns"}
    worker = next(e.pid for e in RunDir(run).worker_events() if isinstance(e, TestStart))
    assert {k.pid for k in kids} == {worker}
    # the grandchild under sh, found by polling, its parent sh: a poll that catches it between
    # sh's fork and its exec records it as "sh", and the next poll as "exec", named sleep
    assert any(k.how in ("poll", "exec") and k.name == "sleep" and k.parent_pid != worker
               for k in kids), kids


def _span_with_children(children: list[ChildProcess]):
    from faulthunt.records.run import TestSpan

    return TestSpan(nodeid="t.py::test_child[1-2]", base_nodeid="t.py::test_child", worker="gw1",
                    pid=4100, t0=1000.0, t0_mono=100.0, t1=1003.0, t1_mono=103.0,
                    outcome="failed", children=tuple(children))


def test_xid_of_a_child_goes_to_its_test() -> None:
    child = ChildProcess(worker="gw1", pid=4100, child_pid=4242, parent_pid=4100, name="faults_bin",
                         how="subprocess", nodeid="t.py::test_child[1-2]", t_mono=101.0)
    (x,) = attribute_xids([{"xid": 31, "pid": 4242, "process": "faults_bin", "ts": 101.5}],
                          [_span_with_children([child])])
    assert (x["nodeid"], x["worker"], x["worker_pid"]) == ("t.py::test_child[1-2]", "gw1", 4100)
    assert x["attributed_by"] == "child+kernel_time"
    assert x["attribution"].startswith("child pid 4242 (faults_bin) of worker gw1 (pid 4100)")


def test_xid_of_an_unseen_grandchild_goes_by_name_and_time() -> None:
    child = ChildProcess(worker="gw1", pid=4100, child_pid=4242, parent_pid=4100, name="faults_bin",
                         how="subprocess", nodeid="t.py::test_child[1-2]", t_mono=101.0)
    span = _span_with_children([child])
    (x,) = attribute_xids([{"xid": 31, "pid": 4250, "process": "faults_bin", "ts": 102.0}], [span])
    assert x["attributed_by"] == "child_name+time" and x["nodeid"] == "t.py::test_child[1-2]"
    assert "was not seen by faulthunt" in x["attribution"]
    # another name, or a time outside the test: not attributed
    (y, z) = attribute_xids([{"xid": 31, "pid": 4250, "process": "python3", "ts": 102.0},
                             {"xid": 31, "pid": 4250, "process": "faults_bin", "ts": 200.0}], [span])
    assert y["attributed_by"] == z["attributed_by"] == "unmatched_pid"


def test_hang_process_tree_has_no_secrets() -> None:
    import subprocess
    import sys

    from faulthunt.supervise import process_tree

    token = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0" * 2
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--api-token",
                              token])
    try:
        import time
        time.sleep(0.2)
        tree = process_tree(__import__("os").getpid())
    finally:
        child.kill()
        child.wait()
    mine = next(p for p in tree if p["pid"] == child.pid)
    assert token not in json.dumps(mine["cmdline"]) and "<redacted>" in mine["cmdline"]


UNCOPYABLE = """
    import pytest

    class StubbornItem(pytest.Item):
        def __copy__(self):
            raise TypeError("this item type keeps a handle that cannot be shared")

        def runtest(self):
            pass

    class StubbornFile(pytest.File):
        def collect(self):
            yield StubbornItem.from_parent(self, name="only_once")

    def pytest_collect_file(parent, file_path):
        if file_path.suffix == ".stub":
            return StubbornFile.from_parent(parent, path=file_path)
"""


def test_an_item_that_cannot_be_repeated_is_said_loudly(pytester: pytest.Pytester,
                                                         run: Path) -> None:
    pytester.makeconftest(UNCOPYABLE)
    (pytester.path / "x.stub").write_text("")
    result = pytester.runpytest_subprocess(*BASE, "-p", "repeat", "--count", "3")
    result.assert_outcomes(passed=1)
    assert "1 test(s) run once, not --count times: x.stub::only_once (cannot be copied " \
           "(TypeError: this item type keeps a handle" in result.stderr.str()
    (note,) = [n for n in summarize_run(run)["notes"] if n.startswith("NOT REPEATED")]
    assert note.startswith("NOT REPEATED: 1 item(s) ran once instead of 3 times, e.g. "
                           "x.stub::only_once: cannot be copied (TypeError")
