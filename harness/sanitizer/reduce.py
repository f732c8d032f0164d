"""Reduce thousands of sanitizer records to a short list of findings. Pure.

Records are grouped by (tool, kernel, location, error kind): the 1,001 ``Invalid __global__ read``
records of one stream-ordered race in ``scale`` at faults.cu:26 are one finding with a count, the
range of threads and blocks that hit it, the range of addresses touched, one whole example and its
host stack. Findings are ordered so that the first one is the headline: the earliest device-side
error in the log (as the saying goes, the first ``Invalid write`` block is the offending kernel);
API errors, leaks and host-side reports follow, because an API error after a kernel fault (error
719 on every later call) is a consequence, not a cause.

:class:`Reducer` takes records one at a time (``add``) and keeps only what the findings need, so a
log streamed through it costs memory per finding, not per record: the first record of each group,
its counts and ranges, and the distinct threads and blocks (exactly up to 65,536 per range, then
counted in fixed memory).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from faulthunt.records.sanitizer import (
    API_ERROR, DEVICE_KINDS, HARDWARE_EXCEPTION, HOST_API_ACCESS, LEAK, MALLOC_FREE, MEMORY_ACCESS,
    RACE, SYNC_ERROR, UNINITIALIZED_READ, UNUSED_MEMORY, Finding, Frame, Range3, SanitizerRecord,
)
from faulthunt.sanitizer.demangle import demangle_many, is_mangled, short_name

#: host frames that say nothing about the caller (driver, runtime, interpreter, libc internals)
_NOISE_MODULES = ("libcuda.so", "libcudart", "libc.so", "cydriver", "_launcher.cpython", "driver.cpython")
_NOISE_FUNCS = ("_PyEval_", "PyEval_", "_PyObject_", "_PyRun_", "Py_RunMain", "Py_BytesMain",
                "__libc_start_main", "_start", "cuLaunchKernel", "cudaLaunchKernel", "libcudart_static_",
                "__cudaLaunchKernel", "__device_stub__")


def error_label(r: SanitizerRecord) -> str:
    """The error kind in words, the part of the group key that says what went wrong."""
    if r.kind == MEMORY_ACCESS:
        if r.space and r.access:
            label = f"Invalid {r.space} {r.access}"
        else:
            label = r.message.split(" of size")[0]
        return f"{label} ({r.problem})" if r.problem else label
    if r.kind == UNINITIALIZED_READ:
        return f"Uninitialized {r.space or ''} read".replace("  ", " ")
    if r.kind == API_ERROR:
        err = r.error or "API error"
        code = f" ({r.error_code})" if r.error_code is not None else ""
        return f"{err}{code} on {r.api or '?'}"
    if r.kind == LEAK:
        return "Leak" + (f" ({r.problem})" if r.problem else "")
    if r.kind == RACE:
        if r.hazard:
            return f"{r.hazard} hazard ({r.space or 'shared'})"
        other = (r.race_other or "").split(" ")[0]
        return f"{(r.access or '?').capitalize()}-{other or '?'} race"
    if r.kind == SYNC_ERROR:
        # text "Barrier error detected. Divergent thread(s) in warp." and XML "Barrier error" +
        # <type> read the same
        base = "Barrier error" if r.message.startswith("Barrier error") else r.message.rstrip(".")
        return f"{base}: {r.problem}" if r.problem and r.problem not in base else base
    if r.kind == MALLOC_FREE:
        return f"Malloc/Free error: {r.problem}" if r.problem else "Malloc/Free error"
    if r.kind == HARDWARE_EXCEPTION:
        return r.message.rstrip(".")
    if r.kind == HOST_API_ACCESS:
        return "Host API memory access error"
    if r.kind == UNUSED_MEMORY:
        return f"Unused {r.space or ''} memory".replace("  ", " ")
    return r.message[:80]


def _useful(frame: Frame) -> bool:
    if frame.is_python:
        return True
    if frame.func and frame.func.startswith(_NOISE_FUNCS):
        return False
    if frame.module and any(n in frame.module for n in _NOISE_MODULES) and not frame.func:
        return False
    if frame.module and ("libcuda.so" in frame.module or "libc.so" in frame.module):
        return False
    return bool(frame.func)


_CUDA_API = re.compile(r"^(?:\w+ )?(?:cuda[A-Z]|cu[A-Z])\w*")


def host_site(r: SanitizerRecord) -> str | None:
    """Where a host-side record (API error, leak) comes from: the first useful frame that is not
    the CUDA API itself (``cudaMalloc``, ``cudaError cudaMalloc<int>(...)``), so two leaks from two
    call sites are two findings."""
    fallback = None
    for frame in r.host_frames:
        if _useful(frame):
            if frame.func and not frame.is_python and _CUDA_API.match(frame.func):
                fallback = fallback or frame.render()
                continue
            return frame.render()
    return fallback


def _site(r: SanitizerRecord) -> str:
    if r.file:
        return f"{r.file}:{r.line}"
    if r.kind in DEVICE_KINDS and r.function:
        return f"{r.function}+0x{r.pc:x}" if r.pc is not None else r.function
    return host_site(r) or "?"


#: distinct points a range holds exactly; past this it counts them in a fixed bitmap
EXACT_POINTS = 1 << 16
_BITMAP_BITS = 1 << 20


_M64 = (1 << 64) - 1


def _bit(p: tuple[int, int, int]) -> int:
    """The bitmap position of a point: a splitmix64 mix (Python's tuple hash of small ints is too
    regular in its low bits: the estimate came out 8-30% low with it)."""
    h = (p[0] * 0x9E3779B97F4A7C15 + p[1] * 0xC2B2AE3D27D4EB4F + p[2] * 0x165667B19E3779F9) & _M64
    h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _M64
    return (h ^ (h >> 31)) >> 44


class _Points:
    """Distinct (x, y, z) points: exact in a set up to EXACT_POINTS, then a bounded estimate.

    Past the bound the set is folded into a 2**20-bit bitmap (128 KiB) and the count estimated by
    linear counting (-m ln(zero bits / m); within 0.5% up to millions of points), while the
    bounding box stays exact.
    """

    __slots__ = ("points", "lo", "hi", "bits")

    def __init__(self) -> None:
        self.points: set[tuple[int, int, int]] = set()
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.bits: bytearray | None = None

    def add(self, p: tuple[int, int, int]) -> None:
        if self.bits is None:
            self.points.add(p)
            if len(self.points) > EXACT_POINTS:
                self.fold()
            return
        h = _bit(p)
        self.bits[h >> 3] |= 1 << (h & 7)
        lo, hi = self.lo, self.hi
        for axis in range(3):
            v = p[axis]
            if v < lo[axis]:
                lo[axis] = v
            elif v > hi[axis]:
                hi[axis] = v

    def fold(self) -> None:
        """From the exact set to the bitmap (the bounding box taken from the set)."""
        xs, ys, zs = zip(*self.points)
        self.lo = [min(xs), min(ys), min(zs)]
        self.hi = [max(xs), max(ys), max(zs)]
        self.bits = bytearray(_BITMAP_BITS // 8)
        points, self.points = self.points, set()
        for p in points:
            h = _bit(p)
            self.bits[h >> 3] |= 1 << (h & 7)

    def range(self) -> Range3 | None:
        if self.bits is None:
            if not self.points:
                return None
            xs, ys, zs = zip(*self.points)
            return Range3((min(xs), min(ys), min(zs)), (max(xs), max(ys), max(zs)), len(self.points))
        ones = sum(bin(b).count("1") for b in self.bits)
        zeros = max(_BITMAP_BITS - ones, 1)
        estimate = round(-_BITMAP_BITS * math.log(zeros / _BITMAP_BITS))
        lo, hi = self.lo, self.hi
        return Range3((lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2]), max(estimate, EXACT_POINTS), exact=False)


class _Group:
    __slots__ = ("first", "count", "threads", "blocks", "lo", "hi", "size", "sizes_differ")

    def __init__(self, first: SanitizerRecord) -> None:
        self.first = first
        self.count = 0
        self.threads = _Points()
        self.blocks = _Points()
        self.lo: int | None = None
        self.hi: int | None = None
        self.size: int | None = None
        self.sizes_differ = False

    def add(self, r: SanitizerRecord) -> None:
        self.count += 1
        thread, block = r.thread, r.block
        # (_Points.add inlined for its common case: the exact set)
        if thread is not None:
            pts = self.threads
            if pts.bits is None:
                pts.points.add(thread)
                if len(pts.points) > EXACT_POINTS:
                    pts.fold()
            else:
                pts.add(thread)
        if block is not None:
            pts = self.blocks
            if pts.bits is None:
                pts.points.add(block)
                if len(pts.points) > EXACT_POINTS:
                    pts.fold()
            else:
                pts.add(block)
        size = r.size
        if size is not None and size != self.size:
            if self.size is None:
                self.size = size
            else:
                self.sizes_differ = True
        address = r.address
        if address is not None:
            end = address + max(size or 1, 1) - 1
            if self.lo is None or address < self.lo:
                self.lo = address
            if self.hi is None or end > self.hi:
                self.hi = end


def order_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Device-side findings first, each part in the order it appeared (stable: test order kept)."""
    return sorted(findings, key=lambda f: (f.kind not in DEVICE_KINDS,))


class Reducer:
    """Findings built incrementally: ``add`` each record as it is read, then ``findings()``."""

    def __init__(self, *, nodeid: str | None = None) -> None:
        self.nodeid = nodeid
        self.records = 0
        self._groups: dict[tuple[Any, ...], _Group] = {}
        #: the group of a memory access error by the fields its key is made of (most records are
        #: these; the key's strings are then built once per distinct combination, not per record)
        self._access: dict[tuple[Any, ...], _Group] = {}

    def add(self, r: SanitizerRecord) -> None:
        self.records += 1
        if r.kind == MEMORY_ACCESS and r.file and r.space and r.access:
            short = (r.tool, r.kernel, r.file, r.line, r.space, r.access, r.problem)
            g = self._access.get(short)
            if g is None:
                g = self._group(r)
                if len(self._access) >= 4096:
                    self._access.clear()
                self._access[short] = g
        else:
            g = self._group(r)
        g.add(r)

    def _group(self, r: SanitizerRecord) -> _Group:
        key = (r.tool, r.kind, r.kernel, _site(r), error_label(r))
        g = self._groups.get(key)
        if g is None:
            g = self._groups[key] = _Group(r)
        return g

    def add_all(self, records: Iterable[SanitizerRecord]) -> Reducer:
        add = self.add
        for r in records:
            add(r)
        return self

    def findings(self) -> list[Finding]:
        """The findings so far, the headline first."""
        groups = self._groups
        names = demangle_many(k for k in (g.first.kernel for g in groups.values()) if k and is_mangled(k))
        findings = []
        for key, g in groups.items():
            ex = g.first
            full = names.get(ex.kernel, ex.kernel) if ex.kernel else None
            host = tuple(f.render() for f in ex.host_frames if _useful(f)) or tuple(
                f.render() for f in ex.host_frames)
            findings.append(Finding(
                tool=ex.tool, kind=ex.kind, error=key[4], kernel=short_name(full), kernel_full=full,
                function=short_name(ex.function), file=ex.file, line=ex.line, access=ex.access,
                size=None if g.sizes_differ else ex.size,
                address_range=(g.lo, g.hi) if g.lo is not None and g.hi is not None else None,
                count=g.count, threads=g.threads.range(), blocks=g.blocks.range(), example=ex,
                host_stack=host, nodeid=self.nodeid, first_index=ex.index))
        return order_findings(findings)


def reduce_records(records: Iterable[SanitizerRecord], *, nodeid: str | None = None) -> list[Finding]:
    """Group records into findings; the first finding is the headline (the offending kernel)."""
    return Reducer(nodeid=nodeid).add_all(records).findings()


def headline(findings: Sequence[Finding]) -> Finding | None:
    """The offending kernel: the first device-side finding (else the first finding)."""
    return findings[0] if findings else None


__all__ = ["Reducer", "reduce_records", "order_findings", "headline", "error_label", "host_site"]
