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
stream-ordered pools (``cuMemAllocFromPoolAsync``), which CUPTI's MEMORY2 records already cover.

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
import dataclasses
import importlib
import importlib.abc
import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from faulthunt.errors import UsageError
from faulthunt.ledger.writer import SAMPLE_BURST, SAMPLE_REFILL, STACKS_ENV, LedgerWriter, stack_mode
from faulthunt.records.ledger import EVENT_NOTE

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
             "segments and numba's driver allocations are, from CUPTI), and driver allocations keep "
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


@dataclasses.dataclass
class Plan:
    """What :func:`install` will start: the CUPTI decision and the refinements to arm. Pure data."""

    cupti: bool
    refinements: tuple[str, ...]
    messages: tuple[str, ...]
    #: ``auto`` with CUPTI: refinements that run Python per array are off and driver allocations'
    #: stacks are sampled (``full`` is the same without this)
    lean: bool = False


def plan(mode: str, cupti_problem: Callable[[], str | None]) -> Plan:
    """Decide what to start for ``mode`` (pure given the probe).

    ``cupti_problem()`` returns None when CUPTI can be used, else why not (with the fix).
    Refinements are always armed for their mode (they only act if the framework is imported).
    """
    if mode not in MODES:
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


class _HookLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, after: Callable[[ModuleType], None]) -> None:
        self._inner, self._after = inner, after

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._after(module)


class PostImportHooks(importlib.abc.MetaPathFinder):
    """Runs a callback right after a named module has been imported (once each)."""

    def __init__(self) -> None:
        self._hooks: dict[str, Callable[[ModuleType], None]] = {}
        self._busy: set[str] = set()

    def add(self, name: str, hook: Callable[[ModuleType], None]) -> None:
        mod = sys.modules.get(name)
        if mod is not None:
            hook(mod)
            return
        self._hooks[name] = hook
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        hook = self._hooks.get(fullname)
        if hook is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        del self._hooks[fullname]

        def after(module: ModuleType) -> None:
            try:
                hook(module)
            except Exception as exc:  # noqa: BLE001 - a broken refinement must never break the user's import
                print(f"faulthunt ledger: {fullname} refinement failed: {exc!r}", file=sys.stderr)

        spec.loader = _HookLoader(spec.loader, after)
        return spec

    def remove(self) -> None:
        self._hooks.clear()
        if self in sys.meta_path:
            sys.meta_path.remove(self)


class LedgerHandle:
    """The ledger running in this process: its writer and started sources."""

    def __init__(self, writer: LedgerWriter, plan_: Plan) -> None:
        self.writer = writer
        self.plan = plan_
        self.sources: list[Source] = []
        self.hooks = PostImportHooks()
        self._lock = threading.Lock()
        self._stopped = False

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
        self.writer.drain()

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
        self.writer.close()


_active: LedgerHandle | None = None


def active() -> LedgerHandle | None:
    """The ledger installed in this process, if any."""
    return _active


def install(ledger_dir: Path, mode: str = "auto", *, quiet: bool = False) -> LedgerHandle | None:
    """Start recording in this process into ``ledger_dir/<pid>.jsonl``.

    Call before the process creates a CUDA context. Returns None (having said why on stderr)
    when nothing can record; installing twice returns the running handle.
    """
    global _active
    if _active is not None:
        return _active
    from faulthunt.ledger import cupti_source

    p = plan(mode, cupti_source.problem)
    say = (lambda m: None) if quiet else (lambda m: print(f"faulthunt {m}", file=sys.stderr))
    if not p.cupti and not p.refinements:
        for m in p.messages:
            say(m)
        return None
    handle = LedgerHandle(LedgerWriter(ledger_dir), p)
    if p.lean and STACKS_ENV not in os.environ:
        handle.writer.set_stacks("sampled")
    route = handle.writer.route
    handle.note(f"ledger route: {route.name} (backend {handle.writer.backend})"
                + (f"; {route.why}" if route.why else ""))
    if route.why:
        say(f"ledger: route {route.name}: {route.why}")
    messages = p.messages
    if p.cupti:
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
            handle.plan = p = dataclasses.replace(p, cupti=False, refinements=refinements, lean=False)
            handle.writer.set_stacks(stack_mode())
    for m in messages:
        say(m)
        handle.note(m)
    if p.lean:
        # read back by the mapper (``arrays: false``): its answer says per-array bounds were not
        # recorded in this process and how to get them
        handle.writer.record(EVENT_NOTE, "ledger", arrays=False, message=LEAN_NOTE.format(
            burst=SAMPLE_BURST, rate=round(1 / SAMPLE_REFILL)))
    for name in p.refinements:
        handle.arm(name)
    _active = handle
    atexit.register(handle.stop)
    return handle


def uninstall() -> None:
    """Stop the ledger of this process (tests; normal runs stop at exit)."""
    global _active
    if _active is not None:
        _active.stop()
        _active = None


__all__ = ["install", "uninstall", "active", "plan", "Plan", "LedgerHandle", "MODES", "LEDGER_ENV",
           "PostImportHooks"]
