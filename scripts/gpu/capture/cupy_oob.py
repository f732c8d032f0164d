"""CuPy RawKernel with a planted write past the end and a wild write (mode argv[1])."""
import sys
import cupy as cp
src = r'''
extern "C" __global__ void off_by_one(float* out, int n) { int i = blockIdx.x*blockDim.x + threadIdx.x; if (i <= n) out[i] = 1.0f; }
extern "C" __global__ void wild(float* out, long long off) { if (threadIdx.x == 0) out[off] = 1.0f; }
'''
mod = cp.RawModule(code=src, options=("-lineinfo",))
out = cp.zeros(1000, dtype=cp.float32)
if sys.argv[1:] == ["wild"]:
    mod.get_function("wild")((1,), (32,), (out, cp.int64(1 << 36)))
else:
    mod.get_function("off_by_one")((4,), (256,), (out, cp.int32(1000)))
cp.cuda.runtime.deviceSynchronize()
print("cupy done", flush=True)
