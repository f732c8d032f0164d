"""The faulthunt pytest plugin: test spans, sticky-error recycling, hang dumps, crash attribution.

Loaded as ``pytest -p faulthunt`` (the package ``faulthunt`` forwards its ``pytest_*`` attributes
here, see docs/plugin.md) and by ``faulthunt stress``. It does nothing at all unless a run
directory is given: environment ``FAULTHUNT_RUN_DIR`` or ``--faulthunt-run-dir DIR``.

Two roles, registered at configure time only when active (both in :mod:`faulthunt.recorder`,
imported then):

- :class:`~faulthunt.recorder.WorkerRecorder` in every process that runs tests (each xdist worker, or the single
  pytest process without xdist): writes ``events/<worker>-<pid>.jsonl`` (one flushed line per
  record, so a native abort or SIGKILL loses nothing written), points faulthandler at
  ``faulthandler/<worker>-<pid>.txt``, takes over pytest-timeout's ``thread`` timer to dump stacks
  before ending a hung worker, and recycles the worker after a sticky CUDA error.
- :class:`~faulthunt.recorder.ControllerRecorder` in the process that drives the run (the xdist controller, or the
  single process): writes ``controller.jsonl`` and turns xdist's own crash hooks
  (``pytest_testnodedown``, ``pytest_handlecrashitem``) into crash, hang and recycle records.

Recycling works with xdist's own machinery: the poisoned worker finishes the failing test (its
reports reach the controller), then exits at the *start* of its next test, before running
anything. xdist sees the node go down with that never-started test pending; our
``pytest_handlecrashitem`` recognises the recycle record, reschedules the test with
``sched.mark_test_pending`` and marks the report ``rerun``; xdist then starts a fresh worker with
the same gateway spec (and so the same ``CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from faulthunt.repeat import RepeatResult

# This module is imported by every pytest process where faulthunt is installed (the pytest11
# entry point), most of them with no faulthunt run at all: it imports nothing of faulthunt at
# import time. The recorders and what they need (msgspec, the record types, the run directory's
# writer: faulthunt.recorder) are imported at configure time, only when a run is active; the
# --faulthunt-id filter imports its helpers when ids are given. docs/plugin.md "Start-up cost".

#: env: the run directory (faulthunt.rundir.RUN_DIR_ENV, named here so that a pytest process
#: without a run never imports the run directory's module)
RUN_DIR_ENV = "FAULTHUNT_RUN_DIR"
#: the option that keeps only the named tests (faulthunt.nodeids.SELECT_OPTION, named here for
#: the same reason)
SELECT_OPTION = "--faulthunt-id"
#: env: "0" turns worker recycling after sticky CUDA errors off
RECYCLE_ENV = "FAULTHUNT_RECYCLE"
#: env: allocation-ledger mode for faulthunt.ledger.install (auto|cupti|numba|cupy|torch|off)
LEDGER_ENV = "FAULTHUNT_LEDGER"
#: env: guard mode's spec (faulthunt.guard.config.GUARD_ENV; named here so that a worker without
#: guard mode never imports the guard package)
GUARD_ENV = "FAULTHUNT_GUARD"
#: the results of faulthunt.repeat in the process that collected (the worker reports them)
_REPEATED: pytest.StashKey[RepeatResult] = pytest.StashKey()


def run_dir_of(config: pytest.Config) -> Path | None:
    """The active run directory, or None when the plugin is inactive."""
    value = config.getoption("faulthunt_run_dir", None) or os.environ.get(RUN_DIR_ENV)
    return Path(value).resolve() if value else None


# --- module-level hooks (the only ones registered when inactive) -------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faulthunt", "faulthunt: CUDA fault hunting")
    group.addoption("--faulthunt-run-dir", dest="faulthunt_run_dir", default=None, metavar="DIR",
                    help="record test spans, crashes and hangs into this run directory "
                         f"(also: env {RUN_DIR_ENV}); inactive without one")
    group.addoption("--faulthunt-no-recycle", dest="faulthunt_no_recycle", action="store_true",
                    default=False,
                    help="do not restart a worker after a sticky CUDA error "
                         "(later failures in it are still labelled collateral)")
    group.addoption(SELECT_OPTION, dest="faulthunt_ids", action="append", default=[],
                    metavar="NODEID",
                    help="run only this test (repeatable); matches the id with or without "
                         "pytest-repeat's step, so a parametrized id works with --count")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Before any plugin is configured: a stress run runs benchmark tests once, as plain tests.

    pytest-benchmark turns itself off under xdist anyway, with a warning from every worker that
    found a benchmark; without xdist it would time each benchmark for rounds on end. Its own
    ``--benchmark-disable`` does the same quietly; ``--benchmark-enable`` still wins.
    """
    if run_dir_of(config) is None or not hasattr(config.option, "benchmark_disable"):
        return
    if not getattr(config.option, "benchmark_enable", False):
        config.option.benchmark_disable = True



def _wanted_ids(config: pytest.Config) -> dict[str, str]:
    """The --faulthunt-id values, each also as pytest names it (form -> the id as asked): an id
    whose file path is absolute or relative to where pytest was started
    (``/repo/tests/t.py::test_a``, as a user or a shell completion writes it) matches the
    rootdir-relative node id of the same file."""
    wanted: dict[str, str] = {}
    for nodeid in config.getoption("faulthunt_ids", None) or ():
        wanted.setdefault(nodeid, nodeid)
        path, sep, rest = nodeid.partition("::")
        full = os.path.normpath(os.path.join(config.invocation_params.dir, path))
        rel = os.path.relpath(full, config.rootpath)
        if rel != os.pardir and not rel.startswith(os.pardir + os.sep):
            wanted.setdefault(f"{Path(rel).as_posix()}{sep}{rest}", nodeid)
    return wanted


def _narrowed(config: pytest.Config) -> bool:
    """Whether another selection (-k, -m, --deselect, --lf) may have left out a named test
    before the --faulthunt-id filter saw the items: then a named test that is not there may
    well exist, and pytest's "no tests ran" is what is said."""
    return any(config.getoption(name, None) for name in ("keyword", "markexpr", "deselect", "lf"))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Keep only the tests named with --faulthunt-id (faulthunt.nodeids.pytest_selection), each
    as pytest reads a node id argument (a class or an unparametrized name selects what is under
    it). An id that selects nothing is a usage error here, in the one process of a run without
    xdist; under xdist the controller says it (a worker's error would read as a crash). Not
    after a collection error: the id may be in the module that failed, which pytest names."""
    wanted = _wanted_ids(config)
    if not wanted:
        return
    from faulthunt import nodeids
    from faulthunt.recorder import _repeat_counts, base_nodeid

    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    count_of = _repeat_counts()
    bases = [base_nodeid(item, count_of) for item in items]  # once each: matched, then reported
    kept_ids: list[str] = []
    for item, base in zip(items, bases):
        if wanted.keys().isdisjoint({item.nodeid, *nodeids.selected_by(base)}):
            drop.append(item)
        else:
            keep.append(item)
            kept_ids += (item.nodeid, base)
    # the xdist controller's session (dsession, registered at configure) collects nothing itself
    if (not hasattr(config, "workerinput") and not config.pluginmanager.has_plugin("dsession")
            and not session.testsfailed and not _narrowed(config)):
        missing = nodeids.unmatched(wanted, kept_ids)
        if missing:
            raise pytest.UsageError(nodeids.not_found_text(missing, bases))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Under xdist: a --faulthunt-id that selected nothing in a worker's collection (``ids``,
    what the worker kept) is a usage error, said by the controller (pytest prints it as
    ``ERROR: ...`` and exits 4)."""
    wanted = _wanted_ids(node.config)
    if not wanted:
        return
    reporter = node.config.pluginmanager.get_plugin("terminalreporter")
    if (reporter is not None and reporter.stats.get("error")) or _narrowed(node.config):
        return  # a collection error a worker sent (the id may be in the module that failed)
    from faulthunt import nodeids

    missing = nodeids.unmatched(wanted, ids)
    if missing:
        # a worker's pytest that finds no node for one root collects nothing and says nothing
        may_hide = " (one of them may have stopped the collection: -n 0 says which)" \
            if not ids and len(missing) > 1 else ""
        raise pytest.UsageError(nodeids.not_found_text(missing, note=may_hide))


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    run_dir = run_dir_of(config)
    if run_dir is not None or config.getoption("faulthunt_ids", None):
        # A faulthunt run repeats every item --count times, not only pytest's own functions.
        config.pluginmanager.register(Repeater(), "faulthunt-repeat")
    if run_dir is None:
        return
    _load_own_modules_plainly()
    from faulthunt.recorder import EVENTS_DIR, ControllerRecorder, WorkerRecorder

    # Workers spawned later by xdist inherit the environment: the one channel we need.
    os.environ[RUN_DIR_ENV] = str(run_dir)
    (run_dir / EVENTS_DIR).mkdir(parents=True, exist_ok=True)
    is_worker = hasattr(config, "workerinput")
    # Not has_plugin("dsession"): xdist registers it in its own trylast pytest_configure, which
    # may run after ours. Its condition is this one (xdist/plugin.py).
    is_controller = (not is_worker and config.getoption("dist", "no") != "no"
                     and not config.getoption("collectonly", False))
    if not is_worker:
        config.pluginmanager.register(ControllerRecorder(config, run_dir), "faulthunt-controller")
    if not is_controller:
        recycle = (os.environ.get(RECYCLE_ENV, "1") != "0"
                   and not config.getoption("faulthunt_no_recycle", False))
        config.pluginmanager.register(WorkerRecorder(config, run_dir, recycle=recycle),
                                      "faulthunt-worker")


class _PlainFinder:
    """Finds faulthunt's own modules for Python's own loader (their ``.pyc``), ahead of pytest's
    assertion rewriter: faulthunt holds no tests whose asserts need rewriting, and the rewriter's
    import costs a recording process several million instructions a module (docs/plugin.md
    "Start-up cost"). Every other name is left to the finders after it, the rewriter first, and
    so is ``faulthunt.kernels`` (the planted-fault suite: test modules whose asserts pytest
    rewrites) and any test module or conftest."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        if not name.startswith("faulthunt.") or path is None or name.startswith(
                "faulthunt.kernels") or name.rpartition(".")[2].startswith(("test_", "conftest")):
            return None
        from importlib.machinery import PathFinder

        return PathFinder.find_spec(name, path)


def _load_own_modules_plainly() -> None:
    """Put :class:`_PlainFinder` first among the import finders (once), in a process of a run."""
    if not any(isinstance(finder, _PlainFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PlainFinder())


class Repeater:
    """Repeats the items pytest-repeat leaves alone (faulthunt.repeat), in every process that
    collects: first among the plain implementations of the hook, so that ``-k`` sees the copies
    and the --faulthunt-id filter (trylast) keeps them by their base id."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        from faulthunt.repeat import repeat_items

        config.stash[_REPEATED] = repeat_items(items)


