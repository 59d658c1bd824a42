/* The frame the C encoders (_avro.c, _proto.c, _json.c) share: a node's Arrow buffers taken
 * from its tuple, and the row loop that writes a header and one value per row into a binary
 * column. Include after _outs_types.h.
 */
#ifndef SPARK_EXT_ENC_H
#define SPARK_EXT_ENC_H

/* Node i's buffers (each an object with the buffer protocol, or None) into views[3i..3i+2],
 * and their addresses into *valid, *offs, *data (NULL for None). -1 with a Python error. */
static int take_buffers(Py_buffer *views, int i, PyObject *valid, PyObject *offsets, PyObject *data,
                        const unsigned char **pvalid, const int32_t **poffs, const char **pdata) {
    PyObject *bufs[3] = {valid, offsets, data};
    for (int k = 0; k < 3; k++) {
        if (bufs[k] == Py_None) continue;
        if (PyObject_GetBuffer(bufs[k], &views[3 * i + k], PyBUF_SIMPLE)) return -1;
    }
    *pvalid = valid == Py_None ? NULL : views[3 * i].buf;
    *poffs = offsets == Py_None ? NULL : views[3 * i + 1].buf;
    *pdata = data == Py_None ? NULL : views[3 * i + 2].buf;
    return 0;
}

static void release_views(Py_buffer *views, int count) {
    if (!views) return;
    for (int i = 0; i < 3 * count; i++)
        if (views[i].obj) PyBuffer_Release(&views[i]);
    free(views);
}

/* One row's value after its header: 0, or -1 with *py_error set (a Python error) or not (the
 * row is refused, *msg says why). */
typedef int (*RowFn)(void *enc, Py_ssize_t row);

/* Rows 0..n-1, each `header` then `row`'s value, into `out`. (None, offsets, data) of the
 * binary column, (row, msg) for the first refused row, or NULL with a Python error. */
static PyObject *encode_rows(void *enc, RowFn row, Py_ssize_t n, const Py_buffer *header, Buf *out,
                             const int *py_error, const char *msg, const char *what) {
    Buf offs = {0};
    PyObject *result = NULL;
    int32_t zero = 0;
    if (buf_put(&offs, &zero, 4)) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (buf_put(out, header->buf, (size_t)header->len)) goto done;
        if (row(enc, i)) {
            if (!*py_error) result = Py_BuildValue("(ns)", i, msg);
            goto done;
        }
        if (out->len > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "more than 2 GiB of %s values in one batch", what);
            goto done;
        }
        int32_t end = (int32_t)out->len;
        if (buf_put(&offs, &end, 4)) goto done;
    }
    result = Py_BuildValue("(ONN)", Py_None, PyBytes_FromStringAndSize(offs.p ? offs.p : "", (Py_ssize_t)offs.len),
                           PyBytes_FromStringAndSize(out->p ? out->p : "", (Py_ssize_t)out->len));
done:
    free(offs.p);
    return result;
}

#endif
