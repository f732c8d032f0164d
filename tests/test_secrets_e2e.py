"""Planted secrets through a real hunt: stress, report --format all, stage, merge (issue 18).

A suite's test prints and asserts a GitHub token, an AWS key id and a URL password, and the same
token and URL reach pytest on the command line (``-- --api-token=... --service-url=...``). Then
every file that the reports, the kit and the merge wrote is searched for the three secrets.

The run directory's own files are written by stress (run.json, reproducer.log) and the plugin
(events, summary.json); the kit, the reports and a merged run are copies scrubbed again.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

GH = "ghp_" + "Pl4nt3dT0k3n" * 3            # 36 characters after ghp_
AWS = "AKIA" + "PLANTED0SECRET1X"           # 16 after AKIA
PASSWORD = "Pl4ntedPassw0rd"
URL = f"https://svc-user:{PASSWORD}@svc.example/api"
SECRETS = (GH, AWS, PASSWORD)

CONFTEST = '''
def pytest_addoption(parser):
    parser.addoption("--api-token", default="")
    parser.addoption("--service-url", default="")
'''

SUITE = f'''
GH, AWS, URL = {GH!r}, {AWS!r}, {URL!r}


def test_leaks(request):
    token = request.config.getoption("--api-token")
    url = request.config.getoption("--service-url")
    assert (token, url) == (GH, URL), "the planted options did not arrive"
    print(f"connecting to {{url}} with {{token}} and key {{AWS}}")
    assert False, f"auth failed for {{url}} token={{token}} key {{AWS}}"


def test_ok():
    pass
'''


def faulthunt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "faulthunt", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def hunt(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("secrets")
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_secret.py").write_text(SUITE)
    run, kit, merged = root / "run", root / "kit", root / "merged"
    stress = faulthunt("stress", "-n", "2", "--count", "2", "--run-dir", str(run), "-q",
                       "--xid-source", "none", "--", f"--api-token={GH}", f"--service-url={URL}",
                       "test_secret.py", cwd=root)
    assert stress.returncode == 1, stress.stdout + stress.stderr
    for step in (("report", "--run", str(run), "--format", "all"), ("stage", "--run", str(run), str(kit)),
                 ("merge", str(run), "-o", str(merged))):
        done = faulthunt(*step, cwd=root)
        assert done.returncode in (0, 1), done.stdout + done.stderr
    return {"root": root, "run": run, "kit": kit, "merged": merged}


def leaks(*paths: Path) -> list[str]:
    """``file: secret`` for every planted secret found in a file under ``paths``."""
    found = []
    for top in paths:
        for path in sorted(p for p in ([top] if top.is_file() else top.rglob("*")) if p.is_file()):
            data = path.read_bytes()
            found += [f"{path}: {s}" for s in SECRETS if s.encode() in data]
    return found


@pytest.mark.slow
def test_reports_kit_merge_and_controller_hold_no_planted_secret(hunt: dict[str, Path]) -> None:
    run = hunt["run"]
    reports = [run / name for name in ("report.md", "report.json", "report.html")]
    assert all(p.is_file() for p in reports)
    # the planted failure is there, its secrets are not
    doc = json.loads(reports[1].read_text())
    assert "auth failed for https://svc-user:<redacted>@svc.example/api" in doc["failures"][0]["message"]
    assert "'--api-token=<redacted>'" in doc["reproduce"]
    assert (hunt["kit"] / "run" / "reproducer.log").is_file()
    assert leaks(*reports, run / "controller.jsonl", hunt["kit"], hunt["merged"]) == []


@pytest.mark.slow
def test_every_file_of_the_run_holds_no_planted_secret(hunt: dict[str, Path]) -> None:
    # run.json (argv, pytest_args, pytest_argv), reproducer.log, events/, summary.json
    assert leaks(hunt["run"]) == []


def test_a_run_where_nothing_ran_keeps_no_secret_of_the_command_line(tmp_path: Path) -> None:
    """pytest's usage error echoes the bad argv value into summary.json's no_tests_reason, and a
    -k expression holding NAME=secret is recorded in run.json's options: both redacted."""
    (tmp_path / "test_a.py").write_text("def test_a():\n    pass\n")
    bad = faulthunt("stress", "-q", "--xid-source", "none", "--run-dir", str(tmp_path / "r1"),
                    "--", f"--token={GH}", cwd=tmp_path)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    summary = json.loads((tmp_path / "r1" / "summary.json").read_text())
    assert summary["no_tests_reason"] == "pytest: unrecognized arguments: --token=<redacted>"
    keyword = faulthunt("stress", "-q", "--xid-source", "none", "--run-dir", str(tmp_path / "r2"),
                        "-k", f"API_KEY={PASSWORD} or test_a", cwd=tmp_path)
    assert (tmp_path / "r2" / "run.json").is_file(), keyword.stdout + keyword.stderr
    assert leaks(tmp_path / "r1", tmp_path / "r2") == []
