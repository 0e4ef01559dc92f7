/*
 * A replayed step's per-request rows: what the compiled step hit reads for request index r
 * of a replay, in one contiguous array per step cache list (arena/planning/_rows.c builds
 * it; the step hit in arena/planning/_region_hit.c reads it through the inline functions
 * below).
 *
 * A replay remembers its views per request index (arena.planning.replay.remembering): a
 * list, `caches`, of one dict {specs: Prepared} per request index. Served from those
 * objects, a request reads the dict, the Prepared entry, its views list, the list's item
 * array, the remembered view and (NumPy) the view's shape and strides: eight or nine
 * objects of their own per request index, which a step of 128 requests reads cold (every
 * request index's objects are different ones, where a repeated plain request reads one
 * entry). A StepCaches is that list with one 128-byte row per request index beside it,
 * consecutive in memory, filled when the replay remembers the request index's views
 * (arena.planning.rows.note_row): the dict's identity and state (its ma_version_tag), its
 * one key and entry, a copy of the request (its dtype object and up to STEP_ROW_DIMS
 * dimensions, as the step memo's Signature in _region_hit.c), the entry's views list and view
 * (references held), and for an exact numpy.ndarray what numpy.ndarray.view copies from
 * it (data, flags, strides, dtype descr) and what the fresh view's base collapses to; for
 * an exact torch.Tensor its data_ptr(), which a release of a fresh view of it compares
 * with the fresh view's instead of calling the view's own (step_row_tensor_data).
 *
 * The hit takes a row only while caches[r] is the dict noted in the state noted (one
 * dict, one key, one entry: the dict holds them) and the entry's views are the list
 * noted; so the row changes which memory is read, never the outcome, given that a
 * remembered request's views are not changed in place (nothing in arena changes them: a
 * Prepared entry's views are built whole and never written, and a front that makes fresh
 * views never hands its remembered views out). Any other change (a dict replaced, a key
 * added, the dict emptied, an entry replaced) leaves the row stale, and the hit takes the
 * dict as before until the replay remembers the request index again.
 *
 * This header is the planning layer's, beside the two modules that share the layout
 * (_rows.c writes rows, _region_hit.c reads them). It names no NumPy header: the fresh view
 * from a row's copy calls NumPy's C-API through the views layer's C-API its caller passes
 * (_region_hit.c imports it: arena/views/_hit_api.h, whose _hit alone imports NumPy's).
 * The copy is taken and the view made as the scope memo's are (_view_copy.h).
 *
 * Up to CPython 3.11 only (ma_version_tag names one state of one dict there; 3.12
 * deprecates it): on later versions no row is noted, and the hit reads the dicts.
 */
#ifndef ARENA_STEP_ROWS_H
#define ARENA_STEP_ROWS_H

#include <Python.h>
#include <stdint.h>

#include "../views/_hit_api.h"
#include "_view_copy.h"

#if PY_VERSION_HEX < 0x030C0000
#define STEP_ROWS 1
#else
#define STEP_ROWS 0
#endif

#define STEP_ROW_DIMS 4

/* The view kinds a lean replay keeps witnesses of (arena.planning.runs.lean): */
#define STEP_ROW_OTHER 0
#define STEP_ROW_NDARRAY 1 /* an exact numpy.ndarray */
#define STEP_ROW_TENSOR 2  /* an exact torch.Tensor */

typedef struct {
    /* first line: which dict state the row stands for, and the request it serves */
    PyObject *cache;  /* caches[r] when noted: compared, never read through the row */
    uint64_t version; /* its ma_version_tag then */
    PyObject *key;    /* its one key (held by the dict in that state) */
    PyObject *entry;  /* its one entry, a Prepared (idem) */
    PyObject *dtype;  /* the request's one dtype object; NULL: no row */
    Py_ssize_t ndim;  /* its number of dimensions */
    uint32_t dims[STEP_ROW_DIMS];
    /* second line: the remembered view, and NumPy's copy of it */
    PyObject *views; /* entry.views (a reference) */
    PyObject *view;  /* views[0] (a reference) */
    PyObject *descr; /* NDARRAY: the view's dtype descr (a reference); NULL: no copy */
    PyObject *base;  /* NDARRAY: what a fresh view's base collapses to (a reference) */
    char *data;      /* NDARRAY: the view's first byte; TENSOR: its data_ptr() (NULL: none) */
    int flags;       /* NDARRAY: the view's flags */
    int kind;        /* STEP_ROW_OTHER, _NDARRAY or _TENSOR */
    int32_t strides[STEP_ROW_DIMS];
} StepRow;

_Static_assert(sizeof(void *) != 8 || sizeof(StepRow) == 128, "a step row: two lines");

/* A step cache list: a list (of one dict per request index) and its rows. */
typedef struct {
    PyListObject list;
    Py_ssize_t nrows; /* rows allocated (0 until a row is noted) */
    StepRow *rows;    /* 64-byte aligned, in `raw` */
    void *raw;
} StepCachesObject;

/* A NumPy array's leading fields: the views layer's reading of one (ArenaNdArray,
 * arena/views/_hit_api.h). */
typedef ArenaNdArray StepRowArray;

#if STEP_ROWS
/* Whether `specs` is the row's request: exact tuples of one (shape, dtype), the very dtype
 * object, exact ints of the same values (as _region_hit.c's plain_request_is). No Python code. */
static inline int step_row_request_is(const StepRow *row, PyObject *specs) {
    if (!PyTuple_CheckExact(specs) || PyTuple_GET_SIZE(specs) != 1) return 0;
    PyObject *spec = PyTuple_GET_ITEM(specs, 0);
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2 ||
        PyTuple_GET_ITEM(spec, 1) != row->dtype)
        return 0;
    PyObject *shape = PyTuple_GET_ITEM(spec, 0);
    if (!PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) != row->ndim) return 0;
    for (Py_ssize_t k = 0; k < row->ndim; k++) {
        PyObject *dim = PyTuple_GET_ITEM(shape, k);
        /* a one-digit exact int (below 2**30) read in place; others are not a row's */
        if (!PyLong_CheckExact(dim)) return 0;
        Py_ssize_t size = Py_SIZE(dim);
        uint32_t value = size == 0 ? 0 : (uint32_t)((PyLongObject *)dim)->ob_digit[0];
        if (size < 0 || size > 1 || value != row->dims[k]) return 0;
    }
    return 1;
}

/* The row of request index `r` of the step cache list `caches` (of the type `type`) for
 * the request `specs`, where the dict `cache` (caches[r]) is the one noted in the state
 * noted; NULL otherwise (the hit reads the dict). */
static inline const StepRow *step_row_of(PyTypeObject *type, PyObject *caches, Py_ssize_t r,
                                         PyObject *cache, PyObject *specs) {
    if (type == NULL || !Py_IS_TYPE(caches, type)) return NULL;
    const StepCachesObject *c = (const StepCachesObject *)caches;
    if (r >= c->nrows) return NULL;
    const StepRow *row = &c->rows[r];
    if (row->dtype == NULL || row->cache != cache ||
        row->version != ((PyDictObject *)cache)->ma_version_tag ||
        !step_row_request_is(row, specs))
        return NULL;
    return row;
}

/* The data_ptr() a TENSOR row of the step cache list `caches` (of the type `type`) noted
 * for the remembered view `witness` at request index `r`: where the row holds that very
 * tensor (a reference: the same object, whatever the dict's state since), which nothing
 * points elsewhere in place (the premise above: a front that makes fresh views never hands
 * it out). NULL otherwise (the caller calls witness.data_ptr()). */
static inline void *step_row_tensor_data(PyTypeObject *type, PyObject *caches, Py_ssize_t r,
                                         PyObject *witness) {
    if (type == NULL || caches == NULL || !Py_IS_TYPE(caches, type)) return NULL;
    const StepCachesObject *c = (const StepCachesObject *)caches;
    if (r >= c->nrows) return NULL;
    const StepRow *row = &c->rows[r];
    return row->kind == STEP_ROW_TENSOR && row->view == witness ? row->data : NULL;
}

/* A fresh view of the row's NDARRAY view, made from the row's copy as numpy.ndarray.view
 * makes it from the view (view_copy_fresh, _view_copy.h: the row's shape and strides)
 * through the views layer's C-API `api`. A new reference; NULL without an exception where
 * the array came out otherwise (the caller makes it from the view then), NULL with one on
 * error. */
static inline PyObject *step_row_fresh(const StepRow *row, const ArenaHitAPI *api) {
    Py_ssize_t dims[STEP_ROW_DIMS], strides[STEP_ROW_DIMS];
    for (Py_ssize_t k = 0; k < row->ndim; k++) {
        dims[k] = (Py_ssize_t)row->dims[k];
        strides[k] = (Py_ssize_t)row->strides[k];
    }
    return view_copy_fresh(api, row->descr, row->base, row->data, row->flags, (int)row->ndim,
                           dims, strides);
}
#endif

#endif
