"""Parse compute-sanitizer (and legacy cuda-memcheck) text output into records. Pure: text in, records out.

Every sanitizer line starts with a prefix (``=========`` unless ``--prefix`` changed it) and a
space; records are separated by a line holding only the prefix. A record's first line sits right
after the prefix, its details are indented. Application output is interleaved *without* the
prefix and is skipped. A real record, from the H200 (compute-sanitizer 2025.3.1,
``tests/data/h200/san_memcheck_oob1.txt``)::

    ========= Invalid __global__ write of size 4 bytes
    =========     at max_reduce_off_by_one(const float *, float *, int)+0x120 in faults.cu:18
    =========     by thread (232,0,0) in block (3,0,0)
    =========     Access to 0x7f592a801fa0 is out of bounds
    =========     and is 1 bytes after the nearest allocation at 0x7f592a801000 of size 4,000 bytes
    =========     Saved host backtrace up to driver entry point at kernel launch time
    =========         Host Frame: main [0x99d3] in faults
    =========

The parser streams: :class:`TextLogParser` takes lines one at a time and hands each record on as
soon as its last line is read, so a reader of a 1 GB log holds one record, not the log
(:func:`iter_lines` turns a byte stream into lines with bounded memory). Lines repeat a great deal
(the ``at`` line, the host frames, the separators of thousands of records), so each distinct short
line is classified once and remembered. Every expression here is linear in its input (no lazy group
followed by an optional tail: issue 16); junk, binary noise and truncated logs are parsed as far as
they go, and nothing here raises on any input text (hypothesis tests hold it to that).
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import importlib
import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from faulthunt.records.sanitizer import (
    API_ERROR, GUARDRAIL, HARDWARE_EXCEPTION, HOST_API_ACCESS, LEAK, MALLOC_FREE, MEMORY_ACCESS, PURE_ENV,
    RACE, SYNC_ERROR, UNINITIALIZED_READ, UNUSED_MEMORY, Frame, SanitizerRecord,
)
from faulthunt.sanitizer.demangle import clone_parent
from faulthunt.sanitizer.frames import MAX_DIGITS
from faulthunt.sanitizer.frames import hexnum as _hex
from faulthunt.sanitizer.frames import num as _num
from faulthunt.sanitizer.frames import parse_device_frame, parse_host_frame, parse_location

DEFAULT_PREFIX = "========="

#: bounds that keep memory independent of the input's size (a 1 GB file of one line, a record of a
#: million lines): longer lines are cut (the longest real ones, C++ template kernel names, are a
#: few KB), further lines of a record are counted, not kept
MAX_LINE = 1 << 16
MAX_RECORD_LINES = 1000
MAX_NOTICES = 1000
#: lines classified once and remembered (only short ones; cleared when full)
_CACHE_MAX = 1 << 14
_CACHE_LINE = 512
#: records whose tool only the whole log tells (hardware exceptions) wait for it, up to this many
#: records or characters
_PENDING_MAX = 256
_PENDING_CHARS = 1 << 24
#: remembered objects (stacks, kernel names) larger than this are not remembered
_CACHE_CHARS = 4096

#: a GitHub Actions style timestamp that CI logs put before every line
_CI_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z? ")
_BANNER_WORDS = ("COMPUTE-SANITIZER", "CUDA-MEMCHECK")

_DIM = r"\(\s*(\d+),\s*(\d+),\s*(\d+)\s*\)"
_NUM = r"\d[\d,]*"
_HEX = r"0x([0-9a-fA-F]+)"

# --- record heads (the line after the prefix, not indented) -------------------------------------
_H_ACCESS = re.compile(
    rf"^(?P<pot>Potential )?[Ii]nvalid (?P<space>__\w+__) (?P<dir>read|write|atomic|\?)"
    rf"(?: access)? of size (?P<size>{_NUM})(?: bytes?)?")
_H_UNINIT = re.compile(rf"^Uninitialized (?P<space>__\w+__) memory read of size (?P<size>{_NUM})")
_H_MALLOC = re.compile(r"^Malloc/Free error encountered\s*:")
_H_LEAK = re.compile(rf"^Leaked (?P<size>{_NUM}) bytes at {_HEX}(?P<heap> on the device heap)?")
_H_LEAK_OBJ = re.compile(rf"^Leaked an? (?P<what>\w+) with handle {_HEX}")
_H_API = re.compile(
    r'^Program hit (?P<err>\w+) \(error (?P<code>\d+)\) due to "(?P<msg>.*)" on CUDA API call to '
    r"(?P<api>[\w:]+)")
_H_API_OLD = re.compile(
    r"^Program hit (?P<msg>.+?) \(error (?P<code>\d+)\) on CUDA API call to (?P<api>[\w:]+)")
_H_HOSTAPI = re.compile(
    rf"^Host API memory access error at host access to {_HEX}(?: of size (?P<size>{_NUM}) bytes?)?")
_H_RACE = re.compile(r"^(?P<sev>\w+):\s*Race reported between (?P<a1>Read|Write) access at ")
_H_HAZARD = re.compile(
    rf"^(?P<sev>\w+):\s*(?P<wlp>\(Warp Level Programming\)\s*)?Potential (?P<hz>RAW|WAR|WAW) hazard "
    rf"detected at (?P<space>__\w+__) {_HEX} in block {_DIM}")
_H_WGMMA = re.compile(r"^Warpgroup MMA sequence error detected")
_H_DEADLOCK_MID = re.compile(rf" called by threads starting at {_DIM} in block {_DIM}")
_H_UNUSED = re.compile(
    rf"^Unused (?P<space>__\w+__) memory in allocation(?: {_HEX})? of size (?P<size>{_NUM}) bytes?")
#: imprecise errors: the hardware exception's name is the whole first line (names from the 2026.4
#: binary's strings and from cuda-memcheck logs, compared lower-case)
HW_EXCEPTIONS = (
    "lane illegal address", "lane user stack overflow", "user stack overflow",
    "hardware stack overflow", "hardware warp stack overflow", "illegal instruction",
    "out-of-range shared or local address", "misaligned shared or local address",
    "invalid address space", "device illegal address", "lane misaligned address", "warp assert",
    "lane syscall error", "warp illegal address", "warp misaligned address", "illegal address",
    "invalid pc", "warp out-of-range address", "misaligned pc", "invalid managed memory access",
)

# --- summaries and notices --------------------------------------------------------------------
_S_NOT_PRINTED = re.compile(rf"^ERROR SUMMARY: (?P<n>{_NUM}) errors? were not printed")
_S_ERRORS = re.compile(rf"^ERROR SUMMARY: (?P<n>{_NUM}) errors?")
_S_LEAKS = re.compile(rf"^LEAK SUMMARY: (?P<bytes>{_NUM}) bytes leaked in (?P<n>{_NUM}) allocations?")
_S_RACES = re.compile(
    rf"^RACECHECK SUMMARY: (?P<n>{_NUM}) hazards? displayed \((?P<e>{_NUM}) errors?, (?P<w>{_NUM}) warnings?\)")
_S_APP_FAILED = "Target application returned an error"

# --- details (indented lines inside a record) ----------------------------------------------------
_D_WHO = re.compile(rf"^by thread {_DIM} in block {_DIM}")
#: the same line as compute-sanitizer prints it (no spaces in the parentheses), read in one step
_D_WHO_PLAIN = re.compile(r"by thread \((\d{1,20}),(\d{1,20}),(\d{1,20})\) "
                          r"in block \((\d{1,20}),(\d{1,20}),(\d{1,20})\)")
_D_ADDR = re.compile(rf"^(?:Address|Access at|Access to) {_HEX}")
_D_NEAR = re.compile(
    rf"^and is (?:(?P<dist>{_NUM}) bytes? (?P<rel>after|before)|(?P<inside>inside)) the nearest "
    rf"allocation at {_HEX} of size (?P<asz>{_NUM}) bytes?")
_D_RACE_AND = re.compile(r"^and (?P<a2>Read|Write) access at ")
_D_HAZARD_COUNT = re.compile(rf"\[({_NUM}) hazards?\]")
_D_HAZARD_THREAD = re.compile(rf"^(?P<dir>Read|Write) Thread {_DIM} at ")
_D_SAVED = "Saved host backtrace up to driver entry point"
_D_UNINIT_API = re.compile(rf"^Uninitialized access at {_HEX} on access by ")

# The old expressions ended in ``(?P<x>.+?)\.?\s*$``; lines reach these helpers with their trailing
# whitespace already stripped, and the helpers take the same text without backtracking.


def _drop_period(text: str) -> str:
    """What ``(.+?)\\.?\\s*$`` captures of a non-empty text without trailing whitespace."""
    return text[:-1] if len(text) >= 2 and text.endswith(".") else text


def _dim(g: tuple[Any, ...], at: int) -> tuple[int, int, int] | None:
    """Three ``\\d+`` groups as ints; None when one is absurdly long (int() would raise)."""
    x, y, z = g[at], g[at + 1], g[at + 2]
    small = _SMALL.get
    xi, yi, zi = small(x), small(y), small(z)
    if xi is not None and yi is not None and zi is not None:
        return (xi, yi, zi)
    if len(x) > MAX_DIGITS or len(y) > MAX_DIGITS or len(z) > MAX_DIGITS:
        return None
    return (int(x), int(y), int(z))


#: small numbers by their canonical text (a lookup costs a fifth of int() of a str)
_SMALL = {str(i): i for i in range(4096)}


def _banner_prefix(line: str) -> str | None:
    """The prefix of a banner line ``<prefix> COMPUTE-SANITIZER``, else None."""
    s = line.strip()
    for word in _BANNER_WORDS:
        if s.endswith(" " + word):
            prefix = s[: -len(word) - 1]
            return prefix if prefix else None
    return None


def detect_prefix(text: str) -> str:
    """The line prefix of a log: from its banner (``<prefix> COMPUTE-SANITIZER``), else the default."""
    return _detect_prefix(text.splitlines()[:2000])


def _detect_prefix(lines: Iterable[str]) -> str:
    for line in lines:
        if "COMPUTE-SANITIZER" not in line and "CUDA-MEMCHECK" not in line:
            continue
        found = _banner_prefix(_CI_STAMP.sub("", line))
        if found is not None:
            return found
    return DEFAULT_PREFIX


@dataclasses.dataclass(frozen=True)
class ParsedLog:
    """Everything a text log says: its records plus the banner, summaries and tool notices."""

    records: tuple[SanitizerRecord, ...]
    prefix: str
    #: banners seen: one per sanitizer session in the text
    banners: int = 0
    legacy: bool = False
    #: the sum of ``ERROR SUMMARY: N errors`` lines (None if there was none: a truncated log)
    error_summary: int | None = None
    #: errors counted but not printed (``--print-limit``)
    not_printed: int = 0
    leak_summary: tuple[int, int] | None = None
    #: (hazards displayed, errors, warnings)
    racecheck_summary: tuple[int, int, int] | None = None
    app_failed: bool = False
    #: the first MAX_NOTICES tool notices
    notices: tuple[str, ...] = ()
    #: the last record was cut off (no separator and no summary after it)
    truncated: bool = False
    tool: str | None = None
    #: records read (equal to ``len(records)`` unless the records were streamed elsewhere)
    count: int = -1

    def to_json(self) -> dict[str, Any]:
        return {"records": len(self.records) if self.count < 0 else self.count, "prefix": self.prefix,
                "banners": self.banners, "legacy": self.legacy, "error_summary": self.error_summary,
                "not_printed": self.not_printed,
                "leak_summary": list(self.leak_summary) if self.leak_summary else None,
                "racecheck_summary": list(self.racecheck_summary) if self.racecheck_summary else None,
                "app_failed": self.app_failed, "notices": list(self.notices),
                "truncated": self.truncated, "tool": self.tool}


#: which tool prints each kind (None: more than one tool can)
_KIND_TOOL = {
    UNINITIALIZED_READ: "initcheck", UNUSED_MEMORY: "initcheck", RACE: "racecheck",
    SYNC_ERROR: "synccheck", MEMORY_ACCESS: "memcheck", LEAK: "memcheck", MALLOC_FREE: "memcheck",
    GUARDRAIL: "memcheck",
    # API error checking is memcheck's (the other tools do not report them)
    API_ERROR: "memcheck", HARDWARE_EXCEPTION: None, HOST_API_ACCESS: None,
}


def _location_fields(loc: str) -> dict[str, Any]:
    """The location's four fields (remembered for short texts: racecheck prints one location
    after thousands of different thread indices)."""
    hit = _LOCATIONS.get(loc)
    if hit is None:
        func, file, line, pc = parse_location(loc)
        hit = {"function": func, "file": file, "line": line, "pc": pc}
        if len(loc) <= _CACHE_LINE:
            if len(_LOCATIONS) >= _CACHE_MAX:
                _LOCATIONS.clear()
            _LOCATIONS[loc] = hit
    return hit.copy()


_LOCATIONS: dict[str, dict[str, Any]] = {}


#: a hardware exception's name, alone or followed by a space or a colon (lower-case)
_HW_NAME = re.compile("(?:" + "|".join(re.escape(n) for n in HW_EXCEPTIONS) + r")(?:[ :]|\Z)")
_HW_FIRST_WORDS = tuple(sorted({n.split(" ")[0] for n in HW_EXCEPTIONS}))


def head_fields(body: str) -> tuple[str, dict[str, Any]] | None:
    """``(kind, fields)`` of the record a head line starts, or None when it starts none."""
    # the expression only where a name's first word begins the line (the same answer: lower() of
    # the first 16 characters begins as lower() of the whole line does, and no first word is longer)
    if body[:16].lower().startswith(_HW_FIRST_WORDS) and _HW_NAME.match(body.lower().rstrip(". ")):
        return HARDWARE_EXCEPTION, {}
    c = body[:1]
    if c in ("I", "i", "P"):
        m = _H_ACCESS.match(body)
        if m:
            return MEMORY_ACCESS, {"space": m.group("space"), "access": m.group("dir"),
                                   "size": _num(m.group("size")),
                                   "tool_hint": "racecheck" if m.group("pot") else None}
        if body.startswith("Invalid "):
            return MEMORY_ACCESS, {}
        if body.startswith("Program hit"):
            m = _H_API.match(body) or _H_API_OLD.match(body)
            if m:
                err = m.group("err") if "err" in m.re.groupindex else m.group("msg")
                return API_ERROR, {"error": err, "error_code": _num(m.group("code")), "api": m.group("api")}
            return API_ERROR, {}
    if c == "U":
        m = _H_UNINIT.match(body)
        if m:
            return UNINITIALIZED_READ, {"space": m.group("space"), "access": "read",
                                        "size": _num(m.group("size"))}
        m = _H_UNUSED.match(body)
        if m:
            return UNUSED_MEMORY, {"space": m.group("space"), "address": _hex(m.group(2)),
                                   "size": _num(m.group("size"))}
    if c == "L":
        m = _H_LEAK.match(body)
        if m:
            return LEAK, {"size": _num(m.group("size")), "address": _hex(m.group(2)),
                          "problem": "on the device heap" if m.group("heap") else None}
        m = _H_LEAK_OBJ.match(body)
        if m:
            return LEAK, {"address": _hex(m.group(2)), "problem": m.group("what")}
    if c == "M":
        m = _H_MALLOC.match(body)
        if m:
            return MALLOC_FREE, {"problem": body[m.end():].strip() or None}
    if c == "H":
        m = _H_HOSTAPI.match(body)
        if m:
            return HOST_API_ACCESS, {"address": _hex(m.group(1)), "size": _num(m.group("size"))}
    if c == "B" and body.startswith("Barrier error detected"):
        rest = body[len("Barrier error detected"):]
        rest = (rest[1:] if rest.startswith(".") else rest).lstrip()
        return SYNC_ERROR, {"problem": (rest[:-1] if rest.endswith(".") else rest) or None}
    if c == "W" and _H_WGMMA.match(body):
        return SYNC_ERROR, {}
    if c == "D" and body.startswith("Deadlock detected in "):
        return _deadlock(body)
    if c == "T" and body.startswith("Tensor Memory "):
        return GUARDRAIL, {}
    if ":" in body[:12]:
        return _race_head(body)
    return None


def _deadlock(body: str) -> tuple[str, dict[str, Any]] | None:
    start = len("Deadlock detected in ")
    m = _H_DEADLOCK_MID.search(body, start + 1)
    if m is None:
        return None
    thread, block = _dim(m.groups(), 0), _dim(m.groups(), 3)
    if thread is None or block is None:
        return None
    fields: dict[str, Any] = {"problem": "deadlock in " + body[start:m.start()], "thread": thread,
                              "block": block, "tool_hint": "racecheck"}
    # the location is `` at LOC`` after the last comma, LOC not empty
    tail = body[m.end():]
    at = tail.find(" at ", max(0, tail.rfind(",") - 3))
    if at >= 0 and len(tail) > at + 4:
        fields.update(_location_fields(tail[at + 4:]))
    return SYNC_ERROR, fields


def _race_head(body: str) -> tuple[str, dict[str, Any]] | None:
    m = _H_RACE.match(body)
    if m and len(body) > m.end():
        fields = {"severity": m.group("sev").capitalize(), "access": m.group("a1").lower(),
                  "space": "__shared__"}
        return RACE, fields | _location_fields(body[m.end():])
    m = _H_HAZARD.match(body)
    if m:
        block = _dim(m.groups(), 5)
        if block is not None:
            return RACE, {"severity": m.group("sev").capitalize(), "hazard": m.group("hz"),
                          "space": m.group("space"), "address": _hex(m.groups()[4]), "block": block}
    return None


# --- detail lines: what each one says, as a pure function of its text ----------------------------

#: codes of detail lines (apart from the line classes below: a detail line's class is its code)
(D_EXTRA, D_AT, D_WHO, D_ADDR, D_NEAR, D_RACE_AND, D_HOST, D_DEVICE, D_SAVED, D_IN, D_HAZARD_THREAD,
 D_UNINIT) = range(100, 112)


def detail_of(body: str) -> tuple[Any, ...]:
    """``(code, payload...)`` of one indented line; ``(D_EXTRA,)`` for lines not understood."""
    c = body[:1]
    if c == "a" and body.startswith("at "):
        return (D_AT, _location_fields(body[3:]))
    if c == "b" and body.startswith("by thread"):
        m = _D_WHO_PLAIN.match(body)
        if m:
            v = tuple(map(int, m.groups()))
            return (D_WHO, v[:3], v[3:])
        m = _D_WHO.match(body)
        if m:
            thread, block = _dim(m.groups(), 0), _dim(m.groups(), 3)
            if thread is not None and block is not None:
                return (D_WHO, thread, block)
        return (D_EXTRA,)
    if c == "A" and body.startswith(("Address ", "Access ")):
        return _address(body)
    if c == "a" and body.startswith("and "):
        return _and_line(body)
    if c == "H" and body.startswith("Host Frame:"):
        return (D_HOST, parse_host_frame(body[len("Host Frame:"):]))
    if c == "D" and body.startswith("Device Frame:"):
        return (D_DEVICE, parse_device_frame(body[len("Device Frame:"):]))
    if c == "S" and body.startswith("Saved host backtrace"):
        rest = body[len(_D_SAVED):] if body.startswith(_D_SAVED) else ""
        return (D_SAVED, _drop_period(rest[4:]) if rest.startswith(" at ") and len(rest) > 4 else None)
    if c == "i" and body.startswith("in "):
        return (D_IN, body[3:].strip())
    if c in ("R", "W") and " Thread (" in body:
        m = _D_HAZARD_THREAD.match(body)
        thread = _dim(m.groups(), 1) if m else None
        if m is None or thread is None or len(body) == m.end():
            return (D_EXTRA,)
        loc = body[m.end():]
        g = m.groups()
        return (D_HAZARD_THREAD, m.group("dir").lower(), thread, _location_fields(loc),
                f"{g[0]} Thread ({g[1]},{g[2]},{g[3]}) at {loc}")
    if c == "U" and body.startswith("Uninitialized access at"):
        m = _D_UNINIT_API.match(body)
        if m is None or len(body) == m.end():
            return (D_UNINIT, None)
        return (D_UNINIT, (_hex(m.group(1)), f"uninitialized access by {body[m.end():]}"))
    return (D_EXTRA,)


def _address(body: str) -> tuple[Any, ...]:
    """``Access to 0x.. is out of bounds`` (also ``Address 0x..``, ``Access at 0x.. is misaligned``)."""
    m = _D_ADDR.match(body)
    if m is None:
        return (D_EXTRA,)
    rest = body[m.end():]
    if not rest or rest == ".":
        return (D_ADDR, _hex(m.group(1)), None)
    if not rest[0].isspace():
        return (D_EXTRA,)
    rest = rest.lstrip()
    if rest.startswith("is") and rest[2:3].isspace():
        rest = rest[2:].lstrip()
    return (D_ADDR, _hex(m.group(1)), _drop_period(rest))


def _and_line(body: str) -> tuple[Any, ...]:
    """``and is N bytes after the nearest allocation ...`` or a race's ``and Write access at ...``."""
    m = _D_NEAR.match(body)
    if m:
        rel = "inside" if m.group("inside") else m.group("rel")
        dist = None if m.group("inside") else _num(m.group("dist"))
        return (D_NEAR, _hex(m.group(4)), _num(m.group("asz")), rel, dist)
    m = _D_RACE_AND.match(body)
    if m is None or len(body) == m.end():
        return (D_EXTRA,)
    loc, hazards = body[m.end():], None
    # an optional ``[N hazards]`` at the very end, after at least one space
    j = loc.rfind("[")
    if j > 0 and loc[j - 1].isspace():
        count = _D_HAZARD_COUNT.fullmatch(loc, j)
        if count is not None:
            keep = max(1, len(loc[:j].rstrip()))
            if keep < j:
                loc, hazards = loc[:keep], _num(count.group(1))
    return (D_RACE_AND, f"{m.group('a2')} access at {loc}", hazards)


# --- line classes: what a whole log line is --------------------------------------------------------

(L_SKIP, L_SEP, L_HEAD, L_BANNER, L_ERRORS, L_NOT_PRINTED, L_LEAKS, L_RACES, L_APP_FAILED,
 L_NOTICE) = range(10)
_SKIP = (L_SKIP,)
_SEP = (L_SEP,)


def _head_level(body: str, may_start: bool) -> tuple[Any, ...]:
    """The class of a line at the record-head level: a record head, banner, summary or notice."""
    if may_start:
        head = head_fields(body)
        if head is not None:
            kind, fields = head
            hint = fields.pop("tool_hint", None) or _KIND_TOOL.get(kind)
            return (L_HEAD, body, {"kind": kind, "message": body, **fields}, hint)
    if body in _BANNER_WORDS:
        return (L_BANNER, body == "CUDA-MEMCHECK")
    if body.startswith("ERROR SUMMARY:"):
        m = _S_NOT_PRINTED.match(body)
        if m:
            return (L_NOT_PRINTED, _num(m.group("n")) or 0)
        m = _S_ERRORS.match(body)
        if m:
            return (L_ERRORS, _num(m.group("n")) or 0)
    if body.startswith("LEAK SUMMARY:"):
        m = _S_LEAKS.match(body)
        if m:
            return (L_LEAKS, _num(m.group("bytes")) or 0, _num(m.group("n")) or 0)
    if body.startswith("RACECHECK SUMMARY:"):
        m = _S_RACES.match(body)
        if m:
            return (L_RACES, _num(m.group("n")) or 0, _num(m.group("e")) or 0, _num(m.group("w")) or 0)
    if body == _S_APP_FAILED:
        return (L_APP_FAILED,)
    return (L_NOTICE, body)


def _pytest_banner_tail(rest: str) -> bool:
    """pytest's ``===== 1 failed in 2s =====``: a line ending in a space and three or more ``=``."""
    s = rest.rstrip()
    t = s.rstrip("=")
    return len(s) - len(t) >= 3 and t.endswith(" ")


def _close(f: dict[str, Any], lines: list[str], host: list[Frame], device: list[Frame],
           extra: list[str], dropped: int) -> dict[str, Any]:
    """The last fields of a record whose lines have all been read."""
    if dropped:
        extra.append(f"[faulthunt: {dropped} further line(s) of this record not kept]")
    kernel = None
    if device:
        for frame in reversed(device):
            if frame.func and frame.func != "NVIDIA Internal":
                kernel = frame.func
                break
        if f.get("file") is None:
            # the fault is in code without line info (a system header, cudart): the first device
            # frame that has a file is the user's line
            for frame in device:
                if frame.file:
                    f["file"], f["line"] = frame.file, frame.line
                    break
    f["kernel"] = _kernel_of(f.get("function")) if kernel is None else kernel
    f["device_frames"] = _shared(device) if device else ()
    f["host_frames"] = _shared(host) if host else ()
    f["extra"] = tuple(extra)
    f["lines"] = tuple(lines)
    return f


#: frame tuples by the identities of their frames: the frames of remembered lines are shared
#: objects, so the thousands of records with one stack share one tuple (and its JSON text)
_STACKS: dict[int | tuple[int, ...], tuple[Frame, ...]] = {}


def _shared(frames: list[Frame]) -> tuple[Frame, ...]:
    key = id(frames[0]) if len(frames) == 1 else tuple(map(id, frames))
    stack = _STACKS.get(key)
    if stack is None:
        if sum(len(f.func or "") + len(f.file or "") + len(f.module or "") for f in frames) > _CACHE_CHARS * 4:
            return tuple(frames)  # frames of long lines are not shared: not worth holding on to
        if len(_STACKS) >= _CACHE_MAX:
            _STACKS.clear()
        # the tuple holds its frames, so their ids cannot be reused while the entry lives
        stack = _STACKS[key] = tuple(frames)
    return stack


_CLONE_PARENT: dict[str | None, str | None] = {}
_from_fields = SanitizerRecord.from_fields


def _kernel_of(function: str | None) -> str | None:
    """The kernel a device function belongs to, from its ``[clone kernel(...)]`` tag (cached)."""
    k = _CLONE_PARENT.get(function, _CLONE_PARENT)
    if k is _CLONE_PARENT:
        k = clone_parent(function) or function
        if function is None or len(function) <= _CACHE_CHARS:
            if len(_CLONE_PARENT) > _CACHE_MAX:
                _CLONE_PARENT.clear()
            _CLONE_PARENT[function] = k
    return k  # type: ignore[return-value]


#: lines handed to the fold at a time from a list, and from any other iterable of lines
_BATCH = 4096
_SMALL_BATCH = 64


def _rare_detail(code: int, op: tuple[Any, ...], f: dict[str, Any], host: list[Frame], extra: list[str],
                 prev: int) -> int:
    """The detail lines of races, initcheck and old host frames (both folds call this; the compiled
    one does a hazard's Thread lines itself, the same way); the code the next line sees as the
    previous one."""
    if code == D_IN and prev == D_HOST and host:
        # 2021-2024 layout: "Host Frame:cudaLaunchKernel [0x70aae]" then "in /lib/libcudart.so.12"
        if host[-1].module is None:
            host[-1] = dataclasses.replace(host[-1], module=op[2])
        return D_HOST  # an "in" line after this one continues the frame too
    if code == D_RACE_AND:
        f.setdefault("race_other", op[2])
        if op[3] is not None:
            f["hazards"] = (f.get("hazards") or 0) + op[3]
    elif code == D_HAZARD_THREAD:
        if "function" not in f:
            f["access"], f["thread"] = op[2], op[3]
            f.update(op[4])
        else:
            f.setdefault("race_other", op[5])
    elif code == D_UNINIT:
        if op[2] is not None:
            f.setdefault("address", op[2][0])
            f.setdefault("problem", op[2][1])
        extra.append(op[1])
    else:
        extra.append(op[1])
    return code


def _fold(lines: list[str], state: list[Any], cache: dict[str, tuple[Any, ...]],
          classify: Callable[[str], tuple[Any, ...]], end: Callable[..., None],
          outside: Callable[[str], None], other: Callable[[tuple[Any, ...]], None],
          out: list[SanitizerRecord], lead: str | None, fast: tuple[Any, ...]) -> int:
    """Read a batch of lines into ``state`` (see TextLogParser.records), each finished record to ``out``.

    This loop is the parser's hot path (a 100,000-record log is 800,000 turns of it);
    ``_fold_native`` is the same loop compiled, this one is the route without it. The location's
    four keys are only ever set together, so "function" absent means all four are. ``lead`` is
    the prefix and its blank when lines start plainly with it (else None): the compiled fold reads
    the lines after it that come new in many records itself (``by thread``, memcheck's and
    initcheck's address lines, racecheck's hazard heads), this one leaves them to ``classify``
    like every other line. ``fast`` holds what the compiled fold needs to finish a common record
    without ``end`` (it returns how many it finished so; this one always calls ``end`` and
    returns 0) and the values those lines' classes hold.
    """
    f, text, host, device, extra, dropped, prev, closed_last, hint, index = state
    get = cache.get
    for raw in lines:
        index += 1
        op = get(raw)
        if op is None:
            op = classify(raw)
            if len(raw) <= _CACHE_LINE:
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                cache[raw] = op
        code = op[0]
        if code >= D_EXTRA:
            if f is None:  # an indented line outside any record
                closed_last = True
                outside(op[1])
                continue
            if len(text) >= MAX_RECORD_LINES:
                dropped += 1
                continue
            text.append(op[1])
            if code == D_HOST:
                host.append(op[2])
            elif code == D_AT:
                if "function" not in f:
                    f.update(op[2])
                else:
                    extra.append(op[1])
            elif code == D_WHO:
                if "thread" not in f:
                    f["thread"] = op[2]
                if "block" not in f:
                    f["block"] = op[3]
            elif code == D_ADDR:
                if "address" not in f:
                    f["address"] = op[2]
                if op[3] and "problem" not in f:
                    f["problem"] = op[3]
            elif code == D_NEAR:
                f["alloc_base"], f["alloc_size"], f["alloc_relation"], f["alloc_distance"] = op[2:]
            elif code == D_SAVED:
                if "host_stack_at" not in f:
                    f["host_stack_at"] = op[2]
            elif code == D_DEVICE:
                device.append(op[2])
            elif code == D_EXTRA:
                extra.append(op[1])
            else:
                code = _rare_detail(code, op, f, host, extra, prev)
            prev = code
            continue
        if code == L_SKIP:
            continue
        if f is not None:
            end(f, text, host, device, extra, dropped, hint, out)
            f = None
        closed_last = True
        if code == L_HEAD:
            f = op[2].copy()
            f["index"] = index
            hint = op[3]
            text, host, device, extra = [op[1]], [], [], []
            dropped, prev, closed_last = 0, -1, False
        elif code != L_SEP:
            other(op)
    state[:] = [f, text, host, device, extra, dropped, prev, closed_last, hint, index]
    return 0


def _native_module() -> Any:
    """The compiled part (``_fold.c``, built at install), or None."""
    if os.environ.get(PURE_ENV):
        return None
    try:
        return importlib.import_module("faulthunt.sanitizer._fold")
    except ImportError:
        return None


def _load_native() -> Callable[..., int] | None:
    """The compiled fold, or None: then ``_fold`` runs."""
    native = _native_module()
    if native is None:
        return None
    codes = (L_SKIP, L_SEP, L_HEAD, D_EXTRA, D_AT, D_WHO, D_ADDR, D_NEAR, D_RACE_AND, D_HOST, D_DEVICE,
             D_SAVED, D_IN, D_HAZARD_THREAD, D_UNINIT)
    if getattr(native, "CODES", None) != codes:
        return None  # built from another version of this file
    return functools.partial(native.fold, _rare_detail, (_CACHE_LINE, _CACHE_MAX, MAX_RECORD_LINES))


#: the fold a parser uses: compiled when it was built (tests set this to None to run ``_fold``)
_fold_native: Callable[..., int] | None = _load_native()


def _longest_py(lines: list[str]) -> int:
    return max(map(len, lines)) if lines else 0


#: the length of a list's longest line (compiled when built: ``_cut`` asks it of every list)
_longest: Callable[[list[str]], int] = getattr(_native_module(), "longest", None) or _longest_py


class TextLogParser:
    """Reads a text log a line at a time and hands on each record as soon as it is complete.

    ``prefix`` is the ``--prefix`` the log was made with (found from the banner when omitted, among
    the first 2,000 lines); ``tool`` is the tool that made it when the caller knows (else each
    record's kind tells, and records whose kind does not, hardware exceptions, take the tool most
    records of the log name). After :meth:`records` is exhausted, :meth:`summary` holds the
    banners, summaries and notices. Memory: one record, the remembered short lines, and at most
    ``_PENDING_MAX`` records waiting for the log's tool.
    """

    def __init__(self, *, prefix: str | None = None, tool: str | None = None) -> None:
        self.prefix = prefix
        self.tool = tool
        self.count = 0
        self.banners = 0
        self.legacy = False
        self.error_summary: int | None = None
        self.not_printed = 0
        self.leak_summary: tuple[int, int] | None = None
        self.race_summary: tuple[int, int, int] | None = None
        self.app_failed = False
        self.notices: list[str] = []
        self.truncated = False
        self._votes: dict[str, int] = {}
        self._pending: list[tuple[dict[str, Any], str | None]] = []
        self._pending_chars = 0
        self._ready: list[SanitizerRecord] = []
        self._cache: dict[str, tuple[Any, ...]] = {}

    # --- classification of one line (pure given the prefix; remembered for short lines) ---------
    def _classify(self, raw: str) -> tuple[Any, ...]:
        if self._lead and raw.startswith(self._lead):
            # the common line, "<prefix> <body>": what the general path below does, minus the
            # steps that cannot apply (no leading blank, no CI stamp, not a pytest "=====" line
            # unless it ends in "===")
            content = raw[self._plen + 1:].rstrip()
            body = content.lstrip(" \t")
            if not body:
                return _SEP
            if not (self._strict_eq and content.endswith("===") and _pytest_banner_tail(" " + content)):
                if len(content) - len(body) >= 3:
                    d = detail_of(body)
                    return (d[0], body, *d[1:])
                return _head_level(body, True)
        line = raw.lstrip()
        if line[:1].isdigit() and _CI_STAMP.match(line):
            line = _CI_STAMP.sub("", line, count=1).lstrip()
        if not line.startswith(self._bare):
            return _SKIP  # application output, interleaved without the prefix
        if line.rstrip() == self._bare:
            return _SEP
        if not line.startswith(self._prefix):
            return _SKIP
        rest = line[self._plen:]
        # A default prefix made of '=' must match exactly: pytest's "===== 1 failed =====" is not ours.
        if self._strict_eq and (rest[:1] == "=" or _pytest_banner_tail(rest)):
            return _SKIP
        content = (rest[1:] if rest[:1] == " " else rest).rstrip()
        body = content.lstrip(" \t")
        if not body:
            return _SEP
        if len(content) - len(body) >= 3:
            d = detail_of(body)
            return (d[0], body, *d[1:])
        return _head_level(body, True)

    def _setup(self, prefix: str) -> None:
        self.prefix = prefix
        self._prefix = prefix
        self._bare = prefix.rstrip()
        self._plen = len(prefix)
        self._strict_eq = set(self._bare) == {"="}
        # the fast path of _classify holds for a prefix that is its own bare form and starts with
        # neither a blank nor a digit (a CI stamp could then be taken for it)
        plain = prefix == self._bare and prefix[:1] and not prefix[0].isspace() and not prefix[0].isdigit()
        self._lead = prefix + " " if plain else ""

    # --- the line loop ----------------------------------------------------------------------------
    def records(self, lines: Iterable[str]) -> Iterator[SanitizerRecord]:
        """Every error record of ``lines``, in order, each as soon as it is complete."""
        return itertools.chain.from_iterable(self.record_batches(_batches(lines)))

    def record_batches(self, line_batches: Iterable[list[str]]) -> Iterator[list[SanitizerRecord]]:
        """The records of lists of lines (:func:`iter_line_batches`), a list from each.

        Memory is one list of lines and the records they hold (the reader's lists are a chunk
        of the file each).
        """
        batches: Iterator[list[str]] = iter(line_batches)
        if self.prefix is None:
            head, taken = _lookahead_batches(batches)
            self._setup(_detect_prefix(head))
            batches = itertools.chain(taken, batches)
        else:
            self._setup(self.prefix)
        # the record being read, between batches: fields (None: no record), its text lines, host
        # frames, device frames, unparsed lines, lines dropped, the previous detail code, whether
        # the last record was closed, the tool hint, the index of the last line read
        state: list[Any] = [None, [], [], [], [], 0, -1, True, None, -1]
        out: list[SanitizerRecord] = []
        fold = _fold_native or _fold
        # what the compiled fold needs to finish the common record itself (see _end), and the
        # values its own readers put in a hazard head's class and a nearest-allocation line's
        fast = (self._pending, self._votes, self.tool, _CLONE_PARENT, _STACKS, SanitizerRecord,
                (RACE, _KIND_TOOL[RACE]), ("inside", "after", "before"))
        args = (state, self._cache, self._classify, self._end, self._outside, self._other, out,
                self._lead or None, fast)
        # lines in batches (list-building in C): the fold's loop runs over a list, a batch of
        # records comes out of each, so memory stays one batch of lines and of records
        for batch in batches:
            made = fold(batch, *args)  # (not `self.count += fold(...)`: _end counts too, meanwhile)
            self.count += made
            if out:
                yield out[:]
                out.clear()
        f, closed_last = state[0], state[7]
        self.truncated = f is not None and not closed_last
        if f is not None:
            self._end(f, state[1], state[2], state[3], state[4], state[5], state[8], out)
        self._flush(self._log_tool())
        out += self._take_ready()
        if out:
            yield out

    def _end(self, f: dict[str, Any], text: list[str], host: list[Frame], device: list[Frame],
             extra: list[str], dropped: int, hint: str | None, out: list[SanitizerRecord]) -> None:
        """A record whose lines have all been read: to ``out``, with any that waited before it."""
        if dropped or device:
            _close(f, text, host, device, extra, dropped)
        else:  # _close without device frames, inline (once a record)
            f["kernel"] = _kernel_of(f.get("function"))
            f["device_frames"] = ()
            f["host_frames"] = _shared(host) if host else ()
            f["extra"] = tuple(extra)
            f["lines"] = tuple(text)
        if hint and not self._pending:  # _finish of a record that names its tool, inline
            self.count += 1
            votes = self._votes
            votes[hint] = votes.get(hint, 0) + 1
            f["tool"] = self.tool or hint
            out.append(_from_fields(f))
            return
        rec = self._finish(f, hint)
        if rec is not None:
            out.append(rec)
        elif self._ready:
            out.extend(self._take_ready())

    def _outside(self, body: str) -> None:
        """An indented line outside any record: a banner, summary or notice."""
        self._other(_head_level(body, False))

    def _other(self, op: tuple[Any, ...]) -> None:
        """A banner, summary or notice line."""
        code = op[0]
        if code == L_BANNER:
            self.banners += 1
            self.legacy = self.legacy or op[1]
        elif code == L_ERRORS:
            self.error_summary = (self.error_summary or 0) + op[1]
        elif code == L_NOT_PRINTED:
            self.not_printed += op[1]
        elif code == L_LEAKS:
            prev = self.leak_summary or (0, 0)
            self.leak_summary = (prev[0] + op[1], prev[1] + op[2])
        elif code == L_RACES:
            prev3 = self.race_summary or (0, 0, 0)
            self.race_summary = (prev3[0] + op[1], prev3[1] + op[2], prev3[2] + op[3])
        elif code == L_APP_FAILED:
            self.app_failed = True
        elif code == L_NOTICE and len(self.notices) < MAX_NOTICES:
            self.notices.append(op[1])

    # --- records out: the tool, then the frozen record --------------------------------------------
    def _finish(self, f: dict[str, Any], hint: str | None) -> SanitizerRecord | None:
        """The record, or None when it waits (in ``_pending``) for the log's tool to be known."""
        self.count += 1
        if hint:
            self._votes[hint] = self._votes.get(hint, 0) + 1
        if self._pending or (self.tool is None and hint is None):
            # in file order: behind a record that waits for the log's tool, every record waits
            self._pending.append((f, hint))
            self._pending_chars += sum(map(len, f["lines"]))
            if len(self._pending) >= _PENDING_MAX or self._pending_chars >= _PENDING_CHARS:
                self._flush(self._log_tool())
            return None
        f["tool"] = self.tool or hint
        return SanitizerRecord.from_fields(f)

    def _flush(self, log_tool: str | None) -> None:
        """The waiting records, given the log's tool, to ``_ready``."""
        for f, hint in self._pending:
            f["tool"] = self.tool or hint or log_tool
            self._ready.append(SanitizerRecord.from_fields(f))
        self._pending.clear()  # (cleared, not replaced: the compiled fold holds this list)
        self._pending_chars = 0

    def _take_ready(self) -> list[SanitizerRecord]:
        ready, self._ready = self._ready, []
        return ready

    def _log_tool(self) -> str | None:
        """The tool the caller named, else the one most records name (racecheck's summary wins)."""
        if self.tool is not None:
            return self.tool
        votes = dict(self._votes)
        if self.race_summary is not None:
            votes["racecheck"] = votes.get("racecheck", 0) + 1_000_000
        return max(votes, key=lambda k: votes[k]) if votes else None

    def summary(self, records: tuple[SanitizerRecord, ...] = ()) -> ParsedLog:
        """The log's banners, summaries and notices (after :meth:`records` has run)."""
        return ParsedLog(records, self.prefix or DEFAULT_PREFIX, self.banners, self.legacy,
                         self.error_summary, self.not_printed, self.leak_summary, self.race_summary,
                         self.app_failed, tuple(self.notices), self.truncated, self._log_tool(),
                         self.count)


def _batches(lines: Iterable[str]) -> Iterator[list[str]]:
    """Lines in lists for the fold: a list in slices, any other iterable a few lines at a time
    (its lines may be long: memory stays a few of them)."""
    if isinstance(lines, list):
        for at in range(0, len(lines), _BATCH):
            yield lines[at:at + _BATCH]
        return
    it = iter(lines)
    while batch := list(itertools.islice(it, _SMALL_BATCH)):
        yield batch


def _lookahead_batches(batches: Iterator[list[str]], lines: int = 2000,
                       chars: int = 4 * MAX_LINE) -> tuple[list[str], list[list[str]]]:
    """The first lines, where a banner names the prefix (bounded in lines and characters), and
    the batches they came from (whole)."""
    taken: list[list[str]] = []
    head: list[str] = []
    size = 0
    for batch in batches:
        taken.append(batch)
        for line in batch:
            head.append(line)
            size += len(line)
            if len(head) >= lines or size >= chars or _banner_prefix(_CI_STAMP.sub("", line)) is not None:
                return head, taken
    return head, taken


def iter_records(lines: Iterable[str], *, prefix: str | None = None,
                 tool: str | None = None) -> Iterator[SanitizerRecord]:
    """The error records of a text log's lines, streamed (see :class:`TextLogParser`)."""
    return TextLogParser(prefix=prefix, tool=tool).records(lines)


#: characters that end a line for str.splitlines
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_FIRST_BREAK = re.compile("[" + _LINE_BREAKS + "]")
#: every byte that is not part of a line break in UTF-8 (for the skipping of an over-long line)
_NOT_BREAK = bytes(b for b in range(256) if b not in b"\n\r\x0b\x0c\x1c\x1d\x1e\xc2\x85\xe2\x80\xa8\xa9")


def _has_break(data: bytes) -> bool:
    """Whether UTF-8 bytes may hold a line break (C-speed scans: a 1 GB line is skipped in 0.6 s)."""
    left = data.translate(None, _NOT_BREAK)
    if not left:
        return False
    if left.translate(None, b"\xc2\x85\xe2\x80\xa8\xa9"):
        return True  # a one-byte break
    return b"\xc2\x85" in data or b"\xe2\x80\xa8" in data or b"\xe2\x80\xa9" in data


def iter_line_batches(chunks: Iterable[bytes], *, max_line: int = MAX_LINE) -> Iterator[list[str]]:
    """The lines of :func:`iter_lines` in lists, one (or two) a chunk: for ``record_batches``."""
    return _line_batches(chunks, max_line)


def iter_lines(chunks: Iterable[bytes], *, max_line: int = MAX_LINE) -> Iterator[str]:
    """The lines of a UTF-8 byte stream (invalid bytes replaced), as ``str.splitlines`` splits them.

    Memory is one chunk plus one line: a line longer than ``max_line`` characters is cut there and
    the rest of it skipped (a 1 GB file without a newline is one cut line).
    """
    # a list of lines per chunk, flattened in C: no Python step per line
    return itertools.chain.from_iterable(_line_batches(chunks, max_line))


def _cut(lines: list[str], max_line: int) -> list[str]:
    if _longest(lines) > max_line:
        return [line[:max_line] for line in lines]
    return lines


def _line_batches(chunks: Iterable[bytes], max_line: int) -> Iterator[list[str]]:
    decoder = codecs.getincrementaldecoder("utf-8")
    decode = decoder("replace").decode
    carry = ""
    skipping = False
    tail = b""  # while skipping: the last bytes seen, where a break may have begun
    after_cr = False
    for chunk in chunks:
        if skipping:
            probe = tail + chunk
            if not _has_break(probe):
                tail = probe[-2:]
                continue
            # what precedes the break is dropped anyway, so decoding can start afresh here
            decode, chunk = decoder("replace").decode, probe
        text = decode(chunk)
        if not text:
            continue
        if after_cr:  # a "\r\n" split between two chunks is one line break
            after_cr = False
            text = text[1:] if text[0] == "\n" else text
        if skipping:
            m = _FIRST_BREAK.search(text)
            if m is None:
                continue
            skipping = False
            after_cr = text[m.start()] == "\r"
            text = text[m.end():]
            if after_cr and text:
                after_cr = False
                text = text[1:] if text[0] == "\n" else text
        text = carry + text
        lines = text.splitlines()
        if text and text[-1] in _LINE_BREAKS:
            carry = ""
            after_cr = text[-1] == "\r"
        else:
            carry = lines.pop() if lines else ""
        yield _cut(lines, max_line)
        if len(carry) > max_line:
            yield [carry[:max_line]]
            # a break may have begun in this chunk's last bytes (a 3-byte U+2028 cut in two)
            carry, skipping, tail = "", True, chunk[-2:]
    text = carry + decode(b"", True)
    if after_cr and text.startswith("\n"):
        text = text[1:]
    if not skipping and text:
        yield _cut(text.splitlines(), max_line)


def parse_text_log(text: str, *, prefix: str | None = None, tool: str | None = None) -> ParsedLog:
    """Parse a whole text log: records, summaries, notices. Never raises on any ``str``.

    ``prefix`` is the ``--prefix`` the log was made with (found from the banner when omitted);
    ``tool`` is the tool that made it when the caller knows (else inferred per record kind).
    """
    parser = TextLogParser(prefix=prefix if prefix is not None else detect_prefix(text), tool=tool)
    records = tuple(parser.records(text.splitlines()))
    return parser.summary(records)


def parse_text(text: str, *, prefix: str | None = None, tool: str | None = None) -> list[SanitizerRecord]:
    """The error records of a compute-sanitizer text log, in file order. Never raises on any ``str``."""
    return list(parse_text_log(text, prefix=prefix, tool=tool).records)


__all__ = ["TextLogParser", "ParsedLog", "iter_records", "iter_lines", "iter_line_batches", "parse_text_log", "parse_text",
           "detect_prefix", "parse_location", "parse_device_frame", "parse_host_frame", "head_fields",
           "detail_of", "DEFAULT_PREFIX", "HW_EXCEPTIONS"]
