"""A replayed step's and a repeated scope's NumPy views are what ``numpy.ndarray.view`` of the
remembered views makes, on the compiled hit (which builds them through NumPy's C-API) and on
the Python one: the same type, dtype object, shape, strides, address, flags and base, and the
views stay alive only as long as the caller holds them (issue 32, target 1)."""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.views import hit
from tests.refcounts import assert_counts_flat

#: Every flag NumPy reports.
FLAGS = ("C_CONTIGUOUS", "F_CONTIGUOUS", "OWNDATA", "WRITEABLE", "ALIGNED", "WRITEBACKIFCOPY")

#: Requests of several dtypes, dimension counts, and sizes of 1 (NumPy computes strides).
SPECS: list[tuple[Any, ...]] = [
    (((4, 16), "float32"),),
    (((3,), "int64"), ((2, 1, 5), "float16")),
    (((), "float64"),),
    (((1, 7), "bool"), ((6,), "complex64"), ((2, 3), "uint8")),
]


def _facts(view: Any) -> tuple[Any, ...]:
    return (
        type(view),
        view.dtype,
        view.shape,
        view.strides,
        view.__array_interface__["data"],
        tuple(view.flags[name] for name in FLAGS),
        id(view.base),
    )


def _reference(view: Any) -> tuple[Any, ...]:
    """The facts of ``numpy.ndarray.view`` of the view (the remembered view's fresh view
    has the same ones: same data, base collapsed to the owner)."""
    return _facts(np.ndarray.view(view))


def _requests(ws: Arena, kind: str) -> list[Any]:
    front = ws.front("numpy")
    out: list[Any] = []
    if kind == "step":
        with front.step("fresh") as st:
            for specs in SPECS:
                out += st.get_simultaneous(*specs)
    else:
        with front.scope() as s:
            for specs in SPECS:
                out += s.get_simultaneous(*specs)
    return out


def test_step_and_scope_hits_hand_out_what_ndarray_view_makes(hit_path: str) -> None:
    for kind in ("step", "scope"):
        with Arena("cpu", framework="numpy") as ws:
            for _ in range(3):  # record, plan, replay (and remember)
                _requests(ws, kind)
            ws.lock()
            first = [_facts(v) for v in _requests(ws, kind)]
            for _ in range(3):
                views = _requests(ws, kind)
                assert [_facts(v) for v in views] == first
                assert [_facts(v) for v in views] == [_reference(v) for v in views]
                for view in views:
                    assert view.dtype is np.ndarray.view(view).dtype  # the very dtype object
                    assert not view.flags.owndata  # a view; its base is checked above (facts)
                    assert view.flags.writeable
                    view[...] = 1  # writeable in fact
                assert len({id(v) for v in views}) == len(views)  # fresh objects


def test_step_and_scope_hit_views_die_with_the_caller_s_last_reference(hit_path: str) -> None:
    for kind in ("step", "scope"):
        with Arena("cpu", framework="numpy") as ws:
            for _ in range(3):
                _requests(ws, kind)
            ws.lock()
            gc.collect()
            gc.disable()
            try:
                views = _requests(ws, kind)
                dead = [weakref.ref(v) for v in views]
                counts = [sys.getrefcount(v) for v in views]
                assert counts == [3] * len(views)  # the list, the loop and getrefcount
                del views
                assert [ref() for ref in dead] == [None] * len(dead)
            finally:
                gc.enable()


def test_the_compiled_hits_keep_the_remembered_arrays_counts_flat() -> None:
    if hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            _requests(ws, "step")
            _requests(ws, "scope")
        ws.lock()
        with ws.front("numpy").step("fresh") as st:
            st.get_simultaneous(*SPECS[0])
            caches = st._caches
        remembered = [view for cache in caches for entry in cache.values() for view in entry.views]
        owner = remembered[0].base
        dtypes = [view.dtype for view in remembered]
        watched = [*remembered, owner, *dtypes]
        for kind in ("step", "scope"):
            _requests(ws, kind)

            def requests(kind: str = kind) -> None:
                for _ in range(2_000):
                    _requests(ws, kind)

            assert_counts_flat(watched, requests, kind)
