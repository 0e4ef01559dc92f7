"""Mutation round 14a (issue 26 item 12): the views layer's sampled survivors.

A NumPy front's compiled planner builds the first sighting of a structure in C, and
leaves some requests to Python (a list for a shape, a zero-size view, ...): for those the
miss path makes the structure's Python plan at once and builds the views with it
(``ViewBuilder.miss``). That branch runs only where the compiled planner is built and in
use, so mutmut's runs (the pure-Python path) never reach it.
"""

from __future__ import annotations

from arena import Arena
from arena.views.builder import structure_of
from tests.conftest import need_compiled_hit


def test_a_first_sighting_the_planner_leaves_to_python_is_built_by_its_plan_at_once() -> None:
    # A shape given as a list: the compiled planner leaves the request to Python, whose
    # plan serves lists; the structure's plan is made at this first sighting and builds
    # the views (one use counted, the front's last plan). Mutant killed: ViewBuilder.miss
    # #94 (``planned = None``: no plan made, the views built on the general path).
    need_compiled_hit()
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        builder = ws.numpy._builder
        assert builder.planner is not None
        specs = (([4, 2], "float32"),)
        (view,) = ws.get_simultaneous(*specs)
        assert view.shape == (4, 2)
        plan = builder._plans.get(structure_of(specs))
        assert plan is not None
        assert plan.uses == 1
        assert builder._last_plan is plan
