"""``faulthunt merge RUN_DIR... -o OUT``: one run directory (and summary) from several runners."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "combine run directories from several runners into one, with provenance, and recompute the summary"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``faulthunt merge``."""
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories to merge")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the merged run directory (new)")
    parser.add_argument("--force", action="store_true", help="write into a non-empty OUT")


def run(args: argparse.Namespace) -> int:
    """Merge and print what came from where."""
    from faulthunt.merge import merge_runs
    from faulthunt.rundir import RunDir

    info = merge_runs(list(args.runs), args.out, force=args.force)
    for dup in info["duplicates"]:
        which = {"id": f"id {dup['id']}", "records": "the same worker records"}.get(
            dup.get("by", "id"), "the same directory")
        print(f"skipped {dup['path']}: the same run ({which}) as {dup['same_as']}, merged once")
    for src in info["runners"]:
        rec = src["records"]
        print(f"{src['runner']:<20} {src['path']}: {rec['events']} span records, {rec['xid']} Xids, "
              f"{rec['ledger']} ledger records" + (f", {rec['skipped']} torn lines skipped" if rec["skipped"] else ""))
    summary = RunDir(args.out).summary()
    if summary is None:
        print(f"merged into {args.out} ({info['summary']})")
        return 0
    print(f"merged into {args.out}: {summary.tests_run} tests run, "
          f"{len(summary.failures)} failures, {len(summary.xids)} Xids")
    print(f"next: faulthunt report --run {args.out}")
    return 1 if summary.found_something() else 0
