"""Reduce thousands of sanitizer records to a short list of findings. Pure.

Records are grouped by (tool, kernel, location, error kind): the 1,001 ``Invalid __global__ read``
records of one stream-ordered race in ``scale`` at faults.cu:26 are one finding with a count, the
range of threads and blocks that hit it, the range of addresses touched, one whole example and its
host stack. Findings are ordered so that the first one is the headline: the earliest device-side
error in the log (as the saying goes, the first ``Invalid write`` block is the offending kernel);
API errors, leaks and host-side reports follow, because an API error after a kernel fault (error
719 on every later call) is a consequence, not a cause.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

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


def _range(points: set[tuple[int, int, int]]) -> Range3 | None:
    if not points:
        return None
    xs, ys, zs = zip(*points)
    return Range3((min(xs), min(ys), min(zs)), (max(xs), max(ys), max(zs)), len(points))


class _Group:
    __slots__ = ("first", "count", "threads", "blocks", "lo", "hi", "sizes")

    def __init__(self, first: SanitizerRecord) -> None:
        self.first = first
        self.count = 0
        self.threads: set[tuple[int, int, int]] = set()
        self.blocks: set[tuple[int, int, int]] = set()
        self.lo: int | None = None
        self.hi: int | None = None
        self.sizes: set[int] = set()

    def add(self, r: SanitizerRecord) -> None:
        self.count += 1
        if r.thread is not None:
            self.threads.add(r.thread)
        if r.block is not None:
            self.blocks.add(r.block)
        if r.size is not None:
            self.sizes.add(r.size)
        if r.address is not None:
            end = r.address + max(r.size or 1, 1) - 1
            self.lo = r.address if self.lo is None else min(self.lo, r.address)
            self.hi = end if self.hi is None else max(self.hi, end)


def order_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Device-side findings first, each part in the order it appeared (stable: test order kept)."""
    return sorted(findings, key=lambda f: (f.kind not in DEVICE_KINDS,))


def reduce_records(records: Iterable[SanitizerRecord], *, nodeid: str | None = None) -> list[Finding]:
    """Group records into findings; the first finding is the headline (the offending kernel)."""
    groups: dict[tuple, _Group] = {}
    order: list[tuple] = []
    for r in records:
        key = (r.tool, r.kind, r.kernel, _site(r), error_label(r))
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Group(r)
            order.append(key)
        g.add(r)
    names = demangle_many(k for k in (groups[key].first.kernel for key in order) if k and is_mangled(k))
    findings = []
    for key in order:
        g = groups[key]
        ex = g.first
        full = names.get(ex.kernel, ex.kernel) if ex.kernel else None
        host = tuple(f.render() for f in ex.host_frames if _useful(f)) or tuple(
            f.render() for f in ex.host_frames)
        findings.append(Finding(
            tool=ex.tool, kind=ex.kind, error=key[4], kernel=short_name(full), kernel_full=full,
            function=short_name(ex.function), file=ex.file, line=ex.line, access=ex.access,
            size=ex.size if len(g.sizes) <= 1 else None,
            address_range=(g.lo, g.hi) if g.lo is not None and g.hi is not None else None,
            count=g.count, threads=_range(g.threads), blocks=_range(g.blocks), example=ex,
            host_stack=host, nodeid=nodeid, first_index=ex.index))
    return order_findings(findings)


def headline(findings: Sequence[Finding]) -> Finding | None:
    """The offending kernel: the first device-side finding (else the first finding)."""
    return findings[0] if findings else None


__all__ = ["reduce_records", "order_findings", "headline", "error_label", "host_site"]
