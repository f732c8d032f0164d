"""The numba flavour: the planted bugs that numba.cuda can express.

On a GPU these are real numba-cuda kernels (compiled with ``lineinfo=True`` so compute-sanitizer
names this file and line). With ``NUMBA_ENABLE_CUDASIM=1`` (set before numba is imported; the
bundled suite and the runner do it on a machine without a GPU) the same kernels run in numba's
CUDA simulator on the CPU, where an out-of-bounds index raises ``IndexError`` inside the kernel
and the stale-cache bug gives the same wrong answer. Bugs that need real hardware to show (a
divergent barrier, a shared-memory race, an uninitialized read) run in the simulator but show
nothing there; the catalog says so and the CPU suite skips them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from faulthunt.kernels.results import BUG, Check, Unavailable

N = 1000
WILD_OFFSET = 1 << 36


def simulated() -> bool:
    """Whether numba's CUDA simulator is (to be) used in this process."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


@functools.cache
def _cuda() -> Any:
    try:
        from numba import cuda
    except ImportError as exc:
        raise Unavailable(f"numba is not installed ({exc}); pip install numba numba-cuda") from exc
    if not simulated() and not cuda.is_available():
        raise Unavailable("numba.cuda sees no usable GPU; set NUMBA_ENABLE_CUDASIM=1 to use "
                          "the simulator")
    return cuda


def available() -> str | None:
    """``None`` if this flavour can run; otherwise why not."""
    try:
        _cuda()
    except Unavailable as exc:
        return str(exc)
    return None


@functools.cache
def _kernels() -> dict[str, Any]:
    _cuda()  # raises Unavailable with the reason first
    # A module of its own: the simulator swaps the kernels' *global* ``cuda`` for its fake one,
    # so the kernels must see numba.cuda as a module global, imported after the env is set.
    from faulthunt.kernels import numba_kernels

    return numba_kernels.KERNELS


def _k(name: str) -> Any:
    return _kernels()[name]


def _oob_write(variant: str) -> Check:
    cuda = _cuda()
    inp = np.linspace(1.0, 2.0, N, dtype=np.float32)
    d_in, d_out = cuda.to_device(inp), cuda.device_array(N, dtype=np.float32)
    _k("max_reduce_off_by_one" if variant == BUG else "max_reduce")[(N + 256) // 256, 256](d_in, d_out)
    cuda.synchronize()
    want = np.maximum(inp, np.concatenate(([inp[0]], inp[:-1])))
    ok = bool(np.array_equal(d_out.copy_to_host(), want))
    return Check(ok, "result correct" if ok else "wrong pairwise maxima")


def _wild_write(variant: str) -> Check:
    cuda = _cuda()
    d_p = cuda.to_device(np.zeros(N, dtype=np.int32))
    if variant == BUG:
        _k("wild_write")[1, 32](d_p, np.int64(WILD_OFFSET))
    else:
        _k("wild_write_twin")[1, 32](d_p, np.int64(7))
    cuda.synchronize()
    got = d_p.copy_to_host()
    return Check(bool(got[7] == 42), f"p[7] = {int(got[7])}")


def _oob_read(variant: str) -> Check:
    cuda = _cuda()
    inp = np.arange(N, dtype=np.int32)
    d_in, d_out = cuda.to_device(inp), cuda.device_array(N, dtype=np.int32)
    _k("read_past_end" if variant == BUG else "read_shifted")[4, 256](d_in, d_out)
    cuda.synchronize()
    ok = bool(np.array_equal(d_out.copy_to_host()[: N - 8], inp[8:]))
    return Check(ok, "in-bounds part correct" if ok else "shifted window wrong")


def _uninit_read(variant: str) -> Check:
    cuda = _cuda()
    d_in = cuda.device_array(N, dtype=np.int32)   # never written: the planted bug
    if variant != BUG:
        d_in.copy_to_device(np.zeros(N, dtype=np.int32))
    d_out = cuda.device_array(N, dtype=np.int32)
    _k("add_one")[4, 256](d_in, d_out)
    cuda.synchronize()
    ok = bool(np.all(d_out.copy_to_host() == 1))
    return Check(ok, "out == in + 1 with in == 0" if ok else "out != 1: the input was never set")


def _block(name: str, threads: int, want: np.ndarray) -> Check:
    cuda = _cuda()
    d_out = cuda.to_device(np.full(threads, -1, dtype=np.int32))
    _k(name)[1, threads](d_out)
    cuda.synchronize()
    bad = int(np.count_nonzero(d_out.copy_to_host() != want))
    return Check(bad == 0, "result correct" if bad == 0 else f"{bad} of {threads} values wrong")


def _shared_race(variant: str) -> Check:
    return _block("shared_shift" if variant == BUG else "shared_shift_synced", 256,
                  (np.arange(256, dtype=np.int32) + 1) % 256)


def _divergent_sync(variant: str) -> Check:
    return _block("divergent_sync" if variant == BUG else "uniform_sync", 64,
                  np.arange(64, dtype=np.int32))


class LaunchCache:
    """The launch-plan cache of the stale-pointer bug (see cuda_faults.LaunchCache): keyed by
    (shape, dtype) only when ``keyed_by_buffers`` is False."""

    def __init__(self, keyed_by_buffers: bool) -> None:
        self.keyed_by_buffers = keyed_by_buffers
        self.plans: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.hits = 0

    def plan(self, d_in: Any, d_out: Any) -> tuple[Any, ...]:
        key: tuple[Any, ...] = (d_in.shape, str(d_in.dtype))
        if self.keyed_by_buffers:
            key += (id(d_in), id(d_out))
        if key in self.plans:
            self.hits += 1
            return self.plans[key]
        self.plans[key] = plan = ((d_in.size + 255) // 256, 256, d_in, d_out)
        return plan


def _stale_cache(variant: str) -> Check:
    cuda = _cuda()
    cache = LaunchCache(keyed_by_buffers=variant != BUG)
    inputs = [np.full(N, 1.0, np.float32), np.full(N, 5.0, np.float32)]
    outs = []
    for host in inputs:
        d_in, d_out = cuda.to_device(host), cuda.to_device(np.full(N, -1.0, np.float32))
        grid, block, p_in, p_out = cache.plan(d_in, d_out)
        _k("scale_into")[grid, block](p_in, p_out, np.float32(2.0))
        outs.append(d_out)
    cuda.synchronize()
    got = [d.copy_to_host() for d in outs]
    ok = all(np.all(g == 2 * h) for g, h in zip(got, inputs))
    return Check(ok, "both outputs correct" if ok else
                 f"second output is {got[1][0]:g} (never written), first is {got[0][0]:g}: the "
                 f"cache ({cache.hits} hit) ran the second call with the first call's arrays")


RUNNERS: dict[str, Callable[[str], Check]] = {
    "oob_write": _oob_write, "wild_write": _wild_write, "oob_read": _oob_read,
    "uninit_read": _uninit_read, "shared_race": _shared_race, "divergent_sync": _divergent_sync,
    "stale_cache": _stale_cache,
}


def run(name: str, variant: str = BUG) -> Check:
    """Run planted fault ``name`` (``bug`` or ``twin``) with numba (GPU or simulator)."""
    if name not in RUNNERS:
        raise Unavailable(f"{name} has no numba flavour")
    why = available()
    if why is not None:
        raise Unavailable(why)
    return RUNNERS[name](variant)
