"""The compiled path's Planner (arena/views/_hit.c): NumPy requests the hit's cache misses,
laid out in C from the request itself once a front remembers PLANNER_HOT requests.

Differential: the C offsets against :func:`arena.base.layout.compute_layout` on random
spec streams (odd dimensions, every dtype, every alignment, bad input), and the views a
hot front serves against the ``numpy.ndarray(shape, dtype, buffer, offset, strides)`` the
Python path builds. The pure-Python path has no Planner: there the same requests take
the Python plan path, so these tests run where the extension is in use."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaError
from arena.base.dtypes import KNOWN_DTYPES
from arena.base.layout import MAX_BYTES, compute_layout
from arena.front import PLANNER_HOT
from arena.views import hit
from tests.refcounts import assert_counts_flat

pytestmark = pytest.mark.skipif(
    hit.compiled is None, reason="the compiled hit path is not in use here"
)

_NAMES = sorted(KNOWN_DTYPES)
ALIGNMENTS = [16, 32, 256, 4096, 1 << 20, 1 << 30]


def _dtype(rng: random.Random) -> Any:
    """A dtype name or a NumPy dtype object (ml_dtypes for the names NumPy lacks)."""
    name = rng.choice(_NAMES)
    if rng.random() < 0.5:
        return name
    try:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name, name))
    except TypeError:
        return name


def _dim(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.7:
        return rng.choice([0, 1, 2, 3, 5, 7, 13, 255, 257, 1023, 4097])
    if roll < 0.85:
        return rng.randrange(1, 1 << rng.choice([8, 20, 31, 40]))
    return rng.choice(  # what layout.py refuses, or must check
        [-1, True, 2.0, MAX_BYTES, MAX_BYTES + 1, 1 << 62, 1 << 70, np.int64(3), None]
    )


def _spec(rng: random.Random) -> Any:
    shape = tuple(_dim(rng) for _ in range(rng.choice([0, 1, 1, 2, 3, 4, 9])))
    roll = rng.random()
    if roll < 0.03:
        return (list(shape), _dtype(rng))
    if roll < 0.06:
        return (shape,)
    if roll < 0.08:
        return (shape, "no_such_dtype")
    if roll < 0.1:
        return (shape, type("Name", (str,), {})("float32"))
    return (shape, _dtype(rng))


def _python(specs: Any, alignment: int) -> Any:
    try:
        layout = compute_layout(specs, alignment)
    except (ArenaError, TypeError, ValueError) as exc:
        return exc
    return (
        layout.total,
        tuple(v.offset for v in layout.views),
        tuple(v.nbytes for v in layout.views),
    )


@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_c_offsets_equal_the_python_layout_and_bad_input_goes_to_python(alignment: int) -> None:
    with Arena("cpu", framework="numpy", alignment=alignment) as ws:
        planner = ws.front("numpy")._planner
        assert planner is not None
        rng = random.Random(alignment)
        computed = 0
        for _ in range(3000):
            specs = tuple(_spec(rng) for _ in range(rng.choice([0, 1, 2, 3, 5, 17])))
            expected = _python(specs, alignment)
            found = planner.layout(specs)
            if isinstance(expected, Exception):
                # Never served in C: the Python path raises the error, message and all.
                assert found is None, (specs, expected)
            elif found is not None:
                assert found == expected, specs
                computed += 1
        assert computed > 500  # the C arithmetic ran, on most valid streams


def _hot(ws: Arena, capacity: int) -> Any:
    """A locked NumPy front whose cache holds PLANNER_HOT requests (the Planner serves
    what it misses from now on)."""
    ws.reserve_bytes(capacity)
    front = ws.front("numpy")
    # The slot's high-water mark and plain high at its capacity: what they do not cover
    # yet is the Python path's to note.
    front.get_simultaneous(((capacity,), "uint8"))
    for n in range(1, PLANNER_HOT + 1):
        for _ in range(2):  # remembered from the second sighting
            front.get_simultaneous(((n, 3), "float32"))
    ws.lock()
    assert len(ws._table.slots[0].buffer.prepared["numpy"]) >= PLANNER_HOT
    return front


def _interface(view: np.ndarray) -> tuple[Any, ...]:
    flags = view.flags
    return (
        view.__array_interface__["data"][0],
        view.shape,
        view.strides,
        view.dtype,
        flags.c_contiguous,
        flags.f_contiguous,
        flags.writeable,
        flags.aligned,
        flags.owndata,
        view.base is not None,
    )


def test_a_hot_front_serves_the_views_numpy_ndarray_builds() -> None:
    rng = random.Random(7)
    with Arena("cpu", framework="numpy", alignment=64) as ws:
        front = _hot(ws, 1 << 24)
        slot = ws._table.slots[0]
        source = slot.buffer.wrappers["numpy"]
        start = source.__array_interface__["data"][0]
        cache = slot.buffer.prepared["numpy"]
        remembered = len(cache)
        served = 0
        for _ in range(400):
            specs = tuple(
                (tuple(rng.choice([1, 2, 3, 7, 31, 65]) for _ in range(rng.randint(0, 3))), d)
                for d in rng.sample(
                    [np.dtype("float32"), np.dtype("int8"), np.dtype("float64"), "int16"],
                    rng.randint(1, 4),
                )
            )
            calls = slot.calls
            views = front.get_simultaneous(*specs)
            layout = compute_layout(specs, 64)
            for view, v in zip(views, layout.views, strict=True):
                native = np.dtype(v.dtype.name)
                python = np.ndarray(v.shape, native, source, v.offset, v.byte_strides)
                assert _interface(view) == _interface(python)
                assert view.__array_interface__["data"][0] - start == v.offset
                view[...] = 1  # writes land in the arena's buffer
            assert slot.calls == calls + 1
            served += len(cache) == remembered
        assert served == 400 and len(cache) == remembered  # nothing new remembered


def test_bad_requests_raise_what_the_python_path_raises() -> None:
    with Arena("cpu", framework="numpy") as ws:
        front = _hot(ws, 1 << 20)
        bad = [
            (((2, -1), "float32"),),
            (((2, True), "float32"),),
            (((2.0,), "float32"),),
            (((2,), "no_such_dtype"),),
            (((MAX_BYTES,), "float32"),),
            (((1 << 40,), "float32"),),  # locked: larger than the slot
            (((3,),),),
        ]
        for specs in bad:
            with pytest.raises(Exception) as raised:
                front.get_simultaneous(*specs)
            try:
                compute_layout(specs)
            except Exception as exc:
                assert type(raised.value) is type(exc) and str(raised.value) == str(exc)
            else:
                assert "locked" in str(raised.value)
        assert front.try_get_simultaneous(((1 << 40,), "float32")) is None


def test_a_remembered_request_the_planner_leaves_is_still_a_hit() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 20)
        front = ws.front("numpy")
        empty = (((0, 5), "float32"), ((3,), "int8"))  # a zero-size view: not the Planner's
        front.get_simultaneous(*empty)  # the general path remembers it at once
        front = _hot(ws, 1 << 20)
        entry = ws._table.slots[0].buffer.prepared["numpy"][empty]
        entry.used = False
        views = front.get_simultaneous(*empty)
        assert entry.used  # served by the hit, not built again
        assert [v.shape for v in views] == [(0, 5), (3,)]


def test_the_planner_keeps_reference_counts_flat() -> None:
    specs = (((5, 7), np.dtype("float32")), ((3,), np.dtype("int16")))
    with Arena("cpu", framework="numpy") as ws:
        front = _hot(ws, 1 << 20)
        get = front.get_simultaneous
        get(*specs)
        slot = ws._table.slots[0]
        source = slot.buffer.wrappers["numpy"]
        watched = (specs, specs[0], specs[0][0], specs[0][1], specs[1][1], source, slot.buffer)

        def gets() -> None:
            for _ in range(1_000_000):
                get(*specs)

        assert_counts_flat(watched, gets)
