// faulthunt planted-fault kernels: each bug beside its correct twin.
// Compiled at run time with NVRTC through cuda.core (kernels/cuda_faults.py), with -lineinfo so
// that compute-sanitizer names planted.cu:LINE. The catalog (kernels/catalog.py) says what
// evidence each one must leave. extern "C" keeps the names readable in sanitizer output.
// Some bugs are host-side (use after free, stream-ordered race, stale cache, arch gap): those
// reuse `scale` / `add_one` / `scale_into`, and the bug lives in cuda_faults.py.

// 1. oob_write: the `i <= n` of a pairwise max reducer writes out[n], one past the end.
extern "C" __global__ void max_reduce_off_by_one(const float *in, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {
        int lo = i > 0 ? i - 1 : 0, hi = i < n ? i : n - 1;
        out[i] = fmaxf(in[lo], in[hi]);
    }
}
extern "C" __global__ void max_reduce(const float *in, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int lo = i > 0 ? i - 1 : 0;
        out[i] = fmaxf(in[lo], in[i]);
    }
}

// 2. wild_write: one thread writes p[offset] with offset far outside anything mapped.
extern "C" __global__ void wild_write(int *p, long long offset) {
    if (threadIdx.x == 0 && blockIdx.x == 0) p[offset] = 42;
}
extern "C" __global__ void wild_write_twin(int *p, long long offset, long long n) {
    if (threadIdx.x == 0 && blockIdx.x == 0 && offset >= 0 && offset < n) p[offset] = 42;
}

// 3. oob_read: a window shifted by 8 reads past the end for the last 8 threads.
extern "C" __global__ void read_past_end(const int *in, int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i + 8];
}
extern "C" __global__ void read_shifted(const int *in, int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i + 8 < n ? in[i + 8] : 0;
}

// 4, 5, 11: host-side bugs around a plain scale kernel.
extern "C" __global__ void scale(float *p, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] *= a;
}

// 6. uninit_read: the kernel is correct; the host never initialises `in`.
extern "C" __global__ void add_one(const int *in, int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] + 1;
}

// 7. shared_race: neighbour read of shared memory with no barrier after the write.
extern "C" __global__ void shared_shift(int *out) {
    __shared__ int s[256];
    s[threadIdx.x] = threadIdx.x;
    out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}
extern "C" __global__ void shared_shift_synced(int *out) {
    __shared__ int s[256];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// 8. divergent_sync: half a warp reaches the barrier.
extern "C" __global__ void divergent_sync(int *out) {
    if (threadIdx.x < 16) __syncthreads();
    out[threadIdx.x] = threadIdx.x;
}
extern "C" __global__ void uniform_sync(int *out) {
    __syncthreads();
    out[threadIdx.x] = threadIdx.x;
}

// 9. misaligned: an int store one byte off its alignment.
extern "C" __global__ void misaligned_write(char *p) {
    *(int *)(p + 1 + 4 * threadIdx.x) = 7;
}
extern "C" __global__ void aligned_write(char *p) {
    *(int *)(p + 4 * threadIdx.x) = 7;
}

// 10. stale_cache: the kernel is correct; the launch cache on the host hands it stale pointers.
extern "C" __global__ void scale_into(const float *in, float *out, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * a;
}

// 12. bounded_hang: spin until the host releases *flag, or until a hard clock bound.
// Two independent bounds so that it always ends by itself: %globaltimer (nanoseconds) and
// clock64 (SM cycles; cap_cycles is set well above cap_ns worth of cycles at any real clock).
// status[0] = 1: released by the host; 2: the clock bound expired.
extern "C" __global__ void spin_on_flag(const volatile int *flag, int *status,
                                        unsigned long long cap_ns, long long cap_cycles) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    long long c0 = clock64();
    for (;;) {
        if (*flag != 0) { status[0] = 1; return; }
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 >= cap_ns || clock64() - c0 >= cap_cycles) { status[0] = 2; return; }
        __nanosleep(1000);
    }
}
