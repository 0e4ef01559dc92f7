/*
 * arena.memory._host: the compiled host allocation behind HostSource.allocate, and a host
 * ledger's compiled replace (HostBooks), exported to higher layers' C as a C-API (below).
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
 * another address than the block's start). tries(nbytes) tells the two apart: where it
 * is true NumPy was asked and refused, and HostSource.allocate raises its error at once
 * (arena.memory.sources.host_refused) rather than ask NumPy again; else the Python
 * version runs, and gives its block or raises its own error. `refused` (optional, that
 * host_refused) is what HostBooks raises from for a refusal (below). No Python code runs inside it (no frame: a signal's handler waits for
 * the caller's next instruction), so an interrupt finds the block made or not at all.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_host_api.h"
#include "../base/_fields.h"

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
    Py_ssize_t offsets[4];    /* the ptr, nbytes, owner and device slots' offsets */
    PyObject *device;         /* arena.memory.devices.CPU */
    PyObject *api;            /* NumPy's _ARRAY_API capsule, held while its entries are used */
    PyObject *ndarray;        /* numpy.ndarray */
    PyObject *uint8;          /* numpy.dtype("uint8") */
    NewFromDescr new_from_descr;
    SetBase set_base;
    Py_ssize_t alignment;
    PyObject *refused;        /* refused(nbytes, error) -> the error to raise, or NULL */
} HostAllocator;


static const char *allocation_names[] = {"ptr", "nbytes", "owner", "device"};

static PyObject *allocator_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"allocation", "device",    "api",     "ndarray", "dtype",
                            "uint8",      "alignment", "refused", NULL};
    PyObject *allocation, *device, *api, *ndarray, *dtype, *uint8, *refused = Py_None;
    Py_ssize_t alignment;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOn|O", names, &allocation, &device,
                                     &api, &ndarray, &dtype, &uint8, &alignment, &refused))
        return NULL;
    if (refused != Py_None && !PyCallable_Check(refused)) {
        PyErr_SetString(PyExc_TypeError, "HostAllocator's refused must be callable or None");
        return NULL;
    }
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
    const char **field_names = allocation_names;
    PyObject *fields[4] = {NULL, NULL, NULL, NULL};
    Py_ssize_t offsets[4];
    for (int i = 0; i < 4; i++) {
        /* The class's own slot descriptors (a member descriptor each): what the frozen
         * dataclass's __init__ sets through object.__setattr__. */
        PyObject *descr = PyDict_GetItemString(((PyTypeObject *)allocation)->tp_dict,
                                               field_names[i]);
        if (slot_offset(descr, "HostAllocator's Allocation", field_names[i], &offsets[i]) <
            0) {
            for (int k = 0; k < i; k++) Py_DECREF(fields[k]);
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
    for (int k = 0; k < 4; k++) self->offsets[k] = offsets[k];
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
    self->refused = refused == Py_None ? NULL : Py_NewRef(refused);
    return (PyObject *)self;
}

/* The size of nbytes when allocate() asks NumPy for its block, or 0 where it declines
 * beforehand (not an exact int, not positive, or past what fits with the alignment). */
static Py_ssize_t asked_size(HostAllocator *self, PyObject *nbytes) {
    if (!PyLong_CheckExact(nbytes)) return 0;
    Py_ssize_t n = PyLong_AsSsize_t(nbytes);
    if (n <= 0 || n > PY_SSIZE_T_MAX - self->alignment) {
        PyErr_Clear();
        return 0;
    }
    return n;
}

/* allocate()'s body: the block, or None where the Python version is to run. NumPy's
 * refusal is None too, its error moved to *refusal (a new reference, normalised, with its
 * traceback) where refusal is not NULL, else cleared. */
static PyObject *make_block(HostAllocator *self, PyObject *nbytes, PyObject **refusal) {
    Py_ssize_t n = asked_size(self, nbytes);
    if (n == 0) Py_RETURN_NONE;
    /* np.empty(nbytes + alignment, uint8): PyArray_NewFromDescr takes the dtype's
     * reference; NumPy allocates the data, uninitialised, and owns it. */
    Py_ssize_t whole = n + self->alignment;
    Py_INCREF(self->uint8);
    PyObject *raw = self->new_from_descr((PyTypeObject *)self->ndarray, self->uint8, 1, &whole,
                                         NULL, NULL, 0, NULL);
    if (raw == NULL) {
        if (refusal == NULL) {
            PyErr_Clear();
        } else {
            PyObject *kind, *value, *trace;
            PyErr_Fetch(&kind, &value, &trace);
            PyErr_NormalizeException(&kind, &value, &trace);
            if (trace != NULL && value != NULL) PyException_SetTraceback(value, trace);
            Py_XDECREF(kind);
            Py_XDECREF(trace);
            *refusal = value;
        }
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
    if (block != NULL) {
        field_write(block, self->offsets[0], ptr);
        field_write(block, self->offsets[1], nbytes);
        field_write(block, self->offsets[2], owner);
        field_write(block, self->offsets[3], self->device);
    }
    Py_DECREF(ptr);
    Py_DECREF(owner);
    return block;
}

/* allocate(nbytes): a page-aligned host block as an Allocation, or None where the Python
 * version is to run (see the top of this file). */
static PyObject *allocator_allocate(PyObject *op, PyObject *nbytes) {
    return make_block((HostAllocator *)op, nbytes, NULL);
}

/* tries(nbytes): whether allocate(nbytes) asks NumPy for the block (a None from it then
 * means NumPy refused: the Python version does not ask again). */
static PyObject *allocator_tries(PyObject *op, PyObject *nbytes) {
    return PyBool_FromLong(asked_size((HostAllocator *)op, nbytes) > 0);
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
    Py_VISIT(self->refused);
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
    Py_CLEAR(self->refused);
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
    {"tries", allocator_tries, METH_O,
     "tries(nbytes) -> bool: whether allocate(nbytes) asks NumPy for the block (its None "
     "is then NumPy's refusal)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot allocator_slots[] = {
    {Py_tp_new, allocator_new},
    {Py_tp_dealloc, allocator_dealloc},
    {Py_tp_traverse, allocator_traverse},
    {Py_tp_clear, allocator_clear},
    {Py_tp_methods, allocator_methods},
    {Py_tp_doc, "HostAllocator(allocation, device, api, ndarray, dtype, uint8, alignment, "
                "refused=None): "
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

/* ------------------------------------------------------------------ HostBooks
 *
 * HostBooks(ledger, allocator, clock, source).replace(ledger, held, nbytes, what): a
 * growth's replace on a host ledger in one call (a slot's growth calls it, then
 * Ledger.replace where it declines; the compiled growth through this module's C-API,
 * below), what Ledger.replace -> Ledger._take (arena/memory/ledger.py) do for a HostSource
 * (`source`, the class itself) where the ledger has no pending releases, no
 * alloc_context and no observer: the block in `held` (a list of at most one Allocation, the caller's only
 * reference to it) counted freed, `held` emptied and the block traced ("free", ptr,
 * nbytes, "", clock()); HostSource.release, whose body is empty, is not called; then a
 * block of `nbytes` from the HostAllocator above, counted live (the ledger's _live,
 * allocations, _handed, live_bytes, allocated_total, peak_bytes, peak_blocks) and traced
 * ("allocate", ptr, nbytes, what, clock()). The same stores in the same order as the Python
 * version, through the Ledger's slot descriptors, with no Python code run between them: an
 * interrupt finds the books before or after, never inside (a signal's handler waits for
 * the caller's next instruction).
 *
 * It returns the new Allocation, or None, with no exception, where the Python version is
 * to run from where this one stopped: before anything was done (not an exact Ledger, list,
 * Allocation or positive int; a ledger with pending releases, a context or an observer, or
 * whose source is not a HostSource itself), or after the old block was released (`held` empty then)
 * where the allocator declined (an allocator made without `refused`: Ledger._take then
 * asks the source). Where NumPy refuses the array it raises, after the old block went,
 * what Ledger.replace raises for the source's MemoryError (Ledger._refused, counted in
 * the books): one attempt at the memory, not one here and another in the source. A growth costs its Python frames and
 * their cold memory on a fresh arena (issue 32 item 4): this is three of them (replace,
 * _take, the source's allocate) and most of their statements. tests/memory/test_host_books.py compares its books with the Python
 * version's. */

enum {
    BOOK_LIVE,
    BOOK_HANDED,
    BOOK_ALLOCATIONS,
    BOOK_FREES,
    BOOK_LIVE_BYTES,
    BOOK_ALLOCATED_TOTAL,
    BOOK_FREED_TOTAL,
    BOOK_PEAK_BYTES,
    BOOK_PEAK_BLOCKS,
    BOOK_TRACE,
    BOOK_PENDING,
    BOOK_CONTEXT,
    BOOK_OBSERVER,
    BOOK_SOURCE,
    BOOK_COUNT
};

static const char *book_names[BOOK_COUNT] = {
    "_live",           "_handed",     "allocations", "frees",       "live_bytes",
    "allocated_total", "freed_total", "peak_bytes",  "peak_blocks", "trace",
    "pending",         "_alloc_context", "observer", "source"};

typedef struct {
    PyObject_HEAD
    PyTypeObject *ledger;     /* arena.memory.ledger.Ledger */
    PyObject *books[BOOK_COUNT]; /* its slot descriptors */
    Py_ssize_t offsets[BOOK_COUNT]; /* and their offsets */
    HostAllocator *allocator; /* the HostAllocator blocks come from */
    PyTypeObject *source;     /* arena.memory.sources.HostSource */
    PyObject *clock;          /* time.time */
    PyObject *append;         /* "append" */
    PyObject *free_word, *allocate_word, *empty; /* "free", "allocate", "" */
} HostBooks;

static PyObject *host_allocator_type; /* HostAllocator, for HostBooks' check */

static PyObject *book_get(HostBooks *self, PyObject *ledger, int which) {
    return field_read(ledger, self->offsets[which], book_names[which]);
}

static int book_set(HostBooks *self, PyObject *ledger, int which, PyObject *value) {
    field_write(ledger, self->offsets[which], value);
    return 0;
}

static PyObject *field_get(HostAllocator *allocator, PyObject *block, int which) {
    return field_read(block, allocator->offsets[which], allocation_names[which]);
}

static PyObject *books_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"ledger", "allocator", "clock", "source", NULL};
    PyObject *ledger, *allocator, *clock, *source;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO", names, &ledger, &allocator, &clock,
                                     &source))
        return NULL;
    if (!PyType_Check(ledger) || !PyType_Check(source) ||
        !PyObject_TypeCheck(allocator, (PyTypeObject *)host_allocator_type) ||
        !PyCallable_Check(clock)) {
        PyErr_SetString(PyExc_TypeError, "HostBooks needs the Ledger class, a HostAllocator, "
                                         "a clock and the HostSource class");
        return NULL;
    }
    PyObject *books[BOOK_COUNT] = {NULL};
    Py_ssize_t offsets[BOOK_COUNT];
    for (int i = 0; i < BOOK_COUNT; i++) {
        PyObject *descr = PyDict_GetItemString(((PyTypeObject *)ledger)->tp_dict, book_names[i]);
        if (slot_offset(descr, "HostBooks' Ledger", book_names[i], &offsets[i]) < 0) {
            for (int k = 0; k < i; k++) Py_DECREF(books[k]);
            return NULL;
        }
        books[i] = Py_NewRef(descr);
    }
    HostBooks *self = (HostBooks *)type->tp_alloc(type, 0);
    PyObject *words[4] = {PyUnicode_InternFromString("append"), PyUnicode_FromString("free"),
                          PyUnicode_FromString("allocate"), PyUnicode_FromString("")};
    if (self == NULL || words[0] == NULL || words[1] == NULL || words[2] == NULL ||
        words[3] == NULL) {
        for (int k = 0; k < BOOK_COUNT; k++) Py_DECREF(books[k]);
        for (int k = 0; k < 4; k++) Py_XDECREF(words[k]);
        Py_XDECREF(self);
        return NULL;
    }
    self->ledger = (PyTypeObject *)Py_NewRef(ledger);
    for (int k = 0; k < BOOK_COUNT; k++) self->books[k] = books[k];
    for (int k = 0; k < BOOK_COUNT; k++) self->offsets[k] = offsets[k];
    self->allocator = (HostAllocator *)Py_NewRef(allocator);
    self->source = (PyTypeObject *)Py_NewRef(source);
    self->clock = Py_NewRef(clock);
    self->append = words[0];
    self->free_word = words[1];
    self->allocate_word = words[2];
    self->empty = words[3];
    return (PyObject *)self;
}

/* trace.append((action, ptr, nbytes, what, clock())): 0, or -1 with an exception set. */
static int books_trace(HostBooks *self, PyObject *trace, PyObject *action, PyObject *ptr,
                       PyObject *nbytes, PyObject *what) {
    PyObject *now = PyObject_CallNoArgs(self->clock);
    if (now == NULL) return -1;
    PyObject *event = PyTuple_Pack(5, action, ptr, nbytes, what, now);
    Py_DECREF(now);
    if (event == NULL) return -1;
    PyObject *done = PyObject_CallMethodOneArg(trace, self->append, event);
    Py_DECREF(event);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* A counter of the ledger plus `delta` (an int; negative `sign`: minus): 0 or -1. */
static int books_add(HostBooks *self, PyObject *ledger, int which, PyObject *delta, int sign) {
    PyObject *value = book_get(self, ledger, which);
    if (value == NULL) return -1;
    PyObject *sum = sign < 0 ? PyNumber_Subtract(value, delta) : PyNumber_Add(value, delta);
    Py_DECREF(value);
    if (sum == NULL) return -1;
    int failed = book_set(self, ledger, which, sum);
    Py_DECREF(sum);
    return failed;
}

/* The block in held, counted freed (the Python version's release branch of _take): 0, or
 * -1 with an exception set. */
static int books_release(HostBooks *self, PyObject *ledger, PyObject *held, PyObject *live) {
    PyObject *block = Py_NewRef(PyList_GET_ITEM(held, 0));
    int result = -1;
    PyObject *key = PyLong_FromVoidPtr(block); /* id(block) */
    PyObject *nbytes = NULL, *ptr = NULL, *handed = NULL, *found = NULL;
    if (key == NULL) goto done;
    found = PyDict_GetItemWithError(live, key); /* borrowed */
    if (found == NULL && PyErr_Occurred()) goto done;
    if (found == block) {
        nbytes = field_get(self->allocator, block, 1);
        ptr = nbytes == NULL ? NULL : field_get(self->allocator, block, 0);
        handed = ptr == NULL ? NULL : book_get(self, ledger, BOOK_HANDED);
        if (handed == NULL) goto done;
        /* The stores of release(), in its order; only memory can fail them. */
        if (PyDict_DelItem(live, key) < 0) goto done;
        if (PyTuple_Check(handed) && PyTuple_GET_SIZE(handed) == 2 &&
            PyTuple_GET_ITEM(handed, 1) == block && book_set(self, ledger, BOOK_HANDED, Py_None) < 0)
            goto done;
        PyObject *one = PyLong_FromLong(1);
        if (one == NULL) goto done;
        int failed = books_add(self, ledger, BOOK_FREES, one, 1);
        Py_DECREF(one);
        if (failed || books_add(self, ledger, BOOK_LIVE_BYTES, nbytes, -1) < 0 ||
            books_add(self, ledger, BOOK_FREED_TOTAL, nbytes, 1) < 0)
            goto done;
        if (PyList_SetSlice(held, 0, PY_SSIZE_T_MAX, NULL) < 0) goto done;
        PyObject *trace = book_get(self, ledger, BOOK_TRACE);
        if (trace == NULL) goto done;
        failed = books_trace(self, trace, self->free_word, ptr, nbytes, self->empty);
        Py_DECREF(trace);
        if (failed) goto done;
        /* HostSource.release(block): nothing to do (NumPy frees the block with its last
         * view), so not called. */
    }
    result = PyList_SetSlice(held, 0, PY_SSIZE_T_MAX, NULL);
done:
    Py_XDECREF(handed);
    Py_XDECREF(ptr);
    Py_XDECREF(nbytes);
    Py_XDECREF(key);
    Py_DECREF(block); /* the old memory goes before the new is asked for */
    return result;
}

/* `error` with `cause` as its __cause__ and __context__ (`raise error from cause`); steals
 * the reference to cause. */
static void caused_by(PyObject *error, PyObject *cause) {
    PyException_SetContext(error, Py_NewRef(cause));
    PyException_SetCause(error, cause);
}

/* NumPy's `refusal` (stolen) as Ledger.replace raises it for the source's error: the
 * source's error is refused(nbytes) from refusal (HostSource.allocate's), and the raised
 * one ledger._refused(nbytes, what, that) from it. */
static void raise_refused(PyObject *refused, PyObject *ledger, PyObject *nbytes, PyObject *what,
                          PyObject *refusal) {
    PyObject *source_error = PyObject_CallOneArg(refused, nbytes);
    if (source_error == NULL || !PyExceptionInstance_Check(source_error)) {
        if (source_error != NULL) {
            Py_DECREF(source_error);
            PyErr_SetString(PyExc_TypeError, "HostAllocator's refused must return an exception");
        }
        Py_DECREF(refusal);
        return;
    }
    caused_by(source_error, refusal);
    PyObject *error = PyObject_CallMethod(ledger, "_refused", "OOO", nbytes, what, source_error);
    if (error == NULL || !PyExceptionInstance_Check(error)) {
        if (error != NULL) {
            Py_DECREF(error);
            PyErr_SetString(PyExc_TypeError, "Ledger._refused must return an exception");
        }
        Py_DECREF(source_error);
        return;
    }
    caused_by(error, source_error);
    PyErr_SetObject((PyObject *)Py_TYPE(error), error);
    Py_DECREF(error);
}

/* Whether Ledger.replace would call _take for a HostSource on `ledger` (an exact Ledger):
 * no pending releases, no alloc_context, no observer, the source a HostSource itself, its
 * books a dict. 1 yes, 0 no, -1 with an exception set. */
static int books_take(HostBooks *self, PyObject *ledger) {
    for (int which = BOOK_PENDING; which <= BOOK_SOURCE; which++) {
        PyObject *value = book_get(self, ledger, which);
        if (value == NULL) return -1;
        int other = which == BOOK_SOURCE ? !Py_IS_TYPE(value, self->source) : value != Py_None;
        Py_DECREF(value);
        if (other) return 0;
    }
    PyObject *live = book_get(self, ledger, BOOK_LIVE);
    if (live == NULL) return -1;
    int dict = PyDict_CheckExact(live);
    Py_DECREF(live);
    return dict;
}

static PyObject *books_replace_taken(HostBooks *self, PyObject *ledger, PyObject *held,
                                     PyObject *nbytes, PyObject *what);

static PyObject *books_replace(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
    HostBooks *self = (HostBooks *)op;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "replace(ledger, held, nbytes, what) takes 4 arguments");
        return NULL;
    }
    PyObject *ledger = args[0], *held = args[1], *nbytes = args[2], *what = args[3];
    if (!Py_IS_TYPE(ledger, self->ledger) || !PyList_CheckExact(held) ||
        PyList_GET_SIZE(held) > 1 || !PyLong_CheckExact(nbytes) ||
        (PyList_GET_SIZE(held) == 1 &&
         !Py_IS_TYPE(PyList_GET_ITEM(held, 0), self->allocator->allocation)))
        Py_RETURN_NONE;
    Py_ssize_t n = PyLong_AsSsize_t(nbytes);
    if (n <= 0) { /* the ledger never asks for less than a byte; past Py_ssize_t: Python */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int taken = books_take(self, ledger);
    if (taken < 0) return NULL;
    if (!taken) Py_RETURN_NONE;
    return books_replace_taken(self, ledger, held, nbytes, what);
}

/* books_replace once its arguments and the ledger are checked (`nbytes` a positive exact
 * int that fits Py_ssize_t, `held` a list of at most one Allocation): the new Allocation,
 * None where the allocator declined (the old block released, `held` emptied), or NULL. */
static PyObject *books_replace_taken(HostBooks *self, PyObject *ledger, PyObject *held,
                                     PyObject *nbytes, PyObject *what) {
    PyObject *live = book_get(self, ledger, BOOK_LIVE);
    if (live == NULL) return NULL;
    if (!PyDict_CheckExact(live)) { /* nothing done: Ledger.replace takes the same held */
        Py_DECREF(live);
        Py_RETURN_NONE;
    }
    PyObject *allocation = NULL, *key = NULL, *count = NULL, *handed = NULL, *ptr = NULL;
    PyObject *result = NULL;
    if (PyList_GET_SIZE(held) == 1 && books_release(self, ledger, held, live) < 0) goto done;
    PyObject *refusal = NULL;
    allocation = make_block(self->allocator, nbytes, &refusal);
    if (allocation == NULL) goto done;
    if (allocation == Py_None) {
        if (refusal != NULL && self->allocator->refused != NULL) {
            /* NumPy refused, after the old block went (held emptied): what Ledger.replace
             * raises for the source's error (its books count it), rather than declining
             * for the source to ask NumPy a second time. */
            Py_CLEAR(allocation);
            raise_refused(self->allocator->refused, ledger, nbytes, what, refusal);
            goto done;
        }
        Py_XDECREF(refusal); /* declined: the Python version asks the source */
        result = allocation;
        allocation = NULL;
        goto done;
    }
    /* The allocator's block holds exactly nbytes (the size check of _take holds). */
    key = PyLong_FromVoidPtr(allocation);
    PyObject *allocations = key == NULL ? NULL : book_get(self, ledger, BOOK_ALLOCATIONS);
    if (allocations == NULL) goto done;
    PyObject *one = PyLong_FromLong(1);
    count = one == NULL ? NULL : PyNumber_Add(allocations, one);
    Py_XDECREF(one);
    Py_DECREF(allocations);
    handed = count == NULL ? NULL : PyTuple_Pack(2, count, allocation);
    ptr = handed == NULL ? NULL : field_get(self->allocator, allocation, 0);
    if (ptr == NULL) goto done;
    /* Counted by plain stores, as in _take; made beforehand, so only the dict's insert
     * can fail (memory), before anything is counted. */
    if (PyDict_SetItem(live, key, allocation) < 0) goto done;
    if (book_set(self, ledger, BOOK_ALLOCATIONS, count) < 0 ||
        book_set(self, ledger, BOOK_HANDED, handed) < 0 ||
        books_add(self, ledger, BOOK_LIVE_BYTES, nbytes, 1) < 0 ||
        books_add(self, ledger, BOOK_ALLOCATED_TOTAL, nbytes, 1) < 0)
        goto done;
    PyObject *peak = book_get(self, ledger, BOOK_PEAK_BYTES);
    PyObject *now = peak == NULL ? NULL : book_get(self, ledger, BOOK_LIVE_BYTES);
    int higher = now == NULL ? -1 : PyObject_RichCompareBool(now, peak, Py_GT);
    if (higher > 0 && book_set(self, ledger, BOOK_PEAK_BYTES, now) < 0) higher = -1;
    Py_XDECREF(peak);
    Py_XDECREF(now);
    if (higher < 0) goto done;
    PyObject *blocks = PyLong_FromSsize_t(PyDict_GET_SIZE(live));
    peak = blocks == NULL ? NULL : book_get(self, ledger, BOOK_PEAK_BLOCKS);
    higher = peak == NULL ? -1 : PyObject_RichCompareBool(blocks, peak, Py_GT);
    if (higher > 0 && book_set(self, ledger, BOOK_PEAK_BLOCKS, blocks) < 0) higher = -1;
    Py_XDECREF(peak);
    Py_XDECREF(blocks);
    if (higher < 0) goto done;
    PyObject *trace = book_get(self, ledger, BOOK_TRACE);
    if (trace == NULL) goto done;
    int failed = books_trace(self, trace, self->allocate_word, ptr, nbytes, what);
    Py_DECREF(trace);
    if (failed) goto done;
    result = allocation;
    allocation = NULL;
done:
    Py_XDECREF(allocation);
    Py_XDECREF(ptr);
    Py_XDECREF(handed);
    Py_XDECREF(count);
    Py_XDECREF(key);
    Py_DECREF(live);
    return result;
}

static int books_traverse(HostBooks *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->ledger);
    for (int k = 0; k < BOOK_COUNT; k++) Py_VISIT(self->books[k]);
    Py_VISIT(self->allocator);
    Py_VISIT(self->source);
    Py_VISIT(self->clock);
    return 0;
}

static int books_clear(HostBooks *self) {
    Py_CLEAR(self->ledger);
    for (int k = 0; k < BOOK_COUNT; k++) Py_CLEAR(self->books[k]);
    Py_CLEAR(self->allocator);
    Py_CLEAR(self->source);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->append);
    Py_CLEAR(self->free_word);
    Py_CLEAR(self->allocate_word);
    Py_CLEAR(self->empty);
    return 0;
}

static void books_dealloc(HostBooks *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    books_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef books_methods[] = {
    {"replace", (PyCFunction)(void (*)(void))books_replace, METH_FASTCALL,
     "replace(ledger, held, nbytes, what) -> Allocation or None: Ledger.replace for a "
     "HostSource in C; None where the Python version is to run from where this stopped."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot books_slots[] = {
    {Py_tp_new, books_new},
    {Py_tp_dealloc, books_dealloc},
    {Py_tp_traverse, books_traverse},
    {Py_tp_clear, books_clear},
    {Py_tp_methods, books_methods},
    {Py_tp_doc, "HostBooks(ledger, allocator, clock, source): a host ledger's growth in C "
                "(arena/memory/_host.c)."},
    {0, NULL},
};

static PyType_Spec books_spec = {
    "arena.memory._host.HostBooks",
    sizeof(HostBooks),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    books_slots,
};

/* ------------------------------------------------------------------ the C-API
 *
 * What a higher layer's compiled code asks of HostBooks (arena/memory/_host_api.h), exported
 * as the capsule "arena.memory._host._C_API": a slot's compiled growth (arena/slots/_growth.c)
 * checks that the books take a ledger, then has them replace its block, and installs what
 * they return itself. This module knows no slot. */

static PyObject *api_books_of(PyObject *replace) {
    if (!PyCFunction_Check(replace) ||
        PyCFunction_GET_FUNCTION(replace) != (PyCFunction)(void (*)(void))books_replace)
        return NULL;
    return PyCFunction_GET_SELF(replace); /* NULL for an unbound one */
}

static int api_takes(PyObject *books, PyObject *ledger) {
    HostBooks *self = (HostBooks *)books;
    if (!Py_IS_TYPE(ledger, self->ledger)) return 0;
    return books_take(self, ledger);
}

static int api_is_block(PyObject *books, PyObject *block) {
    return Py_IS_TYPE(block, ((HostBooks *)books)->allocator->allocation);
}

static PyObject *api_allocations(PyObject *books, PyObject *ledger) {
    return book_get((HostBooks *)books, ledger, BOOK_ALLOCATIONS);
}

static PyObject *api_replace(PyObject *books, PyObject *ledger, PyObject *held,
                             PyObject *nbytes, PyObject *what) {
    return books_replace_taken((HostBooks *)books, ledger, held, nbytes, what);
}

static ArenaHostAPI host_api = {
    ARENA_HOST_API_VERSION, api_books_of, api_takes, api_is_block, api_allocations, api_replace,
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
    if (type == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    host_allocator_type = Py_NewRef(type); /* kept for HostBooks' check */
    if (PyModule_AddObject(m, "HostAllocator", type) < 0) {
        Py_DECREF(type);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *books = PyType_FromSpec(&books_spec);
    if (books == NULL || PyModule_AddObject(m, "HostBooks", books) < 0) {
        Py_XDECREF(books);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(&host_api, ARENA_HOST_API_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
