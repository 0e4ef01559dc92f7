/* arena.views._hit: the compiled hit path of arena's fronts (optional; CPython API only,
 * but for the Planner's calls into NumPy's C-API table, found at run time (see the Planner
 * section)).
 *
 * It also builds a NumPy front's first sighting of a structure (Planner.views), which
 * mirrors a Python path and hands every other case to it. And it exports to the compiled
 * code of the layers above (arena/planning/_region_hit.c: a replayed step's and a scope's
 * requests) its request checks and fresh views, as a C-API (arena/views/_hit_api.h, the
 * capsule "arena.views._hit._C_API"; see the end of this file): this module knows nothing
 * of steps and scopes.
 *
 * A request an arena served before on the same slot buffer (a "hit") is one dictionary
 * lookup, a check that every dimension is a plain int, and one fresh view per tensor.
 * In pure Python that costs about a third more than the fresh views alone; here it costs
 * a few pointer reads. Everything that is not a plain hit (debug mode, a miss, a dimension
 * that is not an exact int, a capture probe, a caller whose call site is not known yet)
 * goes to the same Python methods the pure-Python path uses, so every guarantee is
 * written once, in Python (arena/front.py, views/builder.py, base/events.py), and
 * this file only skips work on the paths where the outcome is already decided.
 *
 * HitBase is the base class of arena.front.Front when this module is in use. Its
 * fields are the front's hit settings, readable and writable from Python under the same
 * names the pure-Python base (arena.views.hit.PyHitBase) has as slots:
 *
 *   _select      callable -> the caller's slot (the general selection)
 *   _slots       tuple of slots, or None: selection the C way (see select_slot)
 *   _tls         the selector's per-thread micro-batch binding (a Binding), or None
 *   _key         the front's key into Buffer.prepared
 *   _fresh_view  per-view callable that makes a fresh view (torch: the tensor's .data,
 *                numpy.ndarray.view); None: hand out the prepared view itself (cached
 *                fronts); False: this front takes the Python path for every request
 *   _debug       True: every request takes the Python path
 *   _probe       the capture probe or None
 *   _log         the request log (arena.base.events.RequestLog) or None
 *   _governor    the arena's governor (its `locked` flag)
 *   _builder     the front's ViewBuilder: its miss() and served()
 *
 * Binding is the per-thread micro-batch binding (arena.slots.selector): an int per thread,
 * kept in the thread state's dict under a key object of its own, read here without a
 * Python attribute lookup.
 *
 * A small memo per front (look_up) finds a repeated request in its cache by the key it is
 * remembered under, without hashing the nested request again.
 *
 * bind() tells the module where Slot, Buffer, Prepared, Governor and RequestLog keep the
 * attributes a hit reads (their __slots__ offsets), so it reads them without a name
 * lookup, and hands it the memos arena.base.events.caller_info keeps; and binds the slots
 * layer's C-API to Slot, RegionStack and Governor. Objects of any other type take the
 * Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

#include "../slots/_slot_api.h"
#include "_hit_api.h"

/* The slots layer's C-API (arena/slots/_slot_api.h), imported when this module is: what
 * this module changes of a slot or its region stack (a call counted, the stack's top and
 * live bytes, a region opened or closed, LOAD), it asks of it. It reads their fields
 * itself, at the offsets bind() finds. */
static ArenaSlotAPI *slot_api;

/* ------------------------------------------------------------------ Binding */

typedef struct {
    PyObject_HEAD
    PyObject *key; /* the key of this binding in every thread state's dict */
} Binding;

static PyTypeObject *binding_type;

/* A one-entry cache per OS thread of its last binding read: which binding, its value, and
 * the version it was read at. Every write to any binding, and every binding's end, moves
 * the version on, so a cached value is never stale and a new binding at a freed one's
 * address is never mistaken for it. (All of this runs under the GIL.) */
#if defined(_MSC_VER)
#define THREAD_LOCAL __declspec(thread)
#else
#define THREAD_LOCAL _Thread_local
#endif
static unsigned long long binding_version = 1;
static THREAD_LOCAL void *cached_binding;
static THREAD_LOCAL unsigned long long cached_version;
static THREAD_LOCAL Py_ssize_t cached_index;

/* The calling thread's micro-batch: a borrowed int (0 where it never bound), or NULL with
 * an exception set. */
static PyObject *binding_value(Binding *self) {
    PyObject *state = PyThreadState_GetDict();
    if (state == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "arena: no thread state dict");
        return NULL;
    }
    PyObject *value = PyDict_GetItemWithError(state, self->key);
    if (value != NULL || PyErr_Occurred()) return value;
    static PyObject *zero_ubatch;
    if (zero_ubatch == NULL && (zero_ubatch = PyLong_FromLong(0)) == NULL) return NULL;
    return zero_ubatch;
}

/* The calling thread's micro-batch as an index: 0 on success, -1 with an exception set. */
static int binding_index(Binding *self, Py_ssize_t *index) {
    if (cached_binding == (void *)self && cached_version == binding_version) {
        *index = cached_index;
        return 0;
    }
    PyObject *value = binding_value(self);
    if (value == NULL) return -1;
    Py_ssize_t found = PyLong_AsSsize_t(value);
    if (found == -1 && PyErr_Occurred()) return -1;
    cached_binding = (void *)self;
    cached_version = binding_version;
    cached_index = found;
    *index = found;
    return 0;
}

static PyObject *binding_get(PyObject *self, void *closure) {
    Py_ssize_t index;
    if (binding_index((Binding *)self, &index) < 0) return NULL;
    return PyLong_FromSsize_t(index);
}

static int binding_set(PyObject *self, PyObject *value, void *closure) {
    binding_version++;
    PyObject *state = PyThreadState_GetDict();
    if (state == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "arena: no thread state dict");
        return -1;
    }
    if (value == NULL) {
        if (PyDict_DelItem(state, ((Binding *)self)->key) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError)) return -1;
            PyErr_Clear();
        }
        return 0;
    }
    if (!PyLong_CheckExact(value)) {
        PyErr_Format(PyExc_TypeError, "ubatch must be an int, got %s", Py_TYPE(value)->tp_name);
        return -1;
    }
    return PyDict_SetItem(state, ((Binding *)self)->key, value);
}

static PyObject *binding_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "Binding() takes no arguments");
        return NULL;
    }
    Binding *self = (Binding *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    /* A fresh object: hashed by identity, equal to nothing else in any thread's dict. It
     * stays in the dicts of threads that bound until they end (an object of 16 bytes). */
    self->key = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    if (self->key == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void binding_dealloc(Binding *self) {
    PyTypeObject *type = Py_TYPE(self);
    binding_version++;
    Py_CLEAR(self->key);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyGetSetDef binding_getset[] = {
    {"ubatch", binding_get, binding_set,
     "The calling thread's micro-batch (0 where the thread never bound one).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot binding_slots[] = {
    {Py_tp_doc, "A per-thread micro-batch binding: `ubatch` reads and writes the calling "
                "thread's value (see arena.views.hit)."},
    {Py_tp_new, binding_new},
    {Py_tp_dealloc, binding_dealloc},
    {Py_tp_getset, binding_getset},
    {0, NULL},
};

static PyType_Spec binding_spec = {
    "arena.views._hit.Binding", sizeof(Binding), 0, Py_TPFLAGS_DEFAULT, binding_slots,
};

/* ------------------------------------------------------------------ HitBase */

/* Requests a front looked up lately, by a digest of their contents: the key object each
 * is remembered under (a tuple of shapes and dtype objects: holding it keeps no memory
 * alive) and its hash. A request equal to one of them is looked up by that key, whose
 * hash is known and which the cache finds by identity: no hashing, no comparing of the
 * nested tuples. The cache itself (the buffer's dict) still decides: a key it no longer
 * holds is a miss. */
#define MEMO_SIZE 64

typedef struct {
    PyObject *key;
    Py_hash_t hash;
    Py_uhash_t digest;
} MemoSlot;

typedef struct {
    PyObject_HEAD
    PyObject *select;
    PyObject *slots;
    PyObject *tls;
    PyObject *key;
    PyObject *fresh_view;
    PyObject *debug;
    PyObject *probe;
    PyObject *log;
    PyObject *governor;
    PyObject *builder;
    PyObject *planner;
    /* The call site of the last unlocked hit (a one-entry memo of caller_info's). */
    PyObject *site_code;
    int site_lasti;
    PyObject *site;
    MemoSlot memo[MEMO_SIZE];
} HitBase;

/* Where the hit reads its Python objects' attributes (set by bind()). */
static PyTypeObject *slot_type, *buffer_type, *prepared_type, *governor_type;
static PyTypeObject *log_type;
static Py_ssize_t slot_buffer, slot_detour, slot_index, slot_plain_high, slot_high_water;
static Py_ssize_t buffer_prepared, buffer_capacity, buffer_wrappers, buffer_allocation;
static Py_ssize_t prepared_views, prepared_used, prepared_required, prepared_key;
static Py_ssize_t governor_locked;
static Py_ssize_t log_peaks, log_last_requests, log_recorder;
static PyObject *sites_memo, *internal_memo;
static PyObject *str_miss, *str_python_request, *str_served, *served_names, *zero;

#define FIELD(object, offset) (*(PyObject **)((char *)(object) + (offset)))

/* The C-API this module exports (see the end of this file). */
static ArenaHitAPI hit_api;

static int member_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset) {
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name); /* borrowed */
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ member", type->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a writable object slot", type->tp_name,
                     name);
        return -1;
    }
    *offset = member->offset;
    return 0;
}

static void keep(PyObject **target, PyObject *value) {
    PyObject *old = *target;
    Py_INCREF(value);
    *target = value;
    Py_XDECREF(old);
}

/* `view.data` for a fresh view (torch's: adapters/torch.py's fresh_view is
 * operator.attrgetter("data")), read by the attribute's getter itself: what
 * PyObject_GetAttr(view, "data") calls for a type with the generic getattr and a getset
 * descriptor named data (a data descriptor: an instance dict never shadows it), without
 * the attrgetter call, the generic lookup and the descriptor's dispatch: code that a
 * torch pass's kernels evict from the CPU's caches between two requests. The getter is
 * looked up once per type and version tag (a type whose attributes change takes a new
 * tag, and is looked up again); `fresh` is recognized once (its type's name and repr).
 * A new reference, or NULL with *done 0 where `fresh` or the view's type is not that
 * (the caller calls fresh(view)); NULL with *done 1 and an exception where the getter
 * raised. */
static PyObject *data_getter_yes, *data_getter_no; /* fresh_view objects recognized */
static PyTypeObject *data_type;                     /* the type data_def was found in */
static unsigned int data_tag;
static PyGetSetDef *data_def;
static PyObject *str_data;

static int is_data_getter(PyObject *fresh) {
    if (fresh == data_getter_yes) return 1;
    if (fresh == data_getter_no) return 0;
    int yes = 0;
    if (strcmp(Py_TYPE(fresh)->tp_name, "operator.attrgetter") == 0) {
        PyObject *repr = PyObject_Repr(fresh); /* operator's own: no Python code */
        yes = repr != NULL && PyUnicode_Check(repr) &&
              PyUnicode_CompareWithASCIIString(repr, "operator.attrgetter('data')") == 0;
        Py_XDECREF(repr);
        PyErr_Clear();
    }
    keep(yes ? &data_getter_yes : &data_getter_no, fresh);
    return yes;
}

static PyObject *data_of(PyObject *fresh, PyObject *view, int *done) {
    *done = 0;
    PyTypeObject *type = Py_TYPE(view);
    if (!is_data_getter(fresh) || type->tp_getattro != PyObject_GenericGetAttr) return NULL;
    if (type != data_type || !(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) ||
        type->tp_version_tag != data_tag) {
        if (str_data == NULL && (str_data = PyUnicode_InternFromString("data")) == NULL) {
            PyErr_Clear();
            return NULL;
        }
        PyObject *descr = _PyType_Lookup(type, str_data); /* borrowed; runs no code */
        PyGetSetDef *def = NULL;
        if (descr != NULL && Py_IS_TYPE(descr, &PyGetSetDescr_Type) &&
            PyObject_TypeCheck(view, PyDescr_TYPE(descr)))
            def = ((PyGetSetDescrObject *)descr)->d_getset;
        if (def == NULL || def->get == NULL || !(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG))
            return NULL; /* not cached: looked up again next time */
        keep((PyObject **)&data_type, (PyObject *)type);
        data_tag = type->tp_version_tag;
        data_def = def;
    }
    *done = 1;
    return data_def->get(view, data_def->closure);
}

/* fresh(view): through data_of where it applies (one comparison where `fresh` is known
 * not to be attrgetter('data'), NumPy's ndarray.view). A new reference, NULL on error. */
static inline PyObject *fresh_call(PyObject *fresh, PyObject *view) {
    if (fresh != data_getter_no) {
        int done;
        PyObject *out = data_of(fresh, view, &done);
        if (done) return out;
    }
    return PyObject_Vectorcall(fresh, &view, 1, NULL);
}

static PyObject *bind(PyObject *module, PyObject *args) {
    PyTypeObject *types[6];
    PyObject *sites, *internal;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!", &PyType_Type, &types[0], &PyType_Type,
                          &types[1], &PyType_Type, &types[2], &PyType_Type, &types[3],
                          &PyType_Type, &types[4], &PyType_Type, &types[5], &PyDict_Type,
                          &sites, &PyDict_Type, &internal))
        return NULL;
    if (member_offset(types[0], "buffer", &slot_buffer) < 0 ||
        member_offset(types[0], "detour", &slot_detour) < 0 ||
        member_offset(types[0], "index", &slot_index) < 0 ||
        member_offset(types[0], "plain_high", &slot_plain_high) < 0 ||
        member_offset(types[0], "high_water", &slot_high_water) < 0 ||
        member_offset(types[2], "prepared", &buffer_prepared) < 0 ||
        member_offset(types[2], "capacity", &buffer_capacity) < 0 ||
        member_offset(types[2], "wrappers", &buffer_wrappers) < 0 ||
        member_offset(types[2], "allocation", &buffer_allocation) < 0 ||
        member_offset(types[3], "views", &prepared_views) < 0 ||
        member_offset(types[3], "used", &prepared_used) < 0 ||
        member_offset(types[3], "required", &prepared_required) < 0 ||
        member_offset(types[3], "key", &prepared_key) < 0 ||
        member_offset(types[4], "locked", &governor_locked) < 0 ||
        member_offset(types[5], "peaks", &log_peaks) < 0 ||
        member_offset(types[5], "last_requests", &log_last_requests) < 0 ||
        member_offset(types[5], "recorder", &log_recorder) < 0 ||
        slot_api->bind(types[0], types[1], types[4]) < 0)
        return NULL;
    /* (The RegionStack is the slots layer's C-API's alone: this module reads no stack.) */
    PyTypeObject **targets[6] = {&slot_type,     NULL,           &buffer_type,
                                 &prepared_type, &governor_type, &log_type};
    for (int i = 0; i < 6; i++)
        if (targets[i] != NULL) keep((PyObject **)targets[i], (PyObject *)types[i]);
    hit_api.used_at = prepared_used;
    keep(&sites_memo, sites);
    keep(&internal_memo, internal);
    Py_RETURN_NONE;
}

/* The caller's slot (new reference), or NULL with an exception set. */
static PyObject *select_slot(HitBase *self) {
    PyObject *slots = self->slots;
    if (slots != NULL && PyTuple_CheckExact(slots)) {
        PyObject *tls = self->tls;
        if (tls == NULL || tls == Py_None) {
            if (PyTuple_GET_SIZE(slots) == 1) {
                PyObject *slot = PyTuple_GET_ITEM(slots, 0);
                Py_INCREF(slot);
                return slot;
            }
        } else if (Py_IS_TYPE(tls, binding_type)) {
            /* One lane, no resolver: the thread's micro-batch indexes the slots. */
            Py_ssize_t index;
            if (binding_index((Binding *)tls, &index) < 0) return NULL;
            if (index >= 0 && index < PyTuple_GET_SIZE(slots)) {
                PyObject *slot = PyTuple_GET_ITEM(slots, index);
                Py_INCREF(slot);
                return slot;
            }
        }
    }
    return PyObject_CallNoArgs(self->select);
}

/* A digest of a plain request (exact tuples of (exact tuple of exact ints, dtype)), never
 * 0; 0 for anything else (2.0 and True hash and compare like 2 and 1: only exact ints
 * make a hit), with any exception cleared. */
static Py_uhash_t digest_of(PyObject *specs) {
    const Py_uhash_t prime = (Py_uhash_t)1099511628211ULL;
    Py_uhash_t h = (Py_uhash_t)14695981039346656037ULL ^ (Py_uhash_t)PyTuple_GET_SIZE(specs);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(specs); i++) {
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2) return 0;
        PyObject *shape = PyTuple_GET_ITEM(spec, 0);
        if (!PyTuple_CheckExact(shape)) return 0;
        Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
        h = (h ^ (Py_uhash_t)ndim) * prime;
        for (Py_ssize_t k = 0; k < ndim; k++) {
            PyObject *dim = PyTuple_GET_ITEM(shape, k);
            if (!arena_exact_int(dim)) return 0;
            Py_ssize_t value = PyLong_AsSsize_t(dim);
            if (value == -1 && PyErr_Occurred()) {
                PyErr_Clear(); /* past Py_ssize_t: the Python path explains */
                return 0;
            }
            h = (h ^ (Py_uhash_t)value) * prime;
        }
        PyObject *dtype = PyTuple_GET_ITEM(spec, 1);
        /* A str subclass may equal a dtype name and mean another: the Python path. */
        if (PyUnicode_Check(dtype) && !PyUnicode_CheckExact(dtype)) return 0;
        h = (h ^ (Py_uhash_t)(uintptr_t)dtype) * prime;
    }
    return h ? h : 1;
}

/* Whether `key` (a memo's) and the plain request `specs` are the same request: the same
 * shapes and the very same dtype objects. 1, 0, or -1 with an exception set. */
/* Whether the request `specs` has the dtype classes of the key `key` it was found under: an
 * object of another class equal to a remembered dtype takes the Python path. */
static int same_classes(PyObject *key, PyObject *specs) {
    if (key == NULL || !PyTuple_CheckExact(key)) return 0;
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    if (PyTuple_GET_SIZE(key) != count) return 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *a = PyTuple_GET_ITEM(key, i), *b = PyTuple_GET_ITEM(specs, i);
        if (a == b) continue;
        if (!PyTuple_CheckExact(a) || PyTuple_GET_SIZE(a) != 2) return 0;
        if (Py_TYPE(PyTuple_GET_ITEM(a, 1)) != Py_TYPE(PyTuple_GET_ITEM(b, 1))) return 0;
    }
    return 1;
}

static int same_request(PyObject *key, PyObject *specs) {
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != count) return 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *a = PyTuple_GET_ITEM(key, i), *b = PyTuple_GET_ITEM(specs, i);
        if (a == b) continue;
        if (!PyTuple_CheckExact(a) || PyTuple_GET_SIZE(a) != 2) return 0;
        if (PyTuple_GET_ITEM(a, 1) != PyTuple_GET_ITEM(b, 1)) return 0;
        PyObject *x = PyTuple_GET_ITEM(a, 0), *y = PyTuple_GET_ITEM(b, 0);
        if (x == y) continue;
        Py_ssize_t ndim = PyTuple_GET_SIZE(y);
        if (!PyTuple_CheckExact(x) || PyTuple_GET_SIZE(x) != ndim) return 0;
        for (Py_ssize_t k = 0; k < ndim; k++) {
            PyObject *u = PyTuple_GET_ITEM(x, k), *v = PyTuple_GET_ITEM(y, k);
            if (u == v) continue;
            if (!arena_exact_int(u)) return 0;
            int equal = PyObject_RichCompareBool(u, v, Py_EQ);
            if (equal <= 0) return equal;
        }
    }
    return 1;
}

/* The entry `cache` holds for the plain request `specs` (borrowed), or NULL (a miss, or
 * an error: the caller checks PyErr_Occurred). */
static PyObject *look_up(HitBase *self, PyObject *cache, PyObject *specs, Py_uhash_t digest,
                         int memo_only) {
    MemoSlot *memo = &self->memo[digest % MEMO_SIZE];
    if (memo->key != NULL && memo->digest == digest) {
        int same = same_request(memo->key, specs);
        if (same < 0) return NULL;
        if (same) {
#if PY_VERSION_HEX < 0x030D0000
            return _PyDict_GetItem_KnownHash(cache, memo->key, memo->hash);
#else
            return PyDict_GetItemWithError(cache, memo->key);
#endif
        }
    }
    /* Where a Planner computes what the cache misses, a request the memo does not know is
     * computed: hashing the nested request costs what a hit saves. */
    if (memo_only) return NULL;
    /* The request's hash, once: for this lookup and for the memo (its key is equal). */
    Py_hash_t hash = PyObject_Hash(specs);
    if (hash == -1) return NULL;
#if PY_VERSION_HEX < 0x030D0000
    PyObject *entry = _PyDict_GetItem_KnownHash(cache, specs, hash);
#else
    PyObject *entry = PyDict_GetItemWithError(cache, specs);
#endif
    if (entry == NULL || !Py_IS_TYPE(entry, prepared_type)) return entry;
    PyObject *key = FIELD(entry, prepared_key);
    if (key != NULL && PyTuple_CheckExact(key)) {
        keep(&memo->key, key);
        memo->hash = hash;
        memo->digest = digest;
    }
    return entry;
}

/* The Planner's type, and how many remembered requests make its front compute the rest. */
static PyTypeObject *planner_type;
static Py_ssize_t planner_hot(PyObject *planner);

/* A hit: its entry (a new reference), the buffer it was found in (a new reference) and
 * fresh views (returned, a new reference); NULL without an exception when the request is
 * not a plain hit (the Python path serves it), NULL with one on error. */
static PyObject *serve(HitBase *self, PyObject *slot, PyObject *specs, PyObject **entry_out,
                       PyObject **buffer_out, int may_plan) {
    if (!Py_IS_TYPE(slot, slot_type)) return NULL;
    PyObject *detour = FIELD(slot, slot_detour);
    PyObject *buffer = FIELD(slot, slot_buffer);
    /* A pending growth or open scopes and steps take the Python path (0 is a cached
     * object). */
    if (detour != zero || buffer == NULL || !Py_IS_TYPE(buffer, buffer_type)) return NULL;
    /* Not plain (a float or bool dimension, list shapes...): the Python path explains. */
    Py_uhash_t digest = digest_of(specs);
    if (digest == 0) return NULL;
    PyObject *prepared = FIELD(buffer, buffer_prepared);
    if (prepared == NULL || !PyDict_CheckExact(prepared)) return NULL;
    PyObject *cache = PyDict_GetItemWithError(prepared, self->key);
    if (cache == NULL || !PyDict_CheckExact(cache)) {
        PyErr_Clear();
        return NULL;
    }
    /* Held from here: the lookup may run Python code (a dtype's __hash__ or __eq__) that
     * lets another thread close the arena or grow the slot, dropping the buffer, its
     * caches and their entries. */
    Py_INCREF(buffer);
    Py_INCREF(cache);
    int memo_only = may_plan && self->planner != NULL &&
                    Py_IS_TYPE(self->planner, planner_type) &&
                    PyDict_GET_SIZE(cache) >= planner_hot(self->planner);
    PyObject *entry = look_up(self, cache, specs, digest, memo_only);
    Py_XINCREF(entry);
    Py_DECREF(cache);
    if (entry == NULL || !Py_IS_TYPE(entry, prepared_type) ||
        !same_classes(FIELD(entry, prepared_key), specs)) {
        /* a miss, or an unhashable dtype: the Python path explains (an interrupt goes on) */
        arena_clear_unless_interrupt();
        Py_XDECREF(entry);
        Py_DECREF(buffer);
        return NULL;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    PyObject *views = FIELD(entry, prepared_views);
    if (views == NULL || !PyList_CheckExact(views) || PyList_GET_SIZE(views) != count) {
        Py_DECREF(entry);
        Py_DECREF(buffer);
        return NULL;
    }
    /* Held while fresh views are made: that may run code that lets another thread sweep
     * the cache or replace the buffer. */
    Py_INCREF(views);
    PyObject *out = PyList_New(count);
    PyObject *fresh = self->fresh_view;
    for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
        PyObject *view = PyList_GET_ITEM(views, i);
        if (fresh == Py_None) {
            Py_INCREF(view);
        } else if ((view = fresh_call(fresh, view)) == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, view);
    }
    Py_DECREF(views);
    if (out == NULL) {
        Py_DECREF(entry);
        Py_DECREF(buffer);
        return NULL;
    }
    *entry_out = entry;
    *buffer_out = buffer;
    return out;
}

/* Note an unlocked hit in the request log without Python code where the outcome is
 * decided: the caller's site is known (caller_info's memos), it is user code, the peak
 * of that site does not rise and no profile records. Then RequestLog.note would only
 * set last_requests[slot.index] = (site, specs), which this does. Returns 1 when noted,
 * 0 when RequestLog.note must run, -1 on error. */
static int note_hit(HitBase *self, PyObject *log, PyObject *slot, PyObject *specs,
                    PyObject *required) {
#if PY_VERSION_HEX < 0x030B0000
    return 0; /* no PyFrame_GetLasti: caller_info's key cannot be formed here */
#else
    if (!Py_IS_TYPE(log, log_type) || sites_memo == NULL) return 0;
    PyObject *recorder = FIELD(log, log_recorder);
    if (recorder != Py_None) return 0;
    PyFrameObject *frame = PyEval_GetFrame(); /* borrowed: the caller of this request */
    if (frame == NULL) return 0;
    PyCodeObject *code = PyFrame_GetCode(frame);
    int lasti = PyFrame_GetLasti(frame);
    if ((PyObject *)code != self->site_code || lasti != self->site_lasti) {
        /* Another call site than last time: caller_info's memos, or Python. */
        PyObject *internal = PyDict_GetItemWithError(internal_memo, code->co_filename);
        if (internal != Py_False) {
            Py_DECREF(code);
            return PyErr_Occurred() ? -1 : 0;
        }
        PyObject *offset = PyLong_FromLong(lasti);
        PyObject *location = offset == NULL ? NULL : PyTuple_Pack(2, (PyObject *)code, offset);
        Py_XDECREF(offset);
        if (location == NULL) {
            Py_DECREF(code);
            return -1;
        }
        PyObject *site = PyDict_GetItemWithError(sites_memo, location);
        Py_DECREF(location);
        if (site == NULL) {
            Py_DECREF(code);
            return PyErr_Occurred() ? -1 : 0;
        }
        keep(&self->site, site);
        keep(&self->site_code, (PyObject *)code);
        self->site_lasti = lasti;
    }
    Py_DECREF(code);
    PyObject *peaks = FIELD(log, log_peaks);
    PyObject *last = FIELD(log, log_last_requests);
    if (peaks == NULL || last == NULL || !PyDict_CheckExact(peaks) || !PyDict_CheckExact(last))
        return 0;
    PyObject *peak = PyDict_GetItemWithError(peaks, self->site);
    if (peak == NULL) return PyErr_Occurred() ? -1 : 0;
    int lower = PyObject_RichCompareBool(peak, required, Py_LT);
    if (lower != 0) return lower < 0 ? -1 : 0; /* a new peak: RequestLog.note, under its lock */
    PyObject *index = FIELD(slot, slot_index);
    PyObject *noted = index == NULL ? NULL : PyTuple_Pack(2, self->site, specs);
    if (noted == NULL) return index == NULL ? 0 : -1;
    int failed = PyDict_SetItem(last, index, noted);
    Py_DECREF(noted);
    return failed ? -1 : 1;
#endif
}


/* ------------------------------------------------------------------ Planner
 *
 * Offsets computed from the request itself, where the hit's cache would miss. A front's
 * remembered requests are cheap while they are few; hundreds of them in rotation no longer
 * fit the CPU's caches, and a hit then reads cold memory (the entry, its views) for every
 * request. A Planner computes every offset from the request instead, with the arithmetic
 * of arena/base/layout.py (each view's bytes prod(shape) * itemsize, rounded up to the
 * alignment; offsets the running sum from 0; a view's stride extent, prod(max(dim, 1)) *
 * itemsize, and the total at most MAX_BYTES), and builds each view as
 * numpy.ndarray(shape, native, buffer=source, offset=offset) builds it: a C-contiguous
 * array at source's address + offset, writeable, its base collapsed to what owns the
 * memory. It makes the array through NumPy's own C-API table (the `_ARRAY_API` capsule
 * that every NumPy extension's import_array() reads; no NumPy header: the two entries
 * used are PyArray_NewFromDescr, 94, and PyArray_SetBaseObject, 282, fixed in NumPy's ABI
 * since 1.7 and kept by NumPy 2), because numpy.ndarray's constructor parses its
 * arguments and takes a buffer export per view: three of those cost more than the three
 * np.empty calls they replace, where the C-API call costs about a fresh view's.
 * Planner() checks the table against the numpy.ndarray and numpy.dtype types it is given
 * (entries 2 and 3), and tests/views/test_planner.py compares every view with numpy.ndarray's.
 *
 * It serves a request only where the outcome is decided: exact tuples of (exact tuple of
 * exact ints, dtype object it knows), every view non-empty, the total within the buffer,
 * the slot's high-water mark and plain high already covering it, no capture probe and no
 * unlocked request log to tell, and the front's cache already holding `hot` requests (so
 * the first requests of an engine are remembered as before, and the cache stops growing
 * past what stays hot). Anything else (an error to raise included) goes to the Python
 * path, so every error and message is layout.py's own.
 *
 * Its dtype table maps a dtype object, by identity, to its itemsize and the framework's
 * dtype, filled by `resolve(dtypes)` -> one (itemsize, native) or None per dtype (at most
 * PLAN_MAX_DTYPES objects; others take the Python path): a request's dtypes the table
 * lacks are resolved in one call, so a first request passes arena.base.dtypes once and
 * the framework's adapter once, however many new dtypes it names. */

#define PLAN_MAX_VIEWS 64
#define PLAN_MAX_DIMS 32 /* NumPy 1's NPY_MAXDIMS */
/* NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_WRITEABLE (NumPy recomputes the
 * first two from the address and shape). */
#define NPY_CARRAY_FLAGS (0x0001 | 0x0100 | 0x0400)
#define PLAN_MAX_DTYPES 32
#define LAYOUT_MAX_BYTES 0x7fffffffffffffffULL /* arena.base.layout.MAX_BYTES */

typedef struct {
    PyObject_HEAD
    int known;
    PyObject *dtypes[PLAN_MAX_DTYPES];
    PyObject *natives[PLAN_MAX_DTYPES];
    unsigned long long itemsizes[PLAN_MAX_DTYPES];
    PyObject *resolve;
    PyObject *api;     /* NumPy's _ARRAY_API capsule, held while its functions are used */
    PyObject *ndarray; /* numpy.ndarray */
    PyObject *(*new_from_descr)(PyTypeObject *, PyObject *, int, const Py_ssize_t *,
                                const Py_ssize_t *, void *, int, PyObject *);
    int (*set_base)(PyObject *, PyObject *);
    PyTypeObject *descr_type;
    PyObject *source_key;
    unsigned long long alignment;
    Py_ssize_t hot;
} Planner;

static Py_ssize_t planner_hot(PyObject *planner) { return ((Planner *)planner)->hot; }

/* NumPy's C-API entries for the fresh views of the regions' hits (fresh_of, the C-API's
 * fresh_view), noted by the first Planner made (which checked the table against
 * numpy.ndarray): the capsule and numpy.ndarray held for the process's life, and
 * numpy.ndarray.view, the fresh_view of every NumPy front that hands out fresh views.
 * Exported in the C-API too (its ndarray_view, ndarray, new_from_descr and set_base: a
 * step row's fresh view, arena/planning/_step_rows.h). */
static PyObject *np_api, *np_ndarray, *np_view;
static PyObject *(*np_new_from_descr)(PyTypeObject *, PyObject *, int, const Py_ssize_t *,
                                      const Py_ssize_t *, void *, int, PyObject *);
static int (*np_set_base)(PyObject *, PyObject *);

static void numpy_fresh_note(PyObject *api, PyObject *ndarray,
                             PyObject *(*new_from_descr)(PyTypeObject *, PyObject *, int,
                                                         const Py_ssize_t *, const Py_ssize_t *,
                                                         void *, int, PyObject *),
                             int (*set_base)(PyObject *, PyObject *)) {
    if (np_api != NULL) return;
    PyObject *view = PyObject_GetAttrString(ndarray, "view");
    if (view == NULL) {
        PyErr_Clear();
        return;
    }
    np_new_from_descr = new_from_descr;
    np_set_base = set_base;
    np_ndarray = Py_NewRef(ndarray);
    np_view = view;
    np_api = Py_NewRef(api); /* last: set means every entry above is */
    /* The same entries in the C-API, for the layers above (_hit_api.h): the view last. */
    hit_api.new_from_descr = new_from_descr;
    hit_api.set_base = set_base;
    hit_api.ndarray = (PyTypeObject *)ndarray;
    hit_api.ndarray_view = view;
}

/* A NumPy array's leading fields: the views C-API's (_hit_api.h). */
typedef ArenaNdArray NdArray;

/* A fresh view of `view` for a region's request (the C-API's fresh_view: a step's or a
 * scope's, arena/planning/_region_hit.c; a new reference, NULL with an exception set on
 * error). Where `fresh` is numpy.ndarray.view and `view` an exact
 * numpy.ndarray, made as numpy.ndarray.view makes it (PyArray_View: an array of the same
 * type, dtype object, shape, strides, data and flags, its base collapsed to what owns the
 * memory), through NumPy's C-API table as the Planner makes its arrays (see Planner),
 * which skips the method call and its argument parsing; an array whose flags or dtype
 * object come out other than the view's (NumPy recomputes the flags, and would replace an
 * unsized dtype) is dropped for the method's own. Any
 * other view or callable: fresh(view). */
static PyObject *fresh_of(PyObject *fresh, PyObject *view) {
    if (fresh == np_view && np_api != NULL && Py_TYPE(view) == (PyTypeObject *)np_ndarray) {
        NdArray *a = (NdArray *)view;
        Py_INCREF(a->descr); /* taken by PyArray_NewFromDescr */
        PyObject *out = np_new_from_descr((PyTypeObject *)np_ndarray, a->descr, a->nd,
                                          a->dimensions, a->strides, a->data, a->flags, NULL);
        if (out == NULL) return NULL;
        Py_INCREF(view); /* taken by PyArray_SetBaseObject */
        if (np_set_base(out, view) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        NdArray *made = (NdArray *)out;
        if (made->flags == a->flags && made->descr == a->descr) return out;
        Py_DECREF(out);
    }
    return fresh_call(fresh, view);
}

typedef struct {
    PyObject *shape;  /* borrowed from the request */
    PyObject *native; /* a new reference */
    unsigned long long offset, nbytes;
} PlannedView;

static void release_planned(PlannedView *views, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) Py_CLEAR(views[i].native);
}

/* The index of `dtype` in the table, or -1. */
static int plan_known(Planner *p, PyObject *dtype) {
    for (int i = 0; i < p->known; i++)
        if (p->dtypes[i] == dtype) return i;
    return -1;
}

/* Whether the table may learn `dtype`: a str subclass may equal a dtype name and mean
 * another. */
static int plan_learnable(PyObject *dtype) {
    return !PyUnicode_Check(dtype) || PyUnicode_CheckExact(dtype);
}

/* Resolve, in one call of `resolve`, the dtypes of specs[first:] (an exact tuple) the table
 * lacks, and add those that resolve: 0, or -1 with an exception set. Malformed specs are
 * skipped (the layout declines them). */
static int plan_resolve(Planner *p, PyObject *specs, Py_ssize_t first) {
    PyObject *pending[PLAN_MAX_DTYPES];
    Py_ssize_t count = 0;
    for (Py_ssize_t i = first; i < PyTuple_GET_SIZE(specs); i++) {
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2) continue;
        PyObject *dtype = PyTuple_GET_ITEM(spec, 1);
        if (!plan_learnable(dtype) || plan_known(p, dtype) >= 0) continue;
        int seen = 0;
        for (Py_ssize_t k = 0; k < count && !seen; k++) seen = pending[k] == dtype;
        if (seen) continue;
        if (count + p->known == PLAN_MAX_DTYPES) break; /* the rest: the Python path */
        pending[count++] = dtype;
    }
    if (count == 0) return 0;
    PyObject *asked = PyTuple_New(count);
    if (asked == NULL) return -1;
    for (Py_ssize_t k = 0; k < count; k++) PyTuple_SET_ITEM(asked, k, Py_NewRef(pending[k]));
    PyObject *answers = PyObject_CallOneArg(p->resolve, asked);
    if (answers == NULL) {
        Py_DECREF(asked);
        return -1;
    }
    if (PyTuple_CheckExact(answers) && PyTuple_GET_SIZE(answers) == count) {
        for (Py_ssize_t k = 0; k < count; k++) {
            PyObject *answer = PyTuple_GET_ITEM(answers, k);
            if (!PyTuple_CheckExact(answer) || PyTuple_GET_SIZE(answer) != 2 ||
                !PyLong_CheckExact(PyTuple_GET_ITEM(answer, 0)))
                continue;
            long size = PyLong_AsLong(PyTuple_GET_ITEM(answer, 0));
            if (size == -1 && PyErr_Occurred()) {
                Py_DECREF(answers);
                Py_DECREF(asked);
                return -1;
            }
            PyObject *dtype = PyTuple_GET_ITEM(asked, k);
            /* resolve() ran Python code: another thread may have added it meanwhile. */
            if (size > 0 && size <= 64 && p->known < PLAN_MAX_DTYPES &&
                plan_known(p, dtype) < 0 &&
                PyObject_TypeCheck(PyTuple_GET_ITEM(answer, 1), p->descr_type)) {
                int at = p->known;
                p->dtypes[at] = Py_NewRef(dtype);
                p->itemsizes[at] = (unsigned long long)size;
                p->natives[at] = Py_NewRef(PyTuple_GET_ITEM(answer, 1));
                p->known = at + 1;
            }
        }
    }
    Py_DECREF(answers);
    Py_DECREF(asked);
    return 0;
}

/* The itemsize and framework dtype (a new reference) of `dtype`, the dtype of specs[at]
 * (an exact tuple): 1, 0 when the Planner does not know it (the Python path resolves or
 * explains), -1 with an exception set. A dtype the table lacks is resolved with every
 * other new dtype of the request from `at` on (plan_resolve), once per request (`asked`).
 * The table is keyed by
 * identity (an equal object is another key: resolutions are per object, never per
 * equality), and holds its dtype objects so that no address is reused. */
static int plan_dtype(Planner *p, PyObject *specs, Py_ssize_t at, PyObject *dtype,
                      int *asked, unsigned long long *itemsize, PyObject **native) {
    int i = plan_known(p, dtype);
    if (i < 0) {
        /* Asked once per request: a dtype that did not resolve then is not asked again. */
        if (*asked || !plan_learnable(dtype) || p->known == PLAN_MAX_DTYPES) return 0;
        *asked = 1;
        if (plan_resolve(p, specs, at) < 0) return -1;
        i = plan_known(p, dtype);
        if (i < 0) return 0;
    }
    *itemsize = p->itemsizes[i];
    *native = Py_NewRef(p->natives[i]);
    return 1;
}

/* The layout of `specs` (an exact tuple) into `out`: 1 computed, 0 declined (no exception:
 * the Python path serves or explains it), -1 with an exception set. `allow_empty` admits
 * zero-size views (layout() does; a request with one takes the general path, which
 * validates it, as arena.views.plan does). On success the caller releases `out`. */
static int plan_layout_into(Planner *p, PyObject *specs, PlannedView *out,
                            Py_ssize_t room, Py_ssize_t *count_out,
                            unsigned long long *total_out, int allow_empty);

static int plan_layout(Planner *p, PyObject *specs, PlannedView *out, Py_ssize_t *count_out,
                       unsigned long long *total_out, int allow_empty) {
    return plan_layout_into(p, specs, out, PLAN_MAX_VIEWS, count_out, total_out, allow_empty);
}

/* plan_layout into `out` of `room` entries (a request of more views is declined). */
static int plan_layout_into(Planner *p, PyObject *specs, PlannedView *out,
                            Py_ssize_t room, Py_ssize_t *count_out,
                            unsigned long long *total_out, int allow_empty) {
    if (!PyTuple_CheckExact(specs)) return 0;
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    if (count > room) return 0;
    const unsigned long long mask = p->alignment - 1;
    unsigned long long offset = 0;
    int asked = 0; /* the new dtypes resolved (plan_dtype) */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2) goto declined;
        PyObject *shape = PyTuple_GET_ITEM(spec, 0);
        if (!PyTuple_CheckExact(shape)) goto declined;
        unsigned long long itemsize;
        PyObject *native;
        int known =
            plan_dtype(p, specs, i, PyTuple_GET_ITEM(spec, 1), &asked, &itemsize, &native);
        if (known <= 0) {
            release_planned(out, i);
            return known;
        }
        out[i].native = native;
        out[i].shape = shape;
        /* layout._count_bytes: bytes, and the extent the frameworks index. */
        unsigned long long nbytes = itemsize, extent = itemsize;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(shape); k++) {
            PyObject *dim = PyTuple_GET_ITEM(shape, k);
            if (!arena_exact_int(dim)) goto declined_after;
            long long value = PyLong_AsLongLong(dim);
            if (value == -1 && PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_OverflowError)) goto failed_after;
                PyErr_Clear(); /* past MAX_BYTES: layout.py explains */
                goto declined_after;
            }
            if (value < 0) goto declined_after;
            unsigned long long at_least_one = value ? (unsigned long long)value : 1;
            if (extent > LAYOUT_MAX_BYTES / at_least_one) goto declined_after;
            extent *= at_least_one;
            nbytes *= (unsigned long long)value; /* at most extent */
        }
        if (nbytes == 0 && !allow_empty) goto declined_after;
        unsigned long long rounded = (nbytes + mask) & ~mask;
        if (rounded > LAYOUT_MAX_BYTES - offset) goto declined_after;
        out[i].offset = offset;
        out[i].nbytes = nbytes;
        offset += rounded;
        continue;
    declined_after:
        release_planned(out, i + 1);
        return 0;
    failed_after:
        release_planned(out, i + 1);
        return -1;
    declined:
        release_planned(out, i);
        return 0;
    }
    *count_out = count;
    *total_out = offset;
    return 1;
}

static PyObject *planner_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"resolve", "api",       "ndarray", "dtype",
                            "source_key", "alignment", "hot",     NULL};
    PyObject *resolve, *api, *ndarray, *dtype, *source_key;
    unsigned long long alignment;
    Py_ssize_t hot;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOKn", names, &resolve, &api, &ndarray,
                                     &dtype, &source_key, &alignment, &hot))
        return NULL;
    /* NumPy makes the capsule without a name (numpy/_core/src/multiarray). */
    void **table = PyCapsule_IsValid(api, NULL) ? (void **)PyCapsule_GetPointer(api, NULL)
                                                : NULL;
    if (table == NULL || !PyType_Check(ndarray) || !PyType_Check(dtype) ||
        table[2] != (void *)ndarray || table[3] != (void *)dtype || table[94] == NULL ||
        table[282] == NULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError,
                        "Planner needs NumPy's _ARRAY_API capsule, numpy.ndarray and "
                        "numpy.dtype (the table's entries 2 and 3)");
        return NULL;
    }
    if (alignment < 16 || alignment > (1ULL << 30) || (alignment & (alignment - 1))) {
        PyErr_Format(PyExc_ValueError,
                     "alignment must be a power of two from 16 to 2**30, got %llu", alignment);
        return NULL;
    }
    if (!PyCallable_Check(resolve)) {
        PyErr_SetString(PyExc_TypeError, "Planner needs a callable resolve");
        return NULL;
    }
    Planner *self = (Planner *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(resolve);
    self->resolve = resolve;
    Py_INCREF(api);
    self->api = api;
    Py_INCREF(ndarray);
    self->ndarray = ndarray;
    self->new_from_descr = (PyObject * (*)(PyTypeObject *, PyObject *, int, const Py_ssize_t *,
                                           const Py_ssize_t *, void *, int, PyObject *))
        table[94];
    self->set_base = (int (*)(PyObject *, PyObject *))table[282];
    self->descr_type = (PyTypeObject *)dtype;
    Py_INCREF(source_key);
    self->source_key = source_key;
    self->alignment = alignment;
    self->hot = hot;
    numpy_fresh_note(api, ndarray, self->new_from_descr, self->set_base);
    return (PyObject *)self;
}

/* Planner.layout(specs): (total, offsets, nbytes) as the Planner computes them, or None
 * where it leaves the request to Python (arena.base.layout.compute_layout). */
static PyObject *planner_layout(PyObject *self, PyObject *specs) {
    PlannedView planned[PLAN_MAX_VIEWS];
    Py_ssize_t count = 0;
    unsigned long long total = 0;
    int done = plan_layout((Planner *)self, specs, planned, &count, &total, 1);
    if (done < 0) return NULL;
    if (done == 0) Py_RETURN_NONE;
    PyObject *offsets = PyTuple_New(count), *sizes = PyTuple_New(count);
    for (Py_ssize_t i = 0; offsets != NULL && sizes != NULL && i < count; i++) {
        PyObject *a = PyLong_FromUnsignedLongLong(planned[i].offset);
        PyObject *b = PyLong_FromUnsignedLongLong(planned[i].nbytes);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            Py_CLEAR(offsets);
            break;
        }
        PyTuple_SET_ITEM(offsets, i, a);
        PyTuple_SET_ITEM(sizes, i, b);
    }
    release_planned(planned, count);
    PyObject *result = NULL;
    if (offsets != NULL && sizes != NULL) {
        PyObject *whole = PyLong_FromUnsignedLongLong(total);
        if (whole != NULL) result = PyTuple_Pack(3, whole, offsets, sizes);
        Py_XDECREF(whole);
    }
    Py_XDECREF(offsets);
    Py_XDECREF(sizes);
    return result;
}

/* NumPy views of `planned` (offsets from the start of `source`, a numpy.ndarray) over
 * `source`'s writeable buffer: a new list; NULL without an exception where the Python path
 * builds them (a read-only buffer or one shorter than `total`, too many dimensions), NULL
 * with one on error. Each view is what numpy.ndarray(shape, native, buffer=source,
 * offset=offset) makes. */
static PyObject *planned_views(Planner *p, PlannedView *planned, Py_ssize_t count,
                               PyObject *source, unsigned long long total) {
    /* The buffer's address and length, as numpy.ndarray(buffer=source) takes them. */
    Py_buffer memory;
    if (PyObject_GetBuffer(source, &memory, PyBUF_WRITABLE) < 0) {
        PyErr_Clear(); /* not writeable: the Python path */
        return NULL;
    }
    if (memory.len < 0 || (unsigned long long)memory.len < total) {
        PyBuffer_Release(&memory);
        return NULL;
    }
    PyObject *out = PyList_New(count);
    for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
        PyObject *shape = planned[i].shape;
        Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
        Py_ssize_t dims[PLAN_MAX_DIMS];
        if (ndim > PLAN_MAX_DIMS) {
            Py_CLEAR(out); /* no exception: the Python path */
            break;
        }
        for (Py_ssize_t k = 0; k < ndim; k++) dims[k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, k));
        /* PyArray_NewFromDescr takes the dtype's reference; SetBaseObject the base's. */
        Py_INCREF(planned[i].native);
        PyObject *view = p->new_from_descr((PyTypeObject *)p->ndarray, planned[i].native,
                                           (int)ndim, dims, NULL,
                                           (char *)memory.buf + planned[i].offset,
                                           NPY_CARRAY_FLAGS, NULL);
        if (view == NULL) {
            Py_CLEAR(out);
            break;
        }
        Py_INCREF(source);
        if (p->set_base(view, source) < 0) {
            Py_DECREF(view);
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, view);
    }
    PyBuffer_Release(&memory);
    return out;
}

/* Planner.views(specs, source, capacity): the views of a request computed and built in C
 * over `source` (the buffer's numpy.ndarray), as (total, views); the total alone where it
 * is more than `capacity`; None where the request is left to Python (the same requests
 * plan_serve leaves: a zero-size view, a dtype it does not know, a list...), of any
 * number of views. The miss path's first sighting of a structure
 * (arena.views.builder.ViewBuilder.miss). */
static PyObject *planner_views(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "views(specs, source, capacity) takes 3 arguments");
        return NULL;
    }
    Planner *p = (Planner *)self;
    long long capacity = PyLong_AsLongLong(args[2]);
    if (capacity == -1 && PyErr_Occurred()) return NULL;
    /* On the stack for up to PLAN_MAX_VIEWS views; a larger request's on the heap. */
    PlannedView stack[PLAN_MAX_VIEWS];
    PlannedView *planned = stack;
    Py_ssize_t room = PLAN_MAX_VIEWS;
    if (PyTuple_CheckExact(args[0]) && PyTuple_GET_SIZE(args[0]) > PLAN_MAX_VIEWS) {
        room = PyTuple_GET_SIZE(args[0]);
        planned = PyMem_New(PlannedView, (size_t)room);
        if (planned == NULL) return PyErr_NoMemory();
    }
    Py_ssize_t count = 0;
    unsigned long long total = 0;
    int done = plan_layout_into(p, args[0], planned, room, &count, &total, 0);
    if (done <= 0) {
        if (planned != stack) PyMem_Free(planned);
        if (done < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    if (count == 0 || capacity < 0 || Py_TYPE(args[1]) != (PyTypeObject *)p->ndarray) {
        result = Py_NewRef(Py_None);
    } else if (total > (unsigned long long)capacity) {
        result = PyLong_FromUnsignedLongLong(total);
    } else {
        PyObject *views = planned_views(p, planned, count, args[1], total);
        if (views == NULL) {
            if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
        } else {
            PyObject *whole = PyLong_FromUnsignedLongLong(total);
            if (whole != NULL) result = PyTuple_Pack(2, whole, views);
            Py_XDECREF(whole);
            Py_DECREF(views);
        }
    }
    release_planned(planned, count);
    if (planned != stack) PyMem_Free(planned);
    return result;
}

static int planner_traverse(Planner *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    for (int i = 0; i < self->known; i++) {
        Py_VISIT(self->dtypes[i]);
        Py_VISIT(self->natives[i]);
    }
    Py_VISIT(self->resolve);
    Py_VISIT(self->api);
    Py_VISIT(self->ndarray);
    Py_VISIT(self->source_key);
    return 0;
}

static int planner_clear(Planner *self) {
    int known = self->known;
    self->known = 0;
    for (int i = 0; i < known; i++) {
        Py_CLEAR(self->dtypes[i]);
        Py_CLEAR(self->natives[i]);
    }
    Py_CLEAR(self->resolve);
    Py_CLEAR(self->api);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->source_key);
    return 0;
}

static void planner_dealloc(Planner *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    planner_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef planner_methods[] = {
    {"layout", (PyCFunction)planner_layout, METH_O,
     "layout(specs): (total, offsets, nbytes) computed in C, or None where the request is "
     "left to Python (arena.base.layout.compute_layout)."},
    {"views", (PyCFunction)(void (*)(void))planner_views, METH_FASTCALL,
     "views(specs, source, capacity): (total, views) built in C over source, the total "
     "alone where it is more than capacity, or None where the request is left to Python."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot planner_slots[] = {
    {Py_tp_doc, "Planner(resolve, api, ndarray, dtype, source_key, alignment, hot): NumPy "
                "views computed from each request where the hit's cache would miss (see "
                "arena.views._hit.c)."},
    {Py_tp_new, planner_new},
    {Py_tp_methods, planner_methods},
    {Py_tp_traverse, planner_traverse},
    {Py_tp_clear, planner_clear},
    {Py_tp_dealloc, planner_dealloc},
    {0, NULL},
};

static PyType_Spec planner_spec = {
    "arena.views._hit.Planner", sizeof(Planner), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    planner_slots,
};

static long long int_field(PyObject *object, Py_ssize_t offset) {
    PyObject *value = FIELD(object, offset);
    if (value == NULL || !PyLong_CheckExact(value)) return -1;
    long long found = PyLong_AsLongLong(value);
    if (found == -1 && PyErr_Occurred()) PyErr_Clear();
    return found;
}

/* A request the hit missed, served by the front's Planner: fresh views (a new reference),
 * NULL without an exception where Python serves it, NULL with one on error. The
 * bookkeeping is what ViewBuilder.deliver does for a plan's request when nothing is left
 * to note: one more call on the slot. */
static PyObject *plan_serve(HitBase *self, PyObject *slot, PyObject *specs) {
    Planner *p = (Planner *)self->planner;
    if (self->probe != Py_None) return NULL;
    if (self->log != Py_None && !(Py_IS_TYPE(self->governor, governor_type) &&
                                  FIELD(self->governor, governor_locked) == Py_True))
        return NULL;
    if (!Py_IS_TYPE(slot, slot_type) || FIELD(slot, slot_detour) != zero) return NULL;
    PyObject *buffer = FIELD(slot, slot_buffer);
    if (buffer == NULL || !Py_IS_TYPE(buffer, buffer_type)) return NULL;
    PyObject *allocation = FIELD(buffer, buffer_allocation);
    PyObject *prepared = FIELD(buffer, buffer_prepared);
    PyObject *wrappers = FIELD(buffer, buffer_wrappers);
    if (allocation == NULL || allocation == Py_None || prepared == NULL ||
        !PyDict_CheckExact(prepared) || wrappers == NULL || !PyDict_CheckExact(wrappers))
        return NULL;
    /* Strings only: no Python code runs in these lookups. */
    PyObject *cache = PyDict_GetItemWithError(prepared, self->key);
    if (cache == NULL || !PyDict_CheckExact(cache) || PyDict_GET_SIZE(cache) < p->hot) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *source = PyDict_GetItemWithError(wrappers, p->source_key);
    if (source == NULL) {
        PyErr_Clear();
        return NULL;
    }
    long long capacity = int_field(buffer, buffer_capacity);
    long long high = int_field(slot, slot_high_water);
    long long plain = int_field(slot, slot_plain_high);
    /* Held from here: a dtype's first resolution runs Python code, which may let another
     * thread grow the slot or close the arena. */
    Py_INCREF(buffer);
    Py_INCREF(source);
    PlannedView planned[PLAN_MAX_VIEWS];
    Py_ssize_t count = 0;
    unsigned long long total = 0;
    PyObject *out = NULL;
    int done = plan_layout(p, specs, planned, &count, &total, 0);
    if (done <= 0) goto finish;
    /* Growth, a locked error, a new high-water mark or plain high: the Python path. And a
     * buffer replaced meanwhile serves nothing here. */
    if (count == 0 || capacity < 0 || total > (unsigned long long)capacity || high < 0 ||
        total > (unsigned long long)high || plain < 0 || total > (unsigned long long)plain ||
        FIELD(slot, slot_buffer) != buffer || Py_TYPE(source) != (PyTypeObject *)p->ndarray)
        goto release;
    out = planned_views(p, planned, count, source, total);
    if (out != NULL && arena_slot_count_call(slot_api, slot) < 0) Py_CLEAR(out);
release:
    release_planned(planned, count);
finish:
    Py_DECREF(source);
    Py_DECREF(buffer);
    return out;
}

static PyObject *request(HitBase *self, PyObject *specs, PyObject *strict) {
    PyObject *slot = select_slot(self);
    if (slot == NULL) return NULL;
    PyObject *result;
    if (self->debug != Py_False || self->fresh_view == NULL || self->fresh_view == Py_False ||
        self->builder == NULL) {
        PyObject *call[4] = {(PyObject *)self, slot, specs, strict};
        result = PyObject_VectorcallMethod(str_python_request, call,
                                           4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(slot);
        return result;
    }
    PyObject *entry = NULL, *buffer = NULL;
    PyObject *views = serve(self, slot, specs, &entry, &buffer, 1);
    if (views == NULL && !PyErr_Occurred() && self->planner != NULL &&
        Py_IS_TYPE(self->planner, planner_type)) {
        /* Where the cache missed: offsets computed from the request (see Planner). */
        views = plan_serve(self, slot, specs);
        if (views != NULL || PyErr_Occurred()) {
            Py_DECREF(slot);
            return views;
        }
        /* Not the Planner's (a zero-size view, a dtype it does not know...): the whole
         * cache, which the lookup above asked through its memo only. */
        views = serve(self, slot, specs, &entry, &buffer, 0);
    }
    if (views == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(slot);
            return NULL;
        }
        PyObject *call[4] = {self->builder, slot, specs, strict};
        result = PyObject_VectorcallMethod(str_miss, call, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                           NULL);
        Py_DECREF(slot);
        return result;
    }
    /* The bookkeeping of a hit: the entry was used (the cache's CLOCK sweep spares it),
     * the slot served one more request. */
    keep(&FIELD(entry, prepared_used), Py_True);
    if (arena_slot_count_call(slot_api, slot) < 0) goto error;
    result = views;
    PyObject *required = FIELD(entry, prepared_required);
    int capturing = 0;
    if (required == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "arena: a remembered request has no size");
        goto error;
    }
    if (self->probe != Py_None) {
        /* Asked after the views were built, as the Python path does. */
        PyObject *answer = PyObject_CallNoArgs(self->probe);
        capturing = answer == NULL ? -1 : PyObject_IsTrue(answer);
        Py_XDECREF(answer);
        if (capturing < 0) goto error;
        if (capturing) result = NULL; /* the capture marking: Python */
    }
    if (result != NULL && self->log != Py_None &&
        !(Py_IS_TYPE(self->governor, governor_type) &&
          FIELD(self->governor, governor_locked) == Py_True)) {
        int noted = note_hit(self, self->log, slot, specs, required);
        if (noted < 0) goto error;
        if (noted == 0) result = NULL; /* RequestLog.note: Python */
    }
    if (result == NULL) {
        /* A capture or a request to note in Python: the builder's bookkeeping, with the
         * buffer these views were built over and the probe's answer. */
        PyObject *call[8] = {self->builder, slot,   buffer,
                             specs,         required, views,
                             strict,        capturing ? Py_True : Py_False};
        result = PyObject_VectorcallMethod(str_served, call,
                                           6 | PY_VECTORCALL_ARGUMENTS_OFFSET, served_names);
        Py_DECREF(views);
    }
    Py_DECREF(entry);
    Py_DECREF(buffer);
    Py_DECREF(slot);
    return result;
error:
    Py_DECREF(views);
    Py_DECREF(entry);
    Py_DECREF(buffer);
    Py_DECREF(slot);
    return NULL;
}

static PyObject *get_simultaneous(PyObject *self, PyObject *specs) {
    return request((HitBase *)self, specs, Py_True);
}

static PyObject *try_get_simultaneous(PyObject *self, PyObject *specs) {
    return request((HitBase *)self, specs, Py_False);
}

static int traverse(HitBase *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->select);
    Py_VISIT(self->slots);
    Py_VISIT(self->tls);
    Py_VISIT(self->key);
    Py_VISIT(self->fresh_view);
    Py_VISIT(self->debug);
    Py_VISIT(self->probe);
    Py_VISIT(self->log);
    Py_VISIT(self->governor);
    Py_VISIT(self->builder);
    Py_VISIT(self->planner);
    Py_VISIT(self->site_code);
    Py_VISIT(self->site);
    for (int i = 0; i < MEMO_SIZE; i++) Py_VISIT(self->memo[i].key);
    return 0;
}

static int clear(HitBase *self) {
    Py_CLEAR(self->select);
    Py_CLEAR(self->slots);
    Py_CLEAR(self->tls);
    Py_CLEAR(self->key);
    Py_CLEAR(self->fresh_view);
    Py_CLEAR(self->debug);
    Py_CLEAR(self->probe);
    Py_CLEAR(self->log);
    Py_CLEAR(self->governor);
    Py_CLEAR(self->builder);
    Py_CLEAR(self->planner);
    Py_CLEAR(self->site_code);
    Py_CLEAR(self->site);
    for (int i = 0; i < MEMO_SIZE; i++) Py_CLEAR(self->memo[i].key);
    return 0;
}

static void dealloc(HitBase *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef hit_methods[] = {
    {"get_simultaneous", (PyCFunction)get_simultaneous, METH_VARARGS,
     "get_simultaneous($self, /, *specs)\n--\n\n"
     "The compiled hit path of Front.get_simultaneous (the signature is for inspect)."},
    {"try_get_simultaneous", (PyCFunction)try_get_simultaneous, METH_VARARGS,
     "try_get_simultaneous($self, /, *specs)\n--\n\n"
     "The compiled hit path of Front.try_get_simultaneous (the signature is for inspect)."},
    {NULL, NULL, 0, NULL},
};

#define MEMBER(name, field) {name, T_OBJECT_EX, offsetof(HitBase, field), 0, NULL}
static PyMemberDef hit_members[] = {
    MEMBER("_select", select),
    MEMBER("_slots", slots),
    MEMBER("_tls", tls),
    MEMBER("_key", key),
    MEMBER("_fresh_view", fresh_view),
    MEMBER("_debug", debug),
    MEMBER("_probe", probe),
    MEMBER("_log", log),
    MEMBER("_governor", governor),
    MEMBER("_builder", builder),
    MEMBER("_planner", planner),
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot hit_slots[] = {
    {Py_tp_doc, "The compiled hit path of arena's fronts (see arena.views.hit)."},
    {Py_tp_methods, hit_methods},
    {Py_tp_members, hit_members},
    {Py_tp_traverse, traverse},
    {Py_tp_clear, clear},
    {Py_tp_dealloc, dealloc},
    {0, NULL},
};

static PyType_Spec hit_spec = {
    "arena.views._hit.HitBase",
    sizeof(HitBase),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    hit_slots,
};

/* ------------------------------------------------------------------ the C-API
 *
 * What the compiled hits of the layers above ask of this one (arena/views/_hit_api.h):
 * the request checks and the fresh views, exported as the capsule _C_API; its offset
 * filled by bind(). */
static ArenaHitAPI hit_api = {
    .version = ARENA_HIT_API_VERSION,
    .digest = digest_of,
    .same_request = same_request,
    .same_classes = same_classes,
    .fresh_view = fresh_of,
};

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(Slot, RegionStack, Buffer, Prepared, Governor, RequestLog, sites, internal_files): "
     "where a hit reads their attributes, and caller_info's memos."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "arena.views._hit",
    "The compiled hit path of arena's fronts (optional; see arena.views.hit).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__hit(void) {
    /* The slots layer's C-API, as NumPy's import_array() takes NumPy's: once. Its module
     * is imported first: PyCapsule_Import imports only the package and reads the rest as
     * attributes, and arena.slots may not have imported it yet. */
    PyObject *slots = PyImport_ImportModule("arena.slots._slot");
    Py_XDECREF(slots);
    ArenaSlotAPI *api = slots == NULL ? NULL
                                      : (ArenaSlotAPI *)PyCapsule_Import(ARENA_SLOT_API_CAPSULE, 0);
    if (api == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError)) { /* a _slot without the C-API */
            PyErr_Clear();
            PyErr_SetString(PyExc_ImportError, "arena.views._hit needs the C-API of "
                                               "arena.slots._slot: rebuild arena");
        }
        return NULL;
    }
    if (api->version != ARENA_SLOT_API_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "arena.views._hit was built for version %d of arena.slots._slot's "
                     "C-API, which exports version %d: rebuild arena",
                     ARENA_SLOT_API_VERSION, api->version);
        return NULL;
    }
    slot_api = api;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    str_miss = PyUnicode_InternFromString("miss");
    str_python_request = PyUnicode_InternFromString("_python_request");
    str_served = PyUnicode_InternFromString("served");
    served_names = Py_BuildValue("(ss)", "strict", "capturing");
    zero = PyLong_FromLong(0);
    PyObject *type = PyType_FromSpec(&hit_spec);
    binding_type = (PyTypeObject *)PyType_FromSpec(&binding_spec);
    if (str_miss == NULL || str_python_request == NULL || str_served == NULL ||
        served_names == NULL || zero == NULL || type == NULL ||
        binding_type == NULL || PyModule_AddObject(module, "HitBase", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(binding_type);
    if (PyModule_AddObject(module, "Binding", (PyObject *)binding_type) < 0) {
        Py_DECREF(binding_type);
        Py_DECREF(module);
        return NULL;
    }
    planner_type = (PyTypeObject *)PyType_FromSpec(&planner_spec);
    if (planner_type == NULL) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(planner_type);
    if (PyModule_AddObject(module, "Planner", (PyObject *)planner_type) < 0) {
        Py_DECREF(planner_type);
        Py_DECREF(module);
        return NULL;
    }
    /* The C-API of the layers above (arena/views/_hit_api.h). */
    PyObject *capsule = PyCapsule_New(&hit_api, ARENA_HIT_API_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(module, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
