"""``faulthunt isolate NODEID``: does a test fail only after others, and after which (docs/isolate.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "run a test alone and after its predecessors; shrink the predecessors to the polluting set"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("nodeid")
    parser.add_argument("--run", help="run directory or id whose worker history gives the predecessors")
    parser.add_argument("--repeats", type=int, default=3, help="runs per probe (the oracle is flaky)")
    parser.add_argument("--cwd", type=Path, default=None,
                        help="where pytest runs (default: the run's own directory, from run.json)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="per-test seconds in each probe, after which the test counts as failing "
                             "(default: the run's --timeout, else the suite's own pytest timeout, "
                             "else 300; 0 off)")
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from faulthunt.errors import UsageError
    from faulthunt.hunt.isolate import isolate, pytest_probe, replay_plan
    from faulthunt.rundir import RunDir, resolve_run_dir

    if args.repeats < 1:  # before reading anything: 0 would report "did not reproduce" unrun
        raise UsageError(f"--repeats must be at least 1, not {args.repeats}: with {args.repeats} "
                         "no probe runs", fix="pass --repeats 3 (the default) or more for a rare failure")
    if args.timeout is not None and not 0 <= args.timeout < float("inf"):  # nan too
        raise UsageError(f"--timeout must be a finite number >= 0 of seconds, not {args.timeout:g}",
                         fix="--timeout 0 turns the per-test timeout off")
    run = RunDir(resolve_run_dir(args.run))
    replay = replay_plan(run, args.nodeid)
    info = run.run_info()
    cwd = args.cwd or Path(info.cwd if info is not None and info.cwd else Path.cwd())
    probe = pytest_probe(replay.target, cwd=cwd, repeats=args.repeats, count=replay.count,
                         rootdir=replay.rootdir,
                         timeout=replay.timeout if args.timeout is None else args.timeout)
    res = isolate(replay.target, replay.predecessors, probe)
    res["count"] = replay.count
    print(json.dumps(res, indent=2) if args.json else res["reading"])
    return 1 if res["fails_alone"] or res["fails_after_predecessors"] else 0
