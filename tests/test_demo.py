"""``faulthunt demo``: the pipeline over the planted suite, end to end, on this CPU-only machine."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.demo import DemoResult, Step, _failed_nodeids, render_steps, suite_nodeids
from faulthunt.kernels import SUITE_DIR
from faulthunt.rundir import read_jsonl


def test_sanitizer_reruns_the_silent_memcheck_bugs() -> None:
    ids = suite_nodeids(SUITE_DIR, "gpu")
    names = {i.split("[")[1].split("-")[0] for i in ids}
    # silent in a plain run, seen by plain memcheck (stream_ordered needs an extra option; wild
    # write and misaligned fail plainly and are rerun as recorded failures anyway)
    assert names == {"oob_write", "oob_read", "use_after_free"}
    assert all(i.startswith(str(SUITE_DIR / "test_planted.py") + "::test_planted[") for i in ids)


def test_failed_nodeids_leave_collateral_out() -> None:
    summary = {"failures": [{"base_nodeid": "a", "outcome": "failed"},
                            {"base_nodeid": "b", "outcome": "collateral"},
                            {"base_nodeid": "c", "outcome": "crashed"}, "junk", {"outcome": "hung"}]}
    assert _failed_nodeids(summary) == ["a", "c"]
    assert _failed_nodeids(None) == []


def test_exit_status_and_table() -> None:
    ok = DemoResult(Path("/r"), "sim", (Step("stress", "found", "x"), Step("sanitize", "skipped", "y"),
                                         Step("report", "ok", "z")))
    assert ok.exit_status == 0
    assert "NO GPU" in render_steps(ok) and "sanitize  skipped" in render_steps(ok)
    assert DemoResult(None, "gpu", (Step("map", "failed", "boom"),)).exit_status == 1


def test_gpu_path_plumbing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU path without a GPU: stress, sanitize, map and report are stood in for (they are
    tested in their own areas and on the H200), so that what the demo hands each step is checked:
    the gpu backend, the kmsg-capable Xid source, and one sanitizer rerun per test even where a
    recorded failure's relative nodeid and suite_nodeids' absolute one name the same test."""
    import faulthunt.mapper
    import faulthunt.report
    import faulthunt.sanitizer
    import faulthunt.stress
    from faulthunt.demo import DemoOptions, run_demo

    seen: dict[str, object] = {}
    rel = "kernels/suite/test_planted.py::test_planted"
    summary = {"tests_run": 4, "passed": 2, "xids": [],
               "failures": [{"base_nodeid": f"{rel}[wild_write-cuda]", "outcome": "crashed"},
                            {"base_nodeid": f"{rel}[oob_write-cuda]", "outcome": "failed"},
                            {"base_nodeid": f"{rel}[x-cuda]", "outcome": "collateral"}]}

    def fake_stress(opts: object) -> object:
        seen["stress"] = opts
        return faulthunt.stress.StressResult(run_dir=tmp_path / "run", summary=summary, exit_status=1)

    class San:
        findings = [object()]
        out_dir = tmp_path / "san"

    def fake_sanitize(run_dir: Path, **kw: object) -> San:
        seen["sanitize"] = kw
        return San()

    monkeypatch.setattr(faulthunt.stress, "run_stress", fake_stress)
    monkeypatch.setattr(faulthunt.sanitizer, "run_sanitize", fake_sanitize)
    monkeypatch.setattr(faulthunt.mapper, "map_run", lambda run_dir: [{"verdict": "past_end"}])
    monkeypatch.setattr(faulthunt.report, "write_reports", lambda run_dir: [run_dir / "report.md"])
    result = run_demo(DemoOptions(run_dir=tmp_path / "run", backend="gpu", quiet=True, cwd=tmp_path))
    assert result.backend == "gpu" and [s.status for s in result.steps] == ["found", "found", "ok", "ok"]
    sopts = seen["stress"]
    assert sopts.env["FAULTHUNT_KERNELS_BACKEND"] == "gpu" and sopts.xid_source == "auto"  # type: ignore[attr-defined]
    tests = seen["sanitize"]["tests"]  # type: ignore[index]
    keys = [t.split("::", 1)[1] for t in tests]
    assert len(keys) == len(set(keys))
    assert set(keys) == {"test_planted[wild_write-cuda]", "test_planted[oob_write-cuda]",
                         "test_planted[oob_read-cuda]", "test_planted[oob_read-numba]",
                         "test_planted[oob_write-numba]", "test_planted[use_after_free-cuda]"}


@pytest.mark.slow
def test_demo_end_to_end_on_cpu(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("FAULTHUNT_RUN_DIR", None)
    proc = subprocess.run([sys.executable, "-m", "faulthunt", "demo", "--run-dir", str(run_dir),
                           "-n", "2", "--count", "1", "--backend", "sim"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "NO GPU" in out and "SIMULATED" in out
    assert "compute-sanitizer is not on this machine" in out or "sanitize  ok" in out \
        or "sanitize  found" in out

    summary = json.loads((run_dir / "summary.json").read_text())
    by = {f["base_nodeid"].split("[")[1].split("-")[0]: f["outcome"] for f in summary["failures"]
          if "test_planted" in f["base_nodeid"]}
    assert by.get("wild_write") == "crashed"        # the os.abort stand-in
    assert by.get("bounded_hang") == "hung"         # 6 s bound > the demo's 5 s timeout
    assert by.get("oob_write") == "failed"          # IndexError in the simulator
    assert by.get("stale_cache") == "failed"
    # twins pass; at most one labelled collateral of a sticky error in its worker
    assert [f["nodeid"] for f in summary["failures"] if "test_twin" in f["base_nodeid"]
            and f["outcome"] != "collateral"] == []
    sim_log = (run_dir / "simulated_kernel_log.txt").read_text()
    assert ": 31, pid=" in sim_log and ": 13, pid=" in sim_log
    if importlib.util.find_spec("faulthunt.kernlog.sources") is not None:  # K's file: source
        xids = read_jsonl(run_dir / "xid.jsonl").records
        assert any(x.get("xid") == 31 and "wild_write" in str(x.get("nodeid")) for x in xids)
    for step in ("stress", "sanitize", "map", "report"):
        assert f"  {step}" in proc.stdout


def test_the_map_line_says_why_an_address_has_no_verdict() -> None:
    from faulthunt.demo import map_message

    none = {"verdict": None, "reason": "no ledger in this run (was --ledger off, or no GPU source available?)"}
    assert map_message([none, none]) == ("2 fault address(es), 2 not mapped: no ledger in this run "
                                         "(was --ledger off, or no GPU source available?)")
    assert map_message([{"verdict": "past_end"}, none]) == (
        "2 fault address(es) mapped (past_end); 1 not mapped: no ledger in this run "
        "(was --ledger off, or no GPU source available?)")
    assert map_message([{"verdict": "unmapped"}]) == "1 fault address(es) mapped (unmapped)"
    assert map_message([]) == "0 fault address(es) mapped"


def test_a_missing_numba_is_said_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A plain `pip install faulthunt` has no numba: the demo used to run the suite anyway and
    report "48 test runs, 0 passed, 48 error" as something found."""
    import faulthunt.demo
    from faulthunt.cli import main
    from faulthunt.errors import ToolMissingError

    with pytest.raises(ToolMissingError) as err:
        faulthunt.demo.check_suite_modules("sim", find=lambda name: None if name == "numba" else object())
    assert "needs numba," in err.value.message and "faulthunt[test]" in (err.value.fix or "")
    with pytest.raises(ToolMissingError) as err:
        faulthunt.demo.check_suite_modules("gpu", find=lambda name: None)
    assert "needs numpy and numba" in err.value.message and "faulthunt[gpu]" in (err.value.fix or "")
    faulthunt.demo.check_suite_modules("sim", find=lambda name: object())  # all there: no error

    real = importlib.util.find_spec
    monkeypatch.setattr(faulthunt.demo.importlib.util, "find_spec",
                        lambda name, *a: None if name == "numba" else real(name, *a))
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--backend", "sim", "-q"]) == 4
    assert "pip install 'faulthunt[test]'" in capsys.readouterr().err
    assert not (tmp_path / ".faulthunt").exists()  # refused before a run directory was made


@pytest.mark.parametrize("alias", [(), ("-p", "faulthunt")], ids=["entry point", "-p faulthunt"])
def test_the_suite_runs_where_pip_install_puts_it(tmp_path: Path, alias: tuple[str, ...]) -> None:
    """Installed (not editable), the suite is site-packages/faulthunt/kernels/suite: pytest sets
    up faulthunt/__init__.py as a test package and its pytest_plugins re-registered the plugin,
    a ValueError at the setup of every test (the demo ran "48 test runs, 0 passed, 48 error").
    The same layout, linked to this checkout's files."""
    import faulthunt
    import faulthunt.kernels

    layout = tmp_path / "faulthunt"
    layout.mkdir()
    (layout / "__init__.py").symlink_to(Path(faulthunt.__file__))
    (layout / "kernels").symlink_to(Path(faulthunt.kernels.__file__).parent)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *alias, "-p", "no:cacheprovider", "-q",
         "faulthunt/kernels/suite", "-k", "twin and oob_read-numba"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "FAULTHUNT_KERNELS_BACKEND": "sim"})
    assert "already registered" not in proc.stdout
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-2000:]
