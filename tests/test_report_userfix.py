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
