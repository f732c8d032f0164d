"""torch: ``torch.cuda.memory.CUDAPluggableAllocator`` over a tiny C trampoline into Python.

torch loads pluggable allocators from a shared library by symbol name, so guard mode compiles one
(:data:`SHIM_SOURCE`, plain C, no CUDA headers) when a C compiler is present: its two entry points
call function pointers that Python sets through ctypes. Without a compiler torch is not guarded,
and guard mode says so.

The pluggable allocator replaces torch's caching allocator for the whole process (torch allows one
allocator, chosen before the first CUDA tensor): unsampled allocations go to the driver's
stream-ordered pool (``cuMemAllocAsync``/``cuMemFreeAsync`` on torch's stream, what
``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`` does), and torch's memory statistics
(``torch.cuda.memory_allocated`` and friends) are not available from a pluggable allocator. Leave
torch out with ``only=`` in the guard spec when a suite depends on them.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faulthunt.guard.allocator import GuardAllocator

NAME = "torch"
ALLOC_SYMBOL = "faulthunt_guard_malloc"
FREE_SYMBOL = "faulthunt_guard_free"

SHIM_SOURCE = r"""
/* faulthunt guard mode: torch CUDAPluggableAllocator entry points that call back into Python. */
#include <stddef.h>
typedef void *(*fh_alloc_fn)(size_t, int, void *);
typedef void (*fh_free_fn)(void *, size_t, int, void *);
static fh_alloc_fn alloc_cb;
static fh_free_fn free_cb;
void faulthunt_guard_set(fh_alloc_fn a, fh_free_fn f) { alloc_cb = a; free_cb = f; }
void *faulthunt_guard_malloc(size_t size, int device, void *stream) {
    return alloc_cb ? alloc_cb(size, device, stream) : NULL;
}
void faulthunt_guard_free(void *ptr, size_t size, int device, void *stream) {
    if (free_cb) free_cb(ptr, size, device, stream);
}
"""

ALLOC_T = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)
FREE_T = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p)


def find_compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return shutil.which(cc)
    return None


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "faulthunt"


def build_shim(compiler: str, directory: Path | None = None) -> Path:
    """Compile the trampoline once per source text (kept, named by its hash); returns the .so."""
    directory = directory or cache_dir()
    digest = hashlib.sha256(SHIM_SOURCE.encode()).hexdigest()[:16]
    out = directory / f"guard-torch-{digest}.so"
    if out.exists():
        return out
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        src = Path(tmp) / "shim.c"
        src.write_text(SHIM_SOURCE)
        so = Path(tmp) / "shim.so"
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(so), str(src)],
                       check=True, capture_output=True, timeout=60)
        os.replace(so, out)  # atomic: workers building at once each end with a whole file
    return out


def make_callbacks(guard: GuardAllocator, fallback_alloc: Callable[[int, int, int], int],
                   fallback_free: Callable[[int, int, int, int], None]) -> tuple[Any, Any]:
    """The ctypes callbacks torch reaches through the shim (keep references to them)."""

    def alloc(size: int, device: int, stream: int | None) -> int:
        try:
            if guard.sample(size):
                slot = guard.allocate(size, NAME, device)
                if slot is not None:
                    return slot.address
            return fallback_alloc(size, device, stream or 0)
        except Exception:  # noqa: BLE001 - never raise into torch's C++ allocator: NULL is its out-of-memory
            return 0  # NULL: torch reports an out-of-memory error

    def free(ptr: int | None, size: int, device: int, stream: int | None) -> None:
        if not ptr:
            return
        try:
            if not guard.free(ptr):
                fallback_free(ptr, size, device, stream or 0)
        except Exception:  # noqa: BLE001 - never raise into torch's C++ allocator
            pass

    return ALLOC_T(alloc), FREE_T(free)


def driver_fallbacks(cu: Any) -> tuple[Callable[[int, int, int], int], Callable[[int, int, int, int], None]]:
    """Unsampled allocations: the driver's stream-ordered pool on torch's stream."""

    def alloc(size: int, device: int, stream: int) -> int:
        err, ptr = cu.cuMemAllocAsync(size, cu.CUstream(stream))
        return int(ptr) if int(err) == 0 else 0

    def free(ptr: int, size: int, device: int, stream: int) -> None:
        cu.cuMemFreeAsync(cu.CUdeviceptr(ptr), cu.CUstream(stream))

    return alloc, free


class TorchGuard:
    name = NAME

    def __init__(self, lib: Any, callbacks: tuple[Any, Any], so: Path) -> None:
        self.lib, self.callbacks, self.so = lib, callbacks, so  # the callbacks must stay alive

    def stop(self) -> None:
        pass  # torch cannot swap an allocator that is in use


def start(guard: GuardAllocator) -> TorchGuard | None:
    """Make torch allocate through the shim (right after ``import torch``). Raises RuntimeError
    with the reason when torch cannot be guarded."""
    compiler = find_compiler()
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or clang) to build the CUDAPluggableAllocator "
                           "shim: torch is not guarded")
    import torch

    from faulthunt.guard.driver import import_driver

    so = build_shim(compiler)
    lib = ctypes.CDLL(str(so))
    callbacks = make_callbacks(guard, *driver_fallbacks(import_driver()))
    lib.faulthunt_guard_set(*callbacks)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(str(so), ALLOC_SYMBOL, FREE_SYMBOL)
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as exc:
        raise RuntimeError(f"torch's allocator is already in use ({exc}): torch is not guarded") from None
    return TorchGuard(lib, callbacks, so)
