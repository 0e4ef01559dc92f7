/*
 * The C-API of arena.views._hit: what the compiled code of a higher layer asks of the views
 * layer's compiled hit (arena/views/_hit.c) when it serves a request from remembered views
 * of its own (arena/planning/_region_hit.c: a replayed step's request and a scope's
 * request), so that the views layer's rules are written once, here and in _hit.c, and
 * _hit.c knows nothing of the layers above it (issue 27 item 1).
 *
 * _hit exports one `ArenaHitAPI` as the capsule "arena.views._hit._C_API" (as
 * arena.slots._slot exports its stores, and NumPy its C-API as `_ARRAY_API`); a module
 * that uses it imports it once, at its own import, with PyCapsule_Import.
 *
 * The request checks below decide whether a request is a plain one (exact tuples of
 * (exact tuple of exact ints, dtype)) and whether it is a remembered one; none of them
 * runs Python code but where it says so. Everything they decline goes to the Python path,
 * which explains. A remembered entry (a Prepared) is the views layer's to write: a caller
 * that serves one sets its `used` flag by arena_hit_mark_used, as the plain hit does.
 */
#ifndef ARENA_HIT_API_H
#define ARENA_HIT_API_H

#include <Python.h>
#include <string.h>

/* Raised where the layout of this struct changes: a module built against another refuses
 * to import (its pure-Python mirror then runs). */
#define ARENA_HIT_API_VERSION 2
#define ARENA_HIT_API_CAPSULE "arena.views._hit._C_API"

typedef struct {
    int version; /* ARENA_HIT_API_VERSION */
    /* Where Prepared.used lies in a remembered entry (the offset bind() found; only
     * arena_hit_mark_used below uses it). */
    Py_ssize_t used_at;
    /* A digest of a plain request `specs` (an exact tuple), never 0; 0 for anything else
     * (a dimension that is no exact int: arena_exact_int), with any exception cleared. */
    Py_uhash_t (*digest)(PyObject *specs);
    /* Whether the remembered key `key` and the plain request `specs` are the same
     * request: the same shapes and the very same dtype objects. 1, 0, or -1 with an
     * exception set (comparing ints of more than one digit). */
    int (*same_request)(PyObject *key, PyObject *specs);
    /* Whether the request `specs` has the dtype classes of the key `key` it was found
     * under (an object of another class equal to a remembered dtype is no hit): 1 or 0. */
    int (*same_classes)(PyObject *key, PyObject *specs);
    /* A fresh view of the remembered view `view`: fresh(view), as the plain hit makes it
     * (NumPy's ndarray.view through NumPy's C-API, torch's `.data` through its getter).
     * A new reference, or NULL with an exception set. May run Python code. */
    PyObject *(*fresh_view)(PyObject *fresh, PyObject *view);
    /* NumPy's entries behind fresh_view, for a caller that makes a NumPy fresh view from
     * its own copy of a view's fields (the planning layer's step rows,
     * arena/planning/_step_rows.h), as fresh_view makes one from the view: so that NumPy's
     * C-API is imported once, by _hit. `ndarray_view` is numpy.ndarray.view (the `fresh`
     * of a NumPy front that hands out fresh views), `ndarray` numpy.ndarray, and the two
     * functions PyArray_NewFromDescr and PyArray_SetBaseObject from NumPy's C-API table.
     * All NULL until the first Planner made notes them; `ndarray_view` is set last (set
     * means every entry is). Borrowed: _hit holds them for the process's life. */
    PyObject *ndarray_view;
    PyTypeObject *ndarray;
    PyObject *(*new_from_descr)(PyTypeObject *type, PyObject *descr, int nd,
                                const Py_ssize_t *dims, const Py_ssize_t *strides, void *data,
                                int flags, PyObject *obj);
    int (*set_base)(PyObject *array, PyObject *base);
} ArenaHitAPI;

#if defined(__GNUC__)
#define ARENA_HIT_INLINE static inline __attribute__((always_inline))
#define ARENA_HIT_RARE static __attribute__((noinline, cold, unused))
#else
#define ARENA_HIT_INLINE static inline
#define ARENA_HIT_RARE static
#endif

/* The leading fields of a NumPy array (PyArrayObject_fields: NumPy's ABI, the same in
 * NumPy 1 and 2), read only from objects whose type is numpy.ndarray: how the views layer
 * reads an array, in _hit.c and in the planning layer's step rows (_step_rows.h). */
typedef struct {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} ArenaNdArray;

/* The NumPy flag bits read from an ArenaNdArray's flags (numpy/ndarraytypes.h's
 * NPY_ARRAY_OWNDATA and NPY_ARRAY_WARN_ON_WRITE: the same in NumPy 1 and 2). */
#define ARENA_NPY_OWNDATA 0x0004
#define ARENA_NPY_WARN_ON_WRITE (1U << 31)

/* Whether `type` is exactly torch.Tensor: a heap class named Tensor whose own dict says
 * it is of module "torch" (read as type.__module__ reads a class's: no Python code runs;
 * `module_name` is the interned string "__module__"). 1 or 0, no exception left. */
static inline int arena_is_torch_tensor_type(PyTypeObject *type, PyObject *module_name) {
    if (strcmp(type->tp_name, "Tensor") != 0 || !(type->tp_flags & Py_TPFLAGS_HEAPTYPE) ||
        type->tp_dict == NULL)
        return 0;
    PyObject *module = PyDict_GetItemWithError(type->tp_dict, module_name);
    if (module == NULL || !PyUnicode_CheckExact(module) ||
        PyUnicode_CompareWithASCIIString(module, "torch") != 0) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* The exact-int rule (the mirror of arena.base.layout.exact_int, issue 27 item 6): a
 * dimension served as it is is exactly an int. 2.0 and True hash and compare like 2 and
 * 1, and an int subclass may say another number later: none may find what a plain request
 * remembered. Every compiled check of a dimension asks this helper. */
ARENA_HIT_INLINE int arena_exact_int(PyObject *value) { return PyLong_CheckExact(value); }

/* arena_exact_size's general case: an int of more than one digit. */
ARENA_HIT_RARE Py_ssize_t arena_exact_size_slow(PyObject *value) {
    Py_ssize_t found = PyLong_AsSsize_t(value);
    if (found == -1 && PyErr_Occurred()) PyErr_Clear();
    return found < 0 ? -1 : found;
}

/* An exact int's value, or -1 where it is not one (arena_exact_int), or is negative, or
 * past Py_ssize_t. A one-digit int (below 2**30) is read in place: inlined into its caller
 * (a hit's dimensions, request index and byte counts), with no call. */
ARENA_HIT_INLINE Py_ssize_t arena_exact_size(PyObject *value) {
    if (value == NULL || !arena_exact_int(value)) return -1;
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)value)) {
        Py_ssize_t found = (Py_ssize_t)PyUnstable_Long_CompactValue((PyLongObject *)value);
        return found < 0 ? -1 : found;
    }
#else
    if (Py_SIZE(value) == 0) return 0;
    if (Py_SIZE(value) == 1) return (Py_ssize_t)((PyLongObject *)value)->ob_digit[0];
    /* negative (a region stack's `below` of -1, "count again", on every scope request):
     * -1 here, as from the call below, without the call into colder code */
    if (Py_SIZE(value) < 0) return -1;
#endif
    return arena_exact_size_slow(value);
}

/* A remembered entry `entry` (a Prepared, as the caller checked) was used: its `used` flag
 * set, as the plain hit sets it (the cache's CLOCK sweep spares it), by the views layer's
 * code inlined into the caller, over the offset the table holds. Plain stores: the value
 * it replaces is True or False, whose release runs no code. */
ARENA_HIT_INLINE void arena_hit_mark_used(const ArenaHitAPI *api, PyObject *entry) {
    PyObject **field = (PyObject **)((char *)entry + api->used_at);
    if (*field == Py_True) return;
    PyObject *old = *field;
    *field = Py_NewRef(Py_True);
    Py_XDECREF(old);
}

#endif /* ARENA_HIT_API_H */
