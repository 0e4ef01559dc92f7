/*
 * NumPy's copy of a remembered view: what numpy.ndarray.view copies from an exact
 * numpy.ndarray (its data, flags, dtype descr and the object its fresh view's base
 * collapses to), taken ahead so that a hit makes the fresh view without reading the view,
 * its shape or strides. The planning layer's compiled hits keep two such copies, each in
 * its own cache-line layout: a replayed step's rows (_step_rows.h: _rows.c's copy_ndarray
 * takes the copy, the step hit in _region_hit.c makes the view by step_row_fresh) and a
 * scope's memo (_region_hit.c: scope_note_views takes it, scope_memo_fresh makes the
 * view). What a copy must hold and how the view is made from it are written once, here,
 * for both; how each keeps the strides (every one in 32 bits, or C order from the last)
 * is its own.
 *
 * Like _step_rows.h, it names no NumPy header: the array's fields are read as the views
 * layer reads them (ArenaNdArray, arena/views/_hit_api.h), and the fresh view calls
 * NumPy's C-API through the entries the views layer's C-API exports (ArenaHitAPI's
 * ndarray, new_from_descr and set_base: _hit alone imports NumPy's).
 */
#ifndef ARENA_VIEW_COPY_H
#define ARENA_VIEW_COPY_H

#include <Python.h>
#include <stdint.h>

#include "../views/_hit_api.h"

/* The fields of an exact numpy.ndarray a fresh view is made from (borrowed: the caller
 * keeps what holds them alive). */
typedef struct {
    PyObject *descr; /* its dtype descr */
    PyObject *base;  /* what its fresh view's base collapses to */
    char *data;      /* its first byte */
    int flags;       /* its flags */
} ViewCopy;

/* NumPy's copy of the exact numpy.ndarray `view` into `copy`, where its shape is `ndim`
 * dimensions of the sizes `dims` (the request's), it has a descr, and its fresh view's
 * base collapse is found without warnings to propagate: PyArray_SetBaseObject(fresh,
 * view)'s walk, taken ahead, to the first array of the chain that owns its data, has no
 * base or whose base is of another type (given that object, PyArray_SetBaseObject stops
 * at once: the same base); an array of the chain with NumPy's warn-on-write flag is not
 * copied. 1 copied, 0 not (`copy` then unwritten). The strides are the caller's to check
 * and keep. No Python code, no references taken. */
static inline int view_copy_take(ViewCopy *copy, PyObject *view, Py_ssize_t ndim,
                                 const uint32_t *dims) {
    const ArenaNdArray *a = (const ArenaNdArray *)view;
    if (a->nd != ndim || a->descr == NULL) return 0;
    for (Py_ssize_t k = 0; k < ndim; k++)
        if (a->dimensions[k] != (Py_ssize_t)dims[k]) return 0;
    PyObject *base = view;
    for (;;) {
        const ArenaNdArray *at = (const ArenaNdArray *)base;
        if ((unsigned int)at->flags & ARENA_NPY_WARN_ON_WRITE) return 0;
        if ((at->flags & ARENA_NPY_OWNDATA) || at->base == NULL ||
            Py_TYPE(at->base) != Py_TYPE(view))
            break;
        base = at->base;
    }
    copy->descr = a->descr;
    copy->base = base;
    copy->data = a->data;
    copy->flags = a->flags;
    return 1;
}

/* A fresh view made from a copy (`descr`, `base`, `data`, `flags`: view_copy_take's) with
 * `ndim` dimensions `dims` and strides `strides`, as numpy.ndarray.view makes it from the
 * view: PyArray_NewFromDescr over the same data, shape, strides, flags and descr, then
 * PyArray_SetBaseObject with the collapsed base (what it would make of the view itself),
 * through the views layer's C-API `api` (its NumPy entries set). A new reference; NULL
 * without an exception where the array came out otherwise (the caller makes it from the
 * view then), NULL with one on error. */
static inline PyObject *view_copy_fresh(const ArenaHitAPI *api, PyObject *descr,
                                        PyObject *base, char *data, int flags, int ndim,
                                        const Py_ssize_t *dims, const Py_ssize_t *strides) {
    Py_INCREF(descr); /* taken by PyArray_NewFromDescr */
    PyObject *out = api->new_from_descr(api->ndarray, descr, ndim, dims, strides, data, flags,
                                        NULL);
    if (out == NULL) return NULL;
    Py_INCREF(base); /* taken by PyArray_SetBaseObject */
    if (api->set_base(out, base) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    const ArenaNdArray *made = (const ArenaNdArray *)out;
    if (made->flags == flags && made->descr == descr && made->base == base) return out;
    Py_DECREF(out);
    return NULL;
}

#endif
