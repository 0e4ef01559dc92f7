"""A repeated scope request's views, noted on the compiled scope hit's memo
(``ScopeMemo`` in ``arena/planning/_region_hit.c``): the entry's views list, its one
view and, for an exact ``numpy.ndarray``, NumPy's copy of it. The hit reads them instead
of the list and the view while the front's scope cache stays in the state in which the
entry was noted, and reads the list and the view again once it changes.

A remembered view changed in place is what shows which was read: nothing in arena does
it (a Prepared entry's views are built whole and never written; see ``_step_rows.h``).
"""

from __future__ import annotations

import gc
from typing import Any

from arena import Arena
from arena.views import hit
from tests.extensions import need_scope_memo
from tests.inplace import set_shape

F32 = "float32"
SPEC = ((4, 16), F32)


def _request(ws: Arena, *specs: Any) -> list[Any]:
    with ws.numpy.scope() as s:
        return s.get_simultaneous(*specs)


def _cache(ws: Arena) -> dict[Any, Any]:
    """The NumPy front's scope cache of the one slot's buffer."""
    with ws.numpy.scope() as s:
        slot = s.slot
        assert slot is not None
        buffer = slot.buffer
    assert buffer is not None
    (cache,) = [c for k, c in buffer.prepared.items() if isinstance(k, str) and "/scope" in k]
    return cache  # type: ignore[no-any-return]


def _warm(ws: Arena) -> None:
    """Remember SPEC at the slot's bottom, lock, and hit it until the memo notes its views."""
    ws.reserve_bytes(1 << 16)
    for _ in range(3):
        _request(ws, SPEC)
    ws.lock()
    for _ in range(6):  # the first after lock() may change the cache; then noted
        _request(ws, SPEC)


def test_the_hit_reads_the_noted_copy_not_the_view() -> None:
    need_scope_memo()
    with Arena("cpu", framework="numpy") as ws:
        _warm(ws)
        (entry,) = [e for k, e in _cache(ws).items() if k[1] == (SPEC,)]
        set_shape(entry.views[0], (16, 4))  # in place: the dict, entry and list unchanged
        for _ in range(2):
            (view,) = _request(ws, SPEC)
            assert view.shape == (4, 16)
        hit.HIT_PATH = "python"
        try:
            (view,) = _request(ws, SPEC)
        finally:
            hit.HIT_PATH = "compiled"
        assert view.shape == (16, 4)


def test_a_change_of_the_scope_cache_drops_the_noted_views() -> None:
    """A new entry in the front's scope cache (another request remembered) changes its
    state: the next hit reads the list and the view (the change in place shows), and the
    one after notes them again."""
    need_scope_memo()
    with Arena("cpu", framework="numpy") as ws:
        _warm(ws)
        cache = _cache(ws)
        (entry,) = [e for k, e in cache.items() if k[1] == (SPEC,)]
        set_shape(entry.views[0], (16, 4))
        (view,) = _request(ws, SPEC)
        assert view.shape == (4, 16)
        size = len(cache)
        _request(ws, ((3, 5), "int32"))  # remembered at the bottom beside SPEC
        assert len(cache) == size + 1
        shapes = [_request(ws, SPEC)[0].shape for _ in range(3)]
        assert shapes == [(16, 4)] * 3
        set_shape(entry.views[0], (4, 16))
        assert [_request(ws, SPEC)[0].shape for _ in range(2)] == [(4, 16)] * 2


def test_served_alike_with_and_without_a_copy() -> None:
    """Requests with a copy (one view of up to four dimensions) and without one (two views,
    five dimensions, no dimensions), repeated: the views the Python path makes."""
    need_scope_memo()
    requests: list[tuple[Any, ...]] = [
        (SPEC,),
        (((2, 3, 4, 5), "int8"),),
        (((), "float64"),),
        (((2, 2, 2, 2, 2), F32),),
        (((3,), F32), ((5,), "int32")),
    ]

    def run(ws: Arena) -> list[list[tuple[Any, ...]]]:
        out = []
        with ws.numpy.scope() as s:
            for request in requests:
                made = s.get_simultaneous(*request)
                out.append([(v.shape, v.strides, v.dtype, v.base is not None) for v in made])
        return out

    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        first = run(ws)
        ws.lock()
        for _ in range(4):
            assert run(ws) == first


def _span(ws: Arena) -> range:
    """The addresses of the one slot's buffer."""
    with ws.numpy.scope() as s:
        assert s.slot is not None
        buffer = s.slot.buffer
    assert buffer is not None and buffer.allocation is not None
    return range(buffer.allocation.ptr, buffer.allocation.ptr + buffer.capacity)


def test_a_collection_at_the_hit_lets_no_other_arena_s_view_in() -> None:
    """The memo is the process's, one line for every arena's scopes at a top with a
    request's signature. A hit from the noted copy allocates its list first, and a
    collection there runs finalizers, which may run another thread's scope hits (the GIL
    handed over) or another arena's: here a collection's callback runs three hits of
    another arena with the same request, which note that arena's view on the line. The
    first arena's view is still made from its own remembered view. (The hit took the
    other arena's copy: a view of its buffer, once per parity of the collection.)"""
    with Arena("cpu", framework="numpy") as ws, Arena("cpu", framework="numpy") as other:
        _warm(ws)
        _warm(other)
        mine = _span(ws)
        armed = [False]

        def other_hits(phase: str, info: dict[str, int]) -> None:
            if phase == "start" and armed[0]:
                armed[0] = False
                for _ in range(3):
                    _request(other, SPEC)

        threshold = gc.get_threshold()
        gc.callbacks.append(other_hits)
        got = []
        try:
            # A collection at every second allocation: each parity once, the list's
            # allocation the first or the second after the hit's call begins.
            for parity in range(2):
                for _ in range(4):  # the line notes this arena's view again
                    _request(ws, SPEC)
                with ws.numpy.scope() as s:
                    held: list[Any] = []
                    gc.set_threshold(1)
                    gc.collect()
                    for _ in range(parity):
                        held.append([])
                    armed[0] = True
                    (view,) = s.get_simultaneous(SPEC)
                    armed[0] = False
                    gc.set_threshold(*threshold)
                got.append(view.ctypes.data in mine)
        finally:
            gc.set_threshold(*threshold)
            gc.callbacks.remove(other_hits)
        assert got == [True, True]
