"""``faulthunt report``: the issue-ready report of a run (docs/report.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "write the issue-ready report of a run: Markdown, JSON, or HTML with a timeline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", help="run directory or id (default: the latest run)")
    parser.add_argument("--format", choices=("md", "json", "html", "all"), default="md",
                        help="md (default), json, html, or all three into the run directory")
    parser.add_argument("-o", "--output", type=Path,
                        help="write here ('-' for stdout); default: md to stdout, others into the run directory")


def run(args: argparse.Namespace) -> int:
    from faulthunt.report import build_model, render, write_reports
    from faulthunt.rundir import resolve_run_dir, write_text_atomic

    run_dir = resolve_run_dir(args.run)
    if args.format == "all":
        for path in write_reports(run_dir):
            print(path)
        return 0
    text = render(build_model(run_dir), args.format)
    out = args.output
    if out is None and args.format == "md" or str(out) == "-":
        sys.stdout.write(text)
        return 0
    if out is None:
        out = run_dir / f"report.{args.format}"
    write_text_atomic(out, text)
    print(out)
    return 0
