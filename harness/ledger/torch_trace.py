"""PyTorch refinement: the caching allocator's own trace, as ledger records.

``torch.cuda.memory._record_memory_history(enabled="all", stacks="python")`` makes the caching
allocator keep a trace of its actions with Python stacks; ``torch.cuda.memory._snapshot()``
returns it as ``device_traces`` (one list per device of ``{action, addr, size, stream, time_us,
frames}``). Actions: ``segment_alloc`` / ``segment_free`` (cudaMalloc'd segments; ``segment_map`` /
``segment_unmap`` with expandable segments), ``alloc`` (a block inside a segment),
``free_requested`` (the tensor let go of it) and ``free_completed`` (the block reusable after its
stream's pending work). A fault between the two is a use after free the driver never sees.

The trace lives in the allocator's memory, so a poller thread copies new entries to the ledger
every :data:`POLL_S` seconds and at exit: an abort loses at most the last poll interval of torch
records (CUPTI's records, when on, cover the driver level without that window).
:func:`trace_records` is the pure translation (tested with constructed trace entries shaped as
torch documents them).
"""

from __future__ import annotations

import bisect
import threading
import time
from typing import Any

from faulthunt import context
from faulthunt.ledger.writer import LedgerWriter
from faulthunt.records.ledger import (
    EVENT_ALLOC,
    EVENT_FREE,
    KIND_BLOCK,
    KIND_SEGMENT,
    PHASE_COMPLETED,
    PHASE_REQUESTED,
)

NAME = "torch"
POLL_S = 0.2
MAX_ENTRIES = 1_000_000
STACK_LIMIT = 12

_ACTIONS: dict[str, tuple[str, str, str | None]] = {
    "segment_alloc": (EVENT_ALLOC, KIND_SEGMENT, None),
    "segment_map": (EVENT_ALLOC, KIND_SEGMENT, None),
    "segment_free": (EVENT_FREE, KIND_SEGMENT, None),
    "segment_unmap": (EVENT_FREE, KIND_SEGMENT, None),
    "alloc": (EVENT_ALLOC, KIND_BLOCK, None),
    "free_requested": (EVENT_FREE, KIND_BLOCK, PHASE_REQUESTED),
    "free_completed": (EVENT_FREE, KIND_BLOCK, PHASE_COMPLETED),
}


def _frames(frames: Any) -> list[str] | None:
    if not frames:
        return None
    out = []
    for f in frames[:STACK_LIMIT]:
        if isinstance(f, dict):
            out.append(f"{f.get('filename', '?')}:{f.get('line', '?')} in {f.get('name', '?')}")
    return out or None


def entry_key(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e.get("time_us"), e.get("action"), e.get("addr"), e.get("size"))


def trace_records(entries: list[dict[str, Any]], device: int, *, now: float,
                  nodeid_at: Any = None) -> list[dict[str, Any]]:
    """Ledger record fields for torch trace entries (pure).

    ``time_us`` is the allocator's wall clock in microseconds since the epoch; an entry without a
    plausible one gets ``now``. ``nodeid_at(t)`` names the test running at ``t``.
    """
    out: list[dict[str, Any]] = []
    for e in entries:
        m = _ACTIONS.get(e.get("action", ""))
        addr = e.get("addr")
        if m is None or not isinstance(addr, int):
            continue
        event, kind, phase = m
        tus = e.get("time_us")
        t = tus / 1e6 if isinstance(tus, (int, float)) and tus > 1e15 else now
        rec: dict[str, Any] = {"event": event, "t": t, "source": NAME, "address": addr, "kind": kind,
                               "device_id": device, "action": e["action"]}
        if event == EVENT_ALLOC:
            rec["size"] = int(e.get("size", 0))
        if phase:
            rec["phase"] = phase
        if e.get("stream") is not None:
            rec["stream"] = e["stream"]
        stack = _frames(e.get("frames"))
        if stack:
            rec["stack"] = stack
        rec["nodeid"] = nodeid_at(t) if nodeid_at is not None else None
        out.append(rec)
    return out


def new_entries(trace: list[dict[str, Any]], last: tuple[Any, ...] | None) -> list[dict[str, Any]]:
    """The entries after ``last`` (the key of the last entry already written). Pure.

    The trace is a ring buffer: when ``last`` has been overwritten, every entry newer than its
    time is new.
    """
    if last is None:
        return list(trace)
    for i in range(len(trace) - 1, -1, -1):
        if entry_key(trace[i]) == last:
            return list(trace[i + 1:])
    t_last = last[0] if isinstance(last[0], (int, float)) else -1
    return [e for e in trace if isinstance(e.get("time_us"), (int, float)) and e["time_us"] > t_last]


class TorchSource:
    name = NAME

    def __init__(self, torch: Any, writer: LedgerWriter) -> None:
        self.torch = torch
        self.writer = writer
        self.last: dict[int, tuple[Any, ...] | None] = {}
        self.tests: list[tuple[float, str | None]] = [(time.time(), context.current_nodeid)]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="faulthunt-ledger-torch", daemon=True)

    def _nodeid_at(self, t: float) -> str | None:
        i = bisect.bisect_right([x for x, _ in self.tests], t) - 1
        return self.tests[max(i, 0)][1]

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            if context.current_nodeid != self.tests[-1][1]:
                self.tests.append((time.time(), context.current_nodeid))
            if not self.torch.cuda.is_initialized():
                return
            snap = self.torch.cuda.memory._snapshot()
            for dev, trace in enumerate(snap.get("device_traces", [])):
                fresh = new_entries(trace, self.last.get(dev))
                if not fresh:
                    continue
                self.last[dev] = entry_key(fresh[-1])
                for fields in trace_records(fresh, dev, now=time.time(), nodeid_at=self._nodeid_at):
                    fields.pop("source", None)
                    self.writer.record(fields.pop("event"), NAME, **fields)

    def stop(self) -> None:
        self._stop.set()
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - the last flush at stop is best effort: torch may be torn down
            pass


def start(writer: LedgerWriter) -> TorchSource:
    import torch

    # Records from the first allocation on; does not itself create a CUDA context.
    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                             max_entries=MAX_ENTRIES)
    src = TorchSource(torch, writer)
    src.thread.start()
    return src
