/* __slots__ fields read and written at their offsets, shared by the C modules that keep
 * Python objects' fields (arena/memory/_host.c, arena/slots/_growth.c, arena/slots/_slot.c,
 * arena/planning/_region_hit.c): the base layer's,
 * so any layer's module may include it. Each module binds the offsets of its own
 * classes' fields; this header knows no class. */
#ifndef ARENA_BASE_FIELDS_H
#define ARENA_BASE_FIELDS_H

#include <Python.h>
#include <structmember.h>

/* A __slots__ field read and written at its offset, bound once from the class's member
 * descriptor: a descriptor and its PyMemberDef are two more cache lines per field, cold on
 * a fresh arena's first growth (issue 32 item 4). */
#define FIELD(object, offset) (*(PyObject **)((char *)(object) + (offset)))

/* The offset of a member descriptor's writable object slot: 0, or -1 with a TypeError. */
static inline int slot_offset(PyObject *descr, const char *owner, const char *name,
                              Py_ssize_t *offset) {
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s needs a slot named %s", owner, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s needs %s a writable object slot", owner, name);
        return -1;
    }
    *offset = member->offset;
    return 0;
}

/* The field's value (a new reference), or NULL with an AttributeError where it is unset,
 * as the descriptor raises. */
static inline PyObject *field_read(PyObject *obj, Py_ssize_t offset, const char *name) {
    PyObject *value = FIELD(obj, offset);
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%s' object has no attribute '%s'",
                     Py_TYPE(obj)->tp_name, name);
        return NULL;
    }
    return Py_NewRef(value);
}

/* The field set to value as the descriptor sets it (the old value released last). */
static inline void field_write(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    PyObject *old = FIELD(obj, offset);
    FIELD(obj, offset) = Py_NewRef(value);
    Py_XDECREF(old);
}

#endif /* ARENA_BASE_FIELDS_H */
