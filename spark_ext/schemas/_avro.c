/* Avro binary datums to Arrow column buffers, a whole column of Kafka values in one call: no
 * Python object per record or per field.
 *
 * Python (spark_ext/schemas/avro.py) resolves each writer schema against the reader schema
 * and compiles the resolution into a flat int32 program; this file only runs programs.
 * Every program writes into the same outputs, which the reader schema shapes, so rows
 * written with different schema versions land in one column in row order.
 *
 * decode(code, entries, outs, strings, consts, values, progs, skip) where
 *   code     bytes, int32 ops (the OP_ list below),
 *   entries  list of the code offset each program starts at,
 *   outs     list of (kind, width, children) per output; output 0 is the column,
 *   strings  list of bytes: enum symbols and error messages,
 *   consts   list of bytes or None: default values in their Arrow layout,
 *   values   (valid | None, int32 offsets, data) of the binary column,
 *   progs    bytes, int32 per row: its program, or -1 for a null row,
 *   skip     bytes to skip at the start of every value (the wire format's header).
 * Returns (None, buffers) with buffers[i] = (length, nulls, validity, offsets|None,
 * data|None) per output, or (row, message) for the first row that does not decode.
 *
 * The stable ABI (Python 3.11+): one build serves every Python the package supports.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "_outs_types.h"

enum {
    OP_NULL,    /* out */
    OP_BOOL,    /* out */
    OP_INT,     /* out conv mult */
    OP_LONG,    /* out conv mult (mult: 1000 for milliseconds into a microsecond column) */
    OP_FLOAT,   /* out conv */
    OP_DOUBLE,  /* out */
    OP_BYTES,   /* out conv precision (a decimal's; else 0) */
    OP_FIXED,   /* out conv size precision */
    OP_ENUM,    /* out nsym msg sym... (a symbol's string index, -1: not in the reader) */
    OP_RECORD,  /* out nfields field_pc... ndefaults (child const)... */
    OP_ARRAY,   /* out item_pc empty_items (1: an item may take no bytes, as an empty record) */
    OP_MAP,     /* out key_out value_pc */
    OP_UNION,   /* nbranches branch_pc... */
    OP_MEMBER,  /* out index inner_pc: union member `index` of a struct-shaped union */
    OP_FAIL,    /* msg */
};

/* conversions of a read number to its output */
enum { C_I32, C_I64, C_F32, C_F64, C_BIN, C_DEC };

typedef struct {
    const int32_t *code;
    Py_ssize_t ncode;
    Out *outs;
    int nouts;
    PyObject *strings, *consts;
    const char *msg; /* a failed row's reason; NULL: a Python error is set */
    int depth;
} Ctx;

#include "_outs.h"
#include "_enc.h"

/* ---- reading ---- */

typedef struct {
    const unsigned char *p, *end;
} Rd;

static int rd_long(Ctx *c, Rd *r, int64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) {
            c->msg = "the datum ends inside a number";
            return -1;
        }
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    c->msg = "a number longer than 10 bytes";
    return -1;
}

static int rd_take(Ctx *c, Rd *r, int64_t n, const unsigned char **p) {
    if (n < 0 || n > r->end - r->p) {
        c->msg = n < 0 ? "a negative length" : "the datum ends inside a string, bytes or fixed";
        return -1;
    }
    *p = r->p;
    r->p += n;
    return 0;
}

static int put_num(Ctx *c, Out *o, int conv, int64_t v, double d, int is_float) {
    if (!o) return 0;
    switch (conv) {
    case C_I32: {
        int32_t w = (int32_t)v;
        return put_value(o, &w, 4);
    }
    case C_I64:
        return put_value(o, &v, 8);
    case C_F32: {
        float f = is_float ? (float)d : (float)v;
        return put_value(o, &f, 4);
    }
    case C_F64: {
        double f = is_float ? d : (double)v;
        return put_value(o, &f, 8);
    }
    }
    c->msg = "a bad conversion in the program";
    return -1;
}

/* Big-endian two's complement (Avro's decimal) to Arrow's little-endian 128-bit integer;
 * an unscaled value of more than `precision` digits fails the row (Arrow's and Spark's
 * decimal of that precision cannot hold it). */
static int put_decimal(Ctx *c, Out *o, const unsigned char *p, int64_t n, int32_t precision) {
    unsigned char le[16];
    if (n > 16) {
        /* Longer encodings are legal when the extra leading bytes are sign only. */
        for (int64_t k = 0; k < n - 16; k++)
            if (p[k] != ((p[n - 16] & 0x80) ? 0xFF : 0x00)) {
                c->msg = "a decimal wider than 128 bits";
                return -1;
            }
        p += n - 16;
        n = 16;
    }
    unsigned char fill = (n > 0 && (p[0] & 0x80)) ? 0xFF : 0x00;
    for (int k = 0; k < 16; k++) le[k] = k < n ? p[n - 1 - k] : fill;
    if (precision > 0 && precision <= 38) {
        __int128 v;
        memcpy(&v, le, 16);
        __int128 limit = 1;
        for (int d = 0; d < precision; d++) limit *= 10;
        if (v >= limit || v <= -limit) {
            c->msg = "a decimal with more digits than its precision";
            return -1;
        }
    }
    return put_value(o, le, 16);
}

static int run(Ctx *c, Rd *r, Py_ssize_t pc);

static int pc_ok(Ctx *c, Py_ssize_t pc, Py_ssize_t need) {
    if (pc < 0 || need < 0 || need > c->ncode || pc > c->ncode - need) {
        PyErr_SetString(PyExc_ValueError, "the Avro program is cut short");
        c->msg = NULL;
        return 0;
    }
    return 1;
}

static Out *out_at(Ctx *c, int32_t i) {
    return i >= 0 && i < c->nouts ? &c->outs[i] : NULL;
}

static int run(Ctx *c, Rd *r, Py_ssize_t pc) {
    if (!pc_ok(c, pc, 1)) return -1;
    if (++c->depth > 256) {
        c->msg = "nested deeper than 256 levels";
        return -1;
    }
    const int32_t *k = c->code + pc;
    int rc = 0;
    int64_t v;
    const unsigned char *p;
    switch (k[0]) {
    case OP_NULL:
        if (!pc_ok(c, pc, 2)) return -1;
        rc = put_null(c, k[1]);
        break;
    case OP_BOOL: {
        if (!pc_ok(c, pc, 2)) return -1;
        if (r->p >= r->end) {
            c->msg = "the datum ends inside a boolean";
            rc = -1;
            break;
        }
        char b = *r->p++ ? 1 : 0;
        Out *o = out_at(c, k[1]);
        rc = o ? put_value(o, &b, 1) : 0;
        break;
    }
    case OP_INT:
    case OP_LONG:
        if (!pc_ok(c, pc, 4)) return -1;
        if (rd_long(c, r, &v)) {
            rc = -1;
            break;
        }
        if (k[0] == OP_INT && (v < INT32_MIN || v > INT32_MAX)) {
            c->msg = "an int out of its 32-bit range";
            rc = -1;
            break;
        }
        if (k[3] != 1 && __builtin_mul_overflow(v, (int64_t)k[3], &v)) {
            c->msg = "a timestamp in milliseconds beyond what microseconds hold";
            rc = -1;
            break;
        }
        rc = put_num(c, out_at(c, k[1]), k[2], v, 0, 0);
        break;
    case OP_FLOAT: {
        if (!pc_ok(c, pc, 3)) return -1;
        float f;
        if (rd_take(c, r, 4, &p)) {
            rc = -1;
            break;
        }
        memcpy(&f, p, 4);
        rc = put_num(c, out_at(c, k[1]), k[2], 0, (double)f, 1);
        break;
    }
    case OP_DOUBLE: {
        if (!pc_ok(c, pc, 2)) return -1;
        double d;
        if (rd_take(c, r, 8, &p)) {
            rc = -1;
            break;
        }
        memcpy(&d, p, 8);
        rc = put_num(c, out_at(c, k[1]), C_F64, 0, d, 1);
        break;
    }
    case OP_BYTES:
    case OP_FIXED: {
        if (!pc_ok(c, pc, k[0] == OP_FIXED ? 5 : 4)) return -1;
        if (k[0] == OP_FIXED)
            v = k[3];
        else if (rd_long(c, r, &v)) {
            rc = -1;
            break;
        }
        if (rd_take(c, r, v, &p)) {
            rc = -1;
            break;
        }
        Out *o = out_at(c, k[1]);
        if (o) rc = k[2] == C_DEC ? put_decimal(c, o, p, v, k[0] == OP_FIXED ? k[4] : k[3])
                                  : put_bin(c, o, (const char *)p, v);
        break;
    }
    case OP_ENUM: {
        if (!pc_ok(c, pc, 4) || !pc_ok(c, pc, 4 + (Py_ssize_t)k[2])) return -1;
        if (rd_long(c, r, &v)) {
            rc = -1;
            break;
        }
        if (v < 0 || v >= k[2]) {
            c->msg = "an enum index out of the writer's symbols";
            rc = -1;
            break;
        }
        int32_t s = k[4 + v];
        if (s < 0) {
            PyObject *m = PyList_GetItem(c->strings, k[3]); /* borrowed */
            c->msg = m ? PyBytes_AsString(m) : "an enum symbol the reader schema lacks";
            rc = -1;
            break;
        }
        Out *o = out_at(c, k[1]);
        if (o) {
            PyObject *sym = PyList_GetItem(c->strings, s);
            if (!sym) {
                c->msg = NULL;
                rc = -1;
                break;
            }
            rc = put_bin(c, o, PyBytes_AsString(sym), (int64_t)PyBytes_Size(sym));
        }
        break;
    }
    case OP_RECORD: {
        if (!pc_ok(c, pc, 3) || !pc_ok(c, pc, 3 + (Py_ssize_t)k[2])) return -1;
        int32_t nf = k[2];
        for (int32_t f = 0; f < nf && !rc; f++) rc = run(c, r, k[3 + f]);
        if (rc) break;
        const int32_t *d = k + 3 + nf;
        if (!pc_ok(c, pc, 4 + (Py_ssize_t)nf) || !pc_ok(c, pc, 4 + (Py_ssize_t)nf + 2 * (Py_ssize_t)d[0]))
            return -1;
        for (int32_t j = 0; j < d[0] && !rc; j++) {
            Out *o = out_at(c, d[1 + 2 * j]);
            PyObject *val = PyList_GetItem(c->consts, d[2 + 2 * j]);
            if (!val) {
                c->msg = NULL;
                rc = -1;
            } else if (!o) {
            } else if (val == Py_None) {
                rc = put_null(c, d[1 + 2 * j]);
            } else if (o->kind == O_BIN) {
                rc = put_bin(c, o, PyBytes_AsString(val), (int64_t)PyBytes_Size(val));
            } else if (o->kind == O_LIST || o->kind == O_MAP) {
                rc = valid_put(o, 1) || put_off(c, o); /* an empty array or map */
            } else {
                rc = put_value(o, PyBytes_AsString(val), (size_t)PyBytes_Size(val));
            }
        }
        Out *o = out_at(c, k[1]);
        if (!rc && o) rc = valid_put(o, 1);
        break;
    }
    case OP_ARRAY:
    case OP_MAP: {
        int map = k[0] == OP_MAP;
        if (!pc_ok(c, pc, 4)) return -1;
        for (;;) {
            int64_t n;
            if (rd_long(c, r, &n)) {
                rc = -1;
                break;
            }
            if (n == 0) break;
            if (n < 0) { /* a block with its size in bytes next */
                int64_t size;
                if (n == INT64_MIN || rd_long(c, r, &size)) {
                    c->msg = c->msg ? c->msg : "a bad block count";
                    rc = -1;
                    break;
                }
                n = -n;
            }
            if (n > (1 << 28)) {
                c->msg = "a block of more than 2^28 items";
                rc = -1;
                break;
            }
            if (n > r->end - r->p && (map || !k[3])) { /* items of a byte at least, unless flagged */
                c->msg = "a block count larger than the datum";
                rc = -1;
                break;
            }
            for (int64_t j = 0; j < n && !rc; j++) {
                if (map) {
                    int64_t len;
                    if (rd_long(c, r, &len) || rd_take(c, r, len, &p)) {
                        rc = -1;
                        break;
                    }
                    Out *ko = out_at(c, k[2]);
                    if (ko) rc = put_bin(c, ko, (const char *)p, len);
                    if (!rc) rc = run(c, r, k[3]);
                } else {
                    rc = run(c, r, k[2]);
                }
            }
            if (rc) break;
        }
        Out *o = out_at(c, k[1]);
        if (!rc && o) rc = valid_put(o, 1) || put_off(c, o);
        break;
    }
    case OP_UNION: {
        if (!pc_ok(c, pc, 2) || !pc_ok(c, pc, 2 + (Py_ssize_t)k[1])) return -1;
        if (rd_long(c, r, &v)) {
            rc = -1;
            break;
        }
        if (v < 0 || v >= k[1]) {
            c->msg = "a union branch out of the writer's branches";
            rc = -1;
            break;
        }
        rc = run(c, r, k[2 + v]);
        break;
    }
    case OP_MEMBER: {
        if (!pc_ok(c, pc, 4)) return -1;
        Out *o = out_at(c, k[1]);
        if (!o || o->kind != O_STRUCT || k[2] < 0 || k[2] >= o->nchild) {
            PyErr_SetString(PyExc_ValueError, "the Avro program names a bad union member");
            c->msg = NULL;
            return -1;
        }
        rc = run(c, r, k[3]);
        for (int j = 0; j < o->nchild && !rc; j++)
            if (j != k[2]) rc = put_null(c, o->child[j]);
        if (!rc) rc = valid_put(o, 1);
        break;
    }
    case OP_FAIL: {
        if (!pc_ok(c, pc, 2)) return -1;
        PyObject *m = PyList_GetItem(c->strings, k[1]);
        c->msg = m ? PyBytes_AsString(m) : NULL;
        rc = -1;
        break;
    }
    default:
        PyErr_SetString(PyExc_ValueError, "the Avro program holds an unknown op");
        c->msg = NULL;
        rc = -1;
    }
    c->depth--;
    return rc;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *code_o, *entries, *outs_o, *strings, *consts, *values, *progs_o;
    Py_ssize_t skip;
    if (!PyArg_ParseTuple(args, "OO!O!O!O!OOn", &code_o, &PyList_Type, &entries, &PyList_Type, &outs_o,
                          &PyList_Type, &strings, &PyList_Type, &consts, &values, &progs_o, &skip))
        return NULL;
    Py_buffer code = {0}, progs = {0}, vvalid = {0}, voffs = {0}, vdata = {0};
    int has_valid = 0;
    PyObject *vv, *vo, *vd, *result = NULL;
    Out *outs = NULL;
    int nouts = (int)PyList_Size(outs_o);
    if (!PyArg_ParseTuple(values, "OOO", &vv, &vo, &vd)) return NULL;
    if (PyObject_GetBuffer(code_o, &code, PyBUF_SIMPLE)) return NULL;
    if (PyObject_GetBuffer(progs_o, &progs, PyBUF_SIMPLE)) goto done;
    if (vv != Py_None) {
        if (PyObject_GetBuffer(vv, &vvalid, PyBUF_SIMPLE)) goto done;
        has_valid = 1;
    }
    if (PyObject_GetBuffer(vo, &voffs, PyBUF_SIMPLE)) goto done;
    if (PyObject_GetBuffer(vd, &vdata, PyBUF_SIMPLE)) goto done;
    int64_t rows = progs.len / 4;
    const int32_t *o32 = voffs.buf;
    const int32_t *pg = progs.buf;
    int ok = voffs.len >= (Py_ssize_t)(4 * (rows + 1)) && (!has_valid || vvalid.len >= (rows + 7) / 8) &&
             nouts > 0 && skip >= 0;
    for (int64_t i = 0; ok && i < rows; i++) ok = o32[i] >= 0 && o32[i + 1] >= o32[i] && o32[i + 1] <= vdata.len;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "the values' buffers do not hold the rows, or no outputs");
        goto done;
    }
    outs = outs_parse(outs_o, nouts);
    if (!outs) goto done;
    Ctx c = {code.buf, code.len / 4, outs, nouts, strings, consts, NULL, 0};
    Py_ssize_t nentries = PyList_Size(entries);
    for (int64_t i = 0; i < rows; i++) {
        int null = pg[i] < 0 || (has_valid && !(((const unsigned char *)vvalid.buf)[i / 8] >> (i % 8) & 1));
        if (null) {
            if (put_null(&c, 0)) goto failed;
            continue;
        }
        if (pg[i] >= nentries) {
            PyErr_SetString(PyExc_ValueError, "a row names a program that is not there");
            goto done;
        }
        Py_ssize_t entry = PyLong_AsSsize_t(PyList_GetItem(entries, pg[i]));
        if (entry < 0 && PyErr_Occurred()) goto done;
        Rd r = {(const unsigned char *)vdata.buf + o32[i], (const unsigned char *)vdata.buf + o32[i + 1]};
        if (r.end - r.p < skip) {
            c.msg = "the value is shorter than the wire format's header";
            goto failed_row;
        }
        r.p += skip;
        c.depth = 0;
        if (run(&c, &r, entry)) goto failed_row;
        continue;
    failed_row:
        if (!c.msg) goto done; /* a Python error, already set */
        result = Py_BuildValue("(Ls)", (long long)i, c.msg);
        goto done;
    failed:
        if (!c.msg) goto done;
        result = Py_BuildValue("(Ls)", (long long)i, c.msg);
        goto done;
    }
    {
        PyObject *bufs = outs_result(outs, nouts);
        if (!bufs) goto done;
        result = Py_BuildValue("(ON)", Py_None, bufs);
    }
done:
    if (outs) outs_free(outs, nouts);
    if (code.obj) PyBuffer_Release(&code);
    if (progs.obj) PyBuffer_Release(&progs);
    if (has_valid) PyBuffer_Release(&vvalid);
    if (voffs.obj) PyBuffer_Release(&voffs);
    if (vdata.obj) PyBuffer_Release(&vdata);
    return result;
}


/* ---- encoding: Arrow columns to Avro datums ----
 *
 * encode(nodes, n, header) where nodes[i] = (kind, param, nullb, valb, name, valid|None, offset,
 * offsets|None, data|None, children, symbols|None) describes one Arrow array of the input
 * tree (node 0: the column, `n` rows). `offset` is the array's own offset; a struct's
 * children are indexed as their parent, a list's and a map's by its offsets. `nullb` is the
 * union branch written for a null (-1: null is refused), `valb` the one written before a
 * value (-1: the type is no union). Returns (None, offsets, data) of a binary column whose
 * every value starts with `header`, or (row, message) for the first row the schema refuses.
 */
enum { E_NULL, E_BOOL, E_INT, E_LONG, E_FLOAT, E_DOUBLE, E_BYTES, E_FIXED, E_ENUM, E_DEC_BYTES, E_DEC_FIXED,
       E_RECORD, E_ARRAY, E_MAP, E_MEMBERS };

typedef struct {
    int kind, nullb, valb, nchild;
    long long param;
    int64_t offset;
    const unsigned char *valid;
    const int32_t *offs;
    const char *data;
    int *child;
    const char *name;
    PyObject *symbols; /* borrowed: a list of bytes */
} Node;

typedef struct {
    Node *nodes;
    int n;
    Buf out;
    char msg[512];
    int py_error;
} Enc;

static int put_long(Buf *b, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    unsigned char tmp[10];
    int k = 0;
    do {
        tmp[k] = z & 0x7F;
        z >>= 7;
        if (z) tmp[k] |= 0x80;
        k++;
    } while (z);
    return buf_put(b, tmp, (size_t)k);
}

static int refuse(Enc *e, const Node *nd, const char *what) {
    snprintf(e->msg, sizeof e->msg, "%s %s", nd->name, what);
    return -1;
}

static int oom(Enc *e) {
    e->py_error = 1;
    return -1;
}

static int is_valid(const Node *nd, int64_t i) {
    int64_t p = i + nd->offset;
    return !nd->valid || (nd->valid[p / 8] >> (p % 8) & 1);
}

/* Big-endian two's complement of a little-endian 128-bit integer into `b`: `width` bytes
 * (a fixed type's size, which may pass 16: sign bytes first), or the fewest that hold it
 * (width 0, a bytes decimal, written after its length). -1: it does not fit `width`. */
static int dec_put(Buf *b, const unsigned char *le, int64_t width) {
    unsigned char be[16];
    unsigned char sign = (le[15] & 0x80) ? 0xFF : 0x00;
    int n = 16;
    if (!width) {
        while (n > 1 && le[n - 1] == sign && ((le[n - 2] & 0x80) == (sign & 0x80))) n--;
        if (put_long(b, n)) return -2;
    } else if (width < 16) {
        for (int k = 15; k >= width; k--)
            if (le[k] != sign) return -1;
        if ((le[width - 1] & 0x80) != (sign & 0x80)) return -1;
        n = (int)width;
    }
    for (int64_t k = 16; k < width; k++)
        if (buf_put(b, &sign, 1)) return -2;
    for (int k = 0; k < n; k++) be[k] = le[n - 1 - k];
    return buf_put(b, be, (size_t)n) ? -2 : 0;
}

/* Row `i` of node `at`; `branch`: write the node's union branch before a value (a member of
 * a struct-shaped union has had its branch written by the parent). */
static int enc(Enc *e, int at, int64_t i, int branch) {
    const Node *nd = &e->nodes[at];
    Buf *b = &e->out;
    if (!is_valid(nd, i)) {
        if (nd->nullb < 0) return refuse(e, nd, "is null, and the schema does not take a null there");
        return put_long(b, nd->nullb) ? oom(e) : 0;
    }
    if (nd->kind == E_MEMBERS) { /* a struct of union members: the first one set */
        for (int k = 0; k < nd->nchild; k++) {
            const Node *m = &e->nodes[nd->child[k]];
            if (is_valid(m, i)) {
                if (put_long(b, m->valb)) return oom(e);
                return enc(e, nd->child[k], i, 0);
            }
        }
        if (nd->nullb < 0) return refuse(e, nd, "has no member set, and the schema does not take a null there");
        return put_long(b, nd->nullb) ? oom(e) : 0;
    }
    if (branch && nd->valb >= 0 && put_long(b, nd->valb)) return oom(e);
    int64_t p = i + nd->offset;
    switch (nd->kind) {
    case E_NULL:
        return 0;
    case E_BOOL: {
        char v = (nd->data[p / 8] >> (p % 8)) & 1;
        return buf_put(b, &v, 1) ? oom(e) : 0;
    }
    case E_INT: {
        int32_t v;
        memcpy(&v, nd->data + 4 * p, 4);
        return put_long(b, v) ? oom(e) : 0;
    }
    case E_LONG: {
        int64_t v;
        memcpy(&v, nd->data + 8 * p, 8);
        if (nd->param > 1) { /* micros to millis, rounding down as Spark's to_avro does */
            v = v >= 0 ? v / nd->param : -((-(v + 1)) / nd->param) - 1;
        }
        return put_long(b, v) ? oom(e) : 0;
    }
    case E_FLOAT:
        return buf_put(b, nd->data + 4 * p, 4) ? oom(e) : 0;
    case E_DOUBLE:
        return buf_put(b, nd->data + 8 * p, 8) ? oom(e) : 0;
    case E_BYTES:
    case E_FIXED:
    case E_ENUM: {
        int32_t a = nd->offs[p], z = nd->offs[p + 1];
        int64_t len = (int64_t)z - a;
        if (nd->kind == E_FIXED) {
            if (len != nd->param) return refuse(e, nd, "does not have the fixed type's size");
            return buf_put(b, nd->data + a, (size_t)len) ? oom(e) : 0;
        }
        if (nd->kind == E_ENUM) {
            Py_ssize_t ns = PyList_Size(nd->symbols);
            for (Py_ssize_t k = 0; k < ns; k++) {
                PyObject *sym = PyList_GetItem(nd->symbols, k);
                if (PyBytes_Size(sym) == len && !memcmp(PyBytes_AsString(sym), nd->data + a, (size_t)len))
                    return put_long(b, k) ? oom(e) : 0;
            }
            return refuse(e, nd, "is not one of the enum's symbols");
        }
        if (put_long(b, len) || buf_put(b, nd->data + a, (size_t)len)) return oom(e);
        return 0;
    }
    case E_DEC_BYTES:
    case E_DEC_FIXED: {
        int rc = dec_put(b, (const unsigned char *)nd->data + 16 * p, nd->kind == E_DEC_FIXED ? nd->param : 0);
        if (rc == -1) return refuse(e, nd, "does not fit the fixed type's size");
        return rc ? oom(e) : 0;
    }
    case E_RECORD:
        for (int k = 0; k < nd->nchild; k++)
            if (enc(e, nd->child[k], i, 1)) return -1;
        return 0;
    case E_ARRAY:
    case E_MAP: {
        int32_t a = nd->offs[p], z = nd->offs[p + 1];
        if (z > a) {
            if (put_long(b, (int64_t)z - a)) return oom(e);
            for (int32_t k = a; k < z; k++)
                for (int c = 0; c < nd->nchild; c++)
                    if (enc(e, nd->child[c], k, 1)) return -1;
        }
        return put_long(b, 0) ? oom(e) : 0;
    }
    }
    PyErr_SetString(PyExc_ValueError, "an unknown encoder node");
    e->py_error = 1;
    return -1;
}

static int avro_row(void *e, Py_ssize_t i) { return enc(e, 0, i, 1); }

static PyObject *encode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *nodes_o;
    Py_ssize_t n;
    Py_buffer header;
    if (!PyArg_ParseTuple(args, "O!ny*", &PyList_Type, &nodes_o, &n, &header)) return NULL;
    PyObject *result = NULL;
    int count = (int)PyList_Size(nodes_o);
    Py_buffer *views = calloc((size_t)count * 3, sizeof(Py_buffer));
    Enc e = {0};
    e.n = count;
    e.nodes = calloc((size_t)(count ? count : 1), sizeof(Node));
    if (!views || !e.nodes) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < count; i++) {
        Node *nd = &e.nodes[i];
        PyObject *valid, *offsets, *data, *children, *symbols;
        const char *name;
        if (!PyArg_ParseTuple(PyList_GetItem(nodes_o, i), "iLiisOLOOO!O", &nd->kind, &nd->param, &nd->nullb, &nd->valb,
                              &name, &valid, &nd->offset, &offsets, &data, &PyTuple_Type, &children, &symbols))
            goto done;
        nd->name = name;
        if (take_buffers(views, i, valid, offsets, data, &nd->valid, &nd->offs, &nd->data)) goto done;
        nd->symbols = symbols == Py_None ? NULL : symbols;
        if (!(nd->child = children_of(children, i, count, &nd->nchild))) goto done;
        int needs_offs = nd->kind == E_BYTES || nd->kind == E_FIXED || nd->kind == E_ENUM || nd->kind == E_ARRAY ||
                         nd->kind == E_MAP;
        int needs_data = nd->kind != E_NULL && nd->kind != E_RECORD && nd->kind != E_ARRAY && nd->kind != E_MAP &&
                         nd->kind != E_MEMBERS;
        if ((needs_offs && !nd->offs) || (needs_data && !nd->data) || (nd->kind == E_ENUM && !PyList_Check(symbols))) {
            PyErr_Format(PyExc_ValueError, "node %d (%s) lacks a buffer its kind needs", i, name);
            goto done;
        }
    }
    if (!count) {
        PyErr_SetString(PyExc_ValueError, "no nodes");
        goto done;
    }
    result = encode_rows(&e, avro_row, n, &header, &e.out, &e.py_error, e.msg, "Avro");
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
    {"decode", decode, METH_VARARGS, "Avro datums of a binary column to Arrow buffers (see _avro.c)."},
    {"encode", encode, METH_VARARGS, "An Arrow column to Avro datums with a header each (see _avro.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_avro", NULL, -1, methods};

PyMODINIT_FUNC PyInit__avro(void) { return PyModule_Create(&module); }
