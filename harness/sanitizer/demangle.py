"""Readable kernel names: C++ (Itanium ABI) demangling and numba-cuda names.

compute-sanitizer demangles by default (``--demangle full``), so most names arrive as
``max_reduce_off_by_one(const float *, float *, int)``; logs made with ``--demangle no``, legacy
cuda-memcheck logs and host frames such as ``__device_stub__Z21max_reduce_off_by_onePKfPfi`` still
carry mangled names. :func:`demangle_many` hands those to ``c++filt`` (binutils) in one batch when
it is installed and falls back to a small demangler for the common cases otherwise.

numba-cuda kernels demangle to ``__main__::max_reduce[abi:v1,cw51c...](Array<float, (int)1, C,
mutable, aligned>, ...)`` (seen on the H200 with numba-cuda 0.30.4; older numba prepended a
``cudapy::`` namespace); :func:`short_name` reads that as the Python name ``__main__.max_reduce``.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from collections.abc import Iterable

_ABI_TAG = re.compile(r"\[abi:[^\]]*\]")
_CLONE = re.compile(r"^\[clone (?P<parent>.+?)\]\s+(?P<func>.+)$")
_MANGLED = re.compile(r"(?:__device_stub__)?_Z[A-Za-z0-9_$.]+")


def is_mangled(name: str) -> bool:
    return name.startswith("_Z") or name.startswith("__device_stub__Z")


@functools.lru_cache(maxsize=1)
def _cxxfilt() -> str | None:
    return shutil.which("c++filt")


def demangle_many(names: Iterable[str]) -> dict[str, str]:
    """Demangle every mangled name in ``names``; returns ``{name: demangled}`` for all of them.

    One ``c++filt`` process for the whole batch (the reduction of a 100,000-record log has a few
    distinct names, not 100,000). Names that are not mangled map to themselves.
    """
    out: dict[str, str] = {}
    todo: list[str] = []
    for name in names:
        if name in out:
            continue
        if is_mangled(name):
            cached = _CACHE.get(name)
            if cached is not None:
                out[name] = cached
            else:
                todo.append(name)
                out[name] = name
        else:
            out[name] = name
    if todo:
        results = _run_cxxfilt(todo)
        for name, result in zip(todo, results):
            _CACHE[name] = result
            out[name] = result
    return out


_CACHE: dict[str, str] = {}


def _run_cxxfilt(names: list[str]) -> list[str]:
    # nvcc's host stub of kernel _Z5scalePfif is __device_stub__Z5scalePfif
    stubs = ["_" + n[len("__device_stub__"):] if n.startswith("__device_stub__") else n for n in names]
    exe = _cxxfilt()
    if exe is not None:
        try:
            proc = subprocess.run([exe], input="\n".join(stubs) + "\n", capture_output=True,
                                  text=True, timeout=10, check=False)
            lines = proc.stdout.splitlines()
            if proc.returncode == 0 and len(lines) == len(stubs):
                return lines
        except (OSError, subprocess.SubprocessError):
            pass
    return [fallback_demangle(s) for s in stubs]


def demangle(name: str) -> str:
    """Demangle one name (``c++filt`` when present, else :func:`fallback_demangle`)."""
    return demangle_many([name])[name]


# --- the fallback: enough of the Itanium ABI for kernel names ------------------------------------

_BUILTIN = {
    "v": "void", "w": "wchar_t", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char",
    "s": "short", "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long",
    "m": "unsigned long", "x": "long long", "y": "unsigned long long", "n": "__int128",
    "o": "unsigned __int128", "f": "float", "d": "double", "e": "long double", "z": "...",
    "Dh": "__half", "Dn": "decltype(nullptr)",
}


class _Fail(Exception):
    pass


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.subs: list[str] = []
        self.targs: list[str] = []

    def peek(self, n: int = 1) -> str:
        return self.s[self.i:self.i + n]

    def take(self, n: int = 1) -> str:
        if self.i + n > len(self.s):
            raise _Fail
        out = self.s[self.i:self.i + n]
        self.i += n
        return out

    def number(self) -> int:
        m = re.match(r"\d+", self.s[self.i:])
        if not m:
            raise _Fail
        self.i += len(m.group(0))
        return int(m.group(0))

    def source_name(self) -> str:
        n = self.number()
        name = self.take(n)
        if name.startswith("_GLOBAL__N"):
            name = "(anonymous namespace)"
        return name

    def abi_tags(self, name: str) -> str:
        while self.peek() == "B":
            self.take()
            name += f"[abi:{self.source_name()}]"
        return name

    def template_args(self) -> str:
        self.take()  # I
        args = []
        while self.peek() != "E":
            if not self.peek():
                raise _Fail
            if self.peek() == "L":
                self.take()
                typ = self.type_()
                m = re.match(r"n?\d+", self.s[self.i:])
                if not m:
                    raise _Fail
                self.i += len(m.group(0))
                self.take()  # E
                val = m.group(0).replace("n", "-")
                args.append(val if typ == "int" else f"({typ}){val}")
            else:
                args.append(self.type_())
        self.take()
        self.targs = args
        return "<" + ", ".join(args) + ">"

    def unqualified(self) -> str:
        if self.peek().isdigit():
            return self.abi_tags(self.source_name())
        raise _Fail

    def nested(self) -> str:
        self.take()  # N
        quals = ""
        while self.peek() in ("K", "V", "r"):
            quals += {"K": " const", "V": " volatile", "r": " restrict"}[self.take()]
        parts: list[str] = []
        while self.peek() != "E":
            if not self.peek():
                raise _Fail
            if self.peek() == "I":
                parts[-1] += self.template_args()
            elif self.peek() == "S":
                parts.append(self.substitution())
            else:
                parts.append(self.unqualified())
            self.subs.append("::".join(parts))
        self.take()
        return "::".join(parts) + quals

    def substitution(self) -> str:
        self.take()  # S
        std = {"t": "std", "a": "std::allocator", "s": "std::string"}
        if self.peek() in std:
            return std[self.take()]
        m = re.match(r"([0-9A-Z]*)_", self.s[self.i:])
        if not m:
            raise _Fail
        self.i += len(m.group(0))
        idx = 0 if not m.group(1) else int(m.group(1), 36) + 1
        if idx >= len(self.subs):
            raise _Fail
        return self.subs[idx]

    def type_(self) -> str:
        c = self.peek()
        if c in ("P", "R", "O"):
            self.take()
            inner = self.type_()
            out = inner + {"P": " *", "R": " &", "O": " &&"}[c]
            self.subs.append(out)
            return out
        if c in ("K", "V"):
            self.take()
            inner = self.type_()
            out = ("const " if c == "K" else "volatile ") + inner
            self.subs.append(out)
            return out
        if len(self.peek(2)) == 2 and self.peek(2) in _BUILTIN:
            return _BUILTIN[self.take(2)]
        if c == "T":
            m = re.match(r"T(\d*)_", self.s[self.i:])
            if not m:
                raise _Fail
            self.i += len(m.group(0))
            idx = int(m.group(1)) + 1 if m.group(1) else 0
            if idx >= len(self.targs):
                raise _Fail
            return self.targs[idx]
        if c in _BUILTIN:
            self.take()
            return _BUILTIN[c]
        if c == "N":
            out = self.nested()
            self.subs.append(out)
            return out
        if c == "S":
            out = self.substitution()
            if self.peek() == "I":
                out += self.template_args()
            return out
        if c.isdigit():
            out = self.source_name()
            if self.peek() == "I":
                self.subs.append(out)
                out += self.template_args()
            self.subs.append(out)
            return out
        raise _Fail

    def encoding(self) -> str:
        if self.take(2) != "_Z":
            raise _Fail
        if self.peek() == "N":
            name = self.nested()
        else:
            name = self.unqualified()
            if self.peek() == "I":
                self.subs.append(name)
                name += self.template_args()
        params: list[str] = []
        templated = name.endswith(">")
        if templated and self.i < len(self.s):
            self.type_()  # the return type of a template function is mangled first; not printed
        while self.i < len(self.s):
            if self.peek() == ".":
                break  # clone suffixes (.cold, .constprop.0)
            params.append(self.type_())
        if params == ["void"]:
            params = []
        return f"{name}({', '.join(params)})"


def fallback_demangle(name: str) -> str:
    """A small Itanium demangler for kernel-shaped names; returns ``name`` unchanged on failure."""
    try:
        return _Parser(name).encoding()
    except (_Fail, IndexError, ValueError):
        return name


# --- short names ---------------------------------------------------------------------------------

def strip_params(name: str) -> str:
    """``scale(float *, int, float)`` -> ``scale``; ``Foo::operator()(int) const`` -> ``Foo::operator()``."""
    text = name.strip()
    for suffix in (" const", " volatile", " &", " &&"):
        if text.endswith(")" + suffix):
            text = text[: -len(suffix)]
    if not text.endswith(")"):
        return text
    depth = 0
    for pos in range(len(text) - 1, -1, -1):
        ch = text[pos]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                head = text[:pos]
                return head if head else text
    return text


def _strip_return_type(name: str) -> str:
    depth = 0
    cut = -1
    for pos, ch in enumerate(name):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        elif ch == " " and depth == 0:
            cut = pos
    if cut < 0:
        return name
    rest = name[cut + 1:]
    # "operator new" and friends: the space belongs to the name
    if name[:cut].endswith("operator"):
        return name
    return rest or name


def is_numba(name: str) -> bool:
    """A numba-cuda kernel name (numba tags every specialization with ``[abi:...]``)."""
    return "[abi:" in name


def short_name(name: str | None) -> str | None:
    """A readable kernel name: no parameters, no return type; numba names as Python dotted names.

    >>> short_name("max_reduce_off_by_one(const float *, float *, int)")
    'max_reduce_off_by_one'
    >>> short_name("__main__::max_reduce[abi:v1,cw51c](Array<float, (int)1, C, mutable, aligned>)")
    '__main__.max_reduce'
    """
    if not name:
        return name
    text = name.strip()
    clone = _CLONE.match(text)
    if clone:
        text = clone.group("func")
    if is_mangled(text):
        text = demangle(text)
    text = strip_params(text)
    if is_numba(text):
        text = _ABI_TAG.sub("", text)
        if text.startswith("cudapy::"):
            text = text[len("cudapy::"):]
        return text.replace("::", ".")
    return _strip_return_type(text)


def clone_parent(name: str | None) -> str | None:
    """The kernel a device function was cloned into: ``[clone myKernel(int *)] outlineSync()``."""
    if not name:
        return None
    m = _CLONE.match(name.strip())
    return m.group("parent") if m else None
