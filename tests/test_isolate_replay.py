"""isolate after a real ``--count 3`` run, its refusals, and the recorded order of a replay (issue 13)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.cli import main
from faulthunt.hunt.isolate import isolate, probe_argv, pytest_probe, replay_plan

SUITE = '''
_CACHE = {}
_CALLS = []


def test_a():
    pass


def test_polluter():
    _CACHE["buf"] = "freed-buffer"   # a stale pointer left for the next test


def test_reader():
    assert "buf" not in _CACHE, "picked up stale state"


def test_counter():
    _CALLS.append(1)                 # leaks into its own next run
    assert len(_CALLS) == 1, "ran after itself"
'''


@pytest.fixture(scope="module")
def counted_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `faulthunt stress --count 3` run of SUITE in one process (-n 0: a fixed order)."""
    project = tmp_path_factory.mktemp("proj")
    (project / "test_leak.py").write_text(SUITE)
    run = project / "run"
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-n", "0", "--count", "3",
                           "--run-dir", str(run), "-q", "--xid-source", "none", "--", "test_leak.py"],
                          cwd=project, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the planted failures
    return run


@pytest.mark.slow
def test_isolate_after_a_count_3_run_names_the_polluter(counted_run: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    plan = replay_plan(counted_run, "test_leak.py::test_reader")
    assert plan.count == 3 and plan.target == "test_leak.py::test_reader[1-3]"
    assert "test_leak.py::test_polluter[2-3]" in plan.predecessors
    rc = main(["isolate", "test_leak.py::test_reader", "--run", str(counted_run), "--repeats", "3",
               "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 1 and res["fails_alone"] is False and res["fails_after_predecessors"] is True
    (culprit,) = res["minimal"]
    assert culprit.startswith("test_leak.py::test_polluter[") and res["count"] == 3


@pytest.mark.slow
def test_isolate_finds_a_test_that_pollutes_its_own_next_run(counted_run: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # the reason repeat steps are replayed as recorded: with base ids the earlier run would vanish
    rc = main(["isolate", "test_leak.py::test_counter", "--run", str(counted_run), "--repeats", "3",
               "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 1 and res["nodeid"] == "test_leak.py::test_counter[2-3]"
    assert res["minimal"] == ["test_leak.py::test_counter[1-3]"]


def test_repeats_zero_is_refused_before_anything_runs(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for repeats in ("0", "-1"):
        assert main(["isolate", "t.py::test_a", "--run", str(tmp_path / "none"), "--repeats", repeats]) == 2
        err = capsys.readouterr().err
        assert "--repeats must be at least 1" in err and "fix:" in err


def _events(run: Path, order: list[str], failing: str) -> None:
    (run / "events").mkdir(parents=True)
    lines = [{"event": "worker", "worker": "gw0", "pid": 1}]
    for nid in order:
        lines.append({"event": "start", "nodeid": nid, "pid": 1, "worker": "gw0"})
        lines.append({"event": "end", "nodeid": nid, "pid": 1, "worker": "gw0",
                      "outcome": "failed" if nid == failing else "passed"})
    (run / "events" / "gw0-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_hostile_ids_never_reach_pytest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep")
    run = tmp_path / "run"
    _events(run, [f"--basetemp={victim}", "t.py::test_a"], "t.py::test_a")
    assert main(["isolate", "t.py::test_a", "--run", str(run)]) == 2
    assert "is not a test node id" in capsys.readouterr().err
    assert main(["isolate", "--run", str(run), "--", f"--junitxml={victim}/precious.txt"]) == 2
    assert (victim / "precious.txt").read_text() == "keep"
    argv = probe_argv("t.py::test_p[-x]", ["t.py::test_q[a b]"], count=3)
    assert argv[-4:] == ["--faulthunt-id=t.py::test_p[-x]", "--", "t.py::test_q", "t.py::test_p"]
    assert argv[argv.index("--count") + 1] == "3"


ORDER_SUITE = '''
import pytest

_CACHE = {}


@pytest.mark.parametrize("i", [1, 2])
def test_p(i):
    assert "buf" not in _CACHE, "picked up stale state"


def test_pol():
    _CACHE["buf"] = 1
'''


@pytest.mark.slow
def test_replay_keeps_the_recorded_order_across_parameters(tmp_path: Path) -> None:
    # recorded: test_p[1], test_pol, test_p[2]: collection order would run test_p[2] before test_pol
    (tmp_path / "t.py").write_text(ORDER_SUITE)
    run = tmp_path / "run"
    _events(run, ["t.py::test_p[1]", "t.py::test_pol", "t.py::test_p[2]"], "t.py::test_p[2]")
    plan = replay_plan(run, "t.py::test_p[2]")
    res = isolate(plan.target, plan.predecessors, pytest_probe(plan.target, cwd=tmp_path, repeats=3))
    assert res["fails_alone"] is False and res["minimal"] == ["t.py::test_pol"]


def test_without_run_json_the_count_comes_from_the_recorded_step(tmp_path: Path) -> None:
    """run.json lost or garbled: the count is read from the step in the recorded id, for a plain
    test (`test_a[2-3]`, a unittest method) as for a parametrized one (`test_p[x-2-3]`); the
    plain form used to give 1, and the probe asked for `test_a[2-3]` with no --count."""
    run = tmp_path / "run"
    _events(run, ["t.py::test_a[1-3]", "t.py::test_p[x-2-3]"], "t.py::test_a[1-3]")
    assert replay_plan(run, "t.py::test_a").count == 3
    assert replay_plan(run, "t.py::test_p").count == 3
    (run / "run.json").write_bytes(b"\x00\xff garbage")
    assert replay_plan(run, "t.py::test_a").count == 3
    assert replay_plan(run, "t.py::test_a").timeout is None
