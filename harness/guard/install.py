"""Turning guard mode on in a process: the allocator, the framework hooks, the per-test reseed.

:func:`install` runs in each worker right after the ledger (the plugin calls
:func:`install_from_env` when :data:`~faulthunt.guard.config.GUARD_ENV` is set), before any test
creates a CUDA context. Each framework hook is armed for when its framework is imported (the
ledger's post-import hooks), so a worker that never imports torch never builds torch's shim.
Records go through the ledger's writer when the ledger runs (one writer per file), else through a
writer of guard mode's own into the same ``ledger/<pid>.jsonl``.
"""

from __future__ import annotations

import atexit
import importlib
import os
import sys
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from faulthunt.guard import records
from faulthunt.guard.allocator import GuardAllocator
from faulthunt.guard.config import FRAMEWORKS, GUARD_ENV, GuardConfig, parse_spec

#: the module whose import arms each hook, and the faulthunt.guard module implementing it
TRIGGER = {"cupy": "cupy", "numba": "numba.cuda", "cuda_core": "cuda.core",
           "cuda_bindings": "cuda.bindings.driver", "torch": "torch"}
#: ``fake``: the FakeVmmDriver model instead of CUDA (CPU tests and demos; said as SIMULATED)
DRIVER_ENV = "FAULTHUNT_GUARD_DRIVER"
MODULE = {"cupy": "cupy_hook", "numba": "numba_emm", "cuda_core": "cuda_core_mr",
          "cuda_bindings": "bindings_hook", "torch": "torch_alloc"}


class GuardHandle:
    """Guard mode running in this process."""

    def __init__(self, allocator: GuardAllocator, config: GuardConfig, writer: Any, own_writer: bool) -> None:
        from faulthunt.importhooks import PostImportHooks

        self.allocator = allocator
        self.config = config
        self.writer = writer
        self.own_writer = own_writer
        self.hooks = PostImportHooks(failed="faulthunt guard: allocations made through {name} "
                                            "are not guarded")
        self.sources: dict[str, Any] = {}
        self._stopped = False

    def note(self, message: str, **fields: Any) -> None:
        try:
            self.writer.record("note", records.SOURCE, message=message, **fields)
        except Exception:  # noqa: BLE001 - a note that cannot be written must not stop guard mode
            pass

    def arm(self, name: str) -> None:
        def start(_module: ModuleType) -> None:
            mod = importlib.import_module(f"faulthunt.guard.{MODULE[name]}")
            try:
                src = mod.start(self.allocator)
            except Exception as exc:  # noqa: BLE001 - one framework's hook failing is said; the others still guard
                msg = f"guard: {name} not guarded: {exc}"
                print(f"faulthunt {msg}", file=sys.stderr)
                self.note(msg)
                return
            if src is not None:
                self.sources[name] = src
                self.note(f"guard: {name} hook installed")
        self.hooks.add(TRIGGER[name], start)

    # pytest -------------------------------------------------------------------------------------
    def begin_test(self, nodeid: str | None) -> None:
        self.allocator.begin_test(nodeid)
        self.refresh()

    def refresh(self) -> None:
        """Hooks that can only be placed once CUDA is up (cuda.core's devices)."""
        src = self.sources.get("cuda_core")
        if src is not None:
            src.refresh()

    def end_test(self) -> None:
        self.allocator.end_test()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.hooks.remove()
        self.allocator.note_totals()
        if self.own_writer:
            self.writer.close()


class GuardPytestHooks:
    """Registered in the worker: reseed per test, place late hooks, write per-test counts."""

    def __init__(self, handle: GuardHandle) -> None:
        self.handle = handle

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: Any) -> None:
        self.handle.begin_test(item.nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: Any) -> None:
        self.handle.refresh()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: Any) -> None:
        self.handle.end_test()


_active: GuardHandle | None = None


def active() -> GuardHandle | None:
    return _active


def derive_seed(text: str) -> int:
    """A stable seed from text (the run directory's name: one seed per run, shared by workers)."""
    return zlib.crc32(text.encode("utf-8"))


def install(ledger_dir: Path, config: GuardConfig, *, seed: int | None = None,
            driver: Any = None, quiet: bool = False) -> GuardHandle:
    """Start guard mode in this process (before it creates a CUDA context); idempotent.

    ``driver``: a :class:`~faulthunt.guard.driver.VmmDriver` (tests); default: cuda-python's,
    loaded at the first sampled allocation.
    """
    global _active
    if _active is not None:
        return _active
    from faulthunt import ledger
    from faulthunt.guard.driver import CudaVmmDriver
    from faulthunt.ledger.writer import LedgerWriter

    running = ledger.active()
    own = running is None
    writer = LedgerWriter(ledger_dir) if own else running.writer  # type: ignore[union-attr]
    seed = config.seed if config.seed is not None else (seed or 0)
    simulated = driver is None and os.environ.get(DRIVER_ENV) == "fake"
    if simulated:
        from faulthunt.guard.fake import FakeVmmDriver

        driver = FakeVmmDriver()
    allocator = GuardAllocator(config, driver if driver is not None else CudaVmmDriver, writer, seed)
    handle = GuardHandle(allocator, config, writer, own)
    names = config.only or FRAMEWORKS
    side = "overruns (guard after)" if config.side == "right" else "underruns (guard before)"
    message = (f"guard: 1 in {config.rate} device allocations guarded against {side}, "
               f"align {config.align}, at most {config.max_bytes >> 20} MiB live; hooks armed: "
               f"{', '.join(names)} (each when imported); seed {seed}"
               + ("; SIMULATED driver (no GPU memory is guarded)" if simulated else ""))
    if not quiet:
        print(f"faulthunt {message}", file=sys.stderr)
    handle.note(message, **{records.NOTE_CONFIG: {**config.to_json(), "seed": seed, "pid": os.getpid(),
                                               "driver": "simulated" if simulated else "cuda"}})
    for name in names:
        handle.arm(name)
    _active = handle
    atexit.register(handle.stop)
    return handle


def uninstall() -> None:
    """Stop guard mode in this process (tests)."""
    global _active
    if _active is not None:
        for src in list(_active.sources.values()):
            try:
                src.stop()
            except Exception:  # noqa: BLE001 - stopping a hook is best effort; the rest still stop
                pass
        _active.stop()
        _active = None


def install_from_env(config: Any, run_dir: Path, warn: Any = None) -> GuardHandle | None:
    """What the plugin calls in each worker: guard mode if :data:`GUARD_ENV` asks for it.

    ``config``: the pytest config (the per-test hooks are registered with it). Never raises: a
    bad spec or a failing install is said through ``warn`` and the run goes on unguarded.
    """
    spec = os.environ.get(GUARD_ENV, "")
    say = warn or (lambda m: print(f"faulthunt: {m}", file=sys.stderr))
    try:
        cfg = parse_spec(spec)
        if cfg is None:
            return None
        from faulthunt.rundir import Layout

        handle = install(run_dir / Layout.LEDGER_DIR, cfg, seed=derive_seed(run_dir.name))
        if config is not None:
            config.pluginmanager.register(GuardPytestHooks(handle), "faulthunt-guard")
        return handle
    except Exception as exc:  # noqa: BLE001 - a broken guard must not take the test run down
        say(f"guard mode not installed ({type(exc).__name__}: {exc}); continuing without it")
        return None
