"""The faulthunt plugin's recorders: what a pytest process of an active run does.

Imported by :mod:`faulthunt.plugin` at configure time, and only when a run directory is given:
a pytest process without a faulthunt run (every session where faulthunt is merely installed)
never imports this module, msgspec, the record types or the run directory's writer. See
:mod:`faulthunt.plugin` for the two roles and docs/plugin.md "Start-up cost".

Imports here are what every active process needs; what only a failure, a hang or a crash needs
(the sticky-error patterns, secret redaction in a worker, supervise) is imported where it is used.
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from faulthunt import context
from faulthunt.plugin import _REPEATED, GUARD_ENV, LEDGER_ENV
from faulthunt.records.lines import (CONTROLLER, EVENTS_DIR, FAULTHANDLER_DIR, HANGS_DIR,
                                     LEDGER_DIR, LineWriter, TestLines, nested)
from faulthunt.repeat import BASE_KEY, REPEAT_PARAM, RepeatResult, repeat_count

if TYPE_CHECKING:
    from faulthunt.records.events import Recycle, WorkerEvent

#: exit status of a worker that ends itself to shed a poisoned CUDA context (EX_TEMPFAIL)
EXIT_RECYCLE = 75
#: seconds the main thread waits for the hang watchdog to end the worker (its dumps: py-spy's
#: limit is 30 s) before it goes on as if no hang had been recorded
HANG_EXIT_WAIT_S = 120.0
#: exit status of a worker ended by the hang watchdog (as timeout(1))
EXIT_HUNG = 124
#: characters of a failure's text kept in the worker's ``end`` record (head and tail)
_LONGREPR_LIMIT = 8000
#: characters of each captured section and failure text a worker sends the controller (head
#: and tail): a test printing 100 MB on one line must not make the controller hold 100 MB
REPORT_TEXT_LIMIT = 100_000
#: characters of an exception line kept as a failure's message
_MESSAGE_LIMIT = 300
#: pytest-rerunfailures' report outcome, outside the values pytest's own types declare
RERUN: str = "rerun"
#: the results of faulthunt.repeat in the process that collected (the worker reports them)


def _per_test_wrapper() -> Any:
    """The per-test hook's marker: pluggy's new-style wrapper (pluggy >= 1.1) where there is one,
    cheaper per test than an old-style hookwrapper (no result object, no extra frame); the old
    style on older pluggy. The hook body works as either."""
    try:
        return pytest.hookimpl(wrapper=True, tryfirst=True)
    except TypeError:
        return pytest.hookimpl(hookwrapper=True, tryfirst=True)


_PER_TEST_WRAPPER = _per_test_wrapper()


def base_nodeid(item: pytest.Item, count_of: Callable[[pytest.Item], int] = repeat_count) -> str:
    """The node id of ``item`` without pytest-repeat's step, from the item's parametrization.

    pytest-repeat parametrizes ``__pytest_repeat_step_number`` with the id ``"<i+1>-<n>"``; the
    callspec's public ``id`` joins every parametrization's id with ``-``. We drop exactly that
    step's id (searching from the end: pytest-repeat's generate_tests hook runs after pytest's own
    parametrize markers) and rebuild the name, so ``test_a[float32-3-50]`` -> ``test_a[float32]``
    and ``test_a[2-5]`` -> ``test_a``, while a user parameter that merely looks like ``3-50``
    stays. A copy that faulthunt made itself (:mod:`faulthunt.repeat`: unittest methods, doctests,
    plugin items) carries its base id in its stash. ``count_of``: :func:`repeat_count`, or a
    remembering one (:func:`_repeat_counts`) for a whole collection.
    """
    stash = item.stash
    if BASE_KEY in stash:  # not stash.get: a miss there raises and catches KeyError, every test
        return stash[BASE_KEY]
    callspec = getattr(item, "callspec", None)
    if callspec is None or REPEAT_PARAM not in callspec.params:
        return item.nodeid
    ids = _without_step(str(callspec.id), int(callspec.params[REPEAT_PARAM]), count_of(item))
    name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    parent = item.parent.nodeid if item.parent is not None else ""
    base = f"{parent}::{name}" if parent else name
    return f"{base}[{ids}]" if ids else base


def _repeat_counts() -> Callable[[pytest.Item], int]:
    """:func:`repeat_count`, remembered per parent node for the items with no ``repeat`` marker of
    their own (their count then comes from the parents' markers or ``--count``, the same for all
    of a parent's items): a collection of many parametrized items walks each parent once."""
    by_parent: dict[int, int] = {}

    def count_of(item: pytest.Item) -> int:
        if item.parent is None:
            return repeat_count(item)
        for marker in item.own_markers:  # a loop, not any(genexpr): asked once a test
            if marker.name == "repeat":
                return repeat_count(item)
        key = id(item.parent)  # parents live as long as the session's items
        got = by_parent.get(key)
        if got is None:
            got = by_parent[key] = repeat_count(item)
        return got

    return count_of


def _without_step(ids: str, step: int, count: int | None) -> str:
    """``ids`` (``-``-joined) without pytest-repeat's ``<step+1>-<count>`` (the last one)."""
    found, end = _last_step(ids, step, count)
    if found < 0:
        return ids
    left, right = ids[:found], ids[end:]
    if left and right:
        return left[:-1] + right
    return left[:-1] if left else right[1:]


def _last_step(ids: str, step: int, count: int | None) -> tuple[int, int]:
    """Where the last ``<step+1>-<count>`` of ``ids`` is that stands between ``-`` or the ends:
    what ``re.finditer(r"(?<![^-])3-50(?![^-])", ids)`` finds last, found with ``str.find``
    (every test of a worker asks, and a pattern per step and count costs a lookup in re's cache
    and a match object each time). ``(-1, -1)`` when there is none; ``count`` None: any count."""
    if count is None:
        matches = list(re.finditer(rf"(?<![^-]){step + 1}-\d+(?![^-])", ids))
        return (matches[-1].start(), matches[-1].end()) if matches else (-1, -1)
    token = f"{step + 1}-{count}"
    size, last = len(ids), (-1, -1)
    pos = ids.find(token)
    while pos >= 0:
        end = pos + len(token)
        if (pos == 0 or ids[pos - 1] == "-") and (end == size or ids[end] == "-"):
            last = (pos, end)
            pos = ids.find(token, end)  # as re.finditer: the next match starts after this one
        else:
            pos = ids.find(token, pos + 1)
    return last


def base_from_nodeid(nodeid: str, count: int | None) -> str:
    """The base id of a node id alone, when its item is not at hand (the controller's view of a
    test that never started): pytest-repeat's ``<i>-<count>`` dropped from the end of the
    parameters. A user parameter ending in the same shape would be cut too; items at hand go
    through :func:`base_nodeid`, which knows."""
    head, sep, last = nodeid.rpartition("::")
    if not last.endswith("]") or "[" not in last or not count or count < 2:
        return nodeid
    name, _, ids = last[:-1].partition("[")
    found = re.fullmatch(rf"(?:(.*)-)?\d+-{count}", ids)
    if found is None:
        return nodeid
    rest = found.group(1)
    return f"{head}{sep}{name}" + (f"[{rest}]" if rest else "")


def bound_text(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, head and tail kept, the cut said in between."""
    if len(text) <= limit:
        return text
    keep = max(limit // 2, 1)
    cut = len(text) - 2 * keep
    return f"{text[:keep]}\n... [faulthunt: {cut} characters cut] ...\n{text[-keep:]}"


def _redact(text: str) -> str:
    """:func:`faulthunt.redact.redact_text`, imported on first use: a worker whose tests pass
    never needs it (nor the compiled patterns its import makes)."""
    from faulthunt.redact import redact_text

    return redact_text(text)


def crash_message(report: Any) -> str | None:
    """A failed report's exception line, as pytest's own short summary shows it
    (``AssertionError: assert 1 == 2``): its crash entry, never a line of the traceback."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if isinstance(message, str) and message.strip():
        line = next(ln.strip() for ln in message.splitlines() if ln.strip())
        return _redact(line[:_MESSAGE_LIMIT])
    return None


def _now() -> dict[str, Any]:
    """``t`` and ``t_mono`` of a record: now, on the wall and the monotonic clock."""
    return {"t": time.time(), "t_mono": time.monotonic()}


def _processes(tree: list[dict[str, object]]) -> list[dict[str, Any]]:
    """psutil's view of a hung worker's processes as records (an odd entry is left out)."""
    import msgspec  # a hang's path alone: the record type checks each entry

    from faulthunt.records.events import ProcessInfo

    out = []
    for proc in tree:
        try:
            out.append(msgspec.to_builtins(msgspec.convert(proc, ProcessInfo)))
        except msgspec.ValidationError:
            continue
    return out


def _sticky_record(match: Any) -> dict[str, Any]:
    """A sticky error's record (``StickyError``) as its event line holds it, checked by the
    record type as before (a failure's path alone imports msgspec)."""
    import msgspec

    from faulthunt.records.events import StickyError

    return msgspec.to_builtins(msgspec.convert(match.to_json(), StickyError))


def _warn(msg: str) -> None:
    print(f"faulthunt: {msg}", file=sys.__stderr__, flush=True)



def _still_repeated(items: list[pytest.Item], repeated: dict[str, int]) -> dict[str, int]:
    """Items faulthunt repeated, per item type, counting only those that will still run: a ``-k``
    or ``--deselect`` after the copies were made may have left some or all of them out."""
    if not repeated:
        return {}
    bases: dict[str, set[str]] = {}
    for item in items:
        base = item.stash.get(BASE_KEY, None)
        if base is not None and type(item).__name__ in repeated:
            bases.setdefault(type(item).__name__, set()).add(base)
    return {name: len(b) for name, b in bases.items()}



# --- worker side -------------------------------------------------------------------------------

class WorkerRecorder:
    """Records test spans of this process and handles sticky errors and hangs."""

    def __init__(self, config: pytest.Config, run_dir: Path, *, recycle: bool) -> None:
        self.config = config
        self.run_dir = run_dir
        # From xdist's own worker input, not PYTEST_XDIST_WORKER: a test of an xdist worker that
        # starts pytest itself hands that variable down to a process that is no worker.
        workerinput = getattr(config, "workerinput", None)
        self.worker = str(workerinput.get("workerid", "main")) if isinstance(workerinput, dict) else "main"
        self.pid = os.getpid()
        self.in_xdist = hasattr(config, "workerinput")
        self.recycle = recycle and self.in_xdist
        self.device = os.environ.get("CUDA_VISIBLE_DEVICES")
        # on_full: a full disk drops (counts, says) records instead of failing the test run
        self.events = LineWriter(run_dir / EVENTS_DIR / f"{self.worker}-{self.pid}.jsonl",
                                 on_full=_warn)
        self._lines = TestLines(self.worker, self.pid, self.device)  # every test's two lines
        #: the sticky error (its record) that poisoned this process's CUDA context
        self.poisoned: dict[str, Any] | None = None
        self.poisoned_by: str | None = None
        self._reports: list[tuple[pytest.TestReport, str | None, str | None]] = []
        self._subtests: dict[str, int] = {}
        self._subtests_failed: list[dict[str, Any]] = []
        self._base: dict[str, str] = {}
        self._count_of: Callable[[pytest.Item], int] = repeat_count
        self._hangs = 0
        #: set by the hang watchdog's thread: the test's end is written already ("hung")
        self._hanging = False
        context.worker_id = self.worker
        self.events.event("worker", worker=self.worker, pid=self.pid, ppid=os.getppid(),
                          cuda_visible_devices=self.device, recycle=self.recycle, **_now())
        self._fh_file = self._enable_faulthandler()
        self._install_ledger()
        # guard mode (docs/guard.md): after the ledger, whose writer it shares. Its package is
        # imported only when FAULTHUNT_GUARD asks for it: about 7 ms of every worker otherwise.
        if os.environ.get(GUARD_ENV, "").strip():
            from faulthunt.guard.install import install_from_env
            install_from_env(config, run_dir, warn=_warn)
        self.children = self._watch_children()

    def _test(self, nodeid: str) -> dict[str, Any]:
        """The fields every test record of this process carries."""
        return {"nodeid": nodeid, "base_nodeid": self._base.get(nodeid, nodeid),
                "worker": self.worker, "pid": self.pid, **_now()}

    def _enable_faulthandler(self) -> Any:
        import faulthandler

        path = self.run_dir / FAULTHANDLER_DIR / f"{self.worker}-{self.pid}.txt"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(path, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        except OSError as exc:
            _warn(f"cannot open {path} for faulthandler: {exc.strerror}; crash tracebacks go to stderr")
            return None
        # Replaces pytest's own faulthandler target (stderr) for this process: under xdist the
        # worker's stderr is mixed into everyone's; a file per worker keeps each traceback whole.
        faulthandler.enable(file=fh, all_threads=True)
        return fh

    def _install_ledger(self) -> None:
        mode = os.environ.get(LEDGER_ENV)
        if not mode or mode == "off":
            return
        try:
            from faulthunt import ledger

            # what the ledger can record here is the same in every worker of the run: said by
            # the first one (a worker's ledger file, where it has one, keeps it among its
            # notes); at -n 8 the output held eight copies, and one more per restarted worker
            ledger.install(self.run_dir / LEDGER_DIR, mode, quiet=self.worker not in ("main", "gw0"))
        except Exception as exc:  # noqa: BLE001 - a broken ledger must not take the test run down
            _warn(f"ledger install failed ({type(exc).__name__}: {exc}); continuing without it")

    def _watch_children(self) -> Any:
        from faulthunt.children import DEFAULT_POLL_S, POLL_ENV, ChildWatch

        try:
            poll_s = float(os.environ.get(POLL_ENV, DEFAULT_POLL_S))
        except ValueError:
            _warn(f"{POLL_ENV}={os.environ[POLL_ENV]!r} is not a number of seconds; "
                  f"polling every {DEFAULT_POLL_S}s")
            poll_s = DEFAULT_POLL_S
        events = self.events

        def write(fields: dict[str, Any]) -> None:
            events.event("child", **fields)

        watch = ChildWatch(write, worker=self.worker, pid=self.pid, poll_s=poll_s)
        try:
            watch.install()
        except Exception as exc:  # noqa: BLE001 - the run goes on without child records
            _warn(f"child processes will not be recorded ({type(exc).__name__}: {exc})")
        return watch

    # pytest hooks ----------------------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # each test's base id is worked out when it runs (pytest_runtest_protocol): an xdist
        # worker collects the whole suite but runs its share of it; the repeat counts it needs
        # are remembered per parent node
        self._count_of = _repeat_counts()
        result = self.config.stash.get(_REPEATED, None) or RepeatResult()
        count = self.config.getoption("count", None)
        self.events.event(
            "collected", worker=self.worker, pid=self.pid, items=len(session.items),
            count=count if isinstance(count, int) else result.count,
            repeated=_still_repeated(session.items, result.repeated),
            not_repeated=[nested("NotRepeated", nodeid=n, why=w) for n, w in result.not_repeated],
            child_polling=self.children.polling, **_now())
        if result.not_repeated and self.worker in ("main", "gw0"):
            names = ", ".join(n for n, _ in result.not_repeated[:5])
            _warn(f"{len(result.not_repeated)} test(s) run once, not --count times: {names} "
                  f"({result.not_repeated[0][1]})")

    def pytest_unconfigure(self) -> None:
        self.children.uninstall()

    @_PER_TEST_WRAPPER
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        if self.poisoned is not None and self.recycle:
            self._recycle_before(item)
        nodeid = item.nodeid
        base = self._base.get(nodeid)
        if base is None:
            base = self._base[nodeid] = base_nodeid(item, self._count_of)
        self._reports = []
        if self._subtests:
            self._subtests, self._subtests_failed = {}, []
        t0 = time.monotonic()
        self.events.write_line(self._lines.start(time.time(), t0, nodeid, base))
        context.set_current(nodeid, base)
        try:
            result = yield  # a new-style wrapper returns it; an old-style one's return is unused
        finally:
            context.set_current(None, None)
            self._finish(nodeid, base, time.monotonic() - t0)
        return result

    def _finish(self, nodeid: str, base: str, duration: float) -> None:
        if self._hanging:  # the test ended while the watchdog dumps its stacks: it ends us
            self._await_hang_exit()  # (its reports are held at pytest_runtest_logreport)
        run = _combine(self._reports)
        outcome, longrepr, sticky = run.outcome, None, None
        if run.text is not None:
            longrepr = _redact(bound_text(run.text, _LONGREPR_LIMIT))
            if outcome in ("failed", "error"):
                from faulthunt.cudaerrors import find_sticky  # a failure's text alone needs it

                match = find_sticky(run.text)
                # a sticky error quoted from a child's output (the test ran its GPU work in a
                # subprocess) says nothing of this process's context when this process never
                # loaded the CUDA driver: it has none to poison
                if match is not None and (not self.children.started_any(nodeid)
                                          or _cuda_driver_loaded()):
                    sticky = _sticky_record(match)
        if outcome in ("failed", "error") and self.poisoned is not None:
            # The context was already poisoned by an earlier test in this process.
            outcome = "collateral"
        if (longrepr is None and run.message is None and sticky is None and not run.reruns
                and outcome != "collateral" and not self._subtests and not self._subtests_failed):
            # the usual end (most tests): nothing but the outcome and the times to write
            self.events.write_line(self._lines.end(time.time(), time.monotonic(), nodeid, base,
                                                   outcome, round(duration, 6)))
        else:
            self.events.event(
                "end", worker=self.worker, pid=self.pid, t=time.time(), t_mono=time.monotonic(),
                nodeid=nodeid, base_nodeid=base, outcome=outcome, duration=round(duration, 6),
                longrepr=longrepr, message=run.message, sticky_cuda_error=sticky,
                collateral_of=self.poisoned_by if outcome == "collateral" else None,
                reruns=run.reruns, subtests=self._subtests or None,
                subtests_failed=self._subtests_failed)
        if sticky is not None and self.poisoned is None:
            self.poisoned, self.poisoned_by = sticky, nodeid

    def _recycle_before(self, item: pytest.Item) -> None:
        """End this worker before ``item`` runs; xdist restarts it and reschedules ``item``."""
        self.events.event("recycle", worker=self.worker, pid=self.pid, before=item.nodeid,
                          poisoned_by=self.poisoned_by, error=self.poisoned, **_now())
        self.events.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_RECYCLE)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # tryfirst: before xdist's own implementation serializes the report for the controller
        if self._hanging:  # a report of a test already recorded hung must not reach it
            self._await_hang_exit()
        if report.sections or report.outcome != "passed":
            text, message = _bound_report(report)
        else:  # nothing to bound, no failure text: most reports (the call skips _bound_report)
            text = message = None
        context_ = getattr(report, "context", None)
        if context_ is not None and report.when == "call":
            self._subtest(report, context_, message)
        self._reports.append((report, text, message))

    def _subtest(self, report: pytest.TestReport, ctx: Any, message: str | None) -> None:
        """Count a subtest's outcome; keep a failed one's label and exception line."""
        self._subtests[report.outcome] = self._subtests.get(report.outcome, 0) + 1
        if report.failed and len(self._subtests_failed) < 50:
            parts = [f"[{ctx.msg}]"] if getattr(ctx, "msg", None) is not None else []
            kwargs = getattr(ctx, "kwargs", None) or {}
            if kwargs:
                parts.append("(" + ", ".join(f"{k}={v}" for k, v in kwargs.items()) + ")")
            label = _redact(" ".join(parts) or "(<subtest>)")
            self._subtests_failed.append(nested("SubtestFailure", label=label[:_MESSAGE_LIMIT],
                                                message=message))

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool | None:
        """Take over pytest-timeout's thread method: dump stacks, record ``hung``, then end."""
        if getattr(settings, "method", None) != "thread":
            return None  # signal method: pytest-timeout's own (it fails the test, no dump)
        watchdog = HangWatchdog(float(settings.timeout), lambda: self._on_hang(item, settings))
        item.cancel_timeout = watchdog.cancel  # type: ignore[attr-defined]  # pytest-timeout calls it
        watchdog.start()
        return True

    def _await_hang_exit(self) -> None:
        """Hold the main thread while the watchdog dumps and ends the worker: a test that ends
        by itself meanwhile would be reported passed to the controller beside its hang, get a
        second end record and start the next test. Bounded
        (py-spy's own limit is 30 s) so a wedged dump cannot hold the worker forever."""
        time.sleep(HANG_EXIT_WAIT_S)  # the watchdog's os._exit ends it sooner

    def _on_hang(self, item: pytest.Item, settings: Any) -> None:
        from faulthunt import supervise

        self._hanging = True
        self._hangs += 1
        stem = f"{self.worker}-{self.pid}-{self._hangs}"
        hang_dir = self.run_dir / HANGS_DIR
        # The outcome first: if a dump below wedges, the record already says hung.
        self.events.event(
            "end", **self._test(item.nodeid), outcome="hung", duration=float(settings.timeout),
            longrepr=f"hung: exceeded the {settings.timeout:g}s per-test timeout",
            message=f"hung: exceeded the {settings.timeout:g}s per-test timeout")
        py = supervise.dump_python_stacks(hang_dir / f"{stem}.faulthandler.txt")
        spy = supervise.pyspy_dump(self.pid, hang_dir / f"{stem}.py-spy.txt")
        self.events.event(
            "hang", **self._test(item.nodeid), timeout=float(settings.timeout),
            faulthandler=_rel(py.path, self.run_dir), faulthandler_error=py.error,
            pyspy=_rel(spy.path, self.run_dir), pyspy_error=spy.error,
            process_tree=_processes(supervise.process_tree(self.pid)))
        msg = (f"+++ faulthunt: {item.nodeid} hung (> {settings.timeout:g}s); "
               f"python stacks: {py.path or py.error}; native stacks: {spy.path or spy.error}; "
               "ending the worker +++")
        print(msg, file=sys.__stderr__, flush=True)
        self.events.close()
        os._exit(EXIT_HUNG)


def _bound_report(report: pytest.TestReport) -> tuple[str | None, str | None]:
    """Bound what the report carries (captured sections, failure text) before anyone sends or
    keeps it. The failure text (rendered once) and its exception line, for the caller; (None,
    None) when the report did not fail."""
    sections = report.sections
    if sections and any(len(content) > REPORT_TEXT_LIMIT for _, content in sections):
        report.sections = [(title, bound_text(content, REPORT_TEXT_LIMIT))
                           for title, content in sections]
    if not (report.failed or report.outcome == RERUN) or report.longrepr is None:
        return None, None
    text = report.longreprtext
    message = crash_message(report)
    if len(text) > REPORT_TEXT_LIMIT:
        text = bound_text(text, REPORT_TEXT_LIMIT)
        # a plain text from here on: the exception line goes on top, where pytest's short
        # summary line looks for it
        report.longrepr = f"{message}\n{text}" if message else text
    return text, message


def _cuda_driver_loaded() -> bool:
    """Whether this process has the CUDA driver library mapped (``libcuda.so``); True when that
    cannot be read (a sticky error is then taken at its word, as before)."""
    try:
        with open("/proc/self/maps", "rb") as fh:
            return b"libcuda.so" in fh.read()
    except OSError:
        return True


def _max_worker_restart(config: pytest.Config) -> int | None:
    """xdist's restart budget, by its own rule (xdist.dsession.get_default_max_worker_restart):
    ``--max-worker-restart``, else 4 per worker of ``-n``, else none."""
    value = config.getoption("maxworkerrestart", None)
    if value is not None:
        try:
            return int(value)
        except (TypeError, ValueError):
            return None
    workers = config.getoption("numprocesses", None)
    return workers * 4 if isinstance(workers, int) and workers > 0 else None


def _rel(path: Path | None, root: Path) -> str | None:
    if path is None:
        return None
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


class _Run:
    """One test run's outcome from its reports (see :func:`_combine`)."""

    __slots__ = ("outcome", "text", "message", "reruns")

    def __init__(self, outcome: str, text: str | None, message: str | None, reruns: int) -> None:
        self.outcome, self.text, self.message, self.reruns = outcome, text, message, reruns


def _combine(reports: list[tuple[pytest.TestReport, str | None, str | None]]) -> _Run:
    """One outcome for setup/call/teardown (and subtests, and reruns): a failed call or subtest
    -> failed, a failed fixture -> error; an attempt pytest-rerunfailures reran counts as a
    failure of this run even when a later attempt passed."""
    if len(reports) == 3:  # the usual run: setup, call and teardown passed, nothing to say
        (setup, _, _), (call, _, _), (teardown, _, _) = reports
        if (setup.outcome == call.outcome == teardown.outcome == "passed"
                and call.when == "call" and not hasattr(call, "wasxfail")):
            return _Run("passed", None, None, 0)
    outcome = "passed"
    texts: list[str] = []
    message: str | None = None
    reruns = 0
    for rep, text, rep_message in reports:
        if rep.outcome == RERUN:
            reruns += 1
        elif rep.failed:
            if rep.when == "call":
                outcome = "failed"
            elif outcome in ("passed", "skipped"):
                outcome = "error"
        elif rep.skipped and outcome == "passed":
            # an expected failure is not a skip, and neither can fail: both stay out of rates
            outcome = "xfailed" if hasattr(rep, "wasxfail") else "skipped"
        elif rep.when == "call" and hasattr(rep, "wasxfail") and outcome == "passed":
            outcome = "xpassed"  # a non-strict xfail that passed (strict ones fail above)
        else:
            continue
        if text is not None:
            texts.append(text)
            message = message or rep_message
    if not reports:
        outcome = "incomplete"
    elif reruns and outcome in ("passed", "skipped"):
        outcome = "failed"
        texts.insert(0, f"faulthunt: failed {reruns} time(s) before pytest-rerunfailures' "
                        "last attempt passed; the first failure:")
    elif outcome == "passed" and not any(rep.when == "call" for rep, _text, _msg in reports):
        # setup passed and no call report: the test was stopped (KeyboardInterrupt, pytest.exit)
        outcome = "interrupted"
    return _Run(outcome, "\n".join(texts) if texts else None, message, reruns)


# --- the hang watchdog (here, not in faulthunt.supervise: every worker arms it, and supervise's
# dumps, py-spy and process trees are needed only when a test hangs) ---------------------------

class _Watcher:
    """One daemon thread per process that calls the armed test's ``on_hang`` at its deadline.

    A thread per test (pytest-timeout's own thread method, and this module's first watchdog)
    costs a thread start and join per test, 0.3 ms of CPU on the 2-core dev machine: 7% of a
    CPU-bound stress run's tests. Arming and disarming this one is a lock, and wakes the thread
    only when it must look sooner than it already will: the thread sleeps until the latest
    deadline it knows of, then looks at what is armed by then. With one timeout for every test
    each new deadline lies after the one it sleeps to, so a test wakes nothing (it was two
    thread switches a test); a disarmed test is found disarmed when the thread next wakes.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: tuple[float, int, Callable[[], None]] | None = None
        self._token = 0
        self._firing: int | None = None
        self._fired = threading.Event()
        self._pid: int | None = None
        #: the monotonic time the thread will look again by itself (inf: only when notified)
        self._wake = math.inf
        #: the latest deadline ever armed: with nothing armed the thread sleeps until then, so
        #: that the next test (whose deadline lies after it) need not wake it
        self._latest = -math.inf
        #: notifications sent (tests count them: none per test when the deadlines only grow)
        self.notified = 0

    def arm(self, timeout: float, on_hang: Callable[[], None]) -> int:
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child: no thread here yet
                self._pid = os.getpid()
                self._wake = math.inf
                threading.Thread(target=self._run, name="faulthunt-hang-watchdog",
                                 daemon=True).start()
            self._token += 1
            deadline = time.monotonic() + timeout
            self._armed = (deadline, self._token, on_hang)
            self._latest = max(self._latest, deadline)
            if deadline < self._wake:
                self.notified += 1
                self._cond.notify()
            return self._token

    def disarm(self, token: int) -> None:
        with self._cond:
            if self._armed is not None and self._armed[1] == token:
                self._armed = None  # the thread finds nothing armed when it next looks
                return
            firing = self._firing == token
        if firing and threading.current_thread().name != "faulthunt-hang-watchdog":
            self._fired.wait(5)  # on_hang is dumping stacks and ends the process

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._armed is None:
                        idle = self._latest - time.monotonic()
                        self._wake = self._latest if idle > 0 else math.inf
                        self._cond.wait(idle if idle > 0 else None)
                        continue
                    deadline, token, on_hang = self._armed
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._wake = deadline
                    self._cond.wait(left)
                self._armed = None
                self._firing = token
                self._wake = math.inf
            try:
                on_hang()
            finally:
                self._fired.set()


_WATCHER = _Watcher()


class HangWatchdog:
    """A per-test timer: on expiry call ``on_hang`` (which dumps and ends) from another thread.

    Thread method on purpose: a SIGALRM handler never runs while the main thread sits inside a
    CUDA synchronize (seen on the H200), a second thread does. One thread serves every test of a
    process (:class:`_Watcher`).
    """

    def __init__(self, timeout: float, on_hang: Callable[[], None]) -> None:
        self.timeout = timeout
        self._on_hang = on_hang
        self._token: int | None = None

    def start(self) -> None:
        self._token = _WATCHER.arm(self.timeout, self._on_hang)

    def cancel(self) -> None:
        if self._token is not None:
            _WATCHER.disarm(self._token)
            self._token = None


# --- controller side ---------------------------------------------------------------------------

#: plugin -> distribution, for the versions a session records (docs/plugin.md)
_KNOWN_PLUGINS = {"xdist": "pytest-xdist", "repeat": "pytest-repeat", "timeout": "pytest-timeout",
                  "randomly": "pytest-randomly", "rerunfailures": "pytest-rerunfailures",
                  "benchmark": "pytest-benchmark", "pytest_cov": "pytest-cov",
                  "subtests": "pytest-subtests"}


def _plugins(config: pytest.Config) -> dict[str, str]:
    """The version of each known plugin that is loaded ("?" when its distribution is not found),
    read as identity.json reads package versions (importlib.metadata's answers, without parsing
    every METADATA through the email package)."""
    from faulthunt.identity import package_versions

    dists = tuple(dist for name, dist in _KNOWN_PLUGINS.items() if config.pluginmanager.hasplugin(name))
    found = package_versions(dists)
    return {dist: found.get(dist, "?") for dist in dists}


class ControllerRecorder:
    """Writes controller.jsonl: session bounds, worker slots, dead workers, crashes, hangs,
    recycles, collection errors."""

    def __init__(self, config: pytest.Config, run_dir: Path) -> None:
        self.config = config
        self.run_dir = run_dir
        self.log = LineWriter(run_dir / CONTROLLER, on_full=_warn)
        #: the worker_down record of each worker that went down (its fields)
        self._down: dict[str, dict[str, Any]] = {}
        self._errordowns = 0
        self._restart_limit = _max_worker_restart(config)
        self._slots: dict[int, tuple[Any, str]] = {}
        self._collect_errors: set[str] = set()
        seed = config.getoption("randomly_seed", None)
        from faulthunt.redact import redact_argv

        self.log.event("session_start", pid=os.getpid(),
                       argv=redact_argv([str(a) for a in config.invocation_params.args]),
                       xdist=config.getoption("dist", "no") != "no",
                       random_seed=seed if isinstance(seed, int) else None,
                       plugins=_plugins(config), rootdir=str(config.rootpath), **_now())

    def _worker_records(self, worker: str) -> tuple[WorkerEvent | Any, ...]:
        """What the worker's processes wrote so far (read afresh: they may have just died). The
        run directory's reader is imported here, when a worker went down."""
        from faulthunt.rundir import RunDir

        return RunDir(self.run_dir).worker_events(worker)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """A worker starts: its slot is that of the worker it replaces (xdist restarts a dead
        worker from the same gateway spec object, with a new id: dsession._clone_node)."""
        spec = node.gateway.spec
        worker = str(node.gateway.id)
        _, slot = self._slots.setdefault(id(spec), (spec, worker))
        env = getattr(spec, "env", None) or {}
        self.log.event("worker_up", worker=worker, slot=slot, device=env.get("CUDA_VISIBLE_DEVICES"),
                       **_now())

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A collector failed (xdist hands the controller each worker's failed report)."""
        if not report.failed or report.nodeid in self._collect_errors:
            return
        self._collect_errors.add(report.nodeid)
        text = report.longreprtext
        self.log.event("collect_error", nodeid=report.nodeid or ".",
                       message=crash_message(report) or _exception_line(text),
                       longrepr=_redact(bound_text(text, _LONGREPR_LIMIT)), **_now())

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object | None) -> None:
        if error is None:
            return
        from faulthunt.records.events import WorkerHello
        from faulthunt.supervise import peek_exit

        worker = str(node.gateway.id)
        records = self._worker_records(worker)
        pid = next((r.pid for r in records if isinstance(r, WorkerHello)), None)
        info = peek_exit(pid) if pid is not None else None
        down = {"worker": worker, "pid": pid, **_now(), "error": str(error)[:500],
                "exit_status": info.exit_status if info else None,
                "signal": info.signal if info else None,
                "signal_name": info.signal_name if info else None,
                "device": node.gateway.spec.env.get("CUDA_VISIBLE_DEVICES")}
        self._down[worker] = down
        self.log.event("worker_down", **down)
        # xdist has no hook or public state for "restart budget exhausted"; it counts the nodes
        # that went down with an error against --max-worker-restart (dsession.worker_errordown),
        # and so do we, from its public option and this public hook, instead of its wording.
        self._errordowns += 1
        if self._restart_limit is not None and self._errordowns == self._restart_limit + 1:
            self.log.event("restart_limit", limit=self._restart_limit, down=self._errordowns,
                           **_now())

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        from faulthunt.records.events import Hang, Recycle, TestEnd, TestStart

        node = getattr(report, "node", None)
        worker = str(node.gateway.id) if node is not None else "?"
        records = self._worker_records(worker)
        down = self._down.get(worker) or {}
        pid: int | None = down.get("pid")
        signal_name, exit_status = down.get("signal_name"), down.get("exit_status")
        start = next((r for r in reversed(records)
                      if isinstance(r, TestStart) and r.nodeid == crashitem), None)
        count = self.config.getoption("count", None)
        base = (start.base_nodeid if start else None) or base_from_nodeid(
            crashitem, count if isinstance(count, int) else None)
        last = records[-1] if records else None
        if isinstance(last, Recycle) and last.before == crashitem:
            self._recycled(crashitem, report, sched, worker, pid, last, down)
            return None
        hung = next((r for r in reversed(records) if isinstance(r, Hang)
                     and r.nodeid == crashitem), None)
        previous = next((r.nodeid for r in reversed(records)
                         if isinstance(r, TestEnd) and r.pid == pid), None)
        fh_tail = None
        if pid is not None:
            from faulthunt.supervise import head_text

            fh_tail = head_text(self.run_dir / FAULTHANDLER_DIR / f"{worker}-{pid}.txt", 3000)
            fh_tail = _redact(fh_tail) if fh_tail else None
        how = (signal_name and f"killed by {signal_name}") or (
            exit_status is not None and f"exit status {exit_status}") or (
            "exit status unknown")
        if hung is not None:
            report.longrepr = (f"faulthunt: {crashitem} hung in worker {worker} (pid {pid}): "
                               f"exceeded {hung.timeout}s; python stacks "
                               f"{hung.faulthandler or hung.faulthandler_error}, "
                               f"native stacks {hung.pyspy or hung.pyspy_error} "
                               f"(in {self.run_dir})")
        elif start is None:
            report.longrepr = (f"faulthunt: worker {worker} (pid {pid}) died before {crashitem} "
                               f"started ({how})"
                               + (f", after {previous}" if previous else "")
                               + "; the test never ran (lost, not failed)"
                               + (f"\n{fh_tail}" if fh_tail else ""))
        else:
            report.longrepr = (f"faulthunt: worker {worker} (pid {pid}) crashed while running "
                               f"{crashitem}: {how}"
                               + (f"\n{fh_tail}" if fh_tail else ""))
        self.log.event("crash", kind="hung" if hung is not None else "crashed", nodeid=crashitem,
                       base_nodeid=base, worker=worker, pid=pid, signal=down.get("signal"),
                       signal_name=signal_name, exit_status=exit_status,
                       device=down.get("device"), faulthandler=fh_tail, started=start is not None,
                       previous=previous if start is None else None, **_now())
        return None

    def _recycled(self, crashitem: str, report: pytest.TestReport, sched: Any, worker: str,
                  pid: int | None, last: Recycle, down: dict[str, Any]) -> None:
        try:
            sched.mark_test_pending(crashitem)
        except (NotImplementedError, AttributeError, ValueError) as exc:
            self.log.event("recycle_lost", nodeid=crashitem, worker=worker, pid=pid,
                           reason=f"{type(exc).__name__}: {exc}", **_now())
            report.longrepr = (f"faulthunt: worker {worker} was recycled after a sticky CUDA "
                               f"error in {last.poisoned_by} and this scheduler "
                               "cannot reschedule the test it had queued")
            return
        report.outcome = "rerun"  # type: ignore[assignment]
        report.longrepr = (f"faulthunt: worker {worker} recycled after a sticky CUDA error in "
                           f"{last.poisoned_by}; {crashitem} rescheduled")
        self.log.event("recycled", worker=worker, pid=pid, nodeid=crashitem,
                       poisoned_by=last.poisoned_by, exit_status=down.get("exit_status"), **_now())

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.log.event(
            "session_finish", exitstatus=int(exitstatus),
            shouldstop=str(session.shouldstop) if session.shouldstop else None,
            shouldfail=str(session.shouldfail) if session.shouldfail else None,
            testsfailed=session.testsfailed, **_now())


def _exception_line(text: str) -> str | None:
    """The exception line of a failure text (faulthunt.summary picks it the same way)."""
    from faulthunt.summary import exception_line

    return exception_line(text)
