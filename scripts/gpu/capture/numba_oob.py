"""numba-cuda kernels with a planted write past the end, for memcheck's Python host frames."""
import numpy as np
from numba import cuda

@cuda.jit(lineinfo=True)
def max_reduce(a, out):
    i = cuda.grid(1)
    if i <= a.size:          # the planted `i <= n`
        out[i] = a[i - 1] if i > 0 else a[0]

def main():
    a = cuda.to_device(np.arange(1000, dtype=np.float32))
    out = cuda.device_array(1000, dtype=np.float32)
    max_reduce[4, 256](a, out)
    cuda.synchronize()
    print("numba done", flush=True)

if __name__ == "__main__":
    main()
