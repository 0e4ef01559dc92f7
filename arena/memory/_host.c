/*
 * arena.memory._host: the compiled host allocation behind HostSource.allocate.
 *
 * HostAllocator(allocation, device, api, ndarray, dtype, uint8, alignment).allocate(nbytes)
 * builds what the pure-Python HostSource.allocate (arena/memory/sources.py) builds, with
 * the same calls made in C: a uint8 array of nbytes + alignment bytes as np.empty makes
 * it (NumPy allocates it uninitialised), its address read through the buffer protocol,
 * the array's view of nbytes from the first alignment boundary inside it (as raw[start :
 * start + nbytes] makes it: C-contiguous, writeable, its base the raw array), and the
 * frozen Allocation(ptr, nbytes, owner, device) filled through its slot descriptors, as
 * the dataclass's generated __init__ fills it.
 *
 * A growth's cost on a fresh arena is mostly cold memory: every Python frame, code object
 * and inline cache it touches for the first time in a while (issue 32 item 4). The
 * Python version reads the address through a ctypes view of the array (its cheapest
 * spelling in Python), slices the array and sets four descriptors from Python; this one
 * does the same in one call.
 *
 * It makes the arrays through NumPy's own C-API table (the `_ARRAY_API` capsule, no NumPy
 * header; arena/views/_hit.c's Planner uses the same two entries: PyArray_NewFromDescr,
 * 94, and PyArray_SetBaseObject, 282, fixed in NumPy's ABI since 1.7 and kept by NumPy 2),
 * after checking the table against the numpy.ndarray and numpy.dtype types it is given
 * (entries 2 and 3).
 *
 * allocate() returns None, with no exception, wherever NumPy refuses the array (out of
 * memory, a size past what NumPy indexes) or nbytes is not a positive int that fits (a
 * source is never asked for 0 bytes; NumPy's empty slice of the Python version then has
 * another address than the block's start): the Python version then runs, and gives its
 * block or raises its own error, so every error and message is the Python one. No Python code runs inside it (no frame: a signal's handler waits for
 * the caller's next instruction), so an interrupt finds the block made or not at all.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_WRITEABLE (NumPy recomputes the
 * first two from the address and shape). */
#define NPY_CARRAY_FLAGS (0x0001 | 0x0100 | 0x0400)

typedef PyObject *(*NewFromDescr)(PyTypeObject *, PyObject *, int, const Py_ssize_t *,
                                  const Py_ssize_t *, void *, int, PyObject *);
typedef int (*SetBase)(PyObject *, PyObject *);

typedef struct {
    PyObject_HEAD
    PyTypeObject *allocation; /* arena.memory.sources.Allocation */
    PyObject *fields[3];      /* its ptr, nbytes, owner slot descriptors */
    PyObject *device_field;   /* its device slot descriptor */
    PyObject *device;         /* arena.memory.devices.CPU */
    PyObject *api;            /* NumPy's _ARRAY_API capsule, held while its entries are used */
    PyObject *ndarray;        /* numpy.ndarray */
    PyObject *uint8;          /* numpy.dtype("uint8") */
    NewFromDescr new_from_descr;
    SetBase set_base;
    Py_ssize_t alignment;
} HostAllocator;

static int set_field(PyObject *descr, PyObject *obj, PyObject *value) {
    descrsetfunc set = Py_TYPE(descr)->tp_descr_set;
    return set(descr, obj, value);
}

static PyObject *allocator_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"allocation", "device",    "api", "ndarray", "dtype",
                            "uint8",      "alignment", NULL};
    PyObject *allocation, *device, *api, *ndarray, *dtype, *uint8;
    Py_ssize_t alignment;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOn", names, &allocation, &device, &api,
                                     &ndarray, &dtype, &uint8, &alignment))
        return NULL;
    /* NumPy makes the capsule without a name (numpy/_core/src/multiarray). */
    void **table = PyCapsule_IsValid(api, NULL) ? (void **)PyCapsule_GetPointer(api, NULL)
                                                : NULL;
    if (table == NULL || !PyType_Check(ndarray) || !PyType_Check(dtype) ||
        table[2] != (void *)ndarray || table[3] != (void *)dtype || table[94] == NULL ||
        table[282] == NULL || !PyObject_TypeCheck(uint8, (PyTypeObject *)dtype)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError,
                        "HostAllocator needs NumPy's _ARRAY_API capsule, numpy.ndarray, "
                        "numpy.dtype (the table's entries 2 and 3) and a uint8 dtype");
        return NULL;
    }
    if (alignment < 16 || alignment > (1 << 30) || (alignment & (alignment - 1))) {
        PyErr_Format(PyExc_ValueError,
                     "alignment must be a power of two from 16 to 2**30, got %zd", alignment);
        return NULL;
    }
    if (!PyType_Check(allocation)) {
        PyErr_SetString(PyExc_TypeError, "HostAllocator needs the Allocation class");
        return NULL;
    }
    static const char *field_names[] = {"ptr", "nbytes", "owner", "device"};
    PyObject *fields[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++) {
        /* The class's own slot descriptors (a member descriptor each): what the frozen
         * dataclass's __init__ sets through object.__setattr__. */
        PyObject *descr = PyDict_GetItemString(((PyTypeObject *)allocation)->tp_dict,
                                               field_names[i]);
        if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type) {
            for (int k = 0; k < i; k++) Py_DECREF(fields[k]);
            PyErr_Format(PyExc_TypeError,
                         "HostAllocator needs an Allocation with a slot named %s",
                         field_names[i]);
            return NULL;
        }
        Py_INCREF(descr);
        fields[i] = descr;
    }
    HostAllocator *self = (HostAllocator *)type->tp_alloc(type, 0);
    if (self == NULL) {
        for (int k = 0; k < 4; k++) Py_DECREF(fields[k]);
        return NULL;
    }
    Py_INCREF(allocation);
    self->allocation = (PyTypeObject *)allocation;
    for (int k = 0; k < 3; k++) self->fields[k] = fields[k];
    self->device_field = fields[3];
    Py_INCREF(device);
    self->device = device;
    Py_INCREF(api);
    self->api = api;
    Py_INCREF(ndarray);
    self->ndarray = ndarray;
    Py_INCREF(uint8);
    self->uint8 = uint8;
    self->new_from_descr = (NewFromDescr)table[94];
    self->set_base = (SetBase)table[282];
    self->alignment = alignment;
    return (PyObject *)self;
}

/* allocate(nbytes): a page-aligned host block as an Allocation, or None where the Python
 * version is to run (see the top of this file). */
static PyObject *allocator_allocate(PyObject *op, PyObject *nbytes) {
    HostAllocator *self = (HostAllocator *)op;
    if (!PyLong_CheckExact(nbytes)) Py_RETURN_NONE;
    Py_ssize_t n = PyLong_AsSsize_t(nbytes);
    if (n <= 0 || n > PY_SSIZE_T_MAX - self->alignment) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    /* np.empty(nbytes + alignment, uint8): PyArray_NewFromDescr takes the dtype's
     * reference; NumPy allocates the data, uninitialised, and owns it. */
    Py_ssize_t whole = n + self->alignment;
    Py_INCREF(self->uint8);
    PyObject *raw = self->new_from_descr((PyTypeObject *)self->ndarray, self->uint8, 1, &whole,
                                         NULL, NULL, 0, NULL);
    if (raw == NULL) {
        PyErr_Clear(); /* refused: the Python version raises its own error */
        Py_RETURN_NONE;
    }
    Py_buffer memory;
    if (PyObject_GetBuffer(raw, &memory, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_DECREF(raw);
        Py_RETURN_NONE;
    }
    char *base = (char *)memory.buf;
    PyBuffer_Release(&memory);
    uintptr_t address = (uintptr_t)base;
    Py_ssize_t start = (Py_ssize_t)((-address) & (uintptr_t)(self->alignment - 1));
    /* raw[start : start + nbytes]: a view whose base is raw (SetBaseObject takes raw's
     * reference, also on failure). */
    Py_INCREF(self->uint8);
    PyObject *owner = self->new_from_descr((PyTypeObject *)self->ndarray, self->uint8, 1, &n,
                                           NULL, base + start, NPY_CARRAY_FLAGS, NULL);
    if (owner == NULL) {
        Py_DECREF(raw);
        return NULL;
    }
    if (self->set_base(owner, raw) < 0) {
        Py_DECREF(owner);
        return NULL;
    }
    PyObject *ptr = PyLong_FromUnsignedLongLong((unsigned long long)(address + (uintptr_t)start));
    if (ptr == NULL) {
        Py_DECREF(owner);
        return NULL;
    }
    PyObject *block = self->allocation->tp_alloc(self->allocation, 0);
    if (block == NULL || set_field(self->fields[0], block, ptr) < 0 ||
        set_field(self->fields[1], block, nbytes) < 0 ||
        set_field(self->fields[2], block, owner) < 0 ||
        set_field(self->device_field, block, self->device) < 0) {
        Py_XDECREF(block);
        block = NULL;
    }
    Py_DECREF(ptr);
    Py_DECREF(owner);
    return block;
}

static int allocator_traverse(HostAllocator *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->allocation);
    for (int k = 0; k < 3; k++) Py_VISIT(self->fields[k]);
    Py_VISIT(self->device_field);
    Py_VISIT(self->device);
    Py_VISIT(self->api);
    Py_VISIT(self->ndarray);
    Py_VISIT(self->uint8);
    return 0;
}

static int allocator_clear(HostAllocator *self) {
    Py_CLEAR(self->allocation);
    for (int k = 0; k < 3; k++) Py_CLEAR(self->fields[k]);
    Py_CLEAR(self->device_field);
    Py_CLEAR(self->device);
    Py_CLEAR(self->api);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->uint8);
    return 0;
}

static void allocator_dealloc(HostAllocator *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    allocator_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef allocator_methods[] = {
    {"allocate", allocator_allocate, METH_O,
     "allocate(nbytes) -> Allocation or None: a page-aligned host block, as "
     "HostSource.allocate builds it; None where the Python version is to run."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot allocator_slots[] = {
    {Py_tp_new, allocator_new},
    {Py_tp_dealloc, allocator_dealloc},
    {Py_tp_traverse, allocator_traverse},
    {Py_tp_clear, allocator_clear},
    {Py_tp_methods, allocator_methods},
    {Py_tp_doc, "HostAllocator(allocation, device, api, ndarray, dtype, uint8, alignment): "
                "HostSource.allocate in C (arena/memory/_host.c)."},
    {0, NULL},
};

static PyType_Spec allocator_spec = {
    "arena.memory._host.HostAllocator",
    sizeof(HostAllocator),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    allocator_slots,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "arena.memory._host",
    "The compiled host allocation behind arena.memory.sources.HostSource.allocate.", -1,
    NULL,
};

PyMODINIT_FUNC PyInit__host(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *type = PyType_FromSpec(&allocator_spec);
    if (type == NULL || PyModule_AddObject(m, "HostAllocator", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
