/*
 * The ledger reader's optional compiled part (docs/mapper.md, "Speed"): two loops of
 * faulthunt/ledger/reader.py done in C. reader.py keeps the pure-Python route for both and uses
 * it whenever this module is missing or declines a piece of work.
 *
 * scan(buf, count, first, file_pid, strings, consts)
 *     A chunk of complete ledger lines -> the replay's columns, or None. It takes a chunk only
 *     when every line is one JSON object in a narrow, strictly checked shape (ASCII only, no
 *     escapes in strings, numbers in JSON's own grammar, no duplicate keys among those read, one
 *     process); anything else is None and reader.py decodes the chunk exactly as before
 *     (msgspec, then json line by line). So a chunk it accepts gives the same columns msgspec
 *     would: it never decides about a doubtful line.
 *
 * replay(ev, addr, size, kinds, xs, refs, consts)
 *     reader._replay_lives's loop over alloc and free records (time order) -> lives: the same
 *     decisions in the same order, with hash tables for the live and the closed addresses, and
 *     the lives' columns made here. The merges of one allocation seen by two sources are
 *     returned in order for reader.py to apply.
 *
 * A CPython extension (built by setup.py with optional=True; loaded as faulthunt.ledger._mapfast).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* event codes: reader._ALLOC, _FREE, _LAUNCH, _SYNC, _OTHER */
enum { EV_ALLOC = 0, EV_FREE = 1, EV_LAUNCH = 2, EV_SYNC = 3, EV_OTHER = 4 };
/* the keys read; any other key's value is checked as JSON and passed over */
enum { K_EVENT, K_T, K_PID, K_TMONO, K_ADDRESS, K_SIZE, K_KIND, K_SOURCE, K_PHASE, K_KERNEL, NKEYS };
static const char *const KEY_NAMES[NKEYS] = {
    "event", "t", "pid", "t_mono", "address", "size", "kind", "source", "phase", "kernel"};
/* value types */
enum { V_NONE = 0, V_STR, V_INT, V_FLOAT, V_NULL, V_OTHER };

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    int type;
} Val;

#define MAX_DEPTH 64

static inline const unsigned char *ws(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
    return p;
}

/* bytes that end the plain part of a string: its quote, an escape, control and non-ASCII bytes */
static unsigned char STOP[256];

/* a string without escapes, control characters or non-ASCII bytes; returns past its quote */
static const unsigned char *str(const unsigned char *p, const unsigned char *end, Val *v) {
    const unsigned char *s = ++p;
#ifdef __SSE2__
    /* 16 bytes at a time: a quote, a backslash, or (signed) below 0x20, i.e. control or non-ASCII */
    const __m128i quote = _mm_set1_epi8('"'), slash = _mm_set1_epi8('\\'), low = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, slash)),
                                   _mm_cmplt_epi8(x, low));
        int m = _mm_movemask_epi8(hit);
        if (m) { p += __builtin_ctz(m); goto stopped; }
        p += 16;
    }
#endif
    while (p < end && !STOP[*p]) p++;
#ifdef __SSE2__
stopped:
#endif
    if (p >= end || *p != '"') return NULL;
    if (v) { v->p = s; v->n = p - s; v->type = V_STR; }
    return p + 1;
}

/* a number in JSON's grammar */
static const unsigned char *num(const unsigned char *p, const unsigned char *end, Val *v) {
    const unsigned char *s = p;
    int is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return NULL;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') { while (p < end && *p >= '0' && *p <= '9') p++; }
    else return NULL;
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (v) { v->p = s; v->n = p - s; v->type = is_int ? V_INT : V_FLOAT; }
    return p;
}

static const unsigned char *lit(const unsigned char *p, const unsigned char *end, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(end - p) < n || memcmp(p, w, n) != 0) return NULL;
    return p + n;
}

static const unsigned char *value(const unsigned char *p, const unsigned char *end, Val *v, int depth);

static const unsigned char *container(const unsigned char *p, const unsigned char *end, int depth) {
    unsigned char close = *p == '{' ? '}' : ']';
    int obj = *p == '{';
    if (depth > MAX_DEPTH) return NULL;
    p = ws(p + 1, end);
    if (p < end && *p == close) return p + 1;
    for (;;) {
        if (obj) {
            if (p >= end || *p != '"' || !(p = str(p, end, NULL))) return NULL;
            p = ws(p, end);
            if (p >= end || *p != ':') return NULL;
            p = ws(p + 1, end);
        }
        if (!(p = value(p, end, NULL, depth + 1))) return NULL;
        p = ws(p, end);
        if (p >= end) return NULL;
        if (*p == close) return p + 1;
        if (*p != ',') return NULL;
        p = ws(p + 1, end);
    }
}

static const unsigned char *value(const unsigned char *p, const unsigned char *end, Val *v, int depth) {
    if (p >= end) return NULL;
    switch (*p) {
    case '"': return str(p, end, v);
    case '{': case '[':
        if (v) v->type = V_OTHER;
        return container(p, end, depth);
    case 't': if (v) v->type = V_OTHER; return lit(p, end, "true");
    case 'f': if (v) v->type = V_OTHER; return lit(p, end, "false");
    case 'n': if (v) v->type = V_NULL; return lit(p, end, "null");
    default:
        if (*p == '-' || (*p >= '0' && *p <= '9')) return num(p, end, v);
        return NULL;
    }
}

static Py_ssize_t KEY_LEN[NKEYS];

static int key_of(const unsigned char *p, Py_ssize_t n) {
    if (n > 7) return -1;  /* every key read is shorter */
    for (int k = 0; k < NKEYS; k++)
        if (n == KEY_LEN[k] && p[0] == (unsigned char)KEY_NAMES[k][0] && memcmp(p, KEY_NAMES[k], n) == 0)
            return k;
    return -1;
}

/* one line's object -> vals[]; 0 when it is not one object of the accepted shape */
static int line_object(const unsigned char *p, const unsigned char *end, Val *vals) {
    for (int k = 0; k < NKEYS; k++) vals[k].type = V_NONE;
    p = ws(p, end);
    if (p >= end || *p != '{') return 0;
    p = ws(p + 1, end);
    if (p < end && *p == '}') return 0;
    for (;;) {
        Val key;
        if (p >= end || *p != '"' || !(p = str(p, end, &key))) return 0;
        p = ws(p, end);
        if (p >= end || *p != ':') return 0;
        p = ws(p + 1, end);
        int k = key_of(key.p, key.n);
        Val got;
        if (!(p = value(p, end, &got, 1))) return 0;
        if (k >= 0) {
            if (vals[k].type != V_NONE) return 0;  /* a duplicate key: not decided here */
            vals[k] = got;
        }
        p = ws(p, end);
        if (p >= end) return 0;
        if (*p == '}') break;
        if (*p != ',') return 0;
        p = ws(p + 1, end);
    }
    return ws(p + 1, end) == end;
}

static int to_double(const Val *v, double *out) {
    char buf[64];
    /* an integer literal becomes msgspec's int, then a float: -0 would be +0.0, and over 18
     * digits its integer route is not decided here */
    if (v->type == V_INT && (v->n > 18 || v->p[0] == '-')) return 0;
    if ((v->type != V_INT && v->type != V_FLOAT) || v->n >= (Py_ssize_t)sizeof buf) return 0;
    memcpy(buf, v->p, v->n);
    buf[v->n] = 0;
    char *stop;
    double d = PyOS_string_to_double(buf, &stop, NULL);
    if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    if (*stop || !isfinite(d)) return 0;
    *out = d;
    return 1;
}

static int to_u64(const Val *v, uint64_t *out) {
    if (v->type != V_INT || v->p[0] == '-' || v->n > 20) return 0;
    uint64_t x = 0;
    for (Py_ssize_t i = 0; i < v->n; i++) {
        uint64_t d = (uint64_t)(v->p[i] - '0');
        if (x > (UINT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *out = x;
    return 1;
}

static int to_i64(const Val *v, int64_t *out) {
    if (v->type != V_INT || v->n > 18) return 0;
    int neg = v->p[0] == '-';
    int64_t x = 0;
    for (Py_ssize_t i = neg; i < v->n; i++) x = x * 10 + (v->p[i] - '0');
    *out = neg ? -x : x;
    return 1;
}

/* is v the string literal w? */
#define is(v, w) ((v)->type == V_STR && (v)->n == (Py_ssize_t)sizeof(w) - 1 && memcmp((v)->p, w, sizeof(w) - 1) == 0)

/* strings seen in this call, to hand out one object per distinct text */
#define CACHE 64
typedef struct {
    const unsigned char *p[CACHE];
    Py_ssize_t n[CACHE];
    PyObject *s[CACHE];
    int used;
    PyObject *strings;
} Interned;

/* a new reference to the interned str of v's text, or NULL with an exception */
static PyObject *intern(Interned *c, const Val *v) {
    for (int i = 0; i < c->used; i++)
        if (c->n[i] == v->n && memcmp(c->p[i], v->p, v->n) == 0) { Py_INCREF(c->s[i]); return c->s[i]; }
    PyObject *s = PyUnicode_FromStringAndSize((const char *)v->p, v->n);
    if (!s) return NULL;
    PyObject *got = PyDict_SetDefault(c->strings, s, s);
    Py_DECREF(s);
    if (!got) return NULL;
    if (c->used < CACHE) {
        c->p[c->used] = v->p;
        c->n[c->used] = v->n;
        c->s[c->used++] = got;
        Py_INCREF(got);
    }
    Py_INCREF(got);
    return got;
}

/* consts: (KIND_DEVICE, KIND_SEGMENT, KIND_BLOCK, PHASE_REQUESTED, PHASE_COMPLETED) */
static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t count;
    long long first;
    PyObject *file_pid, *strings, *consts;
    if (!PyArg_ParseTuple(args, "y*nLOO!O!", &buf, &count, &first, &file_pid, &PyDict_Type, &strings,
                          &PyTuple_Type, &consts))
        return NULL;
    PyObject *result = NULL, *tb = NULL, *evb = NULL, *ab = NULL, *sb = NULL, *rb = NULL;
    PyObject *kinds = NULL, *xs = NULL, *pid_obj = NULL;
    Interned cache = {.used = 0, .strings = strings};
    const unsigned char *p = buf.buf, *end = p + buf.len;
    int declined = 1;
    if (PyTuple_GET_SIZE(consts) != 5 || count <= 0 || buf.len == 0 || end[-1] != '\n') goto done;
    if (file_pid != Py_None && !PyLong_Check(file_pid)) goto done;
    tb = PyBytes_FromStringAndSize(NULL, count * 8);
    evb = PyBytes_FromStringAndSize(NULL, count);
    ab = PyBytes_FromStringAndSize(NULL, count * 8);
    sb = PyBytes_FromStringAndSize(NULL, count * 8);
    rb = PyBytes_FromStringAndSize(NULL, count * 8);
    kinds = PyList_New(count);
    xs = PyList_New(count);
    if (!tb || !evb || !ab || !sb || !rb || !kinds || !xs) { declined = 0; goto done; }
    double *t = (double *)PyBytes_AS_STRING(tb);
    char *ev = PyBytes_AS_STRING(evb);
    uint64_t *addr = (uint64_t *)PyBytes_AS_STRING(ab), *size = (uint64_t *)PyBytes_AS_STRING(sb);
    int64_t *ref = (int64_t *)PyBytes_AS_STRING(rb);
    /* the process: 0 none yet, 1 None, 2 an int (pid_val) */
    int pid_kind = 0;
    int64_t pid_val = 0;
    int64_t file_val = 0;
    int file_kind = 1;
    if (file_pid != Py_None) {
        int overflow;
        file_val = PyLong_AsLongLongAndOverflow(file_pid, &overflow);
        if (overflow || (file_val == -1 && PyErr_Occurred())) { PyErr_Clear(); goto done; }
        file_kind = 2;
    }
    uint64_t max_addr = 0, max_size = 0;
    Py_ssize_t best = -1;
    double best_t = 0, best_tm = 0;
    Py_ssize_t i = 0;
    Val v[NKEYS];
    while (p < end) {
        const unsigned char *nl = memchr(p, '\n', end - p);
        if (i >= count || !line_object(p, nl, v)) goto done;
        p = nl + 1;
        int e;
        if (is(&v[K_EVENT], "alloc")) e = EV_ALLOC;
        else if (is(&v[K_EVENT], "free")) e = EV_FREE;
        else if (is(&v[K_EVENT], "launch")) e = EV_LAUNCH;
        else if (is(&v[K_EVENT], "sync")) e = EV_SYNC;
        else if (is(&v[K_EVENT], "note")) e = EV_OTHER;
        else goto done;
        if (!to_double(&v[K_T], &t[i])) goto done;
        int pk;
        int64_t pv = 0;
        if (v[K_PID].type == V_NONE) { pk = file_kind; pv = file_val; }
        else if (v[K_PID].type == V_NULL) pk = 1;
        else if (to_i64(&v[K_PID], &pv)) pk = 2;
        else goto done;
        if (pid_kind == 0) { pid_kind = pk; pid_val = pv; }
        else if (pk != pid_kind || (pk == 2 && pv != pid_val)) goto done;  /* several processes */
        if (v[K_TMONO].type != V_NONE && v[K_TMONO].type != V_NULL) {
            double tm;
            if (!to_double(&v[K_TMONO], &tm)) goto done;
            if (best < 0 || t[i] < best_t) { best = i; best_t = t[i]; best_tm = tm; }
        }
        PyObject *kind = Py_None, *x = Py_None;
        addr[i] = size[i] = 0;
        if (e == EV_ALLOC || e == EV_FREE) {
            if (!to_u64(&v[K_ADDRESS], &addr[i])) goto done;
            if (e == EV_ALLOC && !to_u64(&v[K_SIZE], &size[i])) goto done;
            const Val *k = &v[K_KIND];
            if (is(k, "device")) kind = PyTuple_GET_ITEM(consts, 0);
            else if (is(k, "segment")) kind = PyTuple_GET_ITEM(consts, 1);
            else if (is(k, "block")) kind = PyTuple_GET_ITEM(consts, 2);
            else if (k->type != V_NONE && k->type != V_NULL) goto done;
            if (addr[i] > max_addr) max_addr = addr[i];
            if (size[i] > max_size) max_size = size[i];
        }
        const Val *xv = e == EV_ALLOC ? &v[K_SOURCE] : e == EV_FREE ? &v[K_PHASE]
                        : e == EV_LAUNCH ? &v[K_KERNEL] : NULL;
        if (e == EV_FREE) {
            if (is(xv, "requested")) x = PyTuple_GET_ITEM(consts, 3);
            else if (is(xv, "completed")) x = PyTuple_GET_ITEM(consts, 4);
            else if (xv->type != V_NONE && xv->type != V_NULL) goto done;
        } else if (xv && xv->type == V_STR) {
            x = intern(&cache, xv);
            if (!x) { declined = 0; goto done; }
            Py_DECREF(x);  /* the cache or the dict holds it; the list takes its own below */
        } else if (xv && !(e == EV_ALLOC && (xv->type == V_NONE || xv->type == V_NULL))) {
            goto done;  /* a launch needs its kernel; a source is a string or null */
        }
        ev[i] = (char)e;
        ref[i] = first + i;
        Py_INCREF(kind);
        PyList_SET_ITEM(kinds, i, kind);
        Py_INCREF(x);
        PyList_SET_ITEM(xs, i, x);
        i++;
    }
    if (i != count || (max_size && max_addr > UINT64_MAX - max_size)) goto done;
    pid_obj = pid_kind == 2 ? PyLong_FromLongLong(pid_val) : Py_NewRef(Py_None);
    PyObject *mono = best < 0 ? Py_NewRef(Py_None) : Py_BuildValue("(dnd)", best_t, best, best_tm);
    if (!pid_obj || !mono) { Py_XDECREF(mono); declined = 0; goto done; }
    result = PyTuple_Pack(8, pid_obj, tb, evb, ab, sb, rb, kinds, xs);
    if (result) {
        PyObject *both = Py_BuildValue("(NN)", result, mono);
        result = both;
    } else {
        Py_DECREF(mono);
    }
    declined = 0;
done:
    /* lists filled only in part: the rest of their slots are NULL, which list_dealloc allows */
    for (int k = 0; k < cache.used; k++) Py_DECREF(cache.s[k]);
    Py_XDECREF(tb); Py_XDECREF(evb); Py_XDECREF(ab); Py_XDECREF(sb); Py_XDECREF(rb);
    Py_XDECREF(kinds); Py_XDECREF(xs); Py_XDECREF(pid_obj);
    PyBuffer_Release(&buf);
    if (declined) Py_RETURN_NONE;
    return result;
}

/* ---- replay ---------------------------------------------------------------------------------- */

/* an address -> life number table (open addressing, linear probing, deletion by backward shift) */
typedef struct {
    uint64_t *key;
    int64_t *val;
    unsigned char *used;
    size_t mask;
} Table;

static int table_init(Table *t, size_t want) {
    size_t cap = 16;
    while (cap < 2 * want + 16) cap <<= 1;
    t->key = PyMem_Calloc(cap, sizeof *t->key);
    t->val = PyMem_Calloc(cap, sizeof *t->val);
    t->used = PyMem_Calloc(cap, 1);
    t->mask = cap - 1;
    return t->key && t->val && t->used;
}

static void table_free(Table *t) {
    PyMem_Free(t->key); PyMem_Free(t->val); PyMem_Free(t->used);
}

static inline size_t slot_of(const Table *t, uint64_t k) {
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 17) & t->mask;
}

static inline size_t table_find(const Table *t, uint64_t k) {
    size_t i = slot_of(t, k);
    while (t->used[i] && t->key[i] != k) i = (i + 1) & t->mask;
    return i;
}

static inline void table_put(Table *t, uint64_t k, int64_t v) {
    size_t i = table_find(t, k);
    t->used[i] = 1; t->key[i] = k; t->val[i] = v;
}

static inline void table_del(Table *t, size_t i) {
    size_t j = i;
    t->used[i] = 0;
    for (;;) {
        j = (j + 1) & t->mask;
        if (!t->used[j]) return;
        size_t h = slot_of(t, t->key[j]);
        /* move j back to i when its home slot is not in (i, j] (cyclically) */
        if ((i <= j) ? (h <= i || h > j) : (h <= i && h > j)) {
            t->key[i] = t->key[j]; t->val[i] = t->val[j]; t->used[i] = 1; t->used[j] = 0;
            i = j;
        }
    }
}

static int kind_code(PyObject *k, PyObject *consts) {
    /* 0 device, 1 segment, 2 block, 3 None, 4 anything else (a free of another kind) */
    if (k == Py_None) return 3;
    for (int c = 0; c < 3; c++) {
        PyObject *w = PyTuple_GET_ITEM(consts, c);
        if (k == w) return c;
        if (PyUnicode_Check(k)) {
            int r = PyUnicode_Compare(k, w);
            if (r == -1 && PyErr_Occurred()) return -1;
            if (r == 0) return c;
        }
    }
    return 4;
}

static int get_buf(PyObject *o, Py_buffer *b, Py_ssize_t item, Py_ssize_t n) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS) < 0) return 0;
    if (b->len != item * n) {
        PyBuffer_Release(b);
        b->obj = NULL;
        PyErr_SetString(PyExc_ValueError, "replay: a column of the wrong length");
        return 0;
    }
    return 1;
}

/* one level's lives as the replay makes them (reader._LevelLives's columns) */
typedef struct {
    Py_ssize_t cap, count;
    int64_t *r0, *r1, *fr, *dn, *ref;
    uint64_t *addr, *end;
    char *kind;
    PyObject *began;
} Lives;

static int lives_init(Lives *l, Py_ssize_t cap, Py_ssize_t n) {
    size_t c = cap ? (size_t)cap : 1;
    l->cap = cap;
    l->count = 0;
    l->r0 = PyMem_Malloc(c * 8); l->r1 = PyMem_Malloc(c * 8); l->fr = PyMem_Malloc(c * 8);
    l->dn = PyMem_Malloc(c * 8); l->ref = PyMem_Malloc(c * 8); l->addr = PyMem_Malloc(c * 8);
    l->end = PyMem_Malloc(c * 8); l->kind = PyMem_Malloc(c);
    l->began = PyByteArray_FromStringAndSize(NULL, n);
    if (!l->r0 || !l->r1 || !l->fr || !l->dn || !l->ref || !l->addr || !l->end || !l->kind) {
        PyErr_NoMemory();
        return 0;
    }
    if (!l->began) return 0;
    memset(PyByteArray_AS_STRING(l->began), 0, n);
    for (Py_ssize_t i = 0; i < cap; i++) { l->r1[i] = n; l->fr[i] = -1; l->dn[i] = -1; }
    return 1;
}

static void lives_clear(Lives *l) {
    PyMem_Free(l->r0); PyMem_Free(l->r1); PyMem_Free(l->fr); PyMem_Free(l->dn); PyMem_Free(l->ref);
    PyMem_Free(l->addr); PyMem_Free(l->end); PyMem_Free(l->kind);
    Py_CLEAR(l->began);
}

/* (r0, r1, free, done, ref, kind, began, address, end), cut to the lives made; a new reference */
static PyObject *lives_tuple(Lives *l) {
    Py_ssize_t m = l->count;
    return Py_BuildValue("(y#y#y#y#y#y#Oy#y#)", (char *)l->r0, m * 8, (char *)l->r1, m * 8,
                         (char *)l->fr, m * 8, (char *)l->dn, m * 8, (char *)l->ref, m * 8, l->kind, m,
                         l->began, (char *)l->addr, m * 8, (char *)l->end, m * 8);
}

/*
 * replay(ev: bytes, addr: array Q, size: array Q, kinds: list, xs: list, refs: array q, consts)
 * -> (unmatched, merged [(level, life, rank), ...], lives0, lives1), or None when an alloc record
 * has a kind the replay does not know (reader.py's loop then decides, as without this module).
 */
static PyObject *replay(PyObject *self, PyObject *args) {
    PyObject *evo, *ao, *so, *kinds, *xs, *ro, *consts;
    if (!PyArg_ParseTuple(args, "OOOO!O!OO!", &evo, &ao, &so, &PyList_Type, &kinds, &PyList_Type, &xs,
                          &ro, &PyTuple_Type, &consts))
        return NULL;
    if (PyTuple_GET_SIZE(consts) != 5) {
        PyErr_SetString(PyExc_ValueError, "replay: bad arguments");
        return NULL;
    }
    Py_buffer evb = {0}, ab = {0}, sb = {0}, rb = {0};
    PyObject *merged = NULL, *result = NULL;
    Table live[2] = {{0}}, closed[2] = {{0}};
    Lives lives[2] = {{0}};
    char *codes = NULL;
    int declined = 0;
    Py_ssize_t n = PyList_GET_SIZE(kinds);
    if (PyList_GET_SIZE(xs) != n) { PyErr_SetString(PyExc_ValueError, "replay: columns differ"); return NULL; }
    if (!get_buf(evo, &evb, 1, n) || !get_buf(ao, &ab, 8, n) || !get_buf(so, &sb, 8, n) ||
        !get_buf(ro, &rb, 8, n))
        goto fail;
    const char *ev = evb.buf;
    const uint64_t *addrs = ab.buf, *sizes = sb.buf;
    const int64_t *refs = rb.buf;
    codes = PyMem_Malloc(n ? n : 1);
    if (!codes) { PyErr_NoMemory(); goto fail; }
    Py_ssize_t cap[2] = {0, 0};
    for (Py_ssize_t r = 0; r < n; r++) {
        if (ev[r] != EV_ALLOC && ev[r] != EV_FREE) continue;
        int kc = kind_code(PyList_GET_ITEM(kinds, r), consts);
        if (kc < 0) goto fail;
        codes[r] = (char)kc;
        if (ev[r] == EV_ALLOC) {
            if (kc == 4) { declined = 1; goto fail; }
            cap[kc == 2]++;
        }
    }
    for (int lv = 0; lv < 2; lv++) {
        if (!lives_init(&lives[lv], cap[lv], n)) goto fail;
        if (!table_init(&live[lv], cap[lv]) || !table_init(&closed[lv], cap[lv])) { PyErr_NoMemory(); goto fail; }
    }
    merged = PyList_New(0);
    if (!merged) goto fail;
    PyObject *completed = PyTuple_GET_ITEM(consts, 4);
    Py_ssize_t unmatched = 0;
    for (Py_ssize_t rank = 0; rank < n; rank++) {
        int e = ev[rank];
        if (e != EV_ALLOC && e != EV_FREE) continue;
        uint64_t a = addrs[rank];
        int kc = codes[rank];
        if (e == EV_ALLOC) {
            int lv = kc == 2;
            Lives *L = &lives[lv];
            size_t at = table_find(&live[lv], a);
            if (live[lv].used[at]) {
                int64_t old = live[lv].val[at];
                if (sizes[L->r0[old]] == sizes[rank]) {  /* one allocation seen by two sources */
                    PyObject *m = Py_BuildValue("(inn)", lv, (Py_ssize_t)old, rank);
                    if (!m || PyList_Append(merged, m) < 0) { Py_XDECREF(m); goto fail; }
                    Py_DECREF(m);
                    continue;
                }
                L->r1[old] = rank;  /* a new allocation where one is live: its free went unrecorded */
                L->fr[old] = -2;
                table_put(&closed[lv], a, old);
            }
            Py_ssize_t life = L->count++;
            live[lv].used[at] = 1; live[lv].key[at] = a; live[lv].val[at] = life;
            L->r0[life] = rank;
            L->ref[life] = refs[rank];
            L->addr[life] = a;
            L->end[life] = a + sizes[rank];  /* below 2**64: the reader skips any line beyond */
            L->kind[life] = (char)(kc == 3 ? 0 : kc);
            PyByteArray_AS_STRING(L->began)[rank] = 1;
            continue;
        }
        int lo = kc == 2 ? 1 : 0, hi = kc == 2 ? 1 : (kc <= 1 ? 0 : 1);
        int done = 0;
        for (int lv = lo; lv <= hi && !done; lv++) {
            size_t at = table_find(&live[lv], a);
            if (!live[lv].used[at]) continue;
            Lives *L = &lives[lv];
            int64_t life = live[lv].val[at];
            table_del(&live[lv], at);
            L->r1[life] = rank;
            L->fr[life] = refs[rank];
            PyObject *phase = PyList_GET_ITEM(xs, rank);
            int is_done = phase == Py_None || phase == completed;
            if (!is_done && PyUnicode_Check(phase)) {
                int r = PyUnicode_Compare(phase, completed);
                if (r == -1 && PyErr_Occurred()) goto fail;
                is_done = r == 0;
            }
            if (is_done) L->dn[life] = rank;
            table_put(&closed[lv], a, life);
            done = 1;
        }
        if (done) continue;
        for (int lv = lo; lv <= hi && !done; lv++) {  /* a deferred driver free after the program's own */
            size_t at = table_find(&closed[lv], a);
            if (!closed[lv].used[at]) continue;
            int64_t life = closed[lv].val[at];
            if (lives[lv].dn[life] < 0) { lives[lv].dn[life] = rank; done = 1; }
        }
        if (!done) unmatched++;
    }
    PyObject *l0 = lives_tuple(&lives[0]);
    PyObject *l1 = l0 ? lives_tuple(&lives[1]) : NULL;
    if (l0 && l1) result = Py_BuildValue("(nONN)", unmatched, merged, l0, l1);
    else Py_XDECREF(l0);
fail:
    for (int lv = 0; lv < 2; lv++) {
        table_free(&live[lv]);
        table_free(&closed[lv]);
        lives_clear(&lives[lv]);
    }
    PyMem_Free(codes);
    if (evb.obj) PyBuffer_Release(&evb);
    if (ab.obj) PyBuffer_Release(&ab);
    if (sb.obj) PyBuffer_Release(&sb);
    if (rb.obj) PyBuffer_Release(&rb);
    Py_XDECREF(merged);
    if (declined && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}

/* ---- the index's columns ------------------------------------------------------------------ */

typedef struct {
    uint64_t key;
    int64_t i;
} Keyed;

static int by_key(const void *a, const void *b) {
    const Keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;  /* stable: equal starts keep their order */
}

static int buf8(PyObject *o, Py_buffer *b, Py_ssize_t n) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (b->itemsize != 8 || b->len != 8 * n) { PyBuffer_Release(b); b->obj = NULL; return 0; }
    return 1;
}

/*
 * index_columns(addr: array Q, end: array Q, r0: array q, r1: array q, narrow: bool)
 * -> (addr, end, r0, r1, lives, glo, starts) as bytes, or None (columns not of 8-byte items).
 * Lives sorted by start, stably (lives: their numbers, the order); r0/r1 as 4-byte items when
 * narrow; glo: the first index of each distinct start, then n; starts: those starts.
 */
static PyObject *index_columns(PyObject *self, PyObject *args) {
    PyObject *ao, *eo, *r0o, *r1o;
    int narrow;
    if (!PyArg_ParseTuple(args, "OOOOp", &ao, &eo, &r0o, &r1o, &narrow)) return NULL;
    Py_buffer b[4] = {{0}};
    PyObject *in[4] = {ao, eo, r0o, r1o}, *out[7] = {0}, *result = NULL;
    Keyed *keyed = NULL;
    Py_ssize_t n = PyObject_Length(ao);
    int declined = 0;
    if (n < 0) return NULL;
    for (int k = 0; k < 4; k++) {
        int r = buf8(in[k], &b[k], n);
        if (r < 0) goto done;
        if (r == 0) { declined = 1; goto done; }
    }
    const uint64_t *addr = b[0].buf, *end = b[1].buf;
    const int64_t *r0 = b[2].buf, *r1 = b[3].buf;
    keyed = PyMem_Malloc((n ? n : 1) * sizeof *keyed);
    if (!keyed) { PyErr_NoMemory(); goto done; }
    int sorted = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        keyed[i].key = addr[i];
        keyed[i].i = i;
        if (i && addr[i] < addr[i - 1]) sorted = 0;
    }
    if (!sorted) qsort(keyed, n, sizeof *keyed, by_key);
    Py_ssize_t rs = narrow ? 4 : 8, groups = 0;
    for (Py_ssize_t i = 0; i < n; i++) groups += !i || keyed[i].key != keyed[i - 1].key;
    Py_ssize_t sizes[7] = {8 * n, 8 * n, rs * n, rs * n, 8 * n, 8 * (groups + 1), 8 * groups};
    for (int k = 0; k < 7; k++)
        if (!(out[k] = PyBytes_FromStringAndSize(NULL, sizes[k]))) goto done;
    uint64_t *oa = (uint64_t *)PyBytes_AS_STRING(out[0]), *oe = (uint64_t *)PyBytes_AS_STRING(out[1]);
    char *or0 = PyBytes_AS_STRING(out[2]), *or1 = PyBytes_AS_STRING(out[3]);
    int64_t *ol = (int64_t *)PyBytes_AS_STRING(out[4]), *glo = (int64_t *)PyBytes_AS_STRING(out[5]);
    uint64_t *starts = (uint64_t *)PyBytes_AS_STRING(out[6]);
    Py_ssize_t g = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t j = keyed[i].i;
        oa[i] = addr[j];
        oe[i] = end[j];
        ol[i] = j;
        if (narrow) {
            ((int32_t *)or0)[i] = (int32_t)r0[j];
            ((int32_t *)or1)[i] = (int32_t)r1[j];
        } else {
            ((int64_t *)or0)[i] = r0[j];
            ((int64_t *)or1)[i] = r1[j];
        }
        if (!i || keyed[i].key != keyed[i - 1].key) { glo[g] = i; starts[g++] = keyed[i].key; }
    }
    glo[g] = n;
    result = PyTuple_New(7);
    if (result)
        for (int k = 0; k < 7; k++) { PyTuple_SET_ITEM(result, k, out[k]); out[k] = NULL; }
done:
    for (int k = 0; k < 7; k++) Py_XDECREF(out[k]);
    for (int k = 0; k < 4; k++) if (b[k].obj) PyBuffer_Release(&b[k]);
    PyMem_Free(keyed);
    if (declined) Py_RETURN_NONE;
    return result;
}

/* nondecreasing(array d or Q): are the values in order (each <= the next)? */
static PyObject *nondecreasing(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    int ok = 1;
    Py_ssize_t n = b.itemsize ? b.len / b.itemsize : 0;
    if (b.format && strcmp(b.format, "d") == 0) {
        const double *d = b.buf;
        for (Py_ssize_t i = 1; i < n && ok; i++) ok = d[i - 1] <= d[i];
    } else if (b.format && b.itemsize == 8 && (strcmp(b.format, "Q") == 0 || strcmp(b.format, "L") == 0)) {
        const uint64_t *q = b.buf;
        for (Py_ssize_t i = 1; i < n && ok; i++) ok = q[i - 1] <= q[i];
    } else {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_TypeError, "nondecreasing: an array of d or Q");
        return NULL;
    }
    PyBuffer_Release(&b);
    return PyBool_FromLong(ok);
}

/* pairwise(array, want_max): the next level up of a min or max tree (array of Q, q, or i;
 * even length), as bytes of the same item size */
static PyObject *pairwise(PyObject *self, PyObject *args) {
    PyObject *o;
    int want_max;
    if (!PyArg_ParseTuple(args, "Op", &o, &want_max)) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    char f = b.format && b.format[0] && !b.format[1] ? b.format[0] : 0;
    Py_ssize_t n = b.itemsize ? b.len / b.itemsize : 0;
    if (!((f == 'Q' || f == 'L' || f == 'q' || f == 'l') && b.itemsize == 8) && !(f == 'i' && b.itemsize == 4)) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_TypeError, "pairwise: an array of Q, q or i");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n / 2) * b.itemsize);
    if (!out) { PyBuffer_Release(&b); return NULL; }
#define PAIRS(T) do { \
        const T *x = b.buf; T *y = (T *)PyBytes_AS_STRING(out); \
        for (Py_ssize_t i = 0; i < n / 2; i++) { \
            T l = x[2 * i], r = x[2 * i + 1]; \
            y[i] = want_max ? (r > l ? r : l) : (r < l ? r : l); \
        } } while (0)
    if (f == 'Q' || f == 'L') PAIRS(uint64_t);
    else if (f == 'q' || f == 'l') PAIRS(int64_t);
    else PAIRS(int32_t);
#undef PAIRS
    PyBuffer_Release(&b);
    return out;
}

/* ---- the record store --------------------------------------------------------------------- */

/* nth_line(data, skip): the line after `skip` newlines, without its newline, or None when data
 * does not hold all of it (the caller reads on) */
static PyObject *nth_line(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t skip;
    if (!PyArg_ParseTuple(args, "y*n", &b, &skip)) return NULL;
    const char *p = b.buf, *end = p + b.len;
    for (Py_ssize_t k = 0; k < skip && p; k++) {
        p = memchr(p, '\n', end - p);
        if (p) p++;
    }
    const char *nl = p ? memchr(p, '\n', end - p) : NULL;
    PyObject *out = nl ? PyBytes_FromStringAndSize(p, nl - p) : Py_NewRef(Py_None);
    PyBuffer_Release(&b);
    return out;
}

/* newlines(data, at, step, next_mark, seen) -> (marks as bytes of int64, seen): the running
 * count of newlines (from `seen`) before every mark (multiples of `step` from next_mark, file
 * offsets, `at` the offset of data's first byte) inside data, and after all of data */
static PyObject *newlines(PyObject *self, PyObject *args) {
    Py_buffer b;
    long long at, step, mark, seen;
    if (!PyArg_ParseTuple(args, "y*LLLL", &b, &at, &step, &mark, &seen)) return NULL;
    if (step <= 0 || mark < at) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "newlines: bad marks");
        return NULL;
    }
    long long stop = at + b.len, count = mark < stop ? (stop - mark + step - 1) / step : 0;
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * 8);
    if (!out) { PyBuffer_Release(&b); return NULL; }
    int64_t *marks = (int64_t *)PyBytes_AS_STRING(out);
    const char *p = b.buf, *end = p + b.len;
    long long k = 0;
    for (const char *q = p;; q++) {
        q = memchr(q, '\n', end - q);
        long long off = q ? at + (q - p) : stop;  /* the next newline's file offset */
        while (k < count && mark + k * step <= off) marks[k++] = seen;  /* marks at or before it */
        if (!q) break;
        seen++;
    }
    PyBuffer_Release(&b);
    return Py_BuildValue("(NL)", out, seen);
}

static PyMethodDef methods[] = {
    {"nth_line", nth_line, METH_VARARGS, "the line after so many newlines, or None"},
    {"newlines", newlines, METH_VARARGS, "newline counts at marks (the record store's)"},
    {"pairwise", pairwise, METH_VARARGS, "one level up of a min or max tree"},
    {"index_columns", index_columns, METH_VARARGS, "lives -> the index's sorted columns (see _mapfast.c)"},
    {"nondecreasing", nondecreasing, METH_O, "is an array of d or Q in order?"},
    {"scan", scan, METH_VARARGS, "ledger lines -> the replay's columns, or None (see _mapfast.c)"},
    {"replay", replay, METH_VARARGS, "alloc/free records in time order -> lives (see _mapfast.c)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_mapfast", NULL, -1, methods};

PyMODINIT_FUNC PyInit__mapfast(void) {
    for (int k = 0; k < NKEYS; k++) KEY_LEN[k] = (Py_ssize_t)strlen(KEY_NAMES[k]);
    for (int c = 0; c < 256; c++) STOP[c] = c == '"' || c == '\\' || c < 0x20 || c >= 0x80;
    return PyModule_Create(&module);
}
