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
    int child[64];
    Buf valid, offs, data;
    int64_t n, nulls;
} Out;

#endif
