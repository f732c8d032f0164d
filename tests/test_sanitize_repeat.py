"""Repeated, parallel sanitizer reruns (issue 14) on CPU, with the stand-in compute-sanitizer.

The stand-in (tests/data/sanitizer/standin_compute_sanitizer.py) really runs each rerun's pytest
and replays a real H200 memcheck capture only when the test failed (or a process under it wrote a
fault marker), so what is proved here is faulthunt's side: which ids each run selects and with
which --count, how many runs, when runs stop, that several run at once, the order of a replayed
sequence, and the outcome each test gets. The tests of the suite below fail on a schedule (their
third run, as a repeat step, after a polluter), never at random.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from faulthunt.cli.sanitize import exit_status, parse_duration, show
from faulthunt.errors import UsageError
from faulthunt.records.documents import RunInfo
from faulthunt.rundir import RunDir, create_run_dir, write_json_atomic
from faulthunt.sanitizer import parse_text, reduce_records, run_sanitize
from faulthunt.sanitizer import run as srun
from faulthunt.sanitizer.analyse import RunResult, outcome_for, ruled_out_text, silent_hint
from faulthunt.sanitizer.collect import pytest_argv
from faulthunt.sanitizer.plan import Recorded, Target, plan_targets, planned_runs, split_repeat
from faulthunt.stats import rate_ruled_out

from test_sanitizer_run import DATA, invocations, standin_env

SUITE = '''
import fcntl, os, pathlib, subprocess, sys, time

STATE = pathlib.Path(os.environ["SUITE_STATE"])


def _tick(name):
    """This test's run number over every process, this run included."""
    with open(STATE / f"{name}.count", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        n = len(fh.read()) + 1
        fh.write("x")
    return n


def test_third():
    """An intermittent fault: only the third run of it fails."""
    assert _tick("third") != 3, "checksum of out[] is off by one element"


def test_slow_third():
    """Passes twice, then its third run sleeps (a stop finds it still going, however the runs
    were scheduled) and its fourth fails."""
    n = _tick("slow_third")
    if n == 4:
        raise AssertionError("checksum of out[] is off by one element")
    if n == 3:
        time.sleep(300)


def test_never():
    """A recorded failure that does not come back."""
    _tick("never")
    (STATE / "guard").write_text(os.environ.get("FAULTHUNT_GUARD", "-"))


def test_logic():
    """Fails every time, but with valid addresses: no sanitizer sees it."""
    _tick("logic")
    assert False, "wrong result from valid addresses"


def test_child():
    """The fault is in a child process of the test (the test itself passes)."""
    code = ("import os; open(os.path.join(os.environ['STANDIN_FAULT_DIR'], str(os.getpid())), 'w')"
            ".write('test_oob')")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_together():
    """Passes only when SUITE_TOGETHER runs of it are alive at once."""
    want = int(os.environ.get("SUITE_TOGETHER", "1"))
    here = STATE / "together"
    here.mkdir(exist_ok=True)
    (here / str(os.getpid())).touch()
    end = time.monotonic() + 60
    while len(list(here.iterdir())) < want:
        assert time.monotonic() < end, "the runs were not alive at once"
        time.sleep(0.05)


def test_step(request):
    """Fails only as pytest-repeat's step 2 of 3: its outcome depends on its id."""
    assert not request.node.nodeid.endswith("[2-3]"), "checksum of out[] is off by one element"


polluted = []


def test_victim():
    """Fails only after test_z_polluter ran in the same process."""
    assert not polluted, "checksum of out[] is off by one element"


def test_a_bystander():
    pass


def test_z_polluter():
    polluted.append(1)
'''

H200 = DATA / "h200"
OOB = {"text": str(H200 / "san_memcheck_oob1.txt"), "xml": str(H200 / "xml_memcheck_oob1.xml")}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "test_r.py").write_text(SUITE)
    return proj


def env_for(tmp_path: Path, state: str = "state", help_file: Path | None = None, **extra: str) -> dict[str, str]:
    env = standin_env(tmp_path) if help_file is None else standin_env(tmp_path, help_file)
    keys = ("test_oob", "test_third", "test_slow_third", "test_step", "test_victim")
    env["STANDIN_REPLAY"] = json.dumps({k: OOB for k in keys})
    (tmp_path / state).mkdir(exist_ok=True)
    env["SUITE_STATE"] = str(tmp_path / state)
    env.update(extra)
    return env


def stress_run(tmp_path: Path, project: Path, failures: list[tuple[str, str]],
               rates: dict[str, tuple[int, int]], options: dict | None = None,
               events: list[dict] | None = None) -> Path:
    run = create_run_dir(tmp_path / "runs" / "r1")
    write_json_atomic(run / "run.json", {"id": "r1", "kind": "stress", "cwd": str(project),
                                         "options": options or {}})
    write_json_atomic(run / "summary.json", {
        "tests_run": sum(n for _, n in rates.values()), "exit_status": 1,
        "failures": [{"nodeid": n, "base_nodeid": b, "outcome": "failed"} for n, b in failures],
        "by_test": [{"base_nodeid": b, "runs": n, "failures": f, "rate": f / n} for b, (f, n) in rates.items()],
    })
    if events:
        (run / "events" / "gw0-100.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def runs_of(tmp_path: Path, name: str) -> int:
    """How many stand-in invocations ran ``name``."""
    return sum(any(a.startswith("--faulthunt-id=") and name in a for a in argv) for argv in invocations(tmp_path))


# --- end to end -------------------------------------------------------------------------------

@pytest.mark.slow
def test_each_test_gets_its_honest_outcome(tmp_path, project, capsys):
    """Default run counts from the stress rates, three processes at once, guard mode passed on."""
    run = stress_run(tmp_path, project, [
        ("test_r.py::test_third", "test_r.py::test_third"),
        ("test_r.py::test_never", "test_r.py::test_never"),
        ("test_r.py::test_logic", "test_r.py::test_logic"),
        ("test_r.py::test_step[2-3]", "test_r.py::test_step"),
        ("test_r.py::test_child", "test_r.py::test_child"),
    ], {"test_r.py::test_third": (1, 3), "test_r.py::test_never": (1, 2), "test_r.py::test_logic": (3, 4),
        "test_r.py::test_step": (1, 3), "test_r.py::test_child": (1, 1)}, options={"guard": "1"})
    result = run_sanitize(run, env=env_for(tmp_path), parallel=3, quiet=True)
    by = {o.nodeid.split("::")[1]: o for o in result.outcomes}

    third = by["test_third"]  # 8 runs planned for 1 in 3; found in its third, then stopped
    assert (third.outcome, third.planned, third.finding_runs, third.stopped) == ("found", 8, 1, "found")
    # three processes at once, shared round-robin by the tests: when a slot frees while its third
    # run is going, a fourth (or fifth) may start beside it, and may be the one that ticks third;
    # none starts after the finding (test_runs_stop_at_the_first_finding... pins 3 of 3, one at once)
    assert 3 <= third.started <= 5 and third.found_in_run <= third.started
    assert 3 <= runs_of(tmp_path, "test_third") <= third.started

    never = by["test_never"]  # 5 runs see a 50% rate with 95% confidence
    assert (never.outcome, never.planned, never.runs, never.stopped) == ("not_reproduced", 5, 5, "runs")
    assert math.isclose(never.rate_ruled_out, rate_ruled_out(5), rel_tol=1e-5)
    assert never.text.startswith("not reproduced in 5 runs: a rate above 45% is unlikely (95% confidence)")
    assert "the stress run failed 1 of 2 (50%), a rate these runs make unlikely" in never.text

    logic = by["test_logic"]  # failed every run with no record: stops after 3 silent reproductions
    assert (logic.outcome, logic.failed_runs, logic.stopped) == ("reproduced_silent", 3, "silent")
    assert "racecheck sees shared-memory data races" in logic.text and "try --tool all" in logic.text

    step = by["test_step"]  # the recorded repeat step, with --count 3: it fails as that step
    assert (step.outcome, step.found_in_run, step.id_mode, step.count) == ("found", 1, "exact", 3)
    assert step.ids == ["test_r.py::test_step[2-3]"]

    child = by["test_child"]  # a fault in a child process is the test's
    assert (child.outcome, child.found_in_run) == ("found", 1)
    assert any(f.nodeid == "test_r.py::test_child" and f.kernel == "max_reduce_off_by_one" for f in result.findings)

    assert exit_status(result) == 1
    assert (tmp_path / "state" / "guard").read_text() == "1"  # FAULTHUNT_GUARD as the stress run had it
    assert any("guard mode in the reruns: FAULTHUNT_GUARD=1 (as the stress run had it)" in n for n in result.notes)
    # the typed document reads back, and the terminal never calls a test that did not fail clean
    doc = RunDir(run).sanitizer()
    assert doc is not None and [o.outcome for o in doc.outcomes] == [o.outcome for o in result.outcomes]
    assert doc.parallel == 3 and doc.complete
    show(result)
    shown = capsys.readouterr().out
    assert "not reproduced" in shown and "reproduced, sanitizer silent" in shown
    assert "no sanitizer errors" not in shown
    summary = (run / "sanitizer" / "sanitizer_summary.txt").read_text()
    assert "test_r.py::test_never  [memcheck]  not reproduced" in summary


@pytest.mark.slow
def test_runs_stop_at_the_first_finding_unless_every_run_is_asked_for(tmp_path, project):
    run = stress_run(tmp_path, project, [("test_r.py::test_third", "test_r.py::test_third")], {})
    # no rate recorded: --until-found runs until the fault shows, one process: exactly 3 runs
    result = run_sanitize(run, env=env_for(tmp_path, "a"), until_found=True, quiet=True)
    (o,) = result.outcomes
    assert (o.outcome, o.found_in_run, o.started, o.planned) == ("found", 3, 3, None)
    assert runs_of(tmp_path, "test_third") == 3
    assert o.text.startswith("found in run 3: Invalid __global__ write (out of bounds) in kernel max_reduce_off_by_one")
    # --keep-going: every run of --count, the rate under the sanitizer
    result = run_sanitize(run, env=env_for(tmp_path, "b"), count=4, keep_going=True, quiet=True)
    (o,) = result.outcomes
    assert (o.outcome, o.found_in_run, o.runs, o.finding_runs) == ("found", 3, 4, 1)
    assert o.text.startswith("found in run 3 (in 1 of 4 runs): Invalid __global__ write")
    assert [t["run"] for t in result.tests] == [1, 2, 3, 4]


@pytest.mark.slow
def test_parallel_runs_are_alive_at_once(tmp_path, project):
    """Each run passes only if all three are alive together: -n 3 really runs three at once."""
    run = stress_run(tmp_path, project, [("test_r.py::test_together", "test_r.py::test_together")], {})
    result = run_sanitize(run, env=env_for(tmp_path, SUITE_TOGETHER="3"), count=3, parallel=3, quiet=True)
    (o,) = result.outcomes
    assert (o.outcome, o.runs) == ("not_reproduced", 3), o.text


@pytest.mark.slow
def test_a_finding_stops_the_tests_other_runs(tmp_path, project):
    run = stress_run(tmp_path, project, [("test_r.py::test_slow_third", "test_r.py::test_slow_third")], {})
    t0 = time.monotonic()
    result = run_sanitize(run, env=env_for(tmp_path), until_found=True, parallel=2, quiet=True)
    (o,) = result.outcomes
    # two runs pass; the third to run the test sleeps, the other lane slot goes on starting runs,
    # and the fourth fails while the third is still going: the third is stopped
    assert (o.outcome, o.started, o.finding_runs, o.cancelled_runs, o.stopped) == ("found", 4, 1, 1, "found")
    assert [t["cancelled"] for t in result.tests].count("found") == 1
    assert time.monotonic() - t0 < 120  # only against a hang: the stopped run is not waited for


@pytest.mark.slow
def test_base_ids_and_a_single_rerun_are_said_honestly(tmp_path, project, capsys, monkeypatch):
    run = stress_run(tmp_path, project, [("test_r.py::test_step[2-3]", "test_r.py::test_step")],
                     {"test_r.py::test_step": (1, 3)})
    monkeypatch.chdir(tmp_path)  # a run given by a relative path: every path handed on is absolute
    result = run_sanitize(run.relative_to(tmp_path), env=env_for(tmp_path), ids="base", count=1, quiet=True)
    (o,) = result.outcomes
    assert (o.outcome, o.runs, o.id_mode, o.ids) == ("not_reproduced", 1, "base", ["test_r.py::test_step"])
    assert o.text.startswith("not reproduced in 1 run: a rate above 95% is unlikely (95% confidence)")
    argv = invocations(tmp_path)[-1]
    assert "--count" not in argv and "--faulthunt-id=test_r.py::test_step" in argv
    assert exit_status(result) == 0
    show(result)
    out = capsys.readouterr().out
    assert "did not come back" in out and "no sanitizer errors" not in out


@pytest.mark.slow
def test_a_sanitizer_that_cannot_follow_children_says_so(tmp_path, project):
    run = stress_run(tmp_path, project, [("test_r.py::test_child", "test_r.py::test_child")], {})
    old = DATA / "sanitizer" / "help"
    # 2022.1 tracks only the application by default: faulthunt asks for all processes
    result = run_sanitize(run, env=env_for(tmp_path, help_file=old / "help-2022.1.0-built-from-docs.txt"), quiet=True)
    assert result.outcomes[0].outcome == "found"
    assert invocations(tmp_path)[-1][invocations(tmp_path)[-1].index("--target-processes") + 1] == "all"
    # 2020.1.0 has no --target-processes: the child's fault is not seen, and the outcome says why
    result = run_sanitize(run, env=env_for(tmp_path, help_file=old / "help-2020.1.0-built-from-docs.txt"), quiet=True)
    (o,) = result.outcomes
    assert o.outcome == "not_reproduced"
    assert "cannot follow the test's child processes" in o.text


def _span(nodeid: str, t: float, outcome: str) -> list[dict]:
    common = {"nodeid": nodeid, "base_nodeid": nodeid, "worker": "gw0", "pid": 100}
    return [{"event": "start", **common, "t": t, "t_mono": t},
            {"event": "end", **common, "t": t + 0.5, "t_mono": t + 0.5, "outcome": outcome}]


@pytest.mark.slow
def test_with_predecessors_replays_the_workers_sequence_in_its_order(tmp_path, project):
    # the stress worker ran the polluter, a bystander, then the victim: the reverse of the file's
    # (collection) order, so only an explicit order brings the failure back
    events = ([{"event": "worker", "worker": "gw0", "pid": 100, "ppid": 1, "t": 0.5, "t_mono": 0.5}]
              + _span("test_r.py::test_z_polluter", 1, "passed") + _span("test_r.py::test_a_bystander", 2, "passed")
              + _span("test_r.py::test_victim", 3, "failed"))
    run = stress_run(tmp_path, project, [("test_r.py::test_victim", "test_r.py::test_victim")],
                     {"test_r.py::test_victim": (1, 1)}, events=events)
    alone = run_sanitize(run, env=env_for(tmp_path), quiet=True)
    (o,) = alone.outcomes
    assert o.outcome == "not_reproduced" and "2 test(s) ran before it in its worker: try --with-predecessors" in o.text
    result = run_sanitize(run, env=env_for(tmp_path), with_predecessors=True, quiet=True)
    (o,) = result.outcomes
    assert (o.outcome, o.predecessors, o.order_kept) == ("found", 2, True)
    (t,) = result.tests
    assert [n for n, _ in t["tests"]] == ["test_r.py::test_z_polluter", "test_r.py::test_a_bystander",
                                          "test_r.py::test_victim"]
    assert t["tests"][-1][1] == "failed" and result.findings[0].nodeid == "test_r.py::test_victim"
    argv = invocations(tmp_path)[-1]
    assert "no:randomly" in argv and any(a.startswith("--faulthunt-order=") for a in argv)


@pytest.mark.slow
def test_the_budget_stops_everything(tmp_path, project):
    run = stress_run(tmp_path, project, [("test_r.py::test_never", "test_r.py::test_never")], {})
    t0 = time.monotonic()
    result = run_sanitize(run, env=env_for(tmp_path, STANDIN_SLEEP="30"), until_found=True, parallel=2,
                          budget=2.0, quiet=True)
    assert time.monotonic() - t0 < 60  # the runs going were stopped, not waited for
    (o,) = result.outcomes
    assert (o.outcome, o.stopped, o.cancelled_runs) == ("not_checked", "budget", 2)
    assert "every run was stopped before it ended (budget)" in o.text and "stopped by the budget" in o.text
    assert exit_status(result) == 4


def test_a_hostile_recorded_id_is_refused_before_anything_runs(tmp_path, project):
    run = stress_run(tmp_path, project, [("--basetemp=/tmp/victim", "--basetemp=/tmp/victim")], {})
    with pytest.raises(UsageError, match="is not a test node id") as err:
        run_sanitize(run, env=env_for(tmp_path), quiet=True)
    # it says where the id came from: the run (it said "from the command line", which named none)
    assert f"(from the run {run.resolve()})" in err.value.message
    assert not (tmp_path / "argv.jsonl").exists() or all("--basetemp" not in " ".join(a) for a in invocations(tmp_path))


# --- the pure parts -------------------------------------------------------------------------------

@pytest.mark.parametrize("nodeid,split", [
    ("t.py::a[f32-3-50]", ("t.py::a[f32]", 50)), ("t.py::a[2-5]", ("t.py::a", 5)),
    ("t.py::a[a b-2-3]", ("t.py::a[a b]", 3)), ("t.py::a[9-3]", ("t.py::a[9-3]", None)),
    ("t.py::a", ("t.py::a", None)), ("t.py::a[1-" + "9" * 5000 + "]", ("t.py::a[1-" + "9" * 5000 + "]", None)),
])
def test_split_repeat(nodeid, split):
    assert split_repeat(nodeid) == split


def test_planned_runs_come_from_the_stress_rate():
    n, why = planned_runs(None, False, 1, 8)
    assert n == 23 and "12.5% failure rate (1 of 8 runs in the stress run) with 95% confidence" in why
    assert planned_runs(7, True, 1, 8)[0] == 7            # --count wins, --until-found still stops
    assert planned_runs(None, True, 1, 8) == (None, "until found (--until-found), within the budget")
    assert planned_runs(None, False, None, None)[0] == 1  # nothing known: one run, said
    assert planned_runs(None, False, 5, 5) == (1, "one run: it failed every run of the stress run (5 of 5)")


def test_rate_ruled_out_reads_as_the_issue_says():
    assert ruled_out_text(41) == "a rate above 7% is unlikely (95% confidence)"
    assert ruled_out_text(1) == "a rate above 95% is unlikely (95% confidence)"
    for k in (1, 5, 23, 41, 300):
        assert (1 - rate_ruled_out(k)) ** k == pytest.approx(0.05)


def test_exact_ids_need_pytest_repeat_and_say_which():
    rec = Recorded("t.py::a[f]", ("t.py::a[f-7-40]", "t.py::a[f-9-40]"), 2, 40)
    (t,) = plan_targets([rec])
    assert (t.mode, t.ids, t.count_for(t.selection(2))) == ("exact", rec.exact, 40)
    assert t.selection(3) == ("t.py::a[f-7-40]",) and "with --count 40" in t.why
    (b,) = plan_targets([rec], have_repeat=False)
    assert (b.mode, b.ids, b.count_for(b.selection(1))) == ("base", ("t.py::a[f]",), None)
    assert "pytest-repeat is not installed" in b.why
    (b,) = plan_targets([rec], ids_mode="base")
    assert b.why == "the base id (--ids base)"
    (n,) = plan_targets([Recorded("t.py::b")])
    assert n.mode == "base" and "no repeat step was recorded" in n.why


def _result(run: int, state: str, **kw: object) -> RunResult:
    tests = {"passed": (("t.py::a", "passed"),), "failed": (("t.py::a", "failed"),),
             "skipped": (("t.py::a", "skipped"),)}.get(state, ())
    fields: dict = {"tests": tests}
    if state == "found":
        fields["findings"] = tuple(reduce_records(parse_text((H200 / "san_memcheck_oob1.txt").read_text())))
    fields.update(kw)
    return RunResult(run, "t.py::a", "memcheck", run, ("t.py::a",), **fields)


def test_outcomes_from_run_states():
    target = Target("t.py::a", ("t.py::a",), "base", "", 10, "", failures=1, runs=10)
    o = outcome_for(target, "memcheck", [_result(1, "passed"), _result(2, "failed"), _result(3, "found"),
                                         _result(4, "x", cancelled="found")], stopped="found", tools_run=["memcheck"])
    assert (o.outcome, o.found_in_run, o.runs, o.failed_runs, o.cancelled_runs) == ("found", 3, 3, 1, 1)
    assert o.text == ("found in run 3: Invalid __global__ write (out of bounds) in kernel max_reduce_off_by_one "
                      "at faults.cu:18")
    o = outcome_for(target, "memcheck", [_result(i, "passed") for i in range(1, 30)] + [_result(30, "skipped")],
                    stopped="runs", tools_run=["memcheck"])
    assert (o.outcome, o.runs, o.not_checked_runs) == ("not_reproduced", 29, 1)
    assert "the stress run failed 1 of 10 (10%), a rate these runs make unlikely" in o.text
    o = outcome_for(target, "memcheck", [_result(1, "x", timed_out=True)], stopped="runs", tools_run=["memcheck"])
    assert o.outcome == "timed_out"
    o = outcome_for(target, "memcheck", [_result(1, "x", tool_error="no GPU")], stopped="runs", tools_run=["memcheck"])
    assert (o.outcome, o.text) == ("not_checked", "not checked: no GPU")
    o = outcome_for(target, "memcheck", [_result(1, "x", exit_status=-11)], stopped="runs", tools_run=["memcheck"])
    assert o.outcome == "reproduced_silent"  # no span, killed by a signal: a crash is a failure


def test_silent_hint_names_the_tools_not_run():
    assert silent_hint(["memcheck"]).startswith("racecheck sees shared-memory data races; initcheck sees")
    assert "none of the four tools sees it" in silent_hint(["memcheck", "racecheck", "initcheck", "synccheck"])


def test_ids_reach_pytest_last_and_as_data(tmp_path):
    argv = pytest_argv(["t.py::a[-x-2-3]"], tmp_path, count=3, pidfile=tmp_path / "p")
    assert argv[-3:] == ["--faulthunt-id=t.py::a[-x-2-3]", "--", "t.py::a"]
    assert argv[argv.index("--count") + 1] == "3"
    with pytest.raises(UsageError):
        pytest_argv(["--junitxml=/tmp/victim"], tmp_path)


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("10m", 600), ("1.5h", 5400),
                                          ("none", None), ("0", None)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_options_say_the_fix():
    with pytest.raises(UsageError, match="10m"):
        parse_duration("ten minutes")
    for bad in ({"count": 0}, {"parallel": 0}, {"budget": -1.0}, {"ids": "some"}, {"tool": "x"},
                {"until_found": True, "keep_going": True}):
        with pytest.raises(UsageError) as err:
            srun.SanitizeOptions(**bad).check()  # type: ignore[arg-type]
        assert err.value.fix


def test_guard_mode_follows_the_environment_else_the_stress_run():
    notes: list[str] = []
    env: dict[str, str] = {}
    srun._guard(env, RunInfo(options={"guard": "100,side=left"}), notes)
    assert env == {"FAULTHUNT_GUARD": "100,side=left"} and "as the stress run had it" in notes[0]
    env = {"FAULTHUNT_GUARD": "1"}
    srun._guard(env, RunInfo(options={"guard": "100"}), notes)
    assert env == {"FAULTHUNT_GUARD": "1"} and "from the environment" in notes[1]
    srun._guard(env := {}, RunInfo(), notes)
    assert env == {}


def test_reports_show_each_outcome_and_never_a_clean_bill(tmp_path, project):
    from faulthunt.report import build_model, render
    from faulthunt.report.github import sanitize_summary

    run = stress_run(tmp_path, project, [("test_r.py::test_never", "test_r.py::test_never")],
                     {"test_r.py::test_never": (1, 8)})
    target = plan_targets([Recorded("test_r.py::test_never", failures=1, runs=8)])[0]
    outcome = outcome_for(target, "memcheck", [_result(i, "passed") for i in range(1, 24)],
                          stopped="runs", tools_run=["memcheck"])
    write_json_atomic(run / "sanitizer" / "sanitizer.json", {
        "findings": [], "records": 0, "tests": [], "complete": True, "outcomes": [outcome.to_json()]})
    model = build_model(run)
    md, html = render(model, "md"), render(model, "html")
    for text in (md, html, sanitize_summary(model)):
        assert "reported no errors" not in text
        assert "not reproduced in 23 runs: a rate above 12% is unlikely (95% confidence)" in text
    assert "| test_r.py::test_never | memcheck | not reproduced | 23 |" in md
    assert 'id="sanitizer-outcomes-table"' in html
    assert any("--until-found" in step for step in model.next_steps)


def test_the_planted_suites_random_mode_draws_afresh_each_run():
    """FAULTHUNT_PLANT_SEED=random: the GPU check's intermittent fault (scripts/gpu/sanitize_intermittent.sh)
    fires about 1 run in 8 whatever the id, so a rerun of the recorded id is a fresh draw."""
    from faulthunt.kernels.catalog import fires

    hits = sum(fires("kernels/suite/test_planted.py::test_planted[wild_write-cuda-3-40]", 8, None)
               for _ in range(8000))
    assert 800 < hits < 1200  # 1000 expected; these bounds are 7 standard deviations out
    assert len({fires("k", 8, 3) for _ in range(50)}) == 1  # a seed stays deterministic
