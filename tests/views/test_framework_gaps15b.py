"""Mutation round 15b (issue 26 item 12): ``arena/views/framework.py``'s survivors.

``FrameworkViews.typed`` takes the total alone of a request (an int) where the compiled
planner placed a first sighting larger than the buffer: after the growth the planner
builds the views, or, where it leaves the request to Python, the adapter builds them from
the request's layout. The builder hands it an int only from the compiled planner, so
mutmut's runs (the pure-Python path) never reach that branch, and the Python fallback is
reached from the arena only where the grown buffer is not one the planner builds over.
These tests call ``typed`` with an int as its contract allows. ``FrameworkViews.build``
keeps a plan's sources on the buffer: made once per buffer and structure.
"""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena
from arena.base.layout import compute_layout
from arena.views.builder import structure_of
from tests.conftest import need_compiled_hit

#: A request of two views (the second one placed at the alignment).
SPECS = (((4, 2), "float32"), ((3,), "int64"))
#: Not the default alignment (256), which ``compute_layout`` takes where it is given none.
ALIGNMENT = 1024


def _numpy_front(ws: Arena) -> tuple[Any, Any]:
    """The NumPy front's ``FrameworkViews`` and its slot's buffer (1 KiB or more)."""
    ws.reserve_bytes(1 << 10)
    ws.numpy.get_simultaneous(*SPECS)
    buffer = ws._table.slots[0].buffer
    assert buffer is not None and buffer.allocation is not None
    return ws.numpy._builder._views, buffer


def _check_views(views: list[Any], buffer: Any, alignment: int) -> None:
    """``views`` are SPECS' views over ``buffer`` at the request's layout."""
    layout = compute_layout(SPECS, alignment)
    assert [(v.shape, v.dtype.name) for v in views] == [((4, 2), "float32"), ((3,), "int64")]
    start = buffer.wrappers["numpy"].__array_interface__["data"][0]
    offsets = [v.__array_interface__["data"][0] - start for v in views]
    assert offsets == [view.offset for view in layout.views] == [0, alignment]


def test_the_total_alone_without_a_planner_is_built_from_the_requests_layout() -> None:
    # ``typed(buffer, total, specs)``: no planner, so the adapter builds the views from the
    # request's layout at the arena's alignment. Mutants killed: typed #5 and #7 (the
    # planner asked though it is None: AttributeError), #16 to #19 (no layout, or one
    # computed from None or without the request: TypeError), #20 (the layout at the
    # default alignment: the second view at byte 256).
    with Arena("cpu", framework="numpy", alignment=ALIGNMENT) as ws:
        views, buffer = _numpy_front(ws)
        total = compute_layout(SPECS, ws.alignment).total
        made = views.typed(buffer, total, SPECS)
        _check_views(made, buffer, ws.alignment)


class _Planner:
    """A stand-in for the compiled ``Planner``: records what ``views`` is given and
    answers ``answer`` (``(total, views)`` it built, or None: left to Python)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[Any, ...]] = []

    def views(self, specs: Any, source: Any, capacity: int) -> Any:
        self.calls.append((specs, source, capacity))
        return self.answer


def test_the_total_alone_is_built_by_the_planner_given_the_request_and_the_buffer() -> None:
    # The planner's views are handed out as they are, and it is asked with the request,
    # the buffer's import (the NumPy array over the whole buffer) and its capacity.
    # Mutants killed: typed #4, #6 (the planner not asked: its views not handed out), #8
    # to #13 (None or an argument left out), #14 (its views dropped for the layout's),
    # #15 (``made[2]``: IndexError).
    with Arena("cpu", framework="numpy") as ws:
        views, buffer = _numpy_front(ws)
        built = [object(), object()]
        planner = _Planner((64, built))
        made = views.typed(buffer, 64, SPECS, planner)
        assert made is built
        ((specs, source, capacity),) = planner.calls
        assert specs is SPECS
        assert source is buffer.wrappers["numpy"]
        assert capacity == buffer.capacity


def test_a_request_the_planner_leaves_to_python_is_built_from_its_layout() -> None:
    # The planner answers None (a request it leaves to Python): the adapter builds the
    # views from the request's layout. Mutants killed: typed #14 (``None[1]``), #16 to #20.
    with Arena("cpu", framework="numpy", alignment=ALIGNMENT) as ws:
        views, buffer = _numpy_front(ws)
        planner = _Planner(None)
        total = compute_layout(SPECS, ws.alignment).total
        made = views.typed(buffer, total, SPECS, planner)
        assert len(planner.calls) == 1
        _check_views(made, buffer, ws.alignment)


def test_the_compiled_planner_leaves_a_list_shape_to_the_layout() -> None:
    # The same with the front's own compiled planner, which leaves a list for a shape to
    # Python: its views still come from the request's layout.
    need_compiled_hit()
    with Arena("cpu", framework="numpy", alignment=ALIGNMENT) as ws:
        views, buffer = _numpy_front(ws)
        planner = ws.numpy._builder.planner
        assert planner is not None
        specs = (([4, 2], "float32"), ((3,), "int64"))
        assert planner.views(specs, buffer.wrappers["numpy"], buffer.capacity) is None
        total = compute_layout(specs, ws.alignment).total
        made = views.typed(buffer, total, specs, planner)
        _check_views(made, buffer, ws.alignment)


@pytest.fixture
def plan_sources(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The natives the torch adapter's ``plan_source`` is asked for, in order."""
    torch_adapter = pytest.importorskip("arena.adapters.torch")
    kind = type(torch_adapter.ADAPTER)
    made: list[Any] = []
    original = kind.plan_source

    def counting(self: Any, buffer: Any, native: Any) -> Any:
        made.append(native)
        return original(self, buffer, native)

    monkeypatch.setattr(kind, "plan_source", counting)
    return made


def test_a_plans_sources_are_made_once_per_buffer(plan_sources: list[Any]) -> None:
    # A torch front's plan builds its views from one alias of the buffer per dtype
    # (``plan_source``), kept on the buffer: five requests of one structure make them
    # once, and a build asked for again over the same buffer reuses them. Mutants
    # killed: build #18 (None kept: the aliases made again at each request), #1 and #2
    # (the kept sources never read: made again by the direct build).
    import torch

    specs = (((4, 2), "float32"), ((3,), "int64"))
    with Arena("cpu", framework="torch") as ws:
        ws.reserve_bytes(1 << 16)
        for _ in range(5):
            a, b = ws.get_simultaneous(*specs)
            assert a.shape == (4, 2) and b.shape == (3,)
        assert plan_sources == [torch.float32, torch.int64]
        builder = ws.torch._builder
        plan = builder._plans.get(structure_of(specs))
        assert plan is not None
        buffer = ws._table.slots[0].buffer
        kept = buffer.wrappers[plan.key]
        assert isinstance(kept, tuple) and len(kept) == 2
        built = builder._views.build(plan, buffer, specs)
        assert [tuple(v.shape) for v in built[1]] == [(4, 2), (3,)]
        assert plan_sources == [torch.float32, torch.int64]
        assert buffer.wrappers[plan.key] is kept
