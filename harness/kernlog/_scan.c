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
 * find_marker finds the marker (SSE2 where there is SSE2, else glibc's memmem), linear on every input.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <string.h>
#include <stdint.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

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

/* The first marker in b[pos:end) (whole), or NULL. On x86-64 (SSE2, always there) 16 positions at a
 * time are tested for the marker's first byte and for its byte at `at` (the rare "X" of "NVRM: Xid":
 * about one byte in 800 of a kernel log), and only those candidates compared whole: several times
 * glibc memmem's speed here, and linear on every input (a candidate costs one compare of the
 * marker). Elsewhere, and for the last bytes, memmem. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* the same test 32 positions at a time, where the CPU has AVX2 (checked at run time); returns the
 * first hit, or NULL with *ppos moved to where the 16-wide loop carries on */
__attribute__((target("avx2"))) static const char *
find_marker_avx2(const char *b, Py_ssize_t *ppos, Py_ssize_t end, const char *marker, Py_ssize_t mlen,
                 Py_ssize_t at)
{
    Py_ssize_t pos = *ppos;
    const __m256i first = _mm256_set1_epi8(marker[0]), rare = _mm256_set1_epi8(marker[at]);
    for (; pos + 32 + (at > mlen ? at : mlen) <= end; pos += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(b + pos));
        __m256i y = _mm256_loadu_si256((const __m256i *)(b + pos + at));
        unsigned mask = (unsigned)_mm256_movemask_epi8(_mm256_and_si256(_mm256_cmpeq_epi8(x, first),
                                                                      _mm256_cmpeq_epi8(y, rare)));
        while (mask) {
            int k = __builtin_ctz(mask);
            if (memcmp(b + pos + k, marker, (size_t)mlen) == 0) {
                *ppos = pos;
                return b + pos + k;
            }
            mask &= mask - 1;
        }
    }
    *ppos = pos;
    return NULL;
}
#define HAVE_AVX2_ROUTE 1
#endif

static int use_avx2;

static const char *
find_marker(const char *b, Py_ssize_t pos, Py_ssize_t end, const char *marker, Py_ssize_t mlen)
{
    if (end - pos < mlen)
        return NULL;
#ifdef HAVE_AVX2_ROUTE
    if (use_avx2 && mlen >= 2) {
        const char *hit = find_marker_avx2(b, &pos, end, marker, mlen, mlen > 6 ? 6 : mlen - 1);
        if (hit != NULL)
            return hit;
    }
#endif
#ifdef __SSE2__
    Py_ssize_t at = mlen > 6 ? 6 : mlen - 1;
    if (mlen >= 2) {
        const __m128i first = _mm_set1_epi8(marker[0]), rare = _mm_set1_epi8(marker[at]);
        /* positions i with i + 16 + at <= end can be loaded whole; a whole marker needs i + mlen <= end */
        for (; pos + 16 + (at > mlen ? at : mlen) <= end; pos += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(b + pos));
            __m128i y = _mm_loadu_si128((const __m128i *)(b + pos + at));
            unsigned mask = (unsigned)_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(x, first),
                                                                    _mm_cmpeq_epi8(y, rare)));
            while (mask) {
                int k = __builtin_ctz(mask);
                if (memcmp(b + pos + k, marker, (size_t)mlen) == 0)
                    return b + pos + k;
                mask &= mask - 1;
            }
        }
    }
#endif
    if (end - pos < mlen)
        return NULL;
    return memmem(b + pos, (size_t)(end - pos), marker, (size_t)mlen);
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
        if (pos < end)
            hit = find_marker(b, pos, end, marker, mlen);
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

/* ---- the per-line fast path ------------------------------------------------------------------------
 *
 * parse_lines(lines, fallback) -> list: the XidEvent of each line, in order. This C reader takes only
 * the commonest shapes, a strict subset of parse.py's _FAST_RE: an ASCII line, raw dmesg "[uptime] "
 * or a /dev/kmsg record "PRI,SEQ,US,FLAGS;" or no container, "NVRM: Xid (" optional "PCI:", the
 * address, no MIG suffix, "): N, ", optional pid=/name= exactly as _FAST_RE reads them, then the
 * message: the Xid 31 MMU shape (_MMU_FAST_RE) when it is all there is and decodes to a page,
 * else any message, decoded by parse._decode_message (called back). Every other line, and any
 * value over the regex's bounds, goes to fallback(line) (parse.parse_line). What it builds is what
 * parse_line builds, field by field (tests/test_kernlog_native.py compares the two on every fixture,
 * every H200 capture and generated lines).
 */

static PyObject *XidEvent_t, *MmuFault_t, *category_dict, *category_func, *decode_message;
/* the last message decoded by decode_message (ASCII, as every line read here) and its parts */
static PyObject *last_message, *last_decoded;
static unsigned long long va_limit;

/* Field reads without the attribute machinery: a msgspec Struct keeps each field in a slot whose
 * member descriptor gives its offset (looked up once, in configure); any other object, or a type
 * whose field is not such a slot, is read by getattr. */
enum { F_TS, F_WALL, F_XID, F_PCI, F_PID, F_PROCESS, F_MMU, F_GR, F_CAUSED_BY, F_MESSAGE,
       F_ADDRESS, F_ENGINE, F_GPC, F_CLIENT, F_FAULT_TYPE, F_ACCESS_TYPE, F_COUNT };
static const char *field_names[F_COUNT] = {"ts", "wall", "xid", "pci", "pid", "process", "mmu", "gr", "caused_by",
                                           "message", "address", "engine", "gpc", "client", "fault_type",
                                           "access_type"};
static PyObject *field_strs[F_COUNT];
static Py_ssize_t field_offsets[F_COUNT];

static Py_ssize_t
slot_offset(PyObject *type, PyObject *name)
{
    PyObject *d = PyObject_GetAttr(type, name);  /* the class attribute: the member descriptor */
    Py_ssize_t off = -1;
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READ_RESTRICTED))
            off = m->offset;
    }
    Py_XDECREF(d);
    PyErr_Clear();
    return off;
}

static PyObject *
field(PyObject *obj, PyObject *type, int f)  /* new reference, or NULL with an error */
{
    if ((PyObject *)Py_TYPE(obj) == type && field_offsets[f] >= 0) {
        PyObject *v = *(PyObject **)((char *)obj + field_offsets[f]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, field_strs[f]);
}

#define EVF(ev, f) field((ev), XidEvent_t, (f))
#define MMUF(m, f) field((m), MmuFault_t, (f))

#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')
#define IS_TOKEN(c) (((c) >= 'A' && (c) <= 'Z') || IS_DIGIT(c) || (c) == '_')

static int
is_hex(unsigned char c)
{
    return IS_DIGIT(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int
hex_val(unsigned char c)
{
    return IS_DIGIT(c) ? c - '0' : (c >= 'a' ? c - 'a' + 10 : c - 'A' + 10);
}

/* Python's whitespace (str.isspace, re's \s) on an ASCII character */
static int
is_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* digits at s[*i..] (between lo and hi of them): their value, *i moved past them; -1 if not so */
static long long
digits(const unsigned char *s, Py_ssize_t n, Py_ssize_t *i, int lo, int hi)
{
    Py_ssize_t j = *i;
    long long v = 0;
    while (j < n && IS_DIGIT(s[j]) && j - *i < hi) {
        v = v * 10 + (s[j] - '0');
        j++;
    }
    if (j - *i < lo || (j < n && IS_DIGIT(s[j])))  /* too few, or more than hi */
        return -1;
    *i = j;
    return v;
}

static int
hex_run(const unsigned char *s, Py_ssize_t n, Py_ssize_t i)  /* length of the hex run at s[i] */
{
    Py_ssize_t j = i;
    while (j < n && is_hex(s[j]))
        j++;
    return (int)(j - i);
}

static int
token_run(const unsigned char *s, Py_ssize_t n, Py_ssize_t i)  /* length of the [A-Z0-9_] run at s[i] */
{
    Py_ssize_t j = i;
    while (j < n && IS_TOKEN(s[j]))
        j++;
    return (int)(j - i);
}

static int
starts(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, const char *lit)
{
    size_t k = strlen(lit);
    return i + (Py_ssize_t)k <= n && memcmp(s + i, lit, k) == 0;
}

/* a token "GPC<1-4 digits>" of length len at s[i] */
static int
is_gpc(const unsigned char *s, Py_ssize_t i, int len)
{
    if (len < 4 || len > 7 || memcmp(s + i, "GPC", 3) != 0)
        return 0;
    for (int k = 3; k < len; k++)
        if (!IS_DIGIT(s[i + k]))
            return 0;
    return 1;
}

#define IS_ALPHA(c) (((c) >= 'A' && (c) <= 'Z') || ((c) >= 'a' && (c) <= 'z'))
#define IS_LOWER(c) ((c) >= 'a' && (c) <= 'z')
#define IS_UPPER(c) ((c) >= 'A' && (c) <= 'Z')

/* "[ {0,20}\d{1,12}\.\d{1,9}\] " at s[*i]: its time, *i moved past it; 0 if not so */
static int
read_uptime(const unsigned char *s, Py_ssize_t n, Py_ssize_t *pi, double *ts)
{
    Py_ssize_t i = *pi + 1, sp = i;
    while (i < n && s[i] == ' ' && i - sp < 20)
        i++;
    Py_ssize_t t0 = i;
    if (digits(s, n, &i, 1, 12) < 0 || i >= n || s[i] != '.')
        return 0;
    i++;
    Py_ssize_t frac = i;
    while (i < n && IS_DIGIT(s[i]) && i - frac < 9)
        i++;
    if (i == frac || i + 1 >= n || s[i] != ']' || s[i + 1] != ' ')
        return 0;
    char num[32];
    memcpy(num, s + t0, (size_t)(i - t0));
    num[i - t0] = '\0';
    double v = PyOS_string_to_double(num, NULL, NULL);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *ts = v;
    *pi = i + 2;
    return 1;
}

/* characters of s[i..] against a shape: 'A' [A-Z], 'a' [a-z], '9' a digit, '_' a space or digit,
 * anything else itself */
static int
shaped(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, const char *shape)
{
    for (; *shape; shape++, i++) {
        if (i >= n)
            return 0;
        unsigned char c = s[i];
        switch (*shape) {
        case 'A': if (!IS_UPPER(c)) return 0; break;
        case 'a': if (!IS_LOWER(c)) return 0; break;
        case '9': if (!IS_DIGIT(c)) return 0; break;
        case '_': if (c != ' ' && !IS_DIGIT(c)) return 0; break;
        default: if (c != (unsigned char)*shape) return 0;
        }
    }
    return 1;
}

/* dmesg -T: "\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\] " */
static int
read_ctime(const unsigned char *s, Py_ssize_t n, Py_ssize_t *pi)
{
    if (!shaped(s, n, 0, "[Aaa Aaa _9 99:99:99 9999] "))
        return 0;
    *pi = 27;
    return 1;
}

/* dmesg --time-format iso, then a space: \d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? */
static int
read_iso(const unsigned char *s, Py_ssize_t n, Py_ssize_t *pi)
{
    if (!shaped(s, n, 0, "9999-99-99") || n < 11 || (s[10] != 'T' && s[10] != ' ') || !shaped(s, n, 11, "99:99:99"))
        return 0;
    Py_ssize_t i = 19;
    if (i + 1 < n && (s[i] == '.' || s[i] == ',') && IS_DIGIT(s[i + 1])) {
        Py_ssize_t f = ++i;
        while (i < n && IS_DIGIT(s[i]) && i - f < 9)
            i++;
    }
    if (i < n && s[i] == 'Z')
        i++;
    else if (i < n && (s[i] == '+' || s[i] == '-') && shaped(s, n, i + 1, "99")) {
        Py_ssize_t j = i + 3;
        if (j < n && s[j] == ':')
            j++;
        if (shaped(s, n, j, "99"))
            i = j + 2;
    }
    if (i >= n || s[i] != ' ')
        return 0;
    *pi = i + 1;
    return 1;
}

/* syslog / journalctl: "[A-Za-z]{3} {1,2}\d{1,2} \d\d:\d\d:\d\d(?:\.\d{1,9})? [^\s\[\]]{1,64} kernel: ";
 * the wall-clock text is "MON DAY HMS" (one space) */
static int
read_syslog(const unsigned char *s, Py_ssize_t n, Py_ssize_t *pi, char *wall, Py_ssize_t *wall_len)
{
    Py_ssize_t i = 4;
    if (i < n && s[i] == ' ')
        i++;
    Py_ssize_t day = i;
    if (digits(s, n, &i, 1, 2) < 0 || i >= n || s[i] != ' ')
        return 0;
    Py_ssize_t day_len = i - day;
    Py_ssize_t hms = ++i;
    if (!shaped(s, n, i, "99:99:99"))
        return 0;
    i += 8;
    if (i + 1 < n && s[i] == '.' && IS_DIGIT(s[i + 1])) {
        Py_ssize_t f = ++i;
        while (i < n && IS_DIGIT(s[i]) && i - f < 9)
            i++;
    }
    Py_ssize_t hms_len = i - hms;
    if (i >= n || s[i] != ' ')
        return 0;
    Py_ssize_t host = ++i;
    while (i < n && !is_space(s[i]) && s[i] != '[' && s[i] != ']' && i - host < 64)
        i++;
    if (i == host || !starts(s, n, i, " kernel: "))
        return 0;
    *pi = i + 9;
    Py_ssize_t k = 0;
    memcpy(wall, s, 3);
    k = 3;
    wall[k++] = ' ';
    memcpy(wall + k, s + day, (size_t)day_len);
    k += day_len;
    wall[k++] = ' ';
    memcpy(wall + k, s + hms, (size_t)hms_len);
    *wall_len = k + hms_len;
    return 1;
}

typedef struct {
    Py_ssize_t ch, engine, engine_len, gpc, gpc_len, client, client_len, addr, addr_len, ft, ft_len, at, at_len, end;
    unsigned long long address;
    unsigned long channel;
} mmu_shape;

/* _MMU_FAST_RE at s[i..], up to trailing whitespace, decodable as a page (parse_line's direct case).
 * 1 when it is; 0 when the line is to be read the general way (which gives the same record). */
static int
read_mmu(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, mmu_shape *m)
{
    if (starts(s, n, i, "channel 0x"))
        i += 10;
    else if (starts(s, n, i, "Ch "))
        i += 3;
    else
        return 0;
    if (hex_run(s, n, i) != 8)
        return 0;
    m->ch = i;
    m->channel = 0;
    for (int k = 0; k < 8; k++)
        m->channel = m->channel << 4 | (unsigned long)hex_val(s[i + k]);
    i += 8;
    if (!starts(s, n, i, ", intr ") || hex_run(s, n, i + 7) != 8)
        return 0;
    i += 15;
    if (!starts(s, n, i, ". MMU Fault: ENGINE "))
        return 0;
    i += 20;
    int len = token_run(s, n, i);
    if (len < 1 || len > 64 || i + len >= n || s[i + len] != ' ')
        return 0;
    m->engine = i, m->engine_len = len;
    i += len + 1;
    len = token_run(s, n, i);
    m->gpc = -1, m->gpc_len = 0;
    if (i + len < n && s[i + len] == ' ' && is_gpc(s, i, len)) {
        m->gpc = i + 3, m->gpc_len = len - 3;
        i += len + 1;
        len = token_run(s, n, i);
        if (i + len < n && s[i + len] == ' ' && is_gpc(s, i, len))
            return 0;  /* a client that is itself GPC<n>: the regex refuses it */
    }
    if (len < 1 || len > 64)
        return 0;
    m->client = i, m->client_len = len;
    i += len;
    if (!starts(s, n, i, " faulted @ 0x"))
        return 0;
    m->addr = i + 11;
    i += 13;
    int hi = hex_run(s, n, i);
    if (hi < 1 || hi > 8 || i + hi >= n || s[i + hi] != '_')  /* over 8 digits: not a page (general way) */
        return 0;
    unsigned long long address = 0;
    for (int k = 0; k < hi; k++)
        address = address << 4 | (unsigned)hex_val(s[i + k]);
    i += hi + 1;
    if (hex_run(s, n, i) != 8)  /* the page case has 8 low digits; any other is read the general way */
        return 0;
    for (int k = 0; k < 8; k++)
        address = address << 4 | (unsigned)hex_val(s[i + k]);
    i += 8;
    m->addr_len = i - m->addr;
    if (address >= va_limit || (address & 0xFFF))
        return 0;
    m->address = address;
    if (!starts(s, n, i, ". Fault is of type "))
        return 0;
    i += 19;
    len = token_run(s, n, i);
    if (len < 1 || len > 64 || i + len >= n || s[i + len] != ' ')
        return 0;
    m->ft = i, m->ft_len = len;
    i += len + 1;
    len = token_run(s, n, i);
    if (len < 1 || len > 64)
        return 0;
    m->at = i, m->at_len = len;
    i += len;
    m->end = i;
    for (Py_ssize_t j = i; j < n; j++)
        if (!is_space(s[j]))
            return 0;
    if (memmem(s + m->ch, (size_t)(i - m->ch), "UNRECOGNIZED", 12) != NULL)
        return 0;
    return 1;
}

static PyObject *
ascii_str(const unsigned char *s, Py_ssize_t start, Py_ssize_t len)
{
    return PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, s + start, len);
}

static PyObject *
category_of(PyObject *xid)
{
    PyObject *c = PyDict_GetItemWithError(category_dict, xid);
    if (c != NULL) {
        Py_INCREF(c);
        return c;
    }
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(category_func, xid);
}

static PyObject *
long_or_none(long long v)
{
    if (v < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

/* The event of one line, or NULL with *handled 0 when the line is not one of the shapes taken here. */
static PyObject *
fast_event(PyObject *line, int *handled)
{
    *handled = 0;
    if (!PyUnicode_Check(line) || !PyUnicode_IS_ASCII(line))
        return NULL;
    const unsigned char *s = PyUnicode_1BYTE_DATA(line);
    Py_ssize_t n = PyUnicode_GET_LENGTH(line), i = 0;
    double ts = 0.0;
    int has_ts = 0;
    long long seq = -1, level = -1;
    char wall[80];
    Py_ssize_t wall_len = -1;  /* -1: no wall-clock text */
    if (n > 1 && s[0] == '[' && s[1] >= 'A' && s[1] <= 'Z') {  /* dmesg -T */
        if (!read_ctime(s, n, &i))
            return NULL;
        memcpy(wall, s + 1, 24);
        wall_len = 24;
    }
    else if (n > 0 && s[0] == '[') {  /* dmesg */
        if (!read_uptime(s, n, &i, &ts))
            return NULL;
        has_ts = 1;
    }
    else if (n > 0 && IS_DIGIT(s[0])) {
        Py_ssize_t d = 0;
        while (d < n && IS_DIGIT(s[d]))
            d++;
        if (d < n && s[d] == ',') {  /* /dev/kmsg: "PRI,SEQ,US,FLAGS;" (values read here up to 15 digits) */
            long long pri = digits(s, n, &i, 1, 5);
            if (pri < 0 || i >= n || s[i++] != ',')
                return NULL;
            seq = digits(s, n, &i, 1, 15);
            if (seq < 0 || i >= n || s[i++] != ',')
                return NULL;
            long long us = digits(s, n, &i, 1, 15);
            if (us < 0 || i >= n || s[i++] != ',')
                return NULL;
            Py_ssize_t f = i;
            while (i < n && s[i] != ';' && s[i] != ',' && i - f < 4)
                i++;
            if (i >= n || s[i] != ';')
                return NULL;
            i++;
            ts = (double)us / 1e6;
            has_ts = 1;
            level = pri & 7;
        }
        else {  /* dmesg --time-format iso */
            if (!read_iso(s, n, &i))
                return NULL;
            wall_len = i - 1;
            memcpy(wall, s, (size_t)wall_len);
        }
    }
    else if (n > 3 && IS_ALPHA(s[0]) && IS_ALPHA(s[1]) && IS_ALPHA(s[2]) && s[3] == ' ') {  /* syslog */
        if (!read_syslog(s, n, &i, wall, &wall_len))
            return NULL;
        if (i < n && s[i] == '[') {
            if (!read_uptime(s, n, &i, &ts))
                return NULL;
            has_ts = 1;
        }
    }
    if (!starts(s, n, i, "NVRM: Xid ("))
        return NULL;
    i += 11;
    if (starts(s, n, i, "PCI:"))
        i += 4;
    Py_ssize_t pci = i;
    int h = hex_run(s, n, i);
    if (h < 1 || h > 8 || i + h >= n || s[i + h] != ':')
        return NULL;
    i += h + 1;
    if (hex_run(s, n, i) < 2 || i + 2 >= n || s[i + 2] != ':')
        return NULL;
    i += 3;
    if (hex_run(s, n, i) < 2 || !starts(s, n, i + 2, "): "))  /* MIG, a function: the general way */
        return NULL;
    Py_ssize_t pci_len = i + 2 - pci;
    i += 5;
    long long xid = digits(s, n, &i, 1, 6);
    if (xid < 0 || !starts(s, n, i, ", "))
        return NULL;
    i += 2;
    long long pid = -1;
    if (starts(s, n, i, "pid=")) {
        i += 4;
        if (starts(s, n, i, "'<unknown>'"))
            i += 11;
        else if ((pid = digits(s, n, &i, 1, 10)) < 0)
            return NULL;
        if (!starts(s, n, i, ", "))
            return NULL;
        i += 2;
    }
    Py_ssize_t name = -1, name_len = 0;
    if (starts(s, n, i, "name=")) {
        i += 5;
        const unsigned char *comma = memchr(s + i, ',', (size_t)(n - i));
        if (comma == NULL || comma + 1 >= s + n || comma[1] != ' ')
            return NULL;
        name = i;
        name_len = comma - (s + i);
        i += name_len + 2;
        while (name_len > 0 && is_space(s[name])) /* str.strip() */
            name++, name_len--;
        while (name_len > 0 && is_space(s[name + name_len - 1]))
            name_len--;
    }
    if (i >= n || is_space(s[i]) || starts(s, n, i, "pid=") || starts(s, n, i, "name="))
        return NULL;

    /* from here on the line is taken */
    *handled = 1;
    PyObject *a[17] = {NULL};
    PyObject *ret = NULL, *decoded = NULL;
    mmu_shape m;
    if (!(a[0] = PyLong_FromLongLong(xid)) || !(a[1] = ascii_str(s, pci, pci_len)))
        goto done;
    PyUnicode_InternInPlace(&a[1]);
    a[2] = Py_NewRef(Py_None);
    a[3] = Py_NewRef(Py_None);
    if (!(a[4] = long_or_none(pid)))
        goto done;
    if (name < 0 || name_len == 0 || (name_len == 9 && memcmp(s + name, "<unknown>", 9) == 0)
            || (name_len == 11 && memcmp(s + name, "'<unknown>'", 11) == 0))
        a[5] = Py_NewRef(Py_None);
    else {
        if (!(a[5] = ascii_str(s, name, name_len)))
            goto done;
        PyUnicode_InternInPlace(&a[5]);
    }
    if (!(a[7] = category_of(a[0])))
        goto done;
    if (read_mmu(s, n, i, &m)) {
        if (!(a[6] = ascii_str(s, i, m.end - i)))
            goto done;
        PyObject *f[9] = {NULL};
        int ok = (f[0] = PyLong_FromUnsignedLongLong(m.address)) && (f[1] = ascii_str(s, m.engine, m.engine_len));
        if (ok) {
            if (m.gpc < 0)
                f[2] = Py_NewRef(Py_None);
            else {
                Py_ssize_t g = m.gpc;
                f[2] = PyLong_FromLongLong(digits(s, n, &g, 1, 4));
            }
        }
        ok = ok && f[2] && (f[3] = ascii_str(s, m.client, m.client_len)) && (f[4] = ascii_str(s, m.ft, m.ft_len))
             && (f[5] = ascii_str(s, m.at, m.at_len)) && (f[7] = ascii_str(s, m.addr, m.addr_len));
        if (ok) {  /* the names repeat on every fault of a storm: one copy of each (equal values either way) */
            PyUnicode_InternInPlace(&f[1]);
            PyUnicode_InternInPlace(&f[3]);
            PyUnicode_InternInPlace(&f[4]);
            PyUnicode_InternInPlace(&f[5]);
        }
        if (ok) {
            f[6] = Py_NewRef(Py_True);
            f[8] = Py_NewRef(Py_None);
            a[8] = PyObject_Vectorcall(MmuFault_t, f, 9, NULL);
        }
        for (int k = 0; k < 9; k++)
            Py_XDECREF(f[k]);
        if (a[8] == NULL)
            goto done;
        a[9] = Py_NewRef(Py_None);
        if (!(a[10] = PyLong_FromUnsignedLong(m.channel)))
            goto done;
        a[11] = Py_NewRef(Py_None);
    }
    else {
        Py_ssize_t e = n;
        while (e > i && is_space(s[e - 1]))  /* str.rstrip() */
            e--;
        if (!(a[6] = ascii_str(s, i, e - i)))
            goto done;
        /* a message equal to the last one decodes to the last one's parts (decode_message is pure):
         * the same "channel 0x..." on every Xid 43 of a busy GPU, the same warp error on every line
         * of a burst */
        Py_ssize_t mlen = e - i;
        if (last_message != NULL && PyUnicode_GET_LENGTH(last_message) == mlen
                && memcmp(PyUnicode_1BYTE_DATA(last_message), s + i, (size_t)mlen) == 0)
            decoded = Py_NewRef(last_decoded);
        else {
            decoded = PyObject_CallOneArg(decode_message, a[6]);
            if (decoded == NULL)
                goto done;
            Py_XSETREF(last_message, Py_NewRef(a[6]));
            Py_XSETREF(last_decoded, Py_NewRef(decoded));
        }
        if (!PyTuple_Check(decoded) || PyTuple_GET_SIZE(decoded) != 4) {
            PyErr_SetString(PyExc_TypeError, "_decode_message must return a 4-tuple");
            goto done;
        }
        a[8] = Py_NewRef(PyTuple_GET_ITEM(decoded, 0));   /* mmu */
        a[11] = Py_NewRef(PyTuple_GET_ITEM(decoded, 1));  /* gr */
        a[9] = Py_NewRef(PyTuple_GET_ITEM(decoded, 2));   /* caused_by */
        a[10] = Py_NewRef(PyTuple_GET_ITEM(decoded, 3));  /* channel */
    }
    if (!(a[12] = long_or_none(seq)))
        goto done;
    if (!(a[13] = has_ts ? PyFloat_FromDouble(ts) : Py_NewRef(Py_None)))
        goto done;
    if (!(a[14] = wall_len < 0 ? Py_NewRef(Py_None) : ascii_str((const unsigned char *)wall, 0, wall_len)))
        goto done;
    if (!(a[15] = long_or_none(level)))
        goto done;
    Py_ssize_t r = n;
    while (r > 0 && (s[r - 1] == '\r' || s[r - 1] == '\n'))  /* line.rstrip("\r\n") */
        r--;
    if (r == n)
        a[16] = Py_NewRef(line);
    else if (!(a[16] = ascii_str(s, 0, r)))
        goto done;
    ret = PyObject_Vectorcall(XidEvent_t, a, 17, NULL);
done:
    for (int k = 0; k < 17; k++)
        Py_XDECREF(a[k]);
    Py_XDECREF(decoded);
    return ret;
}

static PyObject *
parse_lines(PyObject *self, PyObject *args)
{
    PyObject *lines, *fallback;
    if (!PyArg_ParseTuple(args, "OO:parse_lines", &lines, &fallback))
        return NULL;
    if (XidEvent_t == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "parse_lines: configure() first");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(lines, "parse_lines: lines must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *line = PySequence_Fast_GET_ITEM(seq, k);
        int handled;
        PyObject *ev = fast_event(line, &handled);
        if (!handled)
            ev = PyObject_CallOneArg(fallback, line);
        if (ev == NULL) {
            Py_DECREF(out);
            Py_DECREF(seq);
            return NULL;
        }
        PyList_SET_ITEM(out, k, ev);
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *xe, *mf, *cd, *cf, *dm;
    int bits;
    if (!PyArg_ParseTuple(args, "OOO!OOi:configure", &xe, &mf, &PyDict_Type, &cd, &cf, &dm, &bits))
        return NULL;
    if (bits < 1 || bits > 63) {
        PyErr_SetString(PyExc_ValueError, "configure: bits out of range");
        return NULL;
    }
    Py_XSETREF(XidEvent_t, Py_NewRef(xe));
    Py_XSETREF(MmuFault_t, Py_NewRef(mf));
    Py_XSETREF(category_dict, Py_NewRef(cd));
    Py_XSETREF(category_func, Py_NewRef(cf));
    Py_XSETREF(decode_message, Py_NewRef(dm));
    Py_CLEAR(last_message);
    Py_CLEAR(last_decoded);
    va_limit = 1ULL << bits;
    for (int f = 0; f < F_COUNT; f++) {
        if (field_strs[f] == NULL && !(field_strs[f] = PyUnicode_InternFromString(field_names[f])))
            return NULL;
        field_offsets[f] = slot_offset(f < F_ADDRESS ? XidEvent_t : MmuFault_t, field_strs[f]);
    }
    Py_RETURN_NONE;
}

/* ---- the table's rows ---------------------------------------------------------------------------------
 *
 * table(events, titles, detail, width) -> str | None: what cli/xid.py's _write_rows writes for these
 * events (the header and one row per event: time, xid, gpu, pid, process, category padded to their
 * column's width, two spaces apart, then the detail -- detail(ev), made here for the two commonest
 * kinds of line -- cut to the room a `width` line has left with "..."), in one string; lengths in code points, as Python's %-format counts them. None (the caller
 * then lays the table out in Python) for anything off the usual types, a width leaving no room, or
 * a cell holding a control character (shown escaped, so wider than it is: the Python layout
 * measures the escaped cells).
 */


static PyObject *s_ts, *s_wall, *s_xid, *s_pci, *s_pid, *s_process, *s_dash;
static PyObject *s_mmu, *s_gr, *s_caused_by, *s_message, *s_address, *s_engine, *s_gpc, *s_client, *s_fault_type,
    *s_access_type, *s_access_prefix, *s_empty, *s_space;

/* the words of an MMU fault after its address (cli/xid.py _mmu_words), or NULL without an error when
 * a field is not of the usual type */
static PyObject *
mmu_words(PyObject *engine, PyObject *gpc, PyObject *client, PyObject *ft, PyObject *at)
{
    PyObject *parts = PyList_New(0), *r = NULL, *p;
    if (parts == NULL)
        return NULL;
    PyObject *names[5] = {engine, NULL, client, ft, at};
    for (int k = 0; k < 5; k++) {
        if (k == 1) {
            if (gpc == Py_None)
                continue;
            if (!PyLong_CheckExact(gpc))
                goto done;
            p = PyUnicode_FromFormat("GPC%S", gpc);
        }
        else if (names[k] == Py_None)
            continue;
        else if (!PyUnicode_CheckExact(names[k]))
            goto done;
        else if (k == 4)
            p = PyUnicode_Replace(names[k], s_access_prefix, s_empty, -1);
        else
            p = Py_NewRef(names[k]);
        if (p == NULL)
            goto done;
        int rc = PyUnicode_GET_LENGTH(p) ? PyList_Append(parts, p) : 0;
        Py_DECREF(p);
        if (rc < 0)
            goto done;
    }
    r = PyUnicode_Join(s_space, parts);
done:
    Py_DECREF(parts);
    return r;
}

/* cli/xid.py _detail for the two commonest kinds of line -- a decoded MMU fault (its page and its
 * words), a line with nothing decoded (its message) -- else detail(ev). *last caches the words of
 * the last fault (a storm repeats them, the same interned names). */
static PyObject *
detail_of(PyObject *ev, PyObject *detail, PyObject **last_key, PyObject **last_words)
{
    PyObject *m = EVF(ev, F_MMU), *r = NULL;
    if (m == NULL)
        return NULL;
    if (m == Py_None) {
        PyObject *gr = EVF(ev, F_GR), *cb = gr ? EVF(ev, F_CAUSED_BY) : NULL;
        if (gr == Py_None && cb == Py_None)
            r = EVF(ev, F_MESSAGE);
        Py_XDECREF(gr);
        Py_XDECREF(cb);
        if (r != NULL && !PyUnicode_CheckExact(r))
            Py_CLEAR(r);
    }
    else if (Py_TYPE(m) == (PyTypeObject *)MmuFault_t) {
        PyObject *f[6] = {NULL};
        int ok = 1;
        for (int k = 0; k < 6 && ok; k++)
            ok = (f[k] = MMUF(m, F_ADDRESS + k)) != NULL;
        unsigned long long address = 0;
        if (ok && PyLong_CheckExact(f[0]) && _PyLong_Sign(f[0]) >= 0) {
            address = PyLong_AsUnsignedLongLong(f[0]);
            if (address == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                ok = 0;
            }
        }
        else
            ok = 0;
        PyObject *key = ok ? PyTuple_Pack(5, f[1], f[2], f[3], f[4], f[5]) : NULL;
        PyObject *words = NULL;
        if (key != NULL) {
            int same = *last_key != NULL ? PyObject_RichCompareBool(key, *last_key, Py_EQ) : 0;
            if (same > 0)
                words = Py_NewRef(*last_words);
            else if (same == 0 && (words = mmu_words(f[1], f[2], f[3], f[4], f[5])) != NULL) {
                Py_XSETREF(*last_key, Py_NewRef(key));
                Py_XSETREF(*last_words, Py_NewRef(words));
            }
            Py_DECREF(key);
        }
        if (words != NULL) {
            char where[24];
            snprintf(where, sizeof where, "0x%llx", address);
            r = PyUnicode_GET_LENGTH(words) ? PyUnicode_FromFormat("%s %U", where, words) : PyUnicode_FromString(where);
            Py_DECREF(words);
        }
        for (int k = 0; k < 6; k++)
            Py_XDECREF(f[k]);
    }
    Py_DECREF(m);
    if (r == NULL && !PyErr_Occurred())
        r = PyObject_CallOneArg(detail, ev);
    return r;
}
#define NCOLS 7

/* "%.6f" % x. A kernel time (positive, under a billion seconds) is x * 1e6 rounded to an integer
 * whenever the product is nearer to that integer than its own rounding error can move it (always
 * but at a tie), which is then the correctly rounded value Python prints; every other value by
 * Python's own formatting. */
static PyObject *
fixed6(double x)
{
    if (x > 0.0 && x < 1e9) {
        double y = x * 1e6, k = floor(y + 0.5);
        if (fabs(y - k) < 0.5 - y * 0x1p-50) {
            long long q = (long long)k;
            char buf[32];
            int len = snprintf(buf, sizeof buf, "%lld.%06lld", q / 1000000, q % 1000000);
            return PyUnicode_FromKindAndData(PyUnicode_1BYTE_KIND, buf, len);
        }
    }
    char *text = PyOS_double_to_string(x, 'f', 6, 0, NULL);
    if (text == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromString(text);
    PyMem_Free(text);
    return r;
}

/* a str (new reference) or NULL without an error: not a type this reader lays out */
static PyObject *
str_or_dash(PyObject *v)  /* `v or "-"` for a str or None */
{
    if (v == Py_None || (PyUnicode_CheckExact(v) && PyUnicode_GET_LENGTH(v) == 0))
        return Py_NewRef(s_dash);
    return PyUnicode_CheckExact(v) ? Py_NewRef(v) : NULL;
}

static PyObject *
cell(PyObject *ev, int col, PyObject *titles, PyObject *xid_texts)
{
    PyObject *v, *r = NULL;
    switch (col) {
    case 0:
        if (!(v = EVF(ev, F_TS)))
            return NULL;
        if (PyFloat_CheckExact(v))
            r = fixed6(PyFloat_AS_DOUBLE(v));
        else if (v == Py_None) {
            PyObject *w = EVF(ev, F_WALL);
            if (w != NULL) {
                r = str_or_dash(w);
                Py_DECREF(w);
            }
        }
        Py_DECREF(v);
        return r;
    case 1:
    case 5:
        if (!(v = EVF(ev, F_XID)))
            return NULL;
        if (PyLong_CheckExact(v)) {
            if (col == 1) {  /* a few Xid numbers on every row: one string each */
                r = PyDict_GetItemWithError(xid_texts, v);
                if (r != NULL)
                    Py_INCREF(r);
                else if (!PyErr_Occurred() && (r = PyObject_Str(v)) != NULL && PyDict_SetItem(xid_texts, v, r) < 0)
                    Py_CLEAR(r);
            }
            else {
                r = PyDict_GetItemWithError(titles, v);
                r = r != NULL && PyUnicode_CheckExact(r) ? Py_NewRef(r) : NULL;
            }
        }
        Py_DECREF(v);
        return r;
    case 2:
    case 4:
        if (!(v = EVF(ev, col == 2 ? F_PCI : F_PROCESS)))
            return NULL;
        r = str_or_dash(v);
        Py_DECREF(v);
        return r;
    case 3:
        if (!(v = EVF(ev, F_PID)))
            return NULL;
        r = v == Py_None ? Py_NewRef(s_dash) : PyLong_CheckExact(v) ? PyObject_Str(v) : NULL;
        Py_DECREF(v);
        return r;
    }
    return NULL;
}

/* Whether a str holds a character a terminal acts on rather than shows (cli/xid.py's _CONTROL:
 * U+0000-U+0008, U+000B-U+001F, U+007F; tab and newline are text). The Xid table of a big log is
 * megabytes written at once: a regular-expression scan of it cost more than laying it out.
 * One-byte text (the usual: ASCII and Latin-1) is read 8 bytes a step; a word with no byte below
 * 0x20 and none equal to 0x7f is clean, any other word is read byte by byte. */
static int
control_char(Py_UCS4 c)
{
    return (c < 0x20 && c != 0x09 && c != 0x0a) || c == 0x7f;
}

static int
str_has_control(PyObject *text)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), i = 0;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    if (kind == PyUnicode_1BYTE_KIND) {
        const unsigned char *p = data;
        const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
        for (; i + 8 <= n; i += 8) {
            uint64_t w, del;
            memcpy(&w, p + i, 8);
            del = w ^ (0x7f * ones);
            /* a byte below 0x20 (for bytes below 0x80), or a zero byte of del (a 0x7f); a byte of
             * 0x80 or more can flag a neighbour falsely: the byte-by-byte look settles it */
            if ((((w - 0x20 * ones) & ~w) | ((del - ones) & ~del)) & highs) {
                for (int k = 0; k < 8; k++)
                    if (control_char(p[i + k]))
                        return 1;
            }
        }
        for (; i < n; i++)
            if (control_char(p[i]))
                return 1;
        return 0;
    }
    for (; i < n; i++)
        if (control_char(PyUnicode_READ(kind, data, i)))
            return 1;
    return 0;
}

/* has_control(text) -> bool: str_has_control for Python (cli/xid.py's guard of every write) */
static PyObject *
has_control(PyObject *self, PyObject *args)
{
    PyObject *text;
    if (!PyArg_ParseTuple(args, "U", &text))
        return NULL;
    return PyBool_FromLong(str_has_control(text));
}

static PyObject *
table(PyObject *self, PyObject *args)
{
    static const char *heads[NCOLS] = {"time", "xid", "gpu", "pid", "process", "category", "detail"};
    PyObject *events, *titles, *detail, *last_key = NULL, *last_words = NULL;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "O!O!On:table", &PyList_Type, &events, &PyDict_Type, &titles, &detail, &width))
        return NULL;
    if (MmuFault_t == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "table: configure() first");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(events) + 1;  /* the header first */
    PyObject *xid_texts = PyDict_New();
    if (xid_texts == NULL)
        return NULL;
    PyObject **cells = PyMem_Calloc((size_t)(n * NCOLS), sizeof(PyObject *));
    if (cells == NULL) {
        Py_DECREF(xid_texts);
        return PyErr_NoMemory();
    }
    PyObject *ret = NULL;
    Py_ssize_t widths[NCOLS] = {0}, total = 0;
    Py_UCS4 maxchar = 127;
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *ev = r ? PyList_GET_ITEM(events, r - 1) : NULL;
        for (int c = 0; c < NCOLS; c++) {
            PyObject *v;
            if (r == 0)
                v = PyUnicode_FromString(heads[c]);
            else if (c == NCOLS - 1) {
                v = detail_of(ev, detail, &last_key, &last_words);
                if (v != NULL && !PyUnicode_CheckExact(v))
                    Py_CLEAR(v);
            }
            else
                v = cell(ev, c, titles, xid_texts);
            if (v == NULL)
                goto fallback;
            if (str_has_control(v)) {  /* shown escaped, wider than it is: Python measures it so */
                Py_DECREF(v);
                goto fallback;
            }
            cells[r * NCOLS + c] = v;
            if (c < NCOLS - 1 && PyUnicode_GET_LENGTH(v) > widths[c])
                widths[c] = PyUnicode_GET_LENGTH(v);
        }
    }
    Py_ssize_t room = width;
    for (int c = 0; c < NCOLS - 1; c++)
        room -= widths[c] + 2;
    if (room < 3)
        goto fallback;
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject **row = cells + r * NCOLS;
        PyObject *d = row[NCOLS - 1];
        if (PyUnicode_GET_LENGTH(d) > room) {  /* d[:room - 3] + "..." */
            PyObject *cut = PyUnicode_Substring(d, 0, room - 3), *dots = cut ? PyUnicode_FromString("...") : NULL;
            PyObject *both = dots ? PyUnicode_Concat(cut, dots) : NULL;
            Py_XDECREF(cut);
            Py_XDECREF(dots);
            if (both == NULL)
                goto fail;
            Py_SETREF(row[NCOLS - 1], both);
            d = both;
        }
        total += PyUnicode_GET_LENGTH(d) + 1;
        for (int c = 0; c < NCOLS; c++) {
            Py_UCS4 m = PyUnicode_MAX_CHAR_VALUE(row[c]);
            if (m > maxchar)
                maxchar = m;
        }
    }
    for (int c = 0; c < NCOLS - 1; c++)
        total += (widths[c] + 2) * n;
    ret = PyUnicode_New(total, maxchar);
    if (ret == NULL)
        goto fail;
    Py_ssize_t at = 0;
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject **row = cells + r * NCOLS;
        for (int c = 0; c < NCOLS; c++) {
            Py_ssize_t len = PyUnicode_GET_LENGTH(row[c]);
            if (len && PyUnicode_CopyCharacters(ret, at, row[c], 0, len) < 0)
                goto fail;
            at += len;
            if (c < NCOLS - 1) {
                Py_ssize_t pad = widths[c] - len + 2;
                if (PyUnicode_Fill(ret, at, pad, ' ') < 0)
                    goto fail;
                at += pad;
            }
        }
        if (PyUnicode_WriteChar(ret, at++, '\n') < 0)
            goto fail;
    }
    goto done;
fallback:
    if (PyErr_Occurred())
        goto fail;
    ret = Py_NewRef(Py_None);
    goto done;
fail:
    Py_CLEAR(ret);
done:
    for (Py_ssize_t k = 0; k < n * NCOLS; k++)
        Py_XDECREF(cells[k]);
    PyMem_Free(cells);
    Py_DECREF(xid_texts);
    Py_XDECREF(last_key);
    Py_XDECREF(last_words);
    return ret;
}

static PyMethodDef methods[] = {
    {"lines", lines, METH_VARARGS,
     "lines(buf, pos, end, final, marker, max_side) -> (list[str], keep, skipping): "
     "faulthunt.kernlog.parse.find_lines on bytes, the lines decoded (UTF-8, errors replaced)"},
    {"parse_lines", parse_lines, METH_VARARGS,
     "parse_lines(lines, fallback) -> list: parse.parse_line of each line; the common shapes read here, "
     "every other line by fallback(line)"},
    {"table", table, METH_VARARGS,
     "table(events, titles, detail, width) -> str | None: the rows cli/xid.py's _write_rows writes, or None"},
    {"has_control", has_control, METH_VARARGS,
     "has_control(text) -> bool: whether text holds U+0000-U+0008, U+000B-U+001F or U+007F "
     "(what a terminal acts on; tab and newline are text)"},
    {"configure", configure, METH_VARARGS,
     "configure(XidEvent, MmuFault, category_dict, category_func, decode_message, va_bits)"},
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
#ifdef HAVE_AVX2_ROUTE
    __builtin_cpu_init();
    use_avx2 = __builtin_cpu_supports("avx2");
#endif
    if (!(s_ts = PyUnicode_InternFromString("ts")) || !(s_wall = PyUnicode_InternFromString("wall"))
            || !(s_xid = PyUnicode_InternFromString("xid")) || !(s_pci = PyUnicode_InternFromString("pci"))
            || !(s_pid = PyUnicode_InternFromString("pid")) || !(s_process = PyUnicode_InternFromString("process"))
            || !(s_dash = PyUnicode_InternFromString("-")) || !(s_mmu = PyUnicode_InternFromString("mmu"))
            || !(s_gr = PyUnicode_InternFromString("gr")) || !(s_caused_by = PyUnicode_InternFromString("caused_by"))
            || !(s_message = PyUnicode_InternFromString("message"))
            || !(s_address = PyUnicode_InternFromString("address"))
            || !(s_engine = PyUnicode_InternFromString("engine")) || !(s_gpc = PyUnicode_InternFromString("gpc"))
            || !(s_client = PyUnicode_InternFromString("client"))
            || !(s_fault_type = PyUnicode_InternFromString("fault_type"))
            || !(s_access_type = PyUnicode_InternFromString("access_type"))
            || !(s_access_prefix = PyUnicode_FromString("ACCESS_TYPE_")) || !(s_empty = PyUnicode_FromString(""))
            || !(s_space = PyUnicode_FromString(" ")))
        return NULL;
    return PyModule_Create(&module);
}
