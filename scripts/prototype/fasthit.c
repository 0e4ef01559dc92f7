/* A prototype of a compiled hit path, to measure what pure Python leaves on the table.
 *
 * hit(cache, specs) does what arena's hit path does for a remembered NumPy request:
 * look the request up in the cache (a dict of specs -> list of prepared views), check
 * that every dimension is a plain int (2.0 and True hash like 2 and 1), and return a new
 * list of fresh views (ndarray.view() of each prepared view). Slot selection, capture
 * marking and statistics are left out, so this is a lower bound for a C fast path.
 *
 * Build and measure: python scripts/prototype/measure.py
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

static PyObject *hit(PyObject *self, PyObject *args) {
    PyObject *cache, *specs;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &cache, &PyTuple_Type, &specs))
        return NULL;
    PyObject *views = PyDict_GetItemWithError(cache, specs);
    if (views == NULL) {
        if (PyErr_Occurred()) PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *shape = PyTuple_GET_ITEM(PyTuple_GET_ITEM(specs, i), 0);
        Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
        for (Py_ssize_t k = 0; k < ndim; k++) {
            if (!PyLong_CheckExact(PyTuple_GET_ITEM(shape, k))) Py_RETURN_NONE;
        }
    }
    PyObject *out = PyList_New(count);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *view = PyArray_View((PyArrayObject *)PyList_GET_ITEM(views, i), NULL, NULL);
        if (view == NULL) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, view);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"hit", hit, METH_VARARGS, "hit(cache, specs) -> fresh views or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fasthit", NULL, -1, methods};

PyMODINIT_FUNC PyInit_fasthit(void) {
    import_array();
    return PyModule_Create(&module);
}
