"""Readable kernel names: C++ (Itanium ABI) demangling and numba-cuda names.

compute-sanitizer demangles by default (``--demangle full``), so most names arrive as
``max_reduce_off_by_one(const float *, float *, int)``; logs made with ``--demangle no``, legacy
cuda-memcheck logs and host frames such as ``__device_stub__Z21max_reduce_off_by_onePKfPfi`` still
carry mangled names. :func:`demangle_many` demangles those in process with the ``cxxfilt`` package,
which calls libstdc++'s own ``abi::__cxa_demangle`` (the code ``c++filt`` runs; libstdc++ is
present wherever CUDA runs). Without the package or the library, names stay mangled and
faulthunt says so once on stderr.

numba-cuda kernels demangle to ``__main__::max_reduce[abi:v1,cw51c...](Array<float, (int)1, C,
mutable, aligned>, ...)`` (seen on the H200 with numba-cuda 0.30.4; older numba prepended a
``cudapy::`` namespace); :func:`short_name` reads that as the Python name ``__main__.max_reduce``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from typing import Any

_CLONE = re.compile(r"^\[clone (?P<parent>.+?)\]\s+(?P<func>.+)$")
#: names longer than this are left as they are (no kernel name is; a bound on the C demangler's work)
MAX_MANGLED = 8192

#: mangled name -> demangled (bounded: cleared when full)
_CACHE: dict[str, str] = {}
_CACHE_MAX = 1024


def is_mangled(name: str) -> bool:
    return name.startswith(("_Z", "__device_stub__Z"))


class _Library:
    """The ``cxxfilt`` module once it has been imported and has worked; why not, otherwise."""

    module: Any = None
    tried = False
    broken: str | None = None
    said = False


def _cxxfilt() -> Any:
    """The ``cxxfilt`` module, imported on first use (it looks up libstdc++ when imported), or None."""
    if not _Library.tried:
        _Library.tried = True
        try:
            import cxxfilt
            _Library.module = cxxfilt
        except (ImportError, OSError, AttributeError) as exc:  # absent; libc/libstdc++ not loadable; no __cxa_demangle
            _Library.broken = f"the cxxfilt package cannot be used ({type(exc).__name__}: {exc})"
    return None if _Library.broken else _Library.module


def _say_once() -> None:
    if not _Library.said:
        _Library.said = True
        print(f"faulthunt: C++ kernel names stay mangled: {_Library.broken}; "
              "fix: pip install cxxfilt (it needs libstdc++, which CUDA already requires)", file=sys.stderr)


def _demangle_one(name: str) -> str:
    if len(name) > MAX_MANGLED or "\x00" in name:
        return name
    lib = _cxxfilt()
    if lib is None:
        _say_once()
        return name
    # nvcc's host stub of kernel _Z5scalePfif is __device_stub__Z5scalePfif
    target = "_" + name[len("__device_stub__"):] if name.startswith("__device_stub__") else name
    try:
        return str(lib.demangle(target))
    except (lib.InvalidName, UnicodeError):
        return name  # not a mangled name after all: shown as printed, as c++filt does
    except Exception as exc:  # noqa: BLE001 - LibraryNotFound, InternalError, a ctypes failure: demangling stops, said once
        _Library.broken = f"libstdc++'s demangler failed ({type(exc).__name__}: {exc})"
        _say_once()
        return name


def demangle_many(names: Iterable[str]) -> dict[str, str]:
    """Demangle every mangled name in ``names``; returns ``{name: demangled}`` for all of them.

    Names that are not mangled, or that do not demangle, map to themselves. The reduction of a
    100,000-record log has a few distinct names, not 100,000; each is demangled once.
    """
    out: dict[str, str] = {}
    for name in names:
        if name in out:
            continue
        if not is_mangled(name):
            out[name] = name
            continue
        cached = _CACHE.get(name)
        if cached is None:
            cached = _demangle_one(name)
            if len(_CACHE) >= _CACHE_MAX:
                _CACHE.clear()
            _CACHE[name] = cached
        out[name] = cached
    return out


def demangle(name: str) -> str:
    """Demangle one name (unchanged when it is not mangled or cannot be demangled)."""
    return demangle_many([name])[name]


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


def _drop_abi_tags(text: str) -> str:
    """``max_reduce[abi:v1][abi:cw51]`` -> ``max_reduce``: each ``[abi:`` up to the next ``]``."""
    out = []
    pos = 0
    while True:
        start = text.find("[abi:", pos)
        end = text.find("]", start + 5) if start >= 0 else -1
        if end < 0:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:start])
        pos = end + 1


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
        text = _drop_abi_tags(text)
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
