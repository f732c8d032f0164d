"""Xid events as JSON Lines, encoded by msgspec straight from the records.

Each line is the record's JSON object -- :meth:`~faulthunt.records.xid.XidEvent.to_json`'s keys,
in the same order, with the same values -- as msgspec writes it: compact separators (``{"xid":31,
"pci":"0000:3b:00",...}``). The record is encoded in C without building any dict: about 0.3 us an
event, where building ``to_json`` and ``json.dumps`` took 3 us, most of the output time of
``faulthunt xid parse --json`` on a big log (docs/kernlog.md).

The text stays ASCII, as ``json.dumps`` keeps it: a line holding any other character (a process
name, a replaced undecodable byte) is written by the standard library with ``\\uXXXX`` escapes, so
that U+2028, U+0085 and the like never split a line for a reader that splits on them
(``str.splitlines``). So is a record msgspec cannot encode (a lone surrogate from text that was
never UTF-8, a value of another type in a damaged record). A non-finite float, which JSON cannot
hold and the parser never makes, is ``null``. ``tests/test_kernlog_jsonl.py`` reads every line back
equal to ``to_json`` on every capture and on hypothesis-generated lines.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from faulthunt.records.xid import XidEvent

_encoder = msgspec.json.Encoder()
_encode = _encoder.encode
_encode_lines = _encoder.encode_lines

#: what msgspec raises for a record it cannot encode (UnicodeEncodeError is a ValueError)
_UNENCODABLE = (TypeError, ValueError, OverflowError)


def _stdlib(ev: XidEvent) -> str:
    import json
    import math

    obj = ev.to_json()
    if isinstance(ev.ts, float) and not math.isfinite(ev.ts):
        obj["ts"] = None  # as msgspec writes it: json.dumps would write NaN, which is not JSON
    # ensure_ascii (the default): every other character, a lone surrogate too, becomes an escape
    return json.dumps(obj, separators=(",", ":"))


def event_json(ev: XidEvent) -> str:
    """One event's JSON object (ASCII text), without the newline."""
    try:
        data = _encode(ev)
    except _UNENCODABLE:
        return _stdlib(ev)
    return data.decode() if data.isascii() else _stdlib(ev)


def events_jsonl(events: Sequence[XidEvent]) -> bytes:
    """The JSON Lines of ``events`` (ASCII): one object per event, each line ending in a newline."""
    try:
        data = _encode_lines(events)
    except _UNENCODABLE:
        data = b""
    if data.isascii() and data:  # the whole batch in one C call: the common case
        return data
    return "".join(event_json(ev) + "\n" for ev in events).encode()
