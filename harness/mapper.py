"""Fault address -> verdict: which allocation, how far outside it, freed by which test, or wild.

Pure (:func:`map_address` takes a loaded :class:`~faulthunt.ledger.reader.Ledger`); only
:func:`map_run` reads and writes a run directory. Verdicts (docs/mapper.md):

``inside``        in a live allocation (offset from its start); for a live pool block, the block
``past_end``      after the end of the nearest live allocation below, within its reach
``before_start``  before the start of the nearest live allocation above, within its reach
``freed``         in an allocation already freed at that time (use after free): which, when, by whom
``pool_slack``    inside a live framework pool chunk but in no live object of that pool
``unmapped``      none of the above; the nearest live allocations on both sides and the distances
``null_page``     below :data:`NULL_PAGE_LIMIT`: a null pointer plus an offset

An address in a guard slot (``faulthunt stress --guard``, docs/guard.md) needs none of these
rules: the slot's geometry is on record, so the guard's own verdict is taken (``basis:
"guard"``: ``past_end`` / ``before_start`` by exactly so many bytes, ``freed`` by which test,
``slack`` for mapped bytes a guard cannot cover, ``inside``) and the rules above only say what
they would have guessed (``ledger_verdict``).

"Within its reach": a distance under max(:data:`NEAR_BYTES`, the allocation's own size); an
index off by a few rows lands there, a garbage pointer does not. An Xid 31 names only the 4 KiB
page of the access (``--page``): the page is split wherever the verdict changes and each piece is
reported with an offset range ``[lo, hi]``, never a single invented byte.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faulthunt.errors import InputError, UsageError
from faulthunt.ledger.reader import Ledger, Life, PidLedger, load_ledger
from faulthunt.records.ledger import KIND_SEGMENT
from faulthunt.records.run import TestSpan

if TYPE_CHECKING:
    from faulthunt.guard.verdict import GuardIndex, GuardVerdict
    from faulthunt.records.documents import XidLine
    from faulthunt.rundir import RunDir

PAGE_SIZE = 4096
#: addresses below this are a null pointer plus an offset (the first 64 KiB are never mapped)
NULL_PAGE_LIMIT = 0x10000
#: an overrun this close to an allocation is attributed to it whatever its size (2 MiB: the
#: driver's large-page granularity; overruns inside it are silent on the GPU, see device notes)
NEAR_BYTES = 2 << 20
#: launches listed when no synchronization was recorded before the fault
LAUNCHES_WITHOUT_SYNC = 5
MAX_LAUNCHES = 20

VERDICTS = ("inside", "past_end", "before_start", "freed", "pool_slack", "unmapped", "null_page",
            "slack")
#: which piece of a page names the page: the likeliest explanation of a fault comes first
_PAGE_PRIORITY = ("freed", "past_end", "before_start", "pool_slack", "null_page", "unmapped", "inside")
#: which pid explains an address best when no pid is given
_PID_PRIORITY = ("inside", "slack", "pool_slack", "freed", "past_end", "before_start", "null_page",
                 "unmapped")

_HEX = re.compile(r"^0[xX][0-9a-fA-F_]+$")
_DEC = re.compile(r"^[0-9_]+$")


def parse_address(text: str) -> int:
    """``0x7f7d_dbe00000`` (the Xid form), ``0x7f7ddbe00000`` or decimal -> int."""
    s = text.strip()
    if _HEX.match(s) and s.strip("_")[2:].replace("_", ""):
        return int(s[2:].replace("_", ""), 16)
    if _DEC.match(s) and s.replace("_", ""):
        return int(s.replace("_", ""), 10)
    raise UsageError(f"not an address: {text!r}",
                     fix="give 0x-prefixed hex (0x7f7d_dbe00000 as Xid prints it) or decimal")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What one fault address is, against one process's ledger at one time."""

    address: int
    page: bool
    pid: int | None
    at: float | None
    verdict: str
    #: the allocation the verdict names (alloc record + replay facts: kind, end, freed), or None
    allocation: dict[str, Any] | None
    #: address minus allocation start: an int for a byte, (lo, hi) for a page; None when no allocation
    offset: int | tuple[int, int] | None
    #: the pool chunk around a block / the slack (pool_slack, inside a block, freed block)
    container: dict[str, Any] | None = None
    #: nearest live allocations {"allocation", "distance"} (distance: bytes; (lo, hi) for a page)
    below: dict[str, Any] | None = None
    above: dict[str, Any] | None = None
    #: kernels this pid launched since its last synchronization before ``at`` (newest last)
    launches: tuple[dict[str, Any], ...] = ()
    launches_since: float | None = None
    nodeid: str | None = None
    #: for a page: every piece [lo, hi] of it with its own verdict
    pieces: tuple[dict[str, Any], ...] = ()
    note: str | None = None
    #: the guard slot's exact verdict (docs/guard.md); then ``verdict``, ``allocation`` and
    #: ``offset`` are the guard's and ``ledger_verdict`` what the rules above would have said
    guard: GuardVerdict | None = None
    ledger_verdict: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``faulthunt map --json`` object."""
        def off(v: int | tuple[int, int] | None) -> int | list[int] | None:
            return list(v) if isinstance(v, tuple) else v

        out: dict[str, Any] = {
            "address": hex(self.address),
            "address_int": self.address,
            "page": self.page,
            "pid": self.pid,
            "at": self.at,
            "verdict": self.verdict,
            "allocation": self.allocation,
            "offset": off(self.offset),
            "container": self.container,
            "nearest": {"below": _near_json(self.below), "above": _near_json(self.above)},
            "launches": list(self.launches),
            "launches_since": self.launches_since,
            "nodeid": self.nodeid,
            "note": self.note,
        }
        if self.page:
            out["page_range"] = [hex(self.address), hex(self.address + PAGE_SIZE - 1)]
            out["pieces"] = list(self.pieces)
        if self.guard is not None:
            # basis "guard", verdict, caught, offset, beyond, text, allocation (the slot)
            out.update(self.guard.to_json(), note=self.note, ledger_verdict=self.ledger_verdict)
        return out


def _near_json(near: dict[str, Any] | None) -> dict[str, Any] | None:
    if near is None:
        return None
    d = near["distance"]
    return {"allocation": near["allocation"], "distance": list(d) if isinstance(d, tuple) else d}


# --- classification of one byte -------------------------------------------------------------

@dataclasses.dataclass
class _Byte:
    verdict: str
    life: Life | None = None
    container: Life | None = None
    below: Life | None = None
    above: Life | None = None
    #: for ``freed`` outside the freed allocation's bytes: where the address is relative to it
    detail: str | None = None

    def key(self) -> tuple[str, object, str | None]:
        return (self.verdict, None if self.life is None else self.life.ident, self.detail)


def _smallest(lives: list[Life]) -> Life:
    return min(lives, key=lambda lf: (lf.size, -lf.t0))


def _is_pool(pl: PidLedger, c: Life) -> bool:
    if c.kind == KIND_SEGMENT:
        return True
    got = pl.pools.get(c.ident)  # a chunk's pool-ness never changes: ask the index once
    if got is None:
        got = pl.pools[c.ident] = pl.blocks.any_overlapping(c.address, c.end, c.t0, c.t1)
    return got


def _reach(life: Life) -> int:
    return max(NEAR_BYTES, life.size)


def _nearest(pl: PidLedger, a: int, at: float) -> tuple[Life | None, Life | None]:
    below = pl.containers.nearest_below(a, at)
    above = pl.containers.nearest_above(a, at)
    # Ledgers with only framework blocks (no driver-level source) still get neighbours.
    if len(pl.blocks):
        b2 = pl.blocks.nearest_below(a, at)
        a2 = pl.blocks.nearest_above(a, at)
        if b2 is not None and (below is None or b2.end > below.end):
            below = b2
        if a2 is not None and (above is None or a2.address < above.address):
            above = a2
    return below, above


def _classify(pl: PidLedger, a: int, at: float) -> _Byte:
    if a < NULL_PAGE_LIMIT:
        return _Byte("null_page")
    blive, bfreed = pl.blocks.containing(a, at)
    clive, cfreed = pl.containers.containing(a, at)
    if blive:
        return _Byte("inside", _smallest(blive), _smallest(clive) if clive else None)
    if clive:
        c = _smallest(clive)
        # A block freed back into a live chunk: the driver still maps it, so no Xid, but it is
        # a use after free all the same.
        fb = [b for b in bfreed if b.address >= c.address and b.end <= c.end and (b.t1 or 0) >= c.t0]
        if fb:
            return _Byte("freed", max(fb, key=lambda lf: lf.t1 or 0.0), c)
        if _is_pool(pl, c):
            below = pl.blocks.nearest_below(a, at)
            above = pl.blocks.nearest_above(a, at)
            return _Byte("pool_slack", c, c,
                         below if below is not None and below.address >= c.address else None,
                         above if above is not None and above.end <= c.end else None)
        return _Byte("inside", c)
    freed = bfreed + cfreed
    below, above = _nearest(pl, a, at)
    if freed:
        return _Byte("freed", max(freed, key=lambda lf: lf.t1 or 0.0), None, below, above)
    d_below = a - below.end if below is not None else None
    d_above = above.address - a if above is not None else None
    near_below = below is not None and d_below is not None and d_below < _reach(below)
    near_above = above is not None and d_above is not None and d_above <= _reach(above)
    # Freed neighbours: an overrun of an allocation that was freed by `at` (at the end of a ledger
    # every allocation of a process that exited cleanly is freed) is a use of freed memory; it is
    # named "freed" with where it lies, never "unmapped" with no neighbours.
    fbelow, fabove = _nearest_any(pl, a, at)
    fd_below = a - fbelow.end if fbelow is not None and _freed_by(fbelow, at) else None
    fd_above = fabove.address - a if fabove is not None and _freed_by(fabove, at) else None
    cands: list[tuple[int, int, str, Life]] = []
    if near_below:
        cands.append((d_below or 0, 0, "past_end", below))  # type: ignore[arg-type]
    if near_above:
        cands.append((d_above or 0, 1, "before_start", above))  # type: ignore[arg-type]
    if fd_below is not None and fd_below < _reach(fbelow):  # type: ignore[arg-type]
        cands.append((fd_below, 2, "freed_past_end", fbelow))  # type: ignore[arg-type]
    if fd_above is not None and fd_above <= _reach(fabove):  # type: ignore[arg-type]
        cands.append((fd_above, 3, "freed_before_start", fabove))  # type: ignore[arg-type]
    nb = below if below is not None else fbelow
    na = above if above is not None else fabove
    if cands:
        _d, _o, what, life = min(cands, key=lambda c: (c[0], c[1]))
        if what == "past_end":
            return _Byte("past_end", life, None, nb, na)
        if what == "before_start":
            return _Byte("before_start", life, None, nb, na)
        return _Byte("freed", life, None, nb, na, detail=what[len("freed_"):])
    return _Byte("unmapped", None, None, nb, na)


def _freed_by(life: Life, at: float) -> bool:
    return life.t0 <= at and life.t1 is not None and life.t1 <= at


def _detail_note(b: _Byte, lo: int, hi: int) -> str | None:
    if not b.detail or b.life is None:
        return None
    lf = b.life
    off = f"{lo - lf.address}" if lo == hi else f"{lo - lf.address}..{hi - lf.address}"
    where = "past its end" if b.detail == "past_end" else "before its start"
    return f"offset {off} of the {lf.size}-byte allocation ({where}), which was freed by then"


def _nearest_any(pl: PidLedger, a: int, at: float) -> tuple[Life | None, Life | None]:
    """Nearest allocations on both sides, freed ones included (begun by ``at``, else at any time)."""
    out: list[Life | None] = []
    for fn in ("nearest_below_any", "nearest_above_any"):
        best: Life | None = None
        for when in (at, float("inf")):
            for index in (pl.containers, pl.blocks):
                if not len(index):
                    continue
                got = getattr(index, fn)(a, when)
                if got is None:
                    continue
                if best is None or (got.end > best.end if fn == "nearest_below_any" else got.address < best.address):
                    best = got
            if best is not None:
                break
        out.append(best)
    return out[0], out[1]


def _offset(b: _Byte, lo: int, hi: int) -> int | tuple[int, int] | None:
    if b.verdict == "null_page":
        return lo if lo == hi else (lo, hi)
    if b.life is None:
        return None
    start = b.life.address
    return lo - start if lo == hi else (lo - start, hi - start)


def _distances(b: _Byte, lo: int, hi: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    below = above = None
    if b.below is not None:
        d = (lo - b.below.end, hi - b.below.end)
        below = {"allocation": b.below.to_json(), "distance": d[0] if lo == hi else d}
    if b.above is not None:
        d = (b.above.address - hi, b.above.address - lo)
        above = {"allocation": b.above.to_json(), "distance": d[0] if lo == hi else d}
    return below, above


def _pieces(pl: PidLedger, lo: int, hi: int, at: float) -> list[tuple[int, int, _Byte]]:
    """Split [lo, hi] where the verdict (or its allocation) changes."""
    edges = {lo, hi + 1}
    for index in (pl.containers, pl.blocks):
        edges.update(index.edges(lo, hi))
    if lo < NULL_PAGE_LIMIT <= hi:
        edges.add(NULL_PAGE_LIMIT)
    cuts = sorted(edges)
    out: list[tuple[int, int, _Byte]] = []
    for s, e in zip(cuts, cuts[1:]):
        _split(pl, s, e - 1, at, out)
    return out


def _split(pl: PidLedger, lo: int, hi: int, at: float, out: list[tuple[int, int, _Byte]]) -> None:
    # Between allocation edges the verdict changes only where a reach ends (past_end ->
    # unmapped -> before_start), monotonically; binary search finds each change exactly.
    while lo <= hi:
        first = _classify(pl, lo, at)
        last = _classify(pl, hi, at)
        if first.key() == last.key():
            _append(out, lo, hi, first)
            return
        good, bad = lo, hi  # classify(good) has first's key, classify(bad) does not
        while bad - good > 1:
            mid = (good + bad) // 2
            if _classify(pl, mid, at).key() == first.key():
                good = mid
            else:
                bad = mid
        _append(out, lo, good, first)
        lo = bad


def _append(out: list[tuple[int, int, _Byte]], lo: int, hi: int, b: _Byte) -> None:
    if out and out[-1][1] + 1 == lo and out[-1][2].key() == b.key():
        out[-1] = (out[-1][0], hi, out[-1][2])
    else:
        out.append((lo, hi, b))


# --- context: launches, test -----------------------------------------------------------------

def _launch_json(rec: dict[str, Any]) -> dict[str, Any]:
    keep = ("kernel", "t", "nodeid", "correlation_id", "stack", "source", "grid", "block")
    return {k: rec[k] for k in keep if k in rec}


def launches_before(pl: PidLedger, at: float) -> tuple[tuple[dict[str, Any], ...], float | None, str | None]:
    """Kernels launched since the last synchronization at or before ``at``; (launches, since, note)."""
    end = bisect.bisect_right(pl.launch_times, at)
    s = bisect.bisect_right(pl.sync_times, at) - 1
    note = None
    since: float | None
    if s >= 0:
        since = pl.sync_times[s]
        start = bisect.bisect_right(pl.launch_times, since)
    else:
        since = None
        start = max(0, end - LAUNCHES_WITHOUT_SYNC)
        if end:
            note = (f"no synchronization recorded before the fault: the last {end - start} "
                    "launch(es) are listed")
    if end - start > MAX_LAUNCHES:
        note = f"{end - start} launches since the last synchronization; the newest {MAX_LAUNCHES} are listed"
        start = end - MAX_LAUNCHES
    got = pl.launch_views.get((start, end))  # addresses of one fault share their launches
    if got is None:
        if len(pl.launch_views) > 1024:
            pl.launch_views.clear()
        got = pl.launch_views[(start, end)] = tuple(_launch_json(r) for r in pl.launches[start:end])
    return got, since, note


# --- the public mapping --------------------------------------------------------------------

def _guard_index(pl: PidLedger) -> GuardIndex | None:
    """The process's guard slots, indexed once (None when guard mode recorded nothing here)."""
    if not len(pl.guard):
        return None
    index: GuardIndex | None = pl.guard_index
    if index is None:
        from faulthunt.guard.verdict import GuardIndex

        index = pl.guard_index = GuardIndex.from_records(pl.guard_records())
    return index


def _with_guard(v: Verdict, pl: PidLedger, at: float | None) -> Verdict:
    """``v`` replaced by the guard's exact verdict where the address is in a guard slot."""
    index = _guard_index(pl)
    g = index.verdict(v.address, page=v.page, at=at) if index is not None else None
    if g is None:
        return v
    # the generic picture (nearest allocations, page pieces) is what guard mode makes moot;
    # the launches and the test running stay: they are about the fault, not the allocation
    lnote = launches_before(pl, v.at)[2] if v.at is not None else None
    notes = [n for n in (g.note, lnote) if n]
    return dataclasses.replace(
        v, verdict=g.verdict, allocation=g.slot.to_json(), offset=g.offset, container=None,
        below=None, above=None, pieces=(), note="; ".join(notes) or None, guard=g,
        ledger_verdict=v.verdict)


#: records at a ledger's start searched for the note of ``--ledger auto`` (``arrays: false``)
_LEAN_SCAN = 64
#: said with a verdict from a ledger that left per-array records out
LEAN_MAP_NOTE = ("per-array bounds were not recorded in this process (--ledger auto records CuPy pool "
                 "segments, not the arrays in them, and numba's driver frees, not its Python-level ones); "
                 "rerun the failing test with --ledger full (faulthunt stress --ledger full "
                 "--faulthunt-id ID) for the array's own bounds")


def _arrays_left_out(pl: PidLedger) -> bool:
    """Did this process's ledger say (its ``--ledger auto`` note) that per-array records are off?
    Memoized on the ledger; reads back at most its first :data:`_LEAN_SCAN` records."""
    got = pl.pools.get("arrays_left_out")
    if got is None:
        got = False
        for i in range(min(_LEAN_SCAN, len(pl.records))):
            r = pl.records[i]
            if r.get("event") == "note" and r.get("arrays") is False:
                got = True
                break
        pl.pools["arrays_left_out"] = got
    return got


def _map_in_pid(pl: PidLedger, address: int, at: float | None, page: bool) -> Verdict:
    v = _with_guard(_map_generic(pl, address, at, page), pl, at)
    if v.verdict in ("unmapped", "null_page") or v.guard is not None or not _arrays_left_out(pl):
        return v
    return dataclasses.replace(v, note="; ".join(n for n in (v.note, LEAN_MAP_NOTE) if n))


def _map_generic(pl: PidLedger, address: int, at: float | None, page: bool) -> Verdict:
    when = pl.t_last if at is None else at
    launches, since, lnote = launches_before(pl, when)
    notes = [lnote] if lnote else []
    if page:
        lo = address - address % PAGE_SIZE
        hi = lo + PAGE_SIZE - 1
        pieces = _pieces(pl, lo, hi, when)
        rank = {v: i for i, v in enumerate(_PAGE_PRIORITY)}
        plo, phi, main = min(pieces, key=lambda p: (rank[p[2].verdict], p[0]))
        dn = _detail_note(main, plo, phi)
        if dn:
            notes.append(dn)
        if len(pieces) > 1:
            notes.append(f"the page spans {len(pieces)} verdicts; the likeliest is shown, all are in pieces")
        piece_json = []
        for s, e, b in pieces:
            bl, ab = _distances(b, s, e)
            off = _offset(b, s, e)
            piece_json.append({"range": [hex(s), hex(e)], "verdict": b.verdict,
                               "allocation": b.life.to_json() if b.life else None,
                               "offset": list(off) if isinstance(off, tuple) else off,
                               "nearest": {"below": _near_json(bl), "above": _near_json(ab)}})
        below, above = _distances(main, plo, phi)
        offset = _offset(main, plo, phi)
        if isinstance(offset, int):
            offset = (offset, offset)
        return Verdict(lo, True, pl.pid, when, main.verdict,
                       main.life.to_json() if main.life else None, offset,
                       main.container.to_json() if main.container else None, below, above,
                       launches, since, pl.test_at(when), tuple(piece_json),
                       "; ".join(notes) or None)
    b = _classify(pl, address, when)
    dn = _detail_note(b, address, address)
    if dn:
        notes.append(dn)
    below, above = _distances(b, address, address)
    return Verdict(address, False, pl.pid, when, b.verdict, b.life.to_json() if b.life else None,
                   _offset(b, address, address), b.container.to_json() if b.container else None,
                   below, above, launches, since, pl.test_at(when), (), "; ".join(notes) or None)


def map_address(ledger: Ledger, address: int, *, pid: int | None = None, at: float | None = None,
                page: bool = False) -> Verdict:
    """Map one address against ``ledger`` (pure).

    ``pid``: the faulting process (GPU virtual addresses are per process); without it every pid
    in the ledger is tried and the best explanation wins (the note says so). ``at``: wall-clock
    time of the fault (default: the end of that pid's ledger). ``page``: ``address`` names a 4 KiB
    page (Xid 31), not a byte. Raises :class:`InputError` when the ledger has no such pid.
    """
    if address < 0:
        raise UsageError(f"negative address {address}", fix="give the address as Xid or compute-sanitizer printed it")
    if pid is not None:
        pl = ledger.pid(pid)
        if pl is None:
            known = ", ".join(str(p) for p in sorted(k for k in ledger.pids if k is not None)) or "none"
            raise InputError(f"the ledger has no records for pid {pid} (pids in it: {known})",
                             fix="leave --pid out to try every pid in the ledger, or pass one listed; "
                                 "a faulting process missing from the list was not one of the run's, "
                                 "ran with the ledger off (faulthunt stress --ledger auto, "
                                 "FAULTHUNT_LEDGER), or never reached a call the ledger sees (a "
                                 "process leaves no ledger file until its first record)")
        return _map_in_pid(pl, address, at, page)
    if not ledger.pids:
        raise InputError("the ledger is empty: no allocation records to map against",
                         fix="run with the ledger on (faulthunt stress --ledger auto) on a machine with a GPU")
    results = [_map_in_pid(pl, address, at, page) for pl in ledger.pids.values()]
    if len(results) == 1:
        return results[0]
    rank = {v: i for i, v in enumerate(_PID_PRIORITY)}
    # a guard catch is exact: it wins over every guess made by the rules
    results.sort(key=lambda v: (not (v.guard is not None and v.guard.caught), rank[v.verdict]))
    best = results[0]
    same = [v.pid for v in results if v.verdict == best.verdict and v.verdict != "unmapped"]
    note = f"no pid given: checked {len(results)} pids, best match in pid {best.pid}"
    if len(same) > 1:
        note += f"; pids {', '.join(map(str, same))} also give {best.verdict}: pass --pid"
    return dataclasses.replace(best, note="; ".join(n for n in (best.note, note) if n))


# --- a whole run ------------------------------------------------------------------------------


def map_each(ledger: Ledger, queries: Iterable[tuple[Any, ...]], *, at: float | None = None,
             page: bool = False) -> Iterator[Verdict]:
    """:func:`map_address` for each ``(address, pid)`` or ``(address, pid, at)`` (an ``at`` of
    None: the ``at`` given here), one verdict at a time."""
    for q in queries:
        when = q[2] if len(q) > 2 and q[2] is not None else at
        yield map_address(ledger, q[0], pid=q[1], at=when, page=page)


def _kernel_matches(recorded: str, named: str) -> bool:
    a = recorded.split("(")[0].strip()
    b = named.split("(")[0].strip()
    return bool(a and b) and (a == b or a in b or b in a)


def _fault_time_xid(pl: PidLedger, rec: dict[str, Any]) -> tuple[float | None, str]:
    ts = rec.get("ts")
    if isinstance(ts, (int, float)) and pl.mono_offset is not None:
        return float(ts) + pl.mono_offset, "kernel-log timestamp (monotonic clock)"
    if pl.launch_times:
        return pl.launch_times[-1], "the last launch of the pid (the Xid had no usable timestamp)"
    return None, "the end of the ledger (no timestamp, no launches)"


def _fault_time_kernel(ledger: Ledger, kernel: str | None) -> tuple[int | None, float | None]:
    if not kernel:
        return None, None
    best: tuple[float, int | None] | None = None
    for pid, pl in ledger.pids.items():
        for k in range(len(pl.launch_kernels) - 1, -1, -1):
            if _kernel_matches(pl.launch_kernels[k], kernel):
                t = pl.launch_times[k]
                if best is None or t > best[0]:
                    best = (t, pid)
                break
    return (best[1], best[0]) if best else (None, None)


def _safe_load(directory: Path) -> Ledger | None:
    # Read-only: the reader reads past a dead writer's NUL reserve and torn last line, so a
    # collected run is never changed by mapping it (sealing is the collectors' job: stress and the
    # sanitizer stage, when their run is over).
    if not directory.is_dir() or not any(directory.glob("*.jsonl")):
        return None
    return load_ledger(directory)


def map_run(run_dir: Path) -> list[dict[str, Any]]:
    """Map every Xid 31 page and every sanitizer finding with an address in ``run_dir``
    (:func:`map_run_entries`); writes ``run_dir/mapping.json`` and returns its entries."""
    from faulthunt.rundir import Layout, RunDir, write_json_atomic

    out = map_run_entries(RunDir(run_dir))
    write_json_atomic(run_dir / Layout.MAPPING, out)
    return out


def map_run_entries(run: RunDir, xids: Iterable[XidLine] | None = None) -> list[dict[str, Any]]:
    """The mapping of a run's fault addresses (reads the run, writes nothing).

    Xid pages are mapped against ``run_dir/ledger`` in the faulting pid at the Xid's time;
    sanitizer addresses against ``run_dir/sanitizer/run/ledger`` (the rerun's own processes) at the
    last launch of the kernel the finding names, else at the end of the finding's test span
    (``sanitizer/run/events``). A finding the ledger cannot place (no ledger, or ``unmapped``) gets
    a verdict from the sanitizer's own nearest-allocation line, marked ``basis: "sanitizer"``
    (ledger verdicts carry ``basis: "ledger"``, a guard slot's ``basis: "guard"``). An entry that
    cannot be mapped has ``verdict: null`` and a ``reason``. ``xids``: the run's Xid lines when
    the caller has them with a newer attribution than ``xid.jsonl`` (stress, before it writes
    them); default ``run.xids()``.
    """
    out: list[dict[str, Any]] = []
    ledger = _safe_load(run.ledger_dir())
    for rec in run.xids() if xids is None else xids:
        if rec.xid != 31 or rec.mmu is None or rec.mmu.address is None:
            continue
        origin = {"origin": "xid", "xid": 31, "seq": rec.seq, "ts": rec.ts,
                  "raw": rec.raw, "worker": rec.worker,
                  "attributed_nodeid": rec.nodeid}
        entry = _map_one(ledger, rec.mmu.address, rec.pid, rec.to_json(), page=True)
        if entry.get("verdict") is not None:
            entry.setdefault("basis", "ledger")
        out.append({**origin, **entry})
    san = run.sanitizer()
    san_run = run.sanitizer_run()
    san_ledger = _safe_load(san_run.ledger_dir())
    spans = san_run.spans()
    for f in san.addressed() if san is not None else ():
        rng = list(f.address_range)
        origin = {"origin": "sanitizer", "kind": f.kind, "kernel": f.kernel,
                  "file": f.file, "line": f.line, "access": f.access,
                  "size": f.size, "address_range": rng, "attributed_nodeid": f.nodeid}
        nearest = f.nearest()
        if san_ledger is None:
            entry = {"address": hex(rng[0]), "verdict": None,
                     "reason": "no ledger from the sanitizer rerun (sanitizer/run/ledger): "
                               "addresses under compute-sanitizer differ from the plain run's"}
        else:
            pid, at = _fault_time_kernel(san_ledger, f.kernel)
            basis_t = "the last recorded launch of the finding's kernel"
            span = _span_of(spans, f.nodeid, san_ledger) if at is None else None
            if span is not None:
                pid, at = span.pid, span.t1
                basis_t = "the end of the finding's test span (no launch of its kernel recorded)"
            elif at is None:
                basis_t = "the end of the ledger (the kernel's launch was not recorded)"
            entry = _map_one(san_ledger, rng[0], pid, None, page=False, at=at)
            entry["time_basis"] = basis_t
            entry.setdefault("basis", "ledger")
        if entry.get("verdict") in (None, "unmapped"):
            fb = sanitizer_verdict(rng[0], nearest)
            if fb is not None:
                fb["ledger_verdict"] = entry.get("verdict")
                if entry.get("reason"):
                    fb["ledger_reason"] = entry["reason"]
                for k in ("pid", "at", "time_basis", "launches", "nodeid"):
                    if k in entry:
                        fb[k] = entry[k]
                entry = fb
        out.append({**origin, **entry})
    return out


def _span_of(spans: Sequence[TestSpan], nodeid: str | None, ledger: Ledger) -> TestSpan | None:
    """The ended run of ``nodeid``: exact, else one whose node id is a path suffix of it (the
    sanitizer stage names tests by absolute path, the plugin relative to its rootdir).

    A test rerun under several tools ran in several processes: each run stays distinct, and the
    one whose process left a ledger is taken (the latest such; else the latest run).
    """
    if not nodeid:
        return None
    runs = [s for s in spans if s.t1 is not None and s.nodeid == nodeid]
    if not runs:
        runs = [s for s in spans if s.t1 is not None and
                (nodeid.endswith("/" + s.nodeid) or s.nodeid.endswith("/" + nodeid))]
    if not runs:
        return None
    with_ledger = [s for s in runs if s.pid is not None and ledger.pid(s.pid) is not None]
    return (with_ledger or runs)[-1]


def sanitizer_verdict(address: int, nearest: Any) -> dict[str, Any] | None:
    """A verdict resting on compute-sanitizer's own "N bytes after/before the nearest allocation
    at X of size S" line (``nearest``: the parsed ``{"base", "size", "relation", "distance"}``),
    or None without one. Pure. Used when the ledger has nothing covering the address: under
    compute-sanitizer CUPTI cannot subscribe (the sanitizer is the subscriber), so raw driver
    allocations go unrecorded. ``basis: "sanitizer"`` says so; nearest is the sanitizer's
    nearest, which may not be the allocation the kernel meant to touch.
    """
    if not isinstance(nearest, dict):
        return None
    base, size, rel = nearest.get("base"), nearest.get("size"), nearest.get("relation")
    if not isinstance(base, int) or not isinstance(size, int) or rel not in ("after", "before"):
        return None
    end = base + size
    alloc = {"address": base, "size": size, "end": end, "source": "compute-sanitizer", "freed": None}
    if base <= address < end:
        verdict = "inside"
    elif rel == "after" and address >= end:
        verdict = "past_end"
    elif rel == "before" and address < base:
        verdict = "before_start"
    else:  # the line and the address disagree: say so rather than pick one
        return {"address": hex(address), "address_int": address, "verdict": None, "basis": "sanitizer",
                "reason": f"compute-sanitizer's nearest-allocation line ({rel} {hex(base)}+{size}) "
                          "does not fit the address"}
    off = address - base
    # The same reach rule as ledger verdicts: compute-sanitizer names a nearest allocation even
    # for a wild write hundreds of GiB away (seen on the H200); that is not "past its end".
    dist = address - end + 1 if verdict == "past_end" else base - address if verdict == "before_start" else 0
    if dist and dist > max(NEAR_BYTES, size):
        side = "below" if verdict == "past_end" else "above"
        return {"address": hex(address), "address_int": address, "page": False, "verdict": "unmapped",
                "allocation": None, "offset": None, "container": None,
                "nearest": {"below": None, "above": None} | {side: {"allocation": alloc, "distance": dist}},
                "basis": "sanitizer",
                "note": (f"from compute-sanitizer's nearest-allocation line: {dist} bytes {rel} the "
                         f"allocation at {hex(base)} of size {size}, beyond any allocation's reach "
                         "(a wild access); the ledger had nothing covering this address")}
    return {"address": hex(address), "address_int": address, "page": False, "verdict": verdict,
            "allocation": alloc, "offset": off, "container": None,
            "nearest": {"below": None, "above": None}, "basis": "sanitizer",
            "note": (f"from compute-sanitizer's nearest-allocation line ({nearest.get('distance')} bytes "
                     f"{rel} the allocation at {hex(base)} of size {size}), not from the ledger, which "
                     "had nothing covering this address (CUPTI cannot record under compute-sanitizer)")}


def _map_one(ledger: Ledger | None, address: int, pid: Any, xid: dict[str, Any] | None, *,
             page: bool, at: float | None = None) -> dict[str, Any]:
    if ledger is None:
        return {"address": hex(address), "verdict": None,
                "reason": "no ledger in this run (was --ledger off, or no GPU source available?)"}
    pid = pid if isinstance(pid, int) else None
    basis = None
    if xid is not None and pid is not None and ledger.pid(pid) is not None:
        at, basis = _fault_time_xid(ledger.pids[pid], xid)
    try:
        v = map_address(ledger, address, pid=pid, at=at, page=page)
    except InputError as exc:
        return {"address": hex(address), "pid": pid, "verdict": None, "reason": exc.message}
    entry = v.to_json()
    if basis:
        entry["time_basis"] = basis
    return entry
