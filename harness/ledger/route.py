"""Which recording route the ledger takes in this process (``FAULTHUNT_LEDGER_ROUTE``).

Every route writes the same records into the same ``<pid>.jsonl`` (docs/ledger.md, "Routes");
they differ in where the per-event work runs, and so in what an allocation-heavy loop pays:

``python``           CUPTI callbacks and activity records handled in Python, a Python callback on
                     every launch entry and exit; refinements write synchronously (the route every
                     earlier measurement used)
``activity``         route (a), pure Python: launches come from CUPTI's kernel activity records
                     (no callback per launch), each attributed to the test running at its time;
                     framework refinements queue their records and a background drain writes them
``native``           route (b): the compiled library (``_native.c``) is the CUPTI callback and
                     decodes the activity buffers; every line goes through its shared mapping;
                     refinements write synchronously through it
``native-activity``  both: launches from kernel activity records, decoded in C
``auto``             (default) ``native`` when the compiled library loads, else ``python``

:func:`choose` is pure given the loader.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

ROUTE_ENV = "FAULTHUNT_LEDGER_ROUTE"
ROUTES = ("auto", "python", "activity", "native", "native-activity")
#: what ``auto`` means when the compiled library loads
AUTO_COMPILED = "native"


@dataclasses.dataclass(frozen=True)
class Route:
    name: str
    #: the compiled library records (its sink, its CUPTI callback and buffers)
    compiled: bool
    #: ``callback`` (a record on launch entry) or ``activity`` (kernel activity records)
    launches: str
    #: framework refinements queue their records for a background drain
    deferred: bool
    #: why the route asked for is not the one taken (None when it is)
    why: str | None = None
    #: the compiled library, when ``compiled``
    lib: Any = dataclasses.field(default=None, compare=False, repr=False)


def _make(name: str, lib: Any = None, why: str | None = None) -> Route:
    return Route(name, compiled=name.startswith("native"),
                 launches="activity" if name.endswith("activity") else "callback",
                 deferred=name == "activity", why=why, lib=lib)


def choose(requested: str | None = None,
           load: Callable[[], tuple[Any, str | None]] | None = None) -> Route:
    """The route for ``requested`` (default: the environment, then ``auto``).

    A compiled route without the library falls back to its pure-Python twin (``native`` to
    ``python``, ``native-activity`` to ``activity``) with the reason in ``why``; an unknown name
    is ``auto`` with a reason.
    """
    name = requested if requested is not None else os.environ.get(ROUTE_ENV, "auto")
    why = None
    if name not in ROUTES:
        why = f"unknown {ROUTE_ENV}={name!r} (one of {', '.join(ROUTES)}): auto"
        name = "auto"
    if name in ("python", "activity"):
        return _make(name, why=why)
    if load is None:
        from faulthunt.ledger.native import load as load_native

        load = load_native
    lib, problem = load()
    if name == "auto":
        return _make(AUTO_COMPILED, lib, why) if lib is not None else _make("python", why=why or problem)
    if lib is None:
        return _make("python" if name == "native" else "activity", why=f"{name} asked for, but {problem}")
    return _make(name, lib, why)
