/*
 * The C-API of arena.slots._slot: the stores a Slot and its RegionStack make in their own
 * methods, for the compiled code of the layers above (arena/views/_hit.c: the plain, step
 * and scope hits, the Planner's first sightings, the step and scope enters and exits), so
 * that only the slots layer writes the slots layer's fields (issue 27 item 3). A caller
 * reads the fields it decides on at their offsets (reading is every layer's right); what
 * it changes, it asks of these functions, each the compiled form of the Python method
 * named beside it (arena/slots/slot.py, arena/slots/stack.py).
 *
 * _slot exports one `ArenaSlotAPI` as the capsule "arena.slots._slot._C_API" (as
 * arena.memory._host exports a host ledger's replace to arena/slots/_growth.c, and NumPy
 * its C-API as `_ARRAY_API`); a module that uses it imports it once, at its own import,
 * with PyCapsule_Import, and calls `bind` once with the classes before anything else.
 *
 * Every function here but `bind` and the counts' arena_slot_count_ahead and
 * arena_slot_count_call (which may allocate an int) is plain stores: it runs no Python
 * code, and the values it replaces are ints and lists of regions held elsewhere too (by
 * the new list, or by the caller: the region that closes), whose release runs none
 * either. So a caller that installs a change in one step (every value made and every
 * field it decided on read again first) calls them among its own stores, and no other
 * thread sees the change half made. `slot` is always a Slot of the bound class, `stack`
 * its RegionStack (the caller checked their types, as the compiled hits check every
 * object they read); the objects passed are borrowed, and the functions take their own
 * references.
 */
#ifndef ARENA_SLOT_API_H
#define ARENA_SLOT_API_H

#include <Python.h>

/* Raised where the layout of this struct changes: a module built against another refuses
 * to import (its pure-Python mirror then runs). */
#define ARENA_SLOT_API_VERSION 1
#define ARENA_SLOT_API_CAPSULE "arena.slots._slot._C_API"

/* A slot's next call count, made before a caller's stores (arena_slot_count_ahead) and
 * installed among them (arena_slot_count_install). `calls` is the caller's reference until
 * then: it drops it (Py_CLEAR) where it installs nothing. */
typedef struct {
    PyObject *calls; /* the count to install: the field's own int (in_place) or a new one */
    int in_place;    /* the field's int is counted up where it lies */
} ArenaSlotCount;

typedef struct {
    int version; /* ARENA_SLOT_API_VERSION */
    /* Where this header's inline functions below store: Slot.calls, RegionStack.top and
     * RegionStack.live, the offsets `bind` found (only those functions use them). */
    Py_ssize_t calls_at, top_at, live_at;
    /* The classes whose fields the functions write: Slot, RegionStack and Governor (whose
     * `asleep` close_region reads). 0, or -1 with a TypeError where a field is not a
     * writable __slots__ member. Called once, before anything else of this API. */
    int (*bind)(PyTypeObject *slot, PyTypeObject *stack, PyTypeObject *governor);
    /* Slot.note_load(live) (no reach): slot.load = max(slot.load, live), for an exact int
     * `live` and load (else nothing changes). */
    void (*note_load)(PyObject *slot, PyObject *live);
    /* Slot.open_region(region)'s stores (the caller checked the arena open and the mutex
     * free): slot.detour = 1, then slot.stack.regions = `regions`, the stack's list with the
     * region appended: a new list the caller made ahead (RegionStack.push makes it so), and
     * slot.stack.below = -1 (counted again by the next RegionStack.settle). */
    void (*open_region)(PyObject *slot, PyObject *regions);
    /* Slot.close_region(region, top, live)'s stores: RegionStack.remove's (slot.stack's
     * regions = `kept`, the stack's list without the region, a new list the caller made
     * ahead; its top and live = `top` and `live`, or 0 and 0 where `kept` is empty; its
     * below = -1, counted again by the next RegionStack.settle), then
     * Slot.update_detour's (detour = 1 where slot.pending, `kept` or the governor's
     * `asleep` is nonzero, else 0; a value that is no exact int counts as nonzero). */
    void (*close_region)(PyObject *slot, PyObject *kept, PyObject *top, PyObject *live);
} ArenaSlotAPI;

/*
 * A hit's per-request stores (Slot.count_call's, RegionStack.settle's), written here as
 * static inline functions over the offsets above: the slots layer's code, compiled into
 * the caller where it calls them, so a hit pays no call for them (as NumPy's headers
 * inline an array's accessors over its C-API). The other stores are the table's functions.
 */

#define ARENA_SLOT_AT(object, offset) (*(PyObject **)((char *)(object) + (offset)))

/* Inlined always (GCC left to itself called them: 33 instructions more per step hit, 41
 * per scope hit, callgrind); their rare branches (a new int) are functions of their own,
 * once per module that includes this header. */
#if defined(__GNUC__)
#define ARENA_SLOT_INLINE static inline __attribute__((always_inline))
#define ARENA_SLOT_RARE static __attribute__((noinline, cold, unused))
#else
#define ARENA_SLOT_INLINE static inline
#define ARENA_SLOT_RARE static
#endif

/* Whether the call count `calls` may be counted up in place: an exact one-digit int
 * (CPython 3.11's layout) below 2**30 - 1 that only its field refers to (reference count
 * 1), so no one can see it change, and not a cached small int (those have more
 * references). A hit then installs no new int: the allocation, and the old int's
 * deallocation, are code and memory that a torch pass has evicted from the CPU's caches by
 * the next request. (Later CPythons lay ints out otherwise: never.) */
ARENA_SLOT_INLINE int arena_slot_counts_in_place(PyObject *calls) {
#if PY_VERSION_HEX < 0x030C0000
    return calls != NULL && PyLong_CheckExact(calls) && Py_REFCNT(calls) == 1 &&
           Py_SIZE(calls) == 1 &&
           ((PyLongObject *)calls)->ob_digit[0] + 1 < ((digit)1 << PyLong_SHIFT);
#else
    (void)calls;
    return 0;
#endif
}

/* `calls` + 1 in place (arena_slot_counts_in_place said yes, no Python code run since). */
ARENA_SLOT_INLINE void arena_slot_count_in_place(PyObject *calls) {
#if PY_VERSION_HEX < 0x030C0000
    ((PyLongObject *)calls)->ob_digit[0] += 1;
#else
    (void)calls;
#endif
}

/* `calls` + 1 as a new int, the value `self.calls += 1` stores: PyLong_FromLong for a
 * one-digit int, else PyNumber_Add (an exact int's: no Python code). NULL with an
 * exception set on error. */
ARENA_SLOT_RARE PyObject *arena_slot_plus_one(PyObject *calls) {
#if PY_VERSION_HEX < 0x030C0000
    if (PyLong_CheckExact(calls) && Py_SIZE(calls) == 1)
        return PyLong_FromLong((long)((PyLongObject *)calls)->ob_digit[0] + 1);
#endif
    PyObject *one = PyLong_FromLong(1); /* a cached small int */
    PyObject *more = one == NULL ? NULL : PyNumber_Add(calls, one);
    Py_XDECREF(one);
    return more;
}

/* arena_slot_count_call's new int. */
ARENA_SLOT_RARE int arena_slot_count_anew(PyObject **field) {
    PyObject *calls = *field;
    if (calls == NULL) return 0;
    PyObject *more = arena_slot_plus_one(calls);
    if (more == NULL) return -1;
    *field = more;
    Py_DECREF(calls);
    return 0;
}

/* Slot.count_call(): slot.calls + 1, installed now. 0, or -1 with an exception set (no
 * memory for the new int: nothing changed). An unset field (never: Slot.__init__ sets
 * it) stays unset. */
ARENA_SLOT_INLINE int arena_slot_count_call(const ArenaSlotAPI *api, PyObject *slot) {
    PyObject **field = &ARENA_SLOT_AT(slot, api->calls_at);
    if (arena_slot_counts_in_place(*field)) {
        arena_slot_count_in_place(*field);
        return 0;
    }
    return arena_slot_count_anew(field);
}

/* arena_slot_count_ahead's new int. */
ARENA_SLOT_RARE int arena_slot_count_ahead_anew(PyObject *slot, PyObject *calls,
                                               ArenaSlotCount *count) {
    count->in_place = 0;
    if (calls == NULL) {
        count->calls = NULL;
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute 'calls'",
                     Py_TYPE(slot)->tp_name);
        return -1;
    }
    count->calls = arena_slot_plus_one(calls);
    return count->calls == NULL ? -1 : 0;
}

/* Slot.count_call() in two steps, for a caller that makes every value before it stores
 * anything: the next count into `*count` (0), or -1 with an exception set (`count->calls`
 * NULL; an unset field: an AttributeError). */
ARENA_SLOT_INLINE int arena_slot_count_ahead(const ArenaSlotAPI *api, PyObject *slot,
                                             ArenaSlotCount *count) {
    PyObject *calls = ARENA_SLOT_AT(slot, api->calls_at);
    if (arena_slot_counts_in_place(calls)) {
        count->in_place = 1;
        count->calls = Py_NewRef(calls); /* held: the install counts it up and lets go */
        return 0;
    }
    return arena_slot_count_ahead_anew(slot, calls, count);
}

/* ... and its store, with no Python code run since arena_slot_count_ahead (the int
 * counted in place must still be only the field's): consumes `count->calls` (NULL
 * after). */
ARENA_SLOT_INLINE void arena_slot_count_install(const ArenaSlotAPI *api, PyObject *slot,
                                                ArenaSlotCount *count) {
    PyObject *calls = count->calls;
    count->calls = NULL;
    if (count->in_place) {
        arena_slot_count_in_place(calls);
        Py_DECREF(calls); /* the field's reference stays */
        return;
    }
    PyObject **field = &ARENA_SLOT_AT(slot, api->calls_at);
    PyObject *old = *field;
    *field = calls;
    Py_XDECREF(old);
}

/* RegionStack.settle(top, region)'s stores for the innermost region: stack.top = top,
 * stack.live = live, where `live` (an exact int, made by the caller ahead: an int
 * allocation) is what the regions under the innermost hold plus the innermost's new held
 * bytes, counted from the regions' own figures as settle counts it, never added to
 * stack.live: a figure a Python-level interrupt left behind (between a region's own stores
 * and its settle) is not carried on. stack.below is left as it is (the regions under the
 * innermost did not change). The replaced ints are released after both stores. */
ARENA_SLOT_INLINE void arena_slot_account(const ArenaSlotAPI *api, PyObject *stack,
                                          PyObject *top, PyObject *live) {
    PyObject **top_field = &ARENA_SLOT_AT(stack, api->top_at);
    PyObject **live_field = &ARENA_SLOT_AT(stack, api->live_at);
    PyObject *old_top = *top_field, *old_live = *live_field;
    *top_field = Py_NewRef(top);
    *live_field = Py_NewRef(live);
    Py_XDECREF(old_top);
    Py_XDECREF(old_live);
}

#endif /* ARENA_SLOT_API_H */
