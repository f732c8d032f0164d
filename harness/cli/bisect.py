"""``faulthunt bisect``: the first bad git ref for a flaky failure, with a stress run as the oracle (docs/bisect.md).

``faulthunt bisect --good REF --bad REF [--confidence 0.95] -- TESTS...`` calibrates the failure
rate on the bad ref, computes the runs that make "good" believable, then drives ``git bisect run``
with ``faulthunt bisect --oracle --runs N -- TESTS`` (exit 0 good / 1 bad / 125 skip).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "find the first bad git ref of a flaky failure (stress runs as the oracle, flaky-aware)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--good", help="a ref where the failure is absent")
    parser.add_argument("--bad", help="a ref where it fails")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--calibrate", type=int, default=30, help="runs on the bad ref to measure its rate")
    parser.add_argument("--repo", type=Path, default=Path.cwd())
    parser.add_argument("--oracle", action="store_true", help="(internal) one oracle step for git bisect run")
    parser.add_argument("--runs", type=int, help="with --oracle: passes needed to call this ref good")
    parser.add_argument("tests", nargs="*", help="pytest node ids / paths (after --)")
    parser.set_defaults(passthrough=True)


def run(args: argparse.Namespace) -> int:
    from faulthunt.errors import UsageError
    from faulthunt.hunt.bisect import BAD, GOOD, SKIP, Plan, git, judge, plan_runs, run_git_bisect
    from faulthunt.hunt.oracle import stress_oracle

    tests = list(args.tests) + [a for a in args.extra if a != "--"]
    if not tests:
        raise UsageError("no tests given", fix="faulthunt bisect --good G --bad B -- tests/test_x.py::test_y")
    oracle = stress_oracle(tests, cwd=args.repo)
    if args.oracle:
        try:
            v = judge(oracle, Plan(1, 1, 0.0, args.runs or 10, args.confidence))
        except Exception as exc:  # a ref that cannot even run: skip it rather than call it bad
            print(f"faulthunt bisect oracle: skip ({exc})", file=sys.stderr)
            return SKIP
        print(f"faulthunt bisect oracle: {v.verdict} ({v.failures} failing of {v.runs} runs)")
        return BAD if v.verdict == "bad" else GOOD
    if not args.good or not args.bad:
        raise UsageError("need --good and --bad", fix="faulthunt bisect --good v1.2 --bad HEAD -- TESTS")
    head = git(args.repo, "rev-parse", "HEAD").strip()
    git(args.repo, "checkout", "-q", args.bad)
    try:
        fails, runs = oracle(args.calibrate)
    finally:
        git(args.repo, "checkout", "-q", head)
    plan = plan_runs(fails, runs, args.confidence)
    print(f"bad ref {args.bad}: {fails} of {runs} runs failed; rate >= {100 * plan.rate_low:.1f}% "
          f"({int(100 * args.confidence)}% lower bound) -> {plan.runs_per_ref} passing runs make a ref good")
    first, _log = run_git_bisect(args.repo, args.good, args.bad,
                                 [sys.executable, "-m", "faulthunt", "bisect", "--oracle", "--repo", ".",
                                  "--runs", str(plan.runs_per_ref), "--", *tests])
    miss = (1 - plan.rate_low) ** plan.runs_per_ref
    print(f"first bad commit: {first}\nconfidence: each good verdict had <= {100 * miss:.1f}% chance of "
          f"missing a failure at the bad side's rate")
    return 1
