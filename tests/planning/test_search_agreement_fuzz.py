"""Random small instances under a time limit (odd sizes at three alignments, zero-byte
blocks, blocks sharing a lifetime, one block): both searches give the very same valid plan,
the brute-force optimum, claim ``optimal`` only there, and are never worse than the plan
without a limit."""

from __future__ import annotations

import random

import pytest

from arena.planning import plan_offsets, search
from tests.planning.test_planning_offsets import _check, _optimum

Block = tuple[int, int, int]


def _instance(rng: random.Random) -> tuple[list[Block], int]:
    alignment = rng.choice([16, 256, 4096])
    blocks: list[Block] = []
    for _ in range(rng.randint(1, 6)):
        size = rng.choice([0, 1, alignment - 1, alignment, alignment + 1, 3 * alignment])
        if blocks and rng.random() < 0.3:  # the lifetime of one before it
            _, first, last = rng.choice(blocks)
        else:
            first = rng.randint(0, 3)
            last = first + rng.randint(0, 2)
        blocks.append((size, first, last))
    return blocks, alignment


@pytest.mark.parametrize("seed", range(3))
def test_both_searches_give_the_same_optimal_plan(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = search.compiled
    if compiled is None:
        pytest.skip(f"the compiled search is not in use here: {search.WHY_PYTHON}")
    rng = random.Random(seed)
    for _ in range(60):
        blocks, alignment = _instance(rng)
        best = _optimum(blocks, alignment)
        unlimited = plan_offsets(blocks, alignment=alignment)
        plans = []
        for module in (compiled, None):
            monkeypatch.setattr(search, "compiled", module)
            plan = plan_offsets(blocks, alignment=alignment, time_limit=5)
            _check(blocks, plan, alignment)
            assert plan.total_bytes == best and plan.optimal, (blocks, alignment, plan)
            assert plan.proven_bound == best and not plan.limit_reached
            assert plan.total_bytes <= unlimited.total_bytes
            plans.append(plan)
        assert plans[0] == plans[1], (blocks, alignment)
