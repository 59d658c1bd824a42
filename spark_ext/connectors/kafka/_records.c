/* Kafka record batches (message format v2) to Arrow column buffers, a whole fetch response
 * in one call: no Python object per record.
 *
 * decode(buf, pos, end, committed, aborted, headers, decompress) walks the batches of one
 * partition's fetch response and gathers the records at offsets [pos, end) into column
 * buffers (offsets, timestamps, timestamp types, key / value / headers as Arrow binary and
 * list layouts), applying read_committed the way Kafka's consumer does: `aborted` lists the
 * response's aborted transactions (first offset, producer id), ascending; a transactional
 * batch of a producer with an open abort is dropped until that producer's ABORT marker,
 * and control batches are never returned. Each batch's CRC-32C is checked. A compressed
 * batch's records are handed to `decompress(codec, data)` (Python: one call per batch).
 *
 * Returns (pos, done, count, buffers...) where pos is where the next fetch starts and done
 * says a record at `end` was seen. Errors raise ValueError naming the batch's offset.
 *
 * The stable ABI (Python 3.11+): one build serves every Python the package supports.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable byte buffers ---- */

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

static int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }
static int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }

/* Arrow validity bitmap: bit i set when item i is valid. */
typedef struct {
    Buf bits;
    int64_t n, nulls;
} Valid;

static int valid_put(Valid *v, int ok) {
    if (v->n % 8 == 0) {
        char zero = 0;
        if (buf_put(&v->bits, &zero, 1)) return -1;
    }
    if (ok)
        v->bits.p[v->n / 8] |= (char)(1 << (v->n % 8));
    else
        v->nulls++;
    v->n++;
    return 0;
}

/* A nullable binary column: validity, int32 offsets (starting at 0), data. */
typedef struct {
    Valid valid;
    Buf offs, data;
} Bin;

static int bin_init(Bin *c) { return put_i32(&c->offs, 0); }

static int bin_put(Bin *c, const char *p, int64_t n) { /* n < 0: null */
    if (valid_put(&c->valid, n >= 0)) return -1;
    if (n > 0 && buf_put(&c->data, p, (size_t)n)) return -1;
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "more than 2 GiB of keys or values in one fetch");
        return -1;
    }
    return put_i32(&c->offs, (int32_t)c->data.len);
}

static void bin_free(Bin *c) {
    free(c->valid.bits.p);
    free(c->offs.p);
    free(c->data.p);
}

/* ---- CRC-32C (Castagnoli), slicing by 8 ---- */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

/* ---- big-endian fields and zig-zag varints ---- */

static int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return (int64_t)v;
}

static int32_t be32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static int16_t be16(const unsigned char *p) { return (int16_t)((uint16_t)p[0] << 8 | p[1]); }

/* A zig-zag varint of at most 10 bytes at *p (before lim); -1 past the end or malformed. */
static int varint(const unsigned char **p, const unsigned char *lim, int64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*p >= lim) return -1;
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return -1;
}

/* ---- the columns of one call ---- */

typedef struct {
    Buf offsets, stamps, kinds;
    Bin key, value;
    int want_headers;
    Valid hvalid;       /* a record without headers: null (as the row-by-row path gave) */
    Buf hoffs;          /* int32 list offsets */
    Bin hkey, hval;     /* the headers' keys (never null) and values */
    int64_t count;
} Cols;

static void cols_free(Cols *c) {
    free(c->offsets.p);
    free(c->stamps.p);
    free(c->kinds.p);
    bin_free(&c->key);
    bin_free(&c->value);
    free(c->hvalid.bits.p);
    free(c->hoffs.p);
    bin_free(&c->hkey);
    bin_free(&c->hval);
}

static int bad(int64_t base, const char *what) {
    PyErr_Format(PyExc_ValueError, "the record batch at offset %lld is malformed: %s", (long long)base, what);
    return -1;
}

/* Append the records of one batch (`recs`, decompressed) at offsets in [pos, end).
 * Returns 1 once a record at or past `end` is seen, 0 otherwise, -1 on error. */
static int take(Cols *c, const unsigned char *recs, const unsigned char *lim, int32_t count, int64_t base,
                int64_t base_ts, int64_t max_ts, int log_append, int64_t pos, int64_t end) {
    const unsigned char *p = recs;
    int32_t kind = log_append ? 1 : 0;
    for (int32_t i = 0; i < count; i++) {
        int64_t len, ts_delta, off_delta, klen, vlen, nh;
        if (varint(&p, lim, &len) || len < 0 || len > lim - p) return bad(base, "a record's length");
        const unsigned char *rlim = p + len;
        p += 1; /* attributes: unused in v2 */
        if (p > rlim || varint(&p, rlim, &ts_delta) || varint(&p, rlim, &off_delta))
            return bad(base, "a record's timestamp or offset delta");
        int64_t off = base + off_delta;
        if (off >= end) return 1;
        if (varint(&p, rlim, &klen) || klen > rlim - p) return bad(base, "a record's key");
        const unsigned char *k = p;
        if (klen > 0) p += klen;
        if (varint(&p, rlim, &vlen) || vlen > rlim - p) return bad(base, "a record's value");
        const unsigned char *v = p;
        if (vlen > 0) p += vlen;
        if (varint(&p, rlim, &nh) || nh < 0) return bad(base, "a record's header count");
        if (off < pos) { /* before the range: skipped whole */
            p = rlim;
            continue;
        }
        if (put_i64(&c->offsets, off) || put_i64(&c->stamps, log_append ? max_ts : base_ts + ts_delta) ||
            put_i32(&c->kinds, kind) || bin_put(&c->key, (const char *)k, klen < 0 ? -1 : klen) ||
            bin_put(&c->value, (const char *)v, vlen < 0 ? -1 : vlen))
            return -1;
        if (c->want_headers) {
            for (int64_t h = 0; h < nh; h++) {
                int64_t hk, hv;
                if (varint(&p, rlim, &hk) || hk < 0 || hk > rlim - p) return bad(base, "a header's key");
                const unsigned char *hkp = p;
                p += hk;
                if (varint(&p, rlim, &hv) || hv > rlim - p) return bad(base, "a header's value");
                if (bin_put(&c->hkey, (const char *)hkp, hk) ||
                    bin_put(&c->hval, (const char *)p, hv < 0 ? -1 : hv))
                    return -1;
                if (hv > 0) p += hv;
            }
            if (valid_put(&c->hvalid, nh > 0) || put_i32(&c->hoffs, (int32_t)c->hkey.valid.n)) return -1;
        }
        c->count++;
        p = rlim;
    }
    return 0;
}

static PyObject *bytes_of(Buf *b) { return PyBytes_FromStringAndSize(b->p ? b->p : "", (Py_ssize_t)b->len); }

static PyObject *bin_tuple(Bin *c) {
    return Py_BuildValue("(NLNN)", bytes_of(&c->valid.bits), (long long)c->valid.nulls, bytes_of(&c->offs),
                         bytes_of(&c->data));
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long pos, end;
    int committed, want_headers;
    PyObject *aborted, *decompress;
    if (!PyArg_ParseTuple(args, "y*LLpOpO", &view, &pos, &end, &committed, &aborted, &want_headers,
                          &decompress))
        return NULL;
    PyObject *result = NULL;
    Cols c;
    memset(&c, 0, sizeof c);
    c.want_headers = want_headers;
    int64_t *open = NULL; /* producer ids with an open abort */
    Py_ssize_t n_open = 0, next_abort = 0, n_aborted;
    if (bin_init(&c.key) || bin_init(&c.value) || bin_init(&c.hkey) || bin_init(&c.hval) || put_i32(&c.hoffs, 0))
        goto out;
    n_aborted = PyList_Size(aborted);
    if (n_aborted < 0) goto out;
    open = calloc((size_t)n_aborted + 1, sizeof *open);
    if (!open) {
        PyErr_NoMemory();
        goto out;
    }
    const unsigned char *buf = view.buf, *at = buf, *stop = buf + view.len;
    int done = 0;
    while (!done && stop - at >= 61) {
        int64_t base = be64(at);
        int32_t blen = be32(at + 8);
        if (blen < 49) {
            bad(base, "its length");
            goto out;
        }
        if (stop - at < 12 + (int64_t)blen) break; /* the response's last batch, cut short */
        const unsigned char *b = at, *blim = at + 12 + blen;
        at = blim;
        if (b[16] != 2) {
            PyErr_Format(PyExc_ValueError,
                         "the record batch at offset %lld is in message format v%d; spark-ext reads v2 "
                         "(Kafka 0.11 and later) only: upgrade the topic's message format "
                         "(log.message.format.version) or read it with Spark's kafka source",
                         (long long)base, (int)b[16]);
            goto out;
        }
        int16_t attrs = be16(b + 21);
        int64_t next = base + be32(b + 23) + 1;
        if (next <= pos) continue;
        int transactional = attrs & 0x10, control = attrs & 0x20;
        int64_t pid = be64(b + 43);
        int keep;
        if (committed && transactional) {
            while (next_abort < n_aborted) {
                PyObject *a = PyList_GetItem(aborted, next_abort);
                long long first = PyLong_AsLongLong(PyTuple_GetItem(a, 0));
                if (first > next - 1) break;
                open[n_open++] = PyLong_AsLongLong(PyTuple_GetItem(a, 1));
                next_abort++;
            }
            if (PyErr_Occurred()) goto out;
            int is_open = 0;
            for (Py_ssize_t i = 0; i < n_open; i++) is_open |= open[i] == pid;
            keep = !control && !is_open;
        } else {
            keep = !control;
        }
        if (!keep && !(control && committed && transactional)) {
            pos = next;
            continue;
        }
        if ((uint32_t)be32(b + 17) != crc32c(b + 21, (size_t)(blim - (b + 21)))) {
            PyErr_Format(PyExc_ValueError,
                         "the record batch at offset %lld fails its CRC-32C check: corrupt on the broker's "
                         "disk or in transit",
                         (long long)base);
            goto out;
        }
        const unsigned char *recs = b + 61, *rlim = blim;
        PyObject *plain = NULL;
        if (attrs & 0x07) {
            plain = PyObject_CallFunction(decompress, "iy#", attrs & 0x07, (const char *)recs,
                                          (Py_ssize_t)(blim - recs));
            if (!plain) goto out;
            char *pp;
            Py_ssize_t pn;
            if (PyBytes_AsStringAndSize(plain, &pp, &pn)) {
                Py_DECREF(plain);
                goto out;
            }
            recs = (const unsigned char *)pp;
            rlim = recs + pn;
        }
        int32_t count = be32(b + 57);
        int r = 0;
        if (control) { /* a transaction marker: key = (version int16, type int16), ABORT = 0 */
            const unsigned char *p = recs;
            int64_t len, d, klen;
            if (count > 0 && !varint(&p, rlim, &len) && len >= 0 && p + 1 <= rlim) {
                p += 1;
                if (!varint(&p, rlim, &d) && !varint(&p, rlim, &d) && !varint(&p, rlim, &klen) && klen >= 4 &&
                    klen <= rlim - p && be16(p + 2) == 0) {
                    Py_ssize_t w = 0;
                    for (Py_ssize_t i = 0; i < n_open; i++)
                        if (open[i] != pid) open[w++] = open[i];
                    n_open = w;
                }
            }
        } else {
            r = take(&c, recs, rlim, count, base, be64(b + 27), be64(b + 35), attrs & 0x08, pos, end);
        }
        Py_XDECREF(plain);
        if (r < 0) goto out;
        done = r;
        pos = done ? end : next;
    }
    result = Py_BuildValue("(LiLNNNNNNNNN)", pos, done, (long long)c.count, bytes_of(&c.offsets),
                           bytes_of(&c.stamps), bytes_of(&c.kinds), bin_tuple(&c.key), bin_tuple(&c.value),
                           Py_BuildValue("(NLN)", bytes_of(&c.hvalid.bits), (long long)c.hvalid.nulls,
                                         bytes_of(&c.hoffs)),
                           bin_tuple(&c.hkey), bin_tuple(&c.hval), PyLong_FromLongLong(c.hkey.valid.n));
out:
    free(open);
    cols_free(&c);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    uint32_t c = crc32c(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Record batches of one fetch response to column buffers."},
    {"crc32c", py_crc32c, METH_VARARGS, "CRC-32C (Castagnoli) of a buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) {
    crc_init();
    return PyModule_Create(&module);
}
