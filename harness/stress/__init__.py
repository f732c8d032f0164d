"""``faulthunt stress``: run a pytest suite in parallel repeated workers and name what broke.

One run is four steps, each its own module:

1. :func:`~faulthunt.stress.options.check` (``options``): every option validated, the kernel-log
   source opened, the pytest command built; a bad option is exit 2 before anything starts.
2. :func:`~faulthunt.stress.collect.collect` (``collect``): the run directory, the kernel-log
   cursor and follower, ``pytest -n N --count C --timeout ...`` as a child in its own process
   group (its plugins loaded from their entry points, or named with ``-p`` where pytest would
   not load them itself), its output pumped into ``reproducer.log`` (``output``: bounded,
   redacted, never blocked by a full disk), live progress, stop signals (``child``).
3. :func:`~faulthunt.stress.analyse.analyse` (``analyse``): pure over the run directory (read
   through RunDir): summary.json's content and the exit status; :func:`~.analyse.save` writes
   them down.
4. Rendering is the caller's: :func:`faulthunt.report.terminal.render_stress` draws the
   end-of-run table from the summary.

pytest is never killed to stop early: ``--maxfail`` is pytest's own. A stop (Ctrl-C, SIGTERM,
SIGHUP) is one SIGINT to pytest's process group, SIGKILL after a bounded grace period; the
results are written down either way.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faulthunt.stress.analyse import StressResult
    from faulthunt.stress.options import StressOptions

#: public name -> the submodule that defines it (imported on first use: ``faulthunt stress
#: --help`` and the plugin's workers need none of the engine)
_EXPORTS = {
    "StressResult": "analyse", "analyse": "analyse", "exit_status_for": "analyse",
    "save": "analyse",
    "Collected": "collect", "KernelLogWatch": "collect", "Progress": "collect",
    "collect": "collect",
    "Plan": "options", "StressOptions": "options", "build_env": "options",
    "build_pytest_argv": "options", "check": "options", "parse_gpus": "options",
    "DEFAULT_MAX_WORKER_RESTART": "defaults", "DEFAULT_TIMEOUT_S": "defaults",
    "parse_total": "output",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'faulthunt.stress' has no attribute {name!r}")
    return getattr(importlib.import_module(f"faulthunt.stress.{module}"), name)


def run_stress(opts: StressOptions, *, console: Any = None,
               on_line: Callable[[str], None] | None = None,
               once_started: Callable[[], None] | None = None) -> StressResult:
    """Check, collect, analyse: one stress run, everything recorded in its run directory.

    ``once_started`` is called once pytest is running, after the analysis's modules are
    imported (the CLI freezes its heap there). Raises UsageError (before anything starts) for a
    bad option and DiskFullError when the run directory cannot be made at all; anything later
    ends in the result.
    """
    import sys

    from faulthunt.rundir import RunDir
    from faulthunt.stress.collect import _Stopper, collect, stop_signals
    from faulthunt.stress.options import check

    warnings: list[str] = []

    def warn(msg: str) -> None:
        warnings.append(msg)
        if not opts.quiet:
            print(f"faulthunt stress: {msg}", file=sys.stderr, flush=True)

    plan = check(opts, warn)
    stopper = _Stopper()
    # the handlers stay until the result is written: a stop during the analysis is a no-op
    with stop_signals(stopper):
        got = collect(plan, stopper, warn=warn, warnings=warnings, console=console,
                      on_line=on_line, once_started=once_started)
        # imported while pytest ran (collect's warm-up): not on the way to pytest's start
        from faulthunt.stress.analyse import analyse, save

        return save(analyse(RunDir(got.run_dir), got), got, warn)


__all__ = ["run_stress", *_EXPORTS]  # noqa: PLE0604 - _EXPORTS's keys: the lazily imported names
