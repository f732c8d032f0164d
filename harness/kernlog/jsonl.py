"""Xid events as JSON Lines, written straight from the record.

:func:`event_json` returns exactly the text of ``json.dumps(ev.to_json())`` (same key order,
separators and ``ensure_ascii`` escaping, by the standard library's own C string encoder) for the
events the parser and the kernel-log sources make, whose fields hold only ``None``, ``int``,
finite ``float``, ``str`` and the nested records. It skips building the intermediate dicts and the
generic encoder's type dispatch, which were most of the output's cost in ``faulthunt xid parse
--json`` (docs/kernlog.md). A record of other types (read back from a damaged file) still gives
valid JSON that reads back to the same values (``json.dumps`` writes it, or ``True`` becomes
``1``). ``tests/test_kernlog_jsonl.py`` holds it equal to ``json.dumps`` on every capture and on
hypothesis-generated lines.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii as _s  # the C function json.dumps itself uses

from faulthunt.records.xid import GrException, MmuFault, XidEvent


_i = int.__repr__  # raises TypeError on anything but an int: such a record goes the generic way
_f = float.__repr__


def _ts(ts: float) -> str:
    if not math.isfinite(ts):
        raise ValueError(ts)  # json.dumps writes NaN/Infinity: leave that to it
    return _f(ts)


def _mmu_json(m: MmuFault) -> str:
    return (
        f'{{"address": {"null" if m.address is None else _i(m.address)}, '
        f'"engine": {"null" if m.engine is None else _s(m.engine)}, '
        f'"gpc": {"null" if m.gpc is None else _i(m.gpc)}, '
        f'"client": {"null" if m.client is None else _s(m.client)}, '
        f'"fault_type": {"null" if m.fault_type is None else _s(m.fault_type)}, '
        f'"access_type": {"null" if m.access_type is None else _s(m.access_type)}, '
        f'"decodable": {"true" if m.decodable is True else "false" if m.decodable is False else _i(m.decodable)}, '
        f'"address_text": {"null" if m.address_text is None else _s(m.address_text)}, '
        f'"reason": {"null" if m.reason is None else _s(m.reason)}}}'
    )


def _gr_json(g: GrException) -> str:
    esr = ", ".join(f"[{_i(r)}, {_i(v)}]" for r, v in g.esr)
    return (
        f'{{"kind": {_s(g.kind)}, "gpc": {"null" if g.gpc is None else _i(g.gpc)}, '
        f'"tpc": {"null" if g.tpc is None else _i(g.tpc)}, "sm": {"null" if g.sm is None else _i(g.sm)}, '
        f'"error": {"null" if g.error is None else _s(g.error)}, "esr": [{esr}]}}'
    )


def event_json(ev: XidEvent) -> str:
    """``json.dumps(ev.to_json())``, without the newline."""
    try:
        return (
            f'{{"xid": {_i(ev.xid)}, "pci": {"null" if ev.pci is None else _s(ev.pci)}, '
            f'"gpu_instance": {"null" if ev.gpu_instance is None else _i(ev.gpu_instance)}, '
            f'"compute_instance": {"null" if ev.compute_instance is None else _i(ev.compute_instance)}, '
            f'"pid": {"null" if ev.pid is None else _i(ev.pid)}, '
            f'"process": {"null" if ev.process is None else _s(ev.process)}, '
            f'"message": {_s(ev.message)}, "category": {_s(ev.category)}, '
            f'"mmu": {"null" if ev.mmu is None else _mmu_json(ev.mmu)}, '
            f'"caused_by": {"null" if ev.caused_by is None else _i(ev.caused_by)}, '
            f'"channel": {"null" if ev.channel is None else _i(ev.channel)}, '
            f'"gr": {"null" if ev.gr is None else _gr_json(ev.gr)}, '
            f'"seq": {"null" if ev.seq is None else _i(ev.seq)}, '
            f'"ts": {"null" if ev.ts is None else _ts(ev.ts)}, '
            f'"wall": {"null" if ev.wall is None else _s(ev.wall)}, '
            f'"level": {"null" if ev.level is None else _i(ev.level)}, "raw": {_s(ev.raw)}}}'
        )
    except (TypeError, ValueError, AttributeError):  # not the parser's types (a damaged record read back)
        return json.dumps(ev.to_json())
