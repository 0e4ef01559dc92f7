"""Gaps a planted-bug review (plant33) found in the planner's search: each test fails on
one realistic slip in the code (named in its docstring) and passes on the real code."""

from __future__ import annotations

from arena.planning.search import _targets


def test_a_round_probes_the_bound_then_the_ladder_lowest_first() -> None:
    """A round probes the proven bound, then ``hi - 4**k`` from the lowest capacity up to
    ``hi - 1``: a plan found low skips the rest (slip: the ladder probed highest first, so
    a plan one unit below the best ends each round having improved by one unit)."""
    assert _targets(0, 100) == [0, 36, 84, 96, 99]
    assert _targets(95, 100) == [95, 96, 99]
    assert _targets(10, 12) == [10, 11]
    assert _targets(10, 11) == [10]  # nothing between the bound and the best plan
