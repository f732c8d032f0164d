/* SanitizerRecord.json_text, compiled: the same text (json.dumps of to_json()), written into one
 * buffer instead of assembled from Python strings. `sanitize parse --json` prints one per record;
 * in Python the text of a record costs about 2.5 us, here well under one.
 *
 * record_json(fields, jframes, escape) takes a record's __dict__, the Python function that writes a
 * stack's JSON (remembered per stack) and json's encode_basestring_ascii. It writes only values of
 * the types the parsers store (str, int, None, tuples of them); on anything else it returns None
 * and the Python json_text writes the record (records/sanitizer.py), so the two cannot differ.
 * Strings of printable ASCII without quotes or backslashes are copied between quotes (what
 * encode_basestring_ascii makes of them); any other string goes through `escape` itself.
 *
 * Built by setup.py at `pip install` (optional=True): without a compiler json_text is Python only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n, cap;
    char local[2048];
} Buf;

/* room for `more` bytes: the rare case (the buffer must grow) out of line, the check inline */
static int grow_slow(Buf *b, size_t more)
{
    size_t cap;
    char *p;
    cap = b->cap * 2;
    while (cap < b->n + more)
        cap *= 2;
    if (b->p == b->local) {
        p = PyMem_Malloc(cap);
        if (p != NULL)
            memcpy(p, b->local, b->n);
    } else {
        p = PyMem_Realloc(b->p, cap);
    }
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int grow(Buf *b, size_t more)
{
    return b->n + more <= b->cap ? 0 : grow_slow(b, more);
}

static inline int put(Buf *b, const char *s, size_t n)
{
    if (grow(b, n) < 0)
        return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

#define PUTS(b, lit) put((b), (lit), sizeof(lit) - 1)

/* an ASCII str object's text (its UTF-8 is its data) */
static int put_ascii_str(Buf *b, PyObject *s)
{
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(s, &n);
    if (text == NULL)
        return -1;
    return put(b, text, (size_t)n);
}

/* 1: written, 0: a type this writer leaves to Python, -1: error */
static int put_int(Buf *b, PyObject *v)
{
    long long x;
    int overflow;
    char tmp[32];
    if (!PyLong_CheckExact(v))
        return 0;
    x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        PyObject *s = PyObject_Str(v);
        int rc;
        if (s == NULL)
            return -1;
        rc = put_ascii_str(b, s);
        Py_DECREF(s);
        return rc < 0 ? -1 : 1;
    }
    {
        /* the digits from the right (snprintf costs more than the rest of a record) */
        unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
        char *end = tmp + sizeof tmp, *q = end;
        do {
            *--q = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (x < 0)
            *--q = '-';
        return put(b, q, (size_t)(end - q)) < 0 ? -1 : 1;
    }
}

static int put_null_or_int(Buf *b, PyObject *v)
{
    if (v == Py_None)
        return PUTS(b, "null") < 0 ? -1 : 1;
    return put_int(b, v);
}

/* strings lately found to need no escaping, held (so an address cannot come back as another
 * string): the kernel, file and message of one error site are the same objects record after record */
#define PLAIN_SLOTS 64
#define PLAIN_MAX 4096
static PyObject *plain[PLAIN_SLOTS];
/* the bytes encode_basestring_ascii writes otherwise than as themselves (set at import) */
static unsigned char ESCAPED[256];

static int put_str(Buf *b, PyObject *v, PyObject *escape)
{
    Py_ssize_t n, i;
    const Py_UCS1 *d;
    PyObject *e;
    int rc;
    size_t slot = ((size_t)(uintptr_t)v >> 4) % PLAIN_SLOTS;
    if (!PyUnicode_CheckExact(v))
        return 0;
    n = PyUnicode_GET_LENGTH(v);
    if (PyUnicode_IS_ASCII(v)) {
        d = PyUnicode_1BYTE_DATA(v);
        if (plain[slot] == v) {
            i = n;
        } else {
            for (i = 0; i < n; i++)
                if (ESCAPED[d[i]])
                    break;
            if (i == n && n <= PLAIN_MAX) {
                Py_INCREF(v);
                Py_XSETREF(plain[slot], v);
            }
        }
        if (i == n) {
            if (grow(b, (size_t)n + 2) < 0)
                return -1;
            b->p[b->n++] = '"';
            memcpy(b->p + b->n, d, (size_t)n);
            b->n += (size_t)n;
            b->p[b->n++] = '"';
            return 1;
        }
    }
    e = PyObject_CallOneArg(escape, v);
    if (e == NULL)
        return -1;
    if (!PyUnicode_CheckExact(e) || !PyUnicode_IS_ASCII(e)) {
        Py_DECREF(e);
        return 0;
    }
    rc = put_ascii_str(b, e);
    Py_DECREF(e);
    return rc < 0 ? -1 : 1;
}

static int put_null_or_str(Buf *b, PyObject *v, PyObject *escape)
{
    if (v == Py_None)
        return PUTS(b, "null") < 0 ? -1 : 1;
    return put_str(b, v, escape);
}

/* '[%d, %d, %d]' % t, or null */
static int put_dim(Buf *b, PyObject *t)
{
    int k, rc;
    if (t == Py_None)
        return PUTS(b, "null") < 0 ? -1 : 1;
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 3)
        return 0;
    for (k = 0; k < 3; k++)
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(t, k)))
            return 0;
    if (PUTS(b, "[") < 0)
        return -1;
    for (k = 0; k < 3; k++) {
        if (k && PUTS(b, ", ") < 0)
            return -1;
        if ((rc = put_int(b, PyTuple_GET_ITEM(t, k))) <= 0)
            return rc;
    }
    return PUTS(b, "]") < 0 ? -1 : 1;
}

/* stacks lately written, held with their text (the parsers share one tuple per distinct stack,
 * so a log's few stacks are the same objects record after record): jframes is called on a miss,
 * and the slots are emptied when another jframes is passed */
#define STACK_SLOTS 64
#define STACK_MAX 16384
static PyObject *stack_of[STACK_SLOTS], *stack_text[STACK_SLOTS], *stack_fn;

/* a stack: [] or jframes(frames) */
static int put_frames(Buf *b, PyObject *frames, PyObject *jframes)
{
    PyObject *text;
    int rc;
    size_t slot = ((size_t)(uintptr_t)frames >> 4) % STACK_SLOTS;
    if (!PyTuple_CheckExact(frames))
        return 0;
    if (PyTuple_GET_SIZE(frames) == 0)
        return PUTS(b, "[]") < 0 ? -1 : 1;
    if (stack_fn != jframes) {
        int k;
        for (k = 0; k < STACK_SLOTS; k++) {
            Py_CLEAR(stack_of[k]);
            Py_CLEAR(stack_text[k]);
        }
        Py_INCREF(jframes);
        Py_XSETREF(stack_fn, jframes);
    }
    if (stack_of[slot] == frames)
        return put_ascii_str(b, stack_text[slot]) < 0 ? -1 : 1;
    text = PyObject_CallOneArg(jframes, frames);
    if (text == NULL)
        return -1;
    rc = PyUnicode_CheckExact(text) && PyUnicode_IS_ASCII(text) ? (put_ascii_str(b, text) < 0 ? -1 : 1) : 0;
    if (rc == 1 && PyUnicode_GET_LENGTH(text) <= STACK_MAX) {
        /* held: the tuple cannot be freed and its address come back as another stack */
        Py_INCREF(frames);
        Py_XSETREF(stack_of[slot], frames);
        Py_XSETREF(stack_text[slot], text);
        return rc;
    }
    Py_DECREF(text);
    return rc;
}

enum {
    TOOL, KIND, KERNEL, FUNCTION, FILE_, LINE, ACCESS, SPACE, SIZE, ADDRESS, PROBLEM, THREAD, BLOCK,
    MESSAGE, ALLOC_BASE, ALLOC_SIZE, ALLOC_RELATION, ALLOC_DISTANCE, API, ERROR, ERROR_CODE,
    SEVERITY, HAZARD, RACE_OTHER, HAZARDS, DEVICE_FRAMES, HOST_FRAMES
};
static PyObject *EMPTY;
static const char *NAMES[27] = {
    "tool", "kind", "kernel", "function", "file", "line", "access", "space", "size", "address",
    "problem", "thread", "block", "message", "alloc_base", "alloc_size", "alloc_relation",
    "alloc_distance", "api", "error", "error_code", "severity", "hazard", "race_other", "hazards",
    "device_frames", "host_frames"
};

/* Every field a record may hold: the 27 above, then these. A record's values are gathered in one
 * pass over its dict (30 lookups a record were a tenth of `sanitize parse --json`): its keys are
 * the interned names of the parsers' code, matched here by identity through a small table. A
 * dict with any other key (a name built at run time, say) is read by lookups instead. */
enum { HOST_STACK_AT = 27, EXTRA, INDEX, PC, LINES, NKEYS };
static PyObject *KEYS[NKEYS];
#define TAB 128
static PyObject *tab_key[TAB];
static int tab_slot[TAB];

static size_t tab_hash(PyObject *key)
{
    return ((size_t)(uintptr_t)key >> 4) % TAB;
}

static int slot_of(PyObject *key)
{
    size_t h;
    for (h = tab_hash(key); tab_key[h] != NULL; h = (h + 1) % TAB)
        if (tab_key[h] == key)
            return tab_slot[h];
    return -1;
}

/* vals[k]: the record's value of KEYS[k], or NULL when it holds none (borrowed); -1 on error */
static int gather(PyObject *d, PyObject **vals)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int k = 0;
    memset(vals, 0, sizeof(PyObject *) * NKEYS);
    while (PyDict_Next(d, &pos, &key, &value)) {
        if ((k = slot_of(key)) < 0)
            break;
        vals[k] = value;
    }
    if (k >= 0)
        return 0;
    for (k = 0; k < NKEYS; k++)
        if ((vals[k] = PyDict_GetItemWithError(d, KEYS[k])) == NULL && PyErr_Occurred())
            return -1;
    return 0;
}

/* the record's value, or the dataclass default when it holds none (borrowed) */
#define field(k, dflt) (vals[k] != NULL ? vals[k] : (dflt))

#define STEP(expr) do { int rc_ = (expr); if (rc_ <= 0) { ok = rc_; goto done; } } while (0)
#define LIT(lit) STEP(PUTS(&b, lit) < 0 ? -1 : 1)
#define F(k, dflt) (v = field(k, dflt)) == NULL ? -1
#define S(k) STEP((F(k, Py_None) : put_null_or_str(&b, v, escape)))
#define I(k) STEP((F(k, Py_None) : put_null_or_int(&b, v)))

/* the text of one record's fields (new reference), None when a value is left to Python, NULL on error */
static PyObject *encode(PyObject *d, PyObject *jframes, PyObject *escape)
{
    PyObject *v, *out = NULL, *vals[NKEYS];
    Buf b;
    int ok = 1;
    Py_ssize_t k;
    if (gather(d, vals) < 0)
        return NULL;
    b.p = b.local; b.n = 0; b.cap = sizeof b.local;

    LIT("{\"tool\": "); S(TOOL);
    LIT(", \"kind\": "); S(KIND);
    LIT(", \"kernel\": "); S(KERNEL);
    LIT(", \"function\": "); S(FUNCTION);
    LIT(", \"file\": "); S(FILE_);
    LIT(", \"line\": "); I(LINE);
    LIT(", \"access\": "); S(ACCESS);
    LIT(", \"space\": "); S(SPACE);
    LIT(", \"size\": "); I(SIZE);
    LIT(", \"address\": "); I(ADDRESS);
    LIT(", \"problem\": "); S(PROBLEM);
    LIT(", \"thread\": "); STEP((F(THREAD, Py_None) : put_dim(&b, v)));
    LIT(", \"block\": "); STEP((F(BLOCK, Py_None) : put_dim(&b, v)));
    LIT(", \"message\": "); S(MESSAGE);
    LIT(", \"nearest_allocation\": ");
    STEP((F(ALLOC_BASE, Py_None) : 1));
    if (v == Py_None) {
        LIT("null");
    } else {
        LIT("{\"base\": "); STEP(put_int(&b, v));
        LIT(", \"size\": "); I(ALLOC_SIZE);
        LIT(", \"relation\": "); S(ALLOC_RELATION);
        LIT(", \"distance\": "); I(ALLOC_DISTANCE);
        LIT("}");
    }
    LIT(", \"api\": "); S(API);
    LIT(", \"error\": "); S(ERROR);
    LIT(", \"error_code\": "); I(ERROR_CODE);
    LIT(", \"severity\": "); S(SEVERITY);
    LIT(", \"hazard\": "); S(HAZARD);
    LIT(", \"race_other\": "); S(RACE_OTHER);
    LIT(", \"hazards\": "); I(HAZARDS);
    LIT(", \"device_frames\": "); STEP((F(DEVICE_FRAMES, EMPTY) : put_frames(&b, v, jframes)));
    LIT(", \"host_frames\": "); STEP((F(HOST_FRAMES, EMPTY) : put_frames(&b, v, jframes)));
    LIT(", \"host_stack_at\": "); S(HOST_STACK_AT);
    LIT(", \"extra\": [");
    STEP(((v = field(EXTRA, EMPTY)) == NULL ? -1 : PyTuple_CheckExact(v)));
    for (k = 0; k < PyTuple_GET_SIZE(v); k++) {
        if (k)
            LIT(", ");
        STEP(put_str(&b, PyTuple_GET_ITEM(v, k), escape));
    }
    LIT("], \"index\": ");
    STEP(((v = field(INDEX, NULL)) == NULL ? (put(&b, "0", 1) < 0 ? -1 : 1) : put_int(&b, v)));
    LIT("}");
    out = PyUnicode_New((Py_ssize_t)b.n, 127);  /* every byte written is ASCII */
    if (out != NULL)
        memcpy(PyUnicode_1BYTE_DATA(out), b.p, b.n);
done:
    if (b.p != b.local)
        PyMem_Free(b.p);
    if (ok < 0)
        return NULL;
    if (ok == 0)
        Py_RETURN_NONE;
    return out;
}

static PyObject *record_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "record_json(fields: dict, jframes, escape)");
        return NULL;
    }
    return encode(args[0], args[1], args[2]);
}

/* records_json(records: list, jframes, escape, fallback): the text of every record, fallback(record)
 * where encode leaves one to Python (or the record keeps no __dict__) */
static PyObject *records_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *records, *out, *rec, *d, *text;
    Py_ssize_t i, n;
    if (nargs != 4 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "records_json(records: list, jframes, escape, fallback)");
        return NULL;
    }
    records = args[0];
    n = PyList_GET_SIZE(records);
    if ((out = PyList_New(n)) == NULL)
        return NULL;
    for (i = 0; i < n && i < PyList_GET_SIZE(records); i++) {
        rec = PyList_GET_ITEM(records, i);
        Py_INCREF(rec);
        d = PyObject_GenericGetDict(rec, NULL);
        if (d == NULL) {
            PyErr_Clear();
            text = Py_NewRef(Py_None);
        } else {
            text = PyDict_Check(d) ? encode(d, args[1], args[2]) : Py_NewRef(Py_None);
            Py_DECREF(d);
        }
        if (text == Py_None) {
            Py_DECREF(text);
            text = PyObject_CallOneArg(args[3], rec);
        }
        Py_DECREF(rec);
        if (text == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, text);
    }
    if (i < n) { /* the list shrank under a fallback: never in practice, kept well-formed */
        if (PyList_SetSlice(out, i, n, NULL) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyMethodDef methods[] = {
    {"record_json", (PyCFunction)(void (*)(void))record_json, METH_FASTCALL,
     "SanitizerRecord.json_text from the record's __dict__; None: leave it to Python."},
    {"records_json", (PyCFunction)(void (*)(void))records_json, METH_FASTCALL,
     "[r.json_text() for r in records], fallback(r) where record_json leaves r to Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_json", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__record_json(void)
{
    int k;
    static const char *more[NKEYS - 27] = {"host_stack_at", "extra", "index", "pc", "lines"};
    for (k = 0; k < NKEYS; k++) {
        size_t h;
        if ((KEYS[k] = PyUnicode_InternFromString(k < 27 ? NAMES[k] : more[k - 27])) == NULL)
            return NULL;
        for (h = tab_hash(KEYS[k]); tab_key[h] != NULL; h = (h + 1) % TAB)
            ;
        tab_key[h] = KEYS[k];
        tab_slot[h] = k;
    }
    for (k = 0; k < 256; k++)
        ESCAPED[k] = k < 0x20 || k > 0x7e || k == '"' || k == '\\';
    if ((EMPTY = PyTuple_New(0)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
