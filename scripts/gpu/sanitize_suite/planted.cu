// Planted faults for validating `faulthunt sanitize` on the H200, loaded by test_planted.py via ctypes.
// Each entry point runs in the calling (pytest) process, so compute-sanitizer sees the test's own
// CUDA context and prints its Python host frames. The marker comments name the lines the sanitizer
// must report (sanitize_validate.sh greps them).
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) return 1000 + (int)e; } while (0)

__global__ void scale_ok(float *p, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= a;
}

// The `i <= n` of a max reducer: one element past the end, and a counter that shows it.
__global__ void max_reduce_off_by_one(const float *in, float *out, int n, int *writes) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) {
    out[i] = in[i > 0 ? i - 1 : 0];  // PLANTED-OOB
    atomicAdd(writes, 1);
  }
}

__global__ void fill(float *p, int n, float v) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

__global__ void scale_stream(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2.0f * in[i];  // PLANTED-STREAMRACE
}

// A bounded spin (ends by itself after max_cycles): keeps s1 busy so the race is visible.
__global__ void bounded_spin(long long max_cycles) {
  long long start = clock64();
  while (clock64() - start < max_cycles) { }
}

extern "C" int run_ok(void) {
  const int n = 1000;
  float *p; CK(cudaMalloc(&p, n * sizeof(float)));
  CK(cudaMemset(p, 0, n * sizeof(float)));
  scale_ok<<<(n + 255) / 256, 256>>>(p, n, 2.f);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  CK(cudaFree(p));
  return 0;
}

// Returns how many elements the kernel wrote (n is right; n + 1 is the bug).
extern "C" int run_oob(void) {
  const int n = 1000;
  float *in, *out; int *writes, h = 0;
  CK(cudaMalloc(&in, n * sizeof(float))); CK(cudaMalloc(&out, n * sizeof(float)));
  CK(cudaMalloc(&writes, sizeof(int))); CK(cudaMemset(writes, 0, sizeof(int)));
  CK(cudaMemset(in, 0, n * sizeof(float)));
  max_reduce_off_by_one<<<(n + 256) / 256, 256>>>(in, out, n, writes);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(&h, writes, sizeof(int), cudaMemcpyDeviceToHost));
  CK(cudaFree(in)); CK(cudaFree(out)); CK(cudaFree(writes));
  return h;
}

// A stream-ordered allocation made on s1 (behind a busy kernel) and read on s2 with no event:
// s2 reads it before it exists on s1's timeline. Returns out[0] * 1000 (2000 is right).
extern "C" int run_streamrace(void) {
  const int n = 1000;
  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  float *out; CK(cudaMalloc(&out, n * sizeof(float))); CK(cudaMemset(out, 0, n * sizeof(float)));
  bounded_spin<<<1, 1, 0, s1>>>(20LL * 1000 * 1000);   // ~10 ms at H200 clocks
  float *p; CK(cudaMallocAsync(&p, n * sizeof(float), s1));
  fill<<<(n + 255) / 256, 256, 0, s1>>>(p, n, 1.f);
  scale_stream<<<(n + 255) / 256, 256, 0, s2>>>(p, out, n);  // no cudaStreamWaitEvent: the bug
  CK(cudaFreeAsync(p, s1));
  CK(cudaDeviceSynchronize());
  float h = 0.f; CK(cudaMemcpy(&h, out, sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaFree(out)); CK(cudaStreamDestroy(s1)); CK(cudaStreamDestroy(s2));
  return (int)(h * 1000.f);
}
