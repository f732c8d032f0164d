"""Locations and stack frames of compute-sanitizer text records. Pure, and linear in the input.

Every layout seen in the field is read here: the ``at ...`` location of a record, its ``Device
Frame:`` lines and its ``Host Frame:`` lines (oldest, 2021-2024 and 2025+ layouts, Python frames
too). The grammars are the ones the first parser wrote as regular expressions; those had lazy
groups followed by optional tails and ``\\s*$``, which backtrack quadratically (or worse) on long
runs of spaces or repeated separators (issue 16: 40 s for a 40 KB host frame). Here each layout is
split from its fixed end with ``rfind``/anchored matches, and the one grammar that needs a search
(the 2025+ host frame) scans its candidate split points once. The results are the same as the old
expressions' on any line (``tests/test_sanitizer_grammar.py`` compares them on generated input).

Inputs are single lines: no ``\\n`` inside (the log reader splits lines with ``str.splitlines``).
"""

from __future__ import annotations

import re

from faulthunt.records.sanitizer import Frame

#: values longer than this are junk (sanitizer numbers are 64-bit); int() of thousands of digits
#: raises ValueError (Python's digit limit) and is quadratic below it
MAX_DIGITS = 40
MAX_HEX_DIGITS = 32

_HEX_RUN = re.compile(r"[0-9a-fA-F]+")
_DIGITS = re.compile(r"\d+")
_WS = re.compile(r"\s*")


def num(text: str | None) -> int | None:
    """A decimal with optional thousands separators (``4,000``); None when absent or absurd."""
    if not text:
        return None
    digits = text.replace(",", "") if "," in text else text
    if len(digits) > MAX_DIGITS or not digits.isdecimal():
        return None
    return int(digits)


def hexnum(text: str | None) -> int | None:
    """Hex digits (no ``0x``); None when absent, not hex, or longer than any address."""
    if not text or len(text) > MAX_HEX_DIGITS:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def _all_hex(text: str) -> bool:
    return _HEX_RUN.fullmatch(text) is not None


# --- the ``at ...`` location --------------------------------------------------------------------

# legacy -G / -lineinfo: 0x00000060 in /home/u/t.cu:12:kernel(int*) (a Windows path keeps C:\)
_L_PC_FILE = re.compile(r"0x([0-9a-fA-F]+) in ([^:]+(?::\\[^:]+)?):(\d+):(.+)")
_L_PC_FUNC = re.compile(r"0x([0-9a-fA-F]+) in (.+)")
# docs: unaligned_kernel():0x160 in memcheck_demo.cu:6
_L_COLON_PC = re.compile(r":0x([0-9a-fA-F]+) in ")
# 2022+: kernel(args)+0x120 in faults.cu:18
_L_PLUS_PC = re.compile(r"\+0x([0-9a-fA-F]+) in ")


def parse_location(loc: str) -> tuple[str | None, str | None, int | None, int | None]:
    """``(function, file, line, pc)`` of an ``at ...`` location in any of the observed layouts.

    In order: ``0x60 in file:12:func``, ``0x60 in func``, ``0x60``, ``func:0x160 in file:6``,
    ``func+0x120 in file:18``, ``func+0x120``, ``func in file:236`` (2025+ short form); anything
    else is the function.
    """
    s = loc.strip()
    if s.startswith("0x"):
        m = _L_PC_FILE.fullmatch(s) or _L_PC_FUNC.fullmatch(s)
        if m is not None:
            g = m.groups()
            if len(g) == 4:
                return (g[3], g[1], num(g[2]), hexnum(g[0]))
            return (g[1], None, None, hexnum(g[0]))
        if _all_hex(s[2:]):
            return (None, None, None, hexnum(s[2:]))
    colon = s.rfind(":")
    line = s[colon + 1:] if colon >= 0 else ""
    has_line = bool(line) and _DIGITS.fullmatch(line) is not None
    if has_line:
        # func:0xPC in FILE:LINE, the shortest func (its regex was lazy)
        m = _L_COLON_PC.search(s, 1)
        if m is not None and m.end() < colon:
            return (s[:m.start()], s[m.end():colon], num(line), hexnum(m.group(1)))
        # func+0xPC in FILE:LINE, the longest func (greedy)
        last = None
        for m in _L_PLUS_PC.finditer(s, 1):
            if m.end() < colon:
                last = m
        if last is not None:
            return (s[:last.start()], s[last.end():colon], num(line), hexnum(last.group(1)))
    plus = s.rfind("+0x")
    if plus >= 1 and len(s) > plus + 3 and _all_hex(s[plus + 3:]):
        return (s[:plus], None, None, hexnum(s[plus + 3:]))
    if has_line:
        cut = s.rfind(" in ", 1, colon - 1)
        if cut >= 1:
            return (s[:cut], s[cut + 4:colon], num(line), None)
    return (s or None, None, None, None)


# --- Device Frame: ------------------------------------------------------------------------------

_FILE_LINE_COLON = re.compile(r"\d+:")


def _device_old(s: str) -> Frame | None:
    """Legacy ``file:line:func (func : 0x..)``."""
    t = s.rfind(" : 0x")
    if t < 0 or not s.endswith(")") or len(s) - 1 <= t + 5 or not _all_hex(s[t + 5:-1]):
        return None
    # the file is the shortest prefix followed by ":<digits>:", the function the shortest run
    # after it followed by " (" with something before " : 0x"
    pos = 1
    while True:
        j = s.find(":", pos, t)
        if j < 0:
            return None
        m = _FILE_LINE_COLON.match(s, j + 1)
        if m is not None:
            k = m.end()
            q = s.find(" (", k + 1, t - 1)
            if q < 0:
                return None
            return Frame(s[k:q], s[:j], num(s[j + 1:k - 1]), None, hexnum(s[t + 5:-1]))
        pos = j + 1


def parse_device_frame(text: str) -> Frame:
    """A ``Device Frame:`` line's frame (new layout, legacy ``file:line:func (func : 0x..)``, ``[0x..]``)."""
    s = text.strip()
    old = _device_old(s)
    if old is not None:
        return old
    if s.endswith("]") and " in " not in s:
        i = s.rfind("[")
        if i >= 1 and s.startswith("[0x", i) and len(s) - 1 > i + 3 and _all_hex(s[i + 3:-1]):
            return Frame(s[:i].rstrip() or None, None, None, None, hexnum(s[i + 3:-1]))
    func, file, line, pc = parse_location(s)
    return Frame(func, file, line, None, pc)


# --- Host Frame: --------------------------------------------------------------------------------

_MODULE_TOKEN = re.compile(r"(\S+) \(")


def _host_old(s: str) -> Frame | None:
    """Oldest layout: ``/usr/lib/libcuda.so (cuLaunchKernel + 0x2cd) [0x24c3ad]``."""
    m = _MODULE_TOKEN.match(s)
    if m is None or not s.endswith("]"):
        return None
    module = m.group(1)
    if not ("/" in module or "\\" in module or any(module.find(ext, 1) > 0 for ext in (".so", ".dll", ".exe"))):
        return None
    b = s.rfind("[")
    if b - 2 < m.end() or not s.startswith(") [0x", b - 2) or len(s) - 1 <= b + 3 or not _all_hex(s[b + 3:-1]):
        return None
    inner = s[m.end():b - 2]
    k = inner.rfind(" + 0x")
    if k >= 0 and len(inner) > k + 5 and _all_hex(inner[k + 5:]):
        inner = inner[:k]
    return Frame(inner or None, None, None, module, hexnum(s[b + 3:-1]))


#: where the 2025+ host frame's tail may begin: a run of whitespace, ``in `` after a non-word
#: character, or ``[0x``
_TAIL_START = re.compile(r"(?=(?<!\s)\s|(?<!\w)in |\[0x)")
_PC_BRACKET = re.compile(r"\s*\[0x([0-9a-fA-F]+)\]")
#: ``(pc, module)`` after a frame's function or file
_PcModule = tuple[str | None, str | None]
#: ``(line, pc, module)`` after a ``FILE:``
_Verdict = tuple[str, str | None, str | None]
_BRACKET = re.compile(r"[\[\]]")


class _HostTail:
    """The 2025+ layout ``FUNC[ in FILE:LINE][ [0xPC]][ in MODULE]``, FUNC as short as possible.

    This is what ``^(.*?)(?:\\s*\\bin ([^\\[\\]]+?):(\\d+))?(?:\\s*\\[0x(hex)\\])?(?:\\s+in (.+?))?\\s*$``
    matched, computed without backtracking. Split points are tried left to right; inside a run of
    spaces only its first position can give a different answer. A file ends at the first ``:``
    (after its start, before any bracket) whose digits and rest parse; whether a ``:`` does is
    decided once, and the pointer over them only moves forward because later split points start
    their file later. So the work is linear in the line.
    """

    def __init__(self, s: str) -> None:
        self.s = s
        self.n = len(s)
        self.colon = -1  # the first ":" not yet ruled out (n: none left)
        self.verdicts: dict[int, _Verdict | None] = {}
        self.bracket_from = self.bracket_at = -1

    def after_pc(self, q: int) -> _PcModule | None:
        """``[0xPC]`` and/or `` in MODULE`` then the end, from q: ``(pc, module)`` or None."""
        s, n = self.s, self.n
        m = _PC_BRACKET.match(s, q)
        pc = None
        if m is not None:
            q, pc = m.end(), m.group(1)
        if q == n:
            return (pc, None)
        if s[q].isspace():
            r = _WS.match(s, q).end()  # type: ignore[union-attr]  # \s* always matches
            if s.startswith("in ", r) and r + 3 < n:
                return (pc, s[r + 3:])
        return None

    def _verdict(self, e: int) -> _Verdict | None:
        """``(line, pc, module)`` when the ``:`` at e ends a file, else None."""
        if e not in self.verdicts:
            m = _DIGITS.match(self.s, e + 1)
            rest = self.after_pc(m.end()) if m is not None else None
            self.verdicts[e] = None if rest is None or m is None else (m.group(0),) + rest
        return self.verdicts[e]

    def _first_bracket(self, pos: int) -> int:
        if not self.bracket_from <= pos <= self.bracket_at:
            m = _BRACKET.search(self.s, pos)
            self.bracket_from, self.bracket_at = pos, (m.start() if m is not None else self.n)
        return self.bracket_at

    def file_line(self, f0: int) -> tuple[str, str, str | None, str | None] | None:
        """``FILE:LINE`` and the rest with FILE starting at f0: ``(file, line, pc, module)`` or None."""
        s, e = self.s, self.colon
        if e >= self.n:
            return None
        if e < f0 + 1:
            e = s.find(":", f0 + 1)
        while e >= 0 and self._verdict(e) is None:
            e = s.find(":", e + 1)
        self.colon = e if e >= 0 else self.n
        if e < 0 or self._first_bracket(f0) < e:
            return None
        verdict = self.verdicts[e]
        assert verdict is not None  # the loop above stops only on a ':' with a verdict
        return (s[f0:e], *verdict)

    def split(self) -> tuple[str, str | None, str | None, str | None, str | None]:
        """``(func, file, line, pc, module)`` as strings."""
        s = self.s
        for m in _TAIL_START.finditer(s):
            p = m.start()
            r = _WS.match(s, p).end()  # type: ignore[union-attr]  # \s* always matches
            if s.startswith("in ", r) and (r == 0 or not (s[r - 1].isalnum() or s[r - 1] == "_")):
                found = self.file_line(r + 3)
                if found is not None:
                    return (s[:p], *found)
            if s[p] != "i":
                rest = self.after_pc(p)
                if rest is not None:
                    return (s[:p], None, None, *rest)
        return (s, None, None, None, None)


def parse_host_frame(text: str) -> Frame:
    """A ``Host Frame:`` line's frame, in the oldest, 2021-2024 or 2025+ layout (Python frames too)."""
    s = text.strip()
    old = _host_old(s)
    if old is not None:
        return old
    head, file, line, pc, module = _HostTail(s).split()
    func: str | None = head.strip() or None
    if func and module is None and ("/" in func or "\\" in func) and file is None:
        module, func = func, None  # legacy "Host Frame:./app [0x3a39]" names the module
    return Frame(func, file, num(line), module, hexnum(pc))


__all__ = ["parse_location", "parse_device_frame", "parse_host_frame", "num", "hexnum",
           "MAX_DIGITS", "MAX_HEX_DIGITS"]
