"""Records of compute-sanitizer output: one error record, a stack frame, a reduced finding.

``SanitizerRecord`` is one error record of the text log or the XML file, in file order (a memory
access error, an uninitialized read, a race, a leak, ...). ``Finding`` is what
:func:`faulthunt.sanitizer.reduce_records` makes of many records that share a tool, kernel,
location and error kind. Both are frozen; ``to_json`` gives the documented JSON objects
(``faulthunt sanitize parse --json`` and ``sanitizer/sanitizer.json``, docs/sanitize.md).
"""

from __future__ import annotations

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Range3:
    """The smallest box holding every thread (or block) index seen, and how many distinct ones."""

    lo: Dim3
    hi: Dim3
    distinct: int

    def render(self) -> str:
        if self.lo == self.hi:
            return "({},{},{})".format(*self.lo)
        return "({},{},{})..({},{},{}) [{}]".format(*self.lo, *self.hi, self.distinct)

    def to_json(self) -> dict[str, Any]:
        return {"min": list(self.lo), "max": list(self.hi), "distinct": self.distinct}


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
