/* The kernel-log line finder in C: faulthunt.kernlog.parse.find_lines for bytes, lines decoded.
 *
 * Optional: pip install builds it with the system C compiler (setup.py, optional=True); without it
 * faulthunt.kernlog.parse uses the pure-Python find_lines + decode_lines, which stays the reference
 * (tests/test_kernlog_native.py holds the two equal on every chunking and on text dense in marker
 * pieces). Same contract as find_lines:
 *
 *   lines(buf, pos, end, final, marker, max_side) -> (list[str], keep, skipping)
 *
 * the candidate lines of buf[pos:end] (each holding marker, cut to max_side bytes either side of
 * it), decoded as UTF-8 with undecodable bytes replaced; keep is the offset from which the caller
 * must keep the text for the next call; skipping says that the next call starts inside an
 * over-long line. buf is any object with the buffer protocol (bytes, bytearray, mmap).
 * glibc's memmem finds the marker (a two-way search, linear on every input).
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <string.h>

static Py_ssize_t
rfind_nl(const char *b, Py_ssize_t lo, Py_ssize_t hi)  /* last '\n' in b[lo:hi], or -1 */
{
    if (hi <= lo)
        return -1;
    const char *p = memrchr(b + lo, '\n', (size_t)(hi - lo));
    return p ? p - b : -1;
}

static Py_ssize_t
find_nl(const char *b, Py_ssize_t lo, Py_ssize_t hi)  /* first '\n' in b[lo:hi], or -1 */
{
    if (hi <= lo)
        return -1;
    const char *p = memchr(b + lo, '\n', (size_t)(hi - lo));
    return p ? p - b : -1;
}

static int
append_line(PyObject *out, const char *b, Py_ssize_t start, Py_ssize_t stop)
{
    PyObject *s = PyUnicode_DecodeUTF8(b + start, stop - start, "replace");
    if (s == NULL)
        return -1;
    int rc = PyList_Append(out, s);
    Py_DECREF(s);
    return rc;
}

static PyObject *
scan_lines(const char *b, Py_ssize_t size, Py_ssize_t pos, Py_ssize_t end, int final,
           const char *marker, Py_ssize_t mlen, Py_ssize_t max_side)
{
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    if (end > size)
        end = size;
    if (pos < 0)
        pos = 0;
    for (;;) {
        const char *hit = NULL;
        if (pos < end && end - pos >= mlen)
            hit = memmem(b + pos, (size_t)(end - pos), marker, (size_t)mlen);
        if (hit == NULL) {
            /* keep what a marker straddling `end` needs: its own start and max_side before it */
            Py_ssize_t keep = end - mlen + 1 - max_side;
            if (keep < pos)
                keep = pos;
            Py_ssize_t nl = rfind_nl(b, keep, end);
            if (nl + 1 > keep)
                keep = nl + 1;
            return Py_BuildValue("(NnO)", out, keep, Py_False);
        }
        Py_ssize_t i = hit - b;
        Py_ssize_t low = i > max_side ? i - max_side : 0;
        Py_ssize_t start = rfind_nl(b, low, i) + 1;
        if (start == 0)
            start = low;
        Py_ssize_t cap = i + max_side;
        Py_ssize_t stop = find_nl(b, i, cap < end ? cap : end);
        if (stop >= 0) {
            if (append_line(out, b, start, stop) < 0)
                goto fail;
        }
        else if (cap <= end) {  /* over-long: cut here, then skip to the line's real end */
            if (append_line(out, b, start, cap) < 0)
                goto fail;
            stop = find_nl(b, cap, end);
            if (stop < 0)
                return Py_BuildValue("(NnO)", out, end, final ? Py_False : Py_True);
        }
        else if (final) {
            if (append_line(out, b, start, end) < 0)
                goto fail;
            return Py_BuildValue("(NnO)", out, end, Py_False);
        }
        else
            return Py_BuildValue("(NnO)", out, start, Py_False);
        pos = stop + 1;
    }
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
lines(PyObject *self, PyObject *args)
{
    Py_buffer buf, marker;
    Py_ssize_t pos, end, max_side;
    int final;
    if (!PyArg_ParseTuple(args, "y*nnpy*n:lines", &buf, &pos, &end, &final, &marker, &max_side))
        return NULL;
    PyObject *res = NULL;
    if (marker.len < 1 || max_side < 0)
        PyErr_SetString(PyExc_ValueError, "lines: empty marker or negative max_side");
    else
        res = scan_lines(buf.buf, buf.len, pos, end, final, marker.buf, marker.len, max_side);
    PyBuffer_Release(&marker);
    PyBuffer_Release(&buf);
    return res;
}

static PyMethodDef methods[] = {
    {"lines", lines, METH_VARARGS,
     "lines(buf, pos, end, final, marker, max_side) -> (list[str], keep, skipping): "
     "faulthunt.kernlog.parse.find_lines on bytes, the lines decoded (UTF-8, errors replaced)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "faulthunt.kernlog._scan",
    "The kernel-log line finder in C (optional; faulthunt.kernlog.parse.find_lines is the reference).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    return PyModule_Create(&module);
}
