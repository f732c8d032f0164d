"""Run a callback right after a named module is imported: the ledger's framework refinements
(armed when torch, CuPy or numba is imported) and the child-process watch's ``multiprocessing``
hook, so that a worker that never imports a module pays nothing for its hook."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


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

    def __init__(self, failed: str = "faulthunt ledger: {name} refinement failed") -> None:
        #: what is said on stderr when a hook raises (the import itself goes on)
        self._failed = failed
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
            except Exception as exc:  # noqa: BLE001 - a broken hook must never break the user's import
                print(f"{self._failed.format(name=fullname)}: {exc!r}", file=sys.stderr)

        spec.loader = _HookLoader(spec.loader, after)
        return spec

    def remove(self) -> None:
        self._hooks.clear()
        if self in sys.meta_path:
            sys.meta_path.remove(self)
