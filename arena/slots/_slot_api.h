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
 * Every function but `bind` and the counts' `count_ahead` and `count_call` (which may
 * allocate an int) is plain stores: it runs no Python code, and the values it replaces are
 * ints and lists of regions held elsewhere too (by the new list, or by the caller: the
 * region that closes), whose release runs none either. So a
 * caller that installs a change in one step (every value made and every field it decided
 * on read again first) calls them among its own stores, and no other thread sees the
 * change half made. `slot` is always a Slot of the bound class, `stack` its RegionStack
 * (the caller checked their types, as the compiled hits check every object they read);
 * the objects passed are borrowed, and the functions take their own references.
 */
#ifndef ARENA_SLOT_API_H
#define ARENA_SLOT_API_H

#include <Python.h>

/* Raised where the layout of this struct changes: a module built against another refuses
 * to import (its pure-Python mirror then runs). */
#define ARENA_SLOT_API_VERSION 1
#define ARENA_SLOT_API_CAPSULE "arena.slots._slot._C_API"

/* A slot's next call count, made before a caller's stores (count_ahead) and installed
 * among them (count_install). `calls` is the caller's reference until then: it drops it
 * (Py_CLEAR) where it installs nothing. */
typedef struct {
    PyObject *calls; /* the count to install: the field's own int (in_place) or a new one */
    int in_place;    /* the field's int is counted up where it lies (see _slot.c) */
} ArenaSlotCount;

typedef struct {
    int version; /* ARENA_SLOT_API_VERSION */
    /* The classes whose fields the functions write: Slot, RegionStack and Governor (whose
     * `asleep` close_region reads). 0, or -1 with a TypeError where a field is not a
     * writable __slots__ member. */
    int (*bind)(PyTypeObject *slot, PyTypeObject *stack, PyTypeObject *governor);
    /* Slot.count_call(): slot.calls + 1, installed now. 0, or -1 with an exception set
     * (no memory for the new int: nothing changed). An unset field stays unset. */
    int (*count_call)(PyObject *slot);
    /* Slot.count_call() in two steps, for a caller that must make every value before it
     * stores anything: the next count into `*count` (0), or -1 with an exception set
     * (`count->calls` NULL). Where an unset field is found: -1 with an AttributeError. */
    int (*count_ahead)(PyObject *slot, ArenaSlotCount *count);
    /* ... and its store, with no Python code run since count_ahead (the int counted in
     * place must still be only the field's): consumes `count->calls` (set to NULL). */
    void (*count_install)(PyObject *slot, ArenaSlotCount *count);
    /* RegionStack.account(top, added): stack.top = top, stack.live = live, where `live`
     * (an exact int) is stack.live + added, made by the caller ahead (an int allocation). */
    void (*account)(PyObject *stack, PyObject *top, PyObject *live);
    /* Slot.note_load(live) (no reach): slot.load = max(slot.load, live), for an exact int
     * `live` and load (else nothing changes). */
    void (*note_load)(PyObject *slot, PyObject *live);
    /* Slot.open_region(region)'s stores (the caller checked the arena open and the mutex
     * free): slot.detour = 1, then slot.stack.regions = `regions`, the stack's list with the
     * region appended: a new list the caller made ahead (RegionStack.push makes it so). */
    void (*open_region)(PyObject *slot, PyObject *regions);
    /* Slot.close_region(region, top, live)'s stores: RegionStack.remove's (slot.stack's
     * regions = `kept`, the stack's list without the region, a new list the caller made
     * ahead; its top and live = `top` and `live`, or 0 and 0 where `kept` is empty), then
     * Slot.update_detour's (detour = 1 where slot.pending, `kept` or the governor's
     * `asleep` is nonzero, else 0; a value that is no exact int counts as nonzero). */
    void (*close_region)(PyObject *slot, PyObject *kept, PyObject *top, PyObject *live);
} ArenaSlotAPI;

#endif /* ARENA_SLOT_API_H */
