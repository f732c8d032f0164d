"""``faulthunt stage [--run RUN] [DIR]``: write a repro kit for a run's failing tests."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

HELP = "write a repro kit (reproducer, sanitizer, py-spy and kernel-log scripts, cheatsheet) for a run's failures"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``faulthunt stage``."""
    from faulthunt.stage import DEFAULT_KIT_DIR

    parser.add_argument("dir", nargs="?", type=Path, default=DEFAULT_KIT_DIR, metavar="DIR",
                        help=f"where the kit goes (default {DEFAULT_KIT_DIR})")
    parser.add_argument("--run", default=None,
                        help="run directory or id under .faulthunt/runs (default: the latest)")
    parser.add_argument("--test", action="append", default=None, metavar="NODEID",
                        help="stage these tests instead of the run's failures (repeatable)")
    parser.add_argument("--count", type=int, default=None,
                        help="default count of run_reproducer.sh (default: the run's --count)")
    parser.add_argument("--force", action="store_true",
                        help="write into a non-empty directory that is not a faulthunt kit")


def run(args: argparse.Namespace) -> int:
    """Stage the kit and say where it is and what to run first."""
    import sys

    from faulthunt.errors import UsageError
    from faulthunt.rundir import resolve_run_dir
    from faulthunt.stage import stage

    if args.count is not None and args.count < 1:
        raise UsageError(f"--count must be >= 1, not {args.count}")
    run_dir = resolve_run_dir(args.run)
    result = stage(run_dir, args.dir, tests=args.test, count=args.count, force=args.force)
    plan = result["plan"]
    kit = result["kit"]
    print(f"staged {len(plan.failing)} failing test(s) of run {plan.run_id} in {kit}")
    for test in plan.failing:
        print(f"  {test.base_nodeid}  ({', '.join(test.outcomes)})")
    for damage in plan.damaged:
        print(f"  warning: damaged run: {damage}", file=sys.stderr)
    if plan.damaged:
        print("  (README.md lists what the kit assumed: check it before trusting the kit)",
              file=sys.stderr)
    for option in plan.redacted_options:
        print(f"  warning: the run's option {option!r} held a secret: the kit passes it redacted; "
              "give the real value after -- (README.md, 'Secrets left out')", file=sys.stderr)
    for problem in result["copy_problems"]:
        print(f"  warning: not copied from the run: {problem}")
    print(f"next: cd {shlex.quote(str(kit))} && ./run_reproducer.sh {plan.count}   (README.md has the loop)")
    print(f"      faulthunt session --kit {shlex.quote(str(kit))}   opens it in tmux")
    return 0
