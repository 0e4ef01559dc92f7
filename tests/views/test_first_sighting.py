"""A never-seen structure's first request on a compiled NumPy front (issue 32 item 4).

Its views are built in C by the front's Planner (``Planner.views``), grown or presized,
and its structure is planned at the second sighting (``ViewBuilder.miss``). Differential:
``Planner.views`` against the structure's Python plan on random requests, and a stream of
requests on a front whose builder has the planner against the same front without it (a
first sighting then placed by ``compute_layout``, as on the pure-Python path): the same
views, bytes and figures. The pure-Python path has no Planner, so these tests run where
the extension is in use."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.base.layout import Layout
from arena.views import hit
from arena.views.builder import structure_of
from arena.views.plan import make_plan
from tests.refcounts import assert_counts_flat

pytestmark = pytest.mark.skipif(
    hit.compiled is None, reason="the compiled hit path is not in use here"
)

_DTYPES = [np.dtype(n) for n in ("float32", "int8", "float64", "int16", "uint8")] + [
    "float16",
    "bfloat16",
    "int64",
]


def _request(rng: random.Random) -> tuple[Any, ...]:
    specs = []
    # Mostly a few views; now and then more than the Planner keeps on its stack (64).
    many = rng.random() < 0.05
    dims = [1, 2, 3, 7] if many else [1, 2, 3, 7, 31, 65, 300]
    for _ in range(rng.randint(60, 300) if many else rng.randint(1, 5)):
        shape = tuple(rng.choice(dims) for _ in range(rng.randint(0, 4)))
        if rng.random() < 0.05:
            shape = (*shape, 0)  # a zero-size view: the Python path validates it
        specs.append((shape, rng.choice(_DTYPES)))
    return tuple(specs)


def _interface(view: np.ndarray) -> tuple[Any, ...]:
    return (
        view.__array_interface__["data"][0],
        view.shape,
        view.strides,
        view.dtype,
        view.flags.c_contiguous,
        view.flags.writeable,
        view.base is not None,
    )


@pytest.mark.parametrize("alignment", [16, 256, 4096])
def test_planner_views_are_the_plans_views(alignment: int) -> None:
    rng = random.Random(alignment)
    with Arena("cpu", framework="numpy", alignment=alignment) as ws:
        planner = ws.numpy._planner
        source = np.empty(1 << 20, np.uint8)
        for _ in range(600):
            specs = _request(rng)
            capacity = rng.choice([0, 1 << 10, 1 << 16, 1 << 20])
            plan = make_plan(structure_of(specs), ws.numpy._adapter, alignment)
            assert plan is not None
            python = plan.build(specs, capacity, (source,) * len(specs))
            made = planner.views(specs, source, capacity)
            if python is False:  # a zero-size view: the general path validates it
                assert made is None
            elif python.__class__ is Layout:  # more than the capacity
                assert made == python.total
            else:
                total, views = made
                assert total == python[0]
                assert [_interface(v) for v in views] == [_interface(v) for v in python[1]]
        assert planner.views([((1,), "int8")], source, 64) is None  # a list: Python's
        assert planner.views((((2,), "no_such_dtype"),), source, 64) is None


def _stream(ws: Arena, requests: list[tuple[Any, ...]]) -> list[Any]:
    """What each request handed out (bytes written and read back), and the figures."""
    out: list[Any] = []
    slot = ws._table.slots[0]
    for specs in requests:
        views = ws.get_simultaneous(*specs)
        start = slot.buffer.wrappers["numpy"].__array_interface__["data"][0]
        for i, view in enumerate(views):
            view[...] = i % 100 + 1
        out.append(
            [(v.__array_interface__["data"][0] - start, v.shape, v.strides, v.dtype) for v in views]
        )
        out.append([v.tobytes() for v in views])
        out.append((slot.calls, slot.high_water, slot.plain_high, slot.load))
    stats = ws.stats()
    # Not stats.cached_layouts: a grown first sighting the planner builds is remembered
    # from its second sighting (as a plan's first layout is), the general path's at once.
    out.append((stats.allocations, stats.frees, slot.calls, slot.high_water))
    out.append((slot.plain_high, slot.load, slot.buffer.capacity))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_a_front_with_the_planner_serves_what_one_without_it_serves(seed: int) -> None:
    rng = random.Random(seed)
    requests = [_request(rng) for _ in range(60)]
    requests += requests[::3]  # second sightings: planned and remembered
    requests += requests[::5]
    figures = []
    for use_planner in (True, False):
        with Arena("cpu", framework="numpy") as ws:
            if seed % 2:  # presized: every first sighting fits, and sets the figures
                ws.reserve_bytes(1 << 28)
            if not use_planner:
                ws.numpy._builder.planner = None
            else:
                assert ws.numpy._builder.planner is not None
            figures.append(_stream(ws, requests))
    assert figures[0] == figures[1]


def test_a_first_sighting_is_planned_at_the_second() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((4,), "float32"))
        builder = ws.numpy._builder
        plans = builder._plans
        first = (((1000, 17), "float16"), ((33,), "int32"))  # grows the slot
        ws.get_simultaneous(*first)
        structure = structure_of(first)
        assert structure not in plans
        cache = ws._table.slots[0].buffer.prepared.get("numpy", {})
        assert first not in cache  # handed out as built, as a plan's first layout is
        ws.get_simultaneous(*first)  # the second sighting: planned and remembered
        assert plans[structure] is not None
        assert first in ws._table.slots[0].buffer.prepared["numpy"]
        presized = (((3, 5), "float16"), ((7,), "uint8"))
        ws.get_simultaneous(*presized)  # fits: built by the planner
        assert structure_of(presized) not in plans
        ws.get_simultaneous(((2, 2), "float16"), ((9,), "uint8"))
        assert plans[structure_of(presized)] is not None


def test_planner_views_keep_reference_counts_flat() -> None:
    few = (((5, 7), np.dtype("float32")), ((3,), "int16"))
    with Arena("cpu", framework="numpy") as ws:
        planner = ws.numpy._planner
        source = np.empty(1 << 16, np.uint8)
        many = tuple(((3,), "int8") for _ in range(100))  # on the heap
        for specs, capacity in ((few, 1 << 12), (few, 64), (many, 1 << 16), (many, 64)):
            planner.views(specs, source, capacity)
            watched = (specs, specs[0], specs[0][0], specs[0][1], specs[1][1], source)

            def views(specs: Any = specs, capacity: int = capacity) -> None:
                for _ in range(100_000):
                    planner.views(specs, source, capacity)

            assert_counts_flat(watched, views)
