"""The ledger writer: one append-only JSONL file per process, ``ledger/<pid>.jsonl``.

Each record is one ``write(2)`` of a whole line on an ``O_APPEND`` descriptor, so a worker that
aborts, or is SIGKILLed, or whose CUDA context is poisoned keeps every record written before that
moment; post-mortem CUDA queries are impossible there, so nothing is left to be asked later.

The writer sits on the allocation and launch paths of the code under test, so it is built to be
cheap (measured in ``scripts/benchrows/ledger.py``): records are encoded by :func:`encode_record`
(the C JSON encoder, with already-encoded stacks spliced in),
and stacks are taken by :func:`stack_json`, which walks frames with ``sys._getframe`` and caches
the encoded JSON of each distinct stack, so a loop that allocates from the same line pays a dict
lookup, not formatting and escaping. Which records carry stacks is :data:`STACKS_ENV`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from json.encoder import encode_basestring_ascii as _esc
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from faulthunt import context

#: frames from the ledger package itself are left out of recorded stacks
_SKIP_PREFIX = str(Path(__file__).resolve().parent) + os.sep
STACK_LIMIT = 8
#: ``alloc`` (default): stacks on allocations only; ``all``: also on launches and frees; ``off``
STACKS_ENV = "FAULTHUNT_LEDGER_STACKS"
STACK_MODES = ("alloc", "all", "off")
#: distinct stacks whose encoding is kept; cleared when full (a bound, not an LRU: cheap)
_CACHE_MAX = 8192


class RawJSON(str):
    """Text that is already JSON: :func:`encode_record` writes it as it is."""

    __slots__ = ()


_skip_code: dict[CodeType, bool] = {}
_stack_cache: dict[tuple[Any, ...], RawJSON] = {}


def _skipped(code: CodeType) -> bool:
    s = _skip_code.get(code)
    if s is None:
        s = _skip_code[code] = code.co_filename.startswith(_SKIP_PREFIX)
    return s


def python_stack(frame: FrameType | None = None, limit: int = STACK_LIMIT) -> list[str]:
    """The calling Python stack, innermost first, as ``file:line in func`` (faulthunt frames left out).

    Walks frames directly: cheaper than :mod:`traceback`, which reads source lines.
    """
    f = frame if frame is not None else sys._getframe(1)
    out: list[str] = []
    while f is not None and len(out) < limit:
        code = f.f_code
        if not _skipped(code):
            out.append(f"{code.co_filename}:{f.f_lineno} in {code.co_name}")
        f = f.f_back
    return out


def stack_json(frame: FrameType | None = None, limit: int = STACK_LIMIT) -> RawJSON:
    """:func:`python_stack` as encoded JSON, cached per distinct (code, line) sequence."""
    f = frame if frame is not None else sys._getframe(1)
    key: list[Any] = []
    n = 0
    while f is not None and n < limit:
        code = f.f_code
        if not _skipped(code):
            key.append(code)
            key.append(f.f_lineno)
            n += 1
        f = f.f_back
    k = tuple(key)
    got = _stack_cache.get(k)
    if got is None:
        if len(_stack_cache) >= _CACHE_MAX:
            _stack_cache.clear()
        got = _stack_cache[k] = RawJSON("[" + ",".join(
            _esc(f"{k[i].co_filename}:{k[i + 1]} in {k[i].co_name}") for i in range(0, len(k), 2)) + "]")
    return got


#: the C encoder, compact, no circularity check (records are flat and built here)
_dumps = json.JSONEncoder(default=str, separators=(",", ":"), check_circular=False, allow_nan=False).encode


def encode_record(rec: dict[str, Any]) -> str:
    """One JSON object line (no newline) for a record; equal to ``json.dumps`` after parsing.

    The C encoder does the record; :class:`RawJSON` values (cached stacks) are spliced in as
    they are, so a stack is never re-encoded. Non-finite floats become null (JSON has none).
    """
    raw = None
    for k, v in rec.items():
        if type(v) is RawJSON:
            if raw is None:
                raw = []
            raw.append((k, v))
    if raw is None:
        try:
            return _dumps(rec)
        except ValueError:
            return _dumps(_finite(rec))
    rest = {k: v for k, v in rec.items() if type(v) is not RawJSON}
    try:
        body = _dumps(rest)
    except ValueError:
        body = _dumps(_finite(rest))
    tail = ",".join(_esc(k) + ":" + v for k, v in raw)
    return (body[:-1] + "," + tail + "}") if len(body) > 2 else ("{" + tail + "}")


def _finite(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if type(v) is float and (v != v or v in (float("inf"), float("-inf"))) else v)
            for k, v in rec.items()}


def stack_mode() -> str:
    """The stack policy from :data:`STACKS_ENV` (unknown values mean the default, ``alloc``)."""
    m = os.environ.get(STACKS_ENV, "alloc")
    return m if m in STACK_MODES else "alloc"


class LedgerWriter:
    """Writes ledger records for this process; safe to share between threads and sources.

    After a ``fork`` the child writes its own ``<pid>.jsonl`` (the pid is checked per record).
    ``stacks``: which records carry a Python stack (:data:`STACK_MODES`); sources ask
    :attr:`alloc_stacks` / :attr:`all_stacks`.
    """

    def __init__(self, ledger_dir: Path | str, fsync: bool = False, stacks: str | None = None) -> None:
        self.ledger_dir = Path(ledger_dir)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._pid = -1
        self._fd = -1
        self.records = 0
        self.stacks = stacks if stacks in STACK_MODES else stack_mode()
        self.alloc_stacks = self.stacks != "off"
        self.all_stacks = self.stacks == "all"
        self._open()

    def _open(self) -> None:
        self._pid = os.getpid()
        self.ledger_dir.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.ledger_dir / f"{self._pid}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    @property
    def path(self) -> Path:
        return self.ledger_dir / f"{self._pid}.jsonl"

    def stack(self, frame: FrameType | None = None) -> RawJSON:
        """The caller's stack, encoded (for a record's ``stack`` field)."""
        return stack_json(frame if frame is not None else sys._getframe(1))

    def record(self, event: str, source: str, *, t: float | None = None,
               t_mono: float | None = None, nodeid: Any = context, **fields: Any) -> dict[str, Any]:
        """Write one record; ``t``/``t_mono`` default to now, ``nodeid`` to the test running."""
        if t is None:
            t = time.time()
            if t_mono is None:
                t_mono = time.monotonic()
        rec: dict[str, Any] = {"event": event, "t": t}
        if t_mono is not None:
            rec["t_mono"] = t_mono
        rec["pid"] = os.getpid()
        rec["nodeid"] = context.current_nodeid if nodeid is context else nodeid
        rec["source"] = source
        for k, v in fields.items():
            if v is not None:
                rec[k] = v
        self.write(rec)
        return rec

    def write(self, rec: dict[str, Any]) -> None:
        """Write a prepared record as it is (one ``write(2)`` of one line)."""
        data = (encode_record(rec) + "\n").encode("utf-8")
        with self._lock:
            if os.getpid() != self._pid:
                self._open()
            if self._fd < 0:
                raise ValueError("ledger writer is closed")
            os.write(self._fd, data)
            if self._fsync:
                os.fsync(self._fd)
            self.records += 1

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
