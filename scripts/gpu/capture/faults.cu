// Planted faults for capturing real driver and compute-sanitizer output on the H200.
// One mode per process: a memory fault poisons the CUDA context.
//   ./faults MODE      MODE in: ok wild misaligned oob1 readpast uaf streamrace uninit sharedrace
//                               syncdiv apierror leak hang
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <unistd.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "CUDA error %d (%s: %s) at %s:%d\n", (int)e, cudaGetErrorName(e), cudaGetErrorString(e), __FILE__, __LINE__); \
  return 10 + (int)(e % 200); } } while (0)

// The `i <= n` of a max reducer: writes one element past the end.
__global__ void max_reduce_off_by_one(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = in[i > 0 ? i - 1 : 0] > 0.f ? in[i > 0 ? i - 1 : 0] : 0.f;
}
__global__ void wild_write(int *p, long long offset) { if (threadIdx.x == 0 && blockIdx.x == 0) p[offset] = 42; }
__global__ void misaligned_write(char *p) { *(int *)(p + 1 + 4 * threadIdx.x) = 7; }
__global__ void read_past_end(const int *in, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i + 8];
}
__global__ void scale(float *p, int n, float a) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] *= a; }
__global__ void read_uninit(const int *in, int *out, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = in[i] + 1; }
__global__ void shared_race(int *out) {
  __shared__ int s[256];
  s[threadIdx.x] = threadIdx.x;
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];  // no __syncthreads()
}
__global__ void divergent_sync(int *out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = threadIdx.x;
}
__global__ void bounded_spin(volatile int *flag, long long max_cycles) {
  long long start = clock64();
  while (*flag == 0 && clock64() - start < max_cycles) { }
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "ok";
  printf("pid=%d mode=%s\n", getpid(), mode); fflush(stdout);
  const int n = 1000;  // 4000-byte buffers
  if (!strcmp(mode, "ok")) {
    float *in, *out; CK(cudaMalloc(&in, n * 4)); CK(cudaMalloc(&out, n * 4));
    CK(cudaMemset(in, 0, n * 4));
    scale<<<4, 256>>>(in, n, 2.f); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    CK(cudaFree(in)); CK(cudaFree(out));
  } else if (!strcmp(mode, "wild")) {
    int *p; CK(cudaMalloc(&p, n * 4));
    printf("base=%p target=%p\n", (void *)p, (void *)(p + (1LL << 36))); fflush(stdout);
    wild_write<<<1, 32>>>(p, 1LL << 36); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  } else if (!strcmp(mode, "misaligned")) {
    char *p; CK(cudaMalloc(&p, 4096));
    misaligned_write<<<1, 32>>>(p); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  } else if (!strcmp(mode, "oob1")) {
    float *in, *out; CK(cudaMalloc(&in, n * 4)); CK(cudaMalloc(&out, n * 4)); CK(cudaMemset(in, 0, n * 4));
    printf("out=%p size=%d\n", (void *)out, n * 4); fflush(stdout);
    max_reduce_off_by_one<<<(n + 256) / 256, 256>>>(in, out, n); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  } else if (!strcmp(mode, "readpast")) {
    int *in, *out; CK(cudaMalloc(&in, n * 4)); CK(cudaMalloc(&out, n * 4)); CK(cudaMemset(in, 0, n * 4));
    read_past_end<<<4, 256>>>(in, out, n); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  } else if (!strcmp(mode, "uaf")) {
    float *p; CK(cudaMalloc(&p, n * 4)); CK(cudaMemset(p, 0, n * 4));
    printf("freed=%p\n", (void *)p); fflush(stdout);
    CK(cudaFree(p));
    scale<<<4, 256>>>(p, n, 2.f); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  } else if (!strcmp(mode, "streamrace")) {
    cudaStream_t s1, s2; CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking)); CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    float *p; CK(cudaMallocAsync(&p, n * 4, s1));
    scale<<<4, 256, 0, s2>>>(p, n, 2.f);  // no event: p may not be allocated yet on s2's timeline
    CK(cudaFreeAsync(p, s1));
    CK(cudaDeviceSynchronize());
  } else if (!strcmp(mode, "uninit")) {
    int *in, *out; CK(cudaMalloc(&in, n * 4)); CK(cudaMalloc(&out, n * 4));
    read_uninit<<<4, 256>>>(in, out, n); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
    int h[4]; CK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
  } else if (!strcmp(mode, "sharedrace")) {
    int *out; CK(cudaMalloc(&out, 256 * 4));
    shared_race<<<1, 256>>>(out); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  } else if (!strcmp(mode, "syncdiv")) {
    int *out; CK(cudaMalloc(&out, 256 * 4));
    divergent_sync<<<1, 64>>>(out); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  } else if (!strcmp(mode, "apierror")) {
    int *p; CK(cudaMalloc(&p, 16));
    cudaError_t e = cudaMemcpy(p, (void *)0x10, 1 << 20, cudaMemcpyHostToDevice);
    printf("memcpy returned %d (%s)\n", (int)e, cudaGetErrorName(e));
    e = cudaFree((void *)0x1234); printf("free returned %d (%s)\n", (int)e, cudaGetErrorName(e));
  } else if (!strcmp(mode, "leak")) {
    int *p; CK(cudaMalloc(&p, 12345)); CK(cudaMalloc(&p, 4096));
  } else if (!strcmp(mode, "hang")) {
    int *flag; CK(cudaMalloc(&flag, 4)); CK(cudaMemset(flag, 0, 4));
    bounded_spin<<<1, 1>>>(flag, 20LL * 1000 * 1000 * 1000);  // ~10 s at 2 GHz, then ends by itself
    CK(cudaDeviceSynchronize());
  } else { fprintf(stderr, "unknown mode %s\n", mode); return 2; }
  printf("done mode=%s\n", mode);
  return 0;
}
