/*
 * The C-API of arena.memory._host: what a higher layer's compiled code may ask of a host
 * ledger's compiled growth (HostBooks, arena/memory/_host.c) without knowing its fields.
 *
 * _host exports one `ArenaHostAPI` as the capsule "arena.memory._host._C_API" (as NumPy
 * exports its C-API as `_ARRAY_API`); a module that uses it imports it once, at its own
 * import, with PyCapsule_Import (arena/slots/_growth.c: a slot's compiled growth). The
 * memory layer knows nothing of the slots layer: it books blocks, the caller installs them.
 *
 * `books` below is a HostBooks, as `books_of` returned it. None of these functions runs
 * Python code but `replace`'s clock() and trace.append (a list's: C), so a caller that holds
 * a lock across them is not interrupted inside them.
 */
#ifndef ARENA_HOST_API_H
#define ARENA_HOST_API_H

#include <Python.h>

/* Raised where the layout of this struct changes: a module built against another refuses
 * to import (it then runs its pure-Python mirror). */
#define ARENA_HOST_API_VERSION 1
#define ARENA_HOST_API_CAPSULE "arena.memory._host._C_API"

typedef struct {
    int version; /* ARENA_HOST_API_VERSION */
    /* The HostBooks that `replace` is the bound HostBooks.replace of (borrowed), or NULL,
     * with no exception, where it is anything else. */
    PyObject *(*books_of)(PyObject *replace);
    /* Whether `books` does `ledger`'s replace (an exact Ledger of the books' class, with no
     * pending releases, alloc_context or observer, its source a HostSource itself): 1 yes,
     * 0 no, -1 with an exception set. */
    int (*takes)(PyObject *books, PyObject *ledger);
    /* Whether `block` is an Allocation of the books' allocator (its exact class). */
    int (*is_block)(PyObject *books, PyObject *block);
    /* ledger.allocations (a new reference), or NULL with an exception set: the mark that
     * Ledger.reclaim takes after a failed replace. */
    PyObject *(*allocations)(PyObject *books, PyObject *ledger);
    /* HostBooks.replace(ledger, held, nbytes, what) on a ledger `takes` said yes to, with
     * `held` a list of at most one `is_block` block and `nbytes` a positive exact int that
     * fits Py_ssize_t: the new Allocation; None where the allocator declined (the old block
     * released, `held` emptied: Ledger.replace goes on with the same `held`); NULL with an
     * exception set (NumPy's refusal as Ledger.replace raises it, or memory). */
    PyObject *(*replace)(PyObject *books, PyObject *ledger, PyObject *held, PyObject *nbytes,
                         PyObject *what);
} ArenaHostAPI;

#endif /* ARENA_HOST_API_H */
