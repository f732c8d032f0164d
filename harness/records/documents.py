"""The JSON documents of a run directory (docs/rundir.md), as typed, frozen Structs.

``run.json`` (:class:`RunInfo`), ``summary.json`` (:class:`Summary`), ``xid.jsonl`` lines
(:class:`XidLine`), ``mapping.json`` entries (:class:`MappingEntry`), ``identity.json``
(:class:`Identity`), ``sanitizer/sanitizer.json`` (:class:`SanitizerDoc`) and
``kmsg_cursor.json`` (:class:`KmsgCursorDoc`). Fields are the ones readers use; a field a reader
does not know is ignored on reading, so old and new runs read alike. Reading them is
:class:`faulthunt.rundir.RunDir`'s job; the types here only say what a valid one is.
"""

# No `from __future__ import annotations`: msgspec reads a string annotation through
# typing.ForwardRef, which compiles it, for every field of every record type a decoder
# is made for (docs/performance.md, round 12). A type named before it is defined is quoted.

import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from faulthunt.records.codec import Doc
from faulthunt.records.events import StickyError, SubtestFailure

#: run.json ``kind`` of each command that makes a run directory
RUN_KINDS = ("stress", "sanitize", "merged")


def _builtins(value: Any) -> Any:
    """Options and the like as JSON data (lists, not tuples): paths and other objects become
    their text."""
    return msgspec.json.decode(msgspec.json.encode(value, enc_hook=str))


def _redacted(value: Any) -> Any:
    """Options as recorded: lists of text redacted as command lines, mappings of text as
    environments (faulthunt.redact), other text as values; nested alike."""
    from faulthunt.redact import redact_argv, redact_env, redact_text

    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return redact_argv(value)
        return [_redacted(v) for v in value]
    if isinstance(value, dict):
        if value and all(isinstance(v, str) for v in value.values()):
            return redact_env(value)
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, str):
        return redact_text(value)
    return value


class RunInfo(Doc, frozen=True, kw_only=True):
    """``run.json``: what made this run directory and how it ended."""

    id: str | None = None
    #: stress, sanitize or merged (None: a run.json written before the field existed: stress)
    kind: str | None = None
    argv: list[str] = []
    #: the user's pytest arguments: what to hand pytest to run these tests again
    pytest_args: list[str] = []
    #: the exact pytest command the run executed
    pytest_argv: list[str] = []
    cwd: str | None = None
    started: float | None = None
    ended: float | None = None
    faulthunt_version: str | None = None
    exit_status: int | None = None
    pytest_exit_status: int | None = None
    options: dict[str, Any] = {}
    #: merged runs: where each runner's directory came from (faulthunt.merge)
    merged_from: list[dict[str, Any]] | None = None

    @classmethod
    def begin(cls, run_id: str, *, kind: str, cwd: str, pytest_args: Sequence[str] = (),
              pytest_argv: Sequence[str] = (), options: Any = None,
              merged_from: Sequence[Mapping[str, Any]] | None = None,
              started: float | None = None, argv: Sequence[str] | None = None) -> "RunInfo":
        """The run.json of a run that starts now: the one place every command builds it."""
        from faulthunt import __version__
        from faulthunt.redact import redact_argv

        # Command lines carry secrets (`--api-token=...`, URLs with a password): redacted here,
        # the one place every command builds run.json, so no run.json holds them.
        return cls(id=run_id, kind=kind,
                   argv=redact_argv([str(a) for a in (sys.argv if argv is None else argv)]),
                   pytest_args=redact_argv([str(a) for a in pytest_args]),
                   pytest_argv=redact_argv([str(a) for a in pytest_argv]), cwd=str(cwd),
                   started=time.time() if started is None else started,
                   faulthunt_version=__version__,
                   options=_redacted(_builtins(options)) if options is not None else {},
                   merged_from=_builtins(list(merged_from)) if merged_from is not None else None)

    def finished(self, *, exit_status: int | None, pytest_exit_status: int | None = None,
                 ended: float | None = None) -> "RunInfo":
        """The same run, ended now with these statuses."""
        return msgspec.structs.replace(
            self, exit_status=exit_status, pytest_exit_status=pytest_exit_status,
            ended=time.time() if ended is None else ended)

    def option(self, name: str) -> Any:
        """One of the stress options the run was started with (None when not recorded)."""
        return self.options.get(name)


# --- xid.jsonl -----------------------------------------------------------------------------------

class XidMmu(Doc, frozen=True, kw_only=True):
    """The decoded MMU fault of an Xid 31 line (faulthunt.records.xid.MmuFault.to_json)."""

    address: int | None = None
    engine: str | None = None
    gpc: int | None = None
    client: str | None = None
    fault_type: str | None = None
    access_type: str | None = None
    decodable: bool | None = None
    address_text: str | None = None
    reason: str | None = None


class XidLine(Doc, frozen=True, kw_only=True, omit_defaults=True):
    """One ``xid.jsonl`` line: the parsed Xid (faulthunt.records.xid.XidEvent.to_json), when
    the follower saw it, and its attribution to a worker and test (docs/stress.md)."""

    xid: int | None = None
    pci: str | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None
    pid: int | None = None
    process: str | None = None
    message: str | None = None
    category: str | None = None
    mmu: XidMmu | None = None
    caused_by: int | None = None
    raw: str | None = None
    seq: int | None = None
    ts: float | None = None
    wall: str | None = None
    channel: int | None = None
    gr: dict[str, Any] | None = None
    level: int | None = None
    t: float | None = None
    t_seen: float | None = None
    t_seen_mono: float | None = None
    device: str | None = None
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    worker: str | None = None
    nodeid: str | None = None
    base_nodeid: str | None = None
    worker_device: str | None = None
    attributed_by: str | None = None
    #: the worker process behind an Xid from one of its children (``pid`` is the child's)
    worker_pid: int | None = None
    #: how the Xid's process relates to the run, in words: "child pid 4242 (python3) of worker
    #: gw1 (pid 4100), started by test ..."; None for a worker's own Xid or an unattributed one
    attribution: str | None = None


# --- summary.json --------------------------------------------------------------------------------

class Failure(Doc, frozen=True, kw_only=True):
    """A failing test run: failed, crashed, hung or collateral; or ``lost`` (never started: its
    worker died between two tests; not counted as a run or a failure of the test)."""

    nodeid: str
    base_nodeid: str | None = None
    outcome: str = "failed"
    phase: str | None = None
    worker: str | None = None
    pid: int | None = None
    device: str | None = None
    message: str | None = None
    sticky_cuda_error: StickyError | None = None
    signal: int | None = None
    signal_name: str | None = None
    exit_status: int | None = None
    #: attempts pytest-rerunfailures made before the last (a run with reruns counts as failed)
    reruns: int = 0
    subtests_failed: list[SubtestFailure] = []


class TestRate(Doc, frozen=True, kw_only=True):
    """``by_test``: one base test's runs, failures, rate and Wilson interval."""

    __test__ = False

    base_nodeid: str
    runs: int = 0
    failures: int = 0
    rate: float = 0.0
    ci95: list[float] = msgspec.field(default_factory=lambda: [0.0, 1.0])
    outcomes: dict[str, int] = {}
    collateral: int = 0
    xids: int = 0


class DeviceRow(Doc, frozen=True, kw_only=True, omit_defaults=True):
    """``by_device``: runs, failures and Xids of one GPU (or ``unpinned``)."""

    device: str
    runs: int | None = None
    failures: int | None = None
    xids: int = 0
    pci: str | None = None
    uuid: str | None = None
    name: str | None = None
    unpinned_runs: int | None = None
    note: str | None = None


class XidSpread(Doc, frozen=True, kw_only=True):
    """``xid_spread``: one Xid number across GPUs, tests and processes, and its reading."""

    xid: int | None = None
    count: int = 0
    devices: list[str] = []
    tests: list[str] = []
    processes: int = 0
    outside: int = 0
    gpus_visible: int | None = None
    verdict: str = "unknown_device"
    reading: str = ""


class WorkerCounts(Doc, frozen=True, kw_only=True):
    """Worker processes and slots: ``-n 4`` is four slots (gw0..gw3); a slot whose worker died
    or was recycled gets a new process (with a new id, gw4...): ``restarts`` counts those.
    ``slot_of`` maps each worker id to its slot (empty for runs recorded before slots were)."""

    processes: int = 0
    slots: int | None = None
    restarts: int | None = None
    slot_of: dict[str, str] = {}
    recycled: int = 0
    crashed: int = 0
    hung: int = 0
    lost: int = 0


class CollectionError(Doc, frozen=True, kw_only=True):
    """A collector that failed (a module that does not import): a failure of the run."""

    nodeid: str
    message: str | None = None


class KernelLogStatus(Doc, frozen=True, kw_only=True):
    """How the kernel log was followed during the run (only known while it ran)."""

    source: str | None = None
    error: str | None = None
    lost: int = 0
    lost_unknown: bool = False
    warnings: list[str] = []
    unparsed: int = 0
    unparsed_sample: list[str] = []


class RunTimeout(Doc, frozen=True, kw_only=True):
    """The per-test timeout a stress run used: seconds (None: off), where it came from
    (``--timeout``, ``default``, ``off`` or the suite's config file name) and the sentence."""

    seconds: float | None = None
    #: "from" in the JSON
    source: str | None = msgspec.field(default=None, name="from")
    text: str | None = None


class GuardCatch(Doc, frozen=True, kw_only=True):
    """One fault guard mode caught: its verdict, the guard's words, the test it ran in."""

    verdict: str | None = None
    text: str | None = None
    nodeid: str | None = None
    address: str | None = None


class GuardSummary(Doc, frozen=True, kw_only=True):
    """``summary.json`` ``guard``: what guard mode did in the run (faulthunt.guard.summarize_guard)."""

    enabled: bool = False
    #: the guard_config note of the first process (rate, side, align, max_bytes, seed, driver)
    config: dict[str, Any] | None = None
    #: device allocations the hooks saw (None: no process wrote its counts)
    allocations_seen: int | None = None
    allocations_guarded: int = 0
    guarded_bytes: int = 0
    by_framework: dict[str, int] = {}
    processes: int = 0
    freed: int = 0
    released: int = 0
    #: sampled allocations left unguarded: max_bytes reached, or the driver could not
    skipped_cap: int = 0
    failed: int = 0
    #: caught faults by verdict (past_end, before_start, freed) and each of them
    caught: dict[str, int] = {}
    catches: list[GuardCatch] = []
    #: mapped fault addresses inside a slot's slack ("inside the slack, not guardable")
    not_guardable: int = 0


class Summary(Doc, frozen=True, kw_only=True):
    """``summary.json``: the result of a run (faulthunt.summary.build_summary)."""

    tests_run: int = 0
    passed: int = 0
    skipped: int = 0
    outcomes: dict[str, int] = {}
    failures: list[Failure] = []
    xids: list[XidLine] = []
    by_test: list[TestRate] = []
    by_device: list[DeviceRow] = []
    xid_spread: list[XidSpread] = []
    workers: WorkerCounts = WorkerCounts()
    stopped_early: str | None = None
    session_finished: bool = False
    exit_status: int | None = None
    pytest_exit_status: int | None = None
    skipped_lines: dict[str, int] = {}
    kernel_log: KernelLogStatus | None = None
    warnings: list[str] = []
    #: modules that failed to import (their tests never ran): failures of the run
    collection_errors: list[CollectionError] = []
    #: subtests (unittest subTest, pytest's subtests fixture) by outcome, over all runs
    subtests: dict[str, int] = {}
    #: pytest-randomly's seed: ``--randomly-seed=N`` replays the order
    random_seed: int | None = None
    #: what the run says about itself: items not repeated, reruns counted as failures, ...
    notes: list[str] = []
    #: what only the stress run knew (faulthunt.stress.analyse): the signal that stopped it and
    #: the test runs that stop cut short, why no test ran (pytest's words), the per-test timeout
    #: in force, what could not be written for lack of room
    stopped_by: str | None = None
    interrupted: list[str] = []
    no_tests_reason: str | None = None
    timeout: RunTimeout | None = None
    disk_full: list[str] = []
    output_dropped_bytes: int = 0
    leftover_processes: int = 0
    #: what guard mode did (None: the run was not guarded)
    guard: GuardSummary | None = None

    def found_something(self) -> bool:
        """Failures of any kind, collection errors or any Xid: the run found something."""
        return bool(self.failures) or bool(self.xids) or bool(self.collection_errors)


# --- mapping.json --------------------------------------------------------------------------------

class MappingEntry(Doc, frozen=True, kw_only=True, omit_defaults=True):
    """One fault address and its verdict (docs/mapper.md); the fields readers of the file use."""

    origin: str | None = None
    address: str | None = None
    address_int: int | None = None
    page: bool | None = None
    verdict: str | None = None
    pid: int | None = None
    nodeid: str | None = None
    attributed_nodeid: str | None = None
    allocation: dict[str, Any] | None = None
    reason: str | None = None
    basis: str | None = None
    #: a sanitizer-based verdict: what the ledger said first (None or unmapped)
    ledger_verdict: str | None = None
    xid: int | None = None
    seq: int | None = None
    kind: str | None = None
    kernel: str | None = None
    note: str | None = None
    #: a guard slot's verdict (``basis: "guard"``, docs/guard.md): the range was unmapped (an
    #: access there faults), the guard's own words, bytes past the end / before the start
    caught: bool | None = None
    text: str | None = None
    beyond: int | list[int] | None = None


# --- identity.json, sanitizer.json, kmsg_cursor.json ---------------------------------------------

class IdentityGpu(Doc, frozen=True, kw_only=True):
    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    pci: str | None = None
    cc: str | None = None
    driver: str | None = None
    memory_total: int | None = None
    #: merged runs: the runner the GPU belongs to
    runner: str | None = None


class Identity(Doc, frozen=True, kw_only=True):
    """``identity.json``: the system identity basics the readers use (faulthunt.identity)."""

    host: str | None = None
    os: str | None = None
    kernel: str | None = None
    machine: str | None = None
    python: str | None = None
    python_executable: str | None = None
    faulthunt: str | None = None
    gpus: list[IdentityGpu] = []
    gpu_note: str | None = None
    driver: str | None = None
    driver_module: str | None = None
    cuda_driver: str | None = None
    cuda: str | None = None
    packages: dict[str, str | None] = {}
    error: str | None = None
    merged: bool = False
    runners: dict[str, Any] = {}


class AddressedFinding(Doc, frozen=True, kw_only=True):
    """A sanitizer finding with an address, as the mapper needs it (faulthunt.records.sanitizer)."""

    kind: str | None = None
    kernel: str | None = None
    file: str | None = None
    line: int | None = None
    access: str | None = None
    size: int | None = None
    address_range: tuple[int, int]
    nodeid: str | None = None
    nearest_allocation: dict[str, Any] | None = None
    #: the example record: a parsed record, or its text in sanitizer.json files of older runs
    example: dict[str, Any] | str | None = None

    def nearest(self) -> dict[str, Any] | None:
        """compute-sanitizer's nearest-allocation line: the finding's, else its example record's."""
        if isinstance(self.nearest_allocation, dict):
            return self.nearest_allocation
        if not isinstance(self.example, dict):
            return None
        near = self.example.get("nearest_allocation")
        return near if isinstance(near, dict) else None


#: ``SanitizeOutcome.outcome`` values: the honest result of rerunning one test under one tool
SANITIZE_OUTCOMES = ("found", "reproduced_silent", "not_reproduced", "timed_out", "not_checked")


class SanitizeOutcome(Doc, frozen=True, kw_only=True):
    """One test under one sanitizer tool, over all its reruns (faulthunt.sanitizer.analyse).

    ``found``: a sanitizer record, first in run ``found_in_run``; ``reproduced_silent``: the test
    failed under the sanitizer with no record; ``not_reproduced``: ``runs`` runs passed, which rules
    out a failure rate above ``rate_ruled_out`` at 95%; ``timed_out``: every run that ended ran past
    its timeout; ``not_checked``: no run could check the test (the tool or pytest could not run it).
    """

    nodeid: str
    tool: str
    outcome: str
    #: runs that checked the test (passed, failed or found); cancelled and unchecked ones excluded
    runs: int = 0
    #: runs asked for (None: until found, within the budget)
    planned: int | None = None
    started: int = 0
    found_in_run: int | None = None
    finding_runs: int = 0
    failed_runs: int = 0
    timed_out_runs: int = 0
    not_checked_runs: int = 0
    cancelled_runs: int = 0
    rate_ruled_out: float | None = None
    #: the stress run's failures and runs of this test (None: not known)
    stress_failures: int | None = None
    stress_runs: int | None = None
    #: exact (the recorded ids with their repeat step, pytest-repeat ``count``), base, or given
    id_mode: str | None = None
    ids: list[str] = []
    count: int | None = None
    #: --with-predecessors: how many tests ran before it in each run, and whether they ran in the
    #: recorded order (None: not a sequence run, or not known)
    predecessors: int = 0
    order_kept: bool | None = None
    #: why its runs ended: found, silent, runs, budget, interrupted
    stopped: str | None = None
    text: str = ""


class SanitizerDoc(Doc, frozen=True, kw_only=True):
    """``sanitizer/sanitizer.json``: what a sanitize run found (findings as the records write them)."""

    findings: list[dict[str, Any]] = []
    records: int = 0
    #: one entry per sanitizer run (a test under one tool, once)
    tests: list[Any] = []
    #: per test and tool, the result over its runs (absent in sanitize runs before repeats)
    outcomes: list[SanitizeOutcome] = []
    parallel: int | None = None
    wall_s: float | None = None
    exit_status: int | None = None
    complete: bool = False
    headline: str | None = None
    tool_path: str | None = None
    tool_version: str | None = None
    dropped: list[str] = []
    selected_from: str | None = None
    collateral: list[str] = []
    notes: list[str] = []

    def addressed(self) -> list[AddressedFinding]:
        """The findings that carry an address range (the others cannot be mapped)."""
        out = []
        for f in self.findings:
            try:
                out.append(msgspec.convert(f, AddressedFinding))
            except msgspec.ValidationError:
                continue
        return out


class KmsgCursorDoc(Doc, frozen=True, kw_only=True):
    """``kmsg_cursor.json``: the kernel-log cursor taken before the run (faulthunt.kernlog)."""

    source: str | None = None
    cursor: dict[str, Any] = {}
