/* The line loop of `sanitize parse`, compiled: `_fold` of harness/sanitizer/parse_text.py, step
 * for step. A 100,000-record log is 800,000 turns of that loop; in Python each turn costs about
 * half a microsecond of bytecode dispatch, here a few dictionary operations. Apart from the loop's
 * bookkeeping, the common record's end (`end_fast`), a hazard's Thread lines and the few line
 * shapes that come new in many records (`new_line`, read as `classify` reads them), everything
 * stays in Python and is called back: the classification of other lines not seen before
 * (`classify`), the end of other records (`end`), lines outside records (`outside`, `other`) and
 * the rare detail lines of races, initcheck and old host frames (`rare`). So the compiled part
 * decides nothing the Python route does not decide the same way; the tests run the parser both
 * ways on every capture and on near misses of every shape read here
 * (tests/test_sanitizer_compiled.py).
 *
 * Built by setup.py at `pip install` (optional=True): without a compiler parse_text.py uses `_fold`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* the line codes of parse_text.py (L_* and D_*); parse_text checks CODES against its own */
enum {
    L_SKIP = 0, L_SEP = 1, L_HEAD = 2,
    D_EXTRA = 100, D_AT, D_WHO, D_ADDR, D_NEAR, D_RACE_AND, D_HOST, D_DEVICE, D_SAVED, D_IN,
    D_HAZARD_THREAD, D_UNINIT
};

static PyObject *empty, *one, *k_kernel, *k_device_frames, *k_host_frames, *k_extra, *k_lines, *k_tool,
    *k_dict;
static PyObject *k_function, *k_thread, *k_block, *k_address, *k_problem, *k_alloc_base,
    *k_alloc_size, *k_alloc_relation, *k_alloc_distance, *k_host_stack_at, *k_index, *k_copy;
static PyObject *k_access, *k_race_other, *k_kind, *k_message, *k_severity, *k_hazard, *k_space;
static PyObject *s_warning, *s_error, *s_raw, *s_war, *s_waw;

/* op[k], or an IndexError as Python's op[k] would raise (borrowed) */
static PyObject *item(PyObject *op, Py_ssize_t k)
{
    if (k >= PyTuple_GET_SIZE(op)) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return NULL;
    }
    return PyTuple_GET_ITEM(op, k);
}

/* f[key] = op[k] unless key is in f (when `always` is 0); -1 on error */
static int set_from(PyObject *f, PyObject *key, PyObject *op, Py_ssize_t k, int always)
{
    PyObject *v = item(op, k);
    if (v == NULL)
        return -1;
    if (!always) {
        int has = PyDict_Contains(f, key);
        if (has != 0)
            return has < 0 ? -1 : 0;
    }
    return PyDict_SetItem(f, key, v);
}

static int append_item(PyObject *list, PyObject *op, Py_ssize_t k)
{
    PyObject *v = item(op, k);
    return v == NULL ? -1 : PyList_Append(list, v);
}

/* one detail line of an open record; the code the next line sees as the previous one, -1 on error */
static long detail(long code, PyObject *op, PyObject *f, PyObject *host, PyObject *device,
                   PyObject *extra, long prev, PyObject *rare)
{
    int has, truth;
    PyObject *v;
    switch (code) {
    case D_HOST:
        return append_item(host, op, 2) < 0 ? -1 : code;
    case D_AT:
        has = PyDict_Contains(f, k_function);
        if (has < 0)
            return -1;
        if (has)
            return append_item(extra, op, 1) < 0 ? -1 : code;
        v = item(op, 2);
        if (v == NULL)
            return -1;
        return PyDict_Update(f, v) < 0 ? -1 : code;
    case D_WHO:
        if (set_from(f, k_thread, op, 2, 0) < 0 || set_from(f, k_block, op, 3, 0) < 0)
            return -1;
        return code;
    case D_ADDR:
        if (set_from(f, k_address, op, 2, 0) < 0)
            return -1;
        v = item(op, 3);
        if (v == NULL || (truth = PyObject_IsTrue(v)) < 0)
            return -1;
        if (truth && set_from(f, k_problem, op, 3, 0) < 0)
            return -1;
        return code;
    case D_NEAR:
        /* f[...] = op[2:]: the slice must hold exactly four values */
        if (PyTuple_GET_SIZE(op) != 6) {
            PyErr_SetString(PyExc_ValueError, "a nearest-allocation line's fields are not four values");
            return -1;
        }
        if (set_from(f, k_alloc_base, op, 2, 1) < 0 || set_from(f, k_alloc_size, op, 3, 1) < 0
            || set_from(f, k_alloc_relation, op, 4, 1) < 0 || set_from(f, k_alloc_distance, op, 5, 1) < 0)
            return -1;
        return code;
    case D_SAVED:
        return set_from(f, k_host_stack_at, op, 2, 0) < 0 ? -1 : code;
    case D_DEVICE:
        return append_item(device, op, 2) < 0 ? -1 : code;
    case D_EXTRA:
        return append_item(extra, op, 1) < 0 ? -1 : code;
    case D_HAZARD_THREAD:
        /* a hazard's Read/Write Thread line (_rare_detail's branch: two of them in every
         * racecheck hazard record): the first one's access, thread and location are the record's */
        has = PyDict_Contains(f, k_function);
        if (has < 0)
            return -1;
        if (has) {
            if ((v = item(op, 5)) == NULL || PyDict_SetDefault(f, k_race_other, v) == NULL)
                return -1;
            return code;
        }
        if (set_from(f, k_access, op, 2, 1) < 0 || set_from(f, k_thread, op, 3, 1) < 0 || (v = item(op, 4)) == NULL)
            return -1;
        return PyDict_Update(f, v) < 0 ? -1 : code;
    default: {
        PyObject *args[6] = {NULL, op, f, host, extra, NULL};
        PyObject *res;
        long next;
        args[0] = PyLong_FromLong(code);
        args[5] = PyLong_FromLong(prev);
        if (args[0] == NULL || args[5] == NULL) {
            Py_XDECREF(args[0]);
            Py_XDECREF(args[5]);
            return -1;
        }
        res = PyObject_Vectorcall(rare, args, 6, NULL);
        Py_DECREF(args[0]);
        Py_DECREF(args[5]);
        if (res == NULL)
            return -1;
        next = PyLong_AsLong(res);
        Py_DECREF(res);
        return (next == -1 && PyErr_Occurred()) ? -1 : next;
    }
    }
}

/* --- the lines every record may have a new one of ----------------------------------------------
 * Most lines of a log repeat (the `at` line, host frames, separators): `classify` reads each once
 * and the cache remembers it. A few kinds come new in many records: the `by thread` line, the
 * address lines of memcheck and initcheck and the heads of racecheck's hazards. Reading those in
 * Python, one call and a regular expression each, was most of a record's cost. So the fold reads
 * the ones the cache does not hold here, in their common shape only: ASCII, `<lead>` then the line as compute-sanitizer prints it,
 * nothing odd (no blank or `=` at the end, no control character where it would matter). Each reader returns what
 * `classify` returns for the line (tests/test_sanitizer_compiled.py holds them to that on every
 * capture and on near misses of each shape), or NULL without an error for any other line,
 * which then takes the ordinary way. */

typedef struct {
    const Py_UCS1 *s;
    Py_ssize_t n, i;
} Cur;

/* the text at the cursor starts with `word` (then the cursor moves past it) */
static int take(Cur *c, const char *word)
{
    size_t len = strlen(word);
    if ((size_t)(c->n - c->i) < len || memcmp(c->s + c->i, word, len) != 0)
        return 0;
    c->i += (Py_ssize_t)len;
    return 1;
}

static void skip_spaces(Cur *c)
{
    while (c->i < c->n && c->s[c->i] == ' ')
        c->i++;
}

/* digits of a dimension: 1 to 18 ASCII digits, then `end`; -1 when not */
static long long dim_part(Cur *c, char end)
{
    long long v = 0;
    Py_ssize_t start = c->i;
    while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9' && c->i - start < 18)
        v = v * 10 + (c->s[c->i++] - '0');
    if (c->i == start || c->i >= c->n || c->s[c->i] != end)
        return -1;
    c->i++;
    return v;
}

/* `(x,y,z)` after the cursor's `(`: a new tuple of three ints, NULL (no error) when not that */
static PyObject *dims(Cur *c)
{
    long long v[3];
    int k;
    PyObject *t;
    for (k = 0; k < 3; k++)
        if ((v[k] = dim_part(c, k == 2 ? ')' : ',')) < 0)
            return NULL;
    if ((t = PyTuple_New(3)) == NULL)
        return NULL;
    for (k = 0; k < 3; k++) {
        PyObject *x = PyLong_FromLongLong(v[k]);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, k, x);
    }
    return t;
}

/* 1 to 16 hex digits (what frames.hexnum reads, short of its longest): a new int, NULL (no error)
 * when not that; the cursor after them */
static PyObject *hex(Cur *c)
{
    unsigned long long v = 0;
    Py_ssize_t start = c->i;
    for (; c->i < c->n; c->i++) {
        int ch = c->s[c->i], d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0)
            break;
        v = v << 4 | (unsigned long long)d;
    }
    if (c->i == start || c->i - start > 16)
        return NULL;
    return PyLong_FromUnsignedLongLong(v);
}

/* a decimal with thousands separators (`\d[\d,]*`, what frames.num reads, short of its longest):
 * a new int, NULL (no error) when not that */
static PyObject *number(Cur *c)
{
    long long v = 0;
    int digits = 0;
    if (c->i >= c->n || c->s[c->i] < '0' || c->s[c->i] > '9')
        return NULL;
    for (; c->i < c->n && ((c->s[c->i] >= '0' && c->s[c->i] <= '9') || c->s[c->i] == ','); c->i++) {
        if (c->s[c->i] == ',')
            continue;
        if (++digits > 18)
            return NULL;
        v = v * 10 + (c->s[c->i] - '0');
    }
    return PyLong_FromLongLong(v);
}

/* (code, body, a, b, ...): a new tuple of the code and the values given (references stolen);
 * NULL when one of them is NULL (all released) */
static PyObject *op_of(long code, PyObject *body, int n, PyObject **vals)
{
    PyObject *t = NULL, *c = PyLong_FromLong(code);
    int k, bad = c == NULL || body == NULL;
    for (k = 0; k < n; k++)
        bad = bad || vals[k] == NULL;
    if (!bad && (t = PyTuple_New(n + 2)) != NULL) {
        PyTuple_SET_ITEM(t, 0, c);
        PyTuple_SET_ITEM(t, 1, body);
        for (k = 0; k < n; k++)
            PyTuple_SET_ITEM(t, k + 2, vals[k]);
        return t;
    }
    Py_XDECREF(c);
    Py_XDECREF(body);
    for (k = 0; k < n; k++)
        Py_XDECREF(vals[k]);
    return NULL;
}

/* `by thread (t,t,t) in block (b,b,b)`, nothing after: (D_WHO, body, thread, block) */
static PyObject *who_line(PyObject *raw, Cur *c)
{
    Py_ssize_t start = c->i;
    PyObject *v[2] = {NULL, NULL};
    if (!take(c, "by thread (") || (v[0] = dims(c)) == NULL)
        return NULL;
    if (!take(c, " in block (") || (v[1] = dims(c)) == NULL || c->i != c->n) {
        Py_DECREF(v[0]);
        Py_XDECREF(v[1]);
        return NULL;
    }
    return op_of(D_WHO, PyUnicode_Substring(raw, start, c->n), 2, v);
}

/* `Access to 0x.. is out of bounds`, `Access at 0x.. is misaligned`, `Address 0x..`:
 * (D_ADDR, body, address, what follows `is` without its period, or None); parse_text._address */
static PyObject *address_line(PyObject *raw, Cur *c)
{
    Py_ssize_t start = c->i, at;
    PyObject *v[2];
    if (!take(c, "Address 0x") && !take(c, "Access to 0x") && !take(c, "Access at 0x"))
        return NULL;
    if ((v[0] = hex(c)) == NULL)
        return NULL;
    for (at = c->i; at < c->n; at++)
        if (c->s[at] < ' ') { /* a blank other than the space: Python's strip() is the judge */
            Py_DECREF(v[0]);
            return NULL;
        }
    if (c->i == c->n || (c->n - c->i == 1 && c->s[c->i] == '.')) {
        v[1] = Py_NewRef(Py_None);
    } else if (c->s[c->i] != ' ') {
        Py_DECREF(v[0]);
        return NULL;
    } else {
        skip_spaces(c);  /* the line ends in no blank: something follows */
        at = c->i;
        if (take(c, "is ")) {
            skip_spaces(c);
            at = c->i;
        }
        v[1] = PyUnicode_Substring(raw, at, c->n - (c->n - at >= 2 && c->s[c->n - 1] == '.'));
    }
    return op_of(D_ADDR, PyUnicode_Substring(raw, start, c->n), 2, v);
}

/* `and is N bytes after|before the nearest allocation at 0x.. of size N bytes` (or `is inside
 * the`): (D_NEAR, body, base, size, relation, distance); parse_text._D_NEAR. A race's `and Write
 * access at` line is left to `classify`. */
static PyObject *near_line(PyObject *raw, Cur *c, PyObject *words)
{
    Py_ssize_t start = c->i;
    PyObject *v[4] = {NULL, NULL, NULL, NULL};
    int bytes;
    if (!take(c, "and is "))
        return NULL;
    if (take(c, "inside")) {
        v[2] = Py_NewRef(PyTuple_GET_ITEM(words, 0));
        v[3] = Py_NewRef(Py_None);
    } else {
        if ((v[3] = number(c)) == NULL)
            return NULL;
        bytes = take(c, " byte");
        if (bytes)
            take(c, "s"); /* `bytes?` */
        if (!bytes || !take(c, " ")) {
            Py_DECREF(v[3]);
            return NULL;
        }
        if (take(c, "after"))
            v[2] = Py_NewRef(PyTuple_GET_ITEM(words, 1));
        else if (take(c, "before"))
            v[2] = Py_NewRef(PyTuple_GET_ITEM(words, 2));
        else {
            Py_DECREF(v[3]);
            return NULL;
        }
    }
    if (take(c, " the nearest allocation at 0x") && (v[0] = hex(c)) != NULL && take(c, " of size ")
        && (v[1] = number(c)) != NULL && take(c, " byte"))
        return op_of(D_NEAR, PyUnicode_Substring(raw, start, c->n), 4, v);
    Py_XDECREF(v[0]);
    Py_XDECREF(v[1]);
    Py_DECREF(v[2]);
    Py_DECREF(v[3]);
    return NULL;
}

/* `Warning: [(Warp Level Programming) ]Potential RAW hazard detected at __shared__ 0x604 in block
 * (0,0,0) :` (Warning or Error; a space name of letters and digits): (L_HEAD, body, fields, hint),
 * what `classify` returns for it through _race_head; `heads` is (RACE, racecheck's name) */
static PyObject *hazard_line(PyObject *raw, Cur *c, PyObject *heads)
{
    Py_ssize_t start = c->i, sp0, sp1;
    PyObject *sev, *hz, *fields, *body, *space, *a, *b, *v[2];
    if (take(c, "Warning:"))
        sev = s_warning;
    else if (take(c, "Error:"))
        sev = s_error;
    else
        return NULL;
    skip_spaces(c);
    if (take(c, "(Warp Level Programming)"))
        skip_spaces(c);
    if (!take(c, "Potential "))
        return NULL;
    if (take(c, "RAW"))
        hz = s_raw;
    else if (take(c, "WAR"))
        hz = s_war;
    else if (take(c, "WAW"))
        hz = s_waw;
    else
        return NULL;
    if (!take(c, " hazard detected at __"))
        return NULL;
    sp0 = c->i - 2;
    while (c->i < c->n && ((c->s[c->i] >= 'a' && c->s[c->i] <= 'z') || (c->s[c->i] >= 'A' && c->s[c->i] <= 'Z')
                           || (c->s[c->i] >= '0' && c->s[c->i] <= '9')))
        c->i++;
    if (c->i == sp0 + 2 || !take(c, "__ 0x"))
        return NULL;
    sp1 = c->i - 3;
    if ((a = hex(c)) == NULL)
        return NULL;
    if (!take(c, " in block (") || (b = dims(c)) == NULL) {
        Py_DECREF(a);
        return NULL;
    }
    body = PyUnicode_Substring(raw, start, c->n);
    space = PyUnicode_Substring(raw, sp0, sp1);
    fields = PyDict_New();
    if (body && space && fields && PyDict_SetItem(fields, k_kind, PyTuple_GET_ITEM(heads, 0)) == 0
        && PyDict_SetItem(fields, k_message, body) == 0 && PyDict_SetItem(fields, k_severity, sev) == 0
        && PyDict_SetItem(fields, k_hazard, hz) == 0 && PyDict_SetItem(fields, k_space, space) == 0
        && PyDict_SetItem(fields, k_address, a) == 0 && PyDict_SetItem(fields, k_block, b) == 0) {
        Py_DECREF(space); Py_DECREF(a); Py_DECREF(b);
        v[0] = fields;
        v[1] = Py_NewRef(PyTuple_GET_ITEM(heads, 1));
        return op_of(L_HEAD, body, 2, v);
    }
    Py_XDECREF(body); Py_XDECREF(space); Py_DECREF(a); Py_DECREF(b); Py_XDECREF(fields);
    return NULL;
}

/* the class of `raw` when it is one of the lines above, else NULL (an error set only on failure);
 * `*keep` is cleared for the lines not worth remembering: a `by thread` line or a hazard's head
 * seldom comes twice, and thousands of them would push the lines that do out of the cache */
static PyObject *new_line(PyObject *raw, PyObject *lead, PyObject *heads, PyObject *words, int *keep)
{
    Cur c;
    Py_ssize_t body;
    PyObject *op;
    if (lead == Py_None || !PyUnicode_Check(raw) || !PyUnicode_IS_ASCII(raw) || !PyUnicode_Check(lead)
        || !PyUnicode_IS_ASCII(lead))
        return NULL;
    c.s = PyUnicode_1BYTE_DATA(raw);
    c.n = PyUnicode_GET_LENGTH(raw);
    c.i = PyUnicode_GET_LENGTH(lead);
    if (c.n <= c.i || c.s[c.n - 1] <= ' ' || c.s[c.n - 1] == '=' || c.s[c.n - 1] == 0x7f
        || memcmp(c.s, PyUnicode_1BYTE_DATA(lead), (size_t)c.i) != 0)
        return NULL;
    while (c.i < c.n && (c.s[c.i] == ' ' || c.s[c.i] == '\t'))
        c.i++;
    body = c.i;
    if (body - PyUnicode_GET_LENGTH(lead) == 0) {
        op = c.s[body] == 'W' || c.s[body] == 'E' ? hazard_line(raw, &c, heads) : NULL;
        *keep = op == NULL;
        return op;
    }
    if (body - PyUnicode_GET_LENGTH(lead) < 3)
        return NULL;
    switch (c.s[body]) {
    case 'b':
        op = who_line(raw, &c);
        *keep = op == NULL;
        return op;
    case 'A':
        return address_line(raw, &c);
    case 'a':
        return near_line(raw, &c, words);
    default:
        return NULL;
    }
}

/* What TextLogParser._end does with a record that names its tool and has no device frames,
 * nothing dropped and nothing waiting before it, when the kernel of its function and its host
 * stack are both remembered already: the last fields, the vote, the record, to `out`.
 * 1: done; 0: not such a record (nothing changed; Python's _end takes it); -1: error. */
static int end_fast(PyObject *fast, PyObject *f, PyObject *text, PyObject *host, PyObject *device,
                    PyObject *extra, Py_ssize_t dropped, PyObject *hint, PyObject *out)
{
    PyObject *pending = PyTuple_GET_ITEM(fast, 0), *votes = PyTuple_GET_ITEM(fast, 1);
    PyObject *tool = PyTuple_GET_ITEM(fast, 2), *kernels = PyTuple_GET_ITEM(fast, 3);
    PyObject *stacks = PyTuple_GET_ITEM(fast, 4), *cls = PyTuple_GET_ITEM(fast, 5);
    PyObject *function, *kernel, *stack, *key, *v, *t, *rec;
    Py_ssize_t n = PyList_GET_SIZE(host), k;
    int truth;
    if (dropped || PyList_GET_SIZE(device) || !PyUnicode_CheckExact(hint) || PyUnicode_GET_LENGTH(hint) == 0
        || !PyList_Check(pending) || PyList_GET_SIZE(pending))
        return 0;
    function = PyDict_GetItemWithError(f, k_function);
    if (function == NULL && PyErr_Occurred())
        return -1;
    kernel = PyDict_GetItemWithError(kernels, function ? function : Py_None);
    if (kernel == NULL)
        return PyErr_Occurred() ? -1 : 0;
    stack = empty;
    if (n) {
        /* _shared's key: id(frames[0]) alone, else the tuple of their ids */
        if (n == 1) {
            key = PyLong_FromVoidPtr(PyList_GET_ITEM(host, 0));
        } else if ((key = PyTuple_New(n)) != NULL) {
            for (k = 0; k < n; k++) {
                if ((v = PyLong_FromVoidPtr(PyList_GET_ITEM(host, k))) == NULL) {
                    Py_CLEAR(key);
                    break;
                }
                PyTuple_SET_ITEM(key, k, v);
            }
        }
        if (key == NULL)
            return -1;
        stack = PyDict_GetItemWithError(stacks, key);
        Py_DECREF(key);
        if (stack == NULL)
            return PyErr_Occurred() ? -1 : 0;
    }
    Py_INCREF(kernel);
    Py_INCREF(stack);
    if (PyDict_SetItem(f, k_kernel, kernel) < 0 || PyDict_SetItem(f, k_device_frames, empty) < 0
        || PyDict_SetItem(f, k_host_frames, stack) < 0) {
        Py_DECREF(kernel);
        Py_DECREF(stack);
        return -1;
    }
    Py_DECREF(kernel);
    Py_DECREF(stack);
    if ((t = PyList_AsTuple(extra)) == NULL || PyDict_SetItem(f, k_extra, t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    Py_DECREF(t);
    if ((t = PyList_AsTuple(text)) == NULL || PyDict_SetItem(f, k_lines, t) < 0) {
        Py_XDECREF(t);
        return -1;
    }
    Py_DECREF(t);
    /* votes[hint] = votes.get(hint, 0) + 1 */
    v = PyDict_GetItemWithError(votes, hint);
    if (v == NULL && PyErr_Occurred())
        return -1;
    v = v == NULL ? PyLong_FromLong(1) : PyNumber_Add(v, one);
    if (v == NULL || PyDict_SetItem(votes, hint, v) < 0) {
        Py_XDECREF(v);
        return -1;
    }
    Py_DECREF(v);
    /* f["tool"] = self.tool or hint */
    if ((truth = PyObject_IsTrue(tool)) < 0 || PyDict_SetItem(f, k_tool, truth ? tool : hint) < 0)
        return -1;
    /* SanitizerRecord.from_fields(f): object.__new__(cls), then object.__setattr__(rec, "__dict__", f) */
    rec = PyBaseObject_Type.tp_new((PyTypeObject *)cls, empty, NULL);
    if (rec == NULL)
        return -1;
    if (PyObject_GenericSetAttr(rec, k_dict, f) < 0 || PyList_Append(out, rec) < 0) {
        Py_DECREF(rec);
        return -1;
    }
    Py_DECREF(rec);
    return 1;
}

static PyObject *call1(PyObject *fn, PyObject *arg)
{
    return PyObject_CallOneArg(fn, arg);
}

/* fold(rare, limits, lines, state, cache, classify, end, outside, other, out, lead, fast): see
 * parse_text._fold; `fast` is (pending, votes, tool, kernels, stacks, record class) for end_fast
 * then (RACE, racecheck's name) for hazard_line and ("inside", "after", "before") for near_line.
 * Returns the number of records end_fast made (the parser counts them). */
static PyObject *fold(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *rare, *limits, *lines, *state, *cache, *classify, *end, *outside, *other, *out, *lead, *fast;
    Py_ssize_t finished = 0;
    PyObject *f, *text, *host, *device, *extra, *hint;
    Py_ssize_t cache_line, cache_max, max_lines, dropped, index, i;
    long prev;
    int closed_last;
    PyObject *op = NULL, *res;

    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "fold() takes 12 arguments");
        return NULL;
    }
    rare = args[0]; limits = args[1]; lines = args[2]; state = args[3]; cache = args[4];
    classify = args[5]; end = args[6]; outside = args[7]; other = args[8]; out = args[9];
    lead = args[10]; fast = args[11];
    if (!PyTuple_Check(limits) || PyTuple_GET_SIZE(limits) != 3 || !PyList_Check(lines)
        || !PyList_Check(state) || PyList_GET_SIZE(state) != 10 || !PyDict_Check(cache) || !PyList_Check(out)
        || !PyTuple_Check(fast) || PyTuple_GET_SIZE(fast) != 8 || !PyDict_Check(PyTuple_GET_ITEM(fast, 1))
        || !PyDict_Check(PyTuple_GET_ITEM(fast, 3)) || !PyDict_Check(PyTuple_GET_ITEM(fast, 4))
        || !PyType_Check(PyTuple_GET_ITEM(fast, 5)) || !PyTuple_Check(PyTuple_GET_ITEM(fast, 6))
        || PyTuple_GET_SIZE(PyTuple_GET_ITEM(fast, 6)) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(fast, 7))
        || PyTuple_GET_SIZE(PyTuple_GET_ITEM(fast, 7)) != 3) {
        PyErr_SetString(PyExc_TypeError, "fold(): bad arguments");
        return NULL;
    }
    cache_line = PyLong_AsSsize_t(PyTuple_GET_ITEM(limits, 0));
    cache_max = PyLong_AsSsize_t(PyTuple_GET_ITEM(limits, 1));
    max_lines = PyLong_AsSsize_t(PyTuple_GET_ITEM(limits, 2));
    dropped = PyLong_AsSsize_t(PyList_GET_ITEM(state, 5));
    prev = PyLong_AsLong(PyList_GET_ITEM(state, 6));
    closed_last = PyObject_IsTrue(PyList_GET_ITEM(state, 7));
    index = PyLong_AsSsize_t(PyList_GET_ITEM(state, 9));
    if (PyErr_Occurred())
        return NULL;
    /* the state, as owned references */
    f = PyList_GET_ITEM(state, 0); text = PyList_GET_ITEM(state, 1); host = PyList_GET_ITEM(state, 2);
    device = PyList_GET_ITEM(state, 3); extra = PyList_GET_ITEM(state, 4); hint = PyList_GET_ITEM(state, 8);
    Py_INCREF(f); Py_INCREF(text); Py_INCREF(host); Py_INCREF(device); Py_INCREF(extra); Py_INCREF(hint);
    if (!PyList_Check(text) || !PyList_Check(host) || !PyList_Check(device) || !PyList_Check(extra)
        || (f != Py_None && !PyDict_Check(f))) {
        PyErr_SetString(PyExc_TypeError, "fold(): bad state");
        goto error;
    }

    for (i = 0; i < PyList_GET_SIZE(lines); i++) {
        PyObject *raw = PyList_GET_ITEM(lines, i), *body;
        long code;
        Py_ssize_t len;
        index++;
        op = PyDict_GetItemWithError(cache, raw);
        if (op != NULL) {
            Py_INCREF(op);
        } else {
            int keep = 1;
            if (PyErr_Occurred())
                goto error;
            op = new_line(raw, lead, PyTuple_GET_ITEM(fast, 6), PyTuple_GET_ITEM(fast, 7), &keep);
            if (op == NULL && (PyErr_Occurred() || (op = call1(classify, raw)) == NULL))
                goto error;
            len = PyUnicode_Check(raw) ? PyUnicode_GET_LENGTH(raw) : PyObject_Length(raw);
            if (len < 0)
                goto error;
            if (keep && len <= cache_line) {
                if (PyDict_GET_SIZE(cache) >= cache_max)
                    PyDict_Clear(cache);
                if (PyDict_SetItem(cache, raw, op) < 0)
                    goto error;
            }
        }
        if (!PyTuple_Check(op) || PyTuple_GET_SIZE(op) < 1) {
            PyErr_SetString(PyExc_TypeError, "fold(): a line's class is not a tuple");
            goto error;
        }
        code = PyLong_AsLong(PyTuple_GET_ITEM(op, 0));
        if (code == -1 && PyErr_Occurred())
            goto error;
        if (code >= D_EXTRA) {
            if ((body = item(op, 1)) == NULL)
                goto error;
            if (f == Py_None) { /* an indented line outside any record */
                closed_last = 1;
                if ((res = call1(outside, body)) == NULL)
                    goto error;
                Py_DECREF(res);
            } else if (PyList_GET_SIZE(text) >= max_lines) {
                dropped++;
            } else {
                if (PyList_Append(text, body) < 0)
                    goto error;
                prev = detail(code, op, f, host, device, extra, prev, rare);
                if (prev == -1 && PyErr_Occurred())
                    goto error;
            }
        } else if (code != L_SKIP) {
            if (f != Py_None) {
                int done = end_fast(fast, f, text, host, device, extra, dropped, hint, out);
                if (done < 0)
                    goto error;
                if (done) {
                    finished++;
                } else {
                    PyObject *eargs[8] = {f, text, host, device, extra, NULL, hint, out};
                    if ((eargs[5] = PyLong_FromSsize_t(dropped)) == NULL)
                        goto error;
                    res = PyObject_Vectorcall(end, eargs, 8, NULL);
                    Py_DECREF(eargs[5]);
                    if (res == NULL)
                        goto error;
                    Py_DECREF(res);
                }
                Py_SETREF(f, Py_NewRef(Py_None));
            }
            closed_last = 1;
            if (code == L_HEAD) {
                PyObject *head = item(op, 2), *newf, *ix, *first = item(op, 1), *h = item(op, 3);
                if (head == NULL || first == NULL || h == NULL)
                    goto error;
                newf = PyDict_CheckExact(head) ? PyDict_Copy(head) : PyObject_CallMethodNoArgs(head, k_copy);
                if (newf == NULL)
                    goto error;
                Py_SETREF(f, newf);
                if (!PyDict_Check(f)) {
                    PyErr_SetString(PyExc_TypeError, "fold(): a record's fields are not a dict");
                    goto error;
                }
                if ((ix = PyLong_FromSsize_t(index)) == NULL)
                    goto error;
                if (PyDict_SetItem(f, k_index, ix) < 0) {
                    Py_DECREF(ix);
                    goto error;
                }
                Py_DECREF(ix);
                Py_SETREF(hint, Py_NewRef(h));
                Py_SETREF(text, PyList_New(1));
                Py_SETREF(host, PyList_New(0));
                Py_SETREF(device, PyList_New(0));
                Py_SETREF(extra, PyList_New(0));
                if (text == NULL || host == NULL || device == NULL || extra == NULL)
                    goto error;
                PyList_SET_ITEM(text, 0, Py_NewRef(first));
                dropped = 0;
                prev = -1;
                closed_last = 0;
            } else if (code != L_SEP) {
                if ((res = call1(other, op)) == NULL)
                    goto error;
                Py_DECREF(res);
            }
        }
        Py_CLEAR(op);
    }
    {
        /* state[:] = [f, text, host, device, extra, dropped, prev, closed_last, hint, index] */
        PyObject *d = PyLong_FromSsize_t(dropped), *p = PyLong_FromLong(prev), *x = PyLong_FromSsize_t(index);
        PyObject *vals[10] = {f, text, host, device, extra, d, p, NULL, hint, x};
        int k;
        if (d == NULL || p == NULL || x == NULL) {
            Py_XDECREF(d); Py_XDECREF(p); Py_XDECREF(x);
            goto error;
        }
        vals[7] = Py_NewRef(closed_last ? Py_True : Py_False);
        for (k = 0; k < 10; k++)
            PyList_SetItem(state, k, vals[k]); /* steals */
    }
    return PyLong_FromSsize_t(finished);

error:
    Py_XDECREF(op);
    Py_XDECREF(f); Py_XDECREF(text); Py_XDECREF(host); Py_XDECREF(device); Py_XDECREF(extra);
    Py_XDECREF(hint);
    return NULL;
}

/* longest(lines): the length of the longest str of a list, 0 for none (parse_text._cut asks it
 * of every list of lines the reader makes; max(map(len, lines)) was 3% of a parse) */
static PyObject *longest(PyObject *self, PyObject *lines)
{
    Py_ssize_t i, n, most = 0;
    if (!PyList_Check(lines)) {
        PyErr_SetString(PyExc_TypeError, "longest() takes a list");
        return NULL;
    }
    for (i = 0; i < PyList_GET_SIZE(lines); i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_Check(line)) {
            PyErr_SetString(PyExc_TypeError, "longest() takes a list of str");
            return NULL;
        }
        n = PyUnicode_GET_LENGTH(line);
        if (n > most)
            most = n;
    }
    return PyLong_FromSsize_t(most);
}

static PyMethodDef methods[] = {
    {"fold", (PyCFunction)(void (*)(void))fold, METH_FASTCALL, "parse_text._fold, compiled."},
    {"longest", (PyCFunction)longest, METH_O, "max(map(len, lines)) of a list of str, 0 for none."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fold", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fold(void)
{
    PyObject *m, *codes;
#define KEY(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    KEY(k_function, "function"); KEY(k_thread, "thread"); KEY(k_block, "block");
    KEY(k_address, "address"); KEY(k_problem, "problem"); KEY(k_alloc_base, "alloc_base");
    KEY(k_alloc_size, "alloc_size"); KEY(k_alloc_relation, "alloc_relation");
    KEY(k_alloc_distance, "alloc_distance"); KEY(k_host_stack_at, "host_stack_at");
    KEY(k_index, "index"); KEY(k_copy, "copy"); KEY(k_kernel, "kernel");
    KEY(k_device_frames, "device_frames"); KEY(k_host_frames, "host_frames"); KEY(k_extra, "extra");
    KEY(k_lines, "lines"); KEY(k_tool, "tool"); KEY(k_dict, "__dict__");
    KEY(k_access, "access"); KEY(k_race_other, "race_other"); KEY(k_kind, "kind"); KEY(k_message, "message");
    KEY(k_severity, "severity"); KEY(k_hazard, "hazard"); KEY(k_space, "space");
    KEY(s_warning, "Warning"); KEY(s_error, "Error"); KEY(s_raw, "RAW"); KEY(s_war, "WAR"); KEY(s_waw, "WAW");
    if ((empty = PyTuple_New(0)) == NULL || (one = PyLong_FromLong(1)) == NULL)
        return NULL;
#undef KEY
    m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    codes = Py_BuildValue("(iiiiiiiiiiiiiii)", L_SKIP, L_SEP, L_HEAD, D_EXTRA, D_AT, D_WHO, D_ADDR,
                          D_NEAR, D_RACE_AND, D_HOST, D_DEVICE, D_SAVED, D_IN, D_HAZARD_THREAD, D_UNINIT);
    if (codes == NULL || PyModule_AddObject(m, "CODES", codes) < 0) {
        Py_XDECREF(codes);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
