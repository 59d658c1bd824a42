/* Kafka record batches (message format v2) to Arrow column buffers and back, a whole fetch
 * response (or a task's rows for one partition) in one call: no Python object per record.
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

/* ---- CRC-32C (Castagnoli): the CPU's crc32 instruction where it has one, else slicing by 8 ---- */

static uint32_t crc_table[8][256];
static int crc_hw; /* the running CPU has SSE 4.2's crc32 (checked once, at import) */

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* The running CRC `c` (pre-inverted) over n more bytes, by table. */
static uint32_t crc_soft(uint32_t c, const unsigned char *p, size_t n) {
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
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same by the crc32 instruction (about ten times the table's speed); compiled for SSE 4.2
 * whatever the build's flags, called only where the CPU has it. */
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *p, size_t n) {
    for (; n && ((uintptr_t)p & 7); n--) c = __builtin_ia32_crc32qi(c, *p++);
    unsigned long long c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        unsigned long long v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

/* The running CRC `c` (pre-inverted) over n more bytes; `portable`: by table whatever the CPU. */
static uint32_t crc_update(uint32_t c, const unsigned char *p, size_t n, int portable) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (crc_hw && !portable) return crc_sse42(c, p, n);
#endif
    (void)portable;
    return crc_soft(c, p, n);
}

static uint32_t crc32c(const unsigned char *p, size_t n) { return crc_update(0xFFFFFFFFu, p, n, 0) ^ 0xFFFFFFFFu; }

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
        int64_t off = (int64_t)((uint64_t)base + (uint64_t)off_delta); /* wraps as Java does */
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
        int64_t ts = log_append ? max_ts : (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
        if (put_i64(&c->offsets, off) || put_i64(&c->stamps, ts) ||
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
        int64_t next = (int64_t)((uint64_t)base + (uint64_t)(int64_t)be32(b + 23) + 1u);
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


/* ---- encoding: Arrow columns to the records of v2 batches ---- */

/* One binary-like Arrow column: validity (NULL: none null), int32 offsets, data. */
typedef struct {
    Py_buffer valid, offs, data;
    int has_valid, has;
} Col;

static int col_open(Col *c, PyObject *parts) { /* parts: None or (valid|None, offsets, data) */
    memset(c, 0, sizeof *c);
    if (parts == Py_None) return 0;
    PyObject *v, *o, *d;
    if (!PyArg_ParseTuple(parts, "OOO", &v, &o, &d)) return -1;
    if (v != Py_None) {
        if (PyObject_GetBuffer(v, &c->valid, PyBUF_SIMPLE)) return -1;
        c->has_valid = 1;
    }
    if (PyObject_GetBuffer(o, &c->offs, PyBUF_SIMPLE)) goto fail;
    if (PyObject_GetBuffer(d, &c->data, PyBUF_SIMPLE)) {
        PyBuffer_Release(&c->offs);
        goto fail;
    }
    c->has = 1;
    return 0;
fail:
    if (c->has_valid) PyBuffer_Release(&c->valid);
    c->has_valid = 0;
    return -1;
}

/* The column's buffers hold `n` items of the binary layout (32-bit offsets); else ValueError:
 * a wrong layout (64-bit offsets, a short buffer) must fail, never be read as records. */
static int col_fits(const Col *c, int64_t n, const char *what) {
    if (!c->has) return 0;
    const int32_t *o = c->offs.buf;
    int ok = c->offs.len >= (Py_ssize_t)(4 * (n + 1)) && (!c->has_valid || c->valid.len >= (n + 7) / 8);
    if (ok) {
        ok = o[0] >= 0 && o[n] >= o[0] && (Py_ssize_t)o[n] <= c->data.len;
        for (int64_t i = 0; ok && i < n; i++) ok = o[i + 1] >= o[i];
    }
    if (!ok) PyErr_Format(PyExc_ValueError, "the %s column's buffers are not %lld items of 32-bit offsets", what,
                          (long long)n);
    return ok ? 0 : -1;
}

static void col_close(Col *c) {
    if (c->has_valid) PyBuffer_Release(&c->valid);
    if (c->has) {
        PyBuffer_Release(&c->offs);
        PyBuffer_Release(&c->data);
    }
}

/* Item i: its bytes and length, -1 for null (or no column). */
static int64_t col_item(const Col *c, int64_t i, const char **p) {
    if (!c->has) return -1;
    if (c->has_valid && !(((const unsigned char *)c->valid.buf)[i / 8] >> (i % 8) & 1)) return -1;
    const int32_t *o = c->offs.buf;
    *p = (const char *)c->data.buf + o[i];
    return (int64_t)o[i + 1] - o[i];
}

/* Kafka's default partitioner for a keyed record: Java's Utils.murmur2 of the key, made
 * positive, modulo the topic's partitions. */
static int32_t kafka_partition_of(const unsigned char *d, int64_t len, int32_t count) {
    const uint32_t m = 0x5BD1E995u;
    uint32_t h = 0x9747B28Cu ^ (uint32_t)len;
    int64_t whole = len / 4;
    for (int64_t i = 0; i < whole; i++) {
        const unsigned char *q = d + 4 * i;
        uint32_t k = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const unsigned char *t = d + 4 * whole;
    switch (len % 4) {
    case 3: h ^= (uint32_t)t[2] << 16; /* fall through */
    case 2: h ^= (uint32_t)t[1] << 8;  /* fall through */
    case 1: h ^= t[0]; h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return (int32_t)((h & 0x7FFFFFFFu) % (uint32_t)count);
}

/* partitions(n, key, count): for each of n keys (encode's buffers), the partition Kafka's
 * default partitioner picks among count, as little-endian int32; -1 for a null key. */
static PyObject *partitions(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *kp;
    int count;
    if (!PyArg_ParseTuple(args, "nOi", &n, &kp, &count)) return NULL;
    if (n < 0 || count <= 0) {
        PyErr_SetString(PyExc_ValueError, "partitions: n must be >= 0 and count > 0");
        return NULL;
    }
    Col key;
    if (col_open(&key, kp)) return NULL;
    PyObject *out = NULL;
    if (!key.has) {
        PyErr_SetString(PyExc_ValueError, "partitions: no key column");
        goto done;
    }
    if (col_fits(&key, n, "key")) goto done;
    out = PyBytes_FromStringAndSize(NULL, 4 * n);
    if (!out) goto done;
    unsigned char *o = (unsigned char *)PyBytes_AsString(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *d;
        int64_t len = col_item(&key, i, &d);
        int32_t p = len < 0 ? -1 : kafka_partition_of((const unsigned char *)d, len, count);
        uint32_t u = (uint32_t)p;
        o[4 * i] = u & 0xFF;
        o[4 * i + 1] = (u >> 8) & 0xFF;
        o[4 * i + 2] = (u >> 16) & 0xFF;
        o[4 * i + 3] = u >> 24;
    }
done:
    col_close(&key);
    return out;
}

static int put_varint(Buf *b, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    unsigned char tmp[10];
    int n = 0;
    do {
        tmp[n] = z & 0x7F;
        z >>= 7;
        if (z) tmp[n] |= 0x80;
        n++;
    } while (z);
    return buf_put(b, tmp, (size_t)n);
}

static int varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >>= 7) n++;
    return n;
}

static int put_bytes(Buf *b, const char *p, int64_t n) { /* n < 0: null */
    if (put_varint(b, n < 0 ? -1 : n)) return -1;
    return n > 0 ? buf_put(b, p, (size_t)n) : 0;
}

static PyObject *chunk(Buf *b, int64_t count) {
    return Py_BuildValue("(NL)", bytes_of(b), (long long)count);
}

/* encode(n, key, value, headers, ts_delta, count, size, limit): the records of rows 0..n-1
 * (key and value: None or (valid, offsets, data); headers: None or (list valid, list offsets,
 * header keys, header values)), every record with timestamp delta `ts_delta`. The first
 * chunk continues an open batch holding `count` records in `size` bytes (header included);
 * a record goes to a new chunk when its batch would pass `limit` bytes and holds a record
 * already; a new chunk's records have timestamp delta 0 (the batch's base timestamp is
 * theirs). Returns [(records, count), ...], the records and count this call added to each
 * batch: every chunk but the last is a full batch's. */
static PyObject *encode(PyObject *self, PyObject *args) {
    long long n, ts_delta, count, size, limit;
    PyObject *kp, *vp, *hp;
    if (!PyArg_ParseTuple(args, "LOOOLLLL", &n, &kp, &vp, &hp, &ts_delta, &count, &size, &limit)) return NULL;
    PyObject *out = NULL, *list = NULL;
    Col key, val, hk, hv;
    Py_buffer hvalid, hoffs;
    int has_hvalid = 0, has_h = 0;
    memset(&hk, 0, sizeof hk);
    memset(&hv, 0, sizeof hv);
    Buf cur = {0}, rec = {0};
    if (col_open(&key, kp)) return NULL;
    if (col_open(&val, vp)) {
        col_close(&key);
        return NULL;
    }
    if (col_fits(&key, n, "key") || col_fits(&val, n, "value")) goto done;
    if (hp != Py_None) {
        PyObject *lv, *lo, *hkp, *hvp;
        if (!PyArg_ParseTuple(hp, "OOOO", &lv, &lo, &hkp, &hvp)) goto done;
        if (lv != Py_None) {
            if (PyObject_GetBuffer(lv, &hvalid, PyBUF_SIMPLE)) goto done;
            has_hvalid = 1;
        }
        if (PyObject_GetBuffer(lo, &hoffs, PyBUF_SIMPLE)) goto done;
        has_h = 1;
        if (col_open(&hk, hkp) || col_open(&hv, hvp)) goto done;
        const int32_t *ho = hoffs.buf;
        int ok = hoffs.len >= (Py_ssize_t)(4 * (n + 1)) && (!has_hvalid || hvalid.len >= (n + 7) / 8) &&
                 ho[0] >= 0;
        for (int64_t i = 0; ok && i < n; i++) ok = ho[i + 1] >= ho[i];
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "the headers column's buffers are not a list of 32-bit offsets");
            goto done;
        }
        if (col_fits(&hk, ho[n], "header key") || col_fits(&hv, ho[n], "header value")) goto done;
    }
    list = PyList_New(0);
    if (!list) goto done;
    long long before = count; /* the open batch's records: not this call's */
    for (int64_t i = 0; i < n; i++) {
        const char *k = NULL, *v = NULL;
        int64_t kl = col_item(&key, i, &k), vl = col_item(&val, i, &v);
        int64_t h0 = 0, h1 = 0;
        if (has_h && !(has_hvalid && !(((const unsigned char *)hvalid.buf)[i / 8] >> (i % 8) & 1))) {
            h0 = ((const int32_t *)hoffs.buf)[i];
            h1 = ((const int32_t *)hoffs.buf)[i + 1];
        }
        rec.len = 0;
        if (buf_put(&rec, "", 1) || put_varint(&rec, ts_delta) || put_varint(&rec, count) ||
            put_bytes(&rec, k, kl) || put_bytes(&rec, v, vl) || put_varint(&rec, h1 - h0))
            goto done;
        for (int64_t h = h0; h < h1; h++) {
            const char *hkey = NULL, *hval = NULL;
            int64_t hkl = col_item(&hk, h, &hkey), hvl = col_item(&hv, h, &hval);
            if (hkl < 0) {
                PyErr_SetString(PyExc_ValueError, "a header with a null key: Kafka's headers need a key");
                goto done;
            }
            if (put_bytes(&rec, hkey, hkl) || put_bytes(&rec, hval, hvl)) goto done;
        }
        int64_t whole = varint_size((int64_t)rec.len) + (int64_t)rec.len;
        if (count > 0 && size + whole > limit) { /* the open batch is full: close it */
            PyObject *c = chunk(&cur, count - before);
            if (!c || PyList_Append(list, c)) {
                Py_XDECREF(c);
                goto done;
            }
            Py_DECREF(c);
            cur.len = 0;
            count = before = 0;
            size = 61;
            ts_delta = 0; /* the new batch's base timestamp is this one */
            i--;          /* the record again, at offset delta 0 */
            continue;
        }
        if (put_varint(&cur, (int64_t)rec.len) || buf_put(&cur, rec.p, rec.len)) goto done;
        size += whole;
        count++;
    }
    {
        PyObject *c = chunk(&cur, count - before);
        if (!c || PyList_Append(list, c)) {
            Py_XDECREF(c);
            goto done;
        }
        Py_DECREF(c);
    }
    out = list;
    list = NULL;
done:
    Py_XDECREF(list);
    col_close(&key);
    col_close(&val);
    col_close(&hk);
    col_close(&hv);
    if (has_hvalid) PyBuffer_Release(&hvalid);
    if (has_h) PyBuffer_Release(&hoffs);
    free(cur.p);
    free(rec.p);
    return out;
}

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer view;
    int portable = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &view, &portable)) return NULL;
    uint32_t c = crc_update(0xFFFFFFFFu, view.buf, (size_t)view.len, portable) ^ 0xFFFFFFFFu;
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

#define BATCH_HEADER 61 /* a v2 batch's header: its records start here */

static void put_be(unsigned char *p, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--, v >>= 8) p[i] = (unsigned char)(v & 0xFF);
}

/* frame(records, attributes, count, base_ts, max_ts, producer_id, epoch, base_sequence): a v2 record
 * batch of `count` records (encode's, compressed or not as `attributes` say), base offset 0 (the
 * broker assigns offsets), built in one buffer: the header written in place, the records copied once,
 * the CRC-32C computed over it there. */
static PyObject *frame(PyObject *self, PyObject *args) {
    Py_buffer rec;
    int attrs, count, epoch, seq;
    long long base_ts, max_ts, pid;
    if (!PyArg_ParseTuple(args, "y*iiLLLii", &rec, &attrs, &count, &base_ts, &max_ts, &pid, &epoch, &seq))
        return NULL;
    PyObject *out = NULL;
    if (rec.len > INT32_MAX - BATCH_HEADER) {
        PyErr_SetString(PyExc_ValueError, "a record batch cannot hold 2 GiB");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, BATCH_HEADER + rec.len);
    if (!out) goto done;
    unsigned char *b = (unsigned char *)PyBytes_AsString(out);
    put_be(b, 0, 8);                                           /* base offset */
    put_be(b + 8, (uint64_t)(BATCH_HEADER - 12 + rec.len), 4);       /* batch length */
    put_be(b + 12, (uint64_t)(uint32_t)-1, 4);                 /* partition leader epoch */
    b[16] = 2;                                                 /* magic */
    put_be(b + 21, (uint64_t)(uint16_t)attrs, 2);
    put_be(b + 23, (uint64_t)(uint32_t)(count - 1), 4);        /* last offset delta */
    put_be(b + 27, (uint64_t)base_ts, 8);
    put_be(b + 35, (uint64_t)max_ts, 8);
    put_be(b + 43, (uint64_t)pid, 8);
    put_be(b + 51, (uint64_t)(uint16_t)epoch, 2);
    put_be(b + 53, (uint64_t)(uint32_t)seq, 4);
    put_be(b + 57, (uint64_t)(uint32_t)count, 4);
    if (rec.len) memcpy(b + BATCH_HEADER, rec.buf, (size_t)rec.len);
    put_be(b + 17, crc32c(b + 21, (size_t)(BATCH_HEADER - 21 + rec.len)), 4);
done:
    PyBuffer_Release(&rec);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "Record batches of one fetch response to column buffers."},
    {"encode", encode, METH_VARARGS, "Rows' key, value and headers to the records of v2 batches."},
    {"crc32c", py_crc32c, METH_VARARGS, "CRC-32C (Castagnoli) of a buffer (portable=True: by table)."},
    {"partitions", partitions, METH_VARARGS, "Kafka's default partition of each key (murmur2), -1 for null."},
    {"frame", frame, METH_VARARGS, "A v2 record batch around encoded records, its CRC-32C computed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) {
    crc_init();
    return PyModule_Create(&module);
}
