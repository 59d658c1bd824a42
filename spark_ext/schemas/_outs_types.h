/* Column outputs shared by the C decoders (_avro.c, _proto.c): growable buffers, each
 * holding one Arrow column, in the layout spark_ext/schemas/outputs.py builds arrays from.
 * The functions over them are in _outs.h.
 */
#ifndef SPARK_EXT_OUTS_H
#define SPARK_EXT_OUTS_H

enum { O_NULL, O_BOOL, O_FIXED, O_BIN, O_STRUCT, O_LIST, O_MAP };

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

typedef struct {
    int kind, width, nchild;
    int *child; /* nchild output indexes, each after this one's */
    Buf valid, offs, data;
    int64_t n, nulls;
} Out;

/* A node's or output's children: a tuple of indexes, each after `self` and before `count`
 * (children come after their parent: no cycles). A malloc'd array (NULL with a Python error
 * set if bad; a valid empty result is non-NULL). */
static int *children_of(PyObject *children, int self, int count, int *nchild) {
    Py_ssize_t nc = PyTuple_Size(children);
    if (nc < 0) return NULL;
    if (nc > count) {
        PyErr_SetString(PyExc_ValueError, "more children than nodes");
        return NULL;
    }
    int *out = malloc(sizeof(int) * (size_t)(nc ? nc : 1));
    if (!out) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t j = 0; j < nc; j++) {
        long ch = PyLong_AsLong(PyTuple_GetItem(children, j));
        if (ch <= self || ch >= count) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a child is out of order");
            free(out);
            return NULL;
        }
        out[j] = (int)ch;
    }
    *nchild = (int)nc;
    return out;
}

#endif
