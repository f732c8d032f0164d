"""Analysis: a collected run, read back through :class:`~faulthunt.rundir.RunDir`, becomes its
result (summary.json and the exit status), without writing anything; then :func:`save` writes
the result down.

The summary itself is :func:`faulthunt.summary.build_summary`'s; this adds what only the run
knew (pytest's status and words, what stopped it, what could not be written, the timeout in
force) and decides the exit status by one rule, :func:`exit_status_for`. The run's fault
addresses are mapped here too (:func:`faulthunt.mapper.map_run_entries`, reading only): guard
mode's section of the summary counts what its verdicts caught.
"""

from __future__ import annotations

import shlex
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from faulthunt.errors import ExitCode, FaulthuntError
from faulthunt.records.codec import convert
from faulthunt.records.documents import XidLine
from faulthunt.records.events import Crash, RestartLimit
from faulthunt.records.run import TestSpan
from faulthunt.nodeids import list_ids_command
from faulthunt.redact import redact_argv, redact_text
from faulthunt.rundir import (DiskFullError, Layout, RunDir, dumps, write_json_atomic,
                              write_run_info, write_text_atomic)
from faulthunt.stress.collect import Collected
from faulthunt.stress.options import RUN_PLUGINS, StressOptions, positional_ids, worker_count
from faulthunt.stress.output import PytestOutput

#: outcome of a test that was running when the run was stopped (Ctrl-C, SIGTERM, SIGHUP)
INTERRUPTED = "interrupted"


class StressResult(msgspec.Struct, frozen=True):
    run_dir: Path
    summary: dict[str, Any]
    exit_status: int
    #: every Xid of the run with its final attribution (what xid.jsonl is rewritten with)
    xids: tuple[dict[str, Any], ...] = ()
    #: mapping.json's entries (None: nothing to map, or mapping failed: ``mapping_error``)
    mapping: tuple[dict[str, Any], ...] | None = None
    mapping_error: str | None = None


def exit_status_for(pytest_status: int | None, found: bool, *, stopped_by: int | None = None,
                    disk_full: bool = False, collection_errors: int = 0) -> int:
    """faulthunt stress's exit status (docs/stress.md): the one rule.

    A stop by signal is 128 + the signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), as a shell
    reports it; then a run directory that could not be written (the records are incomplete);
    then anything found, collection errors included; then pytest's own status.
    """
    if stopped_by is not None:
        return 128 + stopped_by
    if disk_full:
        return ExitCode.BAD_INPUT
    if found or collection_errors:
        return ExitCode.FOUND
    if pytest_status in (0, None):
        return ExitCode.OK if pytest_status == 0 else ExitCode.FOUND
    if pytest_status == 1:        # tests failed (e.g. a crash report we did not see)
        return ExitCode.FOUND
    if pytest_status == 2:        # interrupted, not by us
        return ExitCode.INTERRUPTED
    if pytest_status in (4, 5):   # usage error / no tests collected
        return ExitCode.USAGE
    return ExitCode.FOUND if pytest_status < 0 else ExitCode.BAD_INPUT


def label_unended(spans: Sequence[TestSpan], controller: Sequence[Any], outcome: str,
                  why: str) -> list[TestSpan]:
    """Spans with a start, no end and no controller crash record read as ``crashed`` in a run
    that ended normally. In a stopped run the stop ended them (``interrupted``); in a run whose
    disk filled up the end record may just not have been written (``incomplete``)."""
    crashed = {(c.worker, c.nodeid) for c in controller if isinstance(c, Crash)}
    out = []
    for span in spans:
        if (not span.ended and span.outcome == "crashed"
                and (span.worker, span.nodeid) not in crashed):
            span = msgspec.structs.replace(span, outcome=outcome, longrepr=why)
        out.append(span)
    return out


def analyse(run: RunDir, got: Collected) -> StressResult:
    """The result of a collected run (reads the run directory, writes nothing)."""
    from faulthunt.summary import (attribute_xids, build_summary, found_something,
                                   guard_of_run, pci_map_of_run, visible_of_run)

    signame = signal.Signals(got.stopped_by).name if got.stopped_by else None
    # None: e.g. a file: source that could not be followed: keep what was recorded live
    found_xids: Sequence[Any] = run.xids() if got.xids is None else got.xids
    pci_map = pci_map_of_run(run)
    controller = run.controller()
    spans: Sequence[TestSpan] = run.spans()
    if signame:
        spans = label_unended(spans, controller, INTERRUPTED, f"stopped by {signame} while running")
    elif got.disk_full:
        spans = label_unended(spans, controller, "incomplete", "no end record: the disk was full "
                              "(the record may be all that was lost)")
    attributed = attribute_xids(found_xids, spans, pci_map)
    summary = build_summary(spans, controller, attributed, pci_map=pci_map,
                            visible=visible_of_run(run, pci_map), events=run.worker_events())
    limit = next((c for c in controller if isinstance(c, RestartLimit)), None)
    if limit is not None and not summary.get("stopped_early"):
        # xdist's restart budget ran out (the plugin records it): the rest did not run
        summary["stopped_early"] = (f"xdist: maximum crashed workers reached: {limit.limit} "
                                    "(raise --max-worker-restart to run the rest)")
    if got.plan.opts.workers == 0 and got.stopped_by is None:
        _single_process_end(summary, got.output.total, got.pytest_status)
    n_errors = _collection_errors(summary, got.output)
    exit_status = exit_status_for(got.pytest_status, found_something(summary),
                                  stopped_by=got.stopped_by, disk_full=bool(got.disk_full),
                                  collection_errors=n_errors)
    summary.update(_run_facts(got, spans, summary), exit_status=int(exit_status),
                   skipped_lines=run.skipped_lines())
    mapping, mapping_error = _map(run, summary, attributed)
    guard = guard_of_run(run, mapping or ()) if _guard_asked(run, got) else None
    if guard is not None:
        summary["guard"] = guard
    return StressResult(run.path, summary, int(exit_status), tuple(attributed),
                        None if mapping is None else tuple(mapping), mapping_error)


def _single_process_end(summary: dict[str, Any], collected: int | None,
                        pytest_status: int | None) -> None:
    """``-n 0``: a hang (pytest-timeout exits the process) or a crash (the test killed pytest
    itself) ends the one pytest process, and with it the run. That process is counted as the
    run's hung or crashed worker, and the runs that never started are said, with the way out,
    instead of a short run that reads as complete."""
    failures = summary.get("failures", [])
    ended = [f for f in failures if f.get("outcome") in ("hung", "crashed")]
    if not ended:
        return
    last = ended[-1]
    kind = str(last["outcome"])
    workers = summary.setdefault("workers", {})
    for k in ("hung", "crashed"):
        n = sum(1 for f in ended if f.get("outcome") == k)
        workers[k] = max(int(workers.get(k) or 0), n)
    ran = int(summary.get("tests_run") or 0)
    if collected is None or ran >= collected or summary.get("stopped_early"):
        return
    how = (f"the hang of {last['nodeid']} ended" if kind == "hung" else
           f"pytest died{_by_signal(pytest_status)} while running {last['nodeid']}, ending")
    worker = "a hung worker" if kind == "hung" else "a crashed worker"
    summary["stopped_early"] = (
        f"{how} the single pytest process (-n 0): {collected - ran} of {collected} collected "
        f"test runs never ran (use -n 1 or more: {worker} is replaced and the rest run)")


def _by_signal(status: int | None) -> str:
    """' (SIGABRT)' for a process killed by a signal (a negative exit status), else ''."""
    if status is None or status >= 0:
        return ""
    try:
        return f" ({signal.Signals(-status).name})"
    except ValueError:
        return f" (signal {-status})"


def _guard_asked(run: RunDir, got: Collected) -> bool:
    """Guard mode was on (``--guard``, or FAULTHUNT_GUARD in the run's environment): only then is
    the ledger read for its guard records (a large ledger without any is not scanned for none)."""
    from faulthunt.stress.defaults import GUARD_ENV

    return got.plan.opts.guard is not None or bool((run.env() or {}).get(GUARD_ENV))


def _map(run: RunDir, summary: dict[str, Any], attributed: Sequence[dict[str, Any]]
         ) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The run's fault addresses mapped to its ledger (with the Xids' final attribution); a
    stress run's addresses are its Xids' (sanitize maps its own findings): without an Xid there
    is nothing. Never raises: the stress result stands even if mapping breaks."""
    if not summary.get("xids"):
        return None, None
    from faulthunt.mapper import map_run_entries

    xids = [x for x in (convert(rec, XidLine)[0] for rec in attributed) if x is not None]
    try:
        return map_run_entries(run, xids), None
    except FaulthuntError as exc:
        return None, f"mapping fault addresses: {exc}"
    except Exception as exc:  # noqa: BLE001 - the stress result stands even if mapping breaks
        return None, f"mapping fault addresses failed: {type(exc).__name__}: {exc}"


def _collection_errors(summary: dict[str, Any], out: PytestOutput) -> int:
    """Collectors that failed (modules that did not import), into the summary; how many. The
    plugin records them (build_summary lists them); pytest's output says them too, and its
    "Interrupted: N errors during collection" counts them when the list is cut short. A test's
    setup error is not one: its run counts with outcome ``error``."""
    if not summary.get("collection_errors"):
        summary["collection_errors"] = [{"nodeid": path, "message": msg}
                                        for path, msg in out.collect_errors]
    count = max(len(summary["collection_errors"]), out.collection_errors)
    summary["collection_error_count"] = count
    return count


def _run_facts(got: Collected, spans: Sequence[TestSpan], summary: dict[str, Any]
               ) -> dict[str, Any]:
    """What only the live run knew, as summary.json keys (docs/rundir.md)."""
    timeout = got.plan.timeout
    return {
        "pytest_exit_status": got.pytest_status,
        "stopped_by": signal.Signals(got.stopped_by).name if got.stopped_by else None,
        "interrupted": [s.nodeid for s in spans if s.outcome == INTERRUPTED],
        "no_tests_reason": _no_tests_reason(got) if not summary.get("tests_run") else None,
        "timeout": {"seconds": timeout.seconds, "from": timeout.source, "text": timeout.text()},
        "disk_full": list(got.disk_full),
        "output_dropped_bytes": got.output_dropped,
        "leftover_processes": len(got.leftovers),
        "kernel_log": got.kernel_log,
        "warnings": list(got.warnings),
    }


def _no_tests_reason(got: Collected) -> str:
    """Why no test ran, in one line: pytest's own words, and the selection that was asked."""
    if got.stopped_by is not None and got.pytest_status is None:
        return f"stopped by {signal.Signals(got.stopped_by).name} before pytest started"
    said = got.output.reason() or (f"pytest exited {got.pytest_status} and said nothing about "
                                   "why (see reproducer.log)")
    asked = selection_text(got.plan.opts)
    if got.pytest_status == 5 and asked:
        said += f" (with {asked})" + _ids_under_xdist(got.plan.opts)
    elif got.pytest_status == 4 and said.startswith("pytest: not found: "):
        said += _list_ids_fix(got.plan.opts)  # pytest alone names the id, not how to find one
    elif got.pytest_status == 4 and "unrecognized arguments" in said and "--timeout-method" in said:
        # an option every stress command passes (options.timeout_argv) that pytest-timeout
        # adds: the plugins were not loaded, not a typo of the user's
        said += _unloaded_plugins(got.plan.argv)
    return redact_text(said)


def _ids_under_xdist(opts: StressOptions) -> str:
    """The fix for a run under xdist that named node ids and ran nothing: xdist's workers drop
    an id that names no test without a word (pytest alone says ``not found``)."""
    listing = _listing(opts)
    if not listing or worker_count(opts) in (0, "0"):
        return ""
    return (f"; under xdist pytest does not say that an id names no test (fix: list the ids with "
            f"{listing}, or run with -n 0, where pytest names the one it did not find)")


def _list_ids_fix(opts: StressOptions) -> str:
    listing = _listing(opts)
    return f" (fix: list the ids with {listing})" if listing else ""


def _listing(opts: StressOptions) -> str | None:
    """The command that lists the ids of the first test file the run named by node id."""
    ids = positional_ids(opts.pytest_args)
    return list_ids_command(ids[0]) if ids else None


def _unloaded_plugins(argv: Sequence[str]) -> str:
    """What to add to pytest's "unrecognized arguments" when the command left a plugin to
    pytest's own loading (options.autoloaded_plugins), which must then have been off."""
    named = {value for flag, value in zip(argv, argv[1:], strict=False) if flag == "-p"}
    left = [dist for name, dist in RUN_PLUGINS if name not in named]
    if not left:
        return ""
    return (f"; pytest did not load {', '.join(left)}: its plugin autoloading is off where "
            "faulthunt did not see it (fix: run with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1, and "
            "faulthunt names each plugin with -p)")


#: the most of the selection said after "no test ran" (a long list of ids is in run.json)
SELECTION_CHARS = 300


def selection_text(opts: StressOptions) -> str:
    """The selection that was asked, as the user would type it: ``-k`` and the arguments for
    pytest with every option's value beside it, shell-quoted, secrets redacted."""
    asked = (["-k", opts.keyword] if opts.keyword else []) + list(opts.pytest_args)
    text = shlex.join(redact_argv(asked))
    return text if len(text) <= SELECTION_CHARS else text[:SELECTION_CHARS - 3] + "..."


def save(result: StressResult, got: Collected, warn: Callable[[str], None]) -> StressResult:
    """Write the result down: xid.jsonl (final attribution), summary.json, run.json, mapping.json.

    A full disk does not stop the rest: what cannot be written is named in the summary
    (``disk_full``), the exit status says so, and everything written before stays readable.
    """
    run_dir, summary = result.run_dir, result.summary
    exit_status = result.exit_status
    writes: list[tuple[str, Callable[[], None]]] = [
        (Layout.XID, lambda: write_text_atomic(
            run_dir / Layout.XID, "".join(dumps(x) + "\n" for x in result.xids), fsync=False)),
        # the result of the run survives a machine crash (a GPU fault may reset the machine)
        (Layout.SUMMARY, lambda: write_json_atomic(run_dir / Layout.SUMMARY, summary)),
        (Layout.RUN, lambda: write_run_info(run_dir, got.run_info.finished(
            exit_status=exit_status, pytest_exit_status=got.pytest_status))),
    ]
    for _, write in writes:
        try:
            write()
        except DiskFullError as exc:
            summary["disk_full"].append(exc.message)
            exit_status = exit_status_for(got.pytest_status, True, stopped_by=got.stopped_by,
                                          disk_full=True)
            summary["exit_status"] = exit_status
    if result.mapping_error:
        warn(result.mapping_error)
    if result.mapping is not None:
        try:
            write_json_atomic(run_dir / Layout.MAPPING, list(result.mapping))
        except DiskFullError as exc:
            summary["disk_full"].append(exc.message)
            warn(f"mapping fault addresses: {exc.message}")
    return msgspec.structs.replace(result, exit_status=exit_status)
