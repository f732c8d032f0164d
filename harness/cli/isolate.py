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
    parser.add_argument("--cwd", type=Path, default=Path.cwd())
    parser.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from faulthunt.hunt.isolate import isolate, predecessors, pytest_probe
    from faulthunt.rundir import resolve_run_dir

    preds = predecessors(resolve_run_dir(args.run), args.nodeid)
    res = isolate(args.nodeid, preds, pytest_probe(args.nodeid, cwd=args.cwd, repeats=args.repeats))
    print(json.dumps(res, indent=2) if args.json else res["reading"])
    return 1 if res["fails_alone"] or res["fails_after_predecessors"] else 0
