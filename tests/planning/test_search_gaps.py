"""Gaps a planted-bug review (plant33) found in the planner's search: each test fails on
one realistic slip in the code (named in its docstring) and passes on the real code."""

from __future__ import annotations

import sys

import pytest

from arena.planning import search
from arena.planning.search import _targets


def test_a_round_probes_the_bound_then_the_ladder_lowest_first() -> None:
    """A round probes the proven bound, then ``hi - 4**k`` from the lowest capacity up to
    ``hi - 1``: a plan found low skips the rest (slip: the ladder probed highest first, so
    a plan one unit below the best ends each round having improved by one unit)."""
    assert _targets(0, 100) == [0, 36, 84, 96, 99]
    assert _targets(95, 100) == [95, 96, 99]
    assert _targets(10, 12) == [10, 11]
    assert _targets(10, 11) == [10]  # nothing between the bound and the best plan


def test_the_compiled_sweep_keeps_the_refcounts_of_its_arguments_flat() -> None:
    """``sweep`` reads its sequences through ``PySequence_Fast`` (a list: the list itself,
    a new reference) and gives each back, the optional widths too (slip: the widths'
    reference never dropped, a list leaked per planned instance)."""
    if search.compiled is None:
        pytest.skip(f"the compiled search is not in use here: {search.WHY_PYTHON}")
    sweep = search.compiled.sweep
    sizes, starts, ends, widths = [1, 2, 3], [0, 1, 2], [2, 3, 4], [2, 2, 2]
    before = [sys.getrefcount(x) for x in (sizes, starts, ends, widths)]
    for _ in range(3):
        sweep(sizes, starts, ends, widths)
        sweep(sizes, starts, ends)
    with pytest.raises(ValueError):
        sweep(sizes, starts, ends, [1, 0, 1])  # the error path gives them back too
    assert [sys.getrefcount(x) for x in (sizes, starts, ends, widths)] == before
