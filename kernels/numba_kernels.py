"""The numba planted kernels (bug and twin), imported only once NUMBA_ENABLE_CUDASIM is decided.

See numba_faults.py for the host side; ``lineinfo=True`` on a GPU so compute-sanitizer names
this file and line (the simulator ignores it)."""

from __future__ import annotations

import os

import numpy as np
from numba import cuda

_SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
jit = cuda.jit if _SIM else cuda.jit(lineinfo=True)


@jit
def max_reduce_off_by_one(inp, out):
    i = cuda.grid(1)
    n = out.size
    if i <= n:  # the planted `i <= n`
        lo = i - 1 if i > 0 else 0
        hi = i if i < n else n - 1
        out[i] = max(inp[lo], inp[hi])


@jit
def max_reduce(inp, out):
    i = cuda.grid(1)
    n = out.size
    if i < n:
        lo = i - 1 if i > 0 else 0
        out[i] = max(inp[lo], inp[i])


@jit
def wild_write(p, offset):
    if cuda.grid(1) == 0:
        p[offset] = 42


@jit
def wild_write_twin(p, offset):
    if cuda.grid(1) == 0 and offset < p.size:
        p[offset] = 42


@jit
def read_past_end(inp, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = inp[i + 8]


@jit
def read_shifted(inp, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = inp[i + 8] if i + 8 < inp.size else 0


@jit
def add_one(inp, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = inp[i] + 1


@jit
def shared_shift(out):
    s = cuda.shared.array(256, np.int32)
    t = cuda.threadIdx.x
    s[t] = t
    out[t] = s[(t + 1) % cuda.blockDim.x]  # no cuda.syncthreads()


@jit
def shared_shift_synced(out):
    s = cuda.shared.array(256, np.int32)
    t = cuda.threadIdx.x
    s[t] = t
    cuda.syncthreads()
    out[t] = s[(t + 1) % cuda.blockDim.x]


@jit
def divergent_sync(out):
    t = cuda.threadIdx.x
    if t < 16:
        cuda.syncthreads()
    out[t] = t


@jit
def uniform_sync(out):
    t = cuda.threadIdx.x
    cuda.syncthreads()
    out[t] = t


@jit
def scale_into(inp, out, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = inp[i] * a


KERNELS = {
    "max_reduce_off_by_one": max_reduce_off_by_one, "max_reduce": max_reduce,
    "wild_write": wild_write, "wild_write_twin": wild_write_twin,
    "read_past_end": read_past_end, "read_shifted": read_shifted, "add_one": add_one,
    "shared_shift": shared_shift, "shared_shift_synced": shared_shift_synced,
    "divergent_sync": divergent_sync, "uniform_sync": uniform_sync, "scale_into": scale_into,
}
