/* arena.planning._region_hit: the compiled hits of planning's regions (optional; CPython
 * API only, but for the compiled step enter and exit reading the owner and count of the
 * arena's `_thread.RLock` from its object layout, checked when the module binds and
 * replaced by the lock's own methods where the check fails (see the step section)).
 *
 * A replayed step's request (StepHitBase, the base class of arena.planning.steps.Step
 * where this module is in use) and a scope's repeated request (ScopeHitBase, the base of
 * arena.planning.scopes.Region), and the construction, enter and exit of the usual step
 * replay (CompiledStep) and of the usual scope (CompiledScope): each mirrors a Python
 * path (arena/planning/steps.py, replay.py, scopes.py) and hands every other case to it,
 * so every guarantee is written once, in Python, and this file only skips work on the
 * paths where the outcome is already decided.
 *
 * It sits in the planning layer, above the views layer's compiled hit (arena/views/_hit.c)
 * and the slots layer, and asks each through its C-API, imported once at this module's
 * import (as arena/views/_hit.c imports the slots layer's, and arena/slots/_growth.c the
 * memory layer's):
 *
 *   arena/views/_hit_api.h   the request checks (a plain request's digest, the same
 *                            request, the same dtype classes; the exact-int rule and an
 *                            exact int's value, inline) and the fresh views, as the plain
 *                            hit makes them
 *   arena/slots/_slot_api.h  every store into a slot or its region stack (a call counted,
 *                            the stack's top and live bytes, a region opened or closed,
 *                            LOAD)
 *
 * A replayed step's cache list may carry a row per request index (arena/planning/_rows.c,
 * bound by bind_rows()), which the step hit reads through arena/planning/_step_rows.h.
 *
 * It reads the fields it decides on itself, at the offsets bind() finds (Slot,
 * RegionStack, Buffer, Prepared and Governor: the layers below), bind_steps() (Step, its
 * run, book and books, the placer) and bind_scopes() (Scope, the placer). Objects of any
 * other type take the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "../base/_fields.h"
#include "../slots/_slot_api.h"
#include "../views/_hit_api.h"
#include "_step_rows.h"

/* The C-APIs of the layers below, imported when this module is. */
static ArenaSlotAPI *slot_api;
static ArenaHitAPI *hit_api;

/* Where the hits read the lower layers' objects (set by bind()). */
static PyTypeObject *slot_type, *stack_type, *buffer_type, *prepared_type, *governor_type;
static Py_ssize_t slot_buffer, slot_calls, slot_stack, slot_load, slot_plain_high;
static Py_ssize_t slot_governor, slot_pending, stack_regions, stack_top, stack_live, stack_below;
static Py_ssize_t buffer_prepared, prepared_views, prepared_required;
static Py_ssize_t prepared_key, governor_locked, governor_debug, governor_closed;
static Py_ssize_t governor_mutex, governor_asleep;
static PyObject *zero, *one, *str_python_get, *str_python_release, *str_captured;

/* The capture probe's answer (a plain request's hit asks it so, arena/views/_hit.c): 1 a
 * capture under way, 0 none, -1 with the probe's exception (an interrupt included). */
static int ask_probe(PyObject *probe) {
    Py_INCREF(probe); /* the call may run code that drops the region's reference */
    PyObject *answer = PyObject_CallNoArgs(probe);
    Py_DECREF(probe);
    int capturing = answer == NULL ? -1 : PyObject_IsTrue(answer);
    Py_XDECREF(answer);
    return capturing;
}

/* The offset of `type`'s writable __slots__ member `name`: 0, or -1 with a TypeError. */
static int member_offset(PyTypeObject *type, const char *name, Py_ssize_t *offset) {
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name); /* borrowed */
    return slot_offset(descr, type->tp_name, name, offset);
}

static void keep(PyObject **target, PyObject *value) {
    PyObject *old = *target;
    Py_INCREF(value);
    *target = value;
    Py_XDECREF(old);
}

/* Replace an object field with a new reference (consumed). */
static void put(PyObject **target, PyObject *value) {
    PyObject *old = *target;
    *target = value;
    Py_XDECREF(old);
}

static int offsets(PyTypeObject *type, const char *const *names, Py_ssize_t *const *out) {
    for (int i = 0; names[i] != NULL; i++)
        if (member_offset(type, names[i], out[i]) < 0) return -1;
    return 0;
}

static PyObject *bind(PyObject *module, PyObject *args) {
    PyTypeObject *types[5];
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!", &PyType_Type, &types[0], &PyType_Type,
                          &types[1], &PyType_Type, &types[2], &PyType_Type, &types[3],
                          &PyType_Type, &types[4]))
        return NULL;
    if (hit_api->used_at <= 0) { /* its entries' used flag is stored at that offset */
        PyErr_SetString(PyExc_TypeError, "bind() after arena.views._hit.bind()");
        return NULL;
    }
    static const char *const slot_names[] = {"buffer", "calls",   "stack",   "load",
                                             "plain_high", "governor", "pending", NULL};
    Py_ssize_t *const slot_out[] = {&slot_buffer,     &slot_calls,    &slot_stack, &slot_load,
                                    &slot_plain_high, &slot_governor, &slot_pending};
    static const char *const stack_names[] = {"regions", "top", "live", "below", NULL};
    Py_ssize_t *const stack_out[] = {&stack_regions, &stack_top, &stack_live, &stack_below};
    static const char *const buffer_names[] = {"prepared", NULL};
    Py_ssize_t *const buffer_out[] = {&buffer_prepared};
    static const char *const prepared_names[] = {"views", "required", "key", NULL};
    Py_ssize_t *const prepared_out[] = {&prepared_views, &prepared_required, &prepared_key};
    static const char *const governor_names[] = {"locked", "debug", "closed",
                                                 "mutex",  "asleep", NULL};
    Py_ssize_t *const governor_out[] = {&governor_locked, &governor_debug, &governor_closed,
                                        &governor_mutex, &governor_asleep};
    if (offsets(types[0], slot_names, slot_out) < 0 ||
        offsets(types[1], stack_names, stack_out) < 0 ||
        offsets(types[2], buffer_names, buffer_out) < 0 ||
        offsets(types[3], prepared_names, prepared_out) < 0 ||
        offsets(types[4], governor_names, governor_out) < 0 ||
        slot_api->bind(types[0], types[1], types[4]) < 0)
        return NULL;
    PyTypeObject **targets[5] = {&slot_type, &stack_type, &buffer_type, &prepared_type,
                                 &governor_type};
    for (int i = 0; i < 5; i++) keep((PyObject **)targets[i], (PyObject *)types[i]);
    Py_RETURN_NONE;
}

/* The region stack of `slot` (borrowed: its open scopes and steps, their top and live
 * bytes), or NULL where the field is not a RegionStack. */
static PyObject *stack_of(PyObject *slot) {
    PyObject *stack = FIELD(slot, slot_stack);
    return stack != NULL && Py_IS_TYPE(stack, stack_type) ? stack : NULL;
}

/* ------------------------------------------------------------------ StepHitBase
 *
 * The compiled hit of a replayed step (arena.planning.steps): a request index whose views
 * the replay remembered over the slot's current buffer, every view the plan says must be
 * released by now released, and no request log to tell. A capture probe is asked once the
 * views are built, as the plain hit asks it (arena/views/_hit.c): True (a CUDA graph being
 * captured) hands the request, with those views, to the step's Python _captured (the
 * capture mark). Its fields are the step's, under the names the pure-Python base
 * (arena.planning.region_hit.PyStepHitBase) has:
 *
 *   slot         the slot the step runs on, or None
 *   request      the index of the step's next request (an int)
 *   _caches      list, per request index, of {specs: Prepared} over _buffer; or None
 *   _expiring    list, per request index, of the blocks that must be released by then
 *   _released    the run's set of released blocks
 *   _handed      the run's list of what it handed out: per request a list, per view the
 *                view handed out or (a lean request) the remembered view it is a fresh
 *                view of (its witness)
 *   _ids         the run's bytearray of the addresses of the views handed out (native
 *                pointers), block k's at the k-th (room for the plan's every block)
 *   _starts      the plan's list of each request's first block (book.starts)
 *   _buffer      the buffer _caches belongs to
 *   _fresh_view  per-view callable for a fresh view; None: the prepared view itself;
 *                False: every request takes the Python path
 *   _watch       True when served requests need Python's bookkeeping
 *   _probe       the front's capture probe, or None
 *   _quick       True when release() of one view may take the hit (a replay, no
 *                poisoning, no debug mode)
 *   _lasts       the run's last use per block (arena.planning.runs.StepRun)
 *
 * A lean request (arena.planning.runs.lean: a quick replay of a front making fresh views
 * of exact numpy.ndarray or torch.Tensor) keeps the remembered views and the fresh views'
 * addresses, not the fresh views: a view the caller drops is freed at once, as a plain
 * request's is. release(view) takes the newest record at the view's address whose witness
 * is the view, or an object of the witness's exact type whose data start where the
 * witness's do (same_ndarray, same_tensor, as arena.planning.runs.same_view).
 *
 * Anything else goes to the step's Python method _python_get (_python_release). */

typedef struct {
    PyObject_HEAD
    PyObject *slot;
    PyObject *request;
    PyObject *caches;
    PyObject *expiring;
    PyObject *released;
    PyObject *handed;
    PyObject *buffer;
    PyObject *fresh_view;
    PyObject *watch;
    PyObject *quick;
    PyObject *ids;
    PyObject *starts;
    PyObject *lasts;
    PyObject *probe;
} StepHitBase;

/* The first field of a NumPy array (PyArrayObject_fields: NumPy's ABI, the same in NumPy
 * 1 and 2), the only one read, and only from objects whose type is numpy.ndarray. */
typedef struct {
    PyObject_HEAD
    char *data;
} NdFields;

static PyTypeObject *ndarray_seen; /* numpy.ndarray, once an object of it was seen */

/* Whether `object` is an exact numpy.ndarray (its type named so; as runs._is_ndarray). */
static PyTypeObject *tensor_seen; /* torch.Tensor, once an object of it was seen */

static int is_ndarray(PyObject *object) {
    PyTypeObject *type = Py_TYPE(object);
    if (type == ndarray_seen) return 1;
    /* torch.Tensor is named "Tensor": no need to read its name (a cold line, between a
     * torch pass's kernels, on every step request and release of a tensor) */
    if (type == tensor_seen || strcmp(type->tp_name, "numpy.ndarray") != 0) return 0;
    Py_INCREF(type);
    Py_XSETREF(ndarray_seen, type);
    return 1;
}

/* Whether `view` stands for a fresh view of `witness`: exact ndarrays whose data start at
 * the same address (as arena.planning.runs.same_view: the shape, strides, dtype and
 * writeability a caller may change in place on the very view it was handed are not
 * compared; an array starting at a live block's first byte stands for that block). */
static int same_ndarray(PyObject *view, PyObject *witness) {
    if (Py_TYPE(view) != Py_TYPE(witness) || !is_ndarray(view)) return 0;
    return ((NdFields *)view)->data == ((NdFields *)witness)->data;
}

static PyObject *str_data_ptr, *str_module;

/* Whether `object` is an exact torch.Tensor (a class named Tensor of module torch; as
 * runs._is_tensor). The module is read from the class's own dict, as type.__module__
 * reads a class's: no Python code runs. */
static int is_tensor(PyObject *object) {
    PyTypeObject *type = Py_TYPE(object);
    if (type == tensor_seen) return 1;
    if (!arena_is_torch_tensor_type(type, str_module)) return 0;
    Py_INCREF(type);
    Py_XSETREF(tensor_seen, type);
    return 1;
}


#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* The int `value` (at least 0): PyLong_FromLong below 2**30 (one digit: CPython 3.11
 * builds it directly, where PyLong_FromSsize_t takes its general loop). */
static inline PyObject *small_int(Py_ssize_t value) {
    return value < ((Py_ssize_t)1 << 30) ? PyLong_FromLong((long)value) : PyLong_FromSsize_t(value);
}

/* A plain one-view request in a few machine words: its dtype object and up to
 * SIGNATURE_DIMS dimensions below 2**32. A memo compares a request with the one it noted
 * through this copy (plain_request_is) instead of reading the noted key's tuples and
 * ints: those objects lie elsewhere in memory, a cache line or two per request that
 * another request index (or the arithmetic between requests) has evicted. */
#define SIGNATURE_DIMS 4

typedef struct {
    PyObject *dtype; /* NULL: no copy (several views, more dimensions, a large one) */
    Py_ssize_t ndim;
    uint32_t dims[SIGNATURE_DIMS];
} Signature;

/* The signature of `key`, a plain request (exact tuples of (exact tuple of exact ints,
 * dtype)); dtype NULL where it has none. Runs no Python code. */
static Signature signature_of(PyObject *key) {
    Signature sig = {NULL, 0, {0}};
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 1) return sig;
    PyObject *spec = PyTuple_GET_ITEM(key, 0);
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2) return sig;
    PyObject *shape = PyTuple_GET_ITEM(spec, 0);
    if (!PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) > SIGNATURE_DIMS) return sig;
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    for (Py_ssize_t k = 0; k < ndim; k++) {
        Py_ssize_t dim = arena_exact_size(PyTuple_GET_ITEM(shape, k));
        if (dim < 0 || (unsigned long long)dim > 0xffffffffULL) return sig;
        sig.dims[k] = (uint32_t)dim;
    }
    sig.ndim = ndim;
    sig.dtype = PyTuple_GET_ITEM(spec, 1);
    return sig;
}

static int same_plain_request(PyObject *key, PyObject *specs); /* (the scope section) */

/* Whether `specs` is the plain request `key` whose signature is `sig` (as
 * same_plain_request(key, specs): exact tuples, exact ints of the same values, the very
 * same dtype object), read from the signature where it has one. 1 or 0; no Python code. */
static ALWAYS_INLINE int plain_request_is(const Signature *sig, PyObject *key, PyObject *specs) {
    if (sig->dtype == NULL) return same_plain_request(key, specs);
    if (PyTuple_GET_SIZE(specs) != 1) return 0;
    PyObject *spec = PyTuple_GET_ITEM(specs, 0);
    if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2 ||
        PyTuple_GET_ITEM(spec, 1) != sig->dtype)
        return 0;
    PyObject *shape = PyTuple_GET_ITEM(spec, 0);
    if (!PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) != sig->ndim) return 0;
    for (Py_ssize_t k = 0; k < sig->ndim; k++)
        if (arena_exact_size(PyTuple_GET_ITEM(shape, k)) != (Py_ssize_t)sig->dims[k]) return 0;
    return 1;
}

/* Where a request index's hit last found its entry in a cache of one request: the cache
 * dict, the state it had then, the key it held (and its signature) and the entry it
 * mapped the key to. While the request index's cache is that dict in that state, the
 * dict still maps that key to that entry (it holds both: the pointers are alive), so the
 * hit compares the request with the key without walking the dict (PyDict_Next reads its
 * table, one more object per request index of a step). A dict's state is its
 * ma_version_tag: up to CPython 3.11, every new dict and every change of any dict takes
 * the next value of one process-wide counter, so an address and a tag name one state of
 * one dict. CPython 3.12 deprecates the tag: there the hit walks the dict every time. The
 * memo holds no references and changes which memory is read, never the outcome:
 * PyDict_Next of that dict in that state yields that very key and entry. A memo is one
 * cache line, and a step's request indices take consecutive ones (from a hash of its
 * caches list, which lives as long as the buffer), so a replay reads them in order, as
 * the CPU's prefetcher expects, for every step. */
#if PY_VERSION_HEX < 0x030C0000
#define STEP_MEMO 1
#define STEP_MEMO_SIZE 4096
typedef struct {
    PyObject *cache;
    uint64_t version;
    PyObject *key;
    PyObject *entry;
    Signature sig;
} StepMemo;
_Static_assert(sizeof(void *) != 8 || sizeof(StepMemo) == 64, "a step memo: one line");
#if defined(__GNUC__)
static StepMemo step_memo[STEP_MEMO_SIZE] __attribute__((aligned(64)));
#else
static StepMemo step_memo[STEP_MEMO_SIZE];
#endif

static inline StepMemo *step_memo_of(PyObject *caches, Py_ssize_t r) {
    uintptr_t at = (uintptr_t)caches;
    return &step_memo[(((at >> 4) ^ (at >> 16)) * 61 + (uintptr_t)r) % STEP_MEMO_SIZE];
}
#else
#define STEP_MEMO 0
#endif

/* The StepCaches type of arena.planning._rows (bind_rows), whose rows the step hit reads
 * (_step_rows.h); NULL until bound: every step cache list is then a plain list. */
static PyTypeObject *step_rows_type;

/* bind_rows(StepCaches): the type of a step's cache lists with rows (a list subclass of
 * the layout _step_rows.h declares). */
static PyObject *bind_rows(PyObject *module, PyObject *type) {
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyList_Type) ||
        ((PyTypeObject *)type)->tp_basicsize != (Py_ssize_t)sizeof(StepCachesObject)) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_rows(StepCaches): a list subclass of _step_rows.h's layout");
        return NULL;
    }
    keep((PyObject **)&step_rows_type, type);
    Py_RETURN_NONE;
}

/* The views layer's fresh view of `view` for a step request served from `row` (NULL:
 * none): made from the row's copy of an ndarray view where numpy.ndarray.view is the
 * fresh view (no read of the view, its shape or strides: _step_rows.h), through the NumPy
 * entries the views layer's C-API exports, else from the view (the C-API's fresh_view). */
static inline PyObject *fresh_of_row(const StepRow *row, PyObject *fresh, PyObject *view) {
#if STEP_ROWS
    if (row != NULL && row->descr != NULL && fresh == hit_api->ndarray_view && fresh != NULL) {
        PyObject *out = step_row_fresh(row, hit_api);
        if (out != NULL || PyErr_Occurred()) return out;
    }
#else
    (void)row;
#endif
    return hit_api->fresh_view(fresh, view);
}

/* The replay's hit: fresh views (a new reference); NULL without an exception when the
 * Python path serves the request, NULL with one on error. */
static PyObject *step_serve(StepHitBase *self, PyObject *specs) {
    PyObject *caches = self->caches, *slot = self->slot, *request = self->request;
    if (caches == NULL || !(PyList_CheckExact(caches) || Py_IS_TYPE(caches, step_rows_type)) ||
        slot == NULL || !Py_IS_TYPE(slot, slot_type) || self->watch != Py_False ||
        self->probe == NULL || request == NULL || !PyLong_CheckExact(request))
        return NULL;
    PyObject *stack = stack_of(slot);
    PyObject *regions = stack == NULL ? NULL : FIELD(stack, stack_regions);
    if (regions == NULL || !PyList_CheckExact(regions)) return NULL;
    Py_ssize_t depth = PyList_GET_SIZE(regions);
    if (depth == 0 || PyList_GET_ITEM(regions, depth - 1) != (PyObject *)self) return NULL;
    if (FIELD(slot, slot_buffer) != self->buffer) return NULL;
    Py_ssize_t r = arena_exact_size(request);
    if (r < 0 || r >= PyList_GET_SIZE(caches)) return NULL;
    PyObject *cache = PyList_GET_ITEM(caches, r);
    if (!PyDict_CheckExact(cache)) return NULL;
    PyObject *found = NULL, *memo_key = NULL; /* memo_key: the key found through the memo */
    /* The request index's row (a StepCaches: _step_rows.h), where the dict is the one it
     * noted, unchanged, and the request its one key's: its entry, read from the row. */
    const StepRow *row = NULL;
#if STEP_ROWS
    if ((row = step_row_of(step_rows_type, caches, r, cache, specs)) != NULL) {
        found = row->entry;
        memo_key = row->key;
    }
#endif
#if STEP_MEMO
    /* This dict in the state it had at a hit that noted it: its one key and entry. The
     * key noted is a plain request (it matched one), so a request that is the same plain
     * request (plain_request_is, from the memo's copy of the key: exact tuples and ints,
     * no Python code) is plain and is that key's: no digest, no second comparison. */
    uint64_t seen = ((PyDictObject *)cache)->ma_version_tag;
    StepMemo *memo = step_memo_of(caches, r);
    PyObject *noted = NULL; /* the dict's key to note, where PyDict_Next found it */
    int memo_seen = row == NULL && memo->cache == cache && memo->version == seen;
    if (memo_seen && plain_request_is(&memo->sig, memo->key, specs)) {
        found = memo->entry;
        memo_key = memo->key;
    }
#endif
    /* Plain requests only (exact tuples of exact ints): 4.0 hashes like 4. */
    if (found == NULL && hit_api->digest(specs) == 0) return NULL;
    /* Held across the lookup, which may run a dtype's Python __hash__ or __eq__. */
    Py_INCREF(cache);
#if STEP_MEMO
    if (memo_seen) {
        /* noted, but not this request: the lookup below decides */
    } else
#endif
    if (found == NULL && PyDict_GET_SIZE(cache) == 1) {
        /* One request remembered at this index (the usual case): compared element by
         * element (the same shape and dtype objects), without hashing the request. */
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        if (PyDict_Next(cache, &pos, &key, &value) && hit_api->same_request(key, specs) == 1) {
            found = value;
#if STEP_MEMO
            noted = key;
#endif
        }
        /* looked up next: the lookup explains (an interrupt goes on) */
        if (arena_clear_unless_interrupt()) {
            Py_DECREF(cache);
            return NULL;
        }
    }
    if (found == NULL) found = PyDict_GetItemWithError(cache, specs);
    Py_XINCREF(found);
    Py_DECREF(cache);
    /* Found through the memo under the entry's own key, the dtypes are the very objects
     * of that key (plain_request_is): of its classes. */
    if (found == NULL || !Py_IS_TYPE(found, prepared_type) ||
        (!(memo_key != NULL && FIELD(found, prepared_key) == memo_key) &&
         !hit_api->same_classes(FIELD(found, prepared_key), specs))) {
        /* a miss, or an unhashable dtype: the Python path explains; an interrupt raised in
         * a dtype's Python __hash__ or __eq__ goes on (the Python path's lookup would not
         * meet it again) */
        arena_clear_unless_interrupt();
        Py_XDECREF(found);
        return NULL;
    }
    /* The lookup may have let another thread move on: check the step again. */
    if (self->caches != caches || self->slot != slot || self->request != request ||
        FIELD(slot, slot_buffer) != self->buffer) {
        Py_DECREF(found);
        return NULL;
    }
    PyObject *entry = found;
    PyObject *expiring = self->expiring, *released = self->released;
    if (expiring == NULL || !PyList_CheckExact(expiring) || r >= PyList_GET_SIZE(expiring)) {
        Py_DECREF(entry);
        return NULL;
    }
    PyObject *ends = PyList_GET_ITEM(expiring, r);
    if (!PyTuple_CheckExact(ends)) {
        Py_DECREF(entry);
        return NULL;
    }
    if (PyTuple_GET_SIZE(ends)) {
        if (released == NULL || !PySet_CheckExact(released)) {
            Py_DECREF(entry);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ends); i++) {
            int gone = PySet_Contains(released, PyTuple_GET_ITEM(ends, i));
            if (gone != 1) {
                /* kept past its planned life: the Python path names the divergence */
                PyErr_Clear();
                Py_DECREF(entry);
                return NULL;
            }
        }
    }
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    PyObject *views = FIELD(entry, prepared_views);
    PyObject *handed = self->handed, *fresh = self->fresh_view, *ids = self->ids;
    PyObject *starts = self->starts;
    if (views == NULL || !PyList_CheckExact(views) || PyList_GET_SIZE(views) != count ||
        handed == NULL || !PyList_CheckExact(handed) || fresh == NULL || fresh == Py_False ||
        FIELD(slot, slot_calls) == NULL || ids == NULL || !PyByteArray_CheckExact(ids) ||
        starts == NULL || !PyList_CheckExact(starts) || r >= PyList_GET_SIZE(starts) ||
        !PyLong_CheckExact(PyList_GET_ITEM(starts, r))) {
        Py_DECREF(entry);
        return NULL;
    }
    if (row != NULL && views != row->views) row = NULL; /* not the views noted: the list's */
    /* Every earlier request recorded, and no later one (else an interrupt left one: the
     * Python path drops it, StepRun.hand). */
    PyObject *last = PyList_GET_ITEM(starts, PyList_GET_SIZE(starts) - 1);
    Py_ssize_t first = arena_exact_size(PyList_GET_ITEM(starts, r));
    Py_ssize_t total = arena_exact_size(last);
    if (first < 0 || total < first + count || PyList_GET_SIZE(handed) != r) {
        Py_DECREF(entry);
        return NULL;
    }
    Py_ssize_t at = first * (Py_ssize_t)sizeof(void *);
    int lean = self->quick == Py_True && fresh != Py_None && count > 0 &&
               (row != NULL ? row->kind != STEP_ROW_OTHER
                            : is_ndarray(PyList_GET_ITEM(views, 0)) ||
                                  is_tensor(PyList_GET_ITEM(views, 0)));
    Py_INCREF(views);
    PyObject *out = PyList_New(count);
    for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
        /* a row's request has one view, the row's (held by the row) */
        PyObject *view = row != NULL ? row->view : PyList_GET_ITEM(views, i);
        if (fresh == Py_None) {
            Py_INCREF(view);
        } else if ((view = fresh_of_row(row, fresh, view)) == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, view);
    }
    /* The capture probe, asked once the views are built (Step.get_simultaneous asks it
     * there): a capture under way hands the request and these views to Step._captured,
     * which marks the buffer captured and serves it (or places it anew); a probe's
     * exception goes on, nothing installed. */
    if (out != NULL && self->probe != Py_None) {
        int capturing = ask_probe(self->probe);
        if (capturing != 0) {
            PyObject *result = NULL;
            if (capturing > 0) {
                PyObject *call[4] = {(PyObject *)self, entry, specs, out};
                result = PyObject_VectorcallMethod(str_captured, call,
                                                   4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            }
            Py_DECREF(views);
            Py_DECREF(out);
            Py_DECREF(entry);
            return result; /* NULL: with the probe's or _captured's exception */
        }
    }
    /* The slot's next count (the slots layer's: counted up in place at the install where
     * only the slot holds it, else a new int), made after the last Python code (the fresh
     * views, the probe): none runs from here to the last store. */
    ArenaSlotCount calls = {NULL, 0};
    if (out != NULL && arena_slot_count_ahead(slot_api, slot, &calls) < 0) Py_CLEAR(out);
    /* request + 1 from r (request's value, an exact int): no generic addition */
    PyObject *next = out == NULL ? NULL : small_int(r + 1);
    /* The addresses (at the request's first block: the plan's every block made room for
     * once, at the run's first request), then the witnesses (the fresh views may have run
     * Python code: the record is checked again). */
    int failed = next == NULL || self->ids != ids || self->handed != handed ||
                 PyList_GET_SIZE(handed) != r;
    if (!failed && PyByteArray_GET_SIZE(ids) < total * (Py_ssize_t)sizeof(void *))
        failed = PyByteArray_Resize(ids, total * (Py_ssize_t)sizeof(void *)) < 0;
    if (!failed) {
        char *raw = PyByteArray_AS_STRING(ids) + at;
        for (Py_ssize_t i = 0; i < count; i++) {
            void *address = PyList_GET_ITEM(out, i);
            memcpy(raw + i * (Py_ssize_t)sizeof address, &address, sizeof address);
        }
        failed = PyList_Append(handed, lean ? views : out) < 0;
    }
    Py_DECREF(views);
    if (failed) {
        Py_XDECREF(next);
        Py_XDECREF(calls.calls);
        Py_XDECREF(out);
        Py_DECREF(entry);
        return NULL; /* with an exception where one was raised, else the Python path */
    }
    arena_hit_mark_used(hit_api, entry); /* the views layer's store */
    arena_slot_count_install(slot_api, slot, &calls);
    put(&self->request, next);
#if STEP_MEMO
    /* Noted where the dict is still the one walked, in the state walked (the step's
     * caches, held by it, still hold it): plain stores, no Python code. */
    if (noted != NULL && self->caches == caches && r < PyList_GET_SIZE(caches) &&
        PyList_GET_ITEM(caches, r) == cache && ((PyDictObject *)cache)->ma_version_tag == seen) {
        memo = step_memo_of(caches, r);
        memo->cache = cache;
        memo->version = seen;
        memo->key = noted;
        memo->entry = entry;
        memo->sig = signature_of(noted);
    }
#endif
    Py_DECREF(entry);
    return out;
}

/* Release `block`, whose last request is `last`: 1, or -1 with an exception set. */
static int step_release_block(StepHitBase *self, PyObject *block, PyObject *last) {
    int failed = PyDict_SetItem(self->lasts, block, last) < 0 ||
                 PySet_Add(self->released, block) < 0;
    return failed ? -1 : 1;
}

/* Whether the exact ints `a` and `b` are equal: on CPython 3.11, their sizes and digits
 * compared in place (an int's digits are normalized: equal values, equal digits), which
 * saves a call into CPython's comparison code (cold between a torch pass's kernels);
 * else PyObject_RichCompareBool. 1 or 0 (-1 with an exception set: never for exact ints). */
static int same_int(PyObject *a, PyObject *b) {
#if PY_VERSION_HEX < 0x030C0000
    Py_ssize_t size = Py_SIZE(a);
    if (size != Py_SIZE(b)) return 0;
    const digit *x = ((PyLongObject *)a)->ob_digit, *y = ((PyLongObject *)b)->ob_digit;
    for (Py_ssize_t i = 0; i < (size < 0 ? -size : size); i++)
        if (x[i] != y[i]) return 0;
    return 1;
#else
    return PyObject_RichCompareBool(a, b, Py_EQ);
#endif
}

/* `tensor.data_ptr()`, called as PyObject_VectorcallMethod calls it, without its method
 * lookup and the method descriptor's dispatch (code a torch pass's kernels evict from the
 * CPU's caches between two releases): where the tensor's type has the generic getattr
 * and, in its MRO, a method descriptor of METH_NOARGS named data_ptr of a class the
 * tensor is an instance of (torch's THPVariable_data_ptr), looked up once per type and
 * version tag (a type whose attributes change takes a new tag, and is looked up again),
 * and the tensor has no instance attribute that could shadow that method: on CPython
 * 3.11, a type of managed dicts whose object has neither inline values nor a dict (a fresh
 * `t.data` has neither until an attribute is set on it: _PyObject_GetMethod reads these
 * two pointers, at the same places), or a type with no instance dict at all. The C
 * function is then called as method_vectorcall_NOARGS calls it (in a recursion check,
 * its result checked as a vectorcall's is); a torch function mode still sees the call
 * (torch checks for one inside it). Anything else: the generic call. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define DATA_PTR_DIRECT 1
static PyTypeObject *data_ptr_type; /* the type data_ptr_descr was found for */
static unsigned int data_ptr_tag;
static PyObject *data_ptr_descr; /* borrowed while the type's tag stands: its MRO holds it */

/* Whether `object` has no instance attribute (see above); 0 where it may have one. */
static int no_instance_attributes(PyObject *object) {
    PyTypeObject *type = Py_TYPE(object);
    if (type->tp_flags & Py_TPFLAGS_MANAGED_DICT)
        return ((PyObject **)object)[-4] == NULL && ((PyObject **)object)[-3] == NULL;
    return type->tp_dictoffset == 0;
}
#else
#define DATA_PTR_DIRECT 0
#endif

static PyObject *call_data_ptr(PyObject *tensor) {
#if DATA_PTR_DIRECT
    PyTypeObject *type = Py_TYPE(tensor);
    if (type->tp_getattro == PyObject_GenericGetAttr &&
        (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
        if (type != data_ptr_type || type->tp_version_tag != data_ptr_tag) {
            PyObject *descr = _PyType_Lookup(type, str_data_ptr); /* borrowed; runs no code */
            int usable = descr != NULL && Py_IS_TYPE(descr, &PyMethodDescr_Type) &&
                         (((PyMethodDescrObject *)descr)->d_method->ml_flags &
                          ~METH_COEXIST) == METH_NOARGS &&
                         PyObject_TypeCheck(tensor, PyDescr_TYPE(descr)) &&
                         (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG);
            data_ptr_type = usable ? type : NULL; /* compared, never read through */
            data_ptr_tag = usable ? type->tp_version_tag : 0;
            data_ptr_descr = usable ? descr : NULL;
        }
        if (type == data_ptr_type && no_instance_attributes(tensor)) {
            PyCFunction meth = ((PyMethodDescrObject *)data_ptr_descr)->d_method->ml_meth;
            if (Py_EnterRecursiveCall(" while calling a Python object")) return NULL;
            PyObject *out = meth(tensor, NULL);
            Py_LeaveRecursiveCall();
            return _Py_CheckFunctionResult(PyThreadState_Get(), data_ptr_descr, out, NULL);
        }
    }
#endif
    return PyObject_VectorcallMethod(str_data_ptr, &tensor, 1, NULL);
}

/* The address the exact int `value` holds (as PyLong_AsVoidPtr), NULL where it holds none
 * (an error cleared): on CPython 3.11 an int of one or two digits (below 2**60, every
 * user-space address of x86-64 and AArch64) read in place, without the call. */
static void *long_address(PyObject *value) {
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    Py_ssize_t size = Py_SIZE(value);
    const digit *d = ((PyLongObject *)value)->ob_digit;
    if (size == 1) return (void *)(uintptr_t)d[0];
    if (size == 2 && sizeof(void *) == 8)
        return (void *)((uintptr_t)d[0] | (uintptr_t)d[1] << PyLong_SHIFT);
#endif
    void *address = PyLong_AsVoidPtr(value);
    if (address == NULL) PyErr_Clear();
    return address;
}

/* Whether `view` stands for a fresh view of the torch tensor `witness` (as
 * arena.planning.runs.same_view): exact torch.Tensor objects whose data start at the same
 * address, read by their data_ptr() methods; the witness's read from its step row where
 * `noted` (step_row_tensor_data: what its data_ptr() returned when noted) is the view's,
 * saving that call. 1 where it does, 0 where it does not or where the step changed while
 * they ran (a torch function mode may run Python code: the Python path decides then), -1
 * on error (an Exception cleared: the Python path explains; any other, such as a
 * KeyboardInterrupt, left set). */
static int same_tensor(StepHitBase *self, PyObject *view, PyObject *witness, void *noted) {
    if (Py_TYPE(view) != Py_TYPE(witness) || !is_tensor(view)) return 0;
    PyObject *handed = self->handed, *released = self->released, *request = self->request;
    PyObject *ids = self->ids;
    /* Held across the calls: the checks after them compare these very objects. */
    PyObject *held[] = {view, witness, handed, released, request, ids};
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) Py_INCREF(held[i]);
    PyObject *mine = call_data_ptr(view), *theirs = NULL;
    int same = mine == NULL ? -1 : 0;
    /* The witness's data_ptr() as its step row noted it: the same where the view's is
     * (only an equal address is taken from the row; any other calls the witness's) */
    if (mine != NULL && noted != NULL && PyLong_CheckExact(mine))
        same = long_address(mine) == noted;
    if (same == 0) {
        theirs = call_data_ptr(witness);
        same = theirs == NULL ? -1 : 0;
        if (theirs != NULL && PyLong_CheckExact(mine) && PyLong_CheckExact(theirs))
            same = same_int(mine, theirs); /* exact ints: no Python code */
    }
    if (same == 1 && (self->handed != handed || self->released != released ||
                      self->request != request || self->ids != ids))
        same = 0;
    /* An Exception is the Python path's to explain (its own calls meet it again); one that
     * is no Exception (a KeyboardInterrupt a signal's handler raised in a torch function
     * mode's Python code) goes on out of the release, as out of the Python path's calls. */
    if (same < 0 && (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_Exception)))
        PyErr_Clear();
    Py_XDECREF(mine);
    Py_XDECREF(theirs);
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) Py_DECREF(held[i]);
    return same;
}

/* The data_ptr() the step row of request index `i` noted for the torch tensor `witness`
 * (the tensor it holds), or NULL (step_row_tensor_data). */
static void *noted_data(StepHitBase *self, Py_ssize_t i, PyObject *witness) {
#if STEP_ROWS
    return step_row_tensor_data(step_rows_type, self->caches, i, witness);
#else
    (void)self;
    (void)i;
    (void)witness;
    return NULL;
#endif
}

/* The block of `view` for release(view) (Step.release's hot path): the newest record at
 * the view's address, whose witness is the view or a fresh view of it, for a block not
 * released yet (where `unreleased`; else not asked: the caller finds out as it adds the
 * block). A new reference; NULL without an exception when the Python path must run (it
 * names what is wrong), NULL with one on error. Runs no Python code but a torch tensor's
 * data_ptr() (same_tensor, which checks the step unchanged after it). */
static PyObject *step_find_block(StepHitBase *self, PyObject *view, int unreleased) {
    PyObject *handed = self->handed, *released = self->released, *request = self->request;
    PyObject *ids = self->ids, *starts = self->starts;
    if (self->quick != Py_True || self->slot == NULL || self->slot == Py_None ||
        handed == NULL || !PyList_CheckExact(handed) || released == NULL ||
        !PySet_CheckExact(released) || request == NULL || !PyLong_CheckExact(request) ||
        ids == NULL || !PyByteArray_CheckExact(ids) || starts == NULL ||
        !PyList_CheckExact(starts) || self->lasts == NULL || !PyDict_CheckExact(self->lasts))
        return NULL;
    /* Every request recorded whole (else Python reads what an interrupt left). */
    Py_ssize_t r = arena_exact_size(request);
    if (r < 0 || r >= PyList_GET_SIZE(starts) || PyList_GET_SIZE(handed) != r) return NULL;
    Py_ssize_t k = arena_exact_size(PyList_GET_ITEM(starts, r));
    if (k < 0 || PyByteArray_GET_SIZE(ids) < k * (Py_ssize_t)sizeof(void *)) return NULL;
    const char *raw = PyByteArray_AS_STRING(ids);
    for (Py_ssize_t i = r - 1; i >= 0; i--) {
        PyObject *made = PyList_GET_ITEM(handed, i);
        if (!PyList_CheckExact(made) || PyList_GET_SIZE(made) > k) return NULL;
        k -= PyList_GET_SIZE(made);
        for (Py_ssize_t j = PyList_GET_SIZE(made) - 1; j >= 0; j--) {
            void *address;
            memcpy(&address, raw + (k + j) * (Py_ssize_t)sizeof address, sizeof address);
            if (address != (void *)view) continue;
            /* The newest record at this address: the view's, if any is. */
            PyObject *witness = PyList_GET_ITEM(made, j);
            if (witness != view && !same_ndarray(view, witness) &&
                same_tensor(self, view, witness, noted_data(self, i, witness)) != 1)
                return NULL;
            PyObject *block = PyLong_FromSsize_t(k + j);
            if (block == NULL || !unreleased) return block;
            int gone = PySet_Contains(released, block);
            if (gone != 0) { /* released already (or an error): the Python path names it */
                PyErr_Clear();
                Py_DECREF(block);
                return NULL;
            }
            return block;
        }
    }
    return NULL;
}

/* The hit of release(view), one view: as step_release_views, the block's membership in
 * the released set read from the set's size as the block is added (one set operation, not
 * a lookup and then an add): a block released already leaves the size as it was, and
 * changes nothing (the Python path then names it); a block added has its last request
 * noted after it (a failure there takes it out again: nothing released). No Python code
 * runs from the search's end to the last store (exact ints into an exact set and dict). */
static int step_release_one(StepHitBase *self, PyObject *view) {
    PyObject *block = step_find_block(self, view, 0);
    if (block == NULL) return PyErr_Occurred() ? -1 : 0;
    PyObject *released = self->released, *lasts = self->lasts, *request = self->request;
    /* Each released block's last request is the one before it (a diverging replay
     * records it). The fields as step_find_block checked them (same_tensor found the step
     * unchanged after any Python code; lasts is checked again here). */
    Py_ssize_t r = arena_exact_size(request);
    PyObject *last = r > 0 ? small_int(r - 1) : PyNumber_Subtract(request, one);
    int outcome = last == NULL ? -1 : 0;
    if (last != NULL && lasts != NULL && PyDict_CheckExact(lasts)) {
        Py_ssize_t before = PySet_GET_SIZE(released);
        outcome = PySet_Add(released, block) < 0 ? -1 : PySet_GET_SIZE(released) > before;
        if (outcome == 1 && PyDict_SetItem(lasts, block, last) < 0) {
            /* (an exact int out of an exact set: no hash or comparison that can fail) */
            (void)PySet_Discard(released, block);
            outcome = -1;
        }
    }
    Py_XDECREF(last);
    Py_DECREF(block);
    return outcome;
}

/* Most views one release(*views) call serves compiled; more go to the Python path. */
#define STEP_RELEASE_MAX 8

/* The hit of release(*views): 1 when every view was released, 0 when the Python path
 * must run (nothing released), -1 with an exception set. All or nothing, as in Python:
 * every view's block is found (and found distinct) before any is released. */
static int step_release_views(StepHitBase *self, PyObject *const *args, Py_ssize_t n) {
    if (n == 1) return step_release_one(self, args[0]);
    if (n < 1 || n > STEP_RELEASE_MAX) return 0;
    PyObject *blocks[STEP_RELEASE_MAX];
    Py_ssize_t found = 0;
    int outcome = 1;
    while (outcome == 1 && found < n) {
        PyObject *block = step_find_block(self, args[found], 1);
        if (block == NULL) {
            outcome = PyErr_Occurred() ? -1 : 0;
            break;
        }
        for (Py_ssize_t i = 0; i < found; i++)
            if (arena_exact_size(blocks[i]) == arena_exact_size(block))
                outcome = 0; /* given twice */
        blocks[found++] = block;
    }
    if (outcome == 1) {
        /* Nothing in the search ran Python code, or it found the step unchanged after
         * (same_tensor): the step's request is the one it read.
         * Each released block's last request is the one before it (a diverging replay
         * records it). */
        Py_ssize_t r = arena_exact_size(self->request); /* an exact int: step_find_block */
        PyObject *last = r > 0 ? small_int(r - 1) : PyNumber_Subtract(self->request, one);
        if (last == NULL) outcome = -1;
        for (Py_ssize_t i = 0; i < found && outcome == 1; i++)
            outcome = step_release_block(self, blocks[i], last);
        Py_XDECREF(last);
    }
    for (Py_ssize_t i = 0; i < found; i++) Py_DECREF(blocks[i]);
    return outcome;
}

static PyObject *step_release(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int done = step_release_views((StepHitBase *)self, args, nargs);
    if (done < 0) return NULL;
    if (done) Py_RETURN_NONE;
    PyObject *method = PyObject_GetAttr(self, str_python_release);
    if (method == NULL) return NULL;
    PyObject *out = PyObject_Vectorcall(method, args, (size_t)nargs, NULL);
    Py_DECREF(method);
    return out;
}

static PyObject *step_get_simultaneous(PyObject *self, PyObject *specs) {
    PyObject *out = step_serve((StepHitBase *)self, specs);
    if (out != NULL || PyErr_Occurred()) return out;
    PyObject *method = PyObject_GetAttr(self, str_python_get);
    if (method == NULL) return NULL;
    out = PyObject_Call(method, specs, NULL);
    Py_DECREF(method);
    return out;
}

/* ------------------------------------------------------------------ step init, enter, exit
 *
 * A new step's fields, and the usual replay's enter and exit, compiled.
 *
 * init: what Step.__init__ makes, for the arguments a front passes (three positional,
 * alignment, poison, debug and fresh_view by keyword) and a key equal to itself. Which
 * field takes which argument, which a constant and which a new empty list is read at
 * bind time from two steps Step.__init__ made (bind_steps), so the fields are Python's.
 *
 * enter and exit: what Step._replay_locked and Step._end_replay do (their pure-Python
 * mirror, arena/planning/steps.py), for a planned key on a locked arena (not in debug
 * mode), entered on a slot with nothing open at its plan's height, and ended normally as
 * the only region open with no step run inside it. Everything else (and any object of an
 * unexpected type) goes to the step's Python methods: _python_init, _python_enter (the
 * step is running already), _enter_on(slot) (the general enter once the slot is chosen)
 * and _python_exit.
 *
 * Each does first what may run Python code (choosing the slot, finding the key's book,
 * looking up the remembered views, making the run and the region stack: an allocation
 * may collect garbage), then reads every field it decided on again (changed: the Python
 * path), checks that no other thread holds the governor's mutex (held: the Python path,
 * which waits for it), and installs the new state by plain stores: no Python code runs
 * from the check to the last store, so an interrupt or another thread sees the step
 * entered (exited) or not at all, and never inside another thread's critical section.
 * The values replaced are released after the last store. */

static PyTypeObject *bound_step, *run_type, *book_type, *books_type, *placer_type;
static PyTypeObject *rlock_type;
static PyObject *ended_run; /* arena.planning.steps._ENDED: the run of a step not running */
static Py_ssize_t st_book, st_placer, st_select, st_key, st_poison, st_debug, st_replay;
static Py_ssize_t st_moved, st_base, st_end, st_held, st_above, st_nested, st_inside;
static Py_ssize_t st_memo, st_run;
static Py_ssize_t run_released, run_handed, run_ids, run_lasts, run_nests;
static Py_ssize_t run_broken, run_live;
static Py_ssize_t book_offsets, book_running, book_stale, book_recorded_at, book_total;
static Py_ssize_t book_load, book_version, book_settled, book_expiring, book_base;
static Py_ssize_t book_above, book_above_runs, book_runs, book_top_level, book_starts;
static Py_ssize_t slot_stores, books_by_key;
static Py_ssize_t placer_probe, placer_key;
static PyObject *str_python_init, *str_python_enter, *str_enter_on, *str_python_exit;
static PyObject *str_acquire, *str_release, *str_step;
static PyObject *init_names[4]; /* alignment, poison, debug, fresh_view */

/* A template of fields: per field its offset and how it is made ('a': argument `index`,
 * 'c': the constant `value`, 'l': a new empty list, 'd': a new empty dict, 's': a new
 * empty set, 'b': a new empty bytearray). */
#define TEMPLATE_FIELDS 64
typedef struct {
    Py_ssize_t count;
    Py_ssize_t offset[TEMPLATE_FIELDS];
    char kind[TEMPLATE_FIELDS];
    int index[TEMPLATE_FIELDS];
    PyObject *value[TEMPLATE_FIELDS];
} Template;

static Template run_template, step_template;

static void template_clear(Template *t) {
    for (Py_ssize_t i = 0; i < t->count; i++) Py_CLEAR(t->value[i]);
    t->count = 0;
}

/* Add the field at `offset` to `t`, made as it is in `a` and `b` (made alike from the
 * arguments `marks`): 0, or -1 with an exception set. */
static int template_add(Template *t, Py_ssize_t offset, PyObject *a, PyObject *b,
                        PyObject *marks, const char *name) {
    if (t->count >= TEMPLATE_FIELDS) {
        PyErr_Format(PyExc_TypeError, "too many fields to make in C (at %s)", name);
        return -1;
    }
    PyObject *x = FIELD(a, offset), *y = FIELD(b, offset);
    Py_ssize_t i = t->count;
    t->offset[i] = offset;
    t->value[i] = NULL;
    t->index[i] = -1;
    for (Py_ssize_t k = 0; marks != NULL && k < PyTuple_GET_SIZE(marks); k++)
        if (x == PyTuple_GET_ITEM(marks, k)) t->index[i] = (int)k;
    if (x == NULL || y == NULL) {
        PyErr_Format(PyExc_TypeError, "%s is not set by its __init__", name);
        return -1;
    }
    if (t->index[i] >= 0 && x == y) {
        t->kind[i] = 'a';
    } else if (x == y && (x == Py_None || PyBool_Check(x) || PyLong_CheckExact(x) ||
                          (PyTuple_CheckExact(x) && PyTuple_GET_SIZE(x) == 0) ||
                          x == ended_run ||
                          (ended_run != NULL && (x == FIELD(ended_run, run_released) ||
                                                 x == FIELD(ended_run, run_handed) ||
                                                 x == FIELD(ended_run, run_ids) ||
                                                 x == FIELD(ended_run, run_lasts) ||
                                                 x == FIELD(ended_run, run_live))))) {
        /* immutable, or the run of steps not running and its fields (its live: the
         * read-only empty mapping every replay shares until it records) */
        t->kind[i] = 'c';
        Py_INCREF(x);
        t->value[i] = x;
    } else if (x != y && Py_IS_TYPE(x, Py_TYPE(y)) &&
               ((PyList_CheckExact(x) && PyList_GET_SIZE(x) == 0 && PyList_GET_SIZE(y) == 0) ||
                (PyByteArray_CheckExact(x) && PyByteArray_GET_SIZE(x) == 0 &&
                 PyByteArray_GET_SIZE(y) == 0) ||
                (PyDict_CheckExact(x) && PyDict_GET_SIZE(x) == 0 && PyDict_GET_SIZE(y) == 0) ||
                (PySet_CheckExact(x) && PySet_GET_SIZE(x) == 0 && PySet_GET_SIZE(y) == 0))) {
        t->kind[i] = PyList_CheckExact(x)   ? 'l'
                     : PyDict_CheckExact(x) ? 'd'
                     : PySet_CheckExact(x)  ? 's'
                                            : 'b';
    } else {
        PyErr_Format(PyExc_TypeError,
                     "%s is neither an argument, a constant nor a new empty list, dict, "
                     "set or bytearray: it cannot be made in C",
                     name);
        return -1;
    }
    t->count = i + 1;
    return 0;
}

/* Add every field named in `names` (a type's __slots__) of `type`. */
static int template_slots(Template *t, PyTypeObject *type, PyObject *a, PyObject *b,
                          PyObject *marks) {
    PyObject *names = PyObject_GetAttrString((PyObject *)type, "__slots__");
    PyObject *seq = names == NULL ? NULL : PySequence_Fast(names, "__slots__");
    Py_XDECREF(names);
    if (seq == NULL) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *name = PySequence_Fast_GET_ITEM(seq, i);
        const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        Py_ssize_t offset;
        if (text == NULL || member_offset(type, text, &offset) < 0 ||
            template_add(t, offset, a, b, marks, text) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a slot name");
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

/* A field of `t` for the fields of a new object (a new reference), or NULL with an
 * exception set. */
static PyObject *template_value(Template *t, Py_ssize_t i, PyObject *const *args) {
    PyObject *value;
    switch (t->kind[i]) {
    case 'l':
        return PyList_New(0);
    case 'd':
        return PyDict_New();
    case 's':
        return PySet_New(NULL);
    case 'b':
        return PyByteArray_FromStringAndSize(NULL, 0);
    case 'a':
        value = args[t->index[i]];
        break;
    default:
        value = t->value[i];
    }
    Py_INCREF(value);
    return value;
}

/* A new run, as StepRun() makes it (a new reference), or NULL with an exception set. */
static PyObject *new_run(void) {
    PyObject *run = run_type->tp_alloc(run_type, 0);
    for (Py_ssize_t i = 0; run != NULL && i < run_template.count; i++) {
        PyObject *value = template_value(&run_template, i, NULL);
        if (value == NULL) Py_CLEAR(run);
        else FIELD(run, run_template.offset[i]) = value;
    }
    return run;
}

/* The layout of a CPython 3.10-3.12 _thread.RLock (checked at bind time, else unused). */
typedef struct {
    PyObject_HEAD
    void *lock;
    unsigned long owner;
    unsigned long count;
    PyObject *weakrefs;
} RLockLayout;
static int rlock_readable; /* RLocks read as RLockLayout: their owner and count */

/* Whether no other thread holds `mutex` (an RLock): 1, 0 when one does (or it is not an
 * RLock), -1 with an exception set. Under the GIL a thread that holds the mutex has set
 * its owner and count before it runs anything else, so with no Python code run from here
 * to the last store, no other thread's critical section is under way. */
static int mutex_free(PyObject *mutex) {
    if (mutex == NULL || !Py_IS_TYPE(mutex, rlock_type)) return 0;
    if (rlock_readable) {
        RLockLayout *lock = (RLockLayout *)mutex;
        return lock->count == 0 || lock->owner == PyThread_get_thread_ident();
    }
    PyObject *call[2] = {mutex, Py_False};
    PyObject *got = PyObject_VectorcallMethod(str_acquire, call,
                                              2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (got == NULL) return -1;
    int taken = got == Py_True;
    Py_DECREF(got);
    if (taken) { /* released at once: the GIL is held until the last store */
        got = PyObject_VectorcallMethod(str_release, call, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                        NULL);
        if (got == NULL) return -1;
        Py_DECREF(got);
    }
    return taken;
}

/* Whether `lock`'s count and owner read as RLockLayout says after `calls` acquires. */
static int rlock_reads(PyObject *lock, unsigned long count) {
    RLockLayout *read = (RLockLayout *)lock;
    return read->count == count && (count == 0 || read->owner == PyThread_get_thread_ident());
}

/* Whether RLocks read as RLockLayout: an RLock acquired and released from Python shows
 * the count and owner it should at each step. */
static int rlock_check(PyTypeObject *type) {
#ifdef Py_GIL_DISABLED
    return 0;
#else
    if (type->tp_basicsize != sizeof(RLockLayout) ||
        strcmp(type->tp_name, "_thread.RLock") != 0)
        return 0;
    PyObject *lock = PyObject_CallNoArgs((PyObject *)type);
    if (lock == NULL) return -1;
    int readable = rlock_reads(lock, 0), step = 0;
    for (; readable && step < 4; step++) {
        PyObject *got = PyObject_CallMethodNoArgs(lock, step < 2 ? str_acquire : str_release);
        if (got == NULL) {
            Py_DECREF(lock);
            return -1;
        }
        Py_DECREF(got);
        readable = rlock_reads(lock, step < 2 ? (unsigned long)step + 1 : 3 - (unsigned long)step);
    }
    Py_DECREF(lock);
    return readable;
#endif
}

/* Stores into fields, the values replaced kept to be released once every store is done. */
typedef struct {
    PyObject *old[TEMPLATE_FIELDS];
    int count;
} Stores;

static void store(Stores *stores, PyObject **target, PyObject *value) {
    Py_INCREF(value);
    stores->old[stores->count++] = *target;
    *target = value;
}

/* The same, for a new reference. */
static void store_new(Stores *stores, PyObject **target, PyObject *value) {
    stores->old[stores->count++] = *target;
    *target = value;
}

static void release_stores(Stores *stores) {
    for (int i = 0; i < stores->count; i++) Py_XDECREF(stores->old[i]);
    stores->count = 0;
}

/* Hold (`hold` 1) or let go (-1) of every object a view of fields read (a struct of
 * object pointers): held, none can be freed and another made at its address while Python
 * code runs, so reading the fields again and comparing the pointers tells what changed. */
static void hold_view(void *view, size_t size, int hold) {
    PyObject **fields = (PyObject **)view;
    for (size_t i = 0; i < size / sizeof(PyObject *); i++) {
        if (hold > 0) Py_XINCREF(fields[i]);
        else Py_XDECREF(fields[i]);
    }
}

static PyObject *bind_steps(PyObject *module, PyObject *args) {
    PyTypeObject *step, *run, *book, *books, *placer, *rlock, *slot, *governor;
    PyObject *ended, *runs, *steps, *marks;
    int read_rlocks = 1;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O!OO!O!O!|p", &PyType_Type, &step,
                          &PyType_Type, &run, &PyType_Type, &book, &PyType_Type, &books,
                          &PyType_Type, &placer, &PyType_Type,
                          &rlock, &PyType_Type, &slot, &PyType_Type, &governor, &ended,
                          &PyTuple_Type, &runs, &PyTuple_Type, &steps, &PyTuple_Type, &marks,
                          &read_rlocks))
        return NULL;
    PyObject *base = PyObject_GetAttrString(module, "StepHitBase");
    int derived = base != NULL && PyType_Check(base) &&
                  PyType_IsSubtype(step, (PyTypeObject *)base);
    PyMemberDef *members = derived ? ((PyTypeObject *)base)->tp_members : NULL;
    Py_XDECREF(base); /* the module keeps it */
    if (!derived || members == NULL || slot_type == NULL || slot != slot_type || governor != governor_type ||
        !Py_IS_TYPE(ended, run) || PyTuple_GET_SIZE(runs) != 2 ||
        !Py_IS_TYPE(PyTuple_GET_ITEM(runs, 0), run) ||
        !Py_IS_TYPE(PyTuple_GET_ITEM(runs, 1), run) || PyTuple_GET_SIZE(steps) != 2 ||
        !Py_IS_TYPE(PyTuple_GET_ITEM(steps, 0), step) ||
        !Py_IS_TYPE(PyTuple_GET_ITEM(steps, 1), step) || PyTuple_GET_SIZE(marks) != 7) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError,
                            "bind_steps(Step, StepRun, StepBook, StepBooks, placer type, RLock, "
                            "Slot, Governor, the ended run, two StepRun(), two Step(*marks), "
                            "the 7 marks): after bind(), the same Slot and Governor; Step "
                            "derives from StepHitBase");
        return NULL;
    }
    static const char *const step_names[] = {
        "_book", "_placer", "_select", "key",    "_poison", "_debug", "replay", "moved", "base",
        "end",   "held",    "above",   "nested", "inside",  "_memo",  "run",    NULL};
    Py_ssize_t *const step_out[] = {
        &st_book,  &st_placer, &st_select, &st_key,    &st_poison, &st_debug,
        &st_replay, &st_moved, &st_base,   &st_end,    &st_held,   &st_above,
        &st_nested, &st_inside, &st_memo,  &st_run};
    static const char *const run_names[] = {"released", "handed", "ids",  "lasts",
                                            "nests",    "broken", "live", NULL};
    Py_ssize_t *const run_out[] = {&run_released, &run_handed, &run_ids,  &run_lasts,
                                   &run_nests,    &run_broken, &run_live};
    static const char *const book_names[] = {
        "offsets", "running", "stale", "recorded_at", "total", "load", "version", "settled",
        "expiring", "base", "above", "above_runs", "runs", "top_level", "starts", NULL};
    Py_ssize_t *const book_out[] = {
        &book_offsets, &book_running, &book_stale,   &book_recorded_at, &book_total,
        &book_load,    &book_version, &book_settled, &book_expiring,    &book_base,
        &book_above,   &book_above_runs, &book_runs, &book_top_level, &book_starts};
    static const char *const slot_names[] = {"stores", NULL};
    Py_ssize_t *const slot_out[] = {&slot_stores};
    static const char *const books_names[] = {"by_key", NULL};
    Py_ssize_t *const books_out[] = {&books_by_key};
    static const char *const placer_names[] = {"probe", "key", NULL};
    Py_ssize_t *const placer_out[] = {&placer_probe, &placer_key};
    if (offsets(step, step_names, step_out) < 0 || offsets(run, run_names, run_out) < 0 ||
        offsets(book, book_names, book_out) < 0 || offsets(books, books_names, books_out) < 0 ||
        offsets(slot, slot_names, slot_out) < 0 ||
        offsets(placer, placer_names, placer_out) < 0)
        return NULL;
    if (str_python_init == NULL) {
        const char *texts[] = {"_python_init", "_python_enter", "_enter_on", "_python_exit",
                               "acquire", "release", "step", "alignment", "poison", "debug",
                               "fresh_view"};
        PyObject **targets[] = {&str_python_init, &str_python_enter, &str_enter_on,
                                &str_python_exit, &str_acquire, &str_release, &str_step,
                                &init_names[0], &init_names[1], &init_names[2],
                                &init_names[3]};
        for (int i = 0; i < 11; i++)
            if ((*targets[i] = PyUnicode_InternFromString(texts[i])) == NULL) return NULL;
    }
    keep(&ended_run, ended);
    keep((PyObject **)&run_type, (PyObject *)run);
    /* A new run's fields, and a new step's, as their __init__ made them. */
    bound_step = NULL;
    template_clear(&run_template);
    template_clear(&step_template);
    if (template_slots(&run_template, run, PyTuple_GET_ITEM(runs, 0), PyTuple_GET_ITEM(runs, 1),
                       NULL) < 0)
        return NULL;
    PyObject *a = PyTuple_GET_ITEM(steps, 0), *b = PyTuple_GET_ITEM(steps, 1);
    if (template_slots(&step_template, step, a, b, marks) < 0) return NULL;
    for (PyMemberDef *member = members; member->name != NULL; member++)
        if (template_add(&step_template, member->offset, a, b, marks, member->name) < 0)
            return NULL;
    int readable = read_rlocks ? rlock_check(rlock) : 0;
    if (readable < 0) return NULL;
    rlock_readable = readable;
    keep((PyObject **)&book_type, (PyObject *)book);
    keep((PyObject **)&books_type, (PyObject *)books);
    keep((PyObject **)&placer_type, (PyObject *)placer);
    keep((PyObject **)&rlock_type, (PyObject *)rlock);
    keep((PyObject **)&bound_step, (PyObject *)step);
    return PyBool_FromLong(readable);
}

/* Step.__init__(placer, select, key, *, alignment, poison, debug, fresh_view): the
 * fields its template says, or the Python __init__ (another call, a key not equal to
 * itself or not hashable: it raises). */
static int step_init(PyObject *self, PyObject *args, PyObject *kwds) {
    PyObject *values[7];
    int usual = bound_step != NULL && PyObject_TypeCheck(self, bound_step) &&
                PyTuple_CheckExact(args) && PyTuple_GET_SIZE(args) == 3 && kwds != NULL &&
                PyDict_CheckExact(kwds) && PyDict_GET_SIZE(kwds) == 4;
    for (int i = 0; usual && i < 3; i++) values[i] = PyTuple_GET_ITEM(args, i);
    for (int i = 0; usual && i < 4; i++) {
        values[3 + i] = PyDict_GetItemWithError(kwds, init_names[i]); /* exact str keys */
        if (values[3 + i] == NULL) {
            if (PyErr_Occurred()) return -1;
            usual = 0;
        }
    }
    PyObject *key = usual ? values[2] : NULL;
    if (usual && !PyUnicode_CheckExact(key) && !PyLong_CheckExact(key)) {
        /* hash(key) and key == key, as Python's __init__ checks them (which explains) */
        Py_INCREF(key);
        PyObject *same = PyObject_Hash(key) == -1 ? NULL : PyObject_RichCompare(key, key, Py_EQ);
        int equal = same == NULL ? -1 : PyObject_IsTrue(same);
        Py_XDECREF(same);
        Py_DECREF(key);
        if (equal < 0 && !PyErr_ExceptionMatches(PyExc_TypeError)) return -1; /* as Python */
        if (equal != 1) {
            PyErr_Clear();
            usual = 0;
        }
    }
    if (!usual) {
        if (bound_step == NULL || !PyObject_TypeCheck(self, bound_step)) {
            PyErr_SetString(PyExc_TypeError, "StepHitBase.__init__ is a Step's");
            return -1;
        }
        PyObject *init = PyObject_GetAttr(self, str_python_init);
        PyObject *done = init == NULL ? NULL : PyObject_Call(init, args, kwds);
        Py_XDECREF(init);
        Py_XDECREF(done);
        return done == NULL ? -1 : 0;
    }
    /* Every value first (a list may collect garbage), then the stores. */
    PyObject *made[TEMPLATE_FIELDS];
    Py_ssize_t count = step_template.count;
    for (Py_ssize_t i = 0; i < count; i++) {
        made[i] = template_value(&step_template, i, values);
        if (made[i] == NULL) {
            while (i-- > 0) Py_DECREF(made[i]);
            return -1;
        }
    }
    Stores stores = {.count = 0};
    for (Py_ssize_t i = 0; i < count; i++)
        store_new(&stores, &FIELD(self, step_template.offset[i]), made[i]);
    release_stores(&stores);
    return 0;
}

/* The step books of `slot` (borrowed: the dict of its StepBooks, step key -> StepBook),
 * or NULL (no exception) where it has none. The store is the slot's among its features'
 * stores (`slot.stores`), under the StepBooks type: a dict of types, whose lookup runs no
 * Python code. Slot.attach replaces that dict, never changes it, and a StepBooks never
 * rebinds its `by_key`: the same `stores` dict (held) finds the same books. */
static PyObject *slot_books(PyObject *slot) {
    PyObject *stores = FIELD(slot, slot_stores);
    if (stores == NULL || !PyDict_CheckExact(stores)) return NULL;
    PyObject *books = PyDict_GetItemWithError(stores, (PyObject *)books_type);
    if (books == NULL || !Py_IS_TYPE(books, books_type)) return NULL;
    PyObject *by_key = FIELD(books, books_by_key);
    return by_key != NULL && PyDict_CheckExact(by_key) ? by_key : NULL;
}

/* What the enter of the usual replay decides on, read from the step, its slot and book. */
typedef struct {
    PyObject *stack, *regions, *stores, *governor, *buffer, *prepared, *top, *live, *load;
    PyObject *placer, *probe, *front, *poison, *debug, *offsets, *running, *stale;
    PyObject *recorded_at, *total, *held, *version, *settled, *expiring, *locked;
    PyObject *strict, *closed, *mutex, *self_slot, *run, *key, *starts;
} EnterView;

/* Whether the enter of `self` on `slot` with `book` is the usual replay (1), not (0), or
 * an error (-1); fills `v` (borrowed). Runs no Python code: the fields are read, and the
 * slot's top compared with the plan's height (exact ints). */
static int enter_view(PyObject *self, PyObject *slot, PyObject *book, EnterView *v) {
    v->self_slot = ((StepHitBase *)self)->slot;
    v->run = FIELD(self, st_run);
    v->key = FIELD(self, st_key);
    v->stack = stack_of(slot);
    if (v->stack == NULL) return 0;
    v->regions = FIELD(v->stack, stack_regions);
    v->stores = FIELD(slot, slot_stores);
    v->governor = FIELD(slot, slot_governor);
    v->buffer = FIELD(slot, slot_buffer);
    v->top = FIELD(v->stack, stack_top);
    v->live = FIELD(v->stack, stack_live);
    v->load = FIELD(slot, slot_load);
    v->placer = FIELD(self, st_placer);
    v->poison = FIELD(self, st_poison);
    v->debug = FIELD(self, st_debug);
    if (v->self_slot != Py_None || v->run != ended_run || v->regions == NULL ||
        !PyList_CheckExact(v->regions) || PyList_GET_SIZE(v->regions) != 0 ||
        v->governor == NULL || !Py_IS_TYPE(v->governor, governor_type) || v->buffer == NULL ||
        !Py_IS_TYPE(v->buffer, buffer_type) || v->top == NULL || !PyLong_CheckExact(v->top) ||
        v->live == NULL || !PyLong_CheckExact(v->live) || v->load == NULL ||
        !PyLong_CheckExact(v->load) || v->placer == NULL ||
        !Py_IS_TYPE(v->placer, placer_type) || (v->poison != Py_False && v->poison != Py_True) ||
        (v->debug != Py_False && v->debug != Py_True) || v->key == NULL)
        return 0;
    v->prepared = FIELD(v->buffer, buffer_prepared);
    v->probe = FIELD(v->placer, placer_probe);
    v->front = FIELD(v->placer, placer_key);
    v->locked = FIELD(v->governor, governor_locked);
    v->strict = FIELD(v->governor, governor_debug);
    v->closed = FIELD(v->governor, governor_closed);
    v->mutex = FIELD(v->governor, governor_mutex);
    v->offsets = FIELD(book, book_offsets);
    v->running = FIELD(book, book_running);
    v->stale = FIELD(book, book_stale);
    v->recorded_at = FIELD(book, book_recorded_at);
    v->total = FIELD(book, book_total);
    v->held = FIELD(book, book_load);
    v->version = FIELD(book, book_version);
    v->settled = FIELD(book, book_settled);
    v->expiring = FIELD(book, book_expiring);
    v->starts = FIELD(book, book_starts);
    if (v->starts == NULL || !PyList_CheckExact(v->starts) || v->prepared == NULL || !PyDict_CheckExact(v->prepared) || v->probe == NULL ||
        v->front == NULL || v->locked != Py_True || v->strict != Py_False ||
        v->closed != Py_False || v->mutex == NULL || v->offsets == NULL ||
        v->offsets == Py_None || v->running != Py_False || v->stale != Py_False ||
        v->recorded_at == NULL || !PyLong_CheckExact(v->recorded_at) || v->total == NULL ||
        !PyLong_CheckExact(v->total) || v->held == NULL || !PyLong_CheckExact(v->held) ||
        v->version == NULL || !PyLong_CheckExact(v->version) || v->settled == NULL ||
        !PyLong_CheckExact(v->settled) || v->expiring == NULL)
        return 0;
    return PyObject_RichCompareBool(v->top, v->recorded_at, Py_EQ);
}

/* The enter of the usual replay of `self` on `slot` (Step._replay_locked): `self` (a new
 * reference); NULL without an exception when the Python path enters, with one on error. */
static PyObject *enter_replay(PyObject *self, PyObject *slot) {
    if (!Py_IS_TYPE(slot, slot_type) || stack_of(slot) == NULL) return NULL;
    PyObject *regions = FIELD(stack_of(slot), stack_regions), *steps = slot_books(slot);
    PyObject *owner = FIELD(slot, slot_stores); /* the stores `steps` was found in */
    PyObject *key = FIELD(self, st_key);
    if (regions == NULL || !PyList_CheckExact(regions) || PyList_GET_SIZE(regions) != 0 ||
        steps == NULL || key == NULL)
        return NULL;
    /* What may run Python code (a key's __hash__ or __eq__, a collection) comes first. */
    Py_INCREF(owner);
    Py_INCREF(steps);
    Py_INCREF(key);
    PyObject *book = PyDict_GetItemWithError(steps, key);
    Py_XINCREF(book);
    PyObject *memo = NULL, *caches = NULL, *run = NULL, *stack = NULL, *end = NULL;
    PyObject *live = NULL, *out = NULL;
    EnterView first, now;
    int held = 0;
    if (book == NULL || !Py_IS_TYPE(book, book_type)) goto done;
    int usual = enter_view(self, slot, book, &first);
    if (usual <= 0) goto done;
    hold_view(&first, sizeof first, 1);
    held = 1;
    memo = PyTuple_Pack(5, first.front, str_step, key, first.top, first.version);
    if (memo == NULL) goto done;
    caches = PyDict_GetItemWithError(first.prepared, memo);
    Py_XINCREF(caches);
    if (caches == NULL && PyErr_Occurred()) goto done;
    run = new_run();
    stack = run == NULL ? NULL : PyList_New(1);
    if (stack == NULL) goto done;
    Py_INCREF(self);
    PyList_SET_ITEM(stack, 0, self);
    end = PyNumber_Add(first.top, first.total);
    /* What the stack holds once the step is open: its held bytes (nothing under it). */
    live = end == NULL ? NULL : Py_NewRef(first.held);
    if (live == NULL) goto done;
    /* Then everything read again (changed: the Python path enters), and the mutex. */
    if (enter_view(self, slot, book, &now) <= 0 || memcmp(&first, &now, sizeof first) != 0 ||
        first.stores != owner || FIELD(self, st_key) != key)
        goto done;
    int moved = PyObject_RichCompareBool(first.settled, first.version, Py_NE);
    int free = moved < 0 ? -1 : mutex_free(first.mutex);
    if (free <= 0) goto done;
    /* Installed: plain stores, no Python code among them (the slot's and its stack's
     * last, by the slots layer: Slot.open_region, RegionStack.settle, Slot.note_load). */
    PyObject *yes_no[2] = {Py_False, Py_True};
    int quick = first.poison == Py_False && first.debug == Py_False;
    StepHitBase *step = (StepHitBase *)self;
    Stores stores = {.count = 0};
    store(&stores, &FIELD(self, st_book), book);
    store(&stores, &FIELD(self, st_run), run);
    store(&stores, &step->released, FIELD(run, run_released));
    store(&stores, &step->handed, FIELD(run, run_handed));
    store(&stores, &step->ids, FIELD(run, run_ids));
    store(&stores, &step->starts, first.starts);
    store(&stores, &step->lasts, FIELD(run, run_lasts));
    store(&stores, &FIELD(self, st_replay), Py_True);
    store(&stores, &step->quick, yes_no[quick]);
    store(&stores, &step->request, zero);
    store(&stores, &FIELD(self, st_above), zero);
    store(&stores, &step->watch, Py_False); /* locked: the request log is not told */
    store(&stores, &step->probe, first.probe); /* asked per request */
    store(&stores, &FIELD(self, st_nested), Py_None);
    store(&stores, &FIELD(self, st_inside), Py_False);
    store(&stores, &step->slot, slot);
    store(&stores, &FIELD(self, st_base), first.top);
    store(&stores, &FIELD(self, st_end), end);
    store(&stores, &FIELD(self, st_held), first.held);
    store(&stores, &FIELD(self, st_moved), yes_no[moved]);
    store(&stores, &FIELD(self, st_memo), memo);
    store(&stores, &step->buffer, first.buffer);
    store(&stores, &step->caches, caches == NULL ? Py_None : caches);
    store(&stores, &step->expiring, first.expiring);
    store(&stores, &FIELD(book, book_running), Py_True);
    slot_api->open_region(slot, stack);
    arena_slot_account(slot_api, first.stack, end, live);
    slot_api->note_load(slot, live);
    release_stores(&stores);
    Py_INCREF(self);
    out = self;
done:
    if (held) hold_view(&first, sizeof first, -1);
    Py_XDECREF(live);
    Py_XDECREF(end);
    Py_XDECREF(stack);
    Py_XDECREF(run);
    Py_XDECREF(caches);
    Py_XDECREF(memo);
    Py_XDECREF(book);
    Py_DECREF(key);
    Py_DECREF(steps);
    Py_DECREF(owner);
    return out;
}

static PyObject *step_enter(PyObject *self, PyObject *unused) {
    if (bound_step == NULL || !PyObject_TypeCheck(self, bound_step) ||
        ((StepHitBase *)self)->slot != Py_None)
        return PyObject_CallMethodNoArgs(self, str_python_enter);
    PyObject *select = FIELD(self, st_select);
    if (select == NULL) return PyObject_CallMethodNoArgs(self, str_python_enter);
    Py_INCREF(select);
    PyObject *slot = PyObject_CallNoArgs(select);
    Py_DECREF(select);
    if (slot == NULL) return NULL;
    PyObject *out = enter_replay(self, slot);
    if (out == NULL && !PyErr_Occurred())
        out = PyObject_CallMethodOneArg(self, str_enter_on, slot);
    Py_DECREF(slot);
    return out;
}

/* What the exit of the usual replay decides on. */
typedef struct {
    PyObject *slot, *stack, *regions, *governor, *strict, *mutex, *pending, *asleep, *quick;
    PyObject *nested;
    PyObject *book, *run, *broken, *nests, *start, *above, *base, *book_above, *above_runs;
    PyObject *runs, *version;
} ExitView;

/* Whether `self`'s exit is the usual replay's (1) or not (0); fills `v` (borrowed). */
static int exit_view(PyObject *self, ExitView *v) {
    StepHitBase *step = (StepHitBase *)self;
    v->slot = step->slot;
    v->quick = step->quick;
    v->nested = FIELD(self, st_nested);
    v->book = FIELD(self, st_book);
    v->run = FIELD(self, st_run);
    v->start = FIELD(self, st_base);
    v->above = FIELD(self, st_above);
    if (v->slot == NULL || !Py_IS_TYPE(v->slot, slot_type) || v->quick != Py_True ||
        v->nested != Py_None || v->book == NULL || !Py_IS_TYPE(v->book, book_type) ||
        v->run == NULL || v->run == ended_run || !Py_IS_TYPE(v->run, run_type) ||
        v->start == NULL || !PyLong_CheckExact(v->start) || v->above == NULL ||
        !PyLong_CheckExact(v->above))
        return 0;
    v->stack = stack_of(v->slot);
    if (v->stack == NULL) return 0;
    v->regions = FIELD(v->stack, stack_regions);
    v->governor = FIELD(v->slot, slot_governor);
    v->pending = FIELD(v->slot, slot_pending);
    v->broken = FIELD(v->run, run_broken);
    v->nests = FIELD(v->run, run_nests);
    v->base = FIELD(v->book, book_base);
    v->book_above = FIELD(v->book, book_above);
    v->above_runs = FIELD(v->book, book_above_runs);
    v->runs = FIELD(v->book, book_runs);
    v->version = FIELD(v->book, book_version);
    if (v->regions == NULL || !PyList_CheckExact(v->regions) ||
        PyList_GET_SIZE(v->regions) != 1 || PyList_GET_ITEM(v->regions, 0) != self ||
        v->governor == NULL || !Py_IS_TYPE(v->governor, governor_type) || v->pending == NULL ||
        !PyLong_CheckExact(v->pending) || v->broken != Py_False || v->nests == NULL ||
        !PyList_CheckExact(v->nests) || PyList_GET_SIZE(v->nests) != 0 || v->base == NULL ||
        !PyLong_CheckExact(v->base) || v->book_above == NULL ||
        !PyLong_CheckExact(v->book_above) || v->above_runs == NULL ||
        !PyLong_CheckExact(v->above_runs) || v->runs == NULL || !PyLong_CheckExact(v->runs) ||
        v->version == NULL)
        return 0;
    v->strict = FIELD(v->governor, governor_debug);
    v->mutex = FIELD(v->governor, governor_mutex);
    v->asleep = FIELD(v->governor, governor_asleep);
    return v->strict == Py_False && v->mutex != NULL && v->asleep != NULL &&
           PyLong_CheckExact(v->asleep);
}

/* The exit of the usual replay (Step._end_replay: StepBook.ran, then the region closed):
 * 1 done, 0 when the Python path exits, -1 with an exception set. */
static int exit_replay(PyObject *self) {
    ExitView first, now;
    if (!exit_view(self, &first)) return 0;
    hold_view(&first, sizeof first, 1);
    /* The new region stack and counts first (a collection may run Python code). */
    PyObject *stack = PyList_New(0);
    PyObject *above_runs = stack == NULL ? NULL : PyNumber_Add(first.above_runs, one);
    PyObject *runs = above_runs == NULL ? NULL : PyNumber_Add(first.runs, one);
    int done = runs == NULL ? -1 : 0;
    if (done < 0 || !exit_view(self, &now) || memcmp(&first, &now, sizeof first) != 0)
        goto finish;
    /* StepBook.ran(start, above, nested=None, replay=True, nests=[]): exact ints. */
    int later = PyObject_RichCompareBool(first.start, first.base, Py_GT);
    int again = PyObject_IsTrue(first.above_runs);
    int larger = PyObject_RichCompareBool(first.above, first.book_above, Py_GT);
    int free = later < 0 || again < 0 || larger < 0 ? -1 : mutex_free(first.mutex);
    if (free <= 0) {
        done = free;
        goto finish;
    }
    StepHitBase *step = (StepHitBase *)self;
    Stores stores = {.count = 0};
    store(&stores, &FIELD(self, st_run), ended_run);
    store(&stores, &FIELD(first.book, book_top_level), Py_True);
    store(&stores, &FIELD(first.book, book_base), later ? first.start : first.base);
    store(&stores, &FIELD(first.book, book_settled), first.version);
    /* max(book.above, above) after a replay, else above */
    store(&stores, &FIELD(first.book, book_above),
          !again || larger ? first.above : first.book_above);
    store(&stores, &FIELD(first.book, book_above_runs), above_runs);
    store(&stores, &FIELD(first.book, book_runs), runs);
    store(&stores, &FIELD(first.book, book_running), Py_False);
    store(&stores, &step->quick, Py_False);
    store(&stores, &step->buffer, Py_None);
    store(&stores, &step->caches, Py_None);
    store(&stores, &FIELD(self, st_nested), Py_None);
    /* Slot.close_region(self, start, 0), nothing else open (the slots layer's stores:
     * the stack emptied, the detour flag recomputed), before the step lets go of the slot
     * (its reference). */
    slot_api->close_region(first.slot, stack, zero, zero);
    store(&stores, &step->slot, Py_None);
    release_stores(&stores);
    done = 1;
finish:
    hold_view(&first, sizeof first, -1);
    Py_XDECREF(runs);
    Py_XDECREF(above_runs);
    Py_XDECREF(stack);
    return done;
}

static PyObject *step_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs == 3 && args[0] == Py_None && bound_step != NULL &&
        PyObject_TypeCheck(self, bound_step)) {
        int done = exit_replay(self);
        if (done < 0) return NULL;
        if (done) Py_RETURN_NONE;
    }
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "__exit__ takes 3 arguments, got %zd", nargs);
        return NULL;
    }
    PyObject *call[4] = {self, NULL, NULL, NULL};
    for (Py_ssize_t i = 0; i < nargs; i++) call[i + 1] = args[i];
    return PyObject_VectorcallMethod(str_python_exit, call,
                                     (size_t)(nargs + 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static int step_traverse(StepHitBase *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->slot);
    Py_VISIT(self->request);
    Py_VISIT(self->caches);
    Py_VISIT(self->expiring);
    Py_VISIT(self->released);
    Py_VISIT(self->handed);
    Py_VISIT(self->buffer);
    Py_VISIT(self->fresh_view);
    Py_VISIT(self->watch);
    Py_VISIT(self->quick);
    Py_VISIT(self->ids);
    Py_VISIT(self->starts);
    Py_VISIT(self->lasts);
    Py_VISIT(self->probe);
    return 0;
}

static int step_clear(StepHitBase *self) {
    Py_CLEAR(self->slot);
    Py_CLEAR(self->request);
    Py_CLEAR(self->caches);
    Py_CLEAR(self->expiring);
    Py_CLEAR(self->released);
    Py_CLEAR(self->handed);
    Py_CLEAR(self->buffer);
    Py_CLEAR(self->fresh_view);
    Py_CLEAR(self->watch);
    Py_CLEAR(self->quick);
    Py_CLEAR(self->ids);
    Py_CLEAR(self->starts);
    Py_CLEAR(self->lasts);
    Py_CLEAR(self->probe);
    return 0;
}

static void step_dealloc(StepHitBase *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    step_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef step_methods[] = {
    {"get_simultaneous", (PyCFunction)step_get_simultaneous, METH_VARARGS,
     "get_simultaneous(*specs): the compiled hit of a replayed step."},
    {"release", (PyCFunction)(void (*)(void))step_release, METH_FASTCALL,
     "release(*views): the compiled hit of a replayed step's release."},
    {"__enter__", (PyCFunction)step_enter, METH_NOARGS,
     "__enter__(): the compiled enter of the usual replay, else _python_enter."},
    {"__exit__", (PyCFunction)(void (*)(void))step_exit, METH_FASTCALL,
     "__exit__(kind, value, trace): the compiled exit of the usual replay, else "
     "_python_exit."},
    {NULL, NULL, 0, NULL},
};

#define STEP_MEMBER(name, field) {name, T_OBJECT_EX, offsetof(StepHitBase, field), 0, NULL}
static PyMemberDef step_members[] = {
    STEP_MEMBER("slot", slot),
    STEP_MEMBER("request", request),
    STEP_MEMBER("_caches", caches),
    STEP_MEMBER("_expiring", expiring),
    STEP_MEMBER("_released", released),
    STEP_MEMBER("_handed", handed),
    STEP_MEMBER("_buffer", buffer),
    STEP_MEMBER("_fresh_view", fresh_view),
    STEP_MEMBER("_watch", watch),
    STEP_MEMBER("_quick", quick),
    STEP_MEMBER("_ids", ids),
    STEP_MEMBER("_starts", starts),
    STEP_MEMBER("_lasts", lasts),
    STEP_MEMBER("_probe", probe),
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot step_slots[] = {
    {Py_tp_doc, "The compiled hit of a replayed step (see arena.planning.region_hit)."},
    {Py_tp_methods, step_methods},
    {Py_tp_members, step_members},
    {Py_tp_init, step_init},
    {Py_tp_traverse, step_traverse},
    {Py_tp_clear, step_clear},
    {Py_tp_dealloc, step_dealloc},
    {0, NULL},
};

static PyType_Spec step_spec = {
    "arena.planning._region_hit.StepHitBase",
    sizeof(StepHitBase),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    step_slots,
};

/* ------------------------------------------------------------------ ScopeHitBase
 *
 * The compiled hit of a scope's request (arena.planning.scopes): a request the slot's
 * buffer remembers for this front's scopes at the slot's current top, no request log to
 * tell, nor debug mode or poisoning, and nothing to note (the slot's LOAD and plain
 * high-water mark already cover it, no step open below the scope). A capture probe is
 * asked once the views are built, as the plain hit asks it: True (a CUDA graph being
 * captured) hands the request, with those views, to the scope's Python _captured (the
 * capture mark). Its fields are the scope's, under the names the pure-Python base
 * (arena.planning.region_hit.PyScopeHitBase) has:
 *
 *   slot         the slot the scope is open on, or None
 *   base, end    where the scope's views start and end (ints)
 *   held         the bytes of its views (an int)
 *   _memo        the key of the scopes' remembered views in Buffer.prepared: a dict
 *                {(top, specs): Prepared}
 *   _fresh_view  per-view callable for a fresh view; None: the prepared view itself;
 *                False: every request takes the Python path
 *   _watch       True when requests need Python's bookkeeping
 *   _probe       the front's capture probe, or None
 *
 * Anything else goes to the scope's Python method _python_get. */

typedef struct {
    PyObject_HEAD
    PyObject *slot;
    PyObject *base;
    PyObject *end;
    PyObject *held;
    PyObject *memo;
    PyObject *fresh_view;
    PyObject *watch;
    PyObject *probe;
} ScopeHitBase;

static PyTypeObject *scope_type;

/* Scope requests looked up lately, across every front's scopes (a scope lives for one
 * `with` block, so a memo of its own would start cold every time): the key a request is
 * remembered under in its front's scope cache, the tuple (top, specs) that
 * arena.planning.scopes keeps as the entry's `key`, with its hash and the top. A request
 * at the same top that is the same plain request (exact tuples and ints of the same
 * values, the very same dtype objects: plain_request_is) is looked up by that key, whose
 * hash is known and which the cache finds by identity: no tuple to build, no hashing, no
 * digest. The cache still decides: a key it no longer holds is a miss.
 *
 * Each slot also remembers the last bookkeeping done through it: from the live bytes (as
 * the regions' own figures count them) and the scope's held bytes (live_in, held_in) with
 * a request reaching `required`,
 * the new values (live_out, held_out: int objects made once). A repeated scope makes the
 * same requests from the same values, and then installs those objects again instead of
 * making new ones (where the new counts are the request's end, the entry's `required`
 * int is them, and this memo is not read). A slot is 192 bytes, three cache lines on
 * 64-bit machines: a hit reads the first two (docs/performance.md, "A repeated scope
 * request's memo lines"). */
#define SCOPE_MEMO_BITS 9
#define SCOPE_MEMO_SIZE (1 << SCOPE_MEMO_BITS)

typedef struct {
    /* First line: what a repeated request's hit reads. The key, where it stands (the top,
     * times 8, plus the dimension count of the key's request signature below), and where
     * the key was last looked up: the cache dict, the state it had (ma_version_tag, as the
     * step's memo reads it) and the entry it mapped the key to. While that dict is in
     * that state it maps the key to that entry: no hash probe. No references but the
     * key's: the dict holds the entry. Then the key's request in a few words (its one
     * view's dtype object and dimensions: scope_request_is reads them instead of the
     * key's tuples, which lie elsewhere in memory); dtype NULL where the request has no
     * such copy (several views, more dimensions, a large one). */
    PyObject *key;
    uint64_t top_ndim;
    PyObject *cache;
    uint64_t version;
    PyObject *entry;
    PyObject *dtype;
    uint32_t dims[SIGNATURE_DIMS];
    /* Second line: the entry's views list and its one view, where noted (views NULL:
     * not), and for an exact numpy.ndarray view what numpy.ndarray.view copies from it:
     * its data, flags, dtype descr, the object its fresh view's base collapses to, and
     * its last stride (descr NULL: no copy; the strides are C order from it: checked when
     * noted). No references: the entry holds the list, the list its view, the view its
     * descr and base; the hit takes them only while the entry's views are the list noted
     * (a Prepared entry's views are built whole, never replaced nor changed in place, as
     * the step rows hold: _step_rows.h). The hit then reads neither the list nor, for
     * the copy, the view, its shape or strides (a cache line or two each, per top). */
    PyObject *views;
    PyObject *view;
    PyObject *descr;
    PyObject *base;
    char *data;
    int flags;
    int copied; /* 1 where descr..stride hold a copy */
    Py_ssize_t stride;
    void *spare_line2; /* a whole cache line */
    /* Third line: the key's hash (for a lookup once the dict changed) and the
     * bookkeeping memo, read only where the new counts are not the request's end. */
    Py_hash_t hash;
    Py_ssize_t required, live_in, held_in;
    PyObject *live_out, *held_out;
    void *spare[2]; /* three whole cache lines */
} ScopeMemo;

_Static_assert(sizeof(void *) != 8 || sizeof(ScopeMemo) == 192, "a scope memo: three lines");
#if defined(__GNUC__)
static ScopeMemo scope_memo[SCOPE_MEMO_SIZE] __attribute__((aligned(64)));
#else
static ScopeMemo scope_memo[SCOPE_MEMO_SIZE];
#endif

/* Whether `specs` is the plain request `key` (a remembered key's request: exact tuples of
 * (exact tuple of exact ints, dtype)): exact tuples of the same sizes, exact ints of the
 * same values, the very same dtype objects. 1 or 0; runs no Python code. */
static int same_plain_request(PyObject *key, PyObject *specs) {
    Py_ssize_t count = PyTuple_GET_SIZE(key);
    if (PyTuple_GET_SIZE(specs) != count) return 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *a = PyTuple_GET_ITEM(key, i), *b = PyTuple_GET_ITEM(specs, i);
        if (a == b) continue;
        if (!PyTuple_CheckExact(b) || PyTuple_GET_SIZE(b) != 2 ||
            PyTuple_GET_ITEM(a, 1) != PyTuple_GET_ITEM(b, 1))
            return 0;
        PyObject *x = PyTuple_GET_ITEM(a, 0), *y = PyTuple_GET_ITEM(b, 0);
        if (x == y) continue;
        Py_ssize_t ndim = PyTuple_GET_SIZE(x);
        if (!PyTuple_CheckExact(y) || PyTuple_GET_SIZE(y) != ndim) return 0;
        for (Py_ssize_t k = 0; k < ndim; k++) {
            PyObject *u = PyTuple_GET_ITEM(x, k), *v = PyTuple_GET_ITEM(y, k);
            if (u == v) continue;
            if (!arena_exact_int(v)) return 0;
            Py_ssize_t p = arena_exact_size(u), q = arena_exact_size(v);
            if (p < 0 || p != q) return 0; /* a remembered dimension is never negative */
        }
    }
    return 1;
}

/* Whether `specs` is the memo's key's request (as same_plain_request(key[1], specs)),
 * read from the memo's first line where it has a copy of it. 1 or 0; no Python code. */
static ALWAYS_INLINE int scope_request_is(const ScopeMemo *memo, PyObject *specs) {
    if (memo->dtype == NULL) return same_plain_request(PyTuple_GET_ITEM(memo->key, 1), specs);
    Signature sig = {memo->dtype, (Py_ssize_t)(memo->top_ndim & 7),
                     {memo->dims[0], memo->dims[1], memo->dims[2], memo->dims[3]}};
    return plain_request_is(&sig, NULL, specs);
}

/* The memo slot of a request at `at`: from the top, the number of views and the first
 * view's dtype object, dimension count and first dimension (the tops of one scope's
 * requests, multiples of the alignment, spread over the table by Fibonacci hashing). */
static ScopeMemo *scope_memo_slot(Py_ssize_t at, PyObject *specs) {
    unsigned long long h = (unsigned long long)at ^
                           ((unsigned long long)PyTuple_GET_SIZE(specs) << 48);
    if (PyTuple_GET_SIZE(specs) > 0) {
        PyObject *spec = PyTuple_GET_ITEM(specs, 0);
        if (PyTuple_CheckExact(spec) && PyTuple_GET_SIZE(spec) == 2) {
            PyObject *shape = PyTuple_GET_ITEM(spec, 0);
            h ^= (unsigned long long)(uintptr_t)PyTuple_GET_ITEM(spec, 1) << 20;
            if (PyTuple_CheckExact(shape) && PyTuple_GET_SIZE(shape) > 0) {
                h ^= (unsigned long long)PyTuple_GET_SIZE(shape) << 56;
                Py_ssize_t dim = arena_exact_size(PyTuple_GET_ITEM(shape, 0));
                h += (unsigned long long)dim * 0xC2B2AE3D27D4EB4FULL;
            }
        }
    }
    return &scope_memo[(h * 0x9E3779B97F4A7C15ULL) >> (64 - SCOPE_MEMO_BITS)];
}

/* Remember in `memo` the key `kept` (an entry's, equal to the plain request (top `at`,
 * specs): checked here) under `hash`, with no bookkeeping and no lookup yet. */
static void scope_remember(ScopeMemo *memo, PyObject *kept, Py_hash_t hash, Py_ssize_t at,
                           PyObject *specs) {
    if (arena_exact_size(PyTuple_GET_ITEM(kept, 0)) != at ||
        !PyTuple_CheckExact(PyTuple_GET_ITEM(kept, 1)) ||
        hit_api->same_request(PyTuple_GET_ITEM(kept, 1), specs) != 1) {
        PyErr_Clear();
        return;
    }
    if ((uint64_t)at >> 60) return; /* no room for the dimension count beside it */
    Signature sig = signature_of(PyTuple_GET_ITEM(kept, 1));
    ScopeMemo old = *memo;
    ScopeMemo now = {kept,
                     (uint64_t)at << 3 | (uint64_t)(sig.dtype == NULL ? 0 : sig.ndim),
                     NULL,
                     0,
                     NULL,
                     sig.dtype,
                     {sig.dims[0], sig.dims[1], sig.dims[2], sig.dims[3]},
                     NULL,
                     NULL,
                     NULL,
                     NULL,
                     NULL,
                     0,
                     0,
                     0,
                     NULL,
                     hash,
                     -1,
                     -1,
                     -1,
                     NULL,
                     NULL,
                     {NULL, NULL}};
    Py_INCREF(kept);
    *memo = now; /* installed before the old objects go (their ends may run code) */
    Py_XDECREF(old.key);
    Py_XDECREF(old.live_out);
    Py_XDECREF(old.held_out);
}

/* Note on `memo`'s second line the entry's views `views` (read from the entry just now),
 * where the memo's key has a signature and the list is an exact list of one view, with
 * NumPy's copy of an exact numpy.ndarray view (view_copy_take, _view_copy.h: the
 * signature's shape, the fresh view's base collapse found without warnings to propagate)
 * whose strides are C order from its last. Plain stores, no Python code. */
static void scope_note_views(ScopeMemo *memo, PyObject *views) {
    if (memo->dtype == NULL || !PyList_CheckExact(views) || PyList_GET_SIZE(views) != 1) return;
    PyObject *view = PyList_GET_ITEM(views, 0);
    Py_ssize_t ndim = (Py_ssize_t)(memo->top_ndim & 7);
    ViewCopy copy = {NULL, NULL, NULL, 0};
    int copied = hit_api->ndarray != NULL && Py_IS_TYPE(view, hit_api->ndarray) && ndim > 0 &&
                 view_copy_take(&copy, view, ndim, memo->dims);
    const ArenaNdArray *a = (const ArenaNdArray *)view;
    Py_ssize_t last = copied ? a->strides[ndim - 1] : 0, want = last;
    copied = copied && last > 0;
    for (Py_ssize_t k = ndim - 1; copied && k >= 0; k--) {
        Py_ssize_t dim = (Py_ssize_t)memo->dims[k];
        copied = a->strides[k] == want && (dim == 0 || want <= PY_SSIZE_T_MAX / dim);
        want *= dim;
    }
    memo->views = views;
    memo->view = view;
    memo->copied = copied;
    memo->descr = copied ? copy.descr : NULL;
    memo->base = copied ? copy.base : NULL;
    memo->data = copied ? copy.data : NULL;
    memo->flags = copied ? copy.flags : 0;
    memo->stride = copied ? last : 0;
}

/* A fresh view of the memo's noted numpy.ndarray view, made from its copy as
 * numpy.ndarray.view makes it (view_copy_fresh, _view_copy.h: the signature's shape, C
 * order from the noted last stride). A new reference; NULL without an exception where the
 * array came out otherwise (the caller makes it from the view then), NULL with one on
 * error. */
static PyObject *scope_memo_fresh(const ScopeMemo *memo) {
    Py_ssize_t ndim = (Py_ssize_t)(memo->top_ndim & 7);
    Py_ssize_t dims[SIGNATURE_DIMS], strides[SIGNATURE_DIMS];
    Py_ssize_t stride = memo->stride;
    for (Py_ssize_t k = ndim - 1; k >= 0; k--) {
        dims[k] = (Py_ssize_t)memo->dims[k];
        strides[k] = stride;
        stride *= dims[k];
    }
    return view_copy_fresh(hit_api, memo->descr, memo->base, memo->data, memo->flags, (int)ndim,
                           dims, strides);
}

/* The entry `cache` holds under (top, specs) (a new reference), with the request's hash
 * where the dict was probed (left as is, -1 from the caller, where the memo's entry served);
 * NULL without an exception where the Python path must serve the request (a miss, a
 * request that is not plain), NULL with one on error. `*known` tells whether it was found
 * through `memo`'s key (1), or is the entry the memo noted in the dict's current state (2). The caller holds `cache` and `top`. */
static PyObject *scope_look_up(PyObject *cache, PyObject *top, Py_ssize_t at, PyObject *specs,
                               ScopeMemo *memo, Py_hash_t *hash_out, int *known) {
    PyObject *key = memo->key, *entry;
    *known = 0;
    if (key != NULL && memo->top_ndim >> 3 == (uint64_t)at && scope_request_is(memo, specs)) {
        *known = 1;
#if STEP_MEMO
        uint64_t seen = ((PyDictObject *)cache)->ma_version_tag;
        if (memo->entry != NULL && memo->cache == cache && memo->version == seen) {
            /* The hash (on the memo's third line) is not read: -1, the caller's "unknown" */
            *known = 2;
            Py_INCREF(memo->entry); /* the dict in that state maps key to it */
            return memo->entry;
        }
#endif
        *hash_out = memo->hash;
        /* Held: the lookup may run code (another key's __eq__) that replaces the memo's. */
        Py_INCREF(key);
#if PY_VERSION_HEX < 0x030D0000
        entry = _PyDict_GetItem_KnownHash(cache, key, memo->hash);
#else
        entry = PyDict_GetItemWithError(cache, key);
#endif
#if STEP_MEMO
        /* Noted where the memo still holds this key and the dict is in the state it had
         * before the lookup (which may have run code): that state maps key to entry. */
        if (entry != NULL && memo->key == key && ((PyDictObject *)cache)->ma_version_tag == seen) {
            memo->cache = cache;
            memo->version = seen;
            memo->entry = entry;
            memo->views = NULL; /* noted again from this entry, by a hit through it */
        }
#endif
        Py_XINCREF(entry);
        Py_DECREF(key);
        return entry;
    }
    if (hit_api->digest(specs) == 0) return NULL; /* not plain: the Python path explains */
    key = PyTuple_Pack(2, top, specs);
    if (key == NULL) return NULL;
    Py_hash_t hash = PyObject_Hash(key);
    if (hash == -1) {
        Py_DECREF(key);
        return NULL;
    }
    *hash_out = hash;
#if PY_VERSION_HEX < 0x030D0000
    entry = _PyDict_GetItem_KnownHash(cache, key, hash);
#else
    entry = PyDict_GetItemWithError(cache, key);
#endif
    Py_XINCREF(entry);
    Py_DECREF(key);
    return entry;
}

/* The scope cache `prepared` (a buffer's dict of caches, exact) holds under `key` (the
 * scope's memo key), borrowed, or NULL (with an exception where the lookup raised one).
 * A one-entry memo of the last lookup: the dict, its state (ma_version_tag, as the step
 * memo reads it), the key (a reference: the very object, alive) and the cache it mapped
 * the key to (an exact str: its hash and equality are its characters'). While that dict
 * is in that state it maps that key to that cache (it holds
 * it: the memo does not, so that it keeps no closed arena's buffer alive), and the lookup
 * is skipped: a hash probe, and code colder than the hit's own, on every scope request.
 * CPython 3.12 on (no version tag): the lookup every time. */
#if STEP_MEMO
static PyObject *scope_cache_dict, *scope_cache_key, *scope_cache_found;
static uint64_t scope_cache_version;
#endif

static PyObject *scope_cache_of(PyObject *prepared, PyObject *key) {
#if STEP_MEMO
    uint64_t seen = ((PyDictObject *)prepared)->ma_version_tag;
    if (prepared == scope_cache_dict && seen == scope_cache_version && key == scope_cache_key)
        return scope_cache_found;
    PyObject *cache = PyDict_GetItemWithError(prepared, key);
    /* Noted where the dict is in the state it had before the lookup (which may have run
     * a key's __eq__): that state maps key to cache. Plain stores but the key's. */
    if (cache != NULL && PyUnicode_CheckExact(key) &&
        ((PyDictObject *)prepared)->ma_version_tag == seen) {
        if (key != scope_cache_key) keep(&scope_cache_key, key);
        scope_cache_dict = prepared;
        scope_cache_version = seen;
        scope_cache_found = cache;
    }
    return cache;
#else
    return PyDict_GetItemWithError(prepared, key);
#endif
}

/* The bytes the regions open under `scope` hold, as RegionStack.settle counts them:
 * `scope` innermost on `stack` and every region under it a scope holding an exact int of
 * bytes (the caller, scope_serve, checked that every one is a scope), else -1 (the Python
 * path). The stack's `below` where settle counted it since the regions last changed (it
 * is -1 from a push, a remove or a step's recount until the next settle, which is what
 * settle itself reads then: the scopes under the innermost hold what they held, as only
 * the innermost's requests are served); else the regions' own figures, summed (the C
 * hits store no `below`, so after a push they sum until a Python-level settle counts
 * it). Runs no Python code. */
static Py_ssize_t scopes_below(PyObject *stack, PyObject *scope) {
    PyObject *regions = FIELD(stack, stack_regions);
    if (regions == NULL || !PyList_CheckExact(regions)) return -1;
    Py_ssize_t depth = PyList_GET_SIZE(regions), below = 0;
    if (depth == 0 || PyList_GET_ITEM(regions, depth - 1) != scope) return -1;
    Py_ssize_t known = arena_exact_size(FIELD(stack, stack_below)); /* -1: count again */
    if (known >= 0) return known;
    for (Py_ssize_t i = 0; i < depth - 1; i++) {
        PyObject *region = PyList_GET_ITEM(regions, i);
        if (!PyObject_TypeCheck(region, scope_type)) return -1;
        Py_ssize_t held = arena_exact_size(((ScopeHitBase *)region)->held);
        if (held < 0 || below > PY_SSIZE_T_MAX - held) return -1;
        below += held;
    }
    return below;
}

/* The scope's hit: fresh views (a new reference); NULL without an exception when the
 * Python path serves the request, NULL with one on error. */
static PyObject *scope_serve(ScopeHitBase *self, PyObject *specs) {
    PyObject *slot = self->slot, *fresh = self->fresh_view;
    if (slot == NULL || !Py_IS_TYPE(slot, slot_type) || self->watch != Py_False ||
        fresh == NULL || fresh == Py_False || self->memo == NULL || self->probe == NULL)
        return NULL;
    PyObject *stack = stack_of(slot);
    PyObject *regions = stack == NULL ? NULL : FIELD(stack, stack_regions);
    if (regions == NULL || !PyList_CheckExact(regions)) return NULL;
    Py_ssize_t depth = PyList_GET_SIZE(regions);
    if (depth == 0 || PyList_GET_ITEM(regions, depth - 1) != (PyObject *)self) return NULL;
    /* A step open below takes the Python path: its replays must learn this reach. */
    for (Py_ssize_t i = 0; i < depth - 1; i++)
        if (!PyObject_TypeCheck(PyList_GET_ITEM(regions, i), scope_type)) return NULL;
    PyObject *buffer = FIELD(slot, slot_buffer), *top = FIELD(stack, stack_top);
    Py_ssize_t at = arena_exact_size(top);
    if (buffer == NULL || !Py_IS_TYPE(buffer, buffer_type) || at < 0) return NULL;
    PyObject *prepared = FIELD(buffer, buffer_prepared);
    if (prepared == NULL || !PyDict_CheckExact(prepared)) return NULL;
    PyObject *cache = scope_cache_of(prepared, self->memo);
    if (cache == NULL || !PyDict_CheckExact(cache)) {
        arena_clear_unless_interrupt(); /* a key of the user's may run Python code */
        return NULL;
    }
    /* Held across the lookup, which may run a dtype's Python __hash__ or __eq__ (and let
     * another thread close the arena, dropping the buffer and its caches). */
    Py_INCREF(buffer);
    Py_INCREF(top);
    Py_INCREF(cache);
    ScopeMemo *memo = scope_memo_slot(at, specs);
    Py_hash_t hash = -1;
    int known;
    PyObject *entry = scope_look_up(cache, top, at, specs, memo, &hash, &known);
    Py_DECREF(cache);
    PyObject *out = NULL, *live = NULL, *held = NULL;
    ArenaSlotCount calls = {NULL, 0};
    PyObject *kept = entry == NULL ? NULL : FIELD(entry, prepared_key);
    /* Found by the memo's key, the dtypes are the very objects remembered. */
    /* The memo's key is an exact tuple of two (scope_remember took it so; the memo holds
     * it): not read again where the entry's key is it. */
    if (entry == NULL || !Py_IS_TYPE(entry, prepared_type) || kept == NULL ||
        (kept != memo->key && (!PyTuple_CheckExact(kept) || PyTuple_GET_SIZE(kept) != 2)) ||
        (!known && !hit_api->same_classes(PyTuple_GET_ITEM(kept, 1), specs))) {
        /* a miss, or an unhashable dtype: the Python path explains; an interrupt raised in
         * a dtype's Python __hash__ or __eq__ goes on (the Python path's lookup would not
         * meet it again) */
        arena_clear_unless_interrupt();
        goto done;
    }
    /* The lookup may have let another thread move on: check the slot again. */
    if (self->slot != slot || FIELD(slot, slot_buffer) != buffer ||
        FIELD(slot, slot_stack) != stack || FIELD(stack, stack_top) != top)
        goto done;
    /* (A hash of -1: found through the memo's key, the key's hash not read; the entry's
     * key, if another, is not remembered then.) */
    if (memo->key != kept && hash != -1) scope_remember(memo, kept, hash, at, specs);
    PyObject *required = FIELD(entry, prepared_required);
    PyObject *views = FIELD(entry, prepared_views);
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    Py_ssize_t reach = arena_exact_size(required);
    Py_ssize_t below = scopes_below(stack, (PyObject *)self);
    Py_ssize_t held_in = arena_exact_size(self->held);
    Py_ssize_t load = arena_exact_size(FIELD(slot, slot_load));
    Py_ssize_t high = arena_exact_size(FIELD(slot, slot_plain_high));
    /* The views noted on the memo's second line (an exact list of one view: the
     * request's one), read from there: not the list, nor (NumPy's copy) the view. */
    int noted = known == 2 && memo->key == kept && views != NULL && memo->views == views &&
                count == 1;
    if (reach < at || below < 0 || held_in < 0 || load < 0 || high < 0 || views == NULL ||
        (!noted && (!PyList_CheckExact(views) || PyList_GET_SIZE(views) != count)) ||
        FIELD(slot, slot_calls) == NULL || held_in > PY_SSIZE_T_MAX - below)
        goto done;
    /* The live bytes before the request, counted from the regions' own figures as
     * RegionStack.settle counts them (not the stack's figure, which an interrupt between a
     * scope's stores and its settle may have left behind, and a hit would carry on). */
    Py_ssize_t live_in = below + held_in;
    Py_ssize_t total = reach - at;
    if (live_in > PY_SSIZE_T_MAX - total || held_in > PY_SSIZE_T_MAX - total) goto done;
    /* The bookkeeping first (nothing installed yet): LOAD and the plain high-water mark
     * must already cover this request, else Slot.note_load in Python. */
    if (load < live_in + total || high < reach) goto done;
    if (live_in + total == reach && held_in + total == reach) {
        /* Both new counts are the request's end (a scope at the slot's bottom with no
         * region under it: its views' bytes are all below its end): the entry's own int,
         * which the slot's top and the scope's end take anyway, is them; no other int
         * object is touched (a new one per top would be a cache line of its own). */
        live = required;
        held = required;
        Py_INCREF(live);
        Py_INCREF(held);
    } else if (memo->key == kept && memo->required == reach && memo->live_in == live_in &&
               memo->held_in == held_in && memo->live_out != NULL && memo->held_out != NULL) {
        live = memo->live_out;
        held = memo->held_out;
        Py_INCREF(live);
        Py_INCREF(held);
    } else {
        live = PyLong_FromSsize_t(live_in + total);
        held = live == NULL ? NULL : PyLong_FromSsize_t(held_in + total);
        if (held == NULL) goto error;
        if (memo->key == kept) {
            PyObject *old_live = memo->live_out, *old_held = memo->held_out;
            Py_INCREF(live);
            Py_INCREF(held);
            memo->required = reach;
            memo->live_in = live_in;
            memo->held_in = held_in;
            memo->live_out = live;
            memo->held_out = held;
            Py_XDECREF(old_live);
            Py_XDECREF(old_held);
        }
    }
    if (noted) {
        /* The one view, held while its fresh view is made (that may run code that sweeps
         * the cache); NumPy's from the copy (no Python code: an exact ndarray). */
        PyObject *view = memo->view, *made = NULL;
        out = PyList_New(1);
        if (out == NULL) goto error;
        /* The list's allocation may collect garbage, whose finalizers may run other scope
         * hits (another thread's, the GIL handed over; another arena's) that note their
         * own view on this line, which every arena's scopes share: its copy is this
         * entry's view's only while the line still notes this entry's views (held: no
         * other list at that address). */
        int copied = memo->copied && memo->views == views;
        if (fresh == Py_None) {
            made = Py_NewRef(view);
        } else {
            if (copied && fresh == hit_api->ndarray_view) made = scope_memo_fresh(memo);
            if (made == NULL && !PyErr_Occurred()) {
                Py_INCREF(view);
                made = hit_api->fresh_view(fresh, view);
                Py_DECREF(view);
            }
        }
        if (made == NULL) goto error;
        PyList_SET_ITEM(out, 0, made);
    } else {
        /* Noted where the entry came from the memo's dict state (known 2): while the dict
         * stays in it, the entry lives on, and with it these views (never replaced). */
        if (known == 2 && memo->key == kept) scope_note_views(memo, views);
        /* Held while fresh views are made: that may run code that sweeps the cache. */
        Py_INCREF(views);
        out = PyList_New(count);
        for (Py_ssize_t i = 0; out != NULL && i < count; i++) {
            PyObject *view = PyList_GET_ITEM(views, i);
            if (fresh == Py_None) {
                Py_INCREF(view);
            } else if ((view = hit_api->fresh_view(fresh, view)) == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, i, view);
        }
        Py_DECREF(views);
    }
    if (out == NULL) goto error;
    /* The capture probe, asked once the views are built (Scope.get_simultaneous asks it
     * there): a capture under way hands the request and these views to Scope._captured,
     * which marks the buffer captured and serves it (or places it anew); a probe's
     * exception goes on, nothing installed. */
    if (self->probe != Py_None) {
        Py_INCREF(slot); /* the probe's code may close the scope */
        int capturing = ask_probe(self->probe);
        if (capturing > 0) {
            PyObject *call[6] = {(PyObject *)self, slot, top, entry, specs, out};
            PyObject *result = PyObject_VectorcallMethod(
                str_captured, call, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            Py_SETREF(out, result); /* NULL: with _captured's exception */
        }
        Py_DECREF(slot);
        if (capturing < 0) goto error;
        if (capturing) goto done;
    }
    if (self->slot != slot || FIELD(slot, slot_buffer) != buffer ||
        FIELD(slot, slot_stack) != stack || FIELD(stack, stack_top) != top ||
        FIELD(entry, prepared_required) != required) {
        Py_CLEAR(out);
        goto done;
    }
    /* The slot's next count (the slots layer's: counted up in place where only the slot
     * holds it, else a new int): no Python code runs from here to the last store. Then
     * Slot.count_call and RegionStack.settle (top: the request's end; live: ahead). */
    if (arena_slot_count_ahead(slot_api, slot, &calls) < 0) goto error;
    arena_hit_mark_used(hit_api, entry); /* the views layer's store */
    arena_slot_count_install(slot_api, slot, &calls);
    arena_slot_account(slot_api, stack, required, live);
    put(&self->held, held);
    if (self->end != required) keep(&self->end, required);
    held = NULL;
    goto done;
error:
    Py_CLEAR(out);
done:
    Py_XDECREF(calls.calls);
    Py_XDECREF(held);
    Py_XDECREF(live);
    Py_XDECREF(entry);
    Py_DECREF(top);
    Py_DECREF(buffer);
    return out;
}

static PyObject *scope_get_simultaneous(PyObject *self, PyObject *specs) {
    PyObject *out = scope_serve((ScopeHitBase *)self, specs);
    if (out != NULL || PyErr_Occurred()) return out;
    PyObject *method = PyObject_GetAttr(self, str_python_get);
    if (method == NULL) return NULL;
    out = PyObject_Call(method, specs, NULL);
    Py_DECREF(method);
    return out;
}

/* ------------------------------------------------------------------ scope enter and exit
 *
 * What Scope._enter_on and Scope.__exit__ do (their pure-Python mirror,
 * arena/planning/scopes.py), for the usual scope: not in debug mode, not poisoning, an
 * open arena, a slot whose open regions are scopes and steps each still referred to by
 * more than the stack (nothing to heal), and, at the exit, no views to retire. Everything
 * else (and any object of an unexpected type) goes to the scope's Python methods:
 * _python_enter (the scope is open already), _enter_on(slot) (the general enter once the
 * slot is chosen) and _python_exit.
 *
 * As the step's: what may run Python code first (choosing the slot, making the new
 * region stack and ints: an allocation may collect garbage), then every field decided
 * on read again (changed: the Python path), the governor's mutex checked free (held by
 * another thread: the Python path, which waits for it), and the new state installed by
 * plain stores with no Python code among them. */

static PyTypeObject *scope_bound, *scope_placer_type;
static Py_ssize_t sc_select, sc_placer, sc_poison, sc_debug, sc_handed, sc_alignment;
static Py_ssize_t sc_placer_probe, sc_placer_log, sc_placer_key, sc_placer_fresh;
static PyObject *str_scope_python_enter, *str_scope_enter_on, *str_scope_python_exit;
static PyObject *str_scope_python_init, *scope_init_names[3]; /* alignment, poison, debug */
static PyObject *scope_memo_keys; /* arena.planning.scopes._MEMO_KEYS */

/* Most regions open on a slot that a scope's compiled exit handles. */
#define SCOPE_REGIONS_MAX 32

static PyObject *bind_scopes(PyObject *module, PyObject *args) {
    PyTypeObject *scope, *placer, *slot, *governor;
    PyObject *memo_keys;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!", &PyType_Type, &scope, &PyType_Type, &placer,
                          &PyType_Type, &slot, &PyType_Type, &governor, &PyDict_Type,
                          &memo_keys))
        return NULL;
    if (scope_type == NULL || !PyType_IsSubtype(scope, scope_type) || slot_type == NULL ||
        slot != slot_type || governor != governor_type) {
        PyErr_SetString(PyExc_TypeError,
                        "bind_scopes(Scope, placer type, Slot, Governor, memo keys): after "
                        "bind(), the same Slot and Governor; Scope derives from ScopeHitBase");
        return NULL;
    }
    static const char *const scope_names[] = {"_select", "_placer", "_poison", "_debug",
                                              "_handed", "_alignment", NULL};
    Py_ssize_t *const scope_out[] = {&sc_select, &sc_placer, &sc_poison,
                                     &sc_debug,  &sc_handed, &sc_alignment};
    static const char *const placer_names[] = {"probe", "log", "key", "fresh_view", NULL};
    Py_ssize_t *const placer_out[] = {&sc_placer_probe, &sc_placer_log, &sc_placer_key,
                                      &sc_placer_fresh};
    if (offsets(scope, scope_names, scope_out) < 0 ||
        offsets(placer, placer_names, placer_out) < 0)
        return NULL;
    if (str_scope_python_enter == NULL) {
        str_scope_python_enter = PyUnicode_InternFromString("_python_enter");
        str_scope_enter_on = PyUnicode_InternFromString("_enter_on");
        str_scope_python_exit = PyUnicode_InternFromString("_python_exit");
        str_scope_python_init = PyUnicode_InternFromString("_python_init");
        const char *names[] = {"alignment", "poison", "debug"};
        for (int i = 0; i < 3; i++) scope_init_names[i] = PyUnicode_InternFromString(names[i]);
        if (str_scope_python_enter == NULL || str_scope_enter_on == NULL ||
            str_scope_python_exit == NULL || str_scope_python_init == NULL ||
            scope_init_names[0] == NULL || scope_init_names[1] == NULL ||
            scope_init_names[2] == NULL)
            return NULL;
    }
    keep((PyObject **)&scope_bound, (PyObject *)scope);
    keep((PyObject **)&scope_placer_type, (PyObject *)placer);
    keep(&scope_memo_keys, memo_keys);
    Py_RETURN_NONE;
}

/* A new scope's fields (Scope.__init__), for the arguments a front passes (placer and
 * select positional; alignment, poison and debug by keyword), a ViewBuilder placer whose
 * key already has its scopes' memo key in _MEMO_KEYS; everything else (and a first
 * scope of a front key, whose memo key Python makes) goes to _python_init. */
static int scope_init(PyObject *self, PyObject *args, PyObject *kwds) {
    if (scope_bound == NULL || !PyObject_TypeCheck(self, scope_bound)) {
        PyErr_SetString(PyExc_TypeError, "ScopeHitBase.__init__ is a Scope's");
        return -1;
    }
    PyObject *values[5], *memo = NULL, *fresh = NULL;
    int usual = PyTuple_CheckExact(args) && PyTuple_GET_SIZE(args) == 2 && kwds != NULL &&
                PyDict_CheckExact(kwds) && PyDict_GET_SIZE(kwds) == 3;
    for (int i = 0; usual && i < 2; i++) values[i] = PyTuple_GET_ITEM(args, i);
    for (int i = 0; usual && i < 3; i++) {
        values[2 + i] = PyDict_GetItemWithError(kwds, scope_init_names[i]); /* str keys */
        if (values[2 + i] == NULL) {
            if (PyErr_Occurred()) return -1;
            usual = 0;
        }
    }
    if (usual && Py_IS_TYPE(values[0], scope_placer_type)) {
        PyObject *key = FIELD(values[0], sc_placer_key);
        fresh = FIELD(values[0], sc_placer_fresh);
        if (key != NULL && PyUnicode_CheckExact(key) && fresh != NULL) {
            memo = PyDict_GetItemWithError(scope_memo_keys, key); /* an exact str key */
            if (memo == NULL && PyErr_Occurred()) return -1;
        }
    }
    if (memo == NULL) {
        PyObject *init = PyObject_GetAttr(self, str_scope_python_init);
        PyObject *done = init == NULL ? NULL : PyObject_Call(init, args, kwds);
        Py_XDECREF(init);
        Py_XDECREF(done);
        return done == NULL ? -1 : 0;
    }
    PyObject *handed = PyList_New(0); /* first: a list may collect garbage */
    if (handed == NULL) return -1;
    ScopeHitBase *scope = (ScopeHitBase *)self;
    Stores stores = {.count = 0};
    store(&stores, &scope->slot, Py_None);
    store(&stores, &scope->base, zero);
    store(&stores, &scope->end, zero);
    store(&stores, &scope->held, zero);
    store(&stores, &scope->watch, Py_True);
    store(&stores, &scope->probe, Py_None);
    store(&stores, &FIELD(self, sc_placer), values[0]);
    store(&stores, &FIELD(self, sc_select), values[1]);
    store(&stores, &FIELD(self, sc_alignment), values[2]);
    store(&stores, &FIELD(self, sc_poison), values[3]);
    store(&stores, &FIELD(self, sc_debug), values[4]);
    store_new(&stores, &FIELD(self, sc_handed), handed);
    store(&stores, &scope->memo, memo);
    store(&stores, &scope->fresh_view, fresh);
    release_stores(&stores);
    return 0;
}

/* Whether every region of `regions` (an exact list) is a scope or a bound step that
 * something beyond the stack refers to (heal_regions would close none): 1, else 0 (a
 * region heal_regions would close, or one of another type: the Python path). A region's
 * references from the stack are its entries and the steps whose `nested` it is, as
 * arena.slots.regions._references counts them. Runs no Python code. */
static int regions_held(PyObject *regions) {
    Py_ssize_t n = PyList_GET_SIZE(regions);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(regions, i);
        if (!PyObject_TypeCheck(r, scope_type) &&
            (bound_step == NULL || !PyObject_TypeCheck(r, bound_step)))
            return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(regions, i);
        Py_ssize_t known = 0;
        for (Py_ssize_t k = 0; k < n; k++) {
            PyObject *other = PyList_GET_ITEM(regions, k);
            if (other == r) known++;
            else if (!PyObject_TypeCheck(other, scope_type) && FIELD(other, st_nested) == r)
                known++;
        }
        if (Py_REFCNT(r) <= known) return 0;
    }
    return 1;
}

/* What the enter of the usual scope decides on (borrowed). */
typedef struct {
    PyObject *slot, *stack, *regions, *governor, *closed, *debug_mode, *locked, *mutex;
    PyObject *placer, *probe, *log, *poison, *debug, *top;
} ScopeOpen;

/* Whether `self`'s enter on `slot` is the usual one (1) or not (0); fills `v`. */
static int scope_open_view(PyObject *self, PyObject *slot, ScopeOpen *v) {
    memset(v, 0, sizeof *v);
    v->slot = slot;
    /* Open already: another thread entered it while this one chose its slot (the
     * resolver's Python code); Scope._enter_on raises. */
    if (((ScopeHitBase *)self)->slot != Py_None) return 0;
    if (!Py_IS_TYPE(slot, slot_type) || (v->stack = stack_of(slot)) == NULL) return 0;
    v->regions = FIELD(v->stack, stack_regions);
    v->governor = FIELD(slot, slot_governor);
    v->top = FIELD(v->stack, stack_top);
    v->placer = FIELD(self, sc_placer);
    v->poison = FIELD(self, sc_poison);
    v->debug = FIELD(self, sc_debug);
    if (v->regions == NULL || !PyList_CheckExact(v->regions) ||
        PyList_GET_SIZE(v->regions) >= SCOPE_REGIONS_MAX || v->governor == NULL ||
        !Py_IS_TYPE(v->governor, governor_type) || v->top == NULL ||
        !PyLong_CheckExact(v->top) || v->placer == NULL ||
        !Py_IS_TYPE(v->placer, scope_placer_type) ||
        (v->poison != Py_False && v->poison != Py_True) ||
        (v->debug != Py_False && v->debug != Py_True))
        return 0;
    v->closed = FIELD(v->governor, governor_closed);
    v->debug_mode = FIELD(v->governor, governor_debug);
    v->locked = FIELD(v->governor, governor_locked);
    v->mutex = FIELD(v->governor, governor_mutex);
    v->probe = FIELD(v->placer, sc_placer_probe);
    v->log = FIELD(v->placer, sc_placer_log);
    return v->closed == Py_False && v->debug_mode == Py_False &&
           (v->locked == Py_False || v->locked == Py_True) && v->mutex != NULL &&
           v->probe != NULL && v->log != NULL;
}

/* The enter of the usual scope on `slot` (Scope._enter_on): 1 done, 0 when the Python
 * path enters, -1 with an exception set. */
static int scope_open(PyObject *self, PyObject *slot) {
    ScopeOpen first, now;
    if (!scope_open_view(self, slot, &first)) return 0;
    hold_view(&first, sizeof first, 1);
    Py_ssize_t depth = PyList_GET_SIZE(first.regions);
    PyObject *list = PyList_New(depth + 1);
    int done = list == NULL ? -1 : 0;
    if (done < 0 || !scope_open_view(self, slot, &now) ||
        memcmp(&first, &now, sizeof first) != 0 || PyList_GET_SIZE(first.regions) != depth ||
        !regions_held(first.regions))
        goto finish;
    int free = mutex_free(first.mutex);
    if (free <= 0) {
        done = free;
        goto finish;
    }
    /* Installed: plain stores, no Python code among them. */
    for (Py_ssize_t i = 0; i < depth; i++) {
        PyObject *r = PyList_GET_ITEM(first.regions, i);
        Py_INCREF(r);
        PyList_SET_ITEM(list, i, r);
    }
    Py_INCREF(self);
    PyList_SET_ITEM(list, depth, self);
    /* _watch: debug or poison, or a request log while unlocked (a probe: asked per
     * request) */
    int watch = first.debug == Py_True || first.poison == Py_True ||
                (first.log != Py_None && first.locked == Py_False);
    ScopeHitBase *scope = (ScopeHitBase *)self;
    Stores stores = {.count = 0};
    store(&stores, &scope->watch, watch ? Py_True : Py_False);
    store(&stores, &scope->probe, first.probe);
    store(&stores, &scope->slot, slot);
    store(&stores, &scope->base, first.top);
    store(&stores, &scope->end, first.top);
    store(&stores, &scope->held, zero);
    slot_api->open_region(slot, list); /* Slot.open_region(self)'s stores */
    release_stores(&stores);
    done = 1;
finish:
    hold_view(&first, sizeof first, -1);
    Py_XDECREF(list);
    return done;
}

/* A region that is no Scope (a bare Region) has no enter or exit, as with the Python
 * base: the errors of a class without them (the `with` statement's, a missing
 * __exit__), never one about a _python_enter or _python_exit it was not meant to have. */
static int scope_only(PyObject *self, int entering) {
    if (scope_bound != NULL && PyObject_TypeCheck(self, scope_bound)) return 1;
    if (entering)
        PyErr_Format(PyExc_TypeError, "'%.200s' object does not support the context manager "
                     "protocol", Py_TYPE(self)->tp_name);
    else
        PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '__exit__'",
                     Py_TYPE(self)->tp_name);
    return 0;
}

static PyObject *scope_enter(PyObject *self, PyObject *unused) {
    if (!scope_only(self, 1)) return NULL;
    if (((ScopeHitBase *)self)->slot != Py_None)
        return PyObject_CallMethodNoArgs(self, str_scope_python_enter);
    PyObject *select = FIELD(self, sc_select);
    if (select == NULL) return PyObject_CallMethodNoArgs(self, str_scope_python_enter);
    Py_INCREF(select);
    PyObject *slot = PyObject_CallNoArgs(select);
    Py_DECREF(select);
    if (slot == NULL) return NULL;
    PyObject *out = NULL;
    int done = scope_open(self, slot);
    if (done > 0) {
        Py_INCREF(self);
        out = self;
    } else if (done == 0) {
        out = PyObject_CallMethodOneArg(self, str_scope_enter_on, slot);
    }
    Py_DECREF(slot);
    return out;
}

/* What the exit of the usual scope decides on: borrowed objects, then per other region
 * open on the slot the region, its end and its held bytes; then what they make. */
typedef struct {
    PyObject *slot, *stack, *regions, *governor, *debug_mode, *mutex, *pending, *asleep;
    PyObject *poison, *handed, *base;
    PyObject *other[3 * SCOPE_REGIONS_MAX];
    Py_ssize_t count; /* other regions */
    long long top, live;
} ScopeClose;

/* The bytes of a ScopeClose's object fields in use. */
static size_t scope_close_objects(const ScopeClose *v) {
    return offsetof(ScopeClose, other) + 3 * (size_t)v->count * sizeof(PyObject *);
}

/* An exact int's value in `*out`: 1, or 0 (not one, or too large). */
static int exact_value(PyObject *value, long long *out) {
    if (value == NULL || !PyLong_CheckExact(value)) return 0;
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    return !overflow && !(*out == -1 && PyErr_Occurred());
}

/* Whether `self`'s exit is the usual scope's (1) or not (0); fills `v` (close_region's
 * new top and live bytes: the highest end of the regions still open, at least the
 * scope's base, and the sum of what they hold). */
static int scope_close_view(PyObject *self, ScopeClose *v) {
    memset(v, 0, offsetof(ScopeClose, other));
    v->count = 0;
    v->live = 0;
    ScopeHitBase *scope = (ScopeHitBase *)self;
    v->slot = scope->slot;
    v->base = scope->base;
    v->poison = FIELD(self, sc_poison);
    v->handed = FIELD(self, sc_handed);
    if (v->slot == NULL || !Py_IS_TYPE(v->slot, slot_type) || v->poison != Py_False ||
        v->handed == NULL || !PyList_CheckExact(v->handed) ||
        PyList_GET_SIZE(v->handed) != 0 || !exact_value(v->base, &v->top))
        return 0;
    v->stack = stack_of(v->slot);
    if (v->stack == NULL) return 0;
    v->regions = FIELD(v->stack, stack_regions);
    v->governor = FIELD(v->slot, slot_governor);
    v->pending = FIELD(v->slot, slot_pending);
    if (v->regions == NULL || !PyList_CheckExact(v->regions) ||
        PyList_GET_SIZE(v->regions) > SCOPE_REGIONS_MAX || v->governor == NULL ||
        !Py_IS_TYPE(v->governor, governor_type) || v->pending == NULL ||
        !PyLong_CheckExact(v->pending))
        return 0;
    v->debug_mode = FIELD(v->governor, governor_debug);
    v->mutex = FIELD(v->governor, governor_mutex);
    v->asleep = FIELD(v->governor, governor_asleep);
    if (v->debug_mode != Py_False || v->mutex == NULL || v->asleep == NULL ||
        !PyLong_CheckExact(v->asleep))
        return 0;
    int open = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v->regions); i++) {
        PyObject *r = PyList_GET_ITEM(v->regions, i), *end, *held;
        if (r == self) {
            open = 1;
            continue;
        }
        if (PyObject_TypeCheck(r, scope_type)) {
            end = ((ScopeHitBase *)r)->end;
            held = ((ScopeHitBase *)r)->held;
        } else if (bound_step != NULL && PyObject_TypeCheck(r, bound_step)) {
            end = FIELD(r, st_end);
            held = FIELD(r, st_held);
        } else {
            return 0;
        }
        long long e, h;
        if (!exact_value(end, &e) || !exact_value(held, &h) ||
            __builtin_add_overflow(v->live, h, &v->live))
            return 0;
        if (e > v->top) v->top = e;
        v->other[3 * v->count] = r;
        v->other[3 * v->count + 1] = end;
        v->other[3 * v->count + 2] = held;
        v->count++;
    }
    return open; /* closed already (healed): the Python path changes nothing */
}

static void hold_close_view(ScopeClose *v, int hold) {
    hold_view(v, scope_close_objects(v), hold);
}

/* The exit of the usual scope (Scope.__exit__: close_region, nothing to poison or
 * retire): 1 done, 0 when the Python path exits, -1 with an exception set. */
static int scope_close(PyObject *self) {
    ScopeClose first, now;
    if (!scope_close_view(self, &first)) return 0;
    hold_close_view(&first, 1);
    Py_ssize_t kept_count = first.count;
    PyObject *kept = PyList_New(kept_count);
    PyObject *top = NULL, *live = NULL;
    if (kept != NULL) {
        top = kept_count ? PyLong_FromLongLong(first.top) : (Py_INCREF(zero), zero);
        live = top == NULL ? NULL : kept_count ? PyLong_FromLongLong(first.live)
                                               : (Py_INCREF(zero), zero);
    }
    int done = live == NULL ? -1 : 0;
    if (done < 0 || !scope_close_view(self, &now) || now.count != first.count ||
        memcmp(&first, &now, scope_close_objects(&first)) != 0 || now.top != first.top ||
        now.live != first.live)
        goto finish;
    int free = mutex_free(first.mutex);
    if (free <= 0) {
        done = free;
        goto finish;
    }
    /* Installed: plain stores, no Python code among them. */
    for (Py_ssize_t i = 0; i < kept_count; i++) {
        PyObject *r = first.other[3 * i];
        Py_INCREF(r);
        PyList_SET_ITEM(kept, i, r);
    }
    /* Slot.close_region(self, top, live)'s stores (the stack's, then the detour flag). */
    slot_api->close_region(first.slot, kept, top, live);
    Stores stores = {.count = 0};
    store(&stores, &((ScopeHitBase *)self)->slot, Py_None);
    release_stores(&stores);
    done = 1;
finish:
    hold_close_view(&first, -1);
    Py_XDECREF(live);
    Py_XDECREF(top);
    Py_XDECREF(kept);
    return done;
}

static PyObject *scope_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!scope_only(self, 0)) return NULL;
    if (((ScopeHitBase *)self)->slot == Py_None) Py_RETURN_NONE; /* as Python: closed */
    int done = scope_close(self);
    if (done < 0) return NULL;
    if (done) Py_RETURN_NONE;
    PyObject *method = PyObject_GetAttr(self, str_scope_python_exit);
    if (method == NULL) return NULL;
    PyObject *out = PyObject_Vectorcall(method, args, (size_t)nargs, NULL);
    Py_DECREF(method);
    return out;
}

static int scope_traverse(ScopeHitBase *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->slot);
    Py_VISIT(self->base);
    Py_VISIT(self->end);
    Py_VISIT(self->held);
    Py_VISIT(self->memo);
    Py_VISIT(self->fresh_view);
    Py_VISIT(self->watch);
    Py_VISIT(self->probe);
    return 0;
}

static int scope_clear(ScopeHitBase *self) {
    Py_CLEAR(self->slot);
    Py_CLEAR(self->base);
    Py_CLEAR(self->end);
    Py_CLEAR(self->held);
    Py_CLEAR(self->memo);
    Py_CLEAR(self->fresh_view);
    Py_CLEAR(self->watch);
    Py_CLEAR(self->probe);
    return 0;
}

static void scope_dealloc(ScopeHitBase *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    scope_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef scope_methods[] = {
    {"get_simultaneous", (PyCFunction)scope_get_simultaneous, METH_VARARGS,
     "get_simultaneous(*specs): the compiled hit of a scope's request."},
    {"__enter__", (PyCFunction)scope_enter, METH_NOARGS,
     "__enter__(): the compiled enter of the usual scope, else _python_enter."},
    {"__exit__", (PyCFunction)(void (*)(void))scope_exit, METH_FASTCALL,
     "__exit__(kind, value, trace): the compiled exit of the usual scope, else "
     "_python_exit."},
    {NULL, NULL, 0, NULL},
};

#define SCOPE_MEMBER(name, field) {name, T_OBJECT_EX, offsetof(ScopeHitBase, field), 0, NULL}
static PyMemberDef scope_members[] = {
    SCOPE_MEMBER("slot", slot),
    SCOPE_MEMBER("base", base),
    SCOPE_MEMBER("end", end),
    SCOPE_MEMBER("held", held),
    SCOPE_MEMBER("_memo", memo),
    SCOPE_MEMBER("_fresh_view", fresh_view),
    SCOPE_MEMBER("_watch", watch),
    SCOPE_MEMBER("_probe", probe),
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot scope_slots[] = {
    {Py_tp_doc, "The compiled hit of a scope's request (see arena.planning.region_hit)."},
    {Py_tp_methods, scope_methods},
    {Py_tp_members, scope_members},
    {Py_tp_init, scope_init},
    {Py_tp_traverse, scope_traverse},
    {Py_tp_clear, scope_clear},
    {Py_tp_dealloc, scope_dealloc},
    {0, NULL},
};

static PyType_Spec scope_spec = {
    "arena.planning._region_hit.ScopeHitBase",
    sizeof(ScopeHitBase),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    scope_slots,
};


static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(Slot, RegionStack, Buffer, Prepared, Governor): where the hits read their "
     "attributes."},
    {"bind_steps", bind_steps, METH_VARARGS,
     "bind_steps(Step, StepRun, StepBook, StepBooks, placer type, RLock, Slot, Governor, "
     "ended run, two StepRun(), two Step(*marks), marks, read_rlocks=True): where the "
     "compiled step init, enter and exit read and write their fields; True where RLocks are read "
     "directly (read_rlocks, and their layout checks out)."},
    {"bind_rows", bind_rows, METH_O,
     "bind_rows(StepCaches): the type of a step's cache lists whose rows the step hit reads."},
    {"bind_scopes", bind_scopes, METH_VARARGS,
     "bind_scopes(Scope, placer type, Slot, Governor, memo keys): where the compiled scope "
     "init, enter and exit read and write their fields."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "arena.planning._region_hit",
    "The compiled hits of a replayed step's and a scope's requests (optional; see "
    "arena.planning.region_hit).",
    -1, module_methods,
};

/* The capsule `name` of the module `module` (imported first: PyCapsule_Import imports
 * only the package and reads the rest as attributes), or NULL with an ImportError that
 * names what to do. */
static void *import_api(const char *module, const char *name) {
    PyObject *imported = PyImport_ImportModule(module);
    Py_XDECREF(imported);
    void *api = imported == NULL ? NULL : PyCapsule_Import(name, 0);
    if (api == NULL && !PyErr_ExceptionMatches(PyExc_ImportError)) {
        PyErr_Clear(); /* a module without the C-API */
        PyErr_Format(PyExc_ImportError,
                     "arena.planning._region_hit needs the C-API of %s: rebuild arena", module);
    }
    return api;
}

PyMODINIT_FUNC PyInit__region_hit(void) {
    /* The C-APIs of the views and slots layers, as NumPy's import_array() takes NumPy's:
     * once. */
    ArenaHitAPI *hits = import_api("arena.views._hit", ARENA_HIT_API_CAPSULE);
    if (hits == NULL) return NULL;
    if (hits->version != ARENA_HIT_API_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "arena.planning._region_hit was built for version %d of "
                     "arena.views._hit's C-API, which exports version %d: rebuild arena",
                     ARENA_HIT_API_VERSION, hits->version);
        return NULL;
    }
    ArenaSlotAPI *slots = import_api("arena.slots._slot", ARENA_SLOT_API_CAPSULE);
    if (slots == NULL) return NULL;
    if (slots->version != ARENA_SLOT_API_VERSION) {
        PyErr_Format(PyExc_ImportError,
                     "arena.planning._region_hit was built for version %d of "
                     "arena.slots._slot's C-API, which exports version %d: rebuild arena",
                     ARENA_SLOT_API_VERSION, slots->version);
        return NULL;
    }
    hit_api = hits;
    slot_api = slots;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    zero = PyLong_FromLong(0);
    one = PyLong_FromLong(1);
    str_python_get = PyUnicode_InternFromString("_python_get");
    str_python_release = PyUnicode_InternFromString("_python_release");
    str_captured = PyUnicode_InternFromString("_captured");
    str_data_ptr = PyUnicode_InternFromString("data_ptr");
    str_module = PyUnicode_InternFromString("__module__");
    if (zero == NULL || one == NULL || str_python_get == NULL || str_python_release == NULL ||
        str_captured == NULL || str_data_ptr == NULL || str_module == NULL) {
        Py_DECREF(module);
        return NULL;
    }
    PyObject *step_type = PyType_FromSpec(&step_spec);
    if (step_type == NULL || PyModule_AddObject(module, "StepHitBase", step_type) < 0) {
        Py_XDECREF(step_type);
        Py_DECREF(module);
        return NULL;
    }
    scope_type = (PyTypeObject *)PyType_FromSpec(&scope_spec);
    if (scope_type == NULL) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(scope_type);
    if (PyModule_AddObject(module, "ScopeHitBase", (PyObject *)scope_type) < 0) {
        Py_DECREF(scope_type);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
