/* Arrow columns to JSON documents, a whole column in one call: no Python object per record or
 * per field.
 *
 * encode(nodes, n, header) where nodes[i] = (kind, flags, key, label, valid|None, offset,
 * offsets|None, data|None, children, param) describes one Arrow array of the input tree (node
 * 0: the column, an object, `n` rows). `key` is the property's name already as JSON text with
 * its colon (b'"id":'), `label` names the field in errors, `offset` is the array's own offset;
 * a struct's children are indexed as their parent, a list's and a map's by its offsets.
 * `param` is a decimal's scale, or 1 for a timestamp without time zone (written without Z). A null property is left out (as Spark's to_json leaves it),
 * unless it is J_REQUIRED, which refuses the row; array items and map values write null.
 * Returns (None, offsets, data) of a binary column whose every value starts with `header`,
 * or (row, message) for the first row refused.
 *
 * The stable ABI (Python 3.11+): one build serves every Python the package supports.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_outs_types.h"
#include "_enc.h"

enum { J_BOOL, J_INT32, J_INT64, J_FLOAT, J_DOUBLE, J_STRING, J_BASE64, J_TIMESTAMP, J_DATE, J_DECIMAL, J_OBJECT,
       J_ARRAY, J_MAP };
enum { J_REQUIRED = 1 };

typedef struct {
    int kind, flags, nchild;
    long long param;
    int64_t offset;
    const unsigned char *valid;
    const int32_t *offs;
    const char *data;
    int *child;
    const char *key, *label;
    Py_ssize_t keylen;
} Node;

typedef struct {
    Node *nodes;
    Buf out;
    char msg[512];
    int py_error;
} Enc;

static int refuse(Enc *e, const Node *nd, const char *what) {
    snprintf(e->msg, sizeof e->msg, "%s %s", nd->label, what);
    return -1;
}

static int oom(Enc *e) {
    e->py_error = 1;
    return -1;
}

static int is_valid(const Node *nd, int64_t p) { return !nd->valid || (nd->valid[p / 8] >> (p % 8) & 1); }

static int put_str(Buf *b, const char *s) { return buf_put(b, s, strlen(s)); }

/* A JSON string of `n` UTF-8 bytes. */
static int put_quoted(Buf *b, const unsigned char *s, int64_t n) {
    static const char hex[] = "0123456789abcdef";
    if (buf_reserve(b, (size_t)n + 2)) return -1;
    b->p[b->len++] = '"';
    int64_t run = 0;
    for (int64_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (buf_put(b, s + run, (size_t)(i - run))) return -1;
        run = i + 1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t k = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            esc[1] = 'u', esc[2] = '0', esc[3] = '0', esc[4] = hex[c >> 4], esc[5] = hex[c & 15];
            k = 6;
        }
        if (buf_put(b, esc, k)) return -1;
    }
    if (buf_put(b, s + run, (size_t)(n - run))) return -1;
    return buf_put(b, "\"", 1);
}

static int put_base64(Buf *b, const unsigned char *s, int64_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (buf_reserve(b, (size_t)(4 * ((n + 2) / 3) + 2))) return -1;
    char *o = b->p + b->len;
    *o++ = '"';
    int64_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = tab[v >> 18], *o++ = tab[(v >> 12) & 63], *o++ = tab[(v >> 6) & 63], *o++ = tab[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        *o++ = tab[v >> 18], *o++ = tab[(v >> 12) & 63];
        *o++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    return 0;
}

/* Days since 1970-01-01 as a proleptic Gregorian date. */
static void civil(int64_t z, int64_t *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int put_date(Buf *b, int64_t days) {
    int64_t y;
    int m, d;
    civil(days, &y, &m, &d);
    char tmp[40];
    int k = snprintf(tmp, sizeof tmp, y >= 0 && y <= 9999 ? "\"%04lld-%02d-%02d\"" : "\"%+05lld-%02d-%02d\"",
                     (long long)y, m, d);
    return buf_put(b, tmp, (size_t)k);
}

/* Microseconds since the epoch as RFC 3339 (fraction only when there is one), with a Z for UTC
 * (`local`: a timestamp without time zone, no offset, as Spark writes it). */
static int put_timestamp(Buf *b, int64_t us, int local) {
    int64_t days = us / 86400000000LL, rest = us % 86400000000LL;
    if (rest < 0) { /* floor, without overflowing at INT64_MIN */
        rest += 86400000000LL;
        days -= 1;
    }
    int64_t y;
    int m, d;
    civil(days, &y, &m, &d);
    int sec = (int)(rest / 1000000), frac = (int)(rest % 1000000);
    char tmp[64];
    int k = snprintf(tmp, sizeof tmp, y >= 0 && y <= 9999 ? "\"%04lld-%02d-%02dT%02d:%02d:%02d"
                                                          : "\"%+05lld-%02d-%02dT%02d:%02d:%02d",
                     (long long)y, m, d, sec / 3600, sec / 60 % 60, sec % 60);
    if (frac) k += snprintf(tmp + k, sizeof tmp - (size_t)k, ".%06d", frac);
    k += snprintf(tmp + k, sizeof tmp - (size_t)k, local ? "\"" : "Z\"");
    return buf_put(b, tmp, (size_t)k);
}

/* A little-endian 128-bit decimal with `scale` digits after the point, exactly. */
static int put_decimal(Buf *b, const unsigned char *le, int scale) {
    uint64_t lo, hi;
    memcpy(&lo, le, 8);
    memcpy(&hi, le + 8, 8);
    int neg = (int64_t)hi < 0;
    if (neg) { /* two's complement negate */
        lo = ~lo + 1;
        hi = ~hi + (lo == 0);
    }
    char digits[48];
    int n = 0;
    while (n == 0 || hi || lo || n <= scale) { /* divide the 128-bit magnitude by 10 */
        uint64_t rem = 0, q_hi, q_lo;
        q_hi = hi / 10;
        rem = hi % 10;
        /* (rem * 2^64 + lo) / 10, in two 32-bit halves */
        uint64_t part = (rem << 32) | (lo >> 32);
        uint64_t q1 = part / 10;
        rem = part % 10;
        part = (rem << 32) | (lo & 0xFFFFFFFFu);
        uint64_t q0 = part / 10;
        rem = part % 10;
        q_lo = (q1 << 32) | q0;
        digits[n++] = (char)('0' + rem);
        hi = q_hi;
        lo = q_lo;
        if (n >= 46) break;
    }
    char tmp[96];
    int k = 0;
    if (neg) tmp[k++] = '-';
    for (int i = n - 1; i >= 0; i--) {
        if (i == scale - 1 && scale > 0) tmp[k++] = '.';
        tmp[k++] = digits[i];
    }
    for (int z = 0; z < -scale && !(n == 1 && digits[0] == '0'); z++) tmp[k++] = '0'; /* a negative scale */
    return buf_put(b, tmp, (size_t)k);
}

/* The fewest significant digits that read back as float `f` (for a power of two the nearest
 * such text may round away from it, so the last digit's neighbours are tried too), as the
 * double those digits name; 0 if none up to 9 digits (then the float's own value is used). */
static int float_digits(float f, double *out) {
    for (int prec = 1; prec <= 9; prec++) {
        char tmp[48];
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, (double)f);
        char *ep = strchr(tmp, 'e');
        if (!ep) return 0;
        int exp = atoi(ep + 1);
        long long mant = 0;
        for (char *q = tmp; q < ep; q++)
            if (*q >= '0' && *q <= '9') mant = mant * 10 + (*q - '0');
        int neg = tmp[0] == '-';
        double best = 0;
        int found = 0;
        for (int delta = 0; delta <= 2; delta++) { /* m, then m - 1, then m + 1 */
            long long m = delta == 0 ? mant : delta == 1 ? mant - 1 : mant + 1;
            if (m <= 0) continue;
            char cand[48];
            snprintf(cand, sizeof cand, "%s%llde%d", neg ? "-" : "", m, exp - (prec - 1));
            double d = strtod(cand, NULL);
            if ((float)d == f && (!found || fabs(d - (double)f) < fabs(best - (double)f))) {
                best = d;
                found = 1;
            }
        }
        if (found) {
            *out = best;
            return 1;
        }
    }
    return 0;
}

static int put_double(Enc *e, const Node *nd, double v, int single) {
    if (!isfinite(v)) return refuse(e, nd, "is NaN or infinite, which JSON has no number for");
    double shown = v;
    if (single && v != 0) {
        double d;
        if (float_digits((float)v, &d)) shown = d;
    }
    char *s = PyOS_double_to_string(shown, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!s) return oom(e);
    int rc = put_str(&e->out, s);
    PyMem_Free(s);
    return rc ? oom(e) : 0;
}

static int enc(Enc *e, int at, int64_t p);

static int put_object(Enc *e, const Node *nd, int64_t p) {
    Buf *b = &e->out;
    if (buf_put(b, "{", 1)) return oom(e);
    int first = 1;
    for (int k = 0; k < nd->nchild; k++) {
        const Node *f = &e->nodes[nd->child[k]];
        int64_t fp = p - nd->offset + f->offset;
        if (!is_valid(f, fp)) {
            if (f->flags & J_REQUIRED) return refuse(e, f, "is null, and the schema requires it");
            continue;
        }
        if ((!first && buf_put(b, ",", 1)) || buf_put(b, f->key, (size_t)f->keylen)) return oom(e);
        first = 0;
        if (enc(e, nd->child[k], fp)) return -1;
    }
    return buf_put(b, "}", 1) ? oom(e) : 0;
}

/* The value of node `at` at its own index `p` (known valid). */
static int enc(Enc *e, int at, int64_t p) {
    const Node *nd = &e->nodes[at];
    Buf *b = &e->out;
    char tmp[32];
    switch (nd->kind) {
    case J_BOOL:
        return put_str(b, (nd->data[p / 8] >> (p % 8)) & 1 ? "true" : "false") ? oom(e) : 0;
    case J_INT32: {
        int32_t v;
        memcpy(&v, nd->data + 4 * p, 4);
        int k = snprintf(tmp, sizeof tmp, "%d", (int)v);
        return buf_put(b, tmp, (size_t)k) ? oom(e) : 0;
    }
    case J_INT64: {
        int64_t v;
        memcpy(&v, nd->data + 8 * p, 8);
        int k = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
        return buf_put(b, tmp, (size_t)k) ? oom(e) : 0;
    }
    case J_FLOAT: {
        float v;
        memcpy(&v, nd->data + 4 * p, 4);
        return put_double(e, nd, v, 1);
    }
    case J_DOUBLE: {
        double v;
        memcpy(&v, nd->data + 8 * p, 8);
        return put_double(e, nd, v, 0);
    }
    case J_STRING:
    case J_BASE64: {
        int32_t a = nd->offs[p], z = nd->offs[p + 1];
        const unsigned char *s = (const unsigned char *)nd->data + a;
        int rc = nd->kind == J_STRING ? put_quoted(b, s, (int64_t)z - a) : put_base64(b, s, (int64_t)z - a);
        return rc ? oom(e) : 0;
    }
    case J_TIMESTAMP: {
        int64_t v;
        memcpy(&v, nd->data + 8 * p, 8);
        return put_timestamp(b, v, (int)nd->param) ? oom(e) : 0;
    }
    case J_DATE: {
        int32_t v;
        memcpy(&v, nd->data + 4 * p, 4);
        return put_date(b, v) ? oom(e) : 0;
    }
    case J_DECIMAL:
        return put_decimal(b, (const unsigned char *)nd->data + 16 * p, (int)nd->param) ? oom(e) : 0;
    case J_OBJECT:
        return put_object(e, nd, p);
    case J_ARRAY:
    case J_MAP: {
        int32_t a = nd->offs[p], z = nd->offs[p + 1];
        if (buf_put(b, nd->kind == J_ARRAY ? "[" : "{", 1)) return oom(e);
        const Node *item = &e->nodes[nd->child[nd->kind == J_ARRAY ? 0 : 1]];
        for (int32_t k = a; k < z; k++) {
            if (k > a && buf_put(b, ",", 1)) return oom(e);
            if (nd->kind == J_MAP) { /* a key is a string, as Spark casts it: numbers and booleans quoted */
                const Node *key = &e->nodes[nd->child[0]];
                int quote = key->kind != J_STRING && key->kind != J_BASE64 && key->kind != J_TIMESTAMP &&
                            key->kind != J_DATE;
                if (quote && buf_put(b, "\"", 1)) return oom(e);
                if (enc(e, nd->child[0], k + key->offset)) return -1;
                if ((quote && buf_put(b, "\"", 1)) || buf_put(b, ":", 1)) return oom(e);
            }
            if (!is_valid(item, k + item->offset)) {
                if (item->flags & J_REQUIRED) return refuse(e, item, "is null, and the schema takes no null there");
                if (put_str(b, "null")) return oom(e);
                continue;
            }
            if (enc(e, nd->child[nd->kind == J_ARRAY ? 0 : 1], k + item->offset)) return -1;
        }
        return buf_put(b, nd->kind == J_ARRAY ? "]" : "}", 1) ? oom(e) : 0;
    }
    }
    PyErr_SetString(PyExc_ValueError, "an unknown encoder node");
    return oom(e);
}

static int json_row(void *e, Py_ssize_t i) { return put_object(e, &((Enc *)e)->nodes[0], i + ((Enc *)e)->nodes[0].offset); }

static PyObject *encode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *nodes_o;
    Py_ssize_t n;
    Py_buffer header;
    if (!PyArg_ParseTuple(args, "O!ny*", &PyList_Type, &nodes_o, &n, &header)) return NULL;
    PyObject *result = NULL;
    int count = (int)PyList_Size(nodes_o);
    Py_buffer *views = calloc((size_t)(count ? count : 1) * 3, sizeof(Py_buffer));
    Enc e;
    memset(&e, 0, sizeof e);
    e.nodes = calloc((size_t)(count ? count : 1), sizeof(Node));
    if (!views || !e.nodes) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < count; i++) {
        Node *nd = &e.nodes[i];
        PyObject *valid, *offsets, *data, *children, *key;
        if (!PyArg_ParseTuple(PyList_GetItem(nodes_o, i), "iiO!sOLOOO!L", &nd->kind, &nd->flags, &PyBytes_Type, &key,
                              &nd->label, &valid, &nd->offset, &offsets, &data, &PyTuple_Type, &children, &nd->param))
            goto done;
        nd->key = PyBytes_AsString(key);
        nd->keylen = PyBytes_Size(key);
        if (take_buffers(views, i, valid, offsets, data, &nd->valid, &nd->offs, &nd->data)) goto done;
        if (!(nd->child = children_of(children, i, count, &nd->nchild))) goto done;
        int nc = nd->nchild;
        int k = nd->kind;
        int needs_offs = k == J_STRING || k == J_BASE64 || k == J_ARRAY || k == J_MAP;
        int needs_data = k != J_OBJECT && k != J_ARRAY && k != J_MAP;
        if (k < J_BOOL || k > J_MAP || (needs_offs && !nd->offs) || (needs_data && !nd->data) ||
            (k == J_ARRAY && nc != 1) || (k == J_MAP && nc != 2) || nd->param < -38 || nd->param > 38) {
            PyErr_Format(PyExc_ValueError, "node %d (%s) is malformed or lacks a buffer its kind needs", i,
                         nd->label);
            goto done;
        }
    }
    if (!count || e.nodes[0].kind != J_OBJECT) {
        PyErr_SetString(PyExc_ValueError, "no object node");
        goto done;
    }
    result = encode_rows(&e, json_row, n, &header, &e.out, &e.py_error, e.msg, "JSON");
done:
    release_views(views, count);
    if (e.nodes)
        for (int i = 0; i < count; i++) free(e.nodes[i].child);
    free(e.nodes);
    free(e.out.p);
    PyBuffer_Release(&header);
    return result;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS, "An Arrow column to JSON documents with a header each (see _json.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_json", NULL, -1, methods};

PyMODINIT_FUNC PyInit__json(void) { return PyModule_Create(&module); }
