"""The allocation ledger: every GPU allocation, free and kernel launch of a process, on disk.

:func:`install` starts recording in the calling process into ``ledger_dir/<pid>.jsonl`` and must
run before the process creates its CUDA context (the pytest plugin calls it from
``pytest_configure`` when ``FAULTHUNT_LEDGER`` is set). Sources (docs/ledger.md):

``cupti``      framework-independent: CUPTI activity MEMORY2 (every driver-level allocation and
               release, async pools and VMM included) and driver-API callbacks for launches and
               synchronizations, with the Python stack (:mod:`.cupti_source`)
``numba``      numba-cuda External Memory Management plugin: Python-level frees vs the deferred
               driver frees (:mod:`.numba_emm`)
``cupy``       ``cupy.cuda.MemoryHook``: pool chunks and the arrays inside them (:mod:`.cupy_hook`)
``torch``      ``torch.cuda.memory._record_memory_history``: segments, blocks, free_requested /
               free_completed (:mod:`.torch_trace`)

cuda.core has no refinement of its own: its device memory resources allocate from the driver's
stream-ordered pools (``cuMemAllocFromPoolAsync``), whose calls CUPTI's callbacks (``auto``) and
MEMORY2 records (``full``) already cover.

Framework refinements are installed when the framework is imported (a post-import hook), so a
worker that never imports torch pays nothing for it and one that does is hooked before its first
allocation. ``mode``: ``auto`` (CUPTI if it works, with the refinements that run no Python per array and
sampled stacks; every refinement when CUPTI cannot record), ``full`` (CUPTI plus every refinement,
a stack on every allocation: today's per-array records, for reruns of a known failure),
``cupti`` (CUPTI only),
``numba`` / ``cupy`` / ``torch`` (that refinement only), ``off``. What was chosen,
and why anything was not, is said once on stderr.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from faulthunt.importhooks import PostImportHooks

if TYPE_CHECKING:
    from faulthunt.ledger.writer import LedgerWriter

#: the ``note`` event (faulthunt.records.ledger.EVENT_NOTE, which tests/test_stress_lazy.py
#: checks): the writer and the record module are imported when something is to be written
EVENT_NOTE = "note"

MODES = ("auto", "full", "cupti", "numba", "cupy", "torch", "off")
#: environment variable through which stress tells workers which ledger mode to use
LEDGER_ENV = "FAULTHUNT_LEDGER"
REFINEMENTS = ("numba", "cupy", "torch")
#: the refinements ``auto`` arms beside CUPTI: the ones that run no Python per array (torch's
#: allocator records its own history in C++; CuPy's MemoryHook and numba's EMM call Python for
#: every array, which an allocation-heavy loop pays several times over: docs/ledger.md)
LEAN_REFINEMENTS = ("torch",)
#: what ``auto`` leaves to ``full``, said in its note (and read back by the mapper: ``arrays``)
LEAN_NOTE = ("ledger: auto: CuPy arrays and numba's Python-level frees are not recorded (CuPy pool "
             "segments and numba's driver allocations are, from CUPTI's callbacks on the allocation "
             "calls, so a CUDA graph's memory nodes are not), and driver allocations keep "
             "their stacks only while sampled (the first {burst} of each test, then up to {rate} a "
             "second); --ledger full records every array with its stack (for a rerun of a known "
             "failure: faulthunt stress --ledger full --faulthunt-id ID)")
#: the module whose import triggers each refinement
TRIGGER = {"numba": "numba.cuda", "cupy": "cupy", "torch": "torch"}
#: the faulthunt.ledger module implementing each refinement
MODULE = {"numba": "numba_emm", "cupy": "cupy_hook", "torch": "torch_trace"}


class Source(Protocol):
    """A started recording source."""

    name: str

    def stop(self) -> None: ...


class Plan:
    """What :func:`install` will start: the CUPTI decision and the refinements to arm. Pure data.

    A plain class, not a dataclass: every worker of a run imports this module, and making a
    dataclass is a few million instructions (its generated methods are compiled)."""

    __slots__ = ("cupti", "refinements", "messages", "lean")

    def __init__(self, cupti: bool, refinements: tuple[str, ...], messages: tuple[str, ...],
                 lean: bool = False) -> None:
        self.cupti = cupti
        self.refinements = refinements
        self.messages = messages
        #: ``auto`` with CUPTI: refinements that run Python per array are off and driver
        #: allocations' stacks are sampled (``full`` is the same without this)
        self.lean = lean

    def _key(self) -> tuple[bool, tuple[str, ...], tuple[str, ...], bool]:
        return (self.cupti, self.refinements, self.messages, self.lean)

    def __repr__(self) -> str:
        return "Plan(cupti={!r}, refinements={!r}, messages={!r}, lean={!r})".format(*self._key())

    def __eq__(self, other: object) -> bool:
        return self._key() == other._key() if isinstance(other, Plan) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was


def plan(mode: str, cupti_problem: Callable[[], str | None]) -> Plan:
    """Decide what to start for ``mode`` (pure given the probe).

    ``cupti_problem()`` returns None when CUPTI can be used, else why not (with the fix).
    Refinements are always armed for their mode (they only act if the framework is imported).
    """
    if mode not in MODES:
        from faulthunt.errors import UsageError  # a bad mode alone needs it (every worker imports this)

        raise UsageError(f"unknown ledger mode {mode!r}", fix=f"use one of: {', '.join(MODES)}")
    if mode == "off":
        return Plan(False, (), ("ledger off",))
    if mode in REFINEMENTS:
        return Plan(False, (mode,), (f"ledger: {mode} only (armed for when {TRIGGER[mode]} is imported); "
                                     "no driver-level records and no launches without CUPTI",))
    problem = cupti_problem()
    if mode == "auto" and not problem:
        return Plan(True, LEAN_REFINEMENTS, (
            f"ledger: auto: cupti + refinements ({', '.join(LEAN_REFINEMENTS)}, when imported); "
            "--ledger full adds CuPy's and numba's per-array records",), lean=True)
    if mode == "cupti":
        if problem:
            return Plan(False, (), (f"ledger: cupti requested but unavailable: {problem}",))
        return Plan(True, (), ("ledger: cupti (MEMORY2 activity + launch/sync callbacks)",))
    if problem:
        msg = (f"ledger: {mode}: CUPTI unavailable ({problem}); framework refinements only "
               f"({', '.join(REFINEMENTS)}, each when imported): no launch records")
        return Plan(False, REFINEMENTS, (msg,))
    return Plan(True, REFINEMENTS, (f"ledger: {mode}: cupti + refinements ({', '.join(REFINEMENTS)}, each when imported)",))


class LedgerHandle:
    """The ledger running in this process: its writer and started sources."""

    def __init__(self, writer: LedgerWriter | None, plan_: Plan,
                 make: Callable[[], LedgerWriter] | None = None) -> None:
        #: the writer, or None until :attr:`writer` is first asked for (``make`` makes it)
        self._writer = writer
        self._make = make
        self.plan = plan_
        self.sources: list[Source] = []
        self.hooks = PostImportHooks()
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def writer(self) -> LedgerWriter:
        """The process's writer, made on first use when the plan records nothing by itself
        (no CUPTI: nothing is written until a refinement starts)."""
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    assert self._make is not None
                    self._writer = self._make()
        return self._writer

    @property
    def source_names(self) -> list[str]:
        return [s.name for s in self.sources]

    def note(self, message: str) -> None:
        self.writer.record(EVENT_NOTE, "ledger", message=message)

    def arm(self, name: str) -> None:
        """Install refinement ``name`` when its framework is imported (now if it already is)."""
        def start(_module: ModuleType) -> None:
            mod = importlib.import_module(f"faulthunt.ledger.{MODULE[name]}")
            src = mod.start(self.writer)
            if src is not None:
                with self._lock:
                    self.sources.append(src)
                self.note(f"{name} refinement installed")
        self.hooks.add(TRIGGER[name], start)

    def flush(self) -> None:
        """Hand every pending record to the file now (CUPTI buffers, queued refinement records)."""
        for s in list(self.sources):
            fl = getattr(s, "flush", None)
            if fl is not None:
                try:
                    fl()
                except Exception:  # noqa: BLE001 - a flush is best effort; a source that cannot flush still gets stop()
                    pass
        if self._writer is not None:
            self._writer.drain()

    def stop(self) -> None:
        """Flush and stop every source (also run at exit)."""
        if self._stopped:
            return
        self._stopped = True
        self.hooks.remove()
        for s in reversed(self.sources):
            try:
                s.stop()
            except Exception as exc:  # noqa: BLE001 - one source failing to stop must not keep the others or the file open
                print(f"faulthunt ledger: stopping {s.name} failed: {exc!r}", file=sys.stderr)
        if self._writer is not None:
            self._writer.close()


_active: LedgerHandle | None = None


def active() -> LedgerHandle | None:
    """The ledger installed in this process, if any."""
    return _active


#: what :func:`faulthunt.ledger.cupti_source.problem` says when cupti-python is not installed
#: (said here without importing that module, which costs a worker about 5 ms)
NOT_INSTALLED = ("cupti-python is not installed (cupti); "
                 "pip install 'cupti-python==<your CUDA major>.*' (e.g. 13.* for CUDA 13)")


def cupti_problem(find: Callable[[str], Any] = importlib.util.find_spec,
                  driver: Callable[[], str | None] | None = None) -> str | None:
    """None when CUPTI can be used here, else why not (:func:`.cupti_source.problem`).

    Its expensive parts (importing the CUPTI source, cupti-python and libcupti: several ms a
    worker) are skipped when cupti-python is not installed at all, or when no CUDA driver library
    loads, as on a machine that runs only CPU suites; the reason is said the same way.
    ``find`` and ``driver`` are injectable for tests.
    """
    source = sys.modules.get("faulthunt.ledger.cupti_source")
    if source is not None:  # loaded already (its import is the cost): its own probe
        return source.problem()
    try:
        absent = find("cupti") is None
    except (ImportError, ValueError):  # a broken or half-imported package: the full probe says why
        absent = False
    if absent:
        return NOT_INSTALLED
    no_driver = (driver or _driver_problem)()
    if no_driver:
        return no_driver
    from faulthunt.ledger import cupti_source

    return cupti_source.problem()


def _driver_problem() -> str | None:
    """Why the CUDA driver library does not load here, else None. On a GPU machine this loads
    libcuda, which CUPTI loads anyway."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return (f"no CUDA driver library here ({exc}); CUPTI records only where the NVIDIA "
                "driver is installed")
    return None


def install(ledger_dir: Path, mode: str = "auto", *, quiet: bool = False) -> LedgerHandle | None:
    """Start recording in this process into ``ledger_dir/<pid>.jsonl``.

    Call before the process creates a CUDA context. Returns None (having said why on stderr)
    when nothing can record; installing twice returns the running handle.
    """
    global _active
    if _active is not None:
        return _active
    p = plan(mode, cupti_problem)
    say = (lambda m: None) if quiet else (lambda m: print(f"faulthunt {m}", file=sys.stderr))
    if not p.cupti and not p.refinements:
        for m in p.messages:
            say(m)
        return None
    handle = _refinements_only(ledger_dir, p, say) if not p.cupti else _with_cupti(ledger_dir, p, say)
    if handle is None:
        return None
    _active = handle
    atexit.register(handle.stop)
    return handle


def _route_note(writer: LedgerWriter, say: Callable[[str], None]) -> None:
    route = writer.route
    writer.note_when_open(f"ledger route: {route.name} (backend {writer.backend})"
                          + (f"; {route.why}" if route.why else ""))
    if route.why:
        say(f"ledger: route {route.name}: {route.why}")


def _refinements_only(ledger_dir: Path, p: Plan, say: Callable[[str], None]) -> LedgerHandle:
    """Without CUPTI nothing records until a framework is imported: the refinements are armed
    now; the writer (its module, the compiled library, the route) is made when one starts, and
    the file at its first record. A worker of a CPU-only suite makes none of them. The plan's
    notes keep the time they were said."""
    said_at = time.time()
    for m in p.messages:
        say(m)

    def make() -> LedgerWriter:
        from faulthunt.ledger.writer import LedgerWriter

        writer = LedgerWriter(ledger_dir, lazy=True)
        _route_note(writer, say)
        for m in p.messages:
            writer.note_when_open(m, t=said_at)
        return writer

    handle = LedgerHandle(None, p, make=make)
    for name in p.refinements:
        handle.arm(name)
    return handle


def _with_cupti(ledger_dir: Path, p: Plan, say: Callable[[str], None]) -> LedgerHandle | None:
    """CUPTI's compiled callback writes into the file's mapping: the file is made now."""
    from faulthunt.ledger import cupti_source
    from faulthunt.ledger.writer import SAMPLE_BURST, SAMPLE_REFILL, STACKS_ENV, LedgerWriter, stack_mode

    handle = LedgerHandle(LedgerWriter(ledger_dir), p)
    if p.lean and STACKS_ENV not in os.environ:
        handle.writer.set_stacks("sampled")
    _route_note(handle.writer, say)
    messages = p.messages
    try:
        # auto: allocation lines from the calls' own callbacks (no MEMORY2 activity to pay for)
        src = cupti_source.start(handle.writer, say=say, allocs="callback" if p.lean else "activity")
        handle.sources.append(src)
    except Exception as exc:  # noqa: BLE001 - CUPTI's binding raises its own errors, OSError, RuntimeError: any means no CUPTI, said
        # CUPTI passed the probe but would not start (another profiler, driver trouble).
        msg = f"ledger: CUPTI failed to start ({exc}); continuing with framework refinements"
        say(msg)
        handle.note(msg)
        if not p.refinements:
            handle.writer.close()
            return None
        # the plan's "cupti + refinements" line would now be untrue; without CUPTI the
        # refinements are all there is (under compute-sanitizer, say): every one is armed
        refinements = REFINEMENTS if p.lean else p.refinements
        messages = (f"ledger: framework refinements only ({', '.join(refinements)}, "
                    "each when imported): no launch records",)
        handle.plan = p = Plan(False, refinements, p.messages, lean=False)
        handle.writer.set_stacks(stack_mode())
    for m in messages:
        say(m)
        handle.writer.note_when_open(m)
    if p.lean:
        # read back by the mapper (``arrays: false``): its answer says per-array bounds were not
        # recorded in this process and how to get them
        handle.writer.record(EVENT_NOTE, "ledger", arrays=False, message=LEAN_NOTE.format(
            burst=SAMPLE_BURST, rate=round(1 / SAMPLE_REFILL)))
    for name in p.refinements:
        handle.arm(name)
    return handle


def uninstall() -> None:
    """Stop the ledger of this process (tests; normal runs stop at exit)."""
    global _active
    if _active is not None:
        _active.stop()
        _active = None


__all__ = ["install", "uninstall", "active", "plan", "Plan", "LedgerHandle", "MODES", "LEDGER_ENV",
           "PostImportHooks"]
