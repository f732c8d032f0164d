"""Import a package with an optional dependency of its out of sight, in faulthunt's own process.

msgspec imports ``typing_extensions`` when it is installed, only to read type hints written with
it; faulthunt's records use ``typing``'s own. typing_extensions imports ``inspect`` (with ``ast``,
``dis`` and ``tokenize``): 32-37 M instructions in every faulthunt command that reads or writes a
record (``xid parse`` of a one-line log: 232 M with them, 200 M without). The console script
therefore has msgspec imported with typing_extensions hidden (an import of it raises ImportError,
which msgspec catches, falling back to ``typing``), and visible again right after, so anything
else the command imports later gets it as usual.

Only the console script does this (:func:`faulthunt.cli.console_main`): a user's process (a
pytest worker, a script using faulthunt as a library) imports msgspec as it always did, since
its own code may hand msgspec typing_extensions' types. Should a msgspec need typing_extensions
outright, the import is simply done again with it visible: never an error.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any


class _Hiding:
    """A loader that runs ``inner``'s ``exec_module`` with module ``hidden`` out of sight."""

    def __init__(self, inner: Any, hidden: str) -> None:
        self._inner, self._hidden = inner, hidden

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        if self._hidden in sys.modules:  # already imported: nothing left to spare
            self._inner.exec_module(module)
            return
        initial = dict(module.__dict__)  # what the import system set: name, spec, path, ...
        sys.modules[self._hidden] = None  # type: ignore[assignment]  # its import raises ImportError
        try:
            self._inner.exec_module(module)
        except ImportError:
            self._reveal()
            _forget(module, initial)
            self._inner.exec_module(module)  # it needs the module after all: as usual
        finally:
            self._reveal()

    def _reveal(self) -> None:
        """Make the hidden module importable again (its ``None`` entry gone; a module imported
        meanwhile under that name stays)."""
        if self._hidden in sys.modules and sys.modules[self._hidden] is None:
            del sys.modules[self._hidden]


def _forget(module: ModuleType, initial: dict[str, Any]) -> None:
    """Undo a failed first attempt: the submodules it imported and the names it bound (a
    submodule is also an attribute of its package), so that the second attempt runs them all."""
    for name in [n for n in sys.modules if n.startswith(module.__name__ + ".")]:
        del sys.modules[name]
    module.__dict__.clear()
    module.__dict__.update(initial)


class ImportHiding:
    """On sys.meta_path: the first import of ``name`` runs with ``hidden`` out of sight.

    It leaves sys.meta_path on that import (or at :meth:`remove`); any other import passes by.
    """

    def __init__(self, name: str, hidden: str) -> None:
        self.name, self.hidden = name, hidden

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        self.remove()
        for finder in sys.meta_path:  # the spec the import would have found without us
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _Hiding(spec.loader, self.hidden)
                return spec
        return None

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def msgspec_without_typing_extensions() -> ImportHiding | None:
    """Have msgspec, when first imported, import without typing_extensions (the module doc)."""
    if "msgspec" in sys.modules or "typing_extensions" in sys.modules:
        return None
    hiding = ImportHiding("msgspec", "typing_extensions")
    sys.meta_path.insert(0, hiding)
    return hiding
