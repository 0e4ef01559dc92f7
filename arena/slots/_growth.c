/*
 * arena.slots._growth: a slot's growth for a request in C, the compiled form of Slot.ensure
 * and Slot._grow (arena/slots/slot.py), as arena/views/_hit.c is the compiled form of the
 * hit. It belongs to the slots layer: it writes the Slot's fields (its buffer, growths,
 * high-water mark and calls) as the Slot's own methods write them, and reads the
 * Governor's. What it asks of the memory layer, the host ledger's compiled replace
 * (HostBooks, arena/memory/_host.c), goes through the C-API that module exports
 * (arena/memory/_host_api.h, the capsule "arena.memory._host._C_API", imported once when
 * this module is imported): the memory layer books blocks and knows nothing of slots.
 *
 * Built where arena.memory._host is built (setup.py); where that one is not in use, or
 * exports another version of its C-API, this module does not import and Slot.ensure runs
 * in Python (arena/slots/slot.py's _compiled_growth).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "../base/_fields.h"
#include "../memory/_host_api.h"

/* The memory layer's C-API, set when this module is imported. */
static ArenaHostAPI *host_api;


/*
 * SlotGrowth(slot, buffer, governor, mutex, namespace, max_bytes).grow(slot, required): a
 * slot's growth for a request (Slot.ensure -> Slot._grow -> the host ledger's compiled
 * replace, arena/slots/slot.py) in one call, where the common case holds: the request
 * needs more than the slot's buffer holds, the arena is open, awake and unlocked, no
 * capture probe, no cap (max_bytes), no poisoning, the "exact" growth policy, a source
 * that does not grow in place, no sibling slot, nothing pending, the old buffer never
 * served a capture, and the slot module's compiled replace (namespace["_REPLACE"][0]) is
 * HostBooks.replace itself over a ledger it takes (the C-API's books_of and takes).
 * `slot`, `buffer`, `governor` are the Slot, Buffer and Governor classes, `mutex` the
 * RLock type, `max_bytes` the most bytes a buffer addresses (arena.base.layout.MAX_BYTES).
 *
 * It returns what Slot.ensure returns, (the slot's new buffer, [(slot, old capacity, new
 * capacity)]), with the same stores in the same order: under the governor's mutex (taken
 * and released as `with governor.mutex` does), an empty Buffer installed, the old block
 * released and the new one allocated and counted (the C-API's replace: the peak is the
 * new size), the new Buffer installed in one store, then the slot's growths, high-water
 * mark and calls. It returns None, with nothing done, wherever the common case
 * does not hold: Slot.ensure then runs in Python, its mirror. Where the allocator declines
 * after the old block went, Ledger.replace is called with the same `held`, as Slot._grow
 * calls it; where anything fails after the empty Buffer is installed, what Slot._grow's
 * `except` clause does is done (ledger.reclaim(mark), slot._restore(old capacity, None,
 * held, error)) and the error raised. The Buffers, the resize, the list and the counts are
 * made before the empty Buffer goes in, so nothing but the allocation can fail after it.
 * Between the mutex's acquire and release no Python code runs on this path (a signal's
 * handler waits for the caller's next instruction), so an interrupt finds the slot before
 * the growth or after it (issue 32 item 4: Slot.ensure's and Slot._grow's frames and two
 * Buffer.__init__ frames were a fresh arena's grown first request's largest Python cost).
 * tests/slots/test_slot_growth_compiled.py compares it with the Python version.
 */

enum {
    SLOT_GOVERNOR,
    SLOT_BUFFER,
    SLOT_PENDING,
    SLOT_SIBLINGS,
    SLOT_HIGH_WATER,
    SLOT_CALLS,
    SLOT_GROWTHS,
    SLOT_SCRATCH_NAME,
    SLOT_FIELDS
};
static const char *slot_names[SLOT_FIELDS] = {"governor",   "buffer", "pending", "_siblings",
                                              "high_water", "calls",  "growths", "scratch_name"};

enum {
    GOV_MUTEX,
    GOV_CLOSED,
    GOV_ASLEEP,
    GOV_LOCKED,
    GOV_CAPTURE_PROBE,
    GOV_MAX_BYTES,
    GOV_FIXED_ADDRESS,
    GOV_POISON,
    GOV_GROWTH,
    GOV_ALIGNMENT,
    GOV_LEDGER,
    GOV_FIELDS
};
static const char *governor_names[GOV_FIELDS] = {
    "mutex",         "closed", "asleep", "locked",    "capture_probe", "max_bytes",
    "fixed_address", "poison", "growth", "alignment", "ledger"};

/* In Buffer.__init__'s order. */
enum { BUF_ALLOCATION, BUF_CAPACITY, BUF_WRAPPERS, BUF_PREPARED, BUF_CAPTURED, BUF_POISONED_END,
       BUF_FIELDS };
static const char *buffer_names[BUF_FIELDS] = {"allocation", "capacity", "wrappers",
                                               "prepared",   "captured", "poisoned_end"};

typedef struct {
    PyObject_HEAD
    PyTypeObject *slot_type, *buffer_type, *governor_type, *mutex_type;
    Py_ssize_t slot_fields[SLOT_FIELDS];   /* the slots' offsets, bound once */
    Py_ssize_t governor_fields[GOV_FIELDS];
    Py_ssize_t buffer_fields[BUF_FIELDS];
    PyObject *acquire, *release; /* the RLock type's methods */
    PyObject *namespace;         /* the slot module's globals: "_REPLACE" read per call */
    PyObject *replace_key;       /* "_REPLACE" */
    PyObject *exact, *zero;      /* "exact", 0 */
    PyObject *reclaim_word, *restore_word, *replace_word; /* method names */
    Py_ssize_t max_bytes;
} SlotGrowth;

/* The offsets of the class's own slots named in names, into out: 0, or -1 with a
 * TypeError. */
static int member_descriptors(PyTypeObject *type, const char **names, int count,
                              Py_ssize_t *out) {
    for (int i = 0; i < count; i++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, names[i]);
        if (slot_offset(descr, type->tp_name, names[i], &out[i]) < 0) return -1;
    }
    return 0;
}

#define SLOT_GET(self, obj, which) field_read((obj), (self)->slot_fields[which], slot_names[which])
#define GOV_GET(self, obj, which) \
    field_read((obj), (self)->governor_fields[which], governor_names[which])
#define BUF_GET(self, obj, which) field_read((obj), (self)->buffer_fields[which], buffer_names[which])

static PyObject *growth_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"slot", "buffer", "governor", "mutex", "namespace", "max_bytes",
                            NULL};
    PyObject *slot, *buffer, *governor, *mutex, *namespace;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOn", names, &slot, &buffer, &governor,
                                     &mutex, &namespace, &max_bytes))
        return NULL;
    if (!PyType_Check(slot) || !PyType_Check(buffer) || !PyType_Check(governor) ||
        !PyType_Check(mutex) || !PyDict_CheckExact(namespace) || max_bytes <= 0) {
        PyErr_SetString(PyExc_TypeError, "SlotGrowth needs the Slot, Buffer and Governor "
                                         "classes, the RLock type, the slot module's globals "
                                         "and a positive max_bytes");
        return NULL;
    }
    /* Buffers are made here as Buffer.__init__ makes them: its slots, all of them. */
    PyObject *declared = PyObject_GetAttrString(buffer, "__slots__");
    int known = declared != NULL && PyTuple_Check(declared) &&
                PyTuple_GET_SIZE(declared) == BUF_FIELDS;
    Py_XDECREF(declared);
    if (!known) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "SlotGrowth knows a Buffer of %d slots", BUF_FIELDS);
        return NULL;
    }
    SlotGrowth *self = (SlotGrowth *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->slot_type = (PyTypeObject *)Py_NewRef(slot);
    self->buffer_type = (PyTypeObject *)Py_NewRef(buffer);
    self->governor_type = (PyTypeObject *)Py_NewRef(governor);
    self->mutex_type = (PyTypeObject *)Py_NewRef(mutex);
    self->namespace = Py_NewRef(namespace);
    self->max_bytes = max_bytes;
    if (member_descriptors((PyTypeObject *)slot, slot_names, SLOT_FIELDS, self->slot_fields) <
            0 ||
        member_descriptors((PyTypeObject *)governor, governor_names, GOV_FIELDS,
                           self->governor_fields) < 0 ||
        member_descriptors((PyTypeObject *)buffer, buffer_names, BUF_FIELDS,
                           self->buffer_fields) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->acquire = PyObject_GetAttrString(mutex, "acquire");
    self->release = self->acquire == NULL ? NULL : PyObject_GetAttrString(mutex, "release");
    self->replace_key = PyUnicode_InternFromString("_REPLACE");
    self->exact = PyUnicode_InternFromString("exact");
    self->zero = PyLong_FromLong(0);
    self->reclaim_word = PyUnicode_InternFromString("reclaim");
    self->restore_word = PyUnicode_InternFromString("_restore");
    self->replace_word = PyUnicode_InternFromString("replace");
    if (self->release == NULL || self->replace_key == NULL || self->exact == NULL ||
        self->zero == NULL || self->reclaim_word == NULL || self->restore_word == NULL ||
        self->replace_word == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* A value the Python version reads as false, of a type whose truth runs no Python code. */
static int plainly_false(PyObject *value) {
    if (value == Py_False) return 1;
    return PyLong_CheckExact(value) && PyObject_Not(value) == 1;
}

/* Buffer(allocation, capacity) as Buffer.__init__ makes it (its stores in its order). */
static PyObject *growth_buffer(SlotGrowth *self, PyObject *allocation, PyObject *capacity) {
    PyObject *buffer = self->buffer_type->tp_alloc(self->buffer_type, 0);
    if (buffer == NULL) return NULL;
    PyObject *wrappers = PyDict_New();
    PyObject *prepared = wrappers == NULL ? NULL : PyDict_New();
    Py_ssize_t *fields = self->buffer_fields;
    if (prepared == NULL) {
        Py_CLEAR(buffer);
    } else {
        field_write(buffer, fields[BUF_ALLOCATION], allocation);
        field_write(buffer, fields[BUF_CAPACITY], capacity);
        field_write(buffer, fields[BUF_WRAPPERS], wrappers);
        field_write(buffer, fields[BUF_PREPARED], prepared);
        field_write(buffer, fields[BUF_CAPTURED], Py_False);
        field_write(buffer, fields[BUF_POISONED_END], self->zero);
    }
    Py_XDECREF(wrappers);
    Py_XDECREF(prepared);
    return buffer;
}

/* The exception set now, normalised, with its traceback attached; the caller owns it. */
static PyObject *growth_fetch(void) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (value != NULL && traceback != NULL) PyException_SetTraceback(value, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
}

/* Raise `error` (stolen) again; one set meanwhile is raised instead, `error` its context. */
static void growth_raise(PyObject *error) {
    if (PyErr_Occurred()) {
        PyObject *later = growth_fetch();
        if (later != NULL) {
            PyException_SetContext(later, error); /* steals error */
            error = later;
        }
    }
    if (error != NULL) PyErr_SetObject((PyObject *)Py_TYPE(error), error);
    Py_XDECREF(error);
}

/* Slot.ensure's growth with the mutex held: the result, None (declined, nothing done), or
 * NULL with an exception set. */
static PyObject *growth_locked(SlotGrowth *self, PyObject *books, PyObject *slot,
                               PyObject *governor, PyObject *required, Py_ssize_t need) {
    PyObject *values[GOV_FIELDS] = {NULL};
    PyObject *own[SLOT_FIELDS] = {NULL};
    PyObject *result = NULL, *old_capacity = NULL, *captured = NULL, *block = NULL;
    PyObject *mark = NULL, *empty = NULL, *fresh = NULL, *held = NULL, *capacity = NULL;
    PyObject *resizes = NULL, *calls = NULL, *growths = NULL, *allocation = NULL;
    PyObject *one = NULL;
    for (int i = GOV_CLOSED; i < GOV_FIELDS; i++) {
        values[i] = GOV_GET(self, governor, i);
        if (values[i] == NULL) goto done;
    }
    for (int i = SLOT_BUFFER; i < SLOT_FIELDS; i++) {
        own[i] = SLOT_GET(self, slot, i);
        if (own[i] == NULL) goto done;
    }
    PyObject *ledger = values[GOV_LEDGER], *buffer = own[SLOT_BUFFER];
    PyObject *growth = values[GOV_GROWTH], *alignment = values[GOV_ALIGNMENT];
    if (!plainly_false(values[GOV_CLOSED]) || !plainly_false(values[GOV_ASLEEP]) ||
        !plainly_false(values[GOV_LOCKED]) || values[GOV_CAPTURE_PROBE] != Py_None ||
        values[GOV_MAX_BYTES] != Py_None || values[GOV_FIXED_ADDRESS] != Py_False ||
        values[GOV_POISON] != Py_False || !PyUnicode_CheckExact(growth) ||
        PyUnicode_Compare(growth, self->exact) != 0 || !PyLong_CheckExact(alignment) ||
        !Py_IS_TYPE(buffer, self->buffer_type) ||
        !PyLong_CheckExact(own[SLOT_PENDING]) || PyObject_Not(own[SLOT_PENDING]) != 1 ||
        !PyTuple_CheckExact(own[SLOT_SIBLINGS]) || PyTuple_GET_SIZE(own[SLOT_SIBLINGS]) != 0 ||
        !PyLong_CheckExact(own[SLOT_HIGH_WATER]) || !PyLong_CheckExact(own[SLOT_CALLS]) ||
        !PyLong_CheckExact(own[SLOT_GROWTHS]) || !PyUnicode_CheckExact(own[SLOT_SCRATCH_NAME]))
        goto decline;
    Py_ssize_t align = PyLong_AsSsize_t(alignment);
    if (align == -1 && PyErr_Occurred()) PyErr_Clear(); /* past Py_ssize_t: declined below */
    if (align <= 0 || (align & (align - 1)) || align > self->max_bytes || need > self->max_bytes)
        goto decline; /* another alignment, or past what a buffer addresses: Python */
    old_capacity = BUF_GET(self, buffer, BUF_CAPACITY);
    captured = old_capacity == NULL ? NULL : BUF_GET(self, buffer, BUF_CAPTURED);
    block = captured == NULL ? NULL : BUF_GET(self, buffer, BUF_ALLOCATION);
    if (block == NULL) goto done;
    if (!PyLong_CheckExact(old_capacity) || captured != Py_False ||
        (block != Py_None && !host_api->is_block(books, block)))
        goto decline;
    Py_ssize_t old = PyLong_AsSsize_t(old_capacity);
    if (old == -1 && PyErr_Occurred()) PyErr_Clear(); /* past Py_ssize_t: declined below */
    if (old < 0 || need <= old) goto decline; /* it fits (or pends): no growth of this kind */
    /* The "exact" policy: rounded up to the alignment (Slot._grow writes it out too). */
    Py_ssize_t size = ((need > align ? need : align) + align - 1) & -align;
    if (size > self->max_bytes) goto decline;
    int taken = host_api->takes(books, ledger); /* an exact Ledger it books */
    if (taken < 0) goto done;
    if (!taken) goto decline;
    /* All made before the empty buffer goes in: only the allocation can fail after it. */
    mark = host_api->allocations(books, ledger);
    capacity = mark == NULL ? NULL : PyLong_FromSsize_t(size);
    empty = capacity == NULL ? NULL : growth_buffer(self, Py_None, self->zero);
    fresh = empty == NULL ? NULL : growth_buffer(self, Py_None, self->zero);
    held = fresh == NULL ? NULL : PyList_New(block == Py_None ? 0 : 1);
    if (held == NULL) goto done;
    if (block != Py_None) PyList_SET_ITEM(held, 0, Py_NewRef(block));
    PyObject *resize = PyTuple_Pack(3, slot, old_capacity, capacity);
    resizes = resize == NULL ? NULL : PyList_New(1);
    if (resizes == NULL) {
        Py_XDECREF(resize);
        goto done;
    }
    PyList_SET_ITEM(resizes, 0, resize);
    one = PyLong_FromLong(1);
    growths = one == NULL ? NULL : PyNumber_Add(own[SLOT_GROWTHS], one);
    calls = growths == NULL ? NULL : PyNumber_Add(own[SLOT_CALLS], one);
    int higher = calls == NULL ? -1 : PyObject_RichCompareBool(required, own[SLOT_HIGH_WATER],
                                                               Py_GT);
    result = higher < 0 ? NULL : PyTuple_New(2);
    if (result == NULL) goto done;
    PyObject *high = higher ? required : own[SLOT_HIGH_WATER];
    /* No reference to the old buffer or block but `held`'s from here (Slot._grow's `del
     * old, block`): the old memory goes back before the new is asked for. */
    Py_CLEAR(block);
    Py_CLEAR(captured);
    Py_CLEAR(own[SLOT_BUFFER]);
    buffer = NULL;
    /* Slot._grow's try: */
    field_write(slot, self->slot_fields[SLOT_BUFFER], empty);
    allocation = host_api->replace(books, ledger, held, capacity, own[SLOT_SCRATCH_NAME]);
    if (allocation == Py_None) { /* declined: Ledger.replace with the same held */
        Py_DECREF(allocation);
        allocation = PyObject_CallMethodObjArgs(ledger, self->replace_word, held, capacity,
                                                own[SLOT_SCRATCH_NAME], NULL);
    }
    if (allocation == NULL) goto failed;
    field_write(fresh, self->buffer_fields[BUF_ALLOCATION], allocation);
    field_write(fresh, self->buffer_fields[BUF_CAPACITY], capacity);
    field_write(slot, self->slot_fields[SLOT_BUFFER], fresh);
    /* After the try, as Slot._grow and Slot.ensure count them. */
    field_write(slot, self->slot_fields[SLOT_GROWTHS], growths);
    field_write(slot, self->slot_fields[SLOT_HIGH_WATER], high);
    field_write(slot, self->slot_fields[SLOT_CALLS], calls);
    PyObject *now = SLOT_GET(self, slot, SLOT_BUFFER);
    if (now == NULL) {
        Py_CLEAR(result);
        goto done;
    }
    PyTuple_SET_ITEM(result, 0, now);
    PyTuple_SET_ITEM(result, 1, resizes);
    resizes = NULL;
    goto done;
failed: {
    /* Slot._grow's except clause: ledger.reclaim(mark); slot._restore(old_capacity, None,
     * held, exc); raise. */
    Py_CLEAR(result);
    PyObject *error = growth_fetch();
    PyObject *done_ = PyObject_CallMethodOneArg(ledger, self->reclaim_word, mark);
    if (done_ != NULL) {
        Py_DECREF(done_);
        done_ = PyObject_CallMethodObjArgs(slot, self->restore_word, old_capacity, Py_None,
                                           held, error == NULL ? Py_None : error, NULL);
        Py_XDECREF(done_);
    }
    growth_raise(error);
    goto done;
}
decline:
    result = Py_NewRef(Py_None);
done:
    for (int i = 0; i < GOV_FIELDS; i++) Py_XDECREF(values[i]);
    for (int i = 0; i < SLOT_FIELDS; i++) Py_XDECREF(own[i]);
    Py_XDECREF(old_capacity);
    Py_XDECREF(captured);
    Py_XDECREF(block);
    Py_XDECREF(mark);
    Py_XDECREF(empty);
    Py_XDECREF(fresh);
    Py_XDECREF(held);
    Py_XDECREF(capacity);
    Py_XDECREF(resizes);
    Py_XDECREF(calls);
    Py_XDECREF(growths);
    Py_XDECREF(allocation);
    Py_XDECREF(one);
    return result;
}

static PyObject *growth_grow(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
    SlotGrowth *self = (SlotGrowth *)op;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "grow(slot, required) takes 2 arguments");
        return NULL;
    }
    PyObject *slot = args[0], *required = args[1];
    if (!Py_IS_TYPE(slot, self->slot_type) || !PyLong_CheckExact(required)) Py_RETURN_NONE;
    Py_ssize_t need = PyLong_AsSsize_t(required);
    if (need <= 0) { /* a zero-byte request never grows; past Py_ssize_t: Python */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    /* The slot module's compiled replace, read per call (a test may set it aside): only
     * HostBooks.replace itself is done here. */
    PyObject *kept = PyDict_GetItemWithError(self->namespace, self->replace_key);
    if (kept == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (!PyList_CheckExact(kept) || PyList_GET_SIZE(kept) != 1) Py_RETURN_NONE;
    PyObject *replace = PyList_GET_ITEM(kept, 0);
    PyObject *books = host_api->books_of(replace);
    if (books == NULL) Py_RETURN_NONE;
    Py_INCREF(books);
    PyObject *governor = SLOT_GET(self, slot, SLOT_GOVERNOR);
    PyObject *mutex = governor == NULL ? NULL : GOV_GET(self, governor, GOV_MUTEX);
    PyObject *result = NULL;
    if (mutex == NULL) goto done;
    if (!Py_IS_TYPE(governor, self->governor_type) || !Py_IS_TYPE(mutex, self->mutex_type)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* with governor.mutex: */
    PyObject *entered = PyObject_Vectorcall(self->acquire, &mutex, 1, NULL);
    if (entered == NULL) goto done;
    Py_DECREF(entered);
    result = growth_locked(self, books, slot, governor, required, need);
    PyObject *error = result == NULL ? growth_fetch() : NULL;
    PyObject *left = PyObject_Vectorcall(self->release, &mutex, 1, NULL);
    if (left == NULL) Py_CLEAR(result);
    Py_XDECREF(left);
    if (error != NULL) growth_raise(error);
done:
    Py_XDECREF(mutex);
    Py_XDECREF(governor);
    Py_DECREF(books);
    return result;
}

static int growth_traverse(SlotGrowth *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->slot_type);
    Py_VISIT(self->buffer_type);
    Py_VISIT(self->governor_type);
    Py_VISIT(self->mutex_type);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->namespace);
    return 0;
}

static int growth_clear(SlotGrowth *self) {
    Py_CLEAR(self->slot_type);
    Py_CLEAR(self->buffer_type);
    Py_CLEAR(self->governor_type);
    Py_CLEAR(self->mutex_type);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->namespace);
    Py_CLEAR(self->replace_key);
    Py_CLEAR(self->exact);
    Py_CLEAR(self->zero);
    Py_CLEAR(self->reclaim_word);
    Py_CLEAR(self->restore_word);
    Py_CLEAR(self->replace_word);
    return 0;
}

static void growth_dealloc(SlotGrowth *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    growth_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef growth_methods[] = {
    {"grow", (PyCFunction)(void (*)(void))growth_grow, METH_FASTCALL,
     "grow(slot, required) -> (buffer, resizes) or None: Slot.ensure's growth in C for the "
     "common case; None, with nothing done, where Slot.ensure is to run."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot growth_slots[] = {
    {Py_tp_new, growth_new},
    {Py_tp_dealloc, growth_dealloc},
    {Py_tp_traverse, growth_traverse},
    {Py_tp_clear, growth_clear},
    {Py_tp_methods, growth_methods},
    {Py_tp_doc, "SlotGrowth(slot, buffer, governor, mutex, namespace, max_bytes): a slot's "
                "growth for a request in C (arena/slots/_growth.c)."},
    {0, NULL},
};

static PyType_Spec growth_spec = {
    "arena.slots._growth.SlotGrowth",
    sizeof(SlotGrowth),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    growth_slots,
};


static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "arena.slots._growth",
    "A slot's compiled growth for a request: Slot.ensure's common case in one call.", -1,
    NULL,
};

PyMODINIT_FUNC PyInit__growth(void) {
    /* The memory layer's C-API, as NumPy's import_array() takes NumPy's: once. */
    ArenaHostAPI *api = (ArenaHostAPI *)PyCapsule_Import(ARENA_HOST_API_CAPSULE, 0);
    if (api == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError)) { /* a _host without the C-API */
            PyErr_Clear();
            PyErr_SetString(PyExc_ImportError, "arena.slots._growth needs the C-API of "
                                               "arena.memory._host: rebuild arena");
        }
        return NULL;
    }
    if (api->version != ARENA_HOST_API_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "arena.slots._growth was built for version %d of arena.memory._host's "
                     "C-API, which exports version %d: rebuild arena",
                     ARENA_HOST_API_VERSION, api->version);
        return NULL;
    }
    host_api = api;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *growth = PyType_FromSpec(&growth_spec);
    if (growth == NULL || PyModule_AddObject(m, "SlotGrowth", growth) < 0) {
        Py_XDECREF(growth);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
