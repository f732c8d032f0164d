"""bisect: run planning, judging with a seeded fake oracle, list bisect, and git bisect run on a scratch repo."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from faulthunt.errors import FaulthuntError
from faulthunt.hunt.bisect import bisect_list, judge, plan_runs, run_git_bisect


def test_plan_uses_lower_bound() -> None:
    p = plan_runs(10, 30, 0.95)
    assert 0 < p.rate_low < 10 / 30
    assert (1 - p.rate_low) ** p.runs_per_ref <= 0.05
    assert (1 - p.rate_low) ** (p.runs_per_ref - 1) > 0.05


def test_plan_cannot_decide() -> None:
    with pytest.raises(FaulthuntError, match="cannot decide"):
        plan_runs(0, 30)


def _flaky(rate: float, seed: int):
    rng = random.Random(seed)
    return lambda n: (sum(rng.random() < rate for _ in range(n)), n)


def test_bisect_list_seeded() -> None:
    refs = [f"c{i}" for i in range(12)]
    first_bad = 7
    plan = plan_runs(10, 30, 0.99)
    seeds = iter(range(100))

    def judge_ref(ref):
        bad = int(ref[1:]) >= first_bad
        return judge(_flaky(1 / 3 if bad else 0.0, next(seeds)), plan)

    got, seen = bisect_list(refs, judge_ref)
    assert got == "c7"
    assert all(v.verdict == "good" for r, v in seen.items() if int(r[1:]) < first_bad)


ORACLE = '''
import random, subprocess, sys
# the flaky failure: present from the commit that wrote BUG, fails 1 run in 3 (seeded per commit)
sha = subprocess.check_output(["git", "rev-parse", "HEAD"], text=True).strip()
rng = random.Random(sha)
bug = open("state.txt").read().strip() == "BUG"
fails = sum(bug and rng.random() < 1/3 for _ in range(int(sys.argv[1])))
sys.exit(1 if fails else 0)
'''


@pytest.mark.slow
def test_git_bisect_run_scratch_repo(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    # fixed dates: the same commits every time, so the oracle's draws (seeded by the sha) are too
    env = {**os.environ, "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}

    def g(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, text=True,
                              env=env).stdout

    g("init", "-q")
    g("config", "user.email", "t@example.com")
    g("config", "user.name", "t")
    shas = []
    for i in range(10):
        (repo / "state.txt").write_text("BUG\n" if i >= 6 else "ok\n")
        (repo / "n.txt").write_text(str(i))
        g("add", ".")
        g("commit", "-q", "-m", f"c{i}")
        shas.append(g("rev-parse", "HEAD").strip())
    oracle = tmp_path / "oracle.py"
    oracle.write_text(ORACLE)
    n = plan_runs(10, 30, 0.999).runs_per_ref
    first, log = run_git_bisect(repo, shas[0], shas[-1], [sys.executable, str(oracle), str(n)])
    assert first == shas[6]
    assert "first bad commit" in log or shas[6] in log


@pytest.mark.slow
def test_stress_oracle_real_run(tmp_path: Path) -> None:
    """The oracle through the real faulthunt.stress.run_stress: a test that always fails, one that never does."""
    from faulthunt.hunt.oracle import stress_oracle
    (tmp_path / "test_o.py").write_text("def test_bad():\n    assert False\n\ndef test_good():\n    pass\n")
    bad = stress_oracle(["test_o.py::test_bad"], cwd=tmp_path, base=tmp_path / ".fh")(3)
    good = stress_oracle(["test_o.py::test_good"], cwd=tmp_path, base=tmp_path / ".fh")(3)
    assert bad == (3, 3) and good == (0, 3)
    # a test that is not there: pytest's reason, never "the bad side passed all 0 runs"
    with pytest.raises(FaulthuntError) as err:
        stress_oracle(["test_o.py::test_gone"], cwd=tmp_path, base=tmp_path / ".fh")(3)
    assert "no test ran in" in err.value.message and "test_o.py::test_gone" in err.value.message
    with pytest.raises(FaulthuntError, match="no test ran at the bad side"):
        plan_runs(0, 0)


SUITE = '''
def test_s(request):
    cs = getattr(request.node, "callspec", None)
    step = cs.params.get("__pytest_repeat_step_number", 0) if cs else 0
    assert not (BUG and step % 2 == 0)
'''


def _scratch_repo(tmp_path: Path, n: int, first_bad: int) -> tuple[Path, list[str], object]:
    repo = tmp_path / "repo"
    repo.mkdir()
    def g(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, text=True).stdout

    g("init", "-q", "-b", "main")
    g("config", "user.email", "t@example.com")
    g("config", "user.name", "t")
    shas = []
    for i in range(n):
        # the flaky bug: from commit `first_bad` on, every even pytest-repeat step fails (1 run in 2)
        (repo / "test_s.py").write_text(f"BUG = {i >= first_bad}\nCOMMIT = {i}\n" + SUITE)
        g("add", ".")
        g("commit", "-q", "-m", f"c{i}")
        shas.append(g("rev-parse", "HEAD").strip())
    return repo, shas, g


@pytest.mark.slow
def test_bisect_command_end_to_end(tmp_path: Path) -> None:
    """The whole `faulthunt bisect --good --bad` through git bisect run and the real stress oracle."""
    repo, shas, g = _scratch_repo(tmp_path, 6, 3)
    p = subprocess.run([sys.executable, "-m", "faulthunt", "bisect", "--good", shas[0], "--bad", shas[-1],
                        "--calibrate", "4", "--confidence", "0.9", "--repo", str(repo),
                        "--base", str(tmp_path / "runs"), "--", "test_s.py::test_s"],
                       cwd=repo, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert f"first bad commit: {shas[3]}" in out, out
    assert "2 of 4 runs failed" in out, out
    # back on the branch, tree clean, no bisect left running
    assert g("rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    # (Python's own byte-code caches excepted: where writing them is on, the oracle's runs do)
    left = [line for line in g("status", "--porcelain").splitlines() if "__pycache__" not in line]
    assert left == []
    assert not (repo / ".git" / "BISECT_LOG").exists()


@pytest.mark.slow
def test_bisect_refuses_dirty_tree(tmp_path: Path) -> None:
    """Modified tracked files: refuse before any checkout, with the fix, and leave the edit alone."""
    repo, shas, g = _scratch_repo(tmp_path, 2, 1)
    (repo / "test_s.py").write_text("# my unsaved edit\n")
    p = subprocess.run([sys.executable, "-m", "faulthunt", "bisect", "--good", shas[0], "--bad", shas[-1],
                        "--repo", str(repo), "--", "test_s.py::test_s"],
                       cwd=repo, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "uncommitted changes" in p.stderr and "git stash" in p.stderr, p.stderr
    assert (repo / "test_s.py").read_text() == "# my unsaved edit\n"
    assert g("rev-parse", "HEAD").strip() == shas[-1]


@pytest.mark.slow
@pytest.mark.parametrize("which", ["good", "bad"])
def test_bisect_refuses_an_unknown_ref_before_any_run(tmp_path: Path, which: str) -> None:
    """`--good v1.2` not fetched: `git bisect start BAD GOOD` took the unknown ref as a path, and
    after calibrating the bad side the bisection said "did not name a first bad commit ... check
    the oracle command exits 0, 1 or 125"."""
    repo, shas, g = _scratch_repo(tmp_path, 2, 1)
    refs = {"good": shas[0], "bad": shas[-1], which: "v9.9-not-fetched"}
    p = subprocess.run([sys.executable, "-m", "faulthunt", "bisect", "--good", refs["good"], "--bad", refs["bad"],
                        "--repo", str(repo), "--base", str(tmp_path / "runs"), "--", "test_s.py::test_s"],
                       cwd=repo, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert f"--{which} v9.9-not-fetched: not a commit in {repo}" in p.stderr and "git fetch" in p.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # nothing ran
    assert g("rev-parse", "HEAD").strip() == shas[-1] and not (repo / ".git" / "BISECT_LOG").exists()
