/* Protobuf messages to Arrow column buffers, a whole column of Kafka values in one call: no
 * Python object per record or per field.
 *
 * Python (spark_ext/schemas/protobuf.py) turns the reader's message descriptor into a
 * table of messages and fields and checks each writer schema against it; this file reads
 * the wire format by that table. Fields are matched by number, so any writer the reader is
 * compatible with decodes alike; fields the reader does not know are skipped.
 *
 * What each field becomes is Spark's from_protobuf: a singular field absent from the bytes
 * is null (for a field without presence, its default value is too: writers leave it out);
 * repeated fields and maps are never null; inside a map entry an absent key or value is its
 * default. A singular field seen twice keeps the last (a message too: not merged), though
 * every copy is checked as protobuf's parsers check it. In a proto2 (closed) enum, a number
 * the enum lacks is an unknown field, as protobuf-java reads it; in proto3 it is named
 * UNKNOWN_ENUM_VALUE_<Enum>_<number>.
 *
 * decode(msgs, enums, outs, values, starts)
 *   msgs    [(kind, ((number, type, out, flags, sub, enum, oneof), ...))], message 0 the root;
 *           kind: M_PLAIN, M_ENTRY (a map entry: absent is default), M_TIME (Timestamp or
 *           Duration: seconds and nanos into microseconds);
 *   enums   [(name, numbers int32 bytes sorted, [symbol bytes])];
 *   outs    [(kind, width, children)] as _outs_types.h, output 0 the column;
 *   values  (valid | None, int32 offsets, data) of the binary column;
 *   starts  int32 bytes per row: where its message starts in the value, or -1 for a null row.
 * Returns (None, buffers) as _avro.decode does, or (row, message) for the first row that does
 * not decode.
 *
 * The stable ABI (Python 3.11+): one build serves every Python the package supports.
 */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_outs_types.h"

enum { M_PLAIN, M_ENTRY, M_TIME };

/* descriptor.proto's FieldDescriptorProto.Type numbers */
enum {
    T_DOUBLE = 1, T_FLOAT, T_INT64, T_UINT64, T_INT32, T_FIXED64, T_FIXED32, T_BOOL, T_STRING, T_GROUP,
    T_MESSAGE, T_BYTES, T_UINT32, T_ENUM, T_SFIXED32, T_SFIXED64, T_SINT32, T_SINT64
};

enum { F_REPEATED = 1, F_IMPLICIT = 2, F_MAP = 4, F_CLOSED = 8 };

typedef struct {
    int32_t number, type, out, flags, sub, en, oneof;
    const char *name; /* borrowed from the arguments, for errors */
} Field;

typedef struct {
    int kind, nfields, slot0;
    Field *fields;
    int16_t *by_number; /* field index + 1 by number, up to max_direct; 0: not in the reader */
    int32_t max_direct;
} Msg;

typedef struct {
    const char *name;
    int32_t n;
    const int32_t *numbers;
    PyObject *numbers_obj, *symbols; /* borrowed from the arguments */
} Enum;

typedef struct {
    int present;
    uint64_t v;
    const unsigned char *p;
    int64_t len;
} Slot;

typedef struct {
    Out *outs;
    int nouts;
    const char *msg;
    Msg *msgs;
    int nmsgs;
    Enum *enums;
    int nenums;
    Slot *slots;
    int depth;
    char why[256];
} Ctx;

#include "_outs.h"
#include "_enc.h"

#define MAX_DEPTH 64

/* The row's failure: fmt takes a string and a long long, in that order (either may go unused). */
static int fail(Ctx *c, const char *fmt, const char *a, long long b) {
    snprintf(c->why, sizeof c->why, fmt, a, b);
    c->msg = c->why;
    return -1;
}

static int bad_table(Ctx *c, const char *what) {
    PyErr_SetString(PyExc_ValueError, what);
    c->msg = NULL;
    return -1;
}

typedef struct {
    const unsigned char *p, *end;
} Rd;

static int rd_varint(Ctx *c, Rd *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) return fail(c, "the message ends inside a varint%s", "", 0LL);
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return fail(c, "a varint longer than 10 bytes%s", "", 0);
}

static int rd_fixed(Ctx *c, Rd *r, int n, uint64_t *out) {
    if (r->end - r->p < n) return fail(c, "the message ends inside a fixed-width field%s", "", 0);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | r->p[i];
    r->p += n;
    *out = v;
    return 0;
}

static int rd_len(Ctx *c, Rd *r, const unsigned char **p, int64_t *n) {
    uint64_t len;
    if (rd_varint(c, r, &len)) return -1;
    if (len > (uint64_t)(r->end - r->p)) return fail(c, "a length-delimited field runs past the message%s", "", 0);
    *p = r->p;
    *n = (int64_t)len;
    r->p += len;
    return 0;
}

/* The wire type a field's type is written with. */
static int wire_of(int type) {
    switch (type) {
    case T_DOUBLE: case T_FIXED64: case T_SFIXED64: return 1;
    case T_FLOAT: case T_FIXED32: case T_SFIXED32: return 5;
    case T_STRING: case T_BYTES: case T_MESSAGE: return 2;
    default: return 0;
    }
}

static int skip_field(Ctx *c, Rd *r, int wt) {
    uint64_t v;
    const unsigned char *p;
    int64_t n;
    switch (wt) {
    case 0: return rd_varint(c, r, &v);
    case 1: return rd_fixed(c, r, 8, &v);
    case 2: return rd_len(c, r, &p, &n);
    case 5: return rd_fixed(c, r, 4, &v);
    default: return fail(c, "wire type %s%lld (a group, or not protobuf) where a field was expected", "",
                         (long long)wt);
    }
}

static int utf8_ok(const unsigned char *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        int k;
        uint32_t cp;
        if ((b & 0xE0) == 0xC0) k = 1, cp = b & 0x1F;
        else if ((b & 0xF0) == 0xE0) k = 2, cp = b & 0x0F;
        else if ((b & 0xF8) == 0xF0) k = 3, cp = b & 0x07;
        else return 0;
        if (n - i - 1 < k) return 0;
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

static Out *out_at(Ctx *c, int32_t i) {
    if (i < 0 || i >= c->nouts) {
        bad_table(c, "the message table names an output that is not there");
        return NULL;
    }
    return &c->outs[i];
}

static int put_enum(Ctx *c, Out *o, const Field *f, int32_t number) {
    if (f->en < 0 || f->en >= c->nenums) return bad_table(c, "the message table names an enum that is not there");
    Enum *e = &c->enums[f->en];
    int32_t lo = 0, hi = e->n - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (e->numbers[mid] == number) {
            PyObject *sym = PyList_GetItem(e->symbols, mid);
            char *s;
            Py_ssize_t n;
            if (!sym || PyBytes_AsStringAndSize(sym, &s, &n)) {
                c->msg = NULL;
                return -1;
            }
            return put_bin(c, o, s, n);
        }
        if (e->numbers[mid] < number) lo = mid + 1;
        else hi = mid - 1;
    }
    /* as protobuf-java names a number its enum does not hold, which Spark's from_protobuf shows */
    size_t cap = strlen(e->name) + 40;
    char *buf = malloc(cap);
    if (!buf) {
        PyErr_NoMemory();
        c->msg = NULL;
        return -1;
    }
    int n = snprintf(buf, cap, "UNKNOWN_ENUM_VALUE_%s_%d", e->name, (int)number);
    int rc = put_bin(c, o, buf, n);
    free(buf);
    return rc;
}

static int dec_msg(Ctx *c, int m, const unsigned char *p, const unsigned char *end, int32_t out);
static int check_msg(Ctx *c, int m, const unsigned char *p, const unsigned char *end);
static int enum_has(Ctx *c, const Field *f, int32_t number);

/* Seconds and nanos (a Timestamp or a Duration) as microseconds, toward zero as Spark does. */
static int put_time(Ctx *c, Out *o, const unsigned char *p, const unsigned char *end) {
    Rd r = {p, end};
    int64_t seconds = 0, nanos = 0;
    while (r.p < r.end) {
        uint64_t tag, v;
        if (rd_varint(c, &r, &tag)) return -1;
        if ((tag >> 3) == 0) return fail(c, "a field numbered 0%s", "", 0);
        if ((tag >> 3) == 1 && (tag & 7) == 0) {
            if (rd_varint(c, &r, &v)) return -1;
            seconds = (int64_t)v;
        } else if ((tag >> 3) == 2 && (tag & 7) == 0) {
            if (rd_varint(c, &r, &v)) return -1;
            nanos = (int32_t)v;
        } else if (skip_field(c, &r, (int)(tag & 7))) {
            return -1;
        }
    }
    int64_t us;
    if (__builtin_mul_overflow(seconds, (int64_t)1000000, &us) ||
        __builtin_add_overflow(us, nanos / 1000, &us))
        return fail(c, "a timestamp or duration of %s%lld seconds is beyond Spark's microseconds", "",
                    (long long)seconds);
    return put_value(o, &us, 8);
}

/* One scalar (raw bits as read) into its output, converted to the Spark type. */
static int put_scalar(Ctx *c, Out *o, const Field *f, uint64_t v, const unsigned char *p, int64_t n) {
    switch (f->type) {
    case T_INT32: case T_UINT32: case T_FIXED32: case T_SFIXED32: {
        int32_t w = (int32_t)(uint32_t)v;
        return put_value(o, &w, 4);
    }
    case T_SINT32: {
        int32_t w = (int32_t)((uint32_t)v >> 1) ^ -(int32_t)(v & 1);
        return put_value(o, &w, 4);
    }
    case T_INT64: case T_UINT64: case T_FIXED64: case T_SFIXED64: {
        int64_t w = (int64_t)v;
        return put_value(o, &w, 8);
    }
    case T_SINT64: {
        int64_t w = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
        return put_value(o, &w, 8);
    }
    case T_FLOAT: {
        uint32_t b = (uint32_t)v;
        return put_value(o, &b, 4);
    }
    case T_DOUBLE:
        return put_value(o, &v, 8);
    case T_BOOL: {
        char b = v != 0;
        return put_value(o, &b, 1);
    }
    case T_ENUM:
        return put_enum(c, o, f, (int32_t)v);
    case T_STRING:
        if (!utf8_ok(p, n)) return fail(c, "field '%s' is not valid UTF-8 (%lld bytes)", f->name, (long long)n);
        return put_bin(c, o, (const char *)p, n);
    case T_BYTES:
        return put_bin(c, o, (const char *)p, n);
    }
    return bad_table(c, "the message table holds a field type the decoder does not know");
}

/* A field's value, read from its wire bytes, into output `o`: a scalar, or a message. */
static int put_field(Ctx *c, const Field *f, Out *o, int32_t out, uint64_t v, const unsigned char *p,
                     int64_t n) {
    if (f->type != T_MESSAGE) return put_scalar(c, o, f, v, p, n);
    if (f->sub < 0 || f->sub >= c->nmsgs) return bad_table(c, "the message table names a message that is not there");
    if (c->msgs[f->sub].kind == M_TIME) return put_time(c, o, p, p + n);
    return dec_msg(c, f->sub, p, p + n, out);
}

/* The default an absent field of a map entry takes. */
static int put_default(Ctx *c, const Field *f, Out *o, int32_t out) {
    static const unsigned char none[1] = {0};
    return put_field(c, f, o, out, 0, none, 0);
}

static int field_of(const Msg *m, uint64_t number) {
    if (number <= (uint64_t)m->max_direct) return m->by_number[number] - 1;
    for (int i = 0; i < m->nfields; i++)
        if ((uint64_t)m->fields[i].number == number) return i;
    return -1;
}

/* Append one item of repeated field `f` (already read as v / p,n) to its list's element output. */
static int put_item(Ctx *c, const Field *f, uint64_t v, const unsigned char *p, int64_t n) {
    Out *list = out_at(c, f->out);
    if (!list) return -1;
    if (list->kind != O_LIST && list->kind != O_MAP) return bad_table(c, "a repeated field's output is not a list");
    if (f->flags & F_MAP) {
        if (f->sub < 0 || f->sub >= c->nmsgs) return bad_table(c, "the message table names a message that is not there");
        return dec_msg(c, f->sub, p, p + n, -1);
    }
    int32_t el = list->child[0];
    Out *o = out_at(c, el);
    if (!o) return -1;
    return put_field(c, f, o, el, v, p, n);
}

/* Does a closed (proto2) enum hold `number`? Its numbers are sorted. */
static int enum_has(Ctx *c, const Field *f, int32_t number) {
    if (f->en < 0 || f->en >= c->nenums) return 1;
    Enum *e = &c->enums[f->en];
    int32_t lo = 0, hi = e->n - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (e->numbers[mid] == number) return 1;
        if (e->numbers[mid] < number) lo = mid + 1;
        else hi = mid - 1;
    }
    return 0;
}

/* What dec_msg checks of a value it will not keep (a singular field written again later):
 * strings' UTF-8, messages' wire format. */
static int check_value(Ctx *c, const Field *f, const unsigned char *q, int64_t n) {
    if (f->type == T_STRING && !utf8_ok(q, n))
        return fail(c, "field '%s' is not valid UTF-8 (%lld bytes)", f->name, (long long)n);
    if (f->type == T_MESSAGE && f->sub >= 0 && f->sub < c->nmsgs) {
        if (c->msgs[f->sub].kind == M_TIME) {
            Rd r = {q, q + n};
            while (r.p < r.end) {
                uint64_t tag;
                if (rd_varint(c, &r, &tag)) return -1;
                if ((tag >> 3) == 0) return fail(c, "a field numbered 0%s", "", 0);
                if (skip_field(c, &r, (int)(tag & 7))) return -1;
            }
            return 0;
        }
        return check_msg(c, f->sub, q, q + n);
    }
    return 0;
}

/* Check message `m`'s bytes as dec_msg reads them, writing nothing. */
static int check_msg(Ctx *c, int m, const unsigned char *p, const unsigned char *end) {
    Msg *M = &c->msgs[m];
    if (++c->depth > MAX_DEPTH) return fail(c, "messages nested deeper than %s%lld", "", MAX_DEPTH);
    Rd r = {p, end};
    while (r.p < r.end) {
        uint64_t tag, v;
        if (rd_varint(c, &r, &tag)) return -1;
        int wt = (int)(tag & 7);
        if ((tag >> 3) == 0) return fail(c, "a field numbered 0%s", "", 0);
        int fi = field_of(M, tag >> 3);
        if (fi < 0) {
            if (skip_field(c, &r, wt)) return -1;
            continue;
        }
        const Field *f = &M->fields[fi];
        int want = wire_of(f->type);
        const unsigned char *q;
        int64_t n;
        if ((f->flags & F_REPEATED) && want != 2 && wt == 2) {
            if (rd_len(c, &r, &q, &n)) return -1;
            Rd pk = {q, q + n};
            while (pk.p < pk.end)
                if (want == 0 ? rd_varint(c, &pk, &v) : rd_fixed(c, &pk, want == 1 ? 8 : 4, &v)) return -1;
            continue;
        }
        if (wt != want)
            return fail(c, "field '%s' is written with wire type %lld, not its type's", f->name, (long long)wt);
        if (want == 2) {
            if (rd_len(c, &r, &q, &n) || check_value(c, f, q, n)) return -1;
        } else if (want == 0 ? rd_varint(c, &r, &v) : rd_fixed(c, &r, want == 1 ? 8 : 4, &v)) {
            return -1;
        }
    }
    c->depth--;
    return 0;
}

/* Decode message `m` from [p, end) into struct output `out` (-1: a map entry, whose fields
 * write straight into the map's key and value outputs). */
static int dec_msg(Ctx *c, int m, const unsigned char *p, const unsigned char *end, int32_t out) {
    if (m < 0 || m >= c->nmsgs) return bad_table(c, "the message table names a message that is not there");
    if (++c->depth > MAX_DEPTH) return fail(c, "messages nested deeper than %s%lld", "", MAX_DEPTH);
    Msg *M = &c->msgs[m];
    Slot *slots = c->slots + M->slot0;
    for (int i = 0; i < M->nfields; i++) slots[i].present = 0;
    Rd r = {p, end};
    while (r.p < r.end) {
        uint64_t tag, v = 0;
        if (rd_varint(c, &r, &tag)) return -1;
        int wt = (int)(tag & 7);
        if ((tag >> 3) == 0) return fail(c, "a field numbered 0%s", "", 0);
        int fi = field_of(M, tag >> 3);
        if (fi < 0) {
            if (skip_field(c, &r, wt)) return -1;
            continue;
        }
        const Field *f = &M->fields[fi];
        int want = wire_of(f->type);
        const unsigned char *q = NULL;
        int64_t n = 0;
        if ((f->flags & F_REPEATED) && want != 2 && wt == 2) { /* packed */
            if (rd_len(c, &r, &q, &n)) return -1;
            Rd pk = {q, q + n};
            while (pk.p < pk.end) {
                if (want == 0 ? rd_varint(c, &pk, &v) : rd_fixed(c, &pk, want == 1 ? 8 : 4, &v)) return -1;
                if ((f->flags & F_CLOSED) && !enum_has(c, f, (int32_t)v)) continue;
                if (put_item(c, f, v, NULL, 0)) return -1;
            }
            continue;
        }
        if (wt != want)
            return fail(c, "field '%s' is written with wire type %lld, not its type's: the writer's schema "
                        "gives it another type", f->name, (long long)wt);
        if (want == 2 ? rd_len(c, &r, &q, &n) : want == 0 ? rd_varint(c, &r, &v)
                                                          : rd_fixed(c, &r, want == 1 ? 8 : 4, &v))
            return -1;
        if ((f->flags & F_CLOSED) && !enum_has(c, f, (int32_t)v)) continue; /* an unknown field */
        if (f->flags & F_REPEATED) {
            if (put_item(c, f, v, q, n)) return -1;
            continue;
        }
        /* the value this one replaces is still checked, as protobuf's parsers check every copy */
        if (slots[fi].present && slots[fi].p && check_value(c, &M->fields[fi], slots[fi].p, slots[fi].len))
            return -1;
        if (f->oneof >= 0)
            for (int j = 0; j < M->nfields; j++)
                if (j != fi && M->fields[j].oneof == f->oneof && slots[j].present && slots[j].p &&
                    check_value(c, &M->fields[j], slots[j].p, slots[j].len))
                    return -1;
        if (f->oneof >= 0)
            for (int j = 0; j < M->nfields; j++)
                if (M->fields[j].oneof == f->oneof) slots[j].present = 0;
        slots[fi] = (Slot){1, v, q, n};
    }
    if (out >= 0) {
        Out *so = out_at(c, out);
        if (!so) return -1;
        if (so->kind != O_STRUCT) return bad_table(c, "a message's output is not a struct");
        if (valid_put(so, 1)) return -1;
    }
    for (int i = 0; i < M->nfields; i++) {
        const Field *f = &M->fields[i];
        Out *o = out_at(c, f->out);
        if (!o) return -1;
        if (f->flags & F_REPEATED) { /* its items are in; close the list (or map) */
            if ((o->kind != O_LIST && o->kind != O_MAP) || valid_put(o, 1) || put_off(c, o)) {
                if (o->kind != O_LIST && o->kind != O_MAP) return bad_table(c, "a repeated field's output is not a list");
                return -1;
            }
            continue;
        }
        Slot *s = &slots[i];
        /* a 32-bit field reads the varint's low 32 bits only, as protobuf does */
        int narrow = f->type == T_INT32 || f->type == T_UINT32 || f->type == T_SINT32 || f->type == T_ENUM;
        int is_default = s->present && !s->len && !(narrow ? (uint32_t)s->v : s->v);
        if (s->present && !((f->flags & F_IMPLICIT) && is_default)) {
            if (put_field(c, f, o, f->out, s->v, s->p, s->len)) return -1;
        } else if (M->kind == M_ENTRY) {
            if (put_default(c, f, o, f->out)) return -1;
        } else if (put_null(c, f->out)) {
            return -1;
        }
    }
    c->depth--;
    return 0;
}

static int tables_parse(Ctx *c, PyObject *msgs_o, PyObject *enums_o) {
    c->nmsgs = (int)PyList_Size(msgs_o);
    c->nenums = (int)PyList_Size(enums_o);
    c->msgs = calloc((size_t)(c->nmsgs ? c->nmsgs : 1), sizeof(Msg));
    c->enums = calloc((size_t)(c->nenums ? c->nenums : 1), sizeof(Enum));
    if (!c->msgs || !c->enums) {
        PyErr_NoMemory();
        return -1;
    }
    int nslots = 0;
    for (int m = 0; m < c->nmsgs; m++) {
        Msg *M = &c->msgs[m];
        PyObject *fields;
        if (!PyArg_ParseTuple(PyList_GetItem(msgs_o, m), "iO!", &M->kind, &PyTuple_Type, &fields)) return -1;
        M->nfields = (int)PyTuple_Size(fields);
        M->slot0 = nslots;
        nslots += M->nfields;
        M->fields = calloc((size_t)(M->nfields ? M->nfields : 1), sizeof(Field));
        if (!M->fields) {
            PyErr_NoMemory();
            return -1;
        }
        int32_t maxn = 0;
        for (int i = 0; i < M->nfields; i++) {
            Field *f = &M->fields[i];
            if (!PyArg_ParseTuple(PyTuple_GetItem(fields, i), "iiiiiiis", &f->number, &f->type, &f->out, &f->flags,
                                  &f->sub, &f->en, &f->oneof, &f->name))
                return -1;
            if (f->number < 1 || f->type < T_DOUBLE || f->type > T_SINT64 || f->type == T_GROUP ||
                f->out < 0 || f->out >= c->nouts) {
                PyErr_SetString(PyExc_ValueError, "the message table holds a bad field");
                return -1;
            }
            if (f->number > maxn) maxn = f->number;
        }
        M->max_direct = maxn < 4096 ? maxn : 4095;
        M->by_number = calloc((size_t)M->max_direct + 1, sizeof(int16_t));
        if (!M->by_number) {
            PyErr_NoMemory();
            return -1;
        }
        for (int i = 0; i < M->nfields && i < INT16_MAX; i++)
            if (M->fields[i].number <= M->max_direct) M->by_number[M->fields[i].number] = (int16_t)(i + 1);
    }
    c->slots = calloc((size_t)(nslots ? nslots : 1), sizeof(Slot));
    if (!c->slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (int e = 0; e < c->nenums; e++) {
        Enum *E = &c->enums[e];
        const char *name;
        Py_buffer nb;
        if (!PyArg_ParseTuple(PyList_GetItem(enums_o, e), "sOO!", &name, &E->numbers_obj, &PyList_Type,
                              &E->symbols))
            return -1;
        E->name = name;
        if (PyObject_GetBuffer(E->numbers_obj, &nb, PyBUF_SIMPLE)) return -1;
        E->numbers = nb.buf; /* the bytes object keeps it alive for the call */
        E->n = (int32_t)(nb.len / 4);
        PyBuffer_Release(&nb);
        if (PyList_Size(E->symbols) != E->n) {
            PyErr_SetString(PyExc_ValueError, "an enum's numbers and symbols differ in count");
            return -1;
        }
    }
    return 0;
}

static void tables_free(Ctx *c) {
    for (int m = 0; m < c->nmsgs && c->msgs; m++) {
        free(c->msgs[m].fields);
        free(c->msgs[m].by_number);
    }
    free(c->msgs);
    free(c->enums);
    free(c->slots);
}

static PyObject *decode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *msgs_o, *enums_o, *outs_o, *values, *starts_o, *vv, *vo, *vd, *result = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O!OO", &PyList_Type, &msgs_o, &PyList_Type, &enums_o, &PyList_Type, &outs_o,
                          &values, &starts_o))
        return NULL;
    if (!PyArg_ParseTuple(values, "OOO", &vv, &vo, &vd)) return NULL;
    Py_buffer starts = {0}, vvalid = {0}, voffs = {0}, vdata = {0};
    int has_valid = 0;
    Ctx c;
    memset(&c, 0, sizeof c);
    c.nouts = (int)PyList_Size(outs_o);
    if (PyObject_GetBuffer(starts_o, &starts, PyBUF_SIMPLE)) return NULL;
    if (vv != Py_None) {
        if (PyObject_GetBuffer(vv, &vvalid, PyBUF_SIMPLE)) goto done;
        has_valid = 1;
    }
    if (PyObject_GetBuffer(vo, &voffs, PyBUF_SIMPLE)) goto done;
    if (PyObject_GetBuffer(vd, &vdata, PyBUF_SIMPLE)) goto done;
    int64_t rows = starts.len / 4;
    const int32_t *o32 = voffs.buf, *st = starts.buf;
    int ok = voffs.len >= (Py_ssize_t)(4 * (rows + 1)) && (!has_valid || vvalid.len >= (rows + 7) / 8) &&
             c.nouts > 0;
    for (int64_t i = 0; ok && i < rows; i++)
        ok = o32[i] >= 0 && o32[i + 1] >= o32[i] && o32[i + 1] <= vdata.len && st[i] <= o32[i + 1] - o32[i];
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "the values' buffers do not hold the rows, or no outputs");
        goto done;
    }
    c.outs = outs_parse(outs_o, c.nouts);
    if (!c.outs || tables_parse(&c, msgs_o, enums_o)) goto done;
    if (c.nmsgs < 1 || c.outs[0].kind != O_STRUCT) {
        PyErr_SetString(PyExc_ValueError, "no root message, or its output is not a struct");
        goto done;
    }
    for (int64_t i = 0; i < rows; i++) {
        int null = st[i] < 0 || (has_valid && !(((const unsigned char *)vvalid.buf)[i / 8] >> (i % 8) & 1));
        if (null) {
            if (put_null(&c, 0)) goto failed;
            continue;
        }
        const unsigned char *p = (const unsigned char *)vdata.buf + o32[i];
        c.depth = 0;
        if (dec_msg(&c, 0, p + st[i], p + (o32[i + 1] - o32[i]), 0)) goto failed;
        continue;
    failed:
        if (!c.msg) goto done; /* a Python error, already set */
        result = Py_BuildValue("(Ls)", (long long)i, c.msg);
        goto done;
    }
    {
        PyObject *bufs = outs_result(c.outs, c.nouts);
        if (!bufs) goto done;
        result = Py_BuildValue("(ON)", Py_None, bufs);
    }
done:
    if (c.outs) outs_free(c.outs, c.nouts);
    tables_free(&c);
    if (starts.obj) PyBuffer_Release(&starts);
    if (has_valid) PyBuffer_Release(&vvalid);
    if (voffs.obj) PyBuffer_Release(&voffs);
    if (vdata.obj) PyBuffer_Release(&vdata);
    return result;
}

/* ---- encoding: Arrow columns to protobuf messages ----
 *
 * encode(nodes, n, header) where nodes[i] = (kind, number, flags, name, valid|None, offset,
 * offsets|None, data|None, children, enum|None, oneof) describes one Arrow array of the input tree
 * (node 0: the column, a struct, `n` rows), as a field `number` of its parent message.
 * `offset` is the array's own offset; a struct's children are indexed as their parent, a
 * list's and a map's by its offsets. Flags: W_IMPLICIT (no presence: a default value is
 * not written, as protobuf's serializers leave it out), W_PACKED (a repeated scalar, packed),
 * W_DURATION (a W_TIME that is a Duration: its nanos take the seconds' sign), W_REQUIRED (a
 * proto2 required field: a null refuses the row). `oneof` groups a message's children: two
 * members of one group set in a row refuse it (a reader would keep only the last).
 * A message's children come in field-number order, so the bytes are protobuf's own.
 * Returns (None, offsets, data) of a binary column whose every value starts with `header`,
 * or (row, message) for the first row the schema refuses.
 */
enum { W_VARINT32, W_UVARINT32, W_VARINT64, W_SINT32, W_SINT64, W_FIXED32, W_FIXED64, W_FLOAT, W_DOUBLE, W_BOOL,
       W_BYTES, W_ENUM, W_MESSAGE, W_TIME, W_LIST, W_MAP };
enum { W_IMPLICIT = 1, W_PACKED = 2, W_DURATION = 4, W_REQUIRED = 8 };

typedef struct {
    int kind, number, flags, nchild, oneof;
    int64_t offset;
    const unsigned char *valid;
    const int32_t *offs;
    const char *data;
    int *child;
    const char *name;
    PyObject *en; /* borrowed: (numbers int32 bytes, [symbol bytes]) sorted by symbol, for lookups */
} WNode;

typedef struct {
    WNode *nodes;
    int n;
    Buf out;
    char msg[512];
    int py_error;
} Enc;

static int w_varint(Buf *b, uint64_t v) {
    unsigned char tmp[10];
    int k = 0;
    do {
        tmp[k] = v & 0x7F;
        v >>= 7;
        if (v) tmp[k] |= 0x80;
        k++;
    } while (v);
    return buf_put(b, tmp, (size_t)k);
}

static int w_refuse(Enc *e, const WNode *nd, const char *what) {
    snprintf(e->msg, sizeof e->msg, "%s %s", nd->name, what);
    return -1;
}

static int w_oom(Enc *e) {
    e->py_error = 1;
    return -1;
}

static int w_valid(const WNode *nd, int64_t i) {
    int64_t p = i + nd->offset;
    return !nd->valid || (nd->valid[p / 8] >> (p % 8) & 1);
}

static int w_wire(int kind) {
    switch (kind) {
    case W_FIXED64: case W_DOUBLE: return 1;
    case W_FIXED32: case W_FLOAT: return 5;
    case W_BYTES: case W_MESSAGE: case W_TIME: case W_LIST: case W_MAP: return 2;
    default: return 0;
    }
}

static int w_tag(Buf *b, int number, int wire) { return w_varint(b, ((uint64_t)number << 3) | (uint64_t)wire); }

/* Close a length-delimited run opened at `start` (5 bytes were reserved there for its length). */
static int w_close(Buf *b, size_t start) {
    size_t body = b->len - start - 5;
    unsigned char tmp[10];
    int k = 0;
    uint64_t v = body;
    do {
        tmp[k] = v & 0x7F;
        v >>= 7;
        if (v) tmp[k] |= 0x80;
        k++;
    } while (v);
    memcpy(b->p + start, tmp, (size_t)k);
    memmove(b->p + start + k, b->p + start + 5, body);
    b->len = start + (size_t)k + body;
    return 0;
}

static int w_open(Buf *b, size_t *start) {
    *start = b->len;
    if (buf_reserve(b, 5)) return -1;
    b->len += 5;
    return 0;
}

static int w_message(Enc *e, int at, int64_t i);

/* The scalar of node `nd` at row `p` (its own index), without its tag. *is_default: it is
 * its type's zero. */
static int w_scalar(Enc *e, const WNode *nd, int64_t p, Buf *b, int check_default, int *is_default) {
    *is_default = 0;
    switch (nd->kind) {
    case W_VARINT32: case W_UVARINT32: case W_SINT32: case W_FIXED32: case W_FLOAT: {
        int32_t v;
        memcpy(&v, nd->data + 4 * p, 4);
        if (check_default && v == 0) {
            *is_default = 1;
            return 0;
        }
        if (nd->kind == W_VARINT32) return w_varint(b, (uint64_t)(int64_t)v) ? w_oom(e) : 0;
        if (nd->kind == W_UVARINT32) return w_varint(b, (uint32_t)v) ? w_oom(e) : 0;
        if (nd->kind == W_SINT32) return w_varint(b, (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31))) ? w_oom(e) : 0;
        return buf_put(b, &v, 4) ? w_oom(e) : 0;
    }
    case W_VARINT64: case W_SINT64: case W_FIXED64: case W_DOUBLE: {
        int64_t v;
        memcpy(&v, nd->data + 8 * p, 8);
        if (check_default && v == 0) {
            *is_default = 1;
            return 0;
        }
        if (nd->kind == W_VARINT64) return w_varint(b, (uint64_t)v) ? w_oom(e) : 0;
        if (nd->kind == W_SINT64) return w_varint(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)) ? w_oom(e) : 0;
        return buf_put(b, &v, 8) ? w_oom(e) : 0;
    }
    case W_BOOL: {
        int v = (nd->data[p / 8] >> (p % 8)) & 1;
        if (check_default && !v) {
            *is_default = 1;
            return 0;
        }
        return w_varint(b, (uint64_t)v) ? w_oom(e) : 0;
    }
    case W_ENUM: {
        int32_t a = nd->offs[p], z = nd->offs[p + 1];
        PyObject *numbers_o = PyTuple_GetItem(nd->en, 0), *symbols = PyTuple_GetItem(nd->en, 1);
        char *nums;
        Py_ssize_t nlen;
        if (!numbers_o || !symbols || PyBytes_AsStringAndSize(numbers_o, &nums, &nlen)) return w_oom(e);
        Py_ssize_t lo = 0, hi = PyList_Size(symbols) - 1;
        while (lo <= hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            PyObject *sym = PyList_GetItem(symbols, mid);
            Py_ssize_t sl = PyBytes_Size(sym);
            int64_t len = (int64_t)z - a;
            size_t m = (size_t)(sl < len ? sl : len);
            int c = memcmp(PyBytes_AsString(sym), nd->data + a, m);
            if (!c) c = sl < len ? -1 : sl > len ? 1 : 0;
            if (!c) {
                int32_t v;
                memcpy(&v, nums + 4 * mid, 4);
                if (check_default && v == 0) {
                    *is_default = 1;
                    return 0;
                }
                return w_varint(b, (uint64_t)(int64_t)v) ? w_oom(e) : 0;
            }
            if (c < 0) lo = mid + 1;
            else hi = mid - 1;
        }
        return w_refuse(e, nd, "is not a name of the enum's values");
    }
    }
    PyErr_SetString(PyExc_ValueError, "an encoder node that is not a scalar");
    return w_oom(e);
}

/* Field `nd` of row `i` of its parent (p: the node's own index), with its tag. */
static int w_field(Enc *e, int at, int64_t p) {
    const WNode *nd = &e->nodes[at];
    Buf *b = &e->out;
    size_t start;
    switch (nd->kind) {
    case W_MESSAGE:
        if (w_tag(b, nd->number, 2) || w_open(b, &start)) return w_oom(e);
        if (w_message(e, at, p)) return -1;
        return w_close(b, start);
    case W_TIME: { /* Spark's microseconds as a Timestamp or Duration: seconds and nanos */
        int64_t us;
        memcpy(&us, nd->data + 8 * p, 8);
        int64_t sec = us / 1000000, rem = us % 1000000;
        if (rem < 0 && !(nd->flags & W_DURATION)) { /* a Timestamp's nanos are never negative; a Duration's take its sign */
            sec -= 1;
            rem += 1000000;
        }
        if (w_tag(b, nd->number, 2) || w_open(b, &start)) return w_oom(e);
        if (sec && (w_tag(b, 1, 0) || w_varint(b, (uint64_t)sec))) return w_oom(e);
        if (rem && (w_tag(b, 2, 0) || w_varint(b, (uint64_t)(int64_t)(int32_t)(rem * 1000)))) return w_oom(e);
        return w_close(b, start);
    }
    case W_LIST: {
        const WNode *el = &e->nodes[nd->child[0]];
        int32_t a = nd->offs[p], z = nd->offs[p + 1];
        if (a == z) return 0;
        for (int32_t k = a; k < z; k++)
            if (!w_valid(el, k)) return w_refuse(e, el, "holds a null, and a repeated protobuf field cannot");
        if (nd->flags & W_PACKED) {
            int dflt;
            if (w_tag(b, nd->number, 2) || w_open(b, &start)) return w_oom(e);
            for (int32_t k = a; k < z; k++)
                if (w_scalar(e, el, k + el->offset, b, 0, &dflt)) return -1;
            return w_close(b, start);
        }
        for (int32_t k = a; k < z; k++)
            if (w_field(e, nd->child[0], k + el->offset)) return -1;
        return 0;
    }
    case W_MAP: {
        const WNode *key = &e->nodes[nd->child[0]], *value = &e->nodes[nd->child[1]];
        int32_t a = nd->offs[p], z = nd->offs[p + 1];
        for (int32_t k = a; k < z; k++) {
            if (!w_valid(value, k)) return w_refuse(e, value, "is null, and a protobuf map holds no nulls");
            if (w_tag(b, nd->number, 2) || w_open(b, &start)) return w_oom(e);
            if (w_field(e, nd->child[0], k + key->offset) || w_field(e, nd->child[1], k + value->offset)) return -1;
            if (w_close(b, start)) return -1;
        }
        return 0;
    }
    default: {
        /* a scalar: written after its tag, or not at all when it has no presence and is its default */
        size_t mark = b->len;
        int dflt;
        if (w_tag(b, nd->number, w_wire(nd->kind))) return w_oom(e);
        if (nd->kind == W_BYTES) {
            int32_t a = nd->offs[p], z = nd->offs[p + 1];
            if ((nd->flags & W_IMPLICIT) && a == z) {
                b->len = mark;
                return 0;
            }
            if (w_varint(b, (uint64_t)((int64_t)z - a)) || buf_put(b, nd->data + a, (size_t)((int64_t)z - a)))
                return w_oom(e);
            return 0;
        }
        if (w_scalar(e, nd, p, b, nd->flags & W_IMPLICIT, &dflt)) return -1;
        if (dflt) b->len = mark;
        return 0;
    }
    }
}

/* The fields of message node `at` at its row `p` (its own index). */
static int w_message(Enc *e, int at, int64_t p) {
    const WNode *nd = &e->nodes[at];
    for (int k = 0; k < nd->nchild; k++) {
        const WNode *f = &e->nodes[nd->child[k]];
        int64_t fp = p - nd->offset + f->offset; /* a struct's children are indexed as it is */
        if (!w_valid(f, fp - f->offset)) { /* null: absent */
            if (f->flags & W_REQUIRED) return w_refuse(e, f, "is null, and the message requires it");
            continue;
        }
        if (f->oneof >= 0)
            for (int j = 0; j < k; j++) {
                const WNode *g = &e->nodes[nd->child[j]];
                if (g->oneof == f->oneof && w_valid(g, p - nd->offset))
                    return w_refuse(e, f, "is set with another member of its oneof; set one of them");
            }
        if (w_field(e, nd->child[k], fp)) return -1;
    }
    return 0;
}

static int proto_row(void *e, Py_ssize_t i) { return w_message(e, 0, i + ((Enc *)e)->nodes[0].offset); }

/* (numbers: int32 bytes, [symbol bytes]) of as many numbers as symbols. */
static int enum_table_ok(PyObject *en) {
    if (!en || !PyTuple_Check(en) || PyTuple_Size(en) != 2) return 0;
    PyObject *numbers = PyTuple_GetItem(en, 0), *symbols = PyTuple_GetItem(en, 1);
    if (!PyBytes_Check(numbers) || !PyList_Check(symbols) || PyBytes_Size(numbers) != 4 * PyList_Size(symbols))
        return 0;
    for (Py_ssize_t i = 0; i < PyList_Size(symbols); i++)
        if (!PyBytes_Check(PyList_GetItem(symbols, i))) return 0;
    return 1;
}

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
    e.n = count;
    e.nodes = calloc((size_t)(count ? count : 1), sizeof(WNode));
    if (!views || !e.nodes) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < count; i++) {
        WNode *nd = &e.nodes[i];
        PyObject *valid, *offsets, *data, *children, *en;
        const char *name;
        if (!PyArg_ParseTuple(PyList_GetItem(nodes_o, i), "iiisOLOOO!Oi", &nd->kind, &nd->number, &nd->flags, &name,
                              &valid, &nd->offset, &offsets, &data, &PyTuple_Type, &children, &en, &nd->oneof))
            goto done;
        nd->name = name;
        if (take_buffers(views, i, valid, offsets, data, &nd->valid, &nd->offs, &nd->data)) goto done;
        nd->en = en == Py_None ? NULL : en;
        if (!(nd->child = children_of(children, i, count, &nd->nchild))) goto done;
        int nc = nd->nchild;
        int k = nd->kind;
        int needs_offs = k == W_BYTES || k == W_ENUM || k == W_LIST || k == W_MAP;
        int needs_data = k != W_MESSAGE && k != W_LIST && k != W_MAP;
        if (k < W_VARINT32 || k > W_MAP || (needs_offs && !nd->offs) || (needs_data && !nd->data) ||
            (k == W_ENUM && !enum_table_ok(nd->en)) ||
            (k == W_LIST && nc != 1) || (k == W_MAP && nc != 2) || nd->number < 1) {
            PyErr_Format(PyExc_ValueError, "node %d (%s) is malformed or lacks a buffer its kind needs", i, name);
            goto done;
        }
    }
    if (!count || e.nodes[0].kind != W_MESSAGE) {
        PyErr_SetString(PyExc_ValueError, "no message node");
        goto done;
    }
    result = encode_rows(&e, proto_row, n, &header, &e.out, &e.py_error, e.msg, "protobuf");
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
    {"decode", decode, METH_VARARGS, "A column of protobuf messages to Arrow buffers (see _proto.c)."},
    {"encode", encode, METH_VARARGS, "An Arrow column to protobuf messages with a header each (see _proto.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_proto", NULL, -1, methods};

PyMODINIT_FUNC PyInit__proto(void) { return PyModule_Create(&module); }
