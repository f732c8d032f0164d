"""A GPU busy for two minutes in short kernels and synchronizes: the tests scripts/gpu/stress_stop.sh
stops with SIGTERM while every worker is inside CUDA."""

import time

import cupy as cp


def test_busy_gpu():
    a = cp.zeros(1 << 24, dtype=cp.float32)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        a += 1
        cp.cuda.runtime.deviceSynchronize()
