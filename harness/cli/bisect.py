"""``faulthunt bisect``: the first bad git ref or package version of a flaky failure (docs/bisect.md).

``faulthunt bisect --good REF --bad REF [--confidence 0.95] -- TESTS...`` calibrates the failure
rate on the bad ref, computes the runs that make "good" believable, then drives ``git bisect run``
with ``faulthunt bisect --oracle --runs N -- TESTS`` (exit 0 good / 1 bad / 125 skip).

``faulthunt bisect --package NAME (--versions v1,v2,... | --good-version G --bad-version B) -- TESTS``
does the same across versions of a package, each installed into a scratch venv
(faulthunt.hunt.pkgbisect).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HELP = "find the first bad git ref or package version of a flaky failure (stress runs as the oracle, flaky-aware)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--good", help="a git ref where the failure is absent")
    parser.add_argument("--bad", help="a git ref where it fails")
    parser.add_argument("--package", help="bisect across versions of this package instead of git refs")
    parser.add_argument("--versions", help="with --package: comma-separated versions (sorted oldest first); "
                        "default: the list from `pip index versions NAME`")
    parser.add_argument("--good-version", help="with --package: a version where the failure is absent")
    parser.add_argument("--bad-version", help="with --package: a version where it fails")
    parser.add_argument("--find-links", action="append", default=[], help="with --package: pip --find-links DIR")
    parser.add_argument("--no-index", action="store_true", help="with --package: pip --no-index")
    parser.add_argument("--pip-arg", action="append", default=[], help="with --package: one extra pip argument")
    parser.add_argument("--envs", type=Path, help="with --package: where scratch venvs go (default: a temp dir)")
    parser.add_argument("--keep-envs", action="store_true", help="with --package: keep the scratch venvs")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--calibrate", type=int, default=30, help="runs on the bad side to measure its rate")
    parser.add_argument("--repo", type=Path, default=Path.cwd())
    parser.add_argument("--base", type=Path, help="where the oracle's stress run directories go (default: a temp dir)")
    parser.add_argument("--oracle", action="store_true", help="(internal) one oracle step for git bisect run")
    parser.add_argument("--runs", type=int, help="with --oracle: passes needed to call this ref good")
    parser.add_argument("--measure", action="store_true", help="(internal) with --oracle: run --runs runs, no early stop")
    parser.add_argument("--json", action="store_true", help="(internal) with --oracle: print the verdict as JSON")
    parser.add_argument("tests", nargs="*", help="pytest node ids, or files/directories (after --); "
                        "ids are selected with --faulthunt-id, so a parametrized id works")
    parser.set_defaults(passthrough=True)


def _oracle_step(args: argparse.Namespace, oracle) -> int:
    from faulthunt.hunt.bisect import BAD, GOOD, SKIP, Plan, judge
    runs = args.runs or 10
    try:
        if args.measure:
            fails, done = oracle(runs)
            verdict = "bad" if fails else "good"
        else:
            v = judge(oracle, Plan(1, 1, 0.0, runs, args.confidence))
            verdict, fails, done = v.verdict, v.failures, v.runs
    except Exception as exc:  # noqa: BLE001 - a ref that cannot even run is skipped (125), never called bad
        print(f"faulthunt bisect oracle: skip ({exc})", file=sys.stderr)
        if args.json:
            print(json.dumps({"verdict": "skip", "failures": 0, "runs": 0, "error": str(exc)}))
        return SKIP
    if args.json:
        print(json.dumps({"verdict": verdict, "failures": fails, "runs": done}))
    else:
        print(f"faulthunt bisect oracle: {verdict} ({fails} failing of {done} runs)")
    return BAD if verdict == "bad" else GOOD


def _check_clean(repo: Path) -> None:
    """Refuse before any checkout when tracked files are modified: checkout would carry or lose them."""
    from faulthunt.errors import UsageError
    from faulthunt.hunt.bisect import git
    dirty = git(repo, "status", "--porcelain", "--untracked-files=no").strip()
    if dirty:
        raise UsageError(f"the working tree at {repo} has uncommitted changes; bisect checks out other refs:\n{dirty}",
                         fix="commit them or `git stash`, then rerun faulthunt bisect (and `git stash pop` after)")


def _check_refs(repo: Path, **refs: str) -> None:
    """Refuse a ref git does not know before calibrating: `git bisect start BAD GOOD` reads an
    unknown GOOD as a path and the bisection ended in "did not name a first bad commit"."""
    import subprocess

    from faulthunt.errors import UsageError
    for option, ref in refs.items():
        p = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
                           cwd=repo, capture_output=True, text=True)
        if p.returncode != 0:
            raise UsageError(f"--{option} {ref}: not a commit in {repo}",
                             fix="name a branch, tag or commit that `git log` shows (fetch it first: "
                                 "`git fetch --tags`)")


def _package(args: argparse.Namespace, tests: list[str], base: Path) -> int:
    from faulthunt.hunt.bisect import bisect_list, plan_runs
    from faulthunt.hunt.pkgbisect import PackageBisect, index_versions, select_range, sort_versions
    pip_args = [a for d in args.find_links for a in ("--find-links", str(d))]
    pip_args += ["--no-index"] if args.no_index else []
    pip_args += list(args.pip_arg)
    if args.versions:
        versions = sort_versions([v.strip() for v in args.versions.split(",") if v.strip()])
    else:
        versions = index_versions(args.package, pip_args)
    versions = select_range(versions, args.good_version, args.bad_version)
    root = args.envs or Path(tempfile.mkdtemp(prefix="faulthunt-bisect-"))
    root.mkdir(parents=True, exist_ok=True)
    pb = PackageBisect(args.package, tuple(tests), root, args.repo.resolve(), tuple(pip_args), args.keep_envs)
    print(f"versions ({len(versions)}, oldest first): {', '.join(versions)}; scratch envs under {root}")
    fails, runs = pb.measure(versions[-1], args.calibrate)
    plan = plan_runs(fails, runs, args.confidence)
    print(f"bad version {versions[-1]}: {fails} of {runs} runs failed; rate >= {100 * plan.rate_low:.1f}% "
          f"({int(100 * args.confidence)}% lower bound) -> {plan.runs_per_ref} passing runs make a version good")

    def judge_ref(v: str):
        verdict = pb.judge(v, plan)
        print(f"  {args.package}=={v}: {verdict.verdict} ({verdict.failures} failing of {verdict.runs} runs)")
        return verdict

    first, _seen = bisect_list(versions, judge_ref)
    miss = (1 - plan.rate_low) ** plan.runs_per_ref
    print(f"first bad version: {args.package}=={first}\nconfidence: each good verdict had <= {100 * miss:.1f}% "
          f"chance of missing a failure at the bad side's rate (the oldest version, {versions[0]}, is taken as good)")
    return 1


def run(args: argparse.Namespace) -> int:
    from faulthunt.errors import UsageError
    from faulthunt.hunt.bisect import git, plan_runs, run_git_bisect
    from faulthunt.hunt.oracle import stress_oracle, oracle_selection

    tests = list(args.tests) + [a for a in args.extra if a != "--"]
    if not tests:
        raise UsageError("no tests given", fix="faulthunt bisect --good G --bad B -- tests/test_x.py::test_y")
    selection = oracle_selection(tests)  # every id checked before any checkout or install
    # stress run dirs outside the checkout, so the oracle never dirties the tree it bisects
    base = args.base or Path(tempfile.mkdtemp(prefix="faulthunt-oracle-"))
    oracle = stress_oracle(selection, cwd=args.repo, base=base)
    if args.oracle:
        return _oracle_step(args, oracle)
    if args.package:
        return _package(args, tests, base)
    if not args.good or not args.bad:
        raise UsageError("need --good and --bad (git refs) or --package NAME",
                         fix="faulthunt bisect --good v1.2 --bad HEAD -- TESTS")
    _check_clean(args.repo)
    _check_refs(args.repo, good=args.good, bad=args.bad)
    # back to the branch (not a detached sha) after calibrating, when on one
    head = git(args.repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
    if head == "HEAD":
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
                                  "--base", str(base), "--confidence", str(args.confidence),
                                  "--runs", str(plan.runs_per_ref), "--", *tests])
    miss = (1 - plan.rate_low) ** plan.runs_per_ref
    print(f"first bad commit: {first}\nconfidence: each good verdict had <= {100 * miss:.1f}% chance of "
          f"missing a failure at the bad side's rate")
    return 1
