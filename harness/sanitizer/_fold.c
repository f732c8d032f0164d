/* The line loop of `sanitize parse`, compiled: `_fold` of harness/sanitizer/parse_text.py, step
 * for step. A 100,000-record log is 800,000 turns of that loop; in Python each turn costs about
 * half a microsecond of bytecode dispatch, here a few dictionary operations. Everything that is
 * not the loop's bookkeeping stays in Python and is called back: the classification of a line not
 * seen before (`classify`), the end of a record (`end`), lines outside records (`outside`,
 * `other`) and the rare detail lines of races, initcheck and old host frames (`rare`). So the
 * compiled part decides nothing the Python route does not decide the same way; the tests run the
 * parser both ways on every capture (tests/test_sanitizer_fold.py).
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

/* digits of a dimension: 1 to 18 ASCII digits at s[*i], then `end`; -1 when not */
static long long dim_part(const Py_UCS1 *s, Py_ssize_t n, Py_ssize_t *i, char end)
{
    long long v = 0;
    Py_ssize_t start = *i;
    while (*i < n && s[*i] >= '0' && s[*i] <= '9' && *i - start < 18)
        v = v * 10 + (s[(*i)++] - '0');
    if (*i == start || *i >= n || s[*i] != end)
        return -1;
    (*i)++;
    return v;
}

/* The class of the commonest line that is rarely seen twice, `<lead>   by thread (t,t,t) in
 * block (b,b,b)` (ASCII, nothing after): (D_WHO, body, thread, block), what `classify` returns
 * for it. NULL without an error for any other line, which `classify` then reads. */
static PyObject *who_line(PyObject *raw, PyObject *lead)
{
    static const char by[] = "by thread (", in[] = " in block (";
    const Py_UCS1 *s;
    Py_ssize_t n, i, start, k;
    long long v[6];
    PyObject *body, *t, *b, *code;
    if (lead == Py_None || !PyUnicode_Check(raw) || !PyUnicode_IS_ASCII(raw) || !PyUnicode_IS_ASCII(lead))
        return NULL;
    s = PyUnicode_1BYTE_DATA(raw);
    n = PyUnicode_GET_LENGTH(raw);
    i = PyUnicode_GET_LENGTH(lead);
    if (n < i || memcmp(s, PyUnicode_1BYTE_DATA(lead), (size_t)i) != 0)
        return NULL;
    start = i;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    if (i - start < 3 || n - i < (Py_ssize_t)sizeof by - 1 || memcmp(s + i, by, sizeof by - 1) != 0)
        return NULL;
    start = i;
    i += sizeof by - 1;
    for (k = 0; k < 6; k++) {
        v[k] = dim_part(s, n, &i, k == 2 || k == 5 ? ')' : ',');
        if (v[k] < 0)
            return NULL;
        if (k == 2) {
            if (n - i < (Py_ssize_t)sizeof in - 1 || memcmp(s + i, in, sizeof in - 1) != 0)
                return NULL;
            i += sizeof in - 1;
        }
    }
    if (i != n)
        return NULL;
    body = PyUnicode_Substring(raw, start, n);
    t = Py_BuildValue("(LLL)", v[0], v[1], v[2]);
    b = Py_BuildValue("(LLL)", v[3], v[4], v[5]);
    code = PyLong_FromLong(D_WHO);
    if (body == NULL || t == NULL || b == NULL || code == NULL) {
        Py_XDECREF(body); Py_XDECREF(t); Py_XDECREF(b); Py_XDECREF(code);
        return NULL;
    }
    return Py_BuildValue("(NNNN)", code, body, t, b);
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
 * parse_text._fold; `fast` is (pending, votes, tool, kernels, stacks, record class) for end_fast.
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
        || !PyTuple_Check(fast) || PyTuple_GET_SIZE(fast) != 6 || !PyDict_Check(PyTuple_GET_ITEM(fast, 1))
        || !PyDict_Check(PyTuple_GET_ITEM(fast, 3)) || !PyDict_Check(PyTuple_GET_ITEM(fast, 4))
        || !PyType_Check(PyTuple_GET_ITEM(fast, 5))) {
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
            if (PyErr_Occurred())
                goto error;
            /* a `by thread` line read here is not remembered: it seldom comes again, and
             * thousands of them would push the lines that do out of the cache */
            op = who_line(raw, lead);
            if (op == NULL) {
                if (PyErr_Occurred() || (op = call1(classify, raw)) == NULL)
                    goto error;
                len = PyUnicode_Check(raw) ? PyUnicode_GET_LENGTH(raw) : PyObject_Length(raw);
                if (len < 0)
                    goto error;
                if (len <= cache_line) {
                    if (PyDict_GET_SIZE(cache) >= cache_max)
                        PyDict_Clear(cache);
                    if (PyDict_SetItem(cache, raw, op) < 0)
                        goto error;
                }
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

static PyMethodDef methods[] = {
    {"fold", (PyCFunction)(void (*)(void))fold, METH_FASTCALL, "parse_text._fold, compiled."},
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
