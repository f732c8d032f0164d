/*
 * The ledger's compiled recording path (docs/ledger.md, "Routes").
 *
 * A plain shared library, loaded with ctypes by faulthunt/ledger/native.py: it includes neither
 * Python.h nor any CUDA header, so it builds with the system C compiler alone (at
 * `pip install`, through setuptools with optional=True; the pure-Python route is used when it is
 * missing). What it does, all without the GIL:
 *
 *   - the sink: ledger lines copied into a MAP_SHARED window of <pid>.jsonl reserved ahead with
 *     posix_fallocate (the same file layout as writer.py's mmap backend; a failed reserve goes on
 *     with pwrite and says so in a note line). The Python writer puts its own lines here too, so
 *     one mutex orders every line of the file;
 *   - the CUPTI callback (registered through cuptiSubscribe_v2 by cupti_native.py): launch records
 *     on launch entry, sync records on synchronization exit, a forced activity flush before a
 *     synchronization that failed (the path a fault is reported on) or an allocation call that
 *     returned an error (a sticky error);
 *   - the CUPTI activity buffers: MEMORY2 records become alloc/free lines, CONCURRENT_KERNEL
 *     records launch lines (with the test found by time, see fl_set_test);
 *   - a background thread: forced flushes on a period, and the next pages of the mapping faulted
 *     in ahead of the writers (prefault);
 *   - a flush on fatal signals (best effort, bounded by alarm()).
 *
 * CUPTI structures are not taken from headers: the field offsets come from cupti-python's own
 * dtypes at run time (fl_layout), checked against the CUDA 13 declarations below
 * (fl_default_layout), exactly as cupti_direct.py reads them from Python.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FL_ABI 4
#define EXPORT __attribute__((visibility("default")))

/* ---- CUPTI declarations (cupti_callbacks.h / cupti_activity.h, CUDA 13), for the defaults ---- */
typedef struct {
    int32_t callbackSite;
    const char *functionName;
    const void *functionParams;
    void *functionReturnValue;
    const char *symbolName;
    void *context;
    uint32_t contextUid;
    uint64_t *correlationData;
    uint32_t correlationId;
} fl_CallbackData;

typedef struct {
    int32_t memoryPoolType;
    uint32_t pad2;
    uint64_t address;
    uint64_t releaseThreshold;
    uint64_t pad3;
    uint64_t utilizedSize;
} fl_MemoryPoolConfig;

typedef struct {
    int32_t kind;
    int32_t memoryOperationType;
    int32_t memoryKind;
    uint32_t correlationId;
    uint64_t address;
    uint64_t bytes;
    uint64_t timestamp;
    uint64_t PC;
    uint32_t processId;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    const char *name;
    uint32_t isAsync;
    uint32_t pad1;
    fl_MemoryPoolConfig memoryPoolConfig;
    const char *source;
} fl_ActivityMemory4;

/* the prefix of CUpti_ActivityKernel9..11 that the ledger reads (identical in those versions) */
typedef struct {
    int32_t kind;
    uint8_t cacheConfig;
    uint8_t sharedMemoryConfig;
    uint16_t registersPerThread;
    int32_t partitionedGlobalCacheRequested;
    int32_t partitionedGlobalCacheExecuted;
    uint64_t start;
    uint64_t end;
    uint64_t completed;
    uint32_t deviceId;
    uint32_t contextId;
    uint32_t streamId;
    int32_t gridX, gridY, gridZ;
    int32_t blockX, blockY, blockZ;
    int32_t staticSharedMemory;
    int32_t dynamicSharedMemory;
    uint32_t localMemoryPerThread;
    uint32_t localMemoryTotal;
    uint32_t correlationId;
    int64_t gridId;
    const char *name;
} fl_ActivityKernelPrefix;

/* Field lists, in the order native.py passes offsets (keep in step with native.py's FIELDS). */
enum { CB_SITE, CB_SYMBOL, CB_RESULT, CB_CID, CB_PARAMS, CB_N };
enum { M_KIND, M_OP, M_MEMKIND, M_CID, M_ADDR, M_BYTES, M_TS, M_DEV, M_STREAM, M_ASYNC, M_POOLTYPE,
       M_POOLADDR, M_N };
enum { K_KIND, K_START, K_END, K_DEV, K_STREAM, K_CID, K_NAME, K_GX, K_GY, K_GZ, K_BX, K_BY, K_BZ, K_N };

typedef struct { int32_t off, size; } fl_field;

static const fl_field DEF_CB[CB_N] = {
    {offsetof(fl_CallbackData, callbackSite), 4}, {offsetof(fl_CallbackData, symbolName), 8},
    {offsetof(fl_CallbackData, functionReturnValue), 8}, {offsetof(fl_CallbackData, correlationId), 4},
    {offsetof(fl_CallbackData, functionParams), 8}};
static const fl_field DEF_MEM[M_N] = {
    {offsetof(fl_ActivityMemory4, kind), 4}, {offsetof(fl_ActivityMemory4, memoryOperationType), 4},
    {offsetof(fl_ActivityMemory4, memoryKind), 4}, {offsetof(fl_ActivityMemory4, correlationId), 4},
    {offsetof(fl_ActivityMemory4, address), 8}, {offsetof(fl_ActivityMemory4, bytes), 8},
    {offsetof(fl_ActivityMemory4, timestamp), 8}, {offsetof(fl_ActivityMemory4, deviceId), 4},
    {offsetof(fl_ActivityMemory4, streamId), 4}, {offsetof(fl_ActivityMemory4, isAsync), 4},
    {offsetof(fl_ActivityMemory4, memoryPoolConfig) + offsetof(fl_MemoryPoolConfig, memoryPoolType), 4},
    {offsetof(fl_ActivityMemory4, memoryPoolConfig) + offsetof(fl_MemoryPoolConfig, address), 8}};
static const fl_field DEF_KER[K_N] = {
    {offsetof(fl_ActivityKernelPrefix, kind), 4}, {offsetof(fl_ActivityKernelPrefix, start), 8},
    {offsetof(fl_ActivityKernelPrefix, end), 8}, {offsetof(fl_ActivityKernelPrefix, deviceId), 4},
    {offsetof(fl_ActivityKernelPrefix, streamId), 4}, {offsetof(fl_ActivityKernelPrefix, correlationId), 4},
    {offsetof(fl_ActivityKernelPrefix, name), 8}, {offsetof(fl_ActivityKernelPrefix, gridX), 4},
    {offsetof(fl_ActivityKernelPrefix, gridY), 4}, {offsetof(fl_ActivityKernelPrefix, gridZ), 4},
    {offsetof(fl_ActivityKernelPrefix, blockX), 4}, {offsetof(fl_ActivityKernelPrefix, blockY), 4},
    {offsetof(fl_ActivityKernelPrefix, blockZ), 4}};

static fl_field g_cb[CB_N], g_mem[M_N], g_ker[K_N];
static int g_have_cb, g_have_mem, g_have_ker;

/* ---- small helpers ---- */
static int64_t now_ns(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static uint64_t rd(const void *base, fl_field f) {
    uint64_t v = 0;
    if (f.size <= 0 || f.size > 8) return 0;
    memcpy(&v, (const char *)base + f.off, (size_t)f.size); /* little-endian, as CUPTI's hosts */
    return v;
}

/* A growable line buffer: lines are formatted here, then put whole. */
typedef struct {
    char *p;
    size_t n, cap;
    int heap, err;
    char inl[1536];
} fl_buf;

static void b_init(fl_buf *b) { b->p = b->inl; b->n = 0; b->cap = sizeof b->inl; b->heap = 0; b->err = 0; }
static void b_free(fl_buf *b) { if (b->heap) free(b->p); }
static int b_room(fl_buf *b, size_t more) {
    if (b->err) return -1;
    if (b->n + more <= b->cap) return 0;
    size_t cap = (b->n + more) * 2;
    char *q = malloc(cap);
    if (!q) { b->err = 1; return -1; }
    memcpy(q, b->p, b->n);
    if (b->heap) free(b->p);
    b->p = q; b->cap = cap; b->heap = 1;
    return 0;
}
static void b_mem(fl_buf *b, const char *s, size_t n) { if (b_room(b, n) == 0) { memcpy(b->p + b->n, s, n); b->n += n; } }
static void b_s(fl_buf *b, const char *s) { b_mem(b, s, strlen(s)); }
static void b_u(fl_buf *b, uint64_t v) {
    char tmp[24]; int i = 24;
    do { tmp[--i] = (char)('0' + v % 10); v /= 10; } while (v);
    b_mem(b, tmp + i, (size_t)(24 - i));
}
static void b_i(fl_buf *b, int64_t v) { if (v < 0) { b_mem(b, "-", 1); b_u(b, (uint64_t)(-(v + 1)) + 1); } else b_u(b, (uint64_t)v); }
/* a JSON string; bytes >= 0x80 pass through (UTF-8), control characters are escaped */
static void b_js(fl_buf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    b_mem(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') { char e[2] = {'\\', (char)*c}; b_mem(b, e, 2); }
        else if (*c < 0x20) { char e[6] = {'\\', 'u', '0', '0', hex[*c >> 4], hex[*c & 15]}; b_mem(b, e, 6); }
        else b_mem(b, (const char *)c, 1);
    }
    b_mem(b, "\"", 1);
}
static void b_t(fl_buf *b, const char *key, int64_t ns) { b_s(b, key); b_i(b, ns); b_s(b, "e-9"); }

/* ---- the sink ---- */
typedef struct fl_sink {
    pthread_mutex_t mu;
    int fd, pid, mode; /* mode: 0 mapped, 1 pwrite (reserve failed), -1 closed */
    unsigned gen;      /* fork generation it belongs to */
    char *win;
    uint64_t win_off, chunk, pos, records, dropped;
    uint64_t touched; /* file offset up to which pages past pos were faulted in ahead (prefault) */
} fl_sink;

static void bucket_fill(void); /* the sampled stacks' bucket, refilled at each test change */
static volatile unsigned g_gen = 1;
static fl_sink *volatile g_sink; /* where the C-side records go (set by native.py) */
static void after_fork_child(void);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void init_once(void) { pthread_atfork(NULL, NULL, after_fork_child); }

static int map_window(fl_sink *s, uint64_t off) {
    int rc = posix_fallocate(s->fd, (off_t)off, (off_t)s->chunk); /* ENOSPC here, not SIGBUS later */
    if (rc) { errno = rc; return -1; }
    void *w = mmap(NULL, s->chunk, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, (off_t)off);
    if (w == MAP_FAILED) return -1;
    if (s->win) munmap(s->win, s->chunk);
    s->win = w;
    s->win_off = off;
    return 0;
}

EXPORT int fl_abi(void) { return FL_ABI; }

/* A sink writing fd from byte pos on (the caller made the file and its first bytes). */
EXPORT void *fl_sink_open(int fd, uint64_t pos, uint64_t chunk, int pid) {
    pthread_once(&g_once, init_once);
    if (!chunk || chunk % 4096) { errno = EINVAL; return NULL; }
    fl_sink *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->fd = fd; s->pid = pid; s->chunk = chunk; s->pos = pos; s->gen = g_gen;
    if (map_window(s, pos - pos % chunk) < 0) { int e = errno; free(s); errno = e; return NULL; }
    return s;
}

static ssize_t pwrite_all(int fd, const char *p, size_t n, uint64_t at) {
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(fd, p + done, n - done, (off_t)(at + done));
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

/* The next window could not be reserved: cut the file at the last byte and go on with pwrite. */
static void spill(fl_sink *s, const char *rest, size_t n, int err) {
    if (s->win) { munmap(s->win, s->chunk); s->win = NULL; }
    s->mode = 1;
    if (ftruncate(s->fd, (off_t)s->pos) < 0 || pwrite_all(s->fd, rest, n, s->pos) < 0) { s->dropped++; return; }
    s->pos += n;
    fl_buf b; b_init(&b);
    b_t(&b, "{\"event\":\"note\",\"t\":", now_ns(CLOCK_REALTIME));
    b_s(&b, ",\"pid\":"); b_i(&b, s->pid);
    b_s(&b, ",\"nodeid\":null,\"source\":\"ledger\",\"message\":\"mmap reserve failed (");
    b_s(&b, strerror(err));
    b_s(&b, "); writing with pwrite(2)\"}\n");
    if (!b.err && pwrite_all(s->fd, b.p, b.n, s->pos) >= 0) { s->pos += b.n; s->records++; }
    b_free(&b);
}

/* Put one or more whole lines. 0: written; -1: the sink is closed (or belongs to a parent). */
EXPORT int fl_put(void *sink, const char *data, size_t n) {
    fl_sink *s = sink;
    if (!s || s->gen != g_gen) return -1;
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->mode < 0) rc = -1;
    else if (s->mode == 1) {
        if (pwrite_all(s->fd, data, n, s->pos) < 0) s->dropped++;
        else { s->pos += n; s->records++; }
    } else {
        uint64_t lo = s->pos - s->win_off;
        if (lo + n <= s->chunk) {
            memcpy(s->win + lo, data, n);
            s->pos += n;
            s->records++;
        } else { /* the line crosses into the next window(s) */
            size_t cut = (size_t)(s->chunk - lo);
            memcpy(s->win + lo, data, cut);
            s->pos += cut;
            const char *rest = data + cut;
            size_t left = n - cut;
            while (left) {
                if (map_window(s, s->win_off + s->chunk) < 0) { spill(s, rest, left, errno); left = 0; break; }
                size_t k = left < s->chunk ? left : (size_t)s->chunk;
                memcpy(s->win, rest, k);
                s->pos += k; rest += k; left -= k;
            }
            s->records++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Fault in the pages the next lines will go to, from a background thread: on a file system like
   ext4 the first write to each page of a shared mapping costs a page fault and block bookkeeping
   (about 3 us a page), which would otherwise land on the thread that launches kernels. A page is
   touched by writing a zero byte where the reserve already holds one (its last byte, past the
   last line): a write access, so the write fault happens here, that changes nothing. A few pages
   at a time under the sink's lock, so no line can be arriving there and the window cannot move. */
#define PREFAULT_AHEAD (2u << 20)
#define PREFAULT_SLICE 8
static void prefault(fl_sink *s) {
    if (!s || s->gen != g_gen) return;
    for (int slices = 0; slices < 128; slices++) {
        pthread_mutex_lock(&s->mu);
        if (s->mode != 0 || !s->win) { pthread_mutex_unlock(&s->mu); return; }
        uint64_t end = s->win_off + s->chunk, want = s->pos + PREFAULT_AHEAD;
        if (want > end) want = end;
        uint64_t at = s->touched > s->pos ? s->touched : s->pos;
        if (at < s->win_off) at = s->win_off;
        if (at >= want) { pthread_mutex_unlock(&s->mu); return; }
        for (int k = 0; k < PREFAULT_SLICE && at < want; k++) {
            uint64_t last = (at | 4095) < end ? (at | 4095) : end - 1; /* the page's last byte */
            ((volatile char *)s->win)[last - s->win_off] = 0;
            at = last + 1;
        }
        s->touched = at;
        pthread_mutex_unlock(&s->mu);
    }
}

/* Unmap and cut the unused reserve; the caller closes the descriptor. Later puts return -1. */
EXPORT int fl_sink_close(void *sink) {
    fl_sink *s = sink;
    if (!s || s->gen != g_gen) return -1;
    if (g_sink == s) g_sink = NULL;
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->mode >= 0) {
        if (s->win) { munmap(s->win, s->chunk); s->win = NULL; }
        rc = ftruncate(s->fd, (off_t)s->pos);
        s->mode = -1;
    }
    pthread_mutex_unlock(&s->mu);
    return rc; /* the struct stays: a late CUPTI buffer may still hold it */
}

EXPORT void fl_sink_info(void *sink, uint64_t *out4) {
    fl_sink *s = sink;
    out4[0] = s->pos; out4[1] = s->records; out4[2] = s->dropped; out4[3] = (uint64_t)(int64_t)s->mode;
}

EXPORT void fl_use_sink(void *sink) { g_sink = sink; }

/* The prefault pass, for tests and for a sink without a flush thread. */
EXPORT void fl_prefault(void *sink) { prefault(sink); }

/* ---- the running test, and the test at a time (activity records arrive after the fact) ---- */
#define RING 512
typedef struct { int64_t t; char *json; } fl_test;
static fl_test g_ring[RING];
static unsigned g_ring_n; /* changes pushed so far */
static pthread_mutex_t g_test_mu = PTHREAD_MUTEX_INITIALIZER;

EXPORT void fl_set_test(const char *json, size_t n) {
    char *copy = malloc(n + 1);
    if (!copy) return;
    memcpy(copy, json, n);
    copy[n] = 0;
    int64_t t = now_ns(CLOCK_REALTIME);
    pthread_mutex_lock(&g_test_mu);
    fl_test *slot = &g_ring[g_ring_n % RING];
    free(slot->json);
    slot->t = t;
    slot->json = copy;
    g_ring_n++;
    pthread_mutex_unlock(&g_test_mu);
    bucket_fill(); /* a new test: its first allocations keep their stacks */
}

/* Append the JSON of the test running at wall time t (t < 0: now); null when unknown. */
static void b_test_at(fl_buf *b, int64_t t) {
    pthread_mutex_lock(&g_test_mu);
    const char *j = NULL;
    unsigned n = g_ring_n, lo = n > RING ? n - RING : 0;
    for (unsigned i = n; i > lo; i--) {
        fl_test *e = &g_ring[(i - 1) % RING];
        if (t < 0 || e->t <= t) { j = e->json; break; }
    }
    if (j) b_s(b, j); else b_s(b, "null");
    pthread_mutex_unlock(&g_test_mu);
}

/* ---- CUPTI configuration (all set by native.py before subscribing) ---- */
enum { KIND_ALLOC = 1, KIND_FREE = 2, KIND_LAUNCH = 3, KIND_SYNC_CTX = 4, KIND_SYNC_STREAM = 5, KIND_SYNC_EVENT = 6 };
#define MAX_CBID 4096
static uint8_t g_cbkind[MAX_CBID];
static char *g_cbname[MAX_CBID];
static int32_t g_domain = 1, g_enter_site, g_kind_mem2 = -1, g_kind_kernel = -1, g_kind_ckernel = -1, g_op_alloc = 1,
               g_op_release = 2, g_end_status = -1;
static int64_t g_cupti0, g_wall0, g_mono0;
typedef int (*next_fn)(uint8_t *, size_t, void **);
typedef int (*flush_fn)(uint32_t);
typedef void (*stack_fn)(uint32_t, int);
static next_fn g_next;
static flush_fn g_flush_all;
static uint32_t g_forced = 1;
static stack_fn volatile g_stack;
static int g_launch_records = 1, g_flush_on_launch, g_always, g_alloc_stacks = 1, g_launch_stacks;
static int64_t g_gap_ns = 100000000;
static size_t g_bufsize = 8u << 20;
static volatile int g_dirty;
static volatile int64_t g_last_flush; /* monotonic ns */
static volatile int64_t g_last_ok_sync, g_last_kernel_end; /* wall ns: the launch-time estimate */
static pthread_mutex_t g_flush_mu = PTHREAD_MUTEX_INITIALIZER;
/* counters: launches (callback), syncs, memory records, kernel records, flushes, buffer errors,
   estimated kernel times, records lost (no sink), allocation stacks taken, allocation stacks left
   out by sampling */
enum { S_LAUNCH, S_SYNC, S_MEM, S_KER, S_FLUSH, S_BUFERR, S_EST, S_LOST, S_STACKS, S_UNSTACKED, S_N };
static volatile uint64_t g_stats[S_N];
static const char *MEMKINDS[] = {"unknown", "pageable", "pinned", "device", "array", "managed",
                                 "device_static", "managed_static"};

EXPORT void fl_default_layout(int which, int32_t *out, int n) {
    const fl_field *src = which == 0 ? DEF_CB : which == 1 ? DEF_MEM : DEF_KER;
    int m = which == 0 ? CB_N : which == 1 ? M_N : K_N;
    for (int i = 0; i < n && i < m; i++) { out[2 * i] = src[i].off; out[2 * i + 1] = src[i].size; }
}

/* Field offsets/sizes from cupti-python's dtypes; a size of 0 leaves the field out. */
EXPORT int fl_layout(int which, const int32_t *offsize, int n) {
    fl_field *dst = which == 0 ? g_cb : which == 1 ? g_mem : g_ker;
    int m = which == 0 ? CB_N : which == 1 ? M_N : K_N;
    if (n != m) return -1;
    for (int i = 0; i < m; i++) {
        int32_t sz = offsize[2 * i + 1];
        if (sz < 0 || sz > 8 || offsize[2 * i] < 0) return i + 1;
        dst[i].off = offsize[2 * i];
        dst[i].size = sz;
    }
    if (which == 0) g_have_cb = 1; else if (which == 1) g_have_mem = 1; else g_have_ker = 1;
    return 0;
}

EXPORT void fl_consts(int32_t domain, int32_t enter_site, int32_t kind_mem2, int32_t kind_kernel,
                      int32_t kind_ckernel, int32_t op_alloc, int32_t op_release, int32_t end_status) {
    g_domain = domain; g_enter_site = enter_site; g_kind_mem2 = kind_mem2; g_kind_kernel = kind_kernel;
    g_kind_ckernel = kind_ckernel; g_op_alloc = op_alloc; g_op_release = op_release; g_end_status = end_status;
}

EXPORT void fl_clock(int64_t cupti_ns, int64_t wall_ns, int64_t mono_ns) {
    g_cupti0 = cupti_ns; g_wall0 = wall_ns; g_mono0 = mono_ns;
}

EXPORT int fl_cbid(uint32_t cbid, int kind, const char *name) {
    if (cbid >= MAX_CBID) return -1;
    /* a name is never freed: a callback on another thread may be reading it (a second source in
       one process; the table holds a few dozen short names) */
    if (name && (!g_cbname[cbid] || strcmp(g_cbname[cbid], name))) g_cbname[cbid] = strdup(name);
    g_cbkind[cbid] = (uint8_t)kind;
    return 0;
}

/* flush_all NULL: no more flushes (the ledger stopped; the flush thread goes on prefaulting) */
EXPORT void fl_functions(void *get_next_record, void *flush_all, uint32_t forced) {
    pthread_mutex_lock(&g_flush_mu); /* no flush is running when this returns */
    g_next = (next_fn)get_next_record; g_flush_all = (flush_fn)flush_all; g_forced = forced;
    pthread_mutex_unlock(&g_flush_mu);
}

EXPORT void fl_policy(int launch_records, int flush_on_launch, int64_t gap_ns, int always,
                      int alloc_stacks, int launch_stacks, uint64_t bufsize) {
    g_launch_records = launch_records; g_flush_on_launch = flush_on_launch; g_gap_ns = gap_ns;
    g_always = always; g_alloc_stacks = alloc_stacks; g_launch_stacks = launch_stacks;
    if (bufsize >= 4096) g_bufsize = (size_t)bufsize;
    g_last_flush = 0; /* a new source: its first launch after an allocation flushes, as in Python */
}

EXPORT void fl_stack_provider(void *fn) { g_stack = (stack_fn)fn; }

/* Sampled allocation stacks (--ledger auto): a stack costs a call into Python, which an
   allocation-heavy loop pays on every driver allocation. A token bucket decides instead: full
   (burst tokens) at every change of the running test, then one token back every refill_ns, so a
   test's first allocations (the buffers it sets up) keep their stacks and a loop pays for a few.
   burst 0: every allocation (sampling off, the default). */
static int64_t g_burst, g_refill_ns, g_tokens, g_tokens_t;
static pthread_mutex_t g_bucket_mu = PTHREAD_MUTEX_INITIALIZER;

EXPORT void fl_stack_sampling(int64_t burst, int64_t refill_ns) {
    pthread_mutex_lock(&g_bucket_mu);
    g_burst = burst > 0 ? burst : 0; g_refill_ns = refill_ns > 0 ? refill_ns : 0;
    g_tokens = g_burst; g_tokens_t = now_ns(CLOCK_MONOTONIC);
    pthread_mutex_unlock(&g_bucket_mu);
}

static void bucket_fill(void) {
    pthread_mutex_lock(&g_bucket_mu);
    g_tokens = g_burst; g_tokens_t = now_ns(CLOCK_MONOTONIC);
    pthread_mutex_unlock(&g_bucket_mu);
}

/* 1: take this allocation's stack */
static int stack_due(void) {
    if (!g_burst) return 1;
    int take = 0;
    pthread_mutex_lock(&g_bucket_mu);
    if (g_tokens <= 0 && g_refill_ns) {
        int64_t now = now_ns(CLOCK_MONOTONIC), back = (now - g_tokens_t) / g_refill_ns;
        if (back > 0) {
            g_tokens = back < g_burst ? back : g_burst;
            g_tokens_t = now;
        }
    }
    if (g_tokens > 0) { g_tokens--; take = 1; }
    pthread_mutex_unlock(&g_bucket_mu);
    g_stats[take ? S_STACKS : S_UNSTACKED]++;
    return take;
}

EXPORT void fl_stats(uint64_t *out, int n) { for (int i = 0; i < n && i < S_N; i++) out[i] = g_stats[i]; }

/* ---- stacks waiting for their MEMORY2 record (or their launch line), by correlation id ---- */
#define PEND 4096
typedef struct { uint32_t cid; int used; char *stack; } fl_pend;
static fl_pend g_pend[PEND];
static pthread_mutex_t g_pend_mu = PTHREAD_MUTEX_INITIALIZER;

EXPORT void fl_pending_put(uint32_t cid, const char *stack, size_t n) {
    char *copy = malloc(n + 1);
    if (!copy) return;
    memcpy(copy, stack, n);
    copy[n] = 0;
    pthread_mutex_lock(&g_pend_mu);
    fl_pend *p = &g_pend[cid % PEND]; /* a collision drops the older stack: bounded, like MAX_PENDING */
    free(p->stack);
    p->cid = cid; p->used = 1; p->stack = copy;
    pthread_mutex_unlock(&g_pend_mu);
}

static char *pending_take(uint32_t cid) {
    char *s = NULL;
    pthread_mutex_lock(&g_pend_mu);
    fl_pend *p = &g_pend[cid % PEND];
    if (p->used && p->cid == cid) { s = p->stack; p->stack = NULL; p->used = 0; }
    pthread_mutex_unlock(&g_pend_mu);
    return s;
}

/* Allocations made inside a framework refinement (numba's EMM) take their stack there: the
   CUPTI callback leaves them alone. Per thread. */
static __thread int t_refined;
EXPORT int fl_refine(int delta) { t_refined += delta; return t_refined; }

/* ---- records ---- */
static void put_line(fl_buf *b) {
    fl_sink *s = g_sink;
    if (b->err || !s || fl_put(s, b->p, b->n) < 0) g_stats[S_LOST]++;
}

static void b_head(fl_buf *b, const char *event, int64_t t, fl_sink *s) {
    b_s(b, "{\"event\":\""); b_s(b, event); b_t(b, "\",\"t\":", t);
    b_s(b, ",\"pid\":"); b_i(b, s ? s->pid : 0);
}

static int64_t wall_of(uint64_t ts) { return g_wall0 + ((int64_t)ts - g_cupti0); }
static int64_t mono_of(uint64_t ts) { return g_mono0 + ((int64_t)ts - g_cupti0); }

static void rec_launch(uint32_t cbid, const char *symbol, uint32_t cid, const char *stack) {
    fl_buf b; b_init(&b);
    int64_t t = now_ns(CLOCK_REALTIME);
    b_head(&b, "launch", t, g_sink);
    b_s(&b, ",\"nodeid\":"); b_test_at(&b, -1);
    b_s(&b, ",\"source\":\"cupti\",\"kernel\":");
    const char *api = g_cbname[cbid] ? g_cbname[cbid] : "?";
    b_js(&b, symbol ? symbol : (strncmp(api, "cuGraphLaunch", 13) == 0 ? "<graph>" : "<unknown>"));
    b_s(&b, ",\"api\":"); b_js(&b, api);
    b_s(&b, ",\"correlation_id\":"); b_u(&b, cid);
    if (stack) { b_s(&b, ",\"stack\":"); b_s(&b, stack); }
    b_s(&b, "}\n");
    put_line(&b);
    b_free(&b);
    g_stats[S_LAUNCH]++;
}

static void rec_sync(uint32_t cbid, int kind, int failed) {
    static const char *what[] = {"context", "stream", "event"};
    fl_buf b; b_init(&b);
    int64_t t = now_ns(CLOCK_REALTIME);
    b_head(&b, "sync", t, g_sink);
    b_s(&b, ",\"nodeid\":"); b_test_at(&b, -1);
    b_s(&b, ",\"source\":\"cupti\",\"what\":\""); b_s(&b, what[kind - KIND_SYNC_CTX]);
    b_s(&b, "\",\"api\":"); b_js(&b, g_cbname[cbid] ? g_cbname[cbid] : "?");
    if (failed) b_s(&b, ",\"failed\":true");
    b_s(&b, "}\n");
    put_line(&b);
    b_free(&b);
    if (!failed) g_last_ok_sync = t;
    g_stats[S_SYNC]++;
}

EXPORT void fl_note(const char *message) {
    fl_buf b; b_init(&b);
    b_head(&b, "note", now_ns(CLOCK_REALTIME), g_sink);
    b_s(&b, ",\"nodeid\":null,\"source\":\"cupti\",\"message\":"); b_js(&b, message);
    b_s(&b, "}\n");
    put_line(&b);
    b_free(&b);
}

static void rec_memory(const uint8_t *a) {
    uint64_t op = rd(a, g_mem[M_OP]);
    if ((int64_t)op != g_op_alloc && (int64_t)op != g_op_release) return;
    uint32_t cid = (uint32_t)rd(a, g_mem[M_CID]);
    uint64_t ts = rd(a, g_mem[M_TS]), mk = rd(a, g_mem[M_MEMKIND]);
    int64_t t = wall_of(ts);
    char *stack = pending_take(cid);
    fl_buf b; b_init(&b);
    /* the Python route's field order: t_mono between t and pid */
    b_s(&b, (int64_t)op == g_op_alloc ? "{\"event\":\"alloc\"" : "{\"event\":\"free\"");
    b_t(&b, ",\"t\":", t);
    b_t(&b, ",\"t_mono\":", mono_of(ts));
    b_s(&b, ",\"pid\":"); b_i(&b, g_sink ? g_sink->pid : 0);
    b_s(&b, ",\"nodeid\":"); b_test_at(&b, t);
    b_s(&b, ",\"source\":\"cupti\",\"address\":"); b_u(&b, rd(a, g_mem[M_ADDR]));
    b_s(&b, ",\"kind\":\"device\",");
    b_s(&b, (int64_t)op == g_op_alloc ? "\"size\":" : "\"size_released\":"); b_u(&b, rd(a, g_mem[M_BYTES]));
    b_s(&b, ",\"memory_kind\":\""); b_s(&b, mk < 8 ? MEMKINDS[mk] : "unknown");
    b_s(&b, "\",\"correlation_id\":"); b_u(&b, cid);
    if (g_mem[M_DEV].size) { b_s(&b, ",\"device_id\":"); b_u(&b, rd(a, g_mem[M_DEV])); }
    if (g_mem[M_STREAM].size) { b_s(&b, ",\"stream_id\":"); b_u(&b, rd(a, g_mem[M_STREAM])); }
    if (rd(a, g_mem[M_ASYNC])) b_s(&b, ",\"async\":true");
    uint64_t ptype = rd(a, g_mem[M_POOLTYPE]);
    if (ptype == 1 || ptype == 2) {
        b_s(&b, ",\"pool\":{\"type\":\""); b_s(&b, ptype == 1 ? "local" : "imported");
        b_s(&b, "\",\"address\":"); b_u(&b, rd(a, g_mem[M_POOLADDR])); b_s(&b, "}");
    }
    if (stack) { b_s(&b, ",\"stack\":"); b_s(&b, stack); free(stack); }
    b_s(&b, "}\n");
    put_line(&b);
    b_free(&b);
    g_stats[S_MEM]++;
}

static int64_t last_test_change(void) {
    pthread_mutex_lock(&g_test_mu);
    int64_t t = g_ring_n ? g_ring[(g_ring_n - 1) % RING].t : 0;
    pthread_mutex_unlock(&g_test_mu);
    return t;
}

/* A kernel activity record: the launch line of route (a). A kernel the fault swallowed has start
   and end 0; it was launched after the last successful synchronization, the last kernel seen
   ending and the start of the test running, so the latest of those is its time (marked
   estimated): never later than the fault, and in the right test. */
static void rec_kernel(const uint8_t *a) {
    uint64_t start = rd(a, g_ker[K_START]), end = rd(a, g_ker[K_END]);
    uint64_t name = rd(a, g_ker[K_NAME]);
    int64_t t;
    int estimated = start == 0;
    if (estimated) {
        int64_t tc = last_test_change();
        t = g_last_ok_sync > g_last_kernel_end ? g_last_ok_sync : g_last_kernel_end;
        if (tc > t) t = tc;
        t += 1;
        g_stats[S_EST]++;
    } else {
        t = wall_of(start);
        if (end && wall_of(end) > g_last_kernel_end) g_last_kernel_end = wall_of(end);
    }
    fl_buf b; b_init(&b);
    b_head(&b, "launch", t, g_sink);
    b_s(&b, ",\"nodeid\":"); b_test_at(&b, t);
    b_s(&b, ",\"source\":\"cupti\",\"kernel\":");
    b_js(&b, name ? (const char *)(uintptr_t)name : "<unknown>");
    b_s(&b, ",\"via\":\"activity\",\"correlation_id\":"); b_u(&b, rd(a, g_ker[K_CID]));
    if (!estimated && end) b_t(&b, ",\"t_end\":", wall_of(end));
    if (estimated) b_s(&b, ",\"t_estimated\":true");
    if (g_ker[K_GX].size) {
        b_s(&b, ",\"grid\":["); b_u(&b, rd(a, g_ker[K_GX])); b_s(&b, ","); b_u(&b, rd(a, g_ker[K_GY]));
        b_s(&b, ","); b_u(&b, rd(a, g_ker[K_GZ])); b_s(&b, "],\"block\":["); b_u(&b, rd(a, g_ker[K_BX]));
        b_s(&b, ","); b_u(&b, rd(a, g_ker[K_BY])); b_s(&b, ","); b_u(&b, rd(a, g_ker[K_BZ])); b_s(&b, "]");
    }
    if (g_ker[K_DEV].size) { b_s(&b, ",\"device_id\":"); b_u(&b, rd(a, g_ker[K_DEV])); }
    if (g_ker[K_STREAM].size) { b_s(&b, ",\"stream_id\":"); b_u(&b, rd(a, g_ker[K_STREAM])); }
    b_s(&b, "}\n");
    put_line(&b);
    b_free(&b);
    g_stats[S_KER]++;
}

/* ---- allocation lines from the callback (FAULTHUNT_LEDGER_ALLOCS=callback) ----
   Instead of MEMORY2 activity records, each allocation API's exit callback reads the address and
   size from the call's own parameters (cuda.h's <api>_params structures; where each field lies
   is set per callback id by cupti_native.py) and writes the line at once: no activity record and
   no forced flush for allocations. modes: 1 alloc, *(CUdeviceptr *)p[addr] and size p[size];
   2 alloc, address p[addr] and size p[size] (cuMemMap); 3 pitched alloc, *(CUdeviceptr *)p[addr],
   size *(size_t *)p[aux] * p[size]; 4 free of p[addr]; 5 free of p[addr] with size p[size]. */
typedef struct { int8_t mode, addr_off, size_off, aux_off; uint8_t memkind, async; } fl_param;
static fl_param g_cbparam[MAX_CBID];
static int g_alloc_callbacks;

EXPORT int fl_cbparams(uint32_t cbid, int mode, int addr_off, int size_off, int aux_off, int memkind,
                       int async) {
    if (cbid >= MAX_CBID || mode < 0 || mode > 5 || memkind < 0 || memkind > 7) return -1;
    g_cbparam[cbid] = (fl_param){(int8_t)mode, (int8_t)addr_off, (int8_t)size_off, (int8_t)aux_off,
                                 (uint8_t)memkind, (uint8_t)async};
    return 0;
}

/* 1: allocation lines from the callbacks (the caller leaves MEMORY2 off); needs function_params */
EXPORT int fl_alloc_source(int callbacks) {
    if (callbacks && g_cb[CB_PARAMS].size != 8) return -1;
    g_alloc_callbacks = callbacks;
    return 0;
}

static uint64_t rd8(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void rec_api_memory(uint32_t cbid, const void *cbdata, uint32_t cid) {
    const fl_param *pp = &g_cbparam[cbid];
    const uint8_t *params = (const uint8_t *)(uintptr_t)rd(cbdata, g_cb[CB_PARAMS]);
    if (!params) return;
    uint64_t addr = 0, size = 0, ptr;
    int alloc = pp->mode <= 3, sized = pp->mode != 4;
    switch (pp->mode) {
    case 1: case 3:
        ptr = rd8(params + pp->addr_off);
        if (!ptr) return;
        addr = rd8((const uint8_t *)(uintptr_t)ptr);
        size = rd8(params + pp->size_off);
        if (pp->mode == 3) {
            uint64_t pitch = rd8(params + pp->aux_off);
            size = pitch ? rd8((const uint8_t *)(uintptr_t)pitch) * size : 0;
        }
        break;
    case 2: case 4: case 5:
        addr = rd8(params + pp->addr_off);
        if (sized) size = rd8(params + pp->size_off);
        break;
    default:
        return;
    }
    if (!addr) return; /* cuMemFree(0) frees nothing */
    char *stack = pending_take(cid); /* a free has one with FAULTHUNT_LEDGER_STACKS=all */
    int64_t t = now_ns(CLOCK_REALTIME), m = now_ns(CLOCK_MONOTONIC);
    fl_buf b; b_init(&b);
    b_s(&b, alloc ? "{\"event\":\"alloc\"" : "{\"event\":\"free\"");
    b_t(&b, ",\"t\":", t);
    b_t(&b, ",\"t_mono\":", m);
    b_s(&b, ",\"pid\":"); b_i(&b, g_sink ? g_sink->pid : 0);
    b_s(&b, ",\"nodeid\":"); b_test_at(&b, -1);
    b_s(&b, ",\"source\":\"cupti\",\"address\":"); b_u(&b, addr);
    b_s(&b, ",\"kind\":\"device\"");
    if (sized) { b_s(&b, alloc ? ",\"size\":" : ",\"size_released\":"); b_u(&b, size); }
    b_s(&b, ",\"memory_kind\":\""); b_s(&b, MEMKINDS[pp->memkind]);
    b_s(&b, "\",\"correlation_id\":"); b_u(&b, cid);
    if (pp->async) b_s(&b, ",\"async\":true");
    b_s(&b, ",\"api\":"); b_js(&b, g_cbname[cbid] ? g_cbname[cbid] : "?");
    b_s(&b, ",\"via\":\"callback\"");
    if (stack) { b_s(&b, ",\"stack\":"); b_s(&b, stack); free(stack); }
    b_s(&b, "}\n");
    put_line(&b);
    b_free(&b);
    g_stats[S_MEM]++;
}

/* ---- flushing ---- */
EXPORT int fl_flush(void) {
    pthread_mutex_lock(&g_flush_mu);
    int rc = -1;
    if (g_flush_all) {
        g_dirty = 0;
        g_last_flush = now_ns(CLOCK_MONOTONIC);
        g_stats[S_FLUSH]++;
        rc = g_flush_all(g_forced);
    }
    pthread_mutex_unlock(&g_flush_mu);
    return rc;
}

static int due(void) { return now_ns(CLOCK_MONOTONIC) - g_last_flush >= g_gap_ns; }

/* ---- the CUPTI callback ---- */
static int failed(const void *cbdata) {
    uint64_t p = rd(cbdata, g_cb[CB_RESULT]);
    return !p || *(const int32_t *)(uintptr_t)p != 0; /* CUresult; unknown counts as failed */
}

EXPORT void fl_cupti_callback(void *userdata, int domain, uint32_t cbid, const void *cbdata) {
    (void)userdata;
    /* only driver-API callbacks carry CallbackData; another domain's cbid means something else */
    if (domain != g_domain || cbid >= MAX_CBID || !g_have_cb) return;
    int kind = g_cbkind[cbid];
    if (!kind) return;
    int enter = (int32_t)rd(cbdata, g_cb[CB_SITE]) == g_enter_site;
    uint32_t cid = (uint32_t)rd(cbdata, g_cb[CB_CID]);
    if (kind == KIND_ALLOC || kind == KIND_FREE) {
        if (g_alloc_callbacks && g_cbparam[cbid].mode) {
            /* the line is written at exit from the call's parameters: nothing waits in a buffer */
            if (enter) {
                stack_fn st = g_stack;
                if (st && !t_refined && (kind == KIND_ALLOC ? g_alloc_stacks && stack_due() : g_launch_stacks))
                    st(cid, kind);
            } else if (failed(cbdata)) {
                free(pending_take(cid));
                fl_flush(); /* a sticky error: the kernels' records (native-activity) before it */
            } else {
                rec_api_memory(cbid, cbdata, cid);
            }
            return;
        }
        if (enter) {
            g_dirty = 1;
            stack_fn st = g_stack;
            /* as the Python route: stacks on allocations, on frees too with STACKS=all */
            if (st && !t_refined && (kind == KIND_ALLOC ? g_alloc_stacks && stack_due() : g_launch_stacks))
                st(cid, kind);
        } else if (failed(cbdata)) {
            fl_flush(); /* an allocation call returned an error: maybe the sticky one of a fault */
        }
        return;
    }
    if (kind == KIND_LAUNCH) {
        if (!enter) return;
        if (g_dirty && (g_flush_on_launch || due())) fl_flush();
        if (!g_launch_records) return;
        char *stack = NULL;
        stack_fn st = g_stack;
        if (g_launch_stacks && st) { st(cid, kind); stack = pending_take(cid); }
        uint64_t sym = rd(cbdata, g_cb[CB_SYMBOL]);
        rec_launch(cbid, sym ? (const char *)(uintptr_t)sym : NULL, cid, stack);
        free(stack);
        return;
    }
    if (enter) return;
    int bad = failed(cbdata);
    /* flush first: the kernels that ran before the fault are then written before the sync */
    if (bad || ((g_dirty || g_always) && due())) fl_flush();
    rec_sync(cbid, kind, bad);
}

/* ---- activity buffers ---- */
EXPORT void fl_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *p = NULL;
    if (posix_memalign(&p, 8, g_bufsize)) p = NULL;
    *buffer = p;
    *size = p ? g_bufsize : 0;
    *max_records = 0;
}

EXPORT void fl_buffer_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx; (void)stream; (void)size;
    if (!buffer) return;
    if (g_next && valid) {
        void *rec = NULL;
        for (;;) {
            int st = g_next(buffer, valid, &rec);
            if (st) { if (st != g_end_status) g_stats[S_BUFERR]++; break; }
            const uint8_t *a = rec;
            int32_t kind = (int32_t)rd(a, (fl_field){0, 4});
            if (kind == g_kind_mem2 && g_have_mem) rec_memory(a);
            else if ((kind == g_kind_ckernel || kind == g_kind_kernel) && g_have_ker && !g_launch_records)
                rec_kernel(a); /* launches from activity records: route (a) */
        }
    }
    free(buffer);
}

/* ---- the background flush ---- */
static pthread_t g_flusher;
static int g_flusher_on, g_flusher_stop;
static pthread_mutex_t g_flusher_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_flusher_cv;

static void *flusher(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_flusher_mu);
    while (!g_flusher_stop) {
        /* wake at least every 20 ms: the prefault keeps ahead of the lines; flushes keep their gap */
        int64_t gap = g_gap_ns < 20000000 ? (g_gap_ns > 1000000 ? g_gap_ns : 1000000) : 20000000;
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = until.tv_nsec + gap % 1000000000LL;
        until.tv_sec += gap / 1000000000LL + ns / 1000000000LL;
        until.tv_nsec = ns % 1000000000LL;
        pthread_cond_timedwait(&g_flusher_cv, &g_flusher_mu, &until);
        if (g_flusher_stop) break;
        pthread_mutex_unlock(&g_flusher_mu);
        if ((g_dirty || g_always) && due()) fl_flush();
        prefault(g_sink);
        pthread_mutex_lock(&g_flusher_mu);
    }
    pthread_mutex_unlock(&g_flusher_mu);
    return NULL;
}

EXPORT int fl_start_flusher(void) {
    if (g_flusher_on) return 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_flusher_cv, &ca);
    g_flusher_stop = 0;
    if (pthread_create(&g_flusher, NULL, flusher, NULL)) return -1;
    g_flusher_on = 1;
    return 0;
}

EXPORT void fl_stop_flusher(void) {
    if (!g_flusher_on) return;
    pthread_mutex_lock(&g_flusher_mu);
    g_flusher_stop = 1;
    pthread_cond_signal(&g_flusher_cv);
    pthread_mutex_unlock(&g_flusher_mu);
    pthread_join(g_flusher, NULL);
    g_flusher_on = 0;
}

/* The child must not touch the parent's mapping or its (maybe held) locks: every sink made before
   the fork is dead in the child (the Python writer opens the child's own file), the flush thread
   did not come along, and the library's own locks start afresh. */
static void after_fork_child(void) {
    g_gen++;
    g_sink = NULL;
    g_flusher_on = 0;
    pthread_mutex_init(&g_flusher_mu, NULL);
    pthread_mutex_init(&g_test_mu, NULL);
    pthread_mutex_init(&g_pend_mu, NULL);
    pthread_mutex_init(&g_flush_mu, NULL);
    pthread_mutex_init(&g_bucket_mu, NULL);
}

/* ---- a flush on the way down (fatal signals) ---- */
static const int FATAL[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTERM};
#define NFATAL (sizeof FATAL / sizeof FATAL[0])
static struct sigaction g_old[NFATAL];
static int g_installed[NFATAL];
static volatile sig_atomic_t g_dying;

static void crash_flush(int sig) {
    size_t i;
    for (i = 0; i < NFATAL && FATAL[i] != sig; i++) {}
    if (!g_dying) {
        g_dying = 1;
        /* CUPTI or the sink may be locked by the thread the signal interrupted: a flush that
           deadlocks ends in SIGALRM's default action instead of a hang */
        signal(SIGALRM, SIG_DFL);
        alarm(2);
        if (g_flush_all && pthread_mutex_trylock(&g_flush_mu) == 0) {
            g_flush_all(g_forced);
            pthread_mutex_unlock(&g_flush_mu);
        }
        alarm(0);
    }
    if (i < NFATAL) sigaction(sig, &g_old[i], NULL); /* the handler that was there (faulthandler...) */
    raise(sig);
}

/* Install the flush for fatal signals, chaining to the handlers in place; SIGTERM only when it has
   its default action (a Python-level handler stays in charge). Returns the number installed. */
EXPORT int fl_install_crash_flush(int with_sigterm) {
    int n = 0;
    for (size_t i = 0; i < NFATAL; i++) {
        if (g_installed[i]) { n++; continue; }
        struct sigaction old, sa;
        if (sigaction(FATAL[i], NULL, &old) < 0) continue;
        if (FATAL[i] == SIGTERM && (!with_sigterm || (!(old.sa_flags & SA_SIGINFO) && old.sa_handler != SIG_DFL)))
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = crash_flush;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_NODEFER | SA_ONSTACK;
        g_old[i] = old;
        if (sigaction(FATAL[i], &sa, NULL) == 0) { g_installed[i] = 1; n++; }
    }
    return n;
}

EXPORT void fl_remove_crash_flush(void) {
    for (size_t i = 0; i < NFATAL; i++) {
        if (g_installed[i]) { sigaction(FATAL[i], &g_old[i], NULL); g_installed[i] = 0; }
    }
}
