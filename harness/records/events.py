"""The event records of a stress run: worker events (``events/<worker>-<pid>.jsonl``) and
controller events (``controller.jsonl``), schema in docs/rundir.md.

Each kind is a frozen Struct tagged by its ``event`` field. A new kind (a process-tree record, a
guard record) is a new Struct with its own ``tag`` added to :data:`WORKER_EVENT_TYPES` or
:data:`CONTROLLER_EVENT_TYPES`; until a reader knows a kind, its lines read as :class:`OtherEvent`
(kept, not counted as damage), so an older faulthunt reads a newer run.
"""

# No `from __future__ import annotations`: msgspec reads a string annotation through
# typing.ForwardRef, which compiles it, for every field of every record type a decoder
# is made for (docs/performance.md, round 12). A type named before it is defined is quoted.

from typing import Any

import msgspec

from faulthunt.records.codec import DECODE_ERRORS, Doc, decode_json, decode_with, decoder


class StickyError(Doc, frozen=True, kw_only=True):
    """A sticky CUDA error recognised in a failure's text (faulthunt.cudaerrors.StickyMatch)."""

    code: int | None = None
    name: str | None = None
    driver_name: str | None = None
    sticky: bool | None = None
    text: str | None = None
    by: str | None = None


class ProcessInfo(Doc, frozen=True, kw_only=True):
    """One process of a hung worker's tree (psutil), as the hang record lists it."""

    pid: int | None = None
    ppid: int | None = None
    name: str | None = None
    status: str | None = None
    cmdline: list[str] | str | None = None


class _Event(Doc, frozen=True, kw_only=True, tag_field="event"):
    """Fields every event carries: the process that wrote it and when (wall and monotonic)."""

    worker: str | None = None
    pid: int | None = None
    t: float | None = None
    t_mono: float | None = None


# --- worker side ---------------------------------------------------------------------------------

class WorkerHello(_Event, frozen=True, kw_only=True, tag="worker"):
    """The first line of every worker file: who this process is."""

    ppid: int | None = None
    cuda_visible_devices: str | None = None
    recycle: bool | None = None


class TestStart(_Event, frozen=True, kw_only=True, tag="start"):
    """A test began in this process."""

    __test__ = False  # not a pytest test class

    nodeid: str
    base_nodeid: str | None = None
    device: str | None = None


class SubtestFailure(Doc, frozen=True, kw_only=True):
    """A failed subtest (unittest ``subTest``, pytest's ``subtests`` fixture): its label as pytest
    prints it (``[msg] (i=1)``) and its exception line."""

    label: str = ""
    message: str | None = None


class TestEnd(_Event, frozen=True, kw_only=True, tag="end"):
    """A test ended in this process (``hung``: written by the watchdog before its dumps).

    ``longrepr`` is pytest's failure text, bounded (head and tail kept) and with secrets
    scrubbed; ``message`` its exception line (pytest's own crash line: ``AssertionError: ...``).
    ``reruns``: attempts pytest-rerunfailures made before the last (a run with reruns failed at
    least once, whatever its last attempt did). ``subtests``: outcomes of its subtests, counted.
    """

    __test__ = False

    nodeid: str
    base_nodeid: str | None = None
    outcome: str = "incomplete"
    duration: float | None = None
    longrepr: str | None = None
    message: str | None = None
    sticky_cuda_error: StickyError | None = None
    collateral_of: str | None = None
    reruns: int = 0
    subtests: dict[str, int] | None = None
    subtests_failed: list[SubtestFailure] = []


class Hang(_Event, frozen=True, kw_only=True, tag="hang"):
    """A test outlived its timeout; where its stack dumps went (paths relative to the run)."""

    nodeid: str
    base_nodeid: str | None = None
    timeout: float | None = None
    faulthandler: str | None = None
    faulthandler_error: str | None = None
    pyspy: str | None = None
    pyspy_error: str | None = None
    process_tree: list[ProcessInfo] = []


class Recycle(_Event, frozen=True, kw_only=True, tag="recycle"):
    """This worker ends itself before ``before`` runs: its CUDA context is poisoned."""

    before: str | None = None
    poisoned_by: str | None = None
    error: StickyError | None = None


class ChildProcess(_Event, frozen=True, kw_only=True, tag="child"):
    """A process this worker (``pid``) started, directly or further down, seen while ``nodeid``
    ran (None: between tests). ``how``: subprocess, multiprocessing, fork, posix_spawn (seen as
    it was created), poll (found among the worker's descendants) or exec (seen again under the
    new name its exec gave it: creation can be seen before the rename). ``name``: the kernel's name
    for it (``/proc/<pid>/comm``, what an Xid line's ``name=`` says)."""

    child_pid: int
    parent_pid: int | None = None
    name: str | None = None
    how: str | None = None
    nodeid: str | None = None
    base_nodeid: str | None = None


class NotRepeated(Doc, frozen=True, kw_only=True):
    """An item that runs fewer times than ``--count`` asks, and why."""

    nodeid: str
    why: str = ""


class Collected(_Event, frozen=True, kw_only=True, tag="collected"):
    """What this worker collected (written once, after collection): items to run, the repeat
    count, the items faulthunt repeated itself (pytest-repeat leaves unittest methods, doctests
    and plugin items alone; counted per item type) and those it could not; how children are
    watched."""

    items: int = 0
    count: int = 1
    repeated: dict[str, int] = {}
    not_repeated: list[NotRepeated] = []
    child_polling: str | None = None


# --- controller side -----------------------------------------------------------------------------

class SessionStart(_Event, frozen=True, kw_only=True, tag="session_start"):
    argv: list[str] = []
    xdist: bool | None = None
    #: pytest-randomly's seed (None: not loaded); ``--randomly-seed=N`` replays the order
    random_seed: int | None = None
    #: the versions of the loaded plugins faulthunt knows to interact with (docs/plugin.md)
    plugins: dict[str, str] = {}
    #: pytest's rootdir: node ids are relative to it (not to the directory pytest ran in)
    rootdir: str | None = None


class WorkerUp(_Event, frozen=True, kw_only=True, tag="worker_up"):
    """xdist started worker ``worker`` in slot ``slot`` (the id of the slot's first worker:
    a worker restarted after a crash or a recycle gets a new id, gw4 for gw0, and keeps its
    slot and device)."""

    slot: str | None = None
    device: str | None = None


class CollectError(_Event, frozen=True, kw_only=True, tag="collect_error"):
    """A collector failed (a test module that does not import): its tests never ran.
    ``longrepr`` bounded and with secrets scrubbed, ``message`` its exception line."""

    nodeid: str
    message: str | None = None
    longrepr: str | None = None


class WorkerDown(_Event, frozen=True, kw_only=True, tag="worker_down"):
    """xdist saw a worker go down (``pytest_testnodedown`` with an error)."""

    error: str | None = None
    exit_status: int | None = None
    signal: int | None = None
    signal_name: str | None = None
    device: str | None = None


class Crash(_Event, frozen=True, kw_only=True, tag="crash"):
    """A worker died (``crashed``) or was ended by the watchdog (``hung``) while running ``nodeid``.

    ``started`` False: xdist blamed the test it had queued next, which never started (the worker
    died between two tests): that test is *lost*, not failed; ``previous`` is the last test the
    worker process ended before it died."""

    kind: str = "crashed"
    nodeid: str
    base_nodeid: str | None = None
    signal: int | None = None
    signal_name: str | None = None
    exit_status: int | None = None
    device: str | None = None
    faulthandler: str | None = None
    started: bool | None = None
    previous: str | None = None


class Recycled(_Event, frozen=True, kw_only=True, tag="recycled"):
    """A recycled worker's queued test was rescheduled."""

    nodeid: str | None = None
    poisoned_by: str | None = None
    exit_status: int | None = None


class RecycleLost(_Event, frozen=True, kw_only=True, tag="recycle_lost"):
    """A recycled worker's queued test could not be rescheduled (the scheduler cannot)."""

    nodeid: str | None = None
    reason: str | None = None


class RestartLimit(_Event, frozen=True, kw_only=True, tag="restart_limit"):
    """xdist's worker-restart budget ran out (``--max-worker-restart``): it stops the session
    and the tests not yet run never run."""

    limit: int | None = None
    #: workers that went down with an error so far (xdist counts recycled ones too)
    down: int | None = None


class SessionFinish(_Event, frozen=True, kw_only=True, tag="session_finish"):
    exitstatus: int | None = None
    shouldstop: str | None = None
    shouldfail: str | None = None
    testsfailed: int | None = None


class OtherEvent(Doc, frozen=True, kw_only=True):
    """A line of a kind this faulthunt does not know (written by a newer one): kept, not read."""

    event: str
    data: dict[str, Any] = {}


WORKER_EVENT_TYPES: tuple[type[_Event], ...] = (WorkerHello, TestStart, TestEnd, Hang, Recycle,
                                                ChildProcess, Collected)
CONTROLLER_EVENT_TYPES: tuple[type[_Event], ...] = (SessionStart, WorkerDown, Crash, Recycled,
                                                    RecycleLost, RestartLimit, SessionFinish,
                                                    WorkerUp, CollectError)

WorkerEvent = WorkerHello | TestStart | TestEnd | Hang | Recycle | ChildProcess | Collected
ControllerEvent = (SessionStart | WorkerDown | Crash | Recycled | RecycleLost | RestartLimit
                   | SessionFinish | WorkerUp | CollectError)


def _tags(types: tuple[type[_Event], ...]) -> frozenset[str]:
    return frozenset(str(t.__struct_config__.tag) for t in types)


_WORKER_TAGS = _tags(WORKER_EVENT_TYPES)
_CONTROLLER_TAGS = _tags(CONTROLLER_EVENT_TYPES)


def _decode_event(line: bytes, union: Any, known: frozenset[str]
                  ) -> tuple[Any, str | None]:
    event, why = decode_with(decoder(union), line)
    if why is None:
        return event, None
    # a valid line of a kind we do not know is not damage: keep it as OtherEvent
    value, not_json = decode_json(line)
    if not_json is None and isinstance(value, dict):
        kind = value.get("event")
        if isinstance(kind, str) and kind not in known:
            return OtherEvent(event=kind, data=value), None
    return None, why


def decode_worker_event(line: bytes) -> tuple[WorkerEvent | OtherEvent | None, str | None]:
    """One ``events/*.jsonl`` line: (event, None) or (None, why it is not one)."""
    return _decode_event(line, WorkerEvent, _WORKER_TAGS)


def decode_controller_event(line: bytes) -> tuple[ControllerEvent | OtherEvent | None, str | None]:
    """One ``controller.jsonl`` line: (event, None) or (None, why it is not one)."""
    return _decode_event(line, ControllerEvent, _CONTROLLER_TAGS)


def worker_event_from_json(obj: Any) -> WorkerEvent | OtherEvent | None:
    """A worker event from an already-parsed mapping (None when it is not a valid one)."""
    event: WorkerEvent | OtherEvent | None = _from_obj(obj, WorkerEvent, _WORKER_TAGS)
    return event


def controller_event_from_json(obj: Any) -> ControllerEvent | OtherEvent | None:
    """A controller event from an already-parsed mapping (None when it is not a valid one)."""
    event: ControllerEvent | OtherEvent | None = _from_obj(obj, ControllerEvent, _CONTROLLER_TAGS)
    return event


def _from_obj(obj: Any, union: Any, known: frozenset[str]) -> Any:
    if isinstance(obj, (_Event, OtherEvent)):
        return obj
    if not isinstance(obj, dict):
        return None
    try:
        return msgspec.convert(obj, union)
    except DECODE_ERRORS:
        kind = obj.get("event")
        if isinstance(kind, str) and kind not in known:
            return OtherEvent(event=kind, data=dict(obj))
        return None
