/* Arrow columns to one PostgreSQL COPY ... (FORMAT binary) stream, a whole record batch
 * in one call: no Python object per row, and the server parses no text.
 *
 * encode(n, columns) takes the batch's n rows as a list of columns, each
 * (kind, offset, valid, data, offsets): `kind` one of the K_* codes below (the driver chose
 * it from the Spark type and the target column's PostgreSQL type, so the bytes are that
 * type's binary input), `offset` the array's first item in its buffers, `valid` its validity
 * bitmap or None (no nulls), `data` its values (a bitmap for booleans), `offsets` the 32-bit
 * offsets of a string or binary column (else None). Returns the whole stream: signature,
 * rows (field count, then each field's length, -1 for NULL, and big-endian value), trailer.
 *
 * The stable ABI (Python 3.11+): one build serves every Python the package supports.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum {
    K_I8_2 = 1, /* Arrow int8 -> int2 */
    K_I16_2,    /* int16 -> int2 */
    K_I8_4,     /* int8 -> int4 */
    K_I16_4,    /* int16 -> int4 */
    K_I32_4,    /* int32 -> int4 */
    K_I8_8,     /* int8 -> int8 */
    K_I16_8,    /* int16 -> int8 */
    K_I32_8,    /* int32 -> int8 */
    K_I64_8,    /* int64 -> int8 */
    K_F4,       /* float32 -> float4 */
    K_F8,       /* float64 -> float8 */
    K_BOOL,     /* bool -> bool */
    K_BYTES,    /* string or binary -> text, varchar, json, bytea: the bytes as they are */
    K_JSONB,    /* string -> jsonb: version 1, then the text */
    K_TS,       /* timestamp[us] -> timestamp, timestamptz: microseconds since 2000-01-01 */
    K_DATE,     /* date32 -> date: days since 2000-01-01 */
    K_LAST
};

#define PG_EPOCH_DAYS 10957                     /* 1970-01-01 to 2000-01-01 */
#define PG_EPOCH_US (PG_EPOCH_DAYS * 86400000000LL)

typedef struct {
    int kind;
    int64_t offset;
    Py_buffer valid, data, offs;
    int has_valid, has_data, has_offs;
} Col;

static const int SRC_WIDTH[K_LAST] = {0, 1, 2, 1, 2, 4, 1, 2, 4, 8, 4, 8, 0, 0, 0, 8, 4};
static const int DST_WIDTH[K_LAST] = {0, 2, 2, 4, 4, 4, 8, 8, 8, 8, 4, 8, 1, 0, 0, 8, 4};

static void col_close(Col *c) {
    if (c->has_valid) PyBuffer_Release(&c->valid);
    if (c->has_data) PyBuffer_Release(&c->data);
    if (c->has_offs) PyBuffer_Release(&c->offs);
}

static int bit(const Py_buffer *b, int64_t i) { return ((const unsigned char *)b->buf)[i >> 3] >> (i & 7) & 1; }

static int is_null(const Col *c, int64_t i) { return c->has_valid && !bit(&c->valid, c->offset + i); }

static int variable(int kind) { return kind == K_BYTES || kind == K_JSONB; }

/* Opens one column tuple and checks its buffers hold `n` items from its offset. */
static int col_open(Col *c, PyObject *t, int64_t n) {
    PyObject *valid, *data, *offs;
    long long offset;
    memset(c, 0, sizeof *c);
    if (!PyArg_ParseTuple(t, "iLOOO", &c->kind, &offset, &valid, &data, &offs)) return -1;
    c->offset = offset;
    if (c->kind <= 0 || c->kind >= K_LAST || offset < 0) {
        PyErr_Format(PyExc_ValueError, "unknown column kind %d", c->kind);
        return -1;
    }
    if (valid != Py_None) {
        if (PyObject_GetBuffer(valid, &c->valid, PyBUF_SIMPLE)) return -1;
        c->has_valid = 1;
        if (c->valid.len < (offset + n + 7) / 8) goto short_buffer;
    }
    if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE)) return -1;
    c->has_data = 1;
    if (variable(c->kind)) {
        if (offs == Py_None || PyObject_GetBuffer(offs, &c->offs, PyBUF_SIMPLE)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a string column needs its offsets");
            return -1;
        }
        c->has_offs = 1;
        if (c->offs.len < 4 * (offset + n + 1)) goto short_buffer;
        const int32_t *o = (const int32_t *)c->offs.buf + offset;
        if (o[0] < 0 || o[n] > c->data.len) goto short_buffer;
        for (int64_t i = 0; i < n; i++)
            if (o[i + 1] < o[i]) goto short_buffer;
    } else if (c->kind == K_BOOL) {
        if (c->data.len < (offset + n + 7) / 8) goto short_buffer;
    } else if (c->data.len < SRC_WIDTH[c->kind] * (offset + n)) {
        goto short_buffer;
    }
    return 0;
short_buffer:
    PyErr_SetString(PyExc_ValueError, "a column's buffers are shorter than its rows");
    return -1;
}

static int64_t field_size(const Col *c, int64_t i) {
    if (is_null(c, i)) return 0;
    if (variable(c->kind)) {
        const int32_t *o = (const int32_t *)c->offs.buf + c->offset;
        return (int64_t)(o[i + 1] - o[i]) + (c->kind == K_JSONB);
    }
    return DST_WIDTH[c->kind];
}

static char *put_be(char *p, uint64_t v, int width) {
    for (int b = width - 1; b >= 0; b--) *p++ = (char)(v >> (8 * b));
    return p;
}

static int64_t signed_at(const Col *c, int64_t i) {
    const char *d = (const char *)c->data.buf;
    int64_t at = c->offset + i;
    switch (SRC_WIDTH[c->kind]) {
        case 1: return ((const int8_t *)d)[at];
        case 2: return ((const int16_t *)d)[at];
        case 4: return ((const int32_t *)d)[at];
        default: return ((const int64_t *)d)[at];
    }
}

static char *put_field(char *p, const Col *c, int64_t i) {
    if (is_null(c, i)) return put_be(p, (uint32_t)-1, 4);
    int64_t at = c->offset + i;
    const char *d = (const char *)c->data.buf;
    switch (c->kind) {
        case K_BYTES:
        case K_JSONB: {
            const int32_t *o = (const int32_t *)c->offs.buf + c->offset;
            int32_t len = o[i + 1] - o[i];
            p = put_be(p, (uint32_t)(len + (c->kind == K_JSONB)), 4);
            if (c->kind == K_JSONB) *p++ = 1;
            memcpy(p, d + o[i], (size_t)len);
            return p + len;
        }
        case K_BOOL:
            p = put_be(p, 1, 4);
            *p++ = (char)bit(&c->data, at);
            return p;
        case K_F4: {
            uint32_t v;
            memcpy(&v, d + 4 * at, 4);
            return put_be(put_be(p, 4, 4), v, 4);
        }
        case K_F8: {
            uint64_t v;
            memcpy(&v, d + 8 * at, 8);
            return put_be(put_be(p, 8, 4), v, 8);
        }
        case K_TS:
            return put_be(put_be(p, 8, 4), (uint64_t)(((const int64_t *)d)[at] - PG_EPOCH_US), 8);
        case K_DATE:
            return put_be(put_be(p, 4, 4), (uint32_t)(((const int32_t *)d)[at] - PG_EPOCH_DAYS), 4);
        default: {
            int w = DST_WIDTH[c->kind];
            return put_be(put_be(p, (uint32_t)w, 4), (uint64_t)signed_at(c, i), w);
        }
    }
}

static PyObject *encode(PyObject *self, PyObject *args) {
    long long n;
    PyObject *cols;
    if (!PyArg_ParseTuple(args, "LO!", &n, &PyList_Type, &cols)) return NULL;
    Py_ssize_t k = PyList_Size(cols);
    if (n < 0 || k <= 0 || k > 1600) {
        PyErr_SetString(PyExc_ValueError, "a COPY needs 1 to 1600 columns and a row count >= 0");
        return NULL;
    }
    Col *c = PyMem_Calloc((size_t)k, sizeof(Col));
    if (!c) return PyErr_NoMemory();
    PyObject *out = NULL;
    Py_ssize_t opened = 0;
    for (; opened < k; opened++)
        if (col_open(&c[opened], PyList_GetItem(cols, opened), n)) goto done;
    /* the exact size first: the stream is built in place in the bytes object */
    int64_t size = 19 + 2 + n * (2 + 4 * (int64_t)k);
    for (Py_ssize_t j = 0; j < k; j++)
        for (int64_t i = 0; i < n; i++) size += field_size(&c[j], i);
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!out) goto done;
    char *p = PyBytes_AsString(out);
    memcpy(p, "PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0", 19); /* signature, flags, no extension */
    p += 19;
    for (int64_t i = 0; i < n; i++) {
        p = put_be(p, (uint16_t)k, 2);
        for (Py_ssize_t j = 0; j < k; j++) p = put_field(p, &c[j], i);
    }
    p = put_be(p, 0xffff, 2);
    if (p != PyBytes_AsString(out) + size) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_AssertionError, "the COPY stream's size was miscounted");
    }
done:
    for (Py_ssize_t j = 0; j < opened; j++) col_close(&c[j]);
    if (opened < k) col_close(&c[opened]);
    PyMem_Free(c);
    return out;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS, "A record batch's columns to one COPY (FORMAT binary) stream."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pgcopy", NULL, -1, methods};

PyMODINIT_FUNC PyInit__pgcopy(void) { return PyModule_Create(&module); }
