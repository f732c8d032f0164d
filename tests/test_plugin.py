"""The faulthunt pytest plugin under real pytest, xdist, pytest-repeat and pytest-timeout.

Real crashes (os.abort(), SIGKILL), a real bounded hang (time.sleep past --timeout), and a sticky
CUDA error *simulated* on CPU: a test raises an exception whose text is the real CuPy message for
error 700 (no GPU here; the recognition is the same code path as on the H200).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faulthunt.rundir import read_jsonl, read_jsonl_dir

STICKY_MSG = ("cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorIllegalAddress: "
              "an illegal memory access was encountered")


def _records(run: Path) -> list[dict]:
    return list(read_jsonl_dir(run / "events").records)


def _controller(run: Path) -> list[dict]:
    return list(read_jsonl(run / "controller.jsonl").records)


@pytest.fixture
def run(pytester, monkeypatch) -> Path:
    path = pytester.path / "run"
    monkeypatch.setenv("FAULTHUNT_RUN_DIR", str(path))
    return path


def test_inactive_without_run_dir(pytester, monkeypatch):
    monkeypatch.delenv("FAULTHUNT_RUN_DIR", raising=False)
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    created = [p for p in pytester.path.rglob("*") if p.suffix in (".jsonl", ".txt")]
    assert created == []


def test_spans_base_nodeid_and_collateral_without_xdist(pytester, run):
    pytester.makepyfile(test_s=f"""
        import pytest
        @pytest.mark.parametrize("x", ["3-50", "b"])
        def test_p(x): pass
        def test_sticky():
            raise RuntimeError({STICKY_MSG!r})
        def test_later():
            assert 0, "fails only because the context is gone"
    """)
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-p", "repeat", "--count", "2",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=4)
    recs = _records(run)
    starts = {r["nodeid"]: r["base_nodeid"] for r in recs if r["event"] == "start"}
    # base ids come from the callspec: a user id that looks like a repeat step survives
    assert starts["test_s.py::test_p[3-50-1-2]"] == "test_s.py::test_p[3-50]"
    assert starts["test_s.py::test_p[b-2-2]"] == "test_s.py::test_p[b]"
    assert starts["test_s.py::test_later[2-2]"] == "test_s.py::test_later"
    ends = {r["nodeid"]: r for r in recs if r["event"] == "end"}
    first = ends["test_s.py::test_sticky[1-2]"]
    assert first["outcome"] == "failed" and first["sticky_cuda_error"]["code"] == 700
    # no xdist: nothing to recycle, so every later failure in the process is collateral
    assert ends["test_s.py::test_sticky[2-2]"]["outcome"] == "collateral"
    assert ends["test_s.py::test_later[1-2]"]["collateral_of"] == "test_s.py::test_sticky[1-2]"
    assert ends["test_s.py::test_p[b-1-2]"]["outcome"] == "passed"
    assert all(r["pid"] == recs[0]["pid"] for r in recs)


def test_base_nodeid_with_repeat_markers_per_class_and_function(pytester, run):
    """The repeat count is looked up once per parent for items without a marker of their own:
    a class marker holds for its methods, a method's own marker overrides it, ``--count`` holds
    elsewhere; user ids shaped like another count's step survive. Plain passes and an xpass keep
    their outcomes (the passing run's shortcut)."""
    pytester.makepyfile(test_r="""
        import pytest
        @pytest.mark.repeat(3)
        class TestC:
            @pytest.mark.parametrize("x", ["1-2", "b"])
            def test_class_count(self, x): pass
            @pytest.mark.repeat(2)
            @pytest.mark.parametrize("x", ["1-3"])
            def test_own_count(self, x): pass
        @pytest.mark.parametrize("x", ["2-3"])
        def test_option_count(x): pass
        @pytest.mark.xfail(strict=False)
        def test_xpass(): pass
    """)
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-p", "repeat", "--count", "4",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3 * 2 + 2 + 4, xpassed=4)
    recs = _records(run)
    starts = {r["nodeid"]: r["base_nodeid"] for r in recs if r["event"] == "start"}
    cls = "test_r.py::TestC"
    assert starts[f"{cls}::test_class_count[1-2-3-3]"] == f"{cls}::test_class_count[1-2]"
    assert starts[f"{cls}::test_class_count[b-1-3]"] == f"{cls}::test_class_count[b]"
    assert starts[f"{cls}::test_own_count[1-3-2-2]"] == f"{cls}::test_own_count[1-3]"
    assert starts["test_r.py::test_option_count[2-3-4-4]"] == "test_r.py::test_option_count[2-3]"
    assert starts["test_r.py::test_xpass[2-4]"] == "test_r.py::test_xpass"
    ends = {r["nodeid"]: r["outcome"] for r in recs if r["event"] == "end"}
    assert ends["test_r.py::test_xpass[1-4]"] == "xpassed"
    assert {o for n, o in ends.items() if "xpass" not in n} == {"passed"}


@pytest.mark.slow
def test_a_test_that_ends_while_its_hang_is_dumped_gets_one_end_record(pytester, run):
    # the stack dumps take longer than the test's own remaining time: it ends during them
    pytester.makeconftest("""
        import time
        from faulthunt import supervise
        def slow_dump(pid, path, timeout=30.0):
            time.sleep(4)
            return supervise.DumpResult(None, "slowed down by the test")
        supervise.pyspy_dump = slow_dump
    """)
    pytester.makepyfile(test_h="""
        import time
        def test_a_slow():
            time.sleep(2)
        def test_b_next():
            pass
    """)
    result = pytester.runpytest_subprocess(
        "-p", "faulthunt", "-p", "xdist", "-n", "1", "--timeout", "1",
        "--timeout-method", "thread", "-p", "no:cacheprovider", "-p", "no:randomly")
    result.stdout.fnmatch_lines(["*test_h.py::test_a_slow hung in worker*"])
    result.assert_outcomes(failed=1, passed=1)  # the hung test is not also counted passed
    recs = _records(run)
    slow_ends = [r for r in recs if r["event"] == "end" and r["nodeid"] == "test_h.py::test_a_slow"]
    assert [r["outcome"] for r in slow_ends] == ["hung"]
    nxt = next(r for r in recs if r["event"] == "start" and r["nodeid"] == "test_h.py::test_b_next")
    assert nxt["pid"] != slow_ends[0]["pid"]  # not started by the worker that was ending


@pytest.mark.slow
def test_recycle_abort_and_hang_under_xdist(pytester, run):
    # -n 1 so the order is fixed: sticky -> (recycle) -> after -> abort -> (restart) -> hang -> ok
    pytester.makepyfile(test_x=f"""
        import os, time
        def test_a_sticky():
            raise RuntimeError({STICKY_MSG!r})
        def test_b_after():
            pass
        def test_c_abort():
            os.abort()
        def test_d_hang():
            time.sleep(30)  # bounded, and long past the 1 s timeout plus the stack dumps under load
        def test_e_ok():
            pass
    """)
    result = pytester.runpytest_subprocess(
        "-p", "faulthunt", "-p", "xdist", "-n", "1", "--timeout", "1",
        "--timeout-method", "thread", "--max-worker-restart", "10", "-p", "no:cacheprovider")
    # a rescheduled test goes to the front of the queue, so the order of these lines varies
    result.stdout.fnmatch_lines(["*crashed while running test_x.py::test_c_abort*killed by SIGABRT*"])
    result.stdout.fnmatch_lines(["*test_x.py::test_d_hang hung in worker*"])
    result.stdout.fnmatch_lines(["*3 failed, 2 passed, 1 rerun*"])
    ctl = _controller(run)
    recycled = [c for c in ctl if c["event"] == "recycled"]
    assert [c["nodeid"] for c in recycled] == ["test_x.py::test_b_after"]
    assert recycled[0]["poisoned_by"] == "test_x.py::test_a_sticky"
    crashes = {c["nodeid"]: c for c in ctl if c["event"] == "crash"}
    assert crashes["test_x.py::test_c_abort"]["kind"] == "crashed"
    assert crashes["test_x.py::test_c_abort"]["signal"] == 6
    assert "test_c_abort" in crashes["test_x.py::test_c_abort"]["faulthandler"]
    assert crashes["test_x.py::test_d_hang"]["kind"] == "hung"
    recs = _records(run)
    ends = {r["nodeid"]: r for r in recs if r["event"] == "end"}
    # the rescheduled test ran in a fresh process, so it passed instead of being collateral
    assert ends["test_x.py::test_b_after"]["outcome"] == "passed"
    assert ends["test_x.py::test_b_after"]["pid"] != ends["test_x.py::test_a_sticky"]["pid"]
    assert ends["test_x.py::test_d_hang"]["outcome"] == "hung"
    assert ends["test_x.py::test_e_ok"]["outcome"] == "passed"
    hang = next(r for r in recs if r["event"] == "hang")
    stacks = (run / hang["faulthandler"]).read_text()
    assert "test_d_hang" in stacks
    if hang["pyspy"] is not None:  # py-spy installed and ptrace permitted (root here)
        assert "test_d_hang" in (run / hang["pyspy"]).read_text()
    else:
        assert hang["pyspy_error"]


@pytest.mark.slow
def test_sigkilled_worker_keeps_its_lines(pytester, run):
    pytester.makepyfile(test_k="""
        import os, signal
        def test_1(): pass
        def test_2(): pass
        def test_3(): pass
        def test_4_kill():
            os.kill(os.getpid(), signal.SIGKILL)
        def test_5(): pass
    """)
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-p", "xdist", "-n", "2",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1)
    crash = next(c for c in _controller(run) if c["event"] == "crash")
    assert (crash["nodeid"], crash["signal"], crash["signal_name"]) == (
        "test_k.py::test_4_kill", 9, "SIGKILL")
    killed = run / "events" / f"{crash['worker']}-{crash['pid']}.jsonl"
    got = read_jsonl(killed)
    assert got.skipped == 0 and not got.torn_tail
    assert got.records[-1]["event"] == "start"
    assert got.records[-1]["nodeid"] == "test_k.py::test_4_kill"


@pytest.mark.slow
def test_maxfail_keeps_failing_ids(pytester, run):
    body = "def test_0_fail(): assert 0\n" + "".join(f"def test_{i}(): pass\n" for i in range(1, 30))
    pytester.makepyfile(test_m=body)
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-p", "xdist", "-n", "2",
                                           "--maxfail", "1", "-p", "no:cacheprovider")
    assert result.ret in (1, 2)  # xdist reports a maxfail stop as Interrupted (2)
    ends = [r for r in _records(run) if r["event"] == "end"]
    assert [r["nodeid"] for r in ends if r["outcome"] == "failed"] == ["test_m.py::test_0_fail"]
    finish = next(c for c in _controller(run) if c["event"] == "session_finish")
    assert finish["shouldstop"] or finish["shouldfail"]
    json.dumps(finish)


# --- loading: the pytest11 entry point and the -p faulthunt alias --------------------------------

_WHO_LOADED = """
    def test_loaded(request):
        pm = request.config.pluginmanager
        import faulthunt.plugin as plugin
        names = [pm.get_name(p) for p in pm.get_plugins() if p is plugin]
        print("FAULTHUNT-PLUGIN", names, pm.hasplugin("faulthunt-controller"))
"""


@pytest.mark.parametrize("args", [(), ("-p", "faulthunt")], ids=["entry point", "both"])
def test_plugin_loads_once(pytester, run, args):
    pytester.makepyfile(_WHO_LOADED)
    result = pytester.runpytest_subprocess(*args, "-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    line = next(ln for ln in result.outlines if "FAULTHUNT-PLUGIN" in ln)
    assert line.count("'") == 2  # one name: registered once
    assert "--faulthunt-run-dir" in pytester.runpytest_subprocess(*args, "--help").stdout.str()
    assert len(_records(run)) >= 2  # the worker line and the test's start/end


def test_alias_works_without_autoload(pytester, run, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(_WHO_LOADED)
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    # pytest >= 8.4 resolves -p NAME to the entry point of that name when autoload is off
    # (registered as "faulthunt"); older ones import the package, whose pytest_plugins loads
    # faulthunt.plugin: once either way
    line = next(ln for ln in result.outlines if "FAULTHUNT-PLUGIN" in ln)
    assert ("['faulthunt']" in line or "['faulthunt.plugin']" in line), line
    without = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    assert "FAULTHUNT-PLUGIN []" in without.stdout.str()


def test_import_faulthunt_stays_cheap():
    import subprocess
    import sys

    code = "import sys, faulthunt; print(sorted(m for m in ('pytest', 'pluggy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_restart_limit_is_recorded_not_read_from_output(pytester, run):
    pytester.makepyfile(test_r="""
        import os
        def test_1(): os.abort()
        def test_2(): os.abort()
        def test_3(): os.abort()
        def test_4(): pass
    """)
    result = pytester.runpytest_subprocess("-p", "faulthunt", "-p", "xdist", "-n", "1",
                                           "--max-worker-restart", "1", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*maximum crashed workers reached: 1*"])
    limits = [c for c in _controller(run) if c["event"] == "restart_limit"]
    assert [(c["limit"], c["down"]) for c in limits] == [(1, 2)]
