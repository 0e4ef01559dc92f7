/*
 * arena.slots._slot: the slots layer's C-API for the compiled code of the layers above
 * (arena/slots/_slot_api.h, the capsule "arena.slots._slot._C_API", which
 * arena/views/_hit.c imports once, at its own import): a Slot's and its RegionStack's own
 * stores, compiled, so that the slots layer alone writes a slot's fields (issue 27 item
 * 3), in C as in Python, and a hit above it reads them and asks for every change.
 *
 * This module binds the offsets (bind: the classes' own __slots__ members) and holds the
 * stores of a region's opening and closing and of LOAD (Slot.open_region's,
 * Slot.close_region's, Slot.note_load's), called through the table's function pointers
 * once per step or scope. A hit's per-request stores (Slot.count_call's,
 * RegionStack.settle's) are the header's static inline functions, over the offsets the
 * table holds: no call on the hot path. The module has no Python functions: its capsule
 * is all it exports.
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
enum { STACK_REGIONS, STACK_TOP, STACK_LIVE, STACK_BELOW, STACK_FIELDS };
static const char *stack_names[STACK_FIELDS] = {"regions", "top", "live", "below"};

/* The offsets, bound once (bind): the classes' own __slots__ members. */
static Py_ssize_t slot_at[SLOT_FIELDS], stack_at[STACK_FIELDS], governor_asleep;
static PyTypeObject *governor_type;
static PyObject *zero, *one, *minus_one;

static int bind_offsets(PyTypeObject *type, const char **names, int count, Py_ssize_t *out) {
    for (int i = 0; i < count; i++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, names[i]); /* borrowed */
        if (slot_offset(descr, type->tp_name, names[i], &out[i]) < 0) return -1;
    }
    return 0;
}

static ArenaSlotAPI api;

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
    api.calls_at = slots[SLOT_CALLS];
    api.top_at = stacks[STACK_TOP];
    api.live_at = stacks[STACK_LIVE];
    Py_INCREF(governor);
    Py_XSETREF(governor_type, governor);
    return 0;
}

/* A field set to a new reference to `value`; the value it held goes into `old` (released
 * by the caller once every store is done). */
static inline void swap(PyObject *object, Py_ssize_t offset, PyObject *value, PyObject **old) {
    *old = FIELD(object, offset);
    FIELD(object, offset) = Py_NewRef(value);
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
    PyObject *stack = FIELD(slot, slot_at[SLOT_STACK]), *old[3];
    swap(slot, slot_at[SLOT_DETOUR], one, &old[0]); /* first, as Slot.open_region */
    /* RegionStack.push: the new list, and below to be counted again by the next settle */
    swap(stack, stack_at[STACK_REGIONS], regions, &old[1]);
    swap(stack, stack_at[STACK_BELOW], minus_one, &old[2]);
    for (int i = 0; i < 3; i++) Py_XDECREF(old[i]);
}

/* Whether a slot's or governor's flag `value` reads as true, with no Python code: an exact
 * int's truth; anything else (never, the callers checked) as true (a detour: the checked
 * path, which recomputes it). */
static inline int flag_set(PyObject *value) {
    return value == NULL || !PyLong_CheckExact(value) || PyObject_IsTrue(value) != 0;
}

static void close_region(PyObject *slot, PyObject *kept, PyObject *top, PyObject *live) {
    PyObject *stack = FIELD(slot, slot_at[SLOT_STACK]), *old[5];
    int open = PyList_GET_SIZE(kept) > 0;
    if (!open) top = live = zero; /* RegionStack.remove: nothing stays open */
    swap(stack, stack_at[STACK_REGIONS], kept, &old[0]);
    swap(stack, stack_at[STACK_TOP], top, &old[1]);
    swap(stack, stack_at[STACK_LIVE], live, &old[2]);
    swap(stack, stack_at[STACK_BELOW], minus_one, &old[4]); /* counted again by a settle */
    /* Slot.update_detour, after the stack's change */
    PyObject *governor = FIELD(slot, slot_at[SLOT_GOVERNOR]);
    PyObject *asleep = governor != NULL && Py_IS_TYPE(governor, governor_type)
                           ? FIELD(governor, governor_asleep)
                           : NULL;
    int detour = flag_set(FIELD(slot, slot_at[SLOT_PENDING])) || open || flag_set(asleep);
    swap(slot, slot_at[SLOT_DETOUR], detour ? one : zero, &old[3]);
    for (int i = 0; i < 5; i++) Py_XDECREF(old[i]);
}

/* ---------------------------------------------------------------- the module */

/* The table: its offsets filled by bind. */
static ArenaSlotAPI api = {
    .version = ARENA_SLOT_API_VERSION,
    .bind = bind,
    .note_load = note_load,
    .open_region = open_region,
    .close_region = close_region,
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
    minus_one = PyLong_FromLong(-1);
    if (zero == NULL || one == NULL || minus_one == NULL) return NULL;
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
