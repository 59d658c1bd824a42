/* Column outputs' functions shared by the C decoders (_avro.c, _proto.c). Include after
 * _outs_types.h and after defining `Ctx` with the members `Out *outs; int nouts; const char
 * *msg;` (msg: why the current row failed; NULL when a Python error is set instead).
 */
static int valid_put(Out *o, int ok) {
    while (o->valid.len <= (size_t)(o->n / 8)) { /* grown for item n (a null-kind output has none) */
        char zero = 0;
        if (buf_put(&o->valid, &zero, 1)) return -1;
    }
    if (ok)
        o->valid.p[o->n / 8] |= (char)(1 << (o->n % 8));
    else
        o->nulls++;
    o->n++;
    return 0;
}

static int put_off(Ctx *c, Out *o) {
    int64_t v;
    if (o->kind == O_BIN)
        v = (int64_t)o->data.len;
    else
        v = c->outs[o->child[0]].n;
    if (v > INT32_MAX) {
        c->msg = "more than 2 GiB (or 2^31 items) in one column";
        return -1;
    }
    int32_t w = (int32_t)v;
    return buf_put(&o->offs, &w, 4);
}

/* Append a null to output `i` (children too: a struct's children keep its length). */
static int put_null(Ctx *c, int i) {
    if (i < 0) return 0;
    if (i >= c->nouts) {
        PyErr_SetString(PyExc_ValueError, "the program names an output that is not there");
        c->msg = NULL;
        return -1;
    }
    Out *o = &c->outs[i];
    if (o->kind == O_NULL) {
        o->n++;
        o->nulls++;
        return 0;
    }
    if (valid_put(o, 0)) return -1;
    switch (o->kind) {
    case O_BOOL:
        return buf_put(&o->data, "\0", 1);
    case O_FIXED: {
        static const char zero[16] = {0};
        return buf_put(&o->data, zero, (size_t)o->width);
    }
    case O_BIN:
    case O_LIST:
    case O_MAP:
        return put_off(c, o);
    case O_STRUCT:
        for (int k = 0; k < o->nchild; k++)
            if (put_null(c, o->child[k])) return -1;
        return 0;
    }
    return 0;
}

static int put_value(Out *o, const void *p, size_t n) {
    if (!(o->kind == O_FIXED && (size_t)o->width == n) && !(o->kind == O_BOOL && n == 1)) {
        PyErr_SetString(PyExc_ValueError, "the program writes a value into an output of another kind");
        return -1;
    }
    if (valid_put(o, 1)) return -1;
    return buf_put(&o->data, p, n);
}

static int put_bin(Ctx *c, Out *o, const char *p, int64_t n) {
    if (o->kind != O_BIN) {
        PyErr_SetString(PyExc_ValueError, "the program writes bytes into an output of another kind");
        c->msg = NULL;
        return -1;
    }
    if (valid_put(o, 1) || buf_put(&o->data, p, (size_t)n)) return -1;
    return put_off(c, o);
}

static void outs_free(Out *outs, int n) {
    for (int i = 0; i < n; i++) {
        free(outs[i].valid.p);
        free(outs[i].offs.p);
        free(outs[i].data.p);
        free(outs[i].child);
    }
    free(outs);
}

static PyObject *bytes_of(Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", (Py_ssize_t)b->len);
}

/* Parse `outs` ([(kind, width, children)]) into fresh outputs; NULL with a Python error if bad. */
static Out *outs_parse(PyObject *outs_o, int nouts) {
    Out *outs = calloc((size_t)(nouts > 0 ? nouts : 1), sizeof(Out));
    if (!outs) {
        PyErr_NoMemory();
        return NULL;
    }
    for (int i = 0; i < nouts; i++) {
        PyObject *children;
        if (!PyArg_ParseTuple(PyList_GetItem(outs_o, i), "iiO!", &outs[i].kind, &outs[i].width, &PyTuple_Type,
                              &children))
            goto bad;
        if (outs[i].width < 0 || outs[i].width > 16) {
            PyErr_SetString(PyExc_ValueError, "an output with a bad width");
            goto bad;
        }
        if (!(outs[i].child = children_of(children, i, nouts, &outs[i].nchild))) goto bad;
        int nc = outs[i].nchild;
        if ((outs[i].kind == O_LIST && nc != 1) || (outs[i].kind == O_MAP && nc != 2)) {
            PyErr_SetString(PyExc_ValueError, "a list needs one child, a map two");
            goto bad;
        }
        if (outs[i].kind == O_BIN || outs[i].kind == O_LIST || outs[i].kind == O_MAP) {
            int32_t zero = 0;
            if (buf_put(&outs[i].offs, &zero, 4)) goto bad;
        }
    }
    return outs;
bad:
    outs_free(outs, nouts);
    return NULL;
}

/* [(length, nulls, validity, offsets|None, data|None)] per output. */
static PyObject *outs_result(Out *outs, int nouts) {
    PyObject *bufs = PyList_New(nouts);
    if (!bufs) return NULL;
    for (int i = 0; i < nouts; i++) {
        Out *o = &outs[i];
        int has_offs = o->kind == O_BIN || o->kind == O_LIST || o->kind == O_MAP;
        int has_data = o->kind == O_BOOL || o->kind == O_FIXED || o->kind == O_BIN;
        PyObject *t = Py_BuildValue("(LLNNN)", (long long)o->n, (long long)o->nulls, bytes_of(&o->valid),
                                    has_offs ? bytes_of(&o->offs) : Py_NewRef(Py_None),
                                    has_data ? bytes_of(&o->data) : Py_NewRef(Py_None));
        if (!t) {
            Py_DECREF(bufs);
            return NULL;
        }
        PyList_SetItem(bufs, i, t);
    }
    return bufs;
}
