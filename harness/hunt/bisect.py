"""Flaky-aware bisect: how many runs make "good" believable, and the verdict for one ref.

The bad side's observed failure rate (its Wilson lower bound, to be safe) gives, through
``faulthunt.stats.runs_to_detect``, how many passing runs make a miss unlikely at the chosen
confidence. A ref is ``bad`` on its first failure, ``good`` after that many passes.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from faulthunt.errors import FaulthuntError
from faulthunt.hunt.oracle import Oracle
from faulthunt.stats import runs_to_detect, wilson_interval

#: `git bisect run` exit codes
GOOD, BAD, SKIP = 0, 1, 125


@dataclasses.dataclass(frozen=True)
class Plan:
    bad_failures: int
    bad_runs: int
    rate_low: float          # Wilson lower bound of the bad side's rate
    runs_per_ref: int        # passes needed to call a ref good
    confidence: float


def plan_runs(bad_failures: int, bad_runs: int, confidence: float = 0.95, max_runs: int = 2000) -> Plan:
    """Runs per ref from the bad side's evidence; raises when the bad side never failed."""
    if bad_runs <= 0:
        raise FaulthuntError("no test ran at the bad side: there is no rate to plan from",
                             fix="check the tests exist at the bad ref (python -m pytest --collect-only -q)")
    if bad_failures == 0:
        raise FaulthuntError(f"the bad side passed all {bad_runs} runs: the data cannot decide",
                             fix="raise --calibrate runs, or check the bad ref really fails")
    lo, _ = wilson_interval(bad_failures, bad_runs, confidence)
    n = min(max_runs, runs_to_detect(max(lo, 1e-6), confidence))
    return Plan(bad_failures, bad_runs, lo, n, confidence)


@dataclasses.dataclass(frozen=True)
class RefVerdict:
    verdict: str             # good | bad
    failures: int
    runs: int
    miss_probability: float  # for good: chance a bug at rate_low passed this many runs


def judge(oracle: Oracle, plan: Plan, chunk: int = 10) -> RefVerdict:
    """Run ``oracle`` in chunks until a failure (bad) or ``plan.runs_per_ref`` passes (good)."""
    done = 0
    while done < plan.runs_per_ref:
        fails, runs = oracle(min(chunk, plan.runs_per_ref - done))
        if runs <= 0:
            raise FaulthuntError("the oracle ran nothing", fix="check the test ids and that pytest collects them")
        done += runs
        if fails:
            return RefVerdict("bad", fails, done, 0.0)
    return RefVerdict("good", 0, done, (1 - plan.rate_low) ** done)


def bisect_list(refs: Sequence[str], judge_ref: Callable[[str], RefVerdict]) -> tuple[str, dict[str, RefVerdict]]:
    """First bad of ``refs`` (oldest first; refs[0] good, refs[-1] bad) by binary search."""
    lo, hi = 0, len(refs) - 1
    seen: dict[str, RefVerdict] = {}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        v = judge_ref(refs[mid])
        seen[refs[mid]] = v
        if v.verdict == "bad":
            hi = mid
        else:
            lo = mid
    return refs[hi], seen


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; a failure becomes a FaulthuntError with git's message."""
    p = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if p.returncode != 0:
        raise FaulthuntError(f"git {' '.join(args)} failed: {p.stderr.strip()}",
                             fix="run inside a git checkout with both refs fetched")
    return p.stdout


def run_git_bisect(repo: Path, good: str, bad: str, oracle_argv: Sequence[str]) -> tuple[str, str]:
    """Drive ``git bisect run`` with ``oracle_argv``; returns (first bad commit, git's log). Resets after."""
    git(repo, "bisect", "start", bad, good)
    try:
        p = subprocess.run(["git", "bisect", "run", *oracle_argv], cwd=repo, capture_output=True, text=True)
        out = p.stdout + p.stderr
        first = None
        for line in out.splitlines():
            if line.endswith("is the first bad commit"):
                first = line.split()[0]
        if first is None:
            raise FaulthuntError("git bisect run did not name a first bad commit:\n" + out[-2000:],
                                 fix="check the oracle command exits 0 (good), 1 (bad) or 125 (skip)")
        return first, git(repo, "bisect", "log")
    finally:
        subprocess.run(["git", "bisect", "reset"], cwd=repo, capture_output=True)
