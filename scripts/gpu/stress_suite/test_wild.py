"""A CuPy suite whose kernel makes a wild write 1 run in 5 (the run's pytest-repeat step decides).

Used by scripts/gpu/stress_xid.sh on the H200: each faulting run must produce one Xid 31 (the
store lands ~1 TiB past a small allocation: no page directory there, FAULT_PDE) and error 700,
and faulthunt must attribute the Xid to this test and to the worker whose pid the line carries.
STRESS_FAULT_DEVICE=<n>: fault only in workers pinned to that CUDA_VISIBLE_DEVICES (2-GPU runs).
"""

import os

import cupy as cp

_STORE = cp.RawKernel(r"""
extern "C" __global__ void store(float* p, long long off) {
    if (blockIdx.x == 0 && threadIdx.x == 0) { p[off] = 1.0f; }
}
""", "store")

WILD_OFFSET = 1 << 38  # floats: 1 TiB past the buffer


def _faults_now(request) -> bool:
    step = request.node.callspec.params.get("__pytest_repeat_step_number", 0)
    pinned = os.environ.get("STRESS_FAULT_DEVICE")
    if pinned is not None and os.environ.get("CUDA_VISIBLE_DEVICES") != pinned:
        return False
    return step % 5 == 2


def test_clean_sum():
    a = cp.arange(4096, dtype=cp.float32)
    assert float((a + 1).sum()) == 4096 * 4097 / 2


def test_wild_store(request):
    buf = cp.zeros(1024, dtype=cp.float32)
    off = WILD_OFFSET if _faults_now(request) else 7
    _STORE((1,), (32,), (buf, cp.int64(off)))
    cp.cuda.runtime.deviceSynchronize()
    assert float(buf[7]) == 1.0
