/* arena.views._hit: the compiled hit path of arena's fronts (optional; CPython API only).
 *
 * A request an arena served before on the same slot buffer (a "hit") is one dictionary
 * lookup, a check that every dimension is a plain int, and one fresh view per tensor.
 * In pure Python that costs about a third more than the fresh views alone; here it costs
 * a few pointer reads. Everything that is not a plain hit (debug mode, a miss, a dimension
 * that is not an exact int, a capture probe that says "capturing", an unlocked arena
 * recording call sites) goes to the same Python methods the pure-Python path uses, so the
 * hit's guarantees are written once, in arena/views/front.py, and this file only skips
 * work on the one path where nothing can go wrong.
 *
 * HitBase is the base class of arena.views.front.Front when this module is in use. Its
 * fields are the front's hit settings, readable and writable from Python under the same
 * names the pure-Python base (arena.views.hit.PyHitBase) has as slots:
 *
 *   _select      callable -> the caller's slot (the general selection)
 *   _slots       tuple of slots, or None: selection the C way (see select_slot)
 *   _tls         the selector's thread-local micro-batch binding, or None
 *   _key         the front's key into Buffer.prepared
 *   _fresh_view  per-view callable that makes a fresh view (torch.Tensor.detach,
 *                numpy.ndarray.view); None: hand out the prepared view itself (cached
 *                fronts); False: this front takes the Python path for every request
 *   _debug       True: every request takes the Python path
 *   _probe       the capture probe or None
 *   _log         the request log or None
 *   _governor    the arena's governor (its `locked` flag)
 *   _builder     the front's ViewBuilder: its miss() and served()
 *
 * bind() tells the module where Slot, Buffer, Prepared and Governor keep the attributes
 * a hit reads (their __slots__ offsets), so it reads them without a name lookup. Objects
 * of any other type take the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

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
} HitBase;

/* Where the hit reads its Python objects' attributes (set by bind()). */
static PyTypeObject *slot_type, *buffer_type, *prepared_type, *governor_type;
static Py_ssize_t slot_buffer, slot_detour, slot_calls, buffer_prepared;
static Py_ssize_t prepared_views, prepared_used, prepared_required, governor_locked;
static PyObject *str_ubatch, *str_miss, *str_python_request, *str_served, *strict_name;
static PyObject *zero, *one;

#define FIELD(object, offset) (*(PyObject **)((char *)(object) + (offset)))

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

static PyObject *bind(PyObject *module, PyObject *args) {
    PyTypeObject *types[4];
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyType_Type, &types[0], &PyType_Type, &types[1],
                          &PyType_Type, &types[2], &PyType_Type, &types[3]))
        return NULL;
    if (member_offset(types[0], "buffer", &slot_buffer) < 0 ||
        member_offset(types[0], "detour", &slot_detour) < 0 ||
        member_offset(types[0], "calls", &slot_calls) < 0 ||
        member_offset(types[1], "prepared", &buffer_prepared) < 0 ||
        member_offset(types[2], "views", &prepared_views) < 0 ||
        member_offset(types[2], "used", &prepared_used) < 0 ||
        member_offset(types[2], "required", &prepared_required) < 0 ||
        member_offset(types[3], "locked", &governor_locked) < 0)
        return NULL;
    PyTypeObject **targets[4] = {&slot_type, &buffer_type, &prepared_type, &governor_type};
    for (int i = 0; i < 4; i++) {
        PyTypeObject *old = *targets[i];
        Py_INCREF(types[i]);
        *targets[i] = types[i];
        Py_XDECREF(old);
    }
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
        } else {
            /* One lane, no resolver: the thread's micro-batch indexes the slots. */
            PyObject *ubatch = PyObject_GetAttr(tls, str_ubatch);
            if (ubatch == NULL) return NULL;
            if (PyLong_CheckExact(ubatch)) {
                Py_ssize_t index = PyLong_AsSsize_t(ubatch);
                Py_DECREF(ubatch);
                if (index >= 0 && index < PyTuple_GET_SIZE(slots)) {
                    PyObject *slot = PyTuple_GET_ITEM(slots, index);
                    Py_INCREF(slot);
                    return slot;
                }
                PyErr_Clear();
            } else {
                Py_DECREF(ubatch);
            }
        }
    }
    return PyObject_CallNoArgs(self->select);
}

/* Fresh views of a prepared entry for `specs`, or NULL without an exception when the
 * request is not a plain hit (the Python path serves it); NULL with one on error. */
static PyObject *serve(HitBase *self, PyObject *slot, PyObject *specs, PyObject **entry_out) {
    if (!Py_IS_TYPE(slot, slot_type)) return NULL;
    PyObject *detour = FIELD(slot, slot_detour);
    PyObject *buffer = FIELD(slot, slot_buffer);
    /* A pending growth or open scopes and steps take the Python path (0 is a cached
     * object). */
    if (detour != zero || buffer == NULL || !Py_IS_TYPE(buffer, buffer_type)) return NULL;
    PyObject *prepared = FIELD(buffer, buffer_prepared);
    if (prepared == NULL || !PyDict_CheckExact(prepared)) return NULL;
    PyObject *cache = PyDict_GetItemWithError(prepared, self->key);
    if (cache == NULL || !PyDict_CheckExact(cache)) return NULL;
    PyObject *entry = PyDict_GetItemWithError(cache, specs);
    if (entry == NULL) {
        PyErr_Clear(); /* a miss, or an unhashable request: the Python path explains */
        return NULL;
    }
    if (!Py_IS_TYPE(entry, prepared_type)) return NULL;
    /* 2.0 and True hash and compare like 2 and 1: only exact ints are a hit. */
    Py_ssize_t count = PyTuple_GET_SIZE(specs);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *spec = PyTuple_GET_ITEM(specs, i);
        if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 2) return NULL;
        PyObject *shape = PyTuple_GET_ITEM(spec, 0);
        if (!PyTuple_CheckExact(shape)) return NULL;
        for (Py_ssize_t k = PyTuple_GET_SIZE(shape); k--;)
            if (!PyLong_CheckExact(PyTuple_GET_ITEM(shape, k))) return NULL;
    }
    PyObject *views = FIELD(entry, prepared_views);
    if (views == NULL || !PyList_CheckExact(views) || PyList_GET_SIZE(views) != count)
        return NULL;
    PyObject *out = PyList_New(count);
    if (out == NULL) return NULL;
    PyObject *fresh = self->fresh_view;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *view = PyList_GET_ITEM(views, i);
        if (fresh == Py_None) {
            Py_INCREF(view);
        } else {
            view = PyObject_Vectorcall(fresh, &view, 1, NULL);
            if (view == NULL) {
                Py_DECREF(out);
                return NULL;
            }
        }
        PyList_SET_ITEM(out, i, view);
    }
    *entry_out = entry;
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
    PyObject *entry = NULL;
    PyObject *views = serve(self, slot, specs, &entry);
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
    PyObject *used = FIELD(entry, prepared_used);
    Py_INCREF(Py_True);
    FIELD(entry, prepared_used) = Py_True;
    Py_XDECREF(used);
    PyObject *calls = FIELD(slot, slot_calls);
    if (calls != NULL) {
        PyObject *more = PyNumber_Add(calls, one);
        if (more == NULL) {
            Py_DECREF(views);
            Py_DECREF(slot);
            return NULL;
        }
        FIELD(slot, slot_calls) = more;
        Py_DECREF(calls);
    }
    int quiet = self->probe == Py_None;
    if (quiet && self->log != Py_None) {
        PyObject *governor = self->governor;
        quiet = Py_IS_TYPE(governor, governor_type) &&
                FIELD(governor, governor_locked) == Py_True;
    }
    if (quiet) {
        Py_DECREF(slot);
        return views;
    }
    /* A capture probe or an unlocked arena's request log: the Python bookkeeping. */
    PyObject *buffer = FIELD(slot, slot_buffer);
    PyObject *required = FIELD(entry, prepared_required);
    if (buffer == NULL || required == NULL) {
        Py_DECREF(views);
        Py_DECREF(slot);
        PyErr_SetString(PyExc_RuntimeError, "arena: a slot or entry lost its buffer");
        return NULL;
    }
    Py_INCREF(buffer);
    Py_INCREF(required);
    PyObject *call[7] = {self->builder, slot, buffer, specs, required, views, strict};
    result = PyObject_VectorcallMethod(str_served, call, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                       strict_name);
    Py_DECREF(buffer);
    Py_DECREF(required);
    Py_DECREF(views);
    Py_DECREF(slot);
    return result;
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
     "get_simultaneous(*specs): the compiled hit path of Front.get_simultaneous."},
    {"try_get_simultaneous", (PyCFunction)try_get_simultaneous, METH_VARARGS,
     "try_get_simultaneous(*specs): the compiled hit path of Front.try_get_simultaneous."},
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

static PyMethodDef module_methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(Slot, Buffer, Prepared, Governor): where a hit reads their attributes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "arena.views._hit",
    "The compiled hit path of arena's fronts (optional; see arena.views.hit).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__hit(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    str_ubatch = PyUnicode_InternFromString("ubatch");
    str_miss = PyUnicode_InternFromString("miss");
    str_python_request = PyUnicode_InternFromString("_python_request");
    str_served = PyUnicode_InternFromString("served");
    strict_name = Py_BuildValue("(s)", "strict");
    zero = PyLong_FromLong(0);
    one = PyLong_FromLong(1);
    PyObject *type = PyType_FromSpec(&hit_spec);
    if (str_ubatch == NULL || str_miss == NULL || str_python_request == NULL ||
        str_served == NULL || strict_name == NULL || zero == NULL || one == NULL || type == NULL ||
        PyModule_AddObject(module, "HitBase", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
