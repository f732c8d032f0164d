"""The CUDA C++ flavour: planted.cu compiled at run time with NVRTC through ``cuda.core``.

Launches go through ``cuda.core`` (``Program`` -> ``ObjectCode.get_kernel`` -> ``launch``);
memory goes through the CUDA driver API in ``cuda.bindings`` (``cuMemAlloc``, ``cuMemFree``,
``cuMemAllocAsync``, ``cuMemHostAlloc``) because several bugs are about exactly those calls and
their ordering, and because the ledger's CUPTI callbacks see them as a user's library would.

One process can run several planted kernels, but a memory fault (700, 716) poisons its CUDA
context for good: the bundled suite relies on faulthunt's worker recycling for that, and
``faulthunt.kernels.runner`` runs each kernel in a fresh process.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from faulthunt.kernels.results import BUG, Check, PlantedCudaError, Unavailable

SOURCE = Path(__file__).with_name("planted.cu")
#: hard clock bound of the planted hang, seconds (the kernel ends by itself after this)
HANG_CAP_S = 6.0
#: the planted wild write's offset in ints: 2**36 elements = 256 GiB past the buffer
WILD_OFFSET = 1 << 36
N = 1000  # 4000-byte buffers, as in the H200 captures

try:  # cuda.core >= 0.3 exports at the top level; older releases only under .experimental
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, StreamOptions, launch
except ImportError:  # pragma: no cover - depends on the installed cuda.core
    try:
        from cuda.core.experimental import (Device, LaunchConfig, Program, ProgramOptions,
                                            StreamOptions, launch)
    except ImportError:
        Device = None  # type: ignore[assignment, misc, unused-ignore]  # typed only with the gpu extra
try:
    from cuda.bindings import driver as cu
except ImportError:  # pragma: no cover
    try:
        from cuda import cuda as cu  # type: ignore[no-redef, unused-ignore]  # cuda-python 12.x layout
    except ImportError:
        cu = None  # type: ignore[assignment, unused-ignore]  # typed only with the gpu extra


def available() -> str | None:
    """``None`` if this flavour can run; otherwise why not (with what to install)."""
    if Device is None or cu is None:
        return ("cuda.core / cuda.bindings are not installed "
                "(pip install 'faulthunt[gpu]' or cuda-core cuda-bindings)")
    return None


# --- driver helpers ------------------------------------------------------------------------------

def _ck(result: Any, call: str) -> Any:
    """Unwrap a cuda.bindings ``(CUresult, *values)`` tuple, raising PlantedCudaError on error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        name = getattr(err, "name", None) or f"CUresult {int(err)}"
        _, msg = cu.cuGetErrorString(err)
        raise PlantedCudaError(name, int(err), call,
                               msg.decode() if isinstance(msg, bytes) else str(msg or ""))
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def alloc(nbytes: int) -> int:
    return int(_ck(cu.cuMemAlloc(nbytes), "cuMemAlloc"))


def free(ptr: int) -> None:
    _ck(cu.cuMemFree(ptr), "cuMemFree")


def to_device(ptr: int, host: np.ndarray) -> None:
    host = np.ascontiguousarray(host)
    _ck(cu.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")


def from_device(ptr: int, shape: int, dtype: Any) -> np.ndarray:
    out = np.empty(shape, dtype=dtype)
    _ck(cu.cuMemcpyDtoH(out.ctypes.data, ptr, out.nbytes), "cuMemcpyDtoH")
    return out


def sync() -> None:
    _ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")


@functools.cache
def device() -> Any:
    if available() is not None:
        raise Unavailable(available())
    dev = Device(0)
    dev.set_current()
    return dev


def other_arch(arch: str) -> str:
    """An SASS target the device ``arch`` ('90') cannot run: sm_75, or sm_90 on a 7.x device.

    SASS runs only on its own major version (and later minors of it), so any other major is a gap.
    NVRTC 13 still targets sm_75, so it works on every device CUDA 13 supports.
    """
    return "sm_90" if arch.startswith("7") else "sm_75"


def compile_module(arch: str, *, lineinfo: bool = True) -> Any:
    """planted.cu as a cubin (SASS only, no PTX) for ``sm_<arch>`` / ``arch``."""
    target = arch if arch.startswith("sm_") else f"sm_{arch}"
    opts = ProgramOptions(arch=target, lineinfo=lineinfo, name=SOURCE.name)
    return Program(SOURCE.read_text(), "c++", opts).compile("cubin")


def cubin_sm(data: bytes) -> int | None:
    """The SM version a cubin's SASS is for (75 for sm_75), from its ELF header; None if ``data``
    is not a 64-bit ELF. CUDA keeps it in bits 8-15 of e_flags (the H200's cuobjdump
    --list-elf names the same arch: tests/data/h200/cuobjdump_sm75_elf.txt)."""
    if len(data) < 52 or data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    flags = int.from_bytes(data[48:52], "little")
    return (flags >> 8) & 0xFF


@functools.cache
def _module() -> Any:
    return compile_module(device().arch)


def kernel(name: str) -> Any:
    return _module().get_kernel(name)


def run_kernel(name: str, grid: int, block: int, *args: Any, stream: Any = None) -> None:
    """Launch ``name`` from planted.cu; ints are pointers, numpy scalars are values."""
    dev = device()
    launch(stream or dev.default_stream, LaunchConfig(grid=grid, block=block), kernel(name), *args)


# --- the planted faults ----------------------------------------------------------------------------

def _oob_write(variant: str) -> Check:
    inp = np.linspace(1.0, 2.0, N, dtype=np.float32)
    d_in, d_out = alloc(inp.nbytes), alloc(inp.nbytes)
    to_device(d_in, inp)
    name = "max_reduce_off_by_one" if variant == BUG else "max_reduce"
    # (N + 256) // 256 blocks: 1024 threads, so thread N exists and takes the `i <= n` branch
    run_kernel(name, (N + 256) // 256, 256, d_in, d_out, np.int32(N))
    sync()
    got = from_device(d_out, N, np.float32)
    want = np.maximum(inp, np.concatenate(([inp[0]], inp[:-1])))
    free(d_in)
    free(d_out)
    ok = bool(np.array_equal(got, want))
    return Check(ok, "result correct; nothing saw the write one past the end" if ok and variant == BUG
                 else ("result correct" if ok else "wrong pairwise maxima"))


def _wild_write(variant: str) -> Check:
    d_p = alloc(N * 4)
    _ck(cu.cuMemsetD32(d_p, 0, N), "cuMemsetD32")
    if variant == BUG:
        run_kernel("wild_write", 1, 32, d_p, np.int64(WILD_OFFSET))
    else:
        run_kernel("wild_write_twin", 1, 32, d_p, np.int64(7), np.int64(N))
    sync()  # the bug raises CUDA_ERROR_ILLEGAL_ADDRESS here
    got = from_device(d_p, N, np.int32)
    free(d_p)
    return Check(bool(got[7] == 42), f"p[7] = {int(got[7])}")


def _oob_read(variant: str) -> Check:
    inp = np.arange(N, dtype=np.int32)
    d_in, d_out = alloc(inp.nbytes), alloc(inp.nbytes)
    to_device(d_in, inp)
    run_kernel("read_past_end" if variant == BUG else "read_shifted", 4, 256, d_in, d_out, np.int32(N))
    sync()
    got = from_device(d_out, N, np.int32)
    free(d_in)
    free(d_out)
    # the test checks the in-bounds part only, as a user's test of a shifted window would
    ok = bool(np.array_equal(got[: N - 8], inp[8:]))
    return Check(ok, "in-bounds part correct" if ok else "shifted window wrong")


def _use_after_free(variant: str) -> Check:
    host = np.ones(N, dtype=np.float32)
    neighbour = alloc(N * 4)  # stays alive: keeps the shared 2 MiB page mapped after the free
    d_p = alloc(N * 4)
    to_device(d_p, host)
    try:
        if variant == BUG:
            free(d_p)
            run_kernel("scale", 4, 256, d_p, np.int32(N), np.float32(2.0))
            sync()
            return Check(True, "the kernel ran on freed memory and nothing complained")
        run_kernel("scale", 4, 256, d_p, np.int32(N), np.float32(2.0))
        sync()
        got = from_device(d_p, N, np.float32)
        free(d_p)
        return Check(bool(np.all(got == 2.0)), "scaled before the free")
    finally:
        free(neighbour)


def _stream_ordered(variant: str) -> Check:
    dev = device()
    s_alloc = dev.create_stream(options=StreamOptions(nonblocking=True))
    s_work = dev.create_stream(options=StreamOptions(nonblocking=True))
    d_p = int(_ck(cu.cuMemAllocAsync(N * 4, s_alloc.handle), "cuMemAllocAsync"))
    if variant != BUG:
        s_work.wait(s_alloc.record())          # the allocation happens-before the kernel
    run_kernel("scale", 4, 256, d_p, np.int32(N), np.float32(2.0), stream=s_work)
    if variant != BUG:
        s_alloc.wait(s_work)                   # the kernel happens-before the free
    _ck(cu.cuMemFreeAsync(d_p, s_alloc.handle), "cuMemFreeAsync")
    sync()
    return Check(True, "no ordering between the streams" if variant == BUG
                 else "allocation, kernel and free ordered by events")


def _uninit_read(variant: str) -> Check:
    d_in, d_out = alloc(N * 4), alloc(N * 4)
    if variant != BUG:
        _ck(cu.cuMemsetD32(d_in, 0, N), "cuMemsetD32")
    run_kernel("add_one", 4, 256, d_in, d_out, np.int32(N))
    sync()
    got = from_device(d_out, N, np.int32)
    free(d_in)
    free(d_out)
    ok = bool(np.all(got == 1))
    return Check(ok, "out == in + 1 with in == 0" if ok else "out != 1: the input was never set")


def _block_kernel(name: str, threads: int, want: np.ndarray) -> Check:
    d_out = alloc(threads * 4)
    run_kernel(name, 1, threads, d_out)
    sync()
    got = from_device(d_out, threads, np.int32)
    free(d_out)
    bad = int(np.count_nonzero(got != want))
    return Check(bad == 0, "result correct" if bad == 0 else f"{bad} of {threads} values wrong")


def _shared_race(variant: str) -> Check:
    want = (np.arange(256, dtype=np.int32) + 1) % 256
    return _block_kernel("shared_shift" if variant == BUG else "shared_shift_synced", 256, want)


def _divergent_sync(variant: str) -> Check:
    return _block_kernel("divergent_sync" if variant == BUG else "uniform_sync", 64,
                         np.arange(64, dtype=np.int32))


def _misaligned(variant: str) -> Check:
    d_p = alloc(4096)
    run_kernel("misaligned_write" if variant == BUG else "aligned_write", 1, 32, d_p)
    sync()  # the bug raises CUDA_ERROR_MISALIGNED_ADDRESS here
    got = from_device(d_p, 32, np.int32)
    free(d_p)
    return Check(bool(np.all(got == 7)), "aligned stores landed")


class LaunchCache:
    """A launch-plan cache like the ones GPU libraries keep to skip re-planning.

    ``keyed_by_buffers=False`` is the planted bug: the key is (shape, dtype) only, so a second call
    with the same shape and new buffers gets the first call's plan, pointers and all.
    """

    def __init__(self, keyed_by_buffers: bool) -> None:
        self.keyed_by_buffers = keyed_by_buffers
        self.plans: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.hits = 0

    def plan(self, n: int, dtype: str, d_in: int, d_out: int) -> tuple[Any, ...]:
        key: tuple[Any, ...] = (n, dtype) + ((d_in, d_out) if self.keyed_by_buffers else ())
        if key in self.plans:
            self.hits += 1
            return self.plans[key]
        plan = ((n + 255) // 256, 256, d_in, d_out, np.int32(n), np.float32(2.0))
        self.plans[key] = plan
        return plan


def _stale_cache(variant: str) -> Check:
    cache = LaunchCache(keyed_by_buffers=variant != BUG)
    inputs = [np.full(N, 1.0, np.float32), np.full(N, 5.0, np.float32)]
    bufs = []
    for host in inputs:
        d_in, d_out = alloc(N * 4), alloc(N * 4)
        to_device(d_in, host)
        to_device(d_out, np.full(N, -1.0, np.float32))
        grid, block, *args = cache.plan(N, "float32", d_in, d_out)
        run_kernel("scale_into", grid, block, *args)
        bufs.append((d_in, d_out))
    sync()
    got = [from_device(d_out, N, np.float32) for _, d_out in bufs]
    for d_in, d_out in bufs:
        free(d_in)
        free(d_out)
    ok = all(np.all(g == 2 * h) for g, h in zip(got, inputs))
    return Check(ok, "both outputs correct" if ok else
                 f"second output is {got[1][0]:g} (never written), first is {got[0][0]:g}: the "
                 f"cache ({cache.hits} hit) ran the second call with the first call's pointers")


def _arch_gap(variant: str) -> Check:
    dev = device()
    target = other_arch(dev.arch) if variant == BUG else f"sm_{dev.arch}"
    # no -lineinfo for the gap module: its only PTX would be a debug copy, and it never runs
    module = compile_module(target, lineinfo=variant != BUG)
    k = module.get_kernel("scale")   # the bug raises CUDA_ERROR_NO_BINARY_FOR_GPU here
    host = np.ones(N, dtype=np.float32)
    d_p = alloc(N * 4)
    to_device(d_p, host)
    launch(dev.default_stream, LaunchConfig(grid=4, block=256), k, d_p, np.int32(N), np.float32(3.0))
    sync()
    got = from_device(d_p, N, np.float32)
    free(d_p)
    return Check(bool(np.all(got == 3.0)), f"module for {target} ran on sm_{dev.arch}")


def _bounded_hang(variant: str, cap_s: float = HANG_CAP_S) -> Check:
    # mapped pinned memory: the host writes the flag, the running kernel reads it over PCIe
    host_flag = int(_ck(cu.cuMemHostAlloc(4, cu.CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc"))
    try:
        flag = ctypes.c_int.from_address(host_flag)
        flag.value = 0
        d_flag = int(_ck(cu.cuMemHostGetDevicePointer(host_flag, 0), "cuMemHostGetDevicePointer"))
        d_status = alloc(4)
        _ck(cu.cuMemsetD32(d_status, 0, 1), "cuMemsetD32")
        if variant != BUG:
            # released before the launch: under CUDA_LAUNCH_BLOCKING=1 (faulthunt stress's
            # default) the launch call itself blocks, so a release "later" would never come.
            flag.value = 1
        cap_cycles = int(cap_s * 4e9)  # 4 GHz worth: a second bound in case globaltimer stalls
        run_kernel("spin_on_flag", 1, 32, d_flag, d_status, np.uint64(int(cap_s * 1e9)),
                   np.int64(cap_cycles))
        sync()
        status = int(from_device(d_status, 1, np.int32)[0])
        free(d_status)
    finally:
        _ck(cu.cuMemFreeHost(host_flag), "cuMemFreeHost")
    if status == 1:
        return Check(True, "the host released the flag; the kernel ended at once")
    return Check(False, f"kernel hit its clock bound ({cap_s:g} s): the host never released "
                        f"the flag (status {status})")


RUNNERS: dict[str, Callable[[str], Check]] = {
    "oob_write": _oob_write, "wild_write": _wild_write, "oob_read": _oob_read,
    "use_after_free": _use_after_free, "stream_ordered": _stream_ordered,
    "uninit_read": _uninit_read, "shared_race": _shared_race, "divergent_sync": _divergent_sync,
    "misaligned": _misaligned, "stale_cache": _stale_cache, "arch_gap": _arch_gap,
    "bounded_hang": _bounded_hang,
}


def run(name: str, variant: str = BUG) -> Check:
    """Run planted fault ``name`` (``bug`` or ``twin``) on GPU 0 in this process."""
    why = available()
    if why is not None:
        raise Unavailable(why)
    # Initialise the driver and make GPU 0's primary context current BEFORE any raw driver call:
    # most runners start with cuMemAlloc, which on a process with no cuInit/current context fails
    # with CUDA_ERROR_NOT_INITIALIZED (3). The bundled suite hid this (its sessionstart compiles
    # planted.cu, which goes through device()); a fresh `python -m faulthunt.kernels.runner`, plain
    # or under compute-sanitizer, did not (first H200 validation run, 2026-12-02).
    device()
    return RUNNERS[name](variant)
