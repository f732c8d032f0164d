"""``faulthunt demo``: stress, sanitize, map and report faulthunt's own planted faults.
Thin: parses arguments and calls :func:`faulthunt.demo.run_demo`."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "hunt faulthunt's own planted GPU faults end to end (simulated on a machine without a GPU)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="use exactly this run directory (default .faulthunt/runs/<id>)")
    parser.add_argument("-n", "--workers", type=int, default=2, help="xdist workers (default 2)")
    parser.add_argument("--count", type=int, default=2, help="runs of each test (default 2)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="per-test seconds before a test counts as hung (default 5, below "
                             "the planted hang's 6 s bound)")
    parser.add_argument("--every", type=int, default=None, metavar="N",
                        help="intermittent: each planted bug fires in 1 run of N (seeded)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --every")
    parser.add_argument("--backend", choices=("auto", "gpu", "sim"), default="auto",
                        help="sim: numba's CPU simulator and SIMULATED stand-ins even with a GPU")
    parser.add_argument("-q", "--quiet", action="store_true", help="only the closing table")


def run(args: argparse.Namespace) -> int:
    from faulthunt.demo import DEFAULT_TIMEOUT, DemoOptions, render_steps, run_demo
    from faulthunt.errors import UsageError

    if args.workers < 0 or args.count < 1:
        raise UsageError("-n must be >= 0 and --count >= 1")
    if args.every is not None and args.every < 1:
        raise UsageError("--every must be >= 1")
    result = run_demo(DemoOptions(
        run_dir=args.run_dir, workers=args.workers, count=args.count,
        timeout=args.timeout if args.timeout is not None else DEFAULT_TIMEOUT,
        every=args.every, seed=args.seed, backend=args.backend, quiet=args.quiet))
    print(render_steps(result))
    return result.exit_status
