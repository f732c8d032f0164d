"""The ledger writer: one append-only JSONL file per process, ``ledger/<pid>.jsonl``.

Each record is one ``write(2)`` of a whole line on an ``O_APPEND`` descriptor
(:class:`faulthunt.rundir.JsonlWriter`), so a worker that aborts, or is SIGKILLed, or whose CUDA
context is poisoned keeps every record written before that moment; post-mortem CUDA queries are
impossible there, so nothing is left to be asked later.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from faulthunt import context
from faulthunt.rundir import JsonlWriter

#: frames from the ledger package itself are left out of recorded stacks
_SKIP_PARTS = (str(Path(__file__).resolve().parent) + os.sep,)
STACK_LIMIT = 12


def python_stack(frame: FrameType | None = None, limit: int = STACK_LIMIT) -> list[str]:
    """The calling Python stack, innermost first, as ``file:line in func`` (faulthunt frames left out).

    Walks frames directly: cheaper than :mod:`traceback`, which reads source lines.
    """
    f = frame if frame is not None else sys._getframe(1)
    out: list[str] = []
    while f is not None and len(out) < limit:
        code = f.f_code
        name = code.co_filename
        if not any(p in name for p in _SKIP_PARTS):
            out.append(f"{name}:{f.f_lineno} in {code.co_name}")
        f = f.f_back
    return out


class LedgerWriter:
    """Writes ledger records for this process; safe to share between threads and sources.

    After a ``fork`` the child writes its own ``<pid>.jsonl`` (the pid is checked per record).
    """

    def __init__(self, ledger_dir: Path | str, fsync: bool = False) -> None:
        self.ledger_dir = Path(ledger_dir)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._pid = -1
        self._writer: JsonlWriter | None = None
        self.records = 0
        self._open()

    def _open(self) -> None:
        self._pid = os.getpid()
        self._writer = JsonlWriter(self.ledger_dir / f"{self._pid}.jsonl", fsync=self._fsync)

    @property
    def path(self) -> Path:
        return self.ledger_dir / f"{self._pid}.jsonl"

    def record(self, event: str, source: str, *, t: float | None = None,
               t_mono: float | None = None, **fields: Any) -> dict[str, Any]:
        """Write one record; ``t``/``t_mono`` default to now, ``nodeid`` to the test running."""
        if t is None:
            t = time.time()
            t_mono = time.monotonic() if t_mono is None else t_mono
        rec: dict[str, Any] = {"event": event, "t": t}
        if t_mono is not None:
            rec["t_mono"] = t_mono
        rec["pid"] = os.getpid()
        rec["nodeid"] = fields.pop("nodeid", context.current_nodeid)
        rec["source"] = source
        rec.update({k: v for k, v in fields.items() if v is not None})
        self.write(rec)
        return rec

    def write(self, rec: dict[str, Any]) -> None:
        """Write a prepared record as it is."""
        with self._lock:
            if os.getpid() != self._pid:
                self._open()
            assert self._writer is not None
            self._writer.write(rec)
            self.records += 1

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
