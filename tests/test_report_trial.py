"""Report and merge defects found trying main as a new user (real dumps, hand-made run dirs)."""
from __future__ import annotations

from pathlib import Path

from faulthunt.merge import merge_runs
from faulthunt.report.model import build_model, model_from_parts
from faulthunt.rundir import append_jsonl, write_json_atomic

DATA = Path(__file__).parent / "data" / "report" / "hangs_same"


def _hang_events(kind: str) -> tuple[list[dict[str, object]], dict[str, str | None]]:
    events: list[dict[str, object]] = []
    texts: dict[str, str | None] = {}
    for path in sorted(DATA.glob(f"*.{kind}.txt")):
        worker, pid, _n = path.name.split(".")[0].split("-")
        rel = f"hangs/{path.name}"
        events.append({"event": "hang", "nodeid": "test_s.py::test_hang", "worker": worker,
                       "pid": int(pid), "timeout": 3, kind.replace("-", ""): rel})
        texts[rel] = path.read_text()
    return events, texts


def test_real_dumps_of_workers_stuck_in_the_same_test_are_one_stack() -> None:
    """Defect 7: dumps differ only in faulthunt's watchdog thread, worker ids, start times."""
    for kind in ("py-spy", "faulthandler"):
        events, texts = _hang_events(kind)
        assert len(events) == 3
        m = model_from_parts(run_id="r", run={}, identity={}, summary={"tests_run": 3}, mapping=[],
                             sanitizer=None, events=events, controller=[], xids=[],
                             hang_texts=texts, notes=[])
        first, *rest = m.hangs
        assert first["stack"] and first["same_stack_in"] == ["gw1", "gw2"], kind
        assert [h["same_as"] for h in rest] == ["gw0", "gw0"], kind


def test_a_different_frame_is_a_different_stack() -> None:
    events, texts = _hang_events("py-spy")
    rel = str(events[2]["pyspy"])
    texts[rel] = str(texts[rel]).replace("test_hang (test_s.py:17)", "test_hang (test_s.py:18)")
    m = model_from_parts(run_id="r", run={}, identity={}, summary={"tests_run": 3}, mapping=[],
                         sanitizer=None, events=events, controller=[], xids=[], hang_texts=texts,
                         notes=[])
    assert m.hangs[0]["same_stack_in"] == ["gw1"] and m.hangs[2]["stack"]


def _runner_with_hang(root: Path, host: str) -> Path:
    run = root / host
    (run / "events").mkdir(parents=True)
    (run / "hangs").mkdir()
    write_json_atomic(run / "identity.json", {"host": host})
    write_json_atomic(run / "run.json", {"id": f"id-{host}", "argv": ["faulthunt", "stress"]})
    base = {"nodeid": "t.py::test_h", "base_nodeid": "t.py::test_h", "worker": "gw0", "pid": 4242}
    ev = run / "events" / "gw0-4242.jsonl"
    append_jsonl(ev, {"event": "start", **base, "t": 1.0, "t_mono": 1.0})
    append_jsonl(ev, {"event": "end", **base, "t": 4.0, "t_mono": 4.0, "outcome": "hung",
                      "longrepr": "hung: exceeded the 3s per-test timeout"})
    append_jsonl(ev, {"event": "hang", **base, "t": 4.0, "timeout": 3,
                      "pyspy": "hangs/gw0-4242-1.py-spy.txt"})
    (run / "hangs" / "gw0-4242-1.py-spy.txt").write_text(
        f'Thread 4242 (idle): "MainThread"\n    stuck_on_{host.replace("-", "_")} (t.py:3)\n')
    return run


def test_merged_report_shows_each_inputs_hang_stack(tmp_path: Path) -> None:
    """Defect 1: the dumps are under runners/<runner>/hangs/ in the merge; the report finds them."""
    a, b = _runner_with_hang(tmp_path, "node-a"), _runner_with_hang(tmp_path, "node-b")
    merge_runs([a, b], tmp_path / "M")
    hangs = build_model(tmp_path / "M").hangs
    assert [h["why_no_stack"] for h in hangs] == [None, None]
    assert sorted(str(h["stack"]).splitlines()[1].strip() for h in hangs) == [
        "stuck_on_node_a (t.py:3)", "stuck_on_node_b (t.py:3)"]


def test_run_merged_before_the_fix_still_finds_its_dumps(tmp_path: Path) -> None:
    """A merge made with the old paths (hangs/...) reads the dump from runners/<runner>/."""
    import json

    a = _runner_with_hang(tmp_path, "node-a")
    merge_runs([a], tmp_path / "M")
    for f in (tmp_path / "M" / "events").glob("*.jsonl"):
        f.write_text("".join(json.dumps({**r, "pyspy": r["pyspy"].split("/", 2)[2]} if "pyspy" in r
                                        else r) + "\n"
                             for r in map(json.loads, f.read_text().splitlines())))
    (hang,) = build_model(tmp_path / "M").hangs
    assert "stuck_on_node_a" in str(hang["stack"])


def _setup_error_run(root: Path) -> Path:
    """A run whose events say: one setup error, one plain failure, one crash."""
    run = root / "run"
    (run / "events").mkdir(parents=True)
    write_json_atomic(run / "run.json", {"id": "r", "argv": ["faulthunt", "stress"]})
    ev = run / "events" / "gw0-7.jsonl"
    for i, (name, outcome) in enumerate((("test_fail", "failed"), ("test_error", "error"))):
        base = {"nodeid": f"t.py::{name}", "base_nodeid": f"t.py::{name}", "worker": "gw0", "pid": 7}
        append_jsonl(ev, {"event": "start", **base, "t": i, "t_mono": i})
        append_jsonl(ev, {"event": "end", **base, "t": i + .5, "t_mono": i + .5, "outcome": outcome,
                          "longrepr": "RuntimeError: setup broke" if outcome == "error" else "assert 0"})
    return run


def test_setup_error_stays_error_in_every_view(tmp_path: Path) -> None:
    """Defect 3: summary, md, html, json and junit say error (not failed), worst first."""
    import json

    from faulthunt.report import render
    from faulthunt.summary import summarize_run

    run = _setup_error_run(tmp_path)
    summary = summarize_run(run)
    assert {f["nodeid"]: f["outcome"] for f in summary["failures"]} == {
        "t.py::test_fail": "failed", "t.py::test_error": "error"}
    write_json_atomic(run / "summary.json", summary)
    model = build_model(run)
    assert [f["outcome"] for f in model.failures] == ["error", "failed"]
    assert list(model.rate["outcomes"].items()) == [("error", 1), ("failed", 1)]
    assert "Outcomes: error 1, failed 1." in render(model, "md")
    assert "<p>Outcomes: error 1, failed 1.</p>" in render(model, "html")
    assert json.loads(render(model, "json"))["rate"]["outcomes"] == {"error": 1, "failed": 1}
    from faulthunt.report.junit import render as junit_render

    junit = junit_render(model)
    assert 'type="error"' in junit and 'type="failed"' in junit


def test_a_run_recorded_before_error_was_kept_apart_reads_error() -> None:
    failures = [{"nodeid": "a", "outcome": "failed"},
                {"nodeid": "b", "outcome": "failed", "phase": "setup/teardown"},
                {"nodeid": "c", "outcome": "crashed"}]
    m = model_from_parts(run_id="r", run={}, identity={}, summary={"tests_run": 3, "failures": failures},
                         mapping=[], sanitizer=None, events=[], controller=[], xids=[], hang_texts={},
                         notes=[])
    assert [f["outcome"] for f in m.failures] == ["crashed", "error", "failed"]
    assert list(m.rate["outcomes"]) == ["crashed", "error", "failed"]


def test_html_shows_control_characters_of_every_data_text_escaped() -> None:
    """Defect 6: ESC/BEL from a message, a stack, a note, a path never land raw in report.html."""
    import re

    from faulthunt.report import render

    bad = "\x1b[31mred\x1b[0m and\x07bell"
    failures = [{"nodeid": "t.py::test_x", "outcome": "failed", "message": f"AssertionError: {bad}",
                 "worker": f"gw0{bad}", "pid": 7}]
    events = [{"event": "hang", "nodeid": "t.py::test_h", "worker": "gw0", "pid": 7, "timeout": 1,
               "pyspy": "hangs/a.txt"}]
    m = model_from_parts(run_id="r", run={"argv": ["faulthunt", "stress", f"/tmp/{bad}"]},
                         identity={"host": bad}, summary={"tests_run": 1, "failures": failures,
                                                          "notes": [f"note {bad}"]},
                         mapping=[], sanitizer=None, events=events, controller=[], xids=[],
                         hang_texts={"hangs/a.txt": f'Thread 7 (idle): "MainThread"\n    f ({bad})\n'},
                         notes=[])
    html = render(m, "html")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", html)
    assert html.count("\\x1b[31mred\\x1b[0m and\\x07bell") >= 6  # message (short+full), worker, host, stack, note, path


def test_merged_report_names_the_run_path_host_pids_and_each_runners_notes(tmp_path: Path) -> None:
    """Defect 8: the sanitize hint names the merge by its path (quoted), pids show the host pid
    dmesg names too, each input's notes (its pytest-randomly seed) carry its runner."""
    import shlex

    from faulthunt.report import render
    from faulthunt.summary import summarize_run

    runs = []
    for host, seed in (("node-a", 11), ("node-b", 22)):
        run = _runner_with_hang(tmp_path, host)
        summary = summarize_run(run)
        summary["notes"] = [f"test order shuffled by pytest-randomly, seed {seed}"]
        write_json_atomic(run / "summary.json", summary)
        runs.append(run)
    out = tmp_path / "merged run"
    merge_runs(runs, out)
    model = build_model(out)
    md = render(model, "md")
    assert f"`faulthunt sanitize --run {shlex.quote(str(out))}`" in md
    assert "| 10004242 (host pid 4242) |" in md and "| 20004242 (host pid 4242) |" in md
    assert "pid 20004242 (host pid 4242), timeout" in md
    assert [n for n in model.notes if "seed" in n] == [
        "node-a: test order shuffled by pytest-randomly, seed 11",
        "node-b: test order shuffled by pytest-randomly, seed 22"]
    html = render(model, "html")
    assert "10004242 (host pid 4242)" in html


def test_one_of_one_interval_reads_the_same_in_every_view(tmp_path: Path) -> None:
    """Defect 10: 1 of 1 is 20.7%-100.0% in the headline, the Tests table and the stress table."""
    from rich.console import Console

    from faulthunt.report import render
    from faulthunt.report.terminal import failing_table
    from faulthunt.summary import summarize_run

    run = _setup_error_run(tmp_path)
    summary = summarize_run(run)
    write_json_atomic(run / "summary.json", summary)
    model = build_model(run)
    md = render(model, "md")
    assert "100.0% (20.7%-100.0%)" in md and "20.6%" not in md
    one = model_from_parts(run_id="r", run={}, identity={}, summary={"tests_run": 1, "failures": [
        {"nodeid": "t.py::a", "outcome": "failed"}]}, mapping=[], sanitizer=None, events=[],
        controller=[], xids=[], hang_texts={}, notes=[])
    assert one.rate["text"] == "1 of 1 runs failed, 95% interval 20.7%-100.0%"
    console = Console(width=200, record=True)
    console.print(failing_table(summary, ()))
    assert "20.7%-100.0%" in console.export_text()


def test_equal_rate_rows_are_ordered_by_severity() -> None:
    """Defect 10: a crashed test above an error above a plain failure, whatever their names."""
    from faulthunt.report.terminal import failing_table
    from faulthunt.summary import build_summary

    events = []
    for i, (name, outcome) in enumerate((("a_fail", "failed"), ("b_error", "error"),
                                         ("c_crash", None))):
        base = {"nodeid": f"t.py::{name}", "base_nodeid": f"t.py::{name}", "worker": "gw0", "pid": 7 + i}
        events.append({"event": "start", **base, "t": i, "t_mono": i})
        if outcome:
            events.append({"event": "end", **base, "t": i + .5, "t_mono": i + .5, "outcome": outcome})
    summary = build_summary(events, [], [])
    assert [r["base_nodeid"] for r in summary["by_test"]] == ["t.py::c_crash", "t.py::b_error",
                                                             "t.py::a_fail"]
    table = failing_table(summary, ())
    assert list(table.columns[0].cells) == ["t.py::c_crash", "t.py::b_error", "t.py::a_fail"]


def test_repeat_note_only_when_a_test_ran() -> None:
    """Defect 10: a -k that deselected every test, or nothing run: no "faulthunt repeated" note."""
    from faulthunt.summary import build_summary

    collected = {"event": "collected", "worker": "gw0", "pid": 7, "items": 0, "count": 3,
                 "repeated": {"TestCaseFunction": 4}}
    assert not [n for n in build_summary([collected], [], [])["notes"] if "repeated" in n]
    base = {"nodeid": "t.py::T::test_u[1-3]", "base_nodeid": "t.py::T::test_u", "worker": "gw0", "pid": 7}
    ran = [collected, {"event": "start", **base, "t": 0, "t_mono": 0},
           {"event": "end", **base, "t": 1, "t_mono": 1, "outcome": "passed"}]
    assert [n for n in build_summary(ran, [], [])["notes"] if "faulthunt repeated" in n]


def test_merged_report_environment_is_the_runners(tmp_path: Path) -> None:
    """A merge keeps each runner's identity under ``runners``: the report's environment shows
    them (one value where the runners agree, each runner's where they differ), not "-"."""
    runs = []
    for host, driver in (("node-a", "580.159.04"), ("node-b", "575.51.03")):
        run = _runner_with_hang(tmp_path, host)
        write_json_atomic(run / "identity.json", {"host": host, "python": "3.12.3", "driver": driver})
        runs.append(run)
    out = tmp_path / "merged"
    merge_runs(runs, out)
    env = build_model(out).environment
    assert env["host"] == "node-a: node-a; node-b: node-b"
    assert env["python"] == "3.12.3"
    assert env["driver"] == "node-a: 580.159.04; node-b: 575.51.03"
