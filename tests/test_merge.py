"""faulthunt merge on two hand-made runner run directories (schema of docs/rundir.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from faulthunt.cli import main
from faulthunt.errors import UsageError
from faulthunt.merge import PID_STRIDE, merge_runs, rewrite_record
from faulthunt.rundir import append_jsonl, write_json_atomic


def make_runner(root: Path, host: str, fail: bool, run_id: str | None = None) -> Path:
    run = root / host
    (run / "events").mkdir(parents=True)
    write_json_atomic(run / "identity.json", {"host": host, "gpus": [{"index": 0, "pci": "00000000:00:06.0",
                                                                     "uuid": f"GPU-{host}", "cc": "9.0"}]})
    write_json_atomic(run / "run.json", {"id": run_id or f"id-{host}", "argv": ["faulthunt", "stress"],
                                         "started": 100.0, "ended": 200.0, "exit_status": int(fail)})
    ev = run / "events" / "gw0-4242.jsonl"
    for i in range(2):
        nodeid = f"t.py::test_a[{i + 1}-2]"
        base = dict(nodeid=nodeid, base_nodeid="t.py::test_a", worker="gw0", pid=4242)
        append_jsonl(ev, {"event": "start", **base, "t": 100.0 + i, "t_mono": 10.0 + i})
        outcome = "failed" if (fail and i == 1) else "passed"
        append_jsonl(ev, {"event": "end", **base, "t": 100.5 + i, "t_mono": 10.5 + i,
                          "outcome": outcome, "duration": 0.5, "longrepr": "boom" if outcome == "failed" else None})
    with open(ev, "a") as f:
        f.write('{"event": "start", "nodeid": "torn')  # a worker killed mid-write
    if fail:
        append_jsonl(run / "xid.jsonl", {"xid": 31, "pid": 4242, "pci": "0000:00:06", "ts": 11.2,
                                         "message": "MMU Fault", "category": "mmu", "raw": "NVRM: Xid ..."})
    return run


def test_merge_two_runners(tmp_path: Path) -> None:
    a = make_runner(tmp_path, "node-a", fail=True)
    b = make_runner(tmp_path, "node-b", fail=False)
    info = merge_runs([a, b], tmp_path / "merged")
    out = tmp_path / "merged"
    assert [r["runner"] for r in info["runners"]] == ["node-a", "node-b"]
    assert info["runners"][0]["records"]["skipped"] == 1
    events = sorted((out / "events").iterdir())
    assert [e.name for e in events] == ["node-a-gw0-4242.jsonl", "node-b-gw0-4242.jsonl"]
    rec = json.loads(events[1].read_text().splitlines()[0])
    assert rec["worker"] == "node-b/gw0" and rec["runner"] == "node-b"
    assert rec["pid"] == 2 * PID_STRIDE + 4242 and rec["host_pid"] == 4242
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tests_run"] == 4
    assert [f["worker"] for f in summary["failures"]] == ["node-a/gw0"]
    # the Xid of node-a pid 4242 is attributed to node-a's worker, never to node-b's same pid
    assert summary["xids"] and summary["xids"][0]["worker"] == "node-a/gw0"
    assert (out / "runners" / "node-a" / "run.json").exists()
    run = json.loads((out / "run.json").read_text())
    assert [s["id"] for s in run["merged_from"]] == ["id-node-a", "id-node-b"]


def test_same_host_twice_gets_distinct_labels(tmp_path: Path) -> None:
    # two runs on one host: different run ids (the same id would be the same run, merged once)
    a = make_runner(tmp_path / "1", "node", fail=False, run_id="id-1")
    b = make_runner(tmp_path / "2", "node", fail=False, run_id="id-2")
    info = merge_runs([a, b], tmp_path / "m")
    assert [r["runner"] for r in info["runners"]] == ["node", "node-2"]


def test_refusals(tmp_path: Path) -> None:
    a = make_runner(tmp_path, "node-a", fail=False)
    with pytest.raises(Exception) as info:
        merge_runs([a, tmp_path / "missing"], tmp_path / "m")
    assert getattr(info.value, "fix", None)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(UsageError):
        merge_runs([a], tmp_path / "full")


@pytest.mark.parametrize("rec,worker,pid", [
    ({"worker": "gw1", "pid": 7}, "r/gw1", PID_STRIDE + 7),
    ({"worker": "r/gw1", "pid": None}, "r/gw1", None),
    ({"pid": True}, None, True),
    ({}, None, None),
])
def test_rewrite_record(rec: dict, worker: str | None, pid: object) -> None:
    out = rewrite_record(rec, "r", 1)
    assert out.get("worker") == worker and out.get("pid") == pid and out["runner"] == "r"


def test_cli_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = make_runner(tmp_path, "node-a", fail=True)
    b = make_runner(tmp_path, "node-b", fail=False)
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "m")]) == 1
    assert "1 failures" in capsys.readouterr().out


def test_the_same_run_twice_is_merged_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: `merge A A` counted A's tests twice. By run id: a copy of A is still A."""
    import shutil

    a = make_runner(tmp_path, "node-a", fail=True)
    b = make_runner(tmp_path, "node-b", fail=False)
    copy = tmp_path / "download-2" / "node-a"
    shutil.copytree(a, copy)
    assert main(["merge", str(a), str(b), str(a), str(copy), "-o", str(tmp_path / "m")]) == 1
    out = capsys.readouterr().out
    assert out.count("skipped ") == 2 and "the same run (id id-node-a)" in out
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert summary["tests_run"] == 4 and len(summary["failures"]) == 1
    merge = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert [r["runner"] for r in merge["runners"]] == ["node-a", "node-b"]
    assert [d["same_as"] for d in merge["duplicates"]] == [str(a.resolve())] * 2


@pytest.mark.parametrize("where", ["file", "under-file", "inside-input"])
def test_bad_out_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    a = make_runner(tmp_path, "node-a", fail=False)
    (tmp_path / "f.txt").write_text("keep")
    out = {"file": tmp_path / "f.txt", "under-file": tmp_path / "f.txt" / "m",
           "inside-input": a / "merged"}[where]
    assert main(["merge", str(a), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "fix:" in err and "Traceback" not in err
    assert (tmp_path / "f.txt").read_text() == "keep" and not (a / "merged").exists()


def test_merged_slots_stay_apart_and_reproduce_names_the_inputs(tmp_path: Path) -> None:
    """User defect 12: gw0 of two runners are two slots (each runner's restarts its own), and the
    report's Reproduce section gives each input's command, never the merge command."""
    from faulthunt.report import build_model

    runs = []
    for host in ("node-a", "node-b"):
        run = make_runner(tmp_path, host, fail=host == "node-a")
        for worker, slot in (("gw0", "gw0"), ("gw1", "gw1"), ("gw2", "gw0")):  # gw2 restarted gw0
            append_jsonl(run / "controller.jsonl", {"event": "worker_up", "worker": worker,
                                                    "slot": slot, "t": 100.0})
        runs.append(run)
    write_json_atomic(runs[1] / "run.json", {"id": "id-node-b", "argv": ["faulthunt", "stress", "-n", "2",
                                                                        "tests/gpu"]})
    merge_runs(runs, tmp_path / "merged")
    workers = json.loads((tmp_path / "merged" / "summary.json").read_text())["workers"]
    assert workers["slots"] == 4 and workers["restarts"] == 2
    assert workers["slot_of"]["node-b/gw2"] == "node-b/gw0"
    model = build_model(tmp_path / "merged")
    assert model.reproduce == ("# on node-a\nfaulthunt stress\n"
                               "# on node-b\nfaulthunt stress -n 2 tests/gpu")
    assert "merge" not in model.reproduce


def test_a_copy_that_lost_its_run_json_is_still_the_same_run(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    a = make_runner(tmp_path, "node-a", fail=True)
    copy = tmp_path / "download-2" / "node-a"
    shutil.copytree(a, copy)
    (copy / "run.json").unlink()
    assert main(["merge", str(copy), str(a), "-o", str(tmp_path / "m")]) == 1
    out = capsys.readouterr().out
    assert f"skipped {a.resolve()}: the same run (the same worker records) as {copy.resolve()}" in out
    summary = json.loads((tmp_path / "m" / "summary.json").read_text())
    assert summary["tests_run"] == 2  # once, not twice
    merge = json.loads((tmp_path / "m" / "merge.json").read_text())
    assert [d["by"] for d in merge["duplicates"]] == ["records"]
