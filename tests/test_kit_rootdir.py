"""A suite whose pytest rootdir is not the directory the run started in (issue 13), rerun for real.

``cd parent; faulthunt stress -- sub/tests`` with ``sub/pytest.ini``: pytest's rootdir is
``parent/sub`` and the node ids (``tests/test_k.py::test_p[a b]``) are relative to it, not to the
run's cwd. Every rerun (the kit's run_reproducer.sh, repro_<test>.py and run_sanitizer.sh,
sanitize, isolate's probes) runs in the run's cwd with that rootdir pinned, so the tests run, each
``count`` times whatever its item type (a unittest method included), and in the same cwd as in the
run. The ids are hostile on purpose: they stay data.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.cli import main
from faulthunt.hunt.isolate import shown_id
from faulthunt.nodeids import pytest_selection, rebase, rootdir_option
from faulthunt.rundir import RunDir
from faulthunt.stage import stage

from test_sanitizer_run import standin_env

SUITE = '''
import os
import unittest

import pytest


def _ran():
    """Log this run's node id (with its repeat step) and the directory it ran in."""
    nodeid = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    with open(os.environ["KIT_LOG"], "a") as fh:
        fh.write(f"{nodeid}\\t{os.getcwd()}\\n")


@pytest.mark.parametrize("p", ["a b", "-x", "$(touch pwned)"])
def test_p(p):
    _ran()
    assert not os.environ.get("KIT_FAIL"), "planted"


def test_fine():
    _ran()


class TestU(unittest.TestCase):
    def test_u(self):
        _ran()
        self.assertFalse(os.environ.get("KIT_FAIL"), "planted")
'''
FAILING = ['tests/test_k.py::test_p[a b]', 'tests/test_k.py::test_p[-x]',
           'tests/test_k.py::test_p[$(touch pwned)]', 'tests/test_k.py::TestU::test_u']


def _env(log: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KIT_FAIL", "FAULTHUNT_RUN_DIR", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")}
    return {**env, "KIT_LOG": str(log), **extra}


def _ran(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [tuple(line.split("\t")) for line in log.read_text().splitlines()]  # type: ignore[misc]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A real failing stress run of sub/tests, started in the parent, and its kit."""
    tmp = tmp_path_factory.mktemp("rootdir")
    parent = tmp / "the parent"
    (parent / "sub" / "tests").mkdir(parents=True)
    (parent / "sub" / "pytest.ini").write_text("[pytest]\n")
    (parent / "sub" / "tests" / "test_k.py").write_text(SUITE)
    run = tmp / "run"
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-n", "0", "--run-dir", str(run),
                           "--xid-source", "none", "-q", "--", "sub/tests"],
                          cwd=parent, env=_env(tmp / "stress.log", KIT_FAIL="1"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert RunDir(run).rootdir() == str(parent / "sub")
    kit = tmp / "kit"
    result = stage(run, kit)
    assert sorted(t.base_nodeid for t in result["plan"].failing) == sorted(FAILING)
    return {"tmp": tmp, "parent": parent, "run": run, "kit": kit}


def test_selection_pins_the_rootdir_and_names_roots_from_the_cwd() -> None:
    args = pytest_selection(["tests/t.py::test_p[a b]", "tests/t.py::T::test_u"],
                            rootdir="/p/sub", cwd="/p")
    assert args == ["--rootdir=/p/sub", "--faulthunt-id=tests/t.py::test_p[a b]",
                    "--faulthunt-id=tests/t.py::T::test_u", "--",
                    "sub/tests/t.py::test_p", "sub/tests/t.py::T::test_u"]
    assert rebase("t.py::a", "/q/sub", "/p") == "/q/sub/t.py::a"      # not under the cwd
    assert rebase("t.py::a", "/p/-sub", "/p") == "./-sub/t.py::a"     # never reads as an option
    assert rebase("t.py::a[x]", "/p", "/p") == "t.py::a[x]"
    assert rootdir_option("/p/$HOME") == []                            # pytest would expand it
    assert shown_id("tests/t.py::a[x]", "/p/sub", Path("/p")) == "sub/tests/t.py::a[x]"


@pytest.mark.slow
def test_run_reproducer_reruns_from_the_parent_every_item_count_times(world: dict[str, Path]) -> None:
    log = world["tmp"] / "reproducer.log"
    proc = subprocess.run(["bash", str(world["kit"] / "run_reproducer.sh"), "3", "-q"], cwd=world["tmp"],
                          env=_env(log), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = _ran(log)
    assert sorted(nodeid for nodeid, _ in ran) == sorted(
        f"{t[:-1]}-{i}-3]" if t.endswith("]") else f"{t}[{i}-3]" for t in FAILING for i in (1, 2, 3))
    assert {cwd for _, cwd in ran} == {str(world["parent"])}   # the run's own cwd
    assert not list(world["tmp"].rglob("pwned"))


@pytest.mark.slow
def test_repro_script_repeats_a_unittest_method(world: dict[str, Path]) -> None:
    log = world["tmp"] / "repro.log"
    proc = subprocess.run([sys.executable, str(world["kit"] / "repro_test_u.py"), "3"], cwd=world["tmp"],
                          env=_env(log), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _ran(log) == [(f"tests/test_k.py::TestU::test_u[{i}-3]", str(world["parent"]))
                         for i in (1, 2, 3)]


_NO_FAULTHUNT = ("import runpy, sys; sys.modules['faulthunt'] = None; script = sys.argv[1]; "
                 "sys.argv = sys.argv[1:]; runpy.run_path(script, run_name='__main__')")


@pytest.mark.slow
def test_repro_script_hands_over_to_the_runs_python_without_faulthunt(world: dict[str, Path]) -> None:
    log = world["tmp"] / "handover.log"
    proc = subprocess.run([sys.executable, "-c", _NO_FAULTHUNT, str(world["kit"] / "repro_test_u.py"), "3"],
                          cwd=world["tmp"], env=_env(log), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rerunning with the run's" in proc.stdout
    assert [n for n, _ in _ran(log)] == [f"tests/test_k.py::TestU::test_u[{i}-3]" for i in (1, 2, 3)]


@pytest.mark.slow
def test_repro_script_without_faulthunt_anywhere_still_runs_count_times(world: dict[str, Path]) -> None:
    log = world["tmp"] / "plain.log"
    env = _env(log, FAULTHUNT_REPRO_HANDED_OVER="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.run([sys.executable, "-c", _NO_FAULTHUNT, str(world["kit"] / "repro_test_u.py"), "3"],
                          cwd=world["tmp"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 session(s) in this process" in proc.stdout
    assert _ran(log) == [("tests/test_k.py::TestU::test_u", str(world["parent"]))] * 3


@pytest.mark.slow
def test_run_sanitizer_reruns_from_the_parent(world: dict[str, Path]) -> None:
    log = world["tmp"] / "sanitizer.log"
    env = {**standin_env(world["tmp"]), "KIT_LOG": str(log)}
    env.pop("KIT_FAIL", None)
    proc = subprocess.run(["bash", str(world["kit"] / "run_sanitizer.sh"), "memcheck", "--count", "1"],
                          cwd=world["tmp"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert sorted(n for n, _ in _ran(log)) == sorted(FAILING)
    assert {cwd for _, cwd in _ran(log)} == {str(world["parent"])}
    doc = json.loads((world["kit"] / "run" / "sanitizer" / "sanitizer.json").read_text())
    assert {t["state"] for t in doc["tests"]} == {"passed"}, doc["tests"]


ORDER_SUITE = '''
import pytest

_CACHE = {}


@pytest.mark.parametrize("i", ["a b", "$(touch pwned)", "-x"])
def test_p(i):
    assert "buf" not in _CACHE, "picked up stale state"


@pytest.mark.parametrize("j", ["x;y", "--basetemp=oops"])
def test_pol(j):
    if j == "--basetemp=oops":
        _CACHE["buf"] = 1
'''


@pytest.mark.slow
def test_isolate_replays_hostile_ids_in_the_recorded_order_from_the_parent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = tmp_path / "parent"
    (parent / "sub" / "tests").mkdir(parents=True)
    (parent / "sub" / "pytest.ini").write_text("[pytest]\n")
    (parent / "sub" / "tests" / "test_o.py").write_text(ORDER_SUITE)
    # recorded: the polluter ran between two parameters of test_p; collection order would put
    # test_p[-x] before it, and the failure would not reproduce
    order = ["tests/test_o.py::test_p[a b]", "tests/test_o.py::test_pol[x;y]",
             "tests/test_o.py::test_pol[--basetemp=oops]", "tests/test_o.py::test_p[$(touch pwned)]",
             "tests/test_o.py::test_p[-x]"]
    run = tmp_path / "run"
    (run / "events").mkdir(parents=True)
    lines = [{"event": "worker", "worker": "gw0", "pid": 1}]
    for nodeid in order:
        lines += [{"event": "start", "nodeid": nodeid, "pid": 1, "worker": "gw0"},
                  {"event": "end", "nodeid": nodeid, "pid": 1, "worker": "gw0",
                   "outcome": "failed" if nodeid == order[-1] else "passed"}]
    (run / "events" / "gw0-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run / "controller.jsonl").write_text(json.dumps(
        {"event": "session_start", "pid": 1, "t": 0.0, "rootdir": str(parent / "sub")}) + "\n")
    (run / "run.json").write_text(json.dumps({"id": "r", "cwd": str(parent)}))
    rc = main(["isolate", "tests/test_o.py::test_p[-x]", "--run", str(run), "--repeats", "3", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 1 and res["fails_alone"] is False and res["fails_after_predecessors"] is True
    assert res["minimal"] == ["tests/test_o.py::test_pol[--basetemp=oops]"]
    assert not list(tmp_path.rglob("pwned")) and not list(tmp_path.rglob("oops"))


def test_a_run_without_a_rootdir_keeps_the_ids_as_they_are(world: dict[str, Path], tmp_path: Path) -> None:
    # runs recorded before the rootdir was kept: the selection is what it was
    from faulthunt.stage import plan_kit, render_kit

    run = tmp_path / "old"
    (run / "events").mkdir(parents=True)
    for name in ("run.json", "summary.json"):
        (run / name).write_text((world["run"] / name).read_text())
    plan = plan_kit(run, identity_text="")
    assert plan.rootdir is None
    script = render_kit(plan)["run_reproducer.sh"]
    assert "--rootdir" not in script and "  tests/test_k.py::TestU::test_u\n" in script
