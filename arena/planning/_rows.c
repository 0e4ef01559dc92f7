/*
 * arena.planning._rows: a replayed step's cache list with one row per request index
 * beside it (StepCaches), and the row's building (note). See arena/planning/_step_rows.h
 * for what a row holds and when the compiled step hit (arena/planning/_region_hit.c) takes
 * it; arena/planning/rows.py is the Python side (and the pure-Python path's plain list,
 * where this is not built).
 *
 * A StepCaches is a list subclass: Python reads and writes it as the list of dicts it is.
 * note(caches, r) builds request index r's row from caches[r] (after the replay
 * remembered its views there), in locals first: everything that may run Python code (the
 * entry's attributes, a tensor's data_ptr(); a dtype's __eq__ never: no comparison is
 * made) runs before the dict is read again, and the row is installed by plain stores, the references it replaces
 * released after the last one. An interrupt sees the row noted or not at all.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_step_rows.h"

static PyTypeObject StepCachesType;
static PyObject *str_views, *str_key, *str_module, *str_data_ptr;

/* The row's references, released. */
static void row_release(StepRow *row) {
    Py_CLEAR(row->views);
    Py_CLEAR(row->view);
    Py_CLEAR(row->descr);
    Py_CLEAR(row->base);
}

static int caches_traverse(StepCachesObject *self, visitproc visit, void *arg) {
    for (Py_ssize_t r = 0; r < self->nrows; r++) {
        StepRow *row = &self->rows[r];
        Py_VISIT(row->views);
        Py_VISIT(row->view);
        Py_VISIT(row->descr);
        Py_VISIT(row->base);
    }
    return PyList_Type.tp_traverse((PyObject *)self, visit, arg);
}

/* Every row emptied, then the list's items (a cycle through a row's views breaks here). */
static int caches_clear(StepCachesObject *self) {
    for (Py_ssize_t r = 0; r < self->nrows; r++) {
        StepRow *row = &self->rows[r];
        row->dtype = NULL; /* no row from here: the hit reads the dicts */
        row_release(row);
    }
    return PyList_Type.tp_clear((PyObject *)self);
}

static void caches_dealloc(StepCachesObject *self) {
    PyObject_GC_UnTrack(self);
    for (Py_ssize_t r = 0; r < self->nrows; r++) {
        self->rows[r].dtype = NULL;
        row_release(&self->rows[r]);
    }
    PyMem_Free(self->raw);
    self->raw = NULL;
    self->rows = NULL;
    self->nrows = 0;
    PyList_Type.tp_dealloc((PyObject *)self); /* untracks again (a no-op) and frees */
}

#if STEP_ROWS /* the row's building; CPython 3.12 on has none (_step_rows.h), nor an int's
                ob_digit to copy a dimension from */
/* Whether `type` is exactly numpy.ndarray (named so: as arena.planning.runs._is_ndarray). */
static int is_ndarray_type(PyTypeObject *type) {
    return strcmp(type->tp_name, "numpy.ndarray") == 0;
}

/* Whether `type` is exactly torch.Tensor (a class named Tensor of module torch, read from
 * the class's own dict: as arena.planning.runs._is_tensor and _region_hit.c's is_tensor). */
static int is_tensor_type(PyTypeObject *type) {
    return arena_is_torch_tensor_type(type, str_module);
}

/* The NumPy copy of the exact ndarray `view` into `row` (whose request copy is filled):
 * view_copy_take's (_view_copy.h: the request's shape, the fresh view's base collapse
 * found without warnings to propagate), where its strides fit 32 bits. 1 copied, 0 not
 * (no error). */
static int copy_ndarray(StepRow *row, PyObject *view) {
    ViewCopy copy;
    if (!view_copy_take(&copy, view, row->ndim, row->dims)) return 0;
    const StepRowArray *a = (const StepRowArray *)view;
    for (Py_ssize_t k = 0; k < row->ndim; k++) {
        Py_ssize_t stride = a->strides[k];
        if (stride < INT32_MIN || stride > INT32_MAX) return 0;
        row->strides[k] = (int32_t)stride;
    }
    Py_INCREF(copy.descr);
    row->descr = copy.descr;
    Py_INCREF(copy.base);
    row->base = copy.base;
    row->data = copy.data;
    row->flags = copy.flags;
    return 1;
}

/* The TENSOR view `view`'s data_ptr() into `row` (the address a release compares a fresh
 * view's data_ptr() with: _step_rows.h), where it is an exact int of a nonzero address;
 * else none (NULL). May run Python code (torch's method; a torch function mode): called
 * before the dict is read again. 0, or -1 with an exception set where the call raised
 * one that is no Exception (a KeyboardInterrupt a signal's handler raised in a mode's
 * Python code: it goes on out of note, as it would out of the Python path's calls).
 * An Exception is cleared: the release then calls data_ptr(), which explains it. */
static int copy_tensor(StepRow *row, PyObject *view) {
    PyObject *got = PyObject_CallMethodNoArgs(view, str_data_ptr);
    if (got != NULL && PyLong_CheckExact(got)) row->data = (char *)PyLong_AsVoidPtr(got);
    Py_XDECREF(got);
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    return 0;
}

/* Whether `key` is a plain one-view request the row can copy: an exact tuple of one exact
 * (shape, dtype) tuple, the shape an exact tuple of up to STEP_ROW_DIMS exact ints below
 * 2**30; its copy in `row`. No Python code. */
static int copy_request(StepRow *row, PyObject *key) {
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 1) return 0;
    PyObject *spec = PyTuple_GET_ITEM(key, 0);
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2) return 0;
    PyObject *shape = PyTuple_GET_ITEM(spec, 0);
    if (!PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) > STEP_ROW_DIMS) return 0;
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    for (Py_ssize_t k = 0; k < ndim; k++) {
        PyObject *dim = PyTuple_GET_ITEM(shape, k);
        if (!PyLong_CheckExact(dim) || Py_SIZE(dim) < 0 || Py_SIZE(dim) > 1) return 0;
        row->dims[k] = Py_SIZE(dim) == 0 ? 0 : (uint32_t)((PyLongObject *)dim)->ob_digit[0];
    }
    row->ndim = ndim;
    row->dtype = PyTuple_GET_ITEM(spec, 1);
    return 1;
}
#endif /* STEP_ROWS */

/* note(caches, r): build request index r's row of the StepCaches `caches` from caches[r]
 * (one plain one-view request remembered there, with a Prepared-like entry whose `key` is
 * the dict's key and whose `views` an exact list of one view), or empty it. Returns
 * whether a row is noted. */
static PyObject *note(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !Py_IS_TYPE(args[0], &StepCachesType) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "note(caches, r): a StepCaches and an int");
        return NULL;
    }
    StepCachesObject *caches = (StepCachesObject *)args[0];
    Py_ssize_t r = PyLong_AsSsize_t(args[1]);
    if (r == -1 && PyErr_Occurred()) return NULL;
    if (r < 0 || r >= PyList_GET_SIZE(caches)) {
        PyErr_Format(PyExc_IndexError, "note(caches, %zd): the list has %zd request indices", r,
                     PyList_GET_SIZE(caches));
        return NULL;
    }
#if STEP_ROWS
    if (caches->rows == NULL) { /* the rows of every request index, once */
        Py_ssize_t n = PyList_GET_SIZE(caches);
        void *raw = PyMem_Calloc(1, (size_t)n * sizeof(StepRow) + 64);
        if (raw == NULL) return PyErr_NoMemory();
        caches->raw = raw;
        caches->rows = (StepRow *)(((uintptr_t)raw + 63) & ~(uintptr_t)63);
        caches->nrows = n;
    }
    StepRow row;
    memset(&row, 0, sizeof row);
    PyObject *cache = PyList_GET_ITEM(caches, r);
    PyObject *key = NULL, *entry = NULL, *views = NULL, *entry_key = NULL;
    int noted = 0;
    Py_INCREF(cache);
    if (PyDict_CheckExact(cache) && PyDict_GET_SIZE(cache) == 1) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        if (PyDict_Next(cache, &pos, &k, &v) && copy_request(&row, k)) {
            key = k;
            entry = v;
            Py_INCREF(key);
            Py_INCREF(entry);
        }
    }
    /* The entry's attributes (a Python lookup: may run Python code). */
    if (entry != NULL) {
        views = PyObject_GetAttr(entry, str_views);
        entry_key = views == NULL ? NULL : PyObject_GetAttr(entry, str_key);
        /* not a row's (the hit reads the dict); an error that is no Exception goes on */
        if (entry_key == NULL && PyErr_ExceptionMatches(PyExc_Exception)) PyErr_Clear();
    }
    if (entry_key == key && key != NULL && PyList_CheckExact(views) &&
        PyList_GET_SIZE(views) == 1) {
        PyObject *view = PyList_GET_ITEM(views, 0);
        PyTypeObject *type = Py_TYPE(view);
        row.kind = is_ndarray_type(type)  ? STEP_ROW_NDARRAY
                   : is_tensor_type(type) ? STEP_ROW_TENSOR
                                          : STEP_ROW_OTHER;
        Py_INCREF(views);
        row.views = views;
        Py_INCREF(view); /* held: copy_tensor may run Python code */
        row.view = view;
        if (row.kind == STEP_ROW_NDARRAY) copy_ndarray(&row, view);
        /* an interrupt there: no row (emptied below), and the interrupt goes on */
        noted = row.kind != STEP_ROW_TENSOR || copy_tensor(&row, view) == 0;
        row.cache = cache;
        row.key = key;
        row.entry = entry;
    }
    /* Installed where the dict is still request index r's, in the state read, with the
     * one key and entry read (the lookups above may have run Python code): plain stores. */
    if (noted) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        noted = r < caches->nrows && PyList_GET_SIZE(caches) > r &&
                PyList_GET_ITEM(caches, r) == cache && PyDict_GET_SIZE(cache) == 1 &&
                PyDict_Next(cache, &pos, &k, &v) && k == key && v == entry;
        row.version = ((PyDictObject *)cache)->ma_version_tag;
    }
    /* An error to go on with is kept aside while the references go: a finalizer the
     * releases run must not meet it set. */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    StepRow old;
    int replace = r < caches->nrows;
    if (replace) {
        old = caches->rows[r];
        if (noted) {
            caches->rows[r] = row;
        } else {
            memset(&caches->rows[r], 0, sizeof(StepRow));
            row_release(&row);
        }
        row_release(&old);
    } else {
        row_release(&row);
    }
    Py_XDECREF(views);
    Py_XDECREF(entry_key);
    Py_XDECREF(key);
    Py_XDECREF(entry);
    Py_DECREF(cache);
    if (type != NULL) {
        PyErr_Restore(type, value, traceback);
        return NULL;
    }
    return PyBool_FromLong(noted);
#else
    return PyBool_FromLong(0);
#endif
}

/* noted(caches, r): whether request index r of `caches` has a row the hit would take for
 * its one remembered request (the dict noted, in the state noted). For tests. */
static PyObject *noted(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !Py_IS_TYPE(args[0], &StepCachesType) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "noted(caches, r): a StepCaches and an int");
        return NULL;
    }
    StepCachesObject *caches = (StepCachesObject *)args[0];
    Py_ssize_t r = PyLong_AsSsize_t(args[1]);
    if (r == -1 && PyErr_Occurred()) return NULL;
#if STEP_ROWS
    if (r < 0 || r >= caches->nrows || r >= PyList_GET_SIZE(caches)) Py_RETURN_FALSE;
    const StepRow *row = &caches->rows[r];
    PyObject *cache = PyList_GET_ITEM(caches, r);
    return PyBool_FromLong(row->dtype != NULL && row->cache == cache && PyDict_CheckExact(cache) &&
                           row->version == ((PyDictObject *)cache)->ma_version_tag);
#else
    (void)caches;
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef module_methods[] = {
    {"note", (PyCFunction)(void (*)(void))note, METH_FASTCALL,
     "note(caches, r): build request index r's row from caches[r]; whether one is noted."},
    {"noted", (PyCFunction)(void (*)(void))noted, METH_FASTCALL,
     "noted(caches, r): whether request index r has a row the step hit would take."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StepCachesType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "arena.planning._rows.StepCaches",
    .tp_basicsize = sizeof(StepCachesObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A replayed step's list of remembered-view dicts, one per request index, with "
              "a row per request index beside it for the compiled step hit.",
    .tp_dealloc = (destructor)caches_dealloc,
    .tp_traverse = (traverseproc)caches_traverse,
    .tp_clear = (inquiry)caches_clear,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "arena.planning._rows",
    "A replayed step's per-request rows (see arena/planning/_rows.h).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__rows(void) {
    StepCachesType.tp_base = &PyList_Type;
    if (PyType_Ready(&StepCachesType) < 0) return NULL;
    str_views = PyUnicode_InternFromString("views");
    str_key = PyUnicode_InternFromString("key");
    str_module = PyUnicode_InternFromString("__module__");
    str_data_ptr = PyUnicode_InternFromString("data_ptr");
    if (str_views == NULL || str_key == NULL || str_module == NULL || str_data_ptr == NULL)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    Py_INCREF(&StepCachesType);
    if (PyModule_AddObject(module, "StepCaches", (PyObject *)&StepCachesType) < 0 ||
        PyModule_AddIntConstant(module, "ROWS", STEP_ROWS) < 0) {
        Py_DECREF(&StepCachesType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
