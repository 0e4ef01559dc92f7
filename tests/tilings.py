"""Instances for the planner's tests and the check every plan must pass.

A tiling is one full rectangle of time steps by height units cut into pieces, each piece
a block: a plan at LOAD exists by construction, as MiniMalloc's benchmarks are made. The
tests choose which piece to cut next (their instances differ by that); the cut itself,
the blocks it gives and the check are here, once.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

from arena.planning import OffsetPlan

__all__ = ["Block", "Piece", "blocks_of", "check_plan", "cut", "tiling_by_area"]

#: ``(nbytes, first, last)``, as ``plan_offsets`` takes a block.
Block = tuple[int, int, int]
#: ``(t0, t1, y0, y1)``: time steps ``t0`` to ``t1 - 1``, height units ``y0`` to ``y1``.
Piece = tuple[int, int, int, int]


def cut(rng: random.Random, piece: Piece) -> list[Piece]:
    """``piece`` cut in two, across time or across height (height where one step wide,
    time where one unit high); the caller makes sure one of the two is possible."""
    t0, t1, y0, y1 = piece
    if (rng.random() < 0.5 and t1 - t0 > 1) or y1 - y0 < 2:
        at = rng.randint(t0 + 1, t1 - 1)
        return [(t0, at, y0, y1), (at, t1, y0, y1)]
    at = rng.randint(y0 + 1, y1 - 1)
    return [(t0, t1, y0, at), (t0, t1, at, y1)]


def blocks_of(pieces: Sequence[Piece], alignment: int) -> list[Block]:
    """The blocks of ``pieces``, a height unit being ``alignment`` bytes."""
    return [(alignment * (y1 - y0), t0, t1 - 1) for t0, t1, y0, y1 in pieces]


def tiling_by_area(
    rng: random.Random, pieces: int, steps: int, height: int, alignment: int
) -> list[Block]:
    """Blocks cut from one full rectangle of ``steps`` indices by ``height`` units into
    ``pieces`` pieces, the next piece to cut drawn with odds growing with its area: a
    plan at LOAD (``height`` units) exists by construction."""
    cuts = [(0, steps, 0, height)]
    while len(cuts) < pieces:
        k = max(
            range(len(cuts)),
            key=lambda i: rng.random() * (cuts[i][1] - cuts[i][0]) * (cuts[i][3] - cuts[i][2]),
        )
        cuts += cut(rng, cuts.pop(k))
    return blocks_of(cuts, alignment)


def check_plan(blocks: Sequence[Block], plan: OffsetPlan) -> None:
    """Every plan: aligned offsets, co-live blocks never overlap, the total is the highest
    end, the bounds are ordered, and an optimal plan is proven and not cut short."""
    ends = [o + s for o, s in zip(plan.offsets, plan.sizes, strict=True)]
    assert plan.total_bytes == max(ends, default=0)
    assert all(o % plan.alignment == 0 for o in plan.offsets)
    for i, j in itertools.combinations(range(len(blocks)), 2):
        a, b = blocks[i], blocks[j]
        if plan.sizes[i] and plan.sizes[j] and a[1] <= b[2] and b[1] <= a[2]:
            assert ends[i] <= plan.offsets[j] or ends[j] <= plan.offsets[i], (i, j)
    assert plan.lower_bound <= plan.proven_bound <= plan.total_bytes
    if plan.optimal:
        assert plan.proven_bound == plan.total_bytes
        assert not plan.limit_reached
