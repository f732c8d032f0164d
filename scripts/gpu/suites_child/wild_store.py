"""A process that makes one wild store on the GPU (CuPy; plain device memory; a single store ~1
TiB past a small buffer: no page directory there, so the driver reports Xid 31 FAULT_PDE), or a
clean one. Run as a script (`python wild_store.py wild|clean`) or as a multiprocessing target.

SUITES_SIM_XID_LOG=FILE rehearses it without a GPU (tests/test_gpu_scripts_rehearsal.py): the
wild child appends the Xid 31 line the driver would print, with its own pid and name and the
kernel-style monotonic timestamp, to FILE (read with `--xid-source file:FILE`) and fails as the
CUDA error would make it fail."""

import os
import sys
import time

_SIM_LINE = ("[%12.6f] NVRM: Xid (PCI:0000:00:06): 31, pid=%d, name=%s, channel 0x0000000a, "
             "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_8 faulted @ "
             "0x7faf_e7e00000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE")


def _simulated(mode: str, log: str) -> None:
    if mode != "wild":
        return
    with open("/proc/self/comm") as fh:
        name = fh.read().strip()
    with open(log, "a") as fh:
        fh.write(_SIM_LINE % (time.monotonic(), os.getpid(), name) + "\n")
    raise SystemExit("cudaErrorIllegalAddress: an illegal memory access was encountered (simulated)")


def run(mode: str) -> None:
    log = os.environ.get("SUITES_SIM_XID_LOG")
    if log:
        _simulated(mode, log)
        return
    import cupy as cp

    store = cp.RawKernel(r"""
    extern "C" __global__ void store(float* p, long long off) {
        if (blockIdx.x == 0 && threadIdx.x == 0) { p[off] = 1.0f; }
    }
    """, "store")
    buf = cp.zeros(1024, dtype=cp.float32)
    off = (1 << 38) if mode == "wild" else 7  # floats: 1 TiB past the buffer
    store((1,), (32,), (buf, cp.int64(off)))
    cp.cuda.runtime.deviceSynchronize()  # 700 cudaErrorIllegalAddress after the wild store
    assert float(buf[7]) == 1.0


if __name__ == "__main__":
    run(sys.argv[1])
