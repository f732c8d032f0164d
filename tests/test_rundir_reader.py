"""faulthunt.rundir.RunDir and the typed run documents of faulthunt.records (docs/rundir.md)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from faulthunt.records.documents import RunInfo, Summary, XidLine
from faulthunt.records.events import (Crash, Hang, OtherEvent, Recycle, SessionFinish, StickyError,
                                      TestEnd, TestStart, WorkerHello, decode_controller_event,
                                      decode_worker_event)
from faulthunt.rundir import JsonlWriter, Layout, RunDir, RunTail, write_run_info

DATA = Path(__file__).parent / "data"
#: every committed run directory (real H200 runs and hand-made samples)
COMMITTED = sorted({p.parent for name in ("run.json", "summary.json", "controller.jsonl")
                    for p in DATA.rglob(name)})


def read_everything(run: RunDir) -> None:
    run.run_info(), run.identity(), run.env(), run.summary(), run.mapping(), run.sanitizer()
    run.kmsg_cursor(), run.kmsg_text(), run.spans(), run.xids(), run.skipped_lines()
    run.sanitizer_run().spans()


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(DATA)))
def test_committed_runs_read_without_problems(path: Path) -> None:
    run = RunDir(path)
    read_everything(run)
    assert run.problems() == ()
    if (path / Layout.SUMMARY).exists():
        assert run.summary() is not None


def test_committed_summary_round_trips_what_readers_use() -> None:
    path = DATA / "report" / "h200_stress_run"
    raw = json.loads((path / Layout.SUMMARY).read_text())
    doc = RunDir(path).summary()
    assert doc is not None
    again = doc.to_json()
    for key in ("tests_run", "passed", "outcomes", "stopped_early", "exit_status"):
        assert again[key] == raw[key]
    # fields added since (slots, restarts, lost) read as their defaults
    assert {k: again["workers"][k] for k in raw["workers"]} == raw["workers"]
    assert [f["nodeid"] for f in again["failures"]] == [f["nodeid"] for f in raw["failures"]]
    assert again["by_test"] == raw["by_test"]
    for got, want in zip(again["xids"], raw["xids"]):
        assert {k: v for k, v in want.items() if v is not None} == got


def write_events(run: Path, name: str, records: list[dict]) -> None:
    (run / "events").mkdir(parents=True, exist_ok=True)
    (run / "events" / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_repeated_test_keeps_each_run() -> None:
    events = [TestStart(nodeid="t::a", worker="gw0", pid=1, t=1.0, t_mono=1.0),
              TestEnd(nodeid="t::a", worker="gw0", pid=1, t=2.0, t_mono=2.0, outcome="failed"),
              TestStart(nodeid="t::a", worker="gw0", pid=1, t=3.0, t_mono=3.0),
              TestEnd(nodeid="t::a", worker="gw0", pid=1, t=4.0, t_mono=4.0, outcome="passed")]
    from faulthunt.records.run import assemble_spans

    spans = assemble_spans(events)
    assert [(s.key, s.outcome) for s in spans] == [((1, "t::a", 1.0), "failed"),
                                                    ((1, "t::a", 3.0), "passed")]


def test_every_event_kind_round_trips() -> None:
    sticky = StickyError(code=700, name="cudaErrorIllegalAddress", sticky=True)
    for ev in (WorkerHello(worker="gw0", pid=1, ppid=0, recycle=True),
               TestStart(nodeid="t::a", pid=1, device="0"),
               TestEnd(nodeid="t::a", pid=1, outcome="failed", sticky_cuda_error=sticky),
               Hang(nodeid="t::a", pid=1, timeout=5.0, process_tree=[]),
               Recycle(before="t::b", poisoned_by="t::a", error=sticky)):
        line = msgspec.json.encode(ev)
        assert decode_worker_event(line) == (ev, None)
        assert json.loads(line)["event"] == type(ev).__struct_config__.tag
    for ev in (Crash(nodeid="t::a", kind="hung", signal=9), SessionFinish(exitstatus=1)):
        assert decode_controller_event(msgspec.json.encode(ev)) == (ev, None)


def test_an_unknown_kind_is_kept_not_damage() -> None:
    ev, why = decode_worker_event(b'{"event": "guard_hit", "pid": 3, "address": 4096}')
    assert why is None and isinstance(ev, OtherEvent)
    assert ev.event == "guard_hit" and ev.data["address"] == 4096


@pytest.mark.parametrize(("line", "why"), [
    (b'{"event": "start", "pid": [1], "nodeid": "t::a"}', "$.pid"),
    (b'{"event": "start"}', "nodeid"),
    (b"[1, 2]", "object"),
    (b'{"event": "end", "nodeid": "t::a", "t": "noon"}', "$.t"),
    (b"\x00\xff junk", "malformed"),
    (b'{"event": "start", "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested"),
])
def test_a_bad_worker_line_says_why(line: bytes, why: str) -> None:
    ev, got = decode_worker_event(line)
    assert ev is None and why in str(got)


def test_bad_lines_are_counted_and_named(tmp_path: Path) -> None:
    write_events(tmp_path, "gw0-1.jsonl", [{"event": "start", "nodeid": "t::a", "pid": 1}])
    with open(tmp_path / "events" / "gw0-1.jsonl", "a") as fh:
        fh.write('{"event": "end", "nodeid": "t::a", "pid": [1]}\n{"event": "end", "nod')
    run = RunDir(tmp_path)
    assert len(run.worker_events()) == 1
    assert run.skipped_lines()["events"] == 2
    named = [(p.file, p.line) for p in run.problems()]
    assert named == [("events/gw0-1.jsonl", 2), ("events/gw0-1.jsonl", 3)]
    assert "torn last line" in run.problems()[1].why
    assert [s.outcome for s in run.spans()] == ["crashed"]


def test_a_damaged_summary_reads_as_none_and_is_named(tmp_path: Path) -> None:
    (tmp_path / Layout.SUMMARY).write_text('{"tests_run": 3, "failures": "x"}')
    run = RunDir(tmp_path)
    assert run.summary() is None
    (problem,) = run.problems()
    assert problem.file == Layout.SUMMARY and "$.failures" in problem.why


def test_run_json_keeps_its_good_fields(tmp_path: Path) -> None:
    (tmp_path / Layout.RUN).write_text('{"id": "r1", "cwd": 5, "pytest_args": ["a"]}')
    run = RunDir(tmp_path)
    info = run.run_info()
    assert info is not None and (info.id, info.cwd, info.pytest_args) == ("r1", None, ["a"])
    assert "cwd" in run.problems()[0].why


def test_text_stays_inside_the_run(tmp_path: Path) -> None:
    (tmp_path / "hangs").mkdir()
    (tmp_path / "hangs" / "a.txt").write_text("stack")
    (tmp_path.parent / "secret.txt").write_text("no")
    run = RunDir(tmp_path)
    assert run.text("hangs/a.txt") == "stack"
    assert run.text("../secret.txt") is None and run.text("/etc/passwd") is None
    assert len(run.problems()) == 2


def test_run_info_is_built_in_one_place(tmp_path: Path) -> None:
    info = RunInfo.begin("r1", kind="stress", cwd="/w", pytest_args=["t.py"],
                         options={"run_dir": tmp_path, "gpus": ("0", "1")}, started=5.0, argv=["x"])
    write_run_info(tmp_path, info.finished(exit_status=1, pytest_exit_status=1, ended=6.0))
    raw = json.loads((tmp_path / Layout.RUN).read_text())
    assert raw["options"] == {"run_dir": str(tmp_path), "gpus": ["0", "1"]}
    assert (raw["kind"], raw["exit_status"], raw["ended"], raw["argv"]) == ("stress", 1, 6.0, ["x"])
    assert RunDir(tmp_path).run_info() == info.finished(exit_status=1, pytest_exit_status=1, ended=6.0)


def test_writer_escapes_what_utf8_cannot_hold(tmp_path: Path) -> None:
    with JsonlWriter(tmp_path / "e.jsonl") as w:
        w.write(TestStart(nodeid="t::\udcff", pid=1))
    run = RunDir(tmp_path)
    assert run._jsonl(tmp_path / "e.jsonl", decode_worker_event, "e")[0].nodeid == "t::\udcff"


def test_tail_reads_only_whole_new_lines(tmp_path: Path) -> None:
    write_events(tmp_path, "gw0-1.jsonl", [{"event": "start", "nodeid": "t::a", "pid": 1}])
    tail = RunTail(tmp_path)
    assert [type(e) for e in tail.poll()[0]] == [TestStart]
    with open(tmp_path / "events" / "gw0-1.jsonl", "a") as fh:
        fh.write('{"event": "end", "nodeid": "t::a", "pid": 1, "outcome": "passed"}\n{"event"')
    assert [type(e) for e in tail.poll()[0]] == [TestEnd]
    assert tail.poll() == ([], [])


def test_xid_lines_keep_the_kernel_fields() -> None:
    line = (DATA / "report" / "h200_stress_run" / Layout.XID).read_text().splitlines()[0]
    doc = msgspec.json.decode(line, type=XidLine)
    assert doc.to_json() == {k: v for k, v in json.loads(line).items() if v is not None}


def test_summary_defaults_are_an_empty_run() -> None:
    s = Summary()
    assert (s.tests_run, s.failures, s.found_something()) == (0, [], False)
