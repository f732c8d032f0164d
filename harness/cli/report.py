"""``faulthunt report``: the issue-ready report of a run (docs/report.md)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

HELP = "write the issue-ready report of a run: Markdown, JSON, or HTML with a timeline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", help="run directory or id (default: the latest run)")
    # `faulthunt report RUN` is what one types after stress printed "run directory: RUN"
    parser.add_argument("run_positional", nargs="?", metavar="RUN",
                        help="the same as --run RUN")
    parser.add_argument("--format", choices=("md", "json", "html", "all"), default="md",
                        help="md (default), json, html, or all three into the run directory")
    parser.add_argument("-o", "--output", type=Path,
                        help="write here ('-' for stdout; a directory gets report.<format>, with "
                             "--format all the three reports); default: md to stdout, others into "
                             "the run directory")


def _target(out: Path, name: str) -> Path:
    """``out`` itself, or ``out/name`` when ``out`` is a directory (as cp does)."""
    return out / name if out.is_dir() else out


def run(args: argparse.Namespace) -> int:
    from faulthunt.errors import UsageError
    from faulthunt.report import FORMATS, build_model, render, write_reports
    from faulthunt.rundir import resolve_run_dir, write_text_atomic

    if args.run_positional is not None and args.run is not None:
        raise UsageError(f"two runs named: --run {args.run} and {args.run_positional}",
                         fix="name one run; faulthunt merge combines runs into one first")
    run_dir = resolve_run_dir(args.run if args.run is not None else args.run_positional)
    out = args.output
    if args.format == "all":
        if out is None:
            with _elsewhere_on_failure():
                paths = write_reports(run_dir)
            for path in paths:
                print(path)
            return 0
        if str(out) == "-" or (out.exists() and not out.is_dir()):
            raise UsageError(f"--format all writes three files; -o {out} is not a directory",
                             fix="give -o a directory (it is created), or pick one --format")
        model = build_model(run_dir)
        for fmt, name in FORMATS.items():
            write_text_atomic(out / name, render(model, fmt))
            print(out / name)
        return 0
    text = render(build_model(run_dir), args.format)
    if (out is None and args.format == "md") or str(out) == "-":
        sys.stdout.write(text)
        return 0
    name = FORMATS[args.format]
    if out is None:
        with _elsewhere_on_failure():
            write_text_atomic(run_dir / name, text)
        print(run_dir / name)
        return 0
    out = _target(out, name)
    write_text_atomic(out, text)
    print(out)
    return 0


@contextlib.contextmanager
def _elsewhere_on_failure() -> Iterator[None]:
    """A run directory that cannot be written (read-only, an unpacked artifact, someone else's):
    the report can still be written elsewhere, and the fix says how."""
    from faulthunt.rundir import DiskFullError, RunDirError

    try:
        yield
    except DiskFullError:
        raise
    except RunDirError as exc:
        raise RunDirError(exc.message, fix="write it elsewhere: -o DIR (or -o - for stdout), "
                                           "or make the run directory writable") from exc
