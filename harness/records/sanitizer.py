"""Records of compute-sanitizer output: one error record, a stack frame, a reduced finding.

``SanitizerRecord`` is one error record of the text log or the XML file, in file order (a memory
access error, an uninitialized read, a race, a leak, ...). ``Finding`` is what
:func:`faulthunt.sanitizer.reduce_records` makes of many records that share a tool, kernel,
location and error kind. Both are frozen; ``to_json`` gives the documented JSON objects
(``faulthunt sanitize parse --json`` and ``sanitizer/sanitizer.json``, docs/sanitize.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from json.encoder import encode_basestring_ascii as _json_str
from collections.abc import Callable
from typing import Any

#: kinds of error records, in the words of ``sanitize parse --json``
MEMORY_ACCESS = "memory_access"
UNINITIALIZED_READ = "uninitialized_read"
HARDWARE_EXCEPTION = "hardware_exception"
API_ERROR = "api_error"
LEAK = "leak"
RACE = "race"
SYNC_ERROR = "sync_error"
MALLOC_FREE = "malloc_free"
HOST_API_ACCESS = "host_api_access"
UNUSED_MEMORY = "unused_memory"
GUARDRAIL = "guardrail"

KINDS = (MEMORY_ACCESS, UNINITIALIZED_READ, HARDWARE_EXCEPTION, API_ERROR, LEAK, RACE, SYNC_ERROR,
         MALLOC_FREE, HOST_API_ACCESS, UNUSED_MEMORY, GUARDRAIL)

#: kinds that happen inside a kernel: the first of these in a log names the offending kernel.
#: API errors after a kernel fault (error 719 on every later call) are consequences, not causes.
DEVICE_KINDS = frozenset({MEMORY_ACCESS, UNINITIALIZED_READ, HARDWARE_EXCEPTION, RACE, SYNC_ERROR,
                          MALLOC_FREE, GUARDRAIL})

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")

Dim3 = tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class Frame:
    """One host or device stack frame, as compute-sanitizer printed it."""

    func: str | None
    file: str | None = None
    line: int | None = None
    module: str | None = None
    #: offset in the module (host) or in the function (device), as printed in ``[0x..]``/``+0x..``
    pc: int | None = None

    @property
    def is_python(self) -> bool:
        """A Python-level frame (numba-cuda and cuda.core launches carry them)."""
        return bool(self.file and self.file.endswith(".py"))

    def render(self) -> str:
        """One readable line: ``main in numba_oob.py:15`` or ``main [0x99d3] in faults``."""
        text = self.func or "??"
        if self.file:
            text += f" in {self.file}" + (f":{self.line}" if self.line is not None else "")
        if self.pc is not None and not self.file:
            text += f" [0x{self.pc:x}]"
        if self.module and not self.file:
            text += f" in {self.module}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {"func": self.func, "file": self.file, "line": self.line, "module": self.module,
                "pc": self.pc}

    def json_text(self) -> str:
        """``json.dumps(self.to_json())``, remembered per frame (frames repeat in every record)."""
        hit = _FRAME_JSON.get(id(self))
        if hit is not None and hit[0] is self:
            return hit[1]
        text = (f'{{"func": {_js(self.func)}, "file": {_js(self.file)}, "line": {_ji(self.line)}, '
                f'"module": {_js(self.module)}, "pc": {_ji(self.pc)}}}')
        if len(text) > _JSON_KEEP:
            return text
        if len(_FRAME_JSON) >= 4096:
            _FRAME_JSON.clear()
        _FRAME_JSON[id(self)] = (self, text)  # the frame is kept alive, so its id is not reused
        return text


_FRAME_JSON: dict[int, tuple[Frame, str]] = {}
#: remembered JSON texts are at most this long (a hostile log's 64 KB frames are not kept)
_JSON_KEEP = 16384


def _js(value: str | None) -> str:
    return "null" if value is None else _json_str(value)


def _ji(value: int | None) -> str:
    return "null" if value is None else int.__repr__(value)


def _jframes(frames: tuple[Frame, ...]) -> str:
    """The JSON list of a stack, remembered per tuple (parsers share one tuple per distinct stack)."""
    if not frames:
        return "[]"
    hit = _STACK_JSON.get(id(frames))
    if hit is not None and hit[0] is frames:
        return hit[1]
    text = "[" + ", ".join([f.json_text() for f in frames]) + "]"
    if len(text) > _JSON_KEEP:
        return text
    if len(_STACK_JSON) >= 4096:
        _STACK_JSON.clear()
    _STACK_JSON[id(frames)] = (frames, text)
    return text


_STACK_JSON: dict[int, tuple[tuple[Frame, ...], str]] = {}


@dataclasses.dataclass(frozen=True)
class SanitizerRecord:
    """One error record of compute-sanitizer (or legacy cuda-memcheck) output."""

    kind: str
    #: the record's first line without the prefix (for XML, the ``<what><text>``)
    message: str
    tool: str | None = None
    #: the function named on the ``at`` line (where the fault happened; may be a device function)
    function: str | None = None
    #: the kernel: the outermost device frame when there are device frames, else ``function``
    kernel: str | None = None
    file: str | None = None
    line: int | None = None
    #: offset inside ``function`` (``+0x120``) or the PC (legacy ``at 0x60 in ...``)
    pc: int | None = None
    #: read | write | atomic | ? (memory errors); Read/Write pairs of races are in ``race_*``
    access: str | None = None
    #: __global__ | __shared__ | __local__
    space: str | None = None
    size: int | None = None
    #: the accessed address (memory errors), the leaked address (leaks), the shared offset (hazards)
    address: int | None = None
    #: the rest of the address line: "out of bounds", "misaligned", "potentially accessed before ..."
    problem: str | None = None
    thread: Dim3 | None = None
    block: Dim3 | None = None
    #: nearest allocation (memcheck 2021.3+): relation after|before|inside, distance in bytes
    alloc_base: int | None = None
    alloc_size: int | None = None
    alloc_relation: str | None = None
    alloc_distance: int | None = None
    #: API errors: the error name, its number and the API called
    api: str | None = None
    error: str | None = None
    error_code: int | None = None
    #: races: the severity (Error/Warning), hazard type (RAW/WAR/WAW), the other access, hazard count
    severity: str | None = None
    hazard: str | None = None
    race_other: str | None = None
    hazards: int | None = None
    device_frames: tuple[Frame, ...] = ()
    host_frames: tuple[Frame, ...] = ()
    #: "kernel launch time", "error", "allocation time"
    host_stack_at: str | None = None
    #: record lines the parser did not recognize (kept, so nothing printed is lost)
    extra: tuple[str, ...] = ()
    #: the record's lines as printed (prefix removed); empty for XML records
    lines: tuple[str, ...] = ()
    #: 0-based line number of the record's first line in its input (XML: record index)
    index: int = 0

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> SanitizerRecord:
        """A record from parser-built fields (names of this class; absent ones take their default).

        The record takes ``fields`` as its own: the caller must not change the dict afterwards.
        The parsers make one record per sanitizer error, 100,000 of them for a long log; the frozen
        dataclass ``__init__`` sets its 33 fields one ``object.__setattr__`` at a time (6.7 us a
        record on the 2-core machine), this takes them at once (0.5 us). Still frozen afterwards.
        """
        rec = object.__new__(cls)
        object.__setattr__(rec, "__dict__", fields)
        return rec

    def to_json(self) -> dict[str, Any]:
        """The ``faulthunt sanitize parse --json`` object (docs/sanitize.md)."""
        return {
            "tool": self.tool,
            "kind": self.kind,
            "kernel": self.kernel,
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "access": self.access,
            "space": self.space,
            "size": self.size,
            "address": self.address,
            "problem": self.problem,
            "thread": list(self.thread) if self.thread is not None else None,
            "block": list(self.block) if self.block is not None else None,
            "message": self.message,
            "nearest_allocation": (
                None if self.alloc_base is None else
                {"base": self.alloc_base, "size": self.alloc_size, "relation": self.alloc_relation,
                 "distance": self.alloc_distance}),
            "api": self.api,
            "error": self.error,
            "error_code": self.error_code,
            "severity": self.severity,
            "hazard": self.hazard,
            "race_other": self.race_other,
            "hazards": self.hazards,
            "device_frames": [f.to_json() for f in self.device_frames],
            "host_frames": [f.to_json() for f in self.host_frames],
            "host_stack_at": self.host_stack_at,
            "extra": list(self.extra),
            "index": self.index,
        }

    def json_text(self) -> str:
        """``json.dumps(self.to_json())``, the same text, built several times faster.

        ``sanitize parse --json`` prints one per record. Records of one error site share all their
        fields but the address, thread, block, nearest allocation and line number, so the text
        around those is built once per distinct site and remembered. Where the compiled writer
        (``_record_json.c``, built at install) is present it writes the text in one step, and this
        Python route writes only the records it leaves (values of types the parsers never store).
        """
        if _native_json is not None:
            text = _native_json(self.__dict__, _jframes, _json_str)
            if text is not None:
                return text
        return self._json_text_py()

    def _json_text_py(self) -> str:
        """json_text's Python route."""
        k1 = (self.tool, self.kind, self.kernel, self.function, self.file, self.line, self.access,
              self.space, self.size, self.problem)
        seg1 = _SEG1.get(k1)
        if seg1 is None:
            seg1 = _seg1(self)
            if len(seg1[0]) <= _JSON_KEEP:
                if len(_SEG1) > 4096:
                    _SEG1.clear()
                _SEG1[k1] = seg1
        df, hf = self.device_frames, self.host_frames
        k2 = (self.message, self.api, self.error, self.error_code, self.severity, self.hazard,
              self.race_other, self.hazards, id(df), id(hf), self.host_stack_at, self.extra)
        seg2 = _SEG2.get(k2)
        if seg2 is None or seg2[0] is not df or seg2[1] is not hf:
            seg2 = (df, hf) + _seg2(self)
            if len(seg2[3]) <= _JSON_KEEP:
                if len(_SEG2) > 4096:
                    _SEG2.clear()
                _SEG2[k2] = seg2
        ab, ad, t, b = self.alloc_base, self.address, self.thread, self.block
        # (ints format as json.dumps writes them: int.__repr__)
        near = "null" if ab is None else (
            f'{{"base": {ab}, "size": {_ji(self.alloc_size)}, "relation": {_js(self.alloc_relation)}, '
            f'"distance": {_ji(self.alloc_distance)}}}')
        return (f"{seg1[0]}{'null' if ad is None else ad}{seg1[1]}"
                f"{'null' if t is None else '[%d, %d, %d]' % t}, \"block\": "
                f"{'null' if b is None else '[%d, %d, %d]' % b}{seg2[2]}{near}{seg2[3]}{self.index}}}")


#: set (to anything but empty) to run the sanitizer parser's Python routes only (tests; a suspect build)
PURE_ENV = "FAULTHUNT_SANITIZER_PURE"


def _load_native_json() -> Any:
    """The compiled writer (``_record_json.c``, built at install), or None."""
    if os.environ.get(PURE_ENV):
        return None
    try:
        return importlib.import_module("faulthunt.records._record_json")
    except ImportError:
        return None


_NATIVE = _load_native_json()
#: SanitizerRecord.json_text compiled, or None (tests set it to None to run the Python route)
_native_json: Callable[[dict[str, Any], Any, Any], str | None] | None = _NATIVE and _NATIVE.record_json
#: json_lines compiled, or None
_native_json_list: Callable[[list[SanitizerRecord], Any, Any, Any], list[str]] | None = (
    _NATIVE and _NATIVE.records_json)


def json_lines(records: list[SanitizerRecord]) -> list[str]:
    """``[r.json_text() for r in records]``: ``sanitize parse --json``'s lines (compiled where built)."""
    if _native_json_list is None or _native_json is None:
        return [r.json_text() for r in records]
    return _native_json_list(records, _jframes, _json_str, SanitizerRecord._json_text_py)

#: the text of json_text around its per-record values, by the fields it is made of
_SEG1: dict[tuple[Any, ...], tuple[str, str]] = {}
_SEG2: dict[tuple[Any, ...], tuple[tuple[Frame, ...], tuple[Frame, ...], str, str]] = {}


def _seg1(r: SanitizerRecord) -> tuple[str, str]:
    return (f'{{"tool": {_js(r.tool)}, "kind": {_js(r.kind)}, "kernel": {_js(r.kernel)}, '
            f'"function": {_js(r.function)}, "file": {_js(r.file)}, "line": {_ji(r.line)}, '
            f'"access": {_js(r.access)}, "space": {_js(r.space)}, "size": {_ji(r.size)}, "address": ',
            f', "problem": {_js(r.problem)}, "thread": ')


def _seg2(r: SanitizerRecord) -> tuple[str, str]:
    extra = "[" + ", ".join([_json_str(x) for x in r.extra]) + "]" if r.extra else "[]"
    return (f', "message": {_js(r.message)}, "nearest_allocation": ',
            f', "api": {_js(r.api)}, "error": {_js(r.error)}, "error_code": {_ji(r.error_code)}, '
            f'"severity": {_js(r.severity)}, "hazard": {_js(r.hazard)}, '
            f'"race_other": {_js(r.race_other)}, "hazards": {_ji(r.hazards)}, '
            f'"device_frames": {_jframes(r.device_frames)}, "host_frames": {_jframes(r.host_frames)}, '
            f'"host_stack_at": {_js(r.host_stack_at)}, "extra": {extra}, "index": ')


@dataclasses.dataclass(frozen=True)
class Range3:
    """The smallest box holding every thread (or block) index seen, and how many distinct ones."""

    lo: Dim3
    hi: Dim3
    distinct: int
    #: False when ``distinct`` is an estimate: past 65,536 distinct points a finding counts them in
    #: fixed memory (a few percent off) rather than holding every one
    exact: bool = True

    def render(self) -> str:
        if self.lo == self.hi:
            return "({},{},{})".format(*self.lo)
        count = str(self.distinct) if self.exact else f"~{self.distinct}"
        return "({},{},{})..({},{},{}) [{}]".format(*self.lo, *self.hi, count)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"min": list(self.lo), "max": list(self.hi), "distinct": self.distinct}
        if not self.exact:
            out["estimated"] = True
        return out


@dataclasses.dataclass(frozen=True)
class Finding:
    """Records of one tool, kernel, location and error kind, reduced to one line of evidence."""

    tool: str | None
    kind: str
    #: the error kind in words: "Invalid __global__ write (out of bounds)", "RAW hazard", ...
    error: str
    #: readable kernel name (``max_reduce_off_by_one``, numba ``__main__.max_reduce``)
    kernel: str | None
    #: the kernel as printed, demangled in full
    kernel_full: str | None
    function: str | None
    file: str | None
    line: int | None
    access: str | None
    size: int | None
    #: [lowest, highest] byte touched (inclusive) over all records; None without addresses
    address_range: tuple[int, int] | None
    count: int
    threads: Range3 | None
    blocks: Range3 | None
    #: the first record of the group, whole
    example: SanitizerRecord
    host_stack: tuple[str, ...]
    #: the test the records came from, when the rerun knows it
    nodeid: str | None = None
    #: position of the group's first record in the input (the headline is the earliest device error)
    first_index: int = 0

    @property
    def location(self) -> str:
        if self.file:
            return f"{self.file}:{self.line}" if self.line is not None else self.file
        if self.example.pc is not None:
            return f"{self.function or '?'}+0x{self.example.pc:x}"
        return "?"

    def to_json(self) -> dict[str, Any]:
        """One entry of ``sanitizer.json``'s ``findings`` (docs/sanitize.md)."""
        ex = self.example
        return {
            "tool": self.tool,
            "kind": self.kind,
            "error": self.error,
            "kernel": self.kernel,
            "kernel_full": self.kernel_full,
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "access": self.access,
            "size": self.size,
            "address_range": list(self.address_range) if self.address_range else None,
            "nearest_allocation": (
                None if ex.alloc_base is None else
                {"base": ex.alloc_base, "size": ex.alloc_size, "relation": ex.alloc_relation,
                 "distance": ex.alloc_distance}),
            "count": self.count,
            "threads": self.threads.to_json() if self.threads else None,
            "blocks": self.blocks.to_json() if self.blocks else None,
            "example": ex.to_json() | {"lines": list(ex.lines)},
            "host_stack": list(self.host_stack),
            "nodeid": self.nodeid,
            "first_index": self.first_index,
        }
