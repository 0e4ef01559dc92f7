"""The peak order is placed at every size, past the work budget too (issue 31).

Past the budget the planner used to place greedy by size alone; it now also places the
blocks in the peak order and keeps the better plan, whichever way placement finds the
co-live blocks. The budget is set to 0 here so that
small instances stand for the large ones, and the two orders are placed by a reference
best fit written independently of the planner.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from arena.planning import offsets, plan_offsets, search

Block = tuple[int, int, int]
ALIGN = 16


def _co_live(a: Block, b: Block) -> bool:
    return a[1] <= b[2] and b[1] <= a[2]


def _best_fit(blocks: Sequence[Block], key: Callable[[int], tuple[int, ...]]) -> int:
    """The total of placing ``blocks`` in ``sorted(key)`` order, each in the smallest hole
    (the lowest on ties) between the placed blocks live with it, else above them."""
    size = [-(-b[0] // ALIGN) * ALIGN for b in blocks]
    offsets_: dict[int, int] = {}
    for i in sorted(range(len(blocks)), key=key):
        below = sorted(
            (offsets_[j], offsets_[j] + size[j]) for j in offsets_ if _co_live(blocks[i], blocks[j])
        )
        top, best, hole = 0, -1, 0
        for off, end in below:
            if off - top >= size[i] and (best < 0 or off - top < hole):
                best, hole = top, off - top
            top = max(top, end)
        offsets_[i] = top if best < 0 else best
    return max((offsets_[i] + size[i] for i in offsets_), default=0)


def _orders(blocks: Sequence[Block]) -> tuple[int, int]:
    """Greedy by size's total and the peak order's, as docs/planning.md defines them."""
    size = [-(-b[0] // ALIGN) * ALIGN for b in blocks]
    steps = range(max(b[2] for b in blocks) + 1)
    live = [sum(s for s, b in zip(size, blocks, strict=True) if b[1] <= t <= b[2]) for t in steps]
    peak = [max(live[b[1] : b[2] + 1]) for b in blocks]
    by_size = _best_fit(blocks, lambda i: (-size[i], blocks[i][1], i))
    by_peak = _best_fit(blocks, lambda i: (-peak[i], -size[i], blocks[i][1], i))
    return by_size, by_peak


def _random_sets(seed: int, count: int) -> list[list[Block]]:
    """``count`` random sets of 3 to 12 blocks, small enough for the reference above."""
    rng = random.Random(seed)
    sets = []
    for _ in range(count):
        n = rng.randint(3, 12)
        sets.append(
            [
                (ALIGN * rng.randint(1, 40), f, f + rng.randint(0, 4))
                for f in (rng.randint(0, 8) for _ in range(n))
            ]
        )
    return sets


def test_past_the_budget_the_peak_order_is_placed_and_the_better_plan_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no budget left after greedy by size, the plan is the better of greedy by size
    and the peak order: never worse than greedy by size, and better where the peak order
    is (which happens on some of these sets)."""
    monkeypatch.setattr(offsets, "WORK_BUDGET", 0)
    better = 0
    for blocks in _random_sets(seed=31, count=300):
        by_size, by_peak = _orders(blocks)
        plan = plan_offsets(blocks, alignment=ALIGN)
        assert plan.total_bytes <= by_size
        if by_size == plan.lower_bound:
            assert (plan.total_bytes, plan.strategy) == (by_size, "size")
            continue
        assert plan.total_bytes == min(by_size, by_peak), blocks
        assert plan.strategy == ("peak" if by_peak < by_size else "size")
        assert plan.moves == 0  # no budget for the local search
        better += by_peak < by_size
    assert better >= 5, better


def _other_orders(blocks: Sequence[Block]) -> int:
    """The least total of the orders after the peak order: area, lifetime, first use."""
    size = [-(-b[0] // ALIGN) * ALIGN for b in blocks]
    first = [b[1] for b in blocks]
    length = [b[2] - b[1] + 1 for b in blocks]
    return min(
        _best_fit(blocks, lambda i: (-size[i] * length[i], -size[i], first[i], i)),
        _best_fit(blocks, lambda i: (-length[i], -size[i], first[i], i)),
        _best_fit(blocks, lambda i: (first[i], -size[i], i)),
    )


@pytest.mark.parametrize("path", ["graph", "scan"])
def test_a_time_limit_places_the_orders_the_budget_left_out(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the work budget greedy by size and the peak order are placed, on either
    placement path (issue 31: the peak order at every size); a time limit pays for the
    other orders: the plan is never worse than the one without a limit, at most the best
    of all five orders, and better than both placed without a limit on some of these
    sets."""
    monkeypatch.setattr(offsets, "WORK_BUDGET", 0)
    if path == "scan":
        monkeypatch.setattr(offsets, "SPARSE_PAIRS", 0)  # scan the placed blocks at any size
    # As for instances too large to search: the limit pays for placements only.
    monkeypatch.setattr(search, "MAX_SEARCH_BLOCKS", 0)
    better = 0
    for blocks in _random_sets(seed=27, count=200):
        by_size, by_peak = _orders(blocks)
        plain = plan_offsets(blocks, alignment=ALIGN)
        assert plain.total_bytes == min(by_size, by_peak), blocks
        limited = plan_offsets(blocks, alignment=ALIGN, time_limit=30)
        assert limited.total_bytes <= min(plain.total_bytes, _other_orders(blocks)), blocks
        better += limited.total_bytes < plain.total_bytes
    assert better >= 5, better
