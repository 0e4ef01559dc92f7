/*
 * arena.slots._slot: a Slot's and its RegionStack's own stores, compiled, for the compiled
 * code of the layers above: the C-API of arena/slots/_slot_api.h (the capsule
 * "arena.slots._slot._C_API"), which arena/views/_hit.c imports once, at its own import.
 * Each function is the compiled form of a method of arena/slots/slot.py or stack.py
 * (Slot.count_call, Slot.note_load, Slot.open_region, Slot.close_region,
 * RegionStack.account) and stores what that method stores: so the slots layer alone
 * writes a slot's fields (issue 27 item 3), in C as in Python, and a hit above it reads
 * them and asks for the change. The module has no Python functions: its capsule is all it
 * exports.
 *
 * The functions are called on the hot paths (a plain hit counts a call through one of
 * them), through the table's function pointers: an indirect call of a few instructions,
 * with the same stores and reference counts the hit made itself before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "../base/_fields.h"
#include "_slot_api.h"

enum { SLOT_CALLS, SLOT_DETOUR, SLOT_LOAD, SLOT_STACK, SLOT_PENDING, SLOT_GOVERNOR,
       SLOT_FIELDS };
static const char *slot_names[SLOT_FIELDS] = {"calls",   "detour",  "load",
                                              "stack",   "pending", "governor"};
enum { STACK_REGIONS, STACK_TOP, STACK_LIVE, STACK_FIELDS };
static const char *stack_names[STACK_FIELDS] = {"regions", "top", "live"};

/* The offsets, bound once (bind): the classes' own __slots__ members. */
static Py_ssize_t slot_at[SLOT_FIELDS], stack_at[STACK_FIELDS], governor_asleep;
static PyTypeObject *governor_type;
static PyObject *zero, *one;

static int bind_offsets(PyTypeObject *type, const char **names, int count, Py_ssize_t *out) {
    for (int i = 0; i < count; i++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, names[i]); /* borrowed */
        if (slot_offset(descr, type->tp_name, names[i], &out[i]) < 0) return -1;
    }
    return 0;
}

static int bind(PyTypeObject *slot, PyTypeObject *stack, PyTypeObject *governor) {
    Py_ssize_t slots[SLOT_FIELDS], stacks[STACK_FIELDS], asleep;
    static const char *asleep_name[1] = {"asleep"};
    if (bind_offsets(slot, slot_names, SLOT_FIELDS, slots) < 0 ||
        bind_offsets(stack, stack_names, STACK_FIELDS, stacks) < 0 ||
        bind_offsets(governor, asleep_name, 1, &asleep) < 0)
        return -1;
    /* Installed once every offset is found: a refused bind leaves the last one bound. */
    memcpy(slot_at, slots, sizeof slots);
    memcpy(stack_at, stacks, sizeof stacks);
    governor_asleep = asleep;
    Py_INCREF(governor);
    Py_XSETREF(governor_type, governor);
    return 0;
}

/* ---------------------------------------------------------------- Slot.count_call */

/* An exact int's value, or -1 where it is not one (or is negative, or past Py_ssize_t).
 * A one-digit int (below 2**30) is read in place. */
static inline Py_ssize_t plain_size(PyObject *value) {
    if (value == NULL || !PyLong_CheckExact(value)) return -1;
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)value)) {
        Py_ssize_t found = (Py_ssize_t)PyUnstable_Long_CompactValue((PyLongObject *)value);
        return found < 0 ? -1 : found;
    }
#else
    if (Py_SIZE(value) == 0) return 0;
    if (Py_SIZE(value) == 1) return (Py_ssize_t)((PyLongObject *)value)->ob_digit[0];
#endif
    Py_ssize_t found = PyLong_AsSsize_t(value);
    if (found == -1 && PyErr_Occurred()) PyErr_Clear();
    return found < 0 ? -1 : found;
}

/* `calls` + 1, the value `self.calls += 1` stores: PyLong_FromLong below 2**30 (one digit:
 * CPython 3.11 builds it directly), else PyNumber_Add (an exact int's: no Python code).
 * NULL with an exception set on error. */
static PyObject *plus_one(PyObject *calls) {
    Py_ssize_t value = plain_size(calls);
    if (value >= 0 && value < ((Py_ssize_t)1 << 30) - 1) return PyLong_FromLong((long)value + 1);
    return PyNumber_Add(calls, one);
}

/* Whether the call count `calls` may be counted up in place: an exact one-digit int
 * (CPython 3.11's layout) below 2**30 - 1 that only its field refers to (reference count
 * 1), so no one can see it change, and not a cached small int (those have more
 * references). A hit then installs no new int: the allocation, and the old int's
 * deallocation, are code and memory that a torch pass has evicted from the CPU's caches by
 * the next request. */
static inline int counts_in_place(PyObject *calls) {
#if PY_VERSION_HEX < 0x030C0000
    return calls != NULL && PyLong_CheckExact(calls) && Py_REFCNT(calls) == 1 &&
           Py_SIZE(calls) == 1 &&
           ((PyLongObject *)calls)->ob_digit[0] + 1 < ((digit)1 << PyLong_SHIFT);
#else
    (void)calls;
    return 0;
#endif
}

/* `calls` + 1 in place (counts_in_place said yes, with no Python code run since). */
static inline void count_in_place(PyObject *calls) {
#if PY_VERSION_HEX < 0x030C0000
    ((PyLongObject *)calls)->ob_digit[0] += 1;
#else
    (void)calls;
#endif
}

static int count_call(PyObject *slot) {
    PyObject **field = &FIELD(slot, slot_at[SLOT_CALLS]);
    PyObject *calls = *field;
    if (calls == NULL) return 0; /* never: Slot.__init__ sets it (left as it is) */
    if (counts_in_place(calls)) {
        count_in_place(calls);
        return 0;
    }
    PyObject *more = plus_one(calls);
    if (more == NULL) return -1;
    *field = more;
    Py_DECREF(calls);
    return 0;
}

static int count_ahead(PyObject *slot, ArenaSlotCount *count) {
    PyObject *calls = FIELD(slot, slot_at[SLOT_CALLS]);
    count->in_place = counts_in_place(calls);
    if (count->in_place) {
        count->calls = Py_NewRef(calls); /* held: count_install counts it up and lets go */
        return 0;
    }
    count->calls = calls == NULL ? NULL : plus_one(calls);
    if (calls == NULL)
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute 'calls'",
                     Py_TYPE(slot)->tp_name);
    return count->calls == NULL ? -1 : 0;
}

static void count_install(PyObject *slot, ArenaSlotCount *count) {
    PyObject *calls = count->calls;
    count->calls = NULL;
    if (count->in_place) {
        count_in_place(calls);
        Py_DECREF(calls); /* the field's reference stays */
        return;
    }
    PyObject **field = &FIELD(slot, slot_at[SLOT_CALLS]);
    PyObject *old = *field;
    *field = calls;
    Py_XDECREF(old);
}

/* ---------------------------------------------------------------- the other stores */

/* A field set to a new reference to `value`; the value it held goes into `old` (released
 * by the caller once every store is done). */
static inline void swap(PyObject *object, Py_ssize_t offset, PyObject *value, PyObject **old) {
    *old = FIELD(object, offset);
    FIELD(object, offset) = Py_NewRef(value);
}

static void account(PyObject *stack, PyObject *top, PyObject *live) {
    PyObject *old[2];
    swap(stack, stack_at[STACK_TOP], top, &old[0]);
    swap(stack, stack_at[STACK_LIVE], live, &old[1]);
    Py_XDECREF(old[0]);
    Py_XDECREF(old[1]);
}

static void note_load(PyObject *slot, PyObject *live) {
    PyObject *load = FIELD(slot, slot_at[SLOT_LOAD]);
    if (load == NULL || !PyLong_CheckExact(load) || !PyLong_CheckExact(live)) return;
    int higher = PyObject_RichCompareBool(live, load, Py_GT); /* exact ints: no code */
    if (higher <= 0) {
        PyErr_Clear(); /* none: two exact ints compare without error */
        return;
    }
    PyObject *old;
    swap(slot, slot_at[SLOT_LOAD], live, &old);
    Py_DECREF(old);
}

static void open_region(PyObject *slot, PyObject *regions) {
    PyObject *stack = FIELD(slot, slot_at[SLOT_STACK]), *old[2];
    swap(slot, slot_at[SLOT_DETOUR], one, &old[0]); /* first, as Slot.open_region */
    swap(stack, stack_at[STACK_REGIONS], regions, &old[1]);
    Py_XDECREF(old[0]);
    Py_XDECREF(old[1]);
}

/* Whether a slot's or governor's flag `value` reads as true, with no Python code: an exact
 * int's truth; anything else (never, the callers checked) as true (a detour: the checked
 * path, which recomputes it). */
static inline int flag_set(PyObject *value) {
    return value == NULL || !PyLong_CheckExact(value) || PyObject_IsTrue(value) != 0;
}

static void close_region(PyObject *slot, PyObject *kept, PyObject *top, PyObject *live) {
    PyObject *stack = FIELD(slot, slot_at[SLOT_STACK]), *old[4];
    int open = PyList_GET_SIZE(kept) > 0;
    if (!open) top = live = zero; /* RegionStack.remove: nothing stays open */
    swap(stack, stack_at[STACK_REGIONS], kept, &old[0]);
    swap(stack, stack_at[STACK_TOP], top, &old[1]);
    swap(stack, stack_at[STACK_LIVE], live, &old[2]);
    /* Slot.update_detour, after the stack's change */
    PyObject *governor = FIELD(slot, slot_at[SLOT_GOVERNOR]);
    PyObject *asleep = governor != NULL && Py_IS_TYPE(governor, governor_type)
                           ? FIELD(governor, governor_asleep)
                           : NULL;
    int detour = flag_set(FIELD(slot, slot_at[SLOT_PENDING])) || open || flag_set(asleep);
    swap(slot, slot_at[SLOT_DETOUR], detour ? one : zero, &old[3]);
    for (int i = 0; i < 4; i++) Py_XDECREF(old[i]);
}

/* ---------------------------------------------------------------- the module */

static ArenaSlotAPI api = {
    ARENA_SLOT_API_VERSION, bind,     count_call,   count_ahead, count_install,
    account,                note_load, open_region, close_region,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "arena.slots._slot",
    "A slot's and its region stack's own stores, for the compiled code above the slots "
    "layer: the C-API arena/slots/_slot_api.h, exported as the capsule _C_API.",
    -1, NULL,
};

PyMODINIT_FUNC PyInit__slot(void) {
    zero = PyLong_FromLong(0);
    one = PyLong_FromLong(1);
    if (zero == NULL || one == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyObject *capsule = PyCapsule_New(&api, ARENA_SLOT_API_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
