"""What a new user's trial of main found in the reports (round 3), on one real stress run of a
small suite: a crash and a hang behind many assertion failures, skipped / xfailed / xpassed runs,
ids with control characters, a module that does not import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faulthunt.report import build_model, render

SUITE = {
    "test_many.py": """
        import os, time, pytest

        @pytest.mark.parametrize("i", range(32))
        def test_assert(i):
            assert i < 0, "plain failure"

        def test_zz_crash():
            os.abort()

        def test_zz_hang():
            time.sleep(60)

        @pytest.mark.parametrize("s", ["tab\\there", "cr\\rhere"], ids=["tab\\there", "cr\\rhere"])
        def test_ctrl(s):
            assert False

        def test_skip():
            pytest.skip("not here")

        @pytest.mark.xfail(reason="known")
        def test_xfail():
            assert False

        @pytest.mark.xfail(reason="known")
        def test_xpass():
            pass
        """,
    "test_broken.py": "import a_module_that_is_not_installed_xyz\n",
    # ids keep their control characters raw, as users who turn pytest's escaping off see them
    "pytest.ini": "[pytest]\ndisable_test_id_escaping_and_forfeit_all_rights_to_community_support = true\n",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One real run (-n 1, timeout 3 s); its run directory and the terminal output."""
    root = tmp_path_factory.mktemp("userfix")
    for name, body in SUITE.items():
        (root / name).write_text(textwrap.dedent(body))
    run_dir = root / "run"
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "stress", "-n", "1", "--timeout", "3",
                           "--run-dir", str(run_dir), "--xid-source", "none", "--ledger", "off",
                           "-p", "no:randomly", "."], cwd=root, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert (run_dir / "summary.json").exists(), proc.stdout + proc.stderr
    return run_dir, proc.stdout + proc.stderr


@pytest.mark.slow
def test_rates_leave_out_runs_that_could_not_fail(run: tuple[Path, str]) -> None:
    """Defect 4: skipped / xfailed / xpassed runs are said apart, never in a rate's denominator."""
    run_dir, out = run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["outcomes"]["xfailed"] == 1 and summary["outcomes"]["xpassed"] == 1
    assert summary["outcomes"]["skipped"] == 1
    assert [d["runs"] for d in summary["by_device"]] == [36]  # the per-GPU rate too
    m = build_model(run_dir)
    assert m.rate["failures"] == 36 and m.rate["runs"] == 36  # 32 + crash + hang + 2 ctrl
    assert "not counted: 1 skipped, 1 xfailed, 1 xpassed" in m.rate["text"]
    assert "36 of 36 runs" in m.headline
    assert "1 skipped, 1 xfailed, 1 xpassed" in out


@pytest.mark.slow
def test_failures_table_puts_crashes_and_hangs_first(run: tuple[Path, str]) -> None:
    """Defect 15: a crash and a hang are never hidden behind 30 assertion-failure rows."""
    run_dir, _ = run
    md = render(build_model(run_dir), "md")
    rows = md.split("## Failures", 1)[1].split("\n\n")[1].splitlines()[2:]
    assert rows[0].startswith("| test_many.py::test_zz_crash | crashed")
    assert rows[1].startswith("| test_many.py::test_zz_hang | hung")
    assert "... and 6 more (report.json has them all)" in md


@pytest.mark.slow
def test_control_characters_in_ids_are_shown_escaped(run: tuple[Path, str]) -> None:
    """Defect 19: an id's tab or carriage return shows as \\t / \\r in the terminal, the
    Markdown and the HTML; HTML id cells wrap and keep the whole id in their tooltip."""
    run_dir, out = run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "test_many.py::test_ctrl[tab\there]" in {t["base_nodeid"] for t in summary["by_test"]}
    assert "test_ctrl[tab\\there]" in out and "test_ctrl[cr\\rhere]" in out
    assert "\r" not in out.replace("\r\n", "\n")
    model = build_model(run_dir)
    md = render(model, "md")
    assert "test\\_ctrl[tab\\\\there]" in md or "test_ctrl[tab\\\\there]" in md
    assert "\t" not in md and "\r" not in md
    html = render(model, "html")
    assert "\t" not in html.split("<script", 1)[0] and "\r" not in html
    assert 'title="test_many.py::test_ctrl[tab\\there]"' in html


def test_severity_order_unit() -> None:
    from faulthunt.report.model import by_severity

    fs = [{"nodeid": "a", "outcome": "failed"}, {"nodeid": "b", "outcome": "failed", "phase": "setup/teardown"},
          {"nodeid": "c", "outcome": "failed", "pid": 7}, {"nodeid": "d", "outcome": "hung"},
          {"nodeid": "e", "outcome": "crashed"}, {"nodeid": "f", "outcome": "collateral"}]
    got = [f["nodeid"] for f in by_severity(fs, [{"nodeid": "c", "pid": 7}])]
    assert got == ["e", "d", "c", "b", "a", "f"]


@pytest.mark.slow
def test_reports_name_the_modules_that_failed_to_import(run: tuple[Path, str]) -> None:
    """Defect 7: report.md and report.html name each module with its first error line."""
    run_dir, out = run
    model = build_model(run_dir)
    line = "ModuleNotFoundError: No module named 'a_module_that_is_not_installed_xyz'"
    assert model.collection_errors == ({"nodeid": "test_broken.py", "message": line},)
    md = render(model, "md")
    assert "## Modules that failed to import" in md
    assert f"| test\\_broken.py | {line} |" in md or f"| test_broken.py | {line} |" in md
    html = render(model, "html")
    assert "Modules that failed to import" in html and "a_module_that_is_not_installed_xyz" in html
    assert f"test_broken.py: {line}" in out


def _nothing_ran(summary: dict[str, object]) -> tuple[str, str]:
    from faulthunt.report.model import model_from_parts

    m = model_from_parts(run_id="r", run={}, identity={}, summary=summary, mapping=[], sanitizer=None,
                         events=[], controller=[], xids=[], hang_texts={}, notes=[])
    return m.headline, render(m, "md")


def test_report_of_a_run_where_nothing_ran_says_why_and_the_fix() -> None:
    """Defect 8: pytest's reason is shown, and the advice fixes the command, not --count."""
    head, md = _nothing_ran({"tests_run": 0, "no_tests_reason":
                             "ERROR: file or directory not found: tests/nope.py token=ghp_" + "a" * 36})
    assert head.startswith("no test ran: ERROR: file or directory not found: tests/nope.py")
    assert "ghp_" + "a" * 36 not in md
    assert "raise --count" not in md
    assert "check the test paths" in md
    _head, md = _nothing_ran({"tests_run": 0, "collection_errors": [
        {"nodeid": "t.py", "message": "ImportError: x\nmore"}]})
    assert "fix the imports" in md and "raise --count" not in md
    assert "| t.py | ImportError: x |" in md


@pytest.mark.parametrize("content", [None, "notes.txt"])
def test_report_of_an_empty_or_foreign_directory_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None) -> None:
    """Defect 9: exit 2 with the fix, nothing written."""
    from faulthunt.cli import main

    if content:
        (tmp_path / content).write_text("not a run")
    assert main(["report", "--run", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is not a faulthunt run directory" in err and "fix:" in err
    assert not (tmp_path / "report.md").exists()


def test_hang_stacks_cut_at_lines_and_grouped() -> None:
    """Defect 25: a long stack is cut at a line boundary with a count of the rest and its file;
    workers stuck in the same place (pids, addresses differ) share one stack."""
    from faulthunt.report.model import STACK_CHARS, model_from_parts

    frames = "".join(f"    frame_{i} (mod.py:{i})\n    0x7f{i:08x} (libcuda.so)\n" for i in range(400))

    def dump(pid: int) -> str:
        return f"Process {pid}: python -m pytest\nThread {pid} (active): \"MainThread\"\n{frames}"

    events = [{"event": "hang", "nodeid": f"t.py::test_h[{w}]", "worker": w, "pid": pid, "timeout": 3,
               "pyspy": f"hangs/{w}-{pid}-1.py-spy.txt"} for w, pid in (("gw0", 11), ("gw1", 22), ("gw3", 33))]
    texts = {e["pyspy"]: dump(e["pid"]) for e in events}
    texts["hangs/gw3-33-1.py-spy.txt"] = dump(33).replace("frame_5 ", "frame_other ")
    m = model_from_parts(run_id="r", run={}, identity={}, summary={"tests_run": 3}, mapping=[],
                         sanitizer=None, events=events, controller=[], xids=[], hang_texts=texts, notes=[])
    first, second, third = m.hangs
    assert len(first["stack"]) <= STACK_CHARS + 80
    *body, tail = first["stack"].splitlines()
    assert all(line in texts[events[0]["pyspy"]].splitlines() for line in body)  # whole lines
    assert tail == f"\u2026 {802 - len(body)} more lines (hangs/gw0-11-1.py-spy.txt)"
    assert first["same_stack_in"] == ["gw1"] and second["same_as"] == "gw0" and second["stack"] is None
    assert third["stack"] and third["same_as"] is None
    md = render(m, "md")
    assert "Stack (py-spy; the same stack in gw1):" in md and "Same stack as gw0 (above)." in md
    assert md.count("frame_0 (mod.py:0)") == 2


def test_one_run_is_singular_and_hung_counts_agree_without_xdist() -> None:
    """Defect 24: "1 test run" (not "1 test runs"); with -n 0 a hang has no controller crash
    record, and the workers' hung count still agrees with the table's hung run."""
    from faulthunt.report.terminal import headline
    from faulthunt.summary import build_summary

    base = {"base_nodeid": "t.py::test_h", "nodeid": "t.py::test_h", "worker": "main", "pid": 5}
    events = [{"event": "start", **base, "t": 1.0, "t_mono": 1.0},
              {"event": "end", **base, "t": 3.0, "t_mono": 3.0, "outcome": "hung", "duration": 2.0}]
    summary = build_summary(events, [], [])
    assert summary["workers"]["hung"] == 1 == summary["by_test"][0]["outcomes"]["hung"]
    line = headline(summary)
    assert line.startswith("1 test run: 0 passed, 1 failing") and "hung 1" in line
    assert ", 1 Xid;" in headline({**summary, "xids": [{"xid": 31}]})


@pytest.mark.slow
def test_no_mapping_note_on_a_run_without_xids(run: tuple[Path, str]) -> None:
    """Defect 16: nothing to map is not a problem of the run directory."""
    run_dir, _ = run
    assert not (run_dir / "mapping.json").exists()
    assert not any("mapping.json" in n for n in build_model(run_dir).notes)


def test_mapping_missing_is_still_said_when_there_are_xids(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text('{"id": "r"}')
    (tmp_path / "xid.jsonl").write_text('{"xid": 31, "pid": 5, "message": "MMU Fault"}\n')
    assert "mapping.json missing" in build_model(tmp_path).notes


def test_notes_keep_their_code_spans_in_markdown() -> None:
    """Defect 17: a note's `command` renders as code; the data around it stays escaped."""
    from markdown_it import MarkdownIt

    from faulthunt.report.model import model_from_parts

    note = ("test order shuffled by pytest-randomly, seed 7: replay it with "
            "`-- -p randomly --randomly-seed=7`")
    m = model_from_parts(run_id="r", run={}, identity={}, summary={"tests_run": 1, "notes": [
        note, "NOT REPEATED: e.g. t.py::test_a[*x*|y]: no"]}, mapping=[], sanitizer=None, events=[],
        controller=[], xids=[], hang_texts={}, notes=[])
    md = render(m, "md")
    html = MarkdownIt("commonmark").render(md)
    assert "<code>-- -p randomly --randomly-seed=7</code>" in html
    assert "t.py::test_a[*x*|y]" in html and "<em>" not in html
    assert "<code>-- -p randomly --randomly-seed=7</code>" in render(m, "html")


@pytest.mark.parametrize("fmt", ["all", "html"])
def test_a_run_directory_that_cannot_be_written_gets_the_fix_minus_o(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """A read-only run (an unpacked artifact, someone else's) can still be reported: the fix
    says -o DIR (it said "make its directory writable (a file in the way of a directory?)")."""
    from faulthunt.cli import main
    from faulthunt.rundir import create_run_dir, write_json_atomic

    run = create_run_dir(tmp_path / "run")
    write_json_atomic(run / "summary.json", {"tests_run": 1, "passed": 1})
    for name in ("report.md", "report.html"):  # unwritable, as a read-only directory is to root too
        (run / name).mkdir()
        (run / name / "keep").write_text("x")
    assert main(["report", "--run", str(run), "--format", fmt]) == 3
    assert "fix: write it elsewhere: -o DIR (or -o - for stdout)" in capsys.readouterr().err
    (tmp_path / "out").mkdir()
    assert main(["report", "--run", str(run), "--format", fmt, "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "report.html").is_file()
