"""Round 14d (issue 26 item 12): tests that kill mutants the suite let through in
``arena/planning/search.py``: :func:`~arena.planning.search.improve` on an instance past
``MAX_SEARCH_BLOCKS``, which it returns unsearched (the same answer on both paths: no
decider runs)."""

from __future__ import annotations

import pytest

from arena.planning import search


def test_an_instance_past_the_block_limit_is_returned_unsearched_and_not_timed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search, "MAX_SEARCH_BLOCKS", 1)
    # Two blocks live together, placed one above a gap: top 6, LOAD 4.
    out = search.improve([2, 2], [0, 0], [0, 0], [0, 4], lower=4, time_limit=5)
    assert out == search.Outcome([0, 4], 6, False, False, 4, 0)
    assert out.optimal is False and out.limit_reached is False


def test_a_seed_at_the_lower_bound_is_optimal_even_past_the_block_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The bound proves the seed optimal before the block count is looked at: nothing is
    # left to search, however many blocks there are.
    monkeypatch.setattr(search, "MAX_SEARCH_BLOCKS", 1)
    out = search.improve([2, 2], [0, 0], [0, 0], [0, 2], lower=4, time_limit=5)
    assert out == search.Outcome([0, 2], 4, True, False, 4, 0)
