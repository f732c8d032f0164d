"""``faulthunt stress``: parallel repeated pytest runs that name the test behind every crash, hang
and Xid. Thin: parses arguments, calls :func:`faulthunt.stress.stress_and_report`."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "stress-run a pytest suite (xdist + repeat) and attribute crashes, hangs and Xids to tests"


def _workers(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"-n wants an integer or 'auto', not {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError("-n must be >= 0")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(passthrough=True)
    parser.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARG",
                        help="test paths and pytest options; anything after `--` goes to pytest "
                             "unchanged")
    parser.add_argument("-n", "--workers", type=_workers, default=None,
                        help="xdist workers (int or auto; 0 = no xdist). Default 1, or one per "
                             "GPU with --gpus")
    parser.add_argument("--count", type=int, default=1, help="runs of each test (pytest-repeat)")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    parser.add_argument("--maxfail", type=int, default=None,
                        help="stop after N failures (pytest's own; everything recorded stays)")
    parser.add_argument("-x", "--exitfirst", action="store_true",
                        help="stop at the first failure (= --maxfail 1)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="per-test seconds before a test counts as hung (stacks are dumped, "
                             "the worker ended)")
    parser.add_argument("--no-launch-blocking", action="store_true",
                        help="do not set CUDA_LAUNCH_BLOCKING=1")
    parser.add_argument("--gpus", default=None,
                        help="pin workers round-robin: all, or 0,1,... or GPU-<uuid>,...")
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="use exactly this run directory (default .faulthunt/runs/<id>)")
    parser.add_argument("--xid-source", default="auto",
                        help="kernel log: auto, kmsg, dmesg, journalctl, nvml, file:PATH, none")
    parser.add_argument("--ledger", default="auto",
                        help="allocation ledger: auto, cupti, numba, cupy, torch, off")
    parser.add_argument("--guard", nargs="?", const="", default=None, metavar="RATE",
                        help="guard mode: guard pages around 1 in RATE device allocations "
                             "(default rate 100; RATE may carry settings, e.g. 1,align=16: "
                             "docs/guard.md)")
    parser.add_argument("--guard-side", choices=("right", "left"), default=None,
                        help="guard after allocations (right: overruns, the default) or before "
                             "them (left: underruns)")
    parser.add_argument("--max-worker-restart", type=int, default=None,
                        help="xdist restart budget (default 1000: stress runs crash workers)")
    parser.add_argument("--no-recycle", action="store_true",
                        help="keep a worker after a sticky CUDA error (later failures in it are "
                             "labelled collateral)")
    parser.add_argument("--junitxml", type=Path, default=None, metavar="PATH",
                        help="write a JUnit XML of the run: one testcase per base test with its "
                             "runs, failures and rate (docs/ci.md)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no live progress or table")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from faulthunt.errors import UsageError
    from faulthunt.stress import DEFAULT_MAX_WORKER_RESTART, StressOptions, parse_gpus, stress_and_report

    gpus = parse_gpus(args.gpus) if args.gpus else None
    workers = args.workers
    if workers is None:
        workers = len(gpus) if gpus else 1
    if gpus and workers == 0:
        raise UsageError("--gpus pins xdist workers, but -n 0 runs no workers",
                         fix="drop -n 0 (one worker per GPU by default), or set "
                             "CUDA_VISIBLE_DEVICES yourself for a single process")
    if args.count < 1:
        raise UsageError(f"--count must be >= 1, not {args.count}")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be > 0 seconds")
    if args.junitxml is not None:
        from faulthunt.report.ci import check_output_path
        check_output_path(args.junitxml, "--junitxml")
    maxfail = 1 if args.exitfirst else args.maxfail
    from faulthunt.guard.config import spec_from_args

    guard, path = spec_from_args(args.guard, args.guard_side)  # `--guard tests/`: a path
    opts = StressOptions(
        pytest_args=_pytest_args(args, path),
        workers=workers, count=args.count, keyword=args.keyword, maxfail=maxfail,
        timeout=args.timeout, launch_blocking=not args.no_launch_blocking, gpus=gpus,
        run_dir=args.run_dir, xid_source=args.xid_source, ledger=args.ledger,
        quiet=args.quiet, recycle=not args.no_recycle, guard=guard,
        max_worker_restart=(args.max_worker_restart if args.max_worker_restart is not None
                            else DEFAULT_MAX_WORKER_RESTART),
    )
    import sys

    # Off a terminal (CI logs, files) rich would wrap the table at 80 columns.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    result = stress_and_report(opts, console=console)
    from faulthunt.report.ci import write_ci_outputs  # GitHub step summary, annotations, JUnit

    for line in write_ci_outputs(result.run_dir, "stress", junitxml=args.junitxml):
        if not args.quiet:
            print(f"faulthunt stress: {line}", file=sys.stderr)
    return result.exit_status


def _pytest_args(args: argparse.Namespace, path: str | None) -> tuple[str, ...]:
    """The positional arguments and what followed ``--``, for pytest, without that ``--``.

    pytest reads everything after a ``--`` as a path (``-p no:cacheprovider`` would become two
    missing files), so the first separator is faulthunt's own; argparse leaves it in the
    positional list or in the unknown arguments depending on where options stood.
    """
    tokens = ([path] if path else []) + list(args.pytest_args) + list(getattr(args, "extra", ()) or ())
    if "--" in tokens:
        tokens.remove("--")
    return tuple(tokens)
