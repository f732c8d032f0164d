# The text parser as it was before the streaming rewrite (faulthunt commit eed7246), kept unchanged
# below this header as the oracle of tests/test_sanitizer_oracle.py: on inputs small enough for its
# backtracking expressions, the new parser must give the same records and summaries. Not imported
# by faulthunt itself.
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

Junk, binary noise and truncated logs are parsed as far as they go; nothing here raises on any
input text (a hypothesis test holds it to that).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from faulthunt.records.sanitizer import (
    API_ERROR, GUARDRAIL, HARDWARE_EXCEPTION, HOST_API_ACCESS, LEAK, MALLOC_FREE, MEMORY_ACCESS,
    RACE, SYNC_ERROR, UNINITIALIZED_READ, UNUSED_MEMORY, Frame, SanitizerRecord,
)
from faulthunt.sanitizer.demangle import clone_parent

DEFAULT_PREFIX = "========="

#: a GitHub Actions style timestamp that CI logs put before every line
_PYTEST_BANNER_TAIL = re.compile(r" ===+\s*$")
_CI_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z? ")
_BANNER = re.compile(r"^\s*(?P<prefix>\S.*?) (?P<which>COMPUTE-SANITIZER|CUDA-MEMCHECK)\s*$")

_DIM = r"\(\s*(\d+),\s*(\d+),\s*(\d+)\s*\)"
_NUM = r"\d[\d,]*"
_HEX = r"0x([0-9a-fA-F]+)"

# --- record heads (the line after the prefix, not indented) -------------------------------------
_H_ACCESS = re.compile(
    rf"^(?P<pot>Potential )?[Ii]nvalid (?P<space>__\w+__) (?P<dir>read|write|atomic|\?)"
    rf"(?: access)? of size (?P<size>{_NUM})(?: bytes?)?")
_H_UNINIT = re.compile(rf"^Uninitialized (?P<space>__\w+__) memory read of size (?P<size>{_NUM})")
_H_MALLOC = re.compile(r"^Malloc/Free error encountered\s*:\s*(?P<what>.*?)\s*$")
_H_LEAK = re.compile(rf"^Leaked (?P<size>{_NUM}) bytes at {_HEX}(?P<heap> on the device heap)?")
_H_LEAK_OBJ = re.compile(rf"^Leaked an? (?P<what>\w+) with handle {_HEX}")
_H_API = re.compile(
    r'^Program hit (?P<err>\w+) \(error (?P<code>\d+)\) due to "(?P<msg>.*)" on CUDA API call to '
    r"(?P<api>[\w:]+)")
_H_API_OLD = re.compile(
    r"^Program hit (?P<msg>.+?) \(error (?P<code>\d+)\) on CUDA API call to (?P<api>[\w:]+)")
_H_HOSTAPI = re.compile(
    rf"^Host API memory access error at host access to {_HEX}(?: of size (?P<size>{_NUM}) bytes?)?")
_H_RACE = re.compile(r"^(?P<sev>\w+):\s*Race reported between (?P<a1>Read|Write) access at (?P<loc>.+?)\s*$")
_H_HAZARD = re.compile(
    rf"^(?P<sev>\w+):\s*(?P<wlp>\(Warp Level Programming\)\s*)?Potential (?P<hz>RAW|WAR|WAW) hazard "
    rf"detected at (?P<space>__\w+__) {_HEX} in block {_DIM}")
_H_BARRIER = re.compile(r"^Barrier error detected\.?\s*(?P<what>.*?)\.?\s*$")
_H_WGMMA = re.compile(r"^Warpgroup MMA sequence error detected")
_H_DEADLOCK = re.compile(
    rf"^Deadlock detected in (?P<what>.+?) called by threads starting at {_DIM} in block {_DIM}"
    rf"(?P<rest>.*?)(?: at (?P<loc>[^,]+))?\s*$")
_H_UNUSED = re.compile(
    rf"^Unused (?P<space>__\w+__) memory in allocation(?: {_HEX})? of size (?P<size>{_NUM}) bytes?")
_H_TENSOR = re.compile(r"^Tensor Memory ")
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
_D_ADDR = re.compile(rf"^(?:Address|Access at|Access to) {_HEX}(?:\s+(?:is\s+)?(?P<what>.+?))?\.?\s*$")
_D_NEAR = re.compile(
    rf"^and is (?:(?P<dist>{_NUM}) bytes? (?P<rel>after|before)|(?P<inside>inside)) the nearest "
    rf"allocation at {_HEX} of size (?P<asz>{_NUM}) bytes?")
_D_RACE_AND = re.compile(
    rf"^and (?P<a2>Read|Write) access at (?P<loc>.+?)(?:\s+\[(?P<n>{_NUM}) hazards?\])?\s*$")
_D_HAZARD_THREAD = re.compile(rf"^(?P<dir>Read|Write) Thread {_DIM} at (?P<loc>.+?)\s*$")
_D_SAVED = re.compile(r"^Saved host backtrace up to driver entry point(?: at (?P<at>.+?))?\.?\s*$")
_D_UNINIT_API = re.compile(rf"^Uninitialized access at {_HEX} on access by (?P<by>.+?)\s*$")

# --- locations and frames -----------------------------------------------------------------------
_LOCATIONS = (
    # legacy -G / -lineinfo: 0x00000060 in /home/u/t.cu:12:kernel(int*)
    re.compile(r"^0x(?P<pc>[0-9a-fA-F]+) in (?P<file>[^:]+(?::\\[^:]+)?):(?P<line>\d+):(?P<func>.+)$"),
    re.compile(r"^0x(?P<pc>[0-9a-fA-F]+) in (?P<func>.+)$"),
    re.compile(r"^0x(?P<pc>[0-9a-fA-F]+)$"),
    # docs: unaligned_kernel():0x160 in memcheck_demo.cu:6
    re.compile(r"^(?P<func>.+?):0x(?P<pc>[0-9a-fA-F]+) in (?P<file>.+):(?P<line>\d+)$"),
    # 2022+: kernel(args)+0x120 in faults.cu:18
    re.compile(r"^(?P<func>.+)\+0x(?P<pc>[0-9a-fA-F]+) in (?P<file>.+):(?P<line>\d+)$"),
    re.compile(r"^(?P<func>.+)\+0x(?P<pc>[0-9a-fA-F]+)$"),
    # 2025+ short form: cp_async_bulk_cp_mask in cp_async_bulk.h:236
    re.compile(r"^(?P<func>.+) in (?P<file>.+):(?P<line>\d+)$"),
)
_DEV_OLD = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<func>.+?) \((?P<f2>.+) : 0x(?P<pc>[0-9a-fA-F]+)\)$")
_DEV_BRACKET = re.compile(r"^(?P<func>.+?)\s*\[0x(?P<pc>[0-9a-fA-F]+)\]$")
_HOST_OLD = re.compile(
    r"^(?P<module>(?:\S*[/\\]\S*|\S+\.(?:so|dll|exe)\S*)) \((?P<func>.*?)(?: \+ 0x(?P<off>[0-9a-fA-F]+))?\)"
    r" \[0x(?P<pc>[0-9a-fA-F]+)\]$")
_HOST_NEW = re.compile(
    r"^(?P<func>.*?)(?:\s*\bin (?P<file>[^\[\]]+?):(?P<line>\d+))?(?:\s*\[0x(?P<pc>[0-9a-fA-F]+)\])?"
    r"(?:\s+in (?P<module>.+?))?\s*$")


def _num(text: str | None) -> int | None:
    if not text:
        return None
    digits = text.replace(",", "")
    return int(digits) if digits.isdigit() else None


def _hex(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def parse_location(loc: str) -> tuple[str | None, str | None, int | None, int | None]:
    """``(function, file, line, pc)`` of an ``at ...`` location in any of the observed layouts."""
    loc = loc.strip()
    for rx in _LOCATIONS:
        m = rx.match(loc)
        if m:
            d = m.groupdict()
            return (d.get("func") or None, d.get("file"), _num(d.get("line")), _hex(d.get("pc")))
    return (loc or None, None, None, None)


def parse_device_frame(text: str) -> Frame:
    """A ``Device Frame:`` line's frame (new layout, legacy ``file:line:func (func : 0x..)``, ``[0x..]``)."""
    text = text.strip()
    m = _DEV_OLD.match(text)
    if m:
        return Frame(m.group("func"), m.group("file"), _num(m.group("line")), None, _hex(m.group("pc")))
    m = _DEV_BRACKET.match(text)
    if m and " in " not in text:
        return Frame(m.group("func") or None, None, None, None, _hex(m.group("pc")))
    func, file, line, pc = parse_location(text)
    return Frame(func, file, line, None, pc)


def parse_host_frame(text: str) -> Frame:
    """A ``Host Frame:`` line's frame, in the oldest, 2021-2024 or 2025+ layout (Python frames too)."""
    text = text.strip()
    m = _HOST_OLD.match(text)
    if m:
        return Frame(m.group("func") or None, None, None, m.group("module"), _hex(m.group("pc")))
    m = _HOST_NEW.match(text)
    if not m:  # pragma: no cover - every string matches _HOST_NEW (all of it is optional)
        return Frame(text or None)
    func = (m.group("func") or "").strip() or None
    module = m.group("module")
    if func and module is None and ("/" in func or "\\" in func) and m.group("file") is None:
        module, func = func, None  # legacy "Host Frame:./app [0x3a39]" names the module
    return Frame(func, m.group("file"), _num(m.group("line")), module, _hex(m.group("pc")))


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
    notices: tuple[str, ...] = ()
    #: the last record was cut off (no separator and no summary after it)
    truncated: bool = False
    tool: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"records": len(self.records), "prefix": self.prefix, "banners": self.banners,
                "legacy": self.legacy, "error_summary": self.error_summary,
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


def detect_prefix(text: str) -> str:
    """The line prefix of a log: from its banner (``<prefix> COMPUTE-SANITIZER``), else the default."""
    for line in text.splitlines()[:2000]:
        line = _CI_STAMP.sub("", line)
        m = _BANNER.match(line)
        if m:
            return m.group("prefix")
    return DEFAULT_PREFIX


class _Builder:
    """The record being read (mutable while its lines arrive; frozen by ``finish``)."""

    __slots__ = ("f", "device", "host", "extra", "lines", "last_was_host")

    def __init__(self, kind: str, message: str, index: int, **fields: Any) -> None:
        self.f: dict[str, Any] = {"kind": kind, "message": message, "index": index, **fields}
        self.device: list[Frame] = []
        self.host: list[Frame] = []
        self.extra: list[str] = []
        self.lines: list[str] = [message]
        self.last_was_host = False

    def set_location(self, loc: str) -> None:
        func, file, line, pc = parse_location(loc)
        self.f.setdefault("function", func)
        self.f.setdefault("file", file)
        self.f.setdefault("line", line)
        self.f.setdefault("pc", pc)

    def finish(self, tool: str | None) -> SanitizerRecord:
        f = self.f
        function = f.get("function")
        kernel = None
        for frame in reversed(self.device):
            if frame.func and frame.func != "NVIDIA Internal":
                kernel = frame.func
                break
        if kernel is None:
            kernel = clone_parent(function) or function
        if f.get("file") is None:
            # the fault is in code without line info (a system header, cudart): the first
            # device frame that has a file is the user's line
            for frame in self.device:
                if frame.file:
                    f["file"], f["line"] = frame.file, frame.line
                    break
        kind_tool = f.pop("tool_hint", None) or _KIND_TOOL.get(f["kind"])
        return SanitizerRecord(
            tool=tool or kind_tool, kernel=kernel, device_frames=tuple(self.device),
            host_frames=tuple(self.host), extra=tuple(self.extra), lines=tuple(self.lines), **f)


def _head(body: str, index: int) -> _Builder | None:
    """The record a head line starts, or None when the line is not a record head."""
    low = body.lower().rstrip(". ")
    for name in HW_EXCEPTIONS:
        if low == name or low.startswith(name + " ") or low.startswith(name + ":"):
            return _Builder(HARDWARE_EXCEPTION, body, index)
    c = body[:1]
    if c in ("I", "i", "P"):
        m = _H_ACCESS.match(body)
        if m:
            return _Builder(MEMORY_ACCESS, body, index, space=m.group("space"), access=m.group("dir"),
                            size=_num(m.group("size")),
                            tool_hint="racecheck" if m.group("pot") else None)
        if body.startswith("Invalid "):
            return _Builder(MEMORY_ACCESS, body, index)
        if body.startswith("Program hit"):
            m = _H_API.match(body)
            if m:
                return _Builder(API_ERROR, body, index, error=m.group("err"),
                                error_code=_num(m.group("code")), api=m.group("api"))
            m = _H_API_OLD.match(body)
            if m:
                return _Builder(API_ERROR, body, index, error=m.group("msg"),
                                error_code=_num(m.group("code")), api=m.group("api"))
            return _Builder(API_ERROR, body, index)
    if c == "U":
        m = _H_UNINIT.match(body)
        if m:
            return _Builder(UNINITIALIZED_READ, body, index, space=m.group("space"), access="read",
                            size=_num(m.group("size")))
        m = _H_UNUSED.match(body)
        if m:
            return _Builder(UNUSED_MEMORY, body, index, space=m.group("space"),
                            address=_hex(m.group(2)), size=_num(m.group("size")))
    if c == "L":
        m = _H_LEAK.match(body)
        if m:
            return _Builder(LEAK, body, index, size=_num(m.group("size")), address=_hex(m.group(2)),
                            problem="on the device heap" if m.group("heap") else None)
        m = _H_LEAK_OBJ.match(body)
        if m:
            return _Builder(LEAK, body, index, address=_hex(m.group(2)), problem=m.group("what"))
    if c == "M":
        m = _H_MALLOC.match(body)
        if m:
            return _Builder(MALLOC_FREE, body, index, problem=m.group("what") or None)
    if c == "H":
        m = _H_HOSTAPI.match(body)
        if m:
            return _Builder(HOST_API_ACCESS, body, index, address=_hex(m.group(1)),
                            size=_num(m.group("size")))
    if c == "B":
        m = _H_BARRIER.match(body)
        if m:
            return _Builder(SYNC_ERROR, body, index, problem=m.group("what") or None)
    if c == "W" and _H_WGMMA.match(body):
        return _Builder(SYNC_ERROR, body, index)
    if c == "D":
        m = _H_DEADLOCK.match(body)
        if m:
            g = m.groups()
            b = _Builder(SYNC_ERROR, body, index, problem="deadlock in " + m.group("what"),
                         thread=(int(g[1]), int(g[2]), int(g[3])),
                         block=(int(g[4]), int(g[5]), int(g[6])), tool_hint="racecheck")
            if m.group("loc"):
                b.set_location(m.group("loc"))
            return b
    if c == "T" and _H_TENSOR.match(body):
        return _Builder(GUARDRAIL, body, index)
    if ":" in body[:12]:
        m = _H_RACE.match(body)
        if m:
            b = _Builder(RACE, body, index, severity=m.group("sev").capitalize(),
                         access=m.group("a1").lower(), space="__shared__")
            b.set_location(m.group("loc"))
            return b
        m = _H_HAZARD.match(body)
        if m:
            g = m.groups()
            return _Builder(RACE, body, index, severity=m.group("sev").capitalize(),
                            hazard=m.group("hz"), space=m.group("space"), address=_hex(g[4]),
                            block=(int(g[5]), int(g[6]), int(g[7])))
    return None


def _detail(b: _Builder, body: str) -> None:
    """Fold one indented line into the record being read."""
    f = b.f
    c = body[:1]
    host = False
    if c == "a" and body.startswith("at "):
        if "function" not in f:
            b.set_location(body[3:])
        else:
            b.extra.append(body)
    elif c == "b" and body.startswith("by thread"):
        m = _D_WHO.match(body)
        if m:
            g = m.groups()
            f.setdefault("thread", (int(g[0]), int(g[1]), int(g[2])))
            f.setdefault("block", (int(g[3]), int(g[4]), int(g[5])))
        else:
            b.extra.append(body)
    elif c == "A" and (body.startswith("Address ") or body.startswith("Access ")):
        m = _D_ADDR.match(body)
        if m:
            f.setdefault("address", _hex(m.group(1)))
            if m.group("what"):
                f.setdefault("problem", m.group("what"))
        else:
            b.extra.append(body)
    elif c == "a" and body.startswith("and "):
        m = _D_NEAR.match(body)
        if m:
            f["alloc_base"] = _hex(m.group(4))
            f["alloc_size"] = _num(m.group("asz"))
            if m.group("inside"):
                f["alloc_relation"], f["alloc_distance"] = "inside", None
            else:
                f["alloc_relation"], f["alloc_distance"] = m.group("rel"), _num(m.group("dist"))
        else:
            m = _D_RACE_AND.match(body)
            if m:
                f.setdefault("race_other", f"{m.group('a2')} access at {m.group('loc')}")
                n = _num(m.group("n"))
                if n is not None:
                    f["hazards"] = (f.get("hazards") or 0) + n
            else:
                b.extra.append(body)
    elif c == "H" and body.startswith("Host Frame:"):
        b.host.append(parse_host_frame(body[len("Host Frame:"):]))
        host = True
    elif c == "D" and body.startswith("Device Frame:"):
        b.device.append(parse_device_frame(body[len("Device Frame:"):]))
    elif c == "S" and body.startswith("Saved host backtrace"):
        m = _D_SAVED.match(body)
        f.setdefault("host_stack_at", m.group("at") if m else None)
    elif c == "i" and body.startswith("in ") and b.last_was_host and b.host:
        # 2021-2024 layout: "Host Frame:cudaLaunchKernel [0x70aae]" then "in /lib/libcudart.so.12"
        last = b.host[-1]
        if last.module is None:
            b.host[-1] = dataclasses.replace(last, module=body[3:].strip())
        host = True
    elif c in ("R", "W") and " Thread (" in body:
        m = _D_HAZARD_THREAD.match(body)
        if m:
            g = m.groups()
            if "function" not in f:
                f["access"] = m.group("dir").lower()
                f["thread"] = (int(g[1]), int(g[2]), int(g[3]))
                b.set_location(m.group("loc"))
            else:
                f.setdefault("race_other", f"{m.group('dir')} Thread ({g[1]},{g[2]},{g[3]}) at {m.group('loc')}")
        else:
            b.extra.append(body)
    elif c == "U" and body.startswith("Uninitialized access at"):
        m = _D_UNINIT_API.match(body)
        if m:
            f.setdefault("address", _hex(m.group(1)))
            f.setdefault("problem", f"uninitialized access by {m.group('by')}")
        b.extra.append(body)
    else:
        b.extra.append(body)
    b.last_was_host = host
    b.lines.append(body)


def parse_text_log(text: str, *, prefix: str | None = None, tool: str | None = None) -> ParsedLog:
    """Parse a whole text log: records, summaries, notices. Never raises on any ``str``.

    ``prefix`` is the ``--prefix`` the log was made with (found from the banner when omitted);
    ``tool`` is the tool that made it when the caller knows (else inferred per record kind).
    """
    if prefix is None:
        prefix = detect_prefix(text)
    bare = prefix.rstrip()
    plen = len(prefix)
    # A default prefix made of '=' must match exactly: pytest's "===== 1 failed =====" is not ours.
    strict_eq = set(bare) == {"="}
    builders: list[_Builder] = []
    current: _Builder | None = None
    banners = 0
    legacy = False
    error_summary: int | None = None
    not_printed = 0
    leak_summary: tuple[int, int] | None = None
    race_summary: tuple[int, int, int] | None = None
    app_failed = False
    notices: list[str] = []
    closed_last = True

    for index, raw in enumerate(text.splitlines()):
        line = raw.lstrip()
        if line[:1].isdigit() and _CI_STAMP.match(line):
            line = _CI_STAMP.sub("", line, count=1).lstrip()
        if not line.startswith(bare):
            continue  # application output, interleaved without the prefix
        if line.rstrip() == bare:
            if current is not None:
                builders.append(current)
                current = None
            closed_last = True
            continue
        if not line.startswith(prefix):
            continue
        rest = line[plen:]
        if strict_eq and (rest[:1] == "=" or _PYTEST_BANNER_TAIL.search(rest)):
            continue  # pytest's "===== 1 failed in 2s =====" banners, whatever their width
        content = rest[1:] if rest[:1] == " " else rest
        content = content.rstrip()
        body = content.lstrip(" \t")
        if not body:
            if current is not None:
                builders.append(current)
                current = None
            closed_last = True
            continue
        indent = len(content) - len(body)
        if indent >= 3 and current is not None:
            _detail(current, body)
            continue
        # a line at the head level: a new record, a summary, the banner, or a tool notice
        if current is not None:
            builders.append(current)
            current = None
        closed_last = True
        new = _head(body, index) if indent < 3 else None
        if new is not None:
            current = new
            closed_last = False
            continue
        if body in ("COMPUTE-SANITIZER", "CUDA-MEMCHECK"):
            banners += 1
            legacy = legacy or body == "CUDA-MEMCHECK"
            continue
        if body.startswith("ERROR SUMMARY:"):
            m = _S_NOT_PRINTED.match(body)
            if m:
                not_printed += _num(m.group("n")) or 0
                continue
            m = _S_ERRORS.match(body)
            if m:
                error_summary = (error_summary or 0) + (_num(m.group("n")) or 0)
                continue
        if body.startswith("LEAK SUMMARY:"):
            m = _S_LEAKS.match(body)
            if m:
                prev = leak_summary or (0, 0)
                leak_summary = (prev[0] + (_num(m.group("bytes")) or 0), prev[1] + (_num(m.group("n")) or 0))
                continue
        if body.startswith("RACECHECK SUMMARY:"):
            m = _S_RACES.match(body)
            if m:
                prev3 = race_summary or (0, 0, 0)
                race_summary = (prev3[0] + (_num(m.group("n")) or 0), prev3[1] + (_num(m.group("e")) or 0),
                                prev3[2] + (_num(m.group("w")) or 0))
                continue
        if body == _S_APP_FAILED:
            app_failed = True
            continue
        notices.append(body)

    truncated = current is not None and not closed_last
    if current is not None:
        builders.append(current)

    # the log's tool: the caller's, else the one its tool-specific records name
    log_tool = tool
    if log_tool is None:
        seen: dict[str, int] = {}
        for b in builders:
            t = b.f.get("tool_hint") or _KIND_TOOL.get(b.f["kind"])
            if t:
                seen[t] = seen.get(t, 0) + 1
        if race_summary is not None:
            seen["racecheck"] = seen.get("racecheck", 0) + 1_000_000
        if seen:
            log_tool = max(seen, key=lambda k: seen[k])
    records = []
    for b in builders:
        hint = b.f.get("tool_hint") or _KIND_TOOL.get(b.f["kind"])
        records.append(b.finish(tool if tool else (hint or log_tool)))
    return ParsedLog(tuple(records), prefix, banners, legacy, error_summary, not_printed, leak_summary,
                     race_summary, app_failed, tuple(notices), truncated, log_tool)


def parse_text(text: str, *, prefix: str | None = None, tool: str | None = None) -> list[SanitizerRecord]:
    """The error records of a compute-sanitizer text log, in file order. Never raises on any ``str``."""
    return list(parse_text_log(text, prefix=prefix, tool=tool).records)
