"""``faulthunt stress``: parallel repeated pytest runs that name the test behind every crash, hang
and Xid. Thin: arguments to :class:`~faulthunt.stress.StressOptions`, then
:func:`~faulthunt.stress.run_stress` (check, collect, analyse), then the terminal table
(:mod:`faulthunt.report.terminal`); the run's exit status is the result's."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from faulthunt.stress import StressOptions

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


#: pytest options that take a value: declared here so that `-p no:randomly tests/` keeps the
#: value with its option (passed through as unknown arguments, argparse would take the value
#: for a test path and leave `-p` alone at the end)
PYTEST_VALUE_OPTIONS = (("-p",), ("-m",), ("-o", "--override-ini"), ("-c",),
                        ("-W", "--pythonwarnings"), ("--deselect",), ("--ignore",),
                        ("--ignore-glob",), ("--rootdir",), ("--basetemp",), ("--confcutdir",),
                        ("--tb",), ("-r",), ("--durations",), ("--import-mode",),
                        ("--log-level",))


class _PytestOption(argparse.Action):
    """Keeps a pytest option and its value together, in the order given."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        namespace.pytest_options = [*(namespace.pytest_options or []), str(option_string),
                                    str(values)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from faulthunt.stress.defaults import DEFAULT_TIMEOUT_S, LEDGER_MODES

    parser.set_defaults(passthrough=True, enables_collector=True)
    parser.add_argument("pytest_args", nargs="*", metavar="PYTEST_ARG",
                        help="test paths, node ids and pytest options; anything after `--` goes "
                             "to pytest unchanged (parametrized ids run --count times too)")
    parser.add_argument("-n", "--workers", type=_workers, default=None,
                        help="xdist workers (int or auto; 0 = no xdist). Default 1, or one per "
                             "GPU with --gpus")
    parser.add_argument("--count", type=int, default=1, help="runs of each test (pytest-repeat)")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    parser.add_argument("--maxfail", type=int, default=None,
                        help="stop after N failures (pytest's own; everything recorded stays)")
    parser.add_argument("-x", "--exitfirst", action="store_true",
                        help="stop at the first failure (= --maxfail 1)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="per-test seconds before a test counts as hung (stacks are dumped, "
                             "the worker ended). Default: the suite's own pytest `timeout` "
                             f"setting, else {DEFAULT_TIMEOUT_S:g}; 0 turns it off")
    parser.add_argument("--no-launch-blocking", action="store_true",
                        help="do not set CUDA_LAUNCH_BLOCKING=1")
    parser.add_argument("--gpus", default=None,
                        help="pin workers round-robin: all, or 0,1,... or GPU-<uuid>,... "
                             "(indexes are checked against NVML when it is available)")
    parser.add_argument("--run-dir", type=Path, default=None,
                        help="use exactly this run directory, new or empty (default "
                             ".faulthunt/runs/<id>)")
    parser.add_argument("--xid-source", default="auto",
                        help="kernel log: auto, kmsg, dmesg, journalctl, nvml, file:PATH, none")
    parser.add_argument("--ledger", default="auto",
                        help=f"allocation ledger: {', '.join(LEDGER_MODES)}")
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
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no live progress or table: one line with the outcome counts and the "
                             "run directory (and, when the run did not pass, what to run next)")
    parser.set_defaults(pytest_options=None)
    for flags in PYTEST_VALUE_OPTIONS:
        parser.add_argument(*flags, action=_PytestOption, help=argparse.SUPPRESS)


def options(args: argparse.Namespace) -> StressOptions:
    """The StressOptions the arguments ask for (what needs no I/O to check is checked here;
    the rest by faulthunt.stress.options.check before anything starts)."""
    from faulthunt.errors import UsageError
    from faulthunt.stress import DEFAULT_MAX_WORKER_RESTART, StressOptions, parse_gpus

    _check_unknown_options(getattr(args, "extra", None) or (), _OWN_OPTIONS)
    gpus = parse_gpus(args.gpus) if args.gpus else None
    workers = args.workers
    if workers is None:
        workers = len(gpus) if gpus else 1
    if gpus and workers == 0:
        raise UsageError("--gpus pins xdist workers, but -n 0 runs no workers",
                         fix="drop -n 0 (one worker per GPU by default), or set "
                             "CUDA_VISIBLE_DEVICES yourself for a single process")
    if args.junitxml is not None:
        from faulthunt.report.ci import check_output_path
        check_output_path(args.junitxml, "--junitxml")
    guard, path = None, None
    if args.guard is not None or args.guard_side is not None:  # the guard package: ~10 ms to import
        from faulthunt.guard.config import spec_from_args

        guard, path = spec_from_args(args.guard, args.guard_side)  # `--guard tests/`: a path
    return StressOptions(
        pytest_args=_pytest_args(args, path),
        workers=workers, count=args.count, keyword=args.keyword,
        maxfail=1 if args.exitfirst else args.maxfail, timeout=args.timeout,
        launch_blocking=not args.no_launch_blocking, gpus=gpus, run_dir=args.run_dir,
        xid_source=args.xid_source, ledger=args.ledger, quiet=args.quiet,
        recycle=not args.no_recycle, guard=guard,
        max_worker_restart=(args.max_worker_restart if args.max_worker_restart is not None
                            else DEFAULT_MAX_WORKER_RESTART))


#: faulthunt stress's own long options (a typo of one is a usage error, not a pytest option)
_OWN_OPTIONS = ("--workers", "--count", "--maxfail", "--exitfirst", "--timeout",
                "--no-launch-blocking", "--gpus", "--run-dir", "--xid-source", "--ledger",
                "--guard", "--guard-side", "--max-worker-restart", "--no-recycle", "--junitxml",
                "--quiet")


def _check_unknown_options(extra: Sequence[str], own: Sequence[str]) -> None:
    """An unknown option before ``--`` that reads like a typo of one of ours (``--cuont``) is a
    usage error now, before a run directory exists; others go to pytest (its plugins add
    options faulthunt cannot know)."""
    for token in extra:
        if token == "--":
            return
        name = token.split("=", 1)[0]
        if not name.startswith("--") or name in own:
            continue
        import difflib  # an unknown long option only: not part of every run's start-up

        from faulthunt.errors import UsageError

        close = difflib.get_close_matches(name, own, n=1, cutoff=0.8)
        if close:
            raise UsageError(f"unknown option {name} (did you mean {close[0]}?)",
                             fix=f"spell it {close[0]}; a pytest option of that name goes "
                                 f"after `--` (faulthunt stress [options] -- {name} ...)")


def run(args: argparse.Namespace) -> int:
    import gc

    opts = options(args)
    try:
        # What start-up made (modules, classes, the options) and what the analysis will need
        # (imported while pytest starts) live to the end of the process: frozen once pytest
        # runs, the cyclic collector's passes during the run, the analysis (thousands of
        # records decoded) and the exit (faulthunt.cli._settle_heap) stop walking them again and
        # again (about 7 M instructions of the parent). Frozen after pytest's start, not
        # before: pytest starts sooner. Thawed after the run unless the process ends with it,
        # so that a caller in the same process (tests) keeps its collector as it was. (Not in
        # run_stress: a bisect calls that many times in one process.) The collector, off while
        # faulthunt started (faulthunt.cli.console_main), is back on from then.
        return _run(args, opts, once_started=_settle_start)
    finally:
        if not getattr(args, "exiting", False):
            gc.unfreeze()


def _settle_start() -> None:
    """Once pytest has started: freeze what start-up made, and turn the collector back on."""
    import gc

    gc.freeze()
    gc.enable()


def _run(args: argparse.Namespace, opts: StressOptions,
         once_started: Callable[[], None] | None = None) -> int:
    import sys

    from faulthunt.errors import FaulthuntError
    from faulthunt.stress import run_stress

    console = None
    if not args.quiet:  # -q draws nothing: rich and the renderer are not even imported
        from rich.console import Console

        # Off a terminal (CI logs, files) rich would wrap the table at 80 columns.
        console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    result = run_stress(opts, console=console, once_started=once_started)
    if console is not None:
        from faulthunt.report.terminal import render_summary

        render_summary(result.summary, result.run_dir, console)
    else:
        print(quiet_line(result.summary, result.run_dir, result.exit_status), flush=True)
    if not _ci_outputs_asked(args.junitxml):
        return result.exit_status
    from faulthunt.report.ci import write_ci_outputs  # GitHub step summary, annotations, JUnit

    try:
        lines = write_ci_outputs(result.run_dir, "stress", junitxml=args.junitxml)
    except FaulthuntError as exc:  # a full disk: the run's own status still stands
        print(f"faulthunt stress: {exc}", file=sys.stderr)
        return result.exit_status or int(exc.exit_code)
    for line in lines:
        if not args.quiet:
            print(f"faulthunt stress: {line}", file=sys.stderr)
    return result.exit_status


def quiet_line(summary: dict[str, object], run_dir: Path, status: int) -> str:
    """``-q``'s one line (pure): the outcome counts, the run directory, why no test ran when none
    did, and, when the run did not pass, what to run next. Plain text, no renderer: ``-q`` stays cheap."""
    import shlex

    from faulthunt.summary import nothing_ran_text, plural  # loaded already: the run built the summary

    def count(key: str) -> int:
        value = summary.get(key)
        if isinstance(value, (list, tuple)):
            return len(value)
        return value if isinstance(value, int) else 0

    outcomes = summary.get("outcomes")
    passed = outcomes.get("passed", 0) if isinstance(outcomes, dict) else 0
    errors = max(count("collection_errors"), count("collection_error_count"))
    stopped = summary.get("stopped_early")
    by = summary.get("stopped_by")  # a stop signal: "0 test runs" then has its reason too
    line = (f"faulthunt stress: {plural(count('tests_run'), 'test run')}: {passed} passed, "
            f"{count('failures')} failing, {plural(count('xids'), 'Xid')}"
            + (f", {plural(errors, 'collection error')}" if errors else "")
            + (f"; stopped early: {stopped}" if stopped else "")
            + (f"; stopped by {by}: pytest and its workers were ended" if by else "")
            + f"; run directory: {run_dir}")
    nothing = nothing_ran_text(summary, run_dir)
    if nothing:  # "0 test runs" never stands without its reason
        line += f"; {nothing}"
    if status:
        line += (f"; next: faulthunt report --run {shlex.quote(str(run_dir))} (what failed and "
                 f"what to try; pytest's own output: {run_dir / 'reproducer.log'})")
    return line


def _ci_outputs_asked(junitxml: Path | None) -> bool:
    """Whether :func:`faulthunt.report.ci.write_ci_outputs` has anything to write (its own
    first test): when not, the report model and renderers it imports (about 30 ms) are left
    alone."""
    import os

    return bool(junitxml or os.environ.get("GITHUB_STEP_SUMMARY")
                or os.environ.get("GITHUB_ACTIONS") == "true")


def _pytest_args(args: argparse.Namespace, path: str | None) -> tuple[str, ...]:
    """The arguments for pytest: the positional ones and what followed ``--``, without that ``--``.

    pytest reads everything after a ``--`` as a path (``-p no:cacheprovider`` would become two
    missing files), so the first separator is faulthunt's own; argparse leaves it in the
    positional list or in the unknown arguments depending on where options stood. A second
    ``--`` is the user's, for pytest.
    """
    tokens = ([path] if path else []) + list(getattr(args, "pytest_options", None) or ()) \
        + list(args.pytest_args) + list(getattr(args, "extra", ()) or ())
    if "--" in tokens:
        tokens.remove("--")
    return tuple(tokens)
