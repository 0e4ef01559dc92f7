"""The ``"sides"`` order, placed only under a time limit (issue 31).

On idealloc's S_1 (28,526 blocks) every order of ``STRATEGIES`` ends above LOAD (greedy by
size 1.0158) and 10 s of local search reached 1.0078; 2,576 blocks are live at its
busiest step, 99.6% of the bytes there living over a thousand steps either side. Stacked
as the ``"sides"`` order stacks them (those that die sooner after the step than they were
born before it lowest, the earliest to die at the bottom; then the others, the latest to
start at the top), the bytes they leave free are runs the other blocks fit in: one
placement reaches LOAD. The instances here are built the same way: blocks live at one
step, stacked by that rule, and one-step blocks filling all but one unit of what they
leave free at every other step, so that a plan at LOAD exists and the order finds it.
The cap and the budget are set to 0 so that these small instances stand for large ones.
"""

from __future__ import annotations

import random

from arena.planning import STRATEGIES, offsets, plan_offsets
from tests.tilings import Block, check_plan

ALIGN = 16


def _stacked(rng: random.Random, count: int, steps: int) -> list[Block]:
    """``count`` blocks live at one step, stacked by the rule, and one-step blocks filling
    what they leave free at every other step (the lowest hole one unit short, so that the
    busiest step is the first where all of them are live)."""
    middle = steps // 2
    live = [
        (rng.randint(1, 8), rng.randint(0, middle), rng.randint(middle, steps - 1))
        for _ in range(count)
    ]
    busiest = max(first for _, first, _ in live)
    low = [b for b in live if b[2] - busiest < busiest - b[1]]
    high = [b for b in live if not b[2] - busiest < busiest - b[1]]
    low.sort(key=lambda b: (b[2], -b[0], b[1]))
    high.sort(key=lambda b: (b[1], -b[0], -b[2]))
    stack: list[tuple[int, int, int, int]] = []  # (bottom, top, first, last) in units
    height = 0
    for units, first, last in low + high:
        stack.append((height, height + units, first, last))
        height += units
    blocks = [(ALIGN * units, first, last) for units, first, last in live]
    for step in range(steps):
        taken = sorted((y0, y1) for y0, y1, first, last in stack if first <= step <= last)
        holes, y = [], 0
        for y0, y1 in [*taken, (height, height)]:
            if y0 > y:
                holes.append(y0 - y)
            y = max(y, y1)
        for k, units in enumerate(holes):
            if units - (k == 0):
                blocks.append((ALIGN * (units - (k == 0)), step, step))
    rng.shuffle(blocks)
    return blocks


def _instances() -> list[list[Block]]:
    rng = random.Random(31)
    return [_stacked(rng, rng.randint(5, 25), rng.randint(8, 30)) for _ in range(40)]


def test_the_sides_order_reaches_load_where_the_other_orders_do_not(
    past_the_cap: None,
) -> None:
    """Under a limit the sides order is placed first after greedy by size and the peak
    order, and reaches LOAD with no move of the local search; without a limit it is not
    placed, and the plan is above LOAD on most of these instances."""
    above = 0
    for blocks in _instances():
        plain = plan_offsets(blocks, alignment=ALIGN)
        limited = plan_offsets(blocks, alignment=ALIGN, time_limit=30)
        check_plan(blocks, plain)
        check_plan(blocks, limited)
        assert plain.strategy in STRATEGIES  # not placed without a limit
        assert limited.total_bytes == limited.lower_bound and limited.optimal, blocks
        if plain.total_bytes > plain.lower_bound:
            above += 1
            assert (limited.strategy, limited.moves) == ("sides", 0), blocks
    assert above >= 30, above


def test_the_sides_order_stacks_the_busiest_step_by_the_rule() -> None:
    """The blocks live at the busiest step come first: those that die sooner after it
    than they were born before it, by last use (then size descending, first use), then
    the others by first use (then size descending, last use descending); the rest
    follow in the peak order."""
    size = [5, 3, 3, 4, 2, 6, 1]
    first = [0, 1, 2, 2, 4, 5, 6]
    last = [5, 6, 9, 7, 8, 5, 6]
    busiest = 4  # every block but 5 and 6 is live there
    peak = [0, 0, 0, 0, 0, 10, 9]
    # Block 0: 1 step after, 4 before: low. 1: 2 after, 3 before: low. 2: 5, 2: high.
    # 3: 3 after, 2 before: high, and before 2 (the same first use, larger). 4: high.
    order = offsets._order("sides", size, first, last, peak, busiest=busiest)
    assert order == [0, 1, 3, 2, 4, 5, 6]
    # Ties: by size descending, then first use (low) or last use descending (high).
    size2 = [1, 2, 2, 2, 2]
    first2 = [0, 0, 1, 4, 4]
    last2 = [6, 6, 6, 8, 9]
    assert offsets._order("sides", size2, first2, last2, [0] * 5, busiest=4) == [1, 2, 0, 4, 3]
