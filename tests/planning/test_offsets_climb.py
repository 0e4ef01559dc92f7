"""Past the search's size cap, a time limit pays for the local search (issue 31).

Instances past ``MAX_SEARCH_BLOCKS`` are not searched, and past the work budget the local
search made no move: a time limit went unspent there (idealloc's pangu_2.6B stayed at
1.0076 of LOAD, which two moves bring to LOAD). Now the limit runs the local search from
every order placed, in turn. The cap and the budget are set to 0 here so that small
instances stand for the large ones.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from arena.planning import offsets, plan_offsets
from tests.tilings import Block, Piece, blocks_of, check_plan, cut

ALIGN = 16


def _tiling(rng: random.Random, pieces: int, steps: int, height: int) -> list[Block]:
    """A ``steps`` x ``height`` rectangle cut into ``pieces`` blocks: LOAD is reachable."""
    rects: list[Piece] = [(0, steps, 0, height)]
    while len(rects) < pieces:
        k = rng.randrange(len(rects))
        t0, t1, y0, y1 = rects[k]
        if t1 - t0 < 2 and y1 - y0 < 2:
            continue
        rects += cut(rng, rects.pop(k))
    return blocks_of(rects, ALIGN)


def _instances() -> list[list[Block]]:
    rng = random.Random(31)
    return [_tiling(rng, rng.randint(30, 60), 12, 48) for _ in range(120)]


def test_a_limit_runs_the_local_search_past_the_cap(
    past_the_cap: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given time, the plan is valid, never worse than without a limit, and at most the
    plan of the local search run to its local optimum from the best order (what an
    unlimited work budget gives): the climb from that plan runs the same moves, and the
    climbs from the other orders can only add. It is better than both on some sets, and
    it ends at LOAD (``optimal``) or at local optima, not by the clock."""
    better_than_plain = better_than_budget = 0
    for blocks in _instances():
        plain = plan_offsets(blocks, alignment=ALIGN)
        if plain.optimal:
            continue
        limited = plan_offsets(blocks, alignment=ALIGN, time_limit=60)
        with monkeypatch.context() as m:
            m.setattr(offsets, "WORK_BUDGET", 10**12)
            unbudgeted = plan_offsets(blocks, alignment=ALIGN)
        check_plan(blocks, limited)
        assert limited.total_bytes <= min(plain.total_bytes, unbudgeted.total_bytes), blocks
        assert limited.lower_bound == plain.lower_bound
        assert not limited.limit_reached, blocks
        assert limited.optimal == (limited.total_bytes == limited.lower_bound)
        assert limited.moves > 0 or limited.total_bytes == unbudgeted.total_bytes
        better_than_plain += limited.total_bytes < plain.total_bytes
        better_than_budget += limited.total_bytes < unbudgeted.total_bytes
    assert better_than_plain >= 20, better_than_plain
    assert better_than_budget >= 3, better_than_budget


def test_a_limit_too_short_for_a_placement_keeps_the_plan_and_says_so(
    past_the_cap: None,
) -> None:
    """With no time for one more placement, the plan is the one without a limit, and
    ``limit_reached`` says the clock ended it."""
    seen = 0
    for blocks in _instances()[:60]:
        plain = plan_offsets(blocks, alignment=ALIGN)
        if plain.optimal:
            continue
        seen += 1
        limited = plan_offsets(blocks, alignment=ALIGN, time_limit=0)
        assert limited.offsets == plain.offsets
        assert limited.limit_reached and not limited.optimal
    assert seen >= 10, seen


def test_the_climb_is_the_same_whatever_the_order_of_equal_plans(past_the_cap: None) -> None:
    """Ended by local optima, not the clock, the climb depends only on the input."""
    for blocks in _instances()[:30]:
        first = plan_offsets(blocks, alignment=ALIGN, time_limit=60)
        again = plan_offsets(blocks, alignment=ALIGN, time_limit=60)
        assert (first.offsets, first.strategy, first.moves) == (
            again.offsets,
            again.strategy,
            again.moves,
        )


def test_the_climb_ends_at_the_best_local_optimum_of_the_orders_placed(
    past_the_cap: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ended by local optima, not the clock, the climb's plan is as good as the best of the
    climbs from each order placed, each run alone to its local optimum: the climbers take
    rounds, and one at its local optimum leaves the others climbing (Round 10 of the
    mutation tests: a climber found done ended the round, so the climbs after it in the
    order stopped once the best one was done)."""
    results: list[tuple[int, int]] = []
    climb = offsets._climb

    def also_alone(placer: Any, climbers: list[Any], **kwargs: Any) -> Any:
        alone = [
            climb(placer, [offsets._Climber(c.name, c.plan, c.moves, c.done)], **kwargs)
            for c in climbers
        ]
        found = climb(placer, climbers, **kwargs)
        assert not found[3] and not any(a[3] for a in alone)  # not ended by the clock
        results.append((found[0].score[0], min(a[0].score[0] for a in alone)))
        return found

    monkeypatch.setattr(offsets, "_climb", also_alone)
    rng = random.Random(5)  # 45 sets of 20 to 80 blocks; on the 43rd the climb from
    for _ in range(45):  # "area" ends below the others, after the best one is done
        pieces, steps, height = rng.randint(20, 80), rng.randint(6, 20), rng.randint(20, 64)
        plan_offsets(_tiling(rng, pieces, steps, height), alignment=ALIGN, time_limit=60)
    assert len(results) >= 5, len(results)
    assert all(together == alone for together, alone in results), results
