"""Decoding run-directory documents: validate, never raise, name what was wrong.

Every run file is decoded here, through msgspec (typed, frozen Structs; validation and JSON in
one C pass: about 10x the standard library's speed on a worker event line, see docs/rundir.md).
A record that does not decode is never an exception for the caller: it becomes a
:class:`Problem` (file, line, why) that the reader counts and reports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TypeVar, cast

import msgspec

T = TypeVar("T")

#: the most characters of a bad value quoted in a problem's ``why``
_WHY_LIMIT = 200


class Problem(msgspec.Struct, frozen=True):
    """A part of a run directory that could not be read: which file, which line, why.

    (A Struct, not a dataclass: `faulthunt stress` imports this module before it starts pytest,
    and the dataclasses module would bring inspect, ast, dis and tokenize onto that path.)"""

    file: str
    line: int | None
    why: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.why}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "why": self.why}


class Doc(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every run-directory document: frozen, keyword-only, ``to_json`` as plain data."""

    def to_json(self) -> Any:
        """The document as JSON-ready builtins (what the file holds)."""
        return msgspec.to_builtins(self)


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply to read"
    if isinstance(exc, UnicodeError):
        return "not UTF-8 text"
    text = str(exc) or type(exc).__name__
    return text if len(text) <= _WHY_LIMIT else text[:_WHY_LIMIT] + "..."


#: what a malformed value can raise while it is decoded or converted: msgspec's own errors,
#: a nesting deeper than the interpreter's recursion limit, bytes that are not UTF-8
DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeError,
                 ValueError, TypeError, OverflowError)


def decode_json(data: bytes) -> tuple[Any, str | None]:
    """(value, None) for JSON bytes, or (None, why) when they are not JSON."""
    try:
        return msgspec.json.decode(data), None
    except msgspec.DecodeError as exc:
        return _decode_stdlib(data, exc)
    except DECODE_ERRORS as exc:
        return None, _why(exc)


def _decode_stdlib(data: bytes, first: BaseException) -> tuple[Any, str | None]:
    """What msgspec refuses and the standard library's writer can write: lone surrogates
    (``"\\udcff"``, from an undecodable file name), NaN; and invalid UTF-8 inside a string,
    kept with replacement characters as the earlier readers did."""
    if b"\\u" not in data and b"NaN" not in data and b"Infinity" not in data \
            and "UTF-8" not in str(first):
        return None, _why(first)
    try:
        return json.loads(data.decode("utf-8", "replace")), None
    except DECODE_ERRORS:
        return None, _why(first)


def convert(value: Any, type_: type[T]) -> tuple[T | None, str | None]:
    """(typed value, None), or (None, why) when ``value`` does not have the shape of ``type_``."""
    try:
        return msgspec.convert(value, type_), None
    except DECODE_ERRORS as exc:
        return None, _why(exc)


def decode_as(data: bytes, type_: Any) -> tuple[Any, str | None]:
    """JSON bytes straight into ``type_`` (one pass), or (None, why)."""
    return decode_with(decoder(type_), data)


def decoder(type_: Any) -> msgspec.json.Decoder[Any]:
    """A reusable decoder for ``type_`` (building one per line costs more than the decoding)."""
    got = _DECODERS.get(id(type_))
    if got is None or got[0] is not type_:
        got = _DECODERS[id(type_)] = (type_, msgspec.json.Decoder(type_))
    return got[1]


_DECODERS: dict[int, tuple[Any, msgspec.json.Decoder[Any]]] = {}


def decode_with(dec: msgspec.json.Decoder[Any], data: bytes) -> tuple[Any, str | None]:
    """JSON bytes through a typed decoder, or (None, why)."""
    try:
        return dec.decode(data), None
    except msgspec.DecodeError as exc:
        value, why = _decode_stdlib(data, exc)
        return (None, why) if why is not None else convert(value, cast(Any, dec.type))
    except DECODE_ERRORS as exc:
        return None, _why(exc)


def split_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line) of JSONL bytes, blank lines left out."""
    for number, line in enumerate(data.split(b"\n"), 1):
        if line.strip():
            yield number, line


_ENCODER = msgspec.json.Encoder()


def encode_line(record: Doc) -> bytes:
    """One JSONL line (with its newline) for a document."""
    return _ENCODER.encode(record) + b"\n"


#: documents as JSONL, each line with its newline: ``encode_lines((record,))`` is
#: ``encode_line(record)`` in one pass, without a call of ours around it (the workers' hot path)
encode_lines = _ENCODER.encode_lines


def convert_fields(value: Any, type_: type[T]) -> tuple[T | None, list[str]]:
    """``value`` as ``type_``, field by field: a field of the wrong type is left at its default
    and named, so one bad field does not lose the whole document. (None, [why]) when ``value`` is
    not an object or a required field is missing or bad.

    For documents whose fields stand alone (run.json, identity.json); not for ones whose fields
    must agree (summary.json: a dropped failure list would read as "nothing failed").
    """
    doc, why = convert(value, type_)
    if why is None:
        return doc, []
    if not isinstance(value, dict):
        return None, [why]
    kept: dict[str, Any] = {}
    whys: list[str] = []
    for field in msgspec.structs.fields(type_):  # type: ignore[arg-type]
        if field.encode_name not in value:
            continue
        _, bad = convert(value[field.encode_name], field.type)
        if bad is None:
            kept[field.encode_name] = value[field.encode_name]
        else:
            whys.append(f"{field.encode_name}: {bad}")
    doc, why = convert(kept, type_)
    if why is not None:
        return None, [*whys, why]
    return doc, whys
