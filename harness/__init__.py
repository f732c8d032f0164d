"""faulthunt: a CUDA memory-fault investigation harness.

Import name ``faulthunt`` (sources in ``harness/``); the planted-fault kernels are
``faulthunt.kernels`` (sources in ``kernels/``).

This package is also the pytest plugin: ``pytest -p faulthunt`` imports ``faulthunt`` and
registers its ``pytest_*`` attributes. They live in :mod:`faulthunt.plugin` and are forwarded
lazily (module ``__getattr__``/``__dir__``), so ``import faulthunt`` for the CLI stays cheap and
does not import pytest. See docs/plugin.md.
"""

__version__ = "0.1.0"

#: hooks of faulthunt.plugin exposed on the package for ``pytest -p faulthunt``
_PLUGIN_HOOKS = ("pytest_addoption", "pytest_configure")


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    if name in _PLUGIN_HOOKS:
        from faulthunt import plugin

        return getattr(plugin, name)
    raise AttributeError(f"module 'faulthunt' has no attribute {name!r}")


def __dir__() -> list[str]:
    # pluggy finds hook implementations through dir(plugin).
    return sorted([*globals(), *_PLUGIN_HOOKS])
