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


#: Instances of the same kind the heuristics leave above the optimum (found by this file's
#: generator's rules, 10 in 30,000 draws): the search itself must reach and prove it.
MISSED: list[tuple[list[Block], int]] = [
    (
        [(1067, 2, 4), (1392, 0, 1), (768, 0, 2), (0, 0, 2), (506, 2, 2), (0, 0, 0), (1280, 1, 2)],
        256,
    ),
    (
        [
            (1024, 2, 3),
            (1280, 1, 3),
            (0, 2, 3),
            (1280, 2, 2),
            (1536, 0, 1),
            (1496, 1, 2),
            (1006, 1, 3),
        ],
        256,
    ),
    (
        [(722, 1, 2), (823, 1, 2), (0, 2, 4), (1163, 0, 1), (768, 2, 4), (1024, 2, 3), (0, 0, 0)],
        256,
    ),
    ([(1387, 1, 3), (730, 2, 2), (0, 2, 4), (1521, 0, 1), (783, 2, 2), (768, 1, 2)], 256),
    ([(2, 1, 2), (48, 0, 2), (80, 2, 3), (69, 1, 2), (95, 1, 1), (32, 2, 4)], 16),
    ([(27, 0, 2), (32, 2, 3), (64, 0, 1), (61, 1, 2), (48, 1, 3), (48, 2, 3), (0, 0, 0)], 16),
    (
        [(471, 0, 2), (0, 1, 2), (1393, 0, 1), (768, 2, 2), (772, 1, 2), (927, 2, 3), (768, 1, 2)],
        256,
    ),
    ([(96, 0, 1), (48, 1, 3), (81, 1, 2), (72, 2, 4), (30, 2, 4)], 16),
    ([(0, 0, 2), (64, 2, 3), (88, 0, 1), (54, 1, 2), (45, 2, 4), (40, 0, 2)], 16),
    ([(58, 0, 1), (64, 0, 0), (38, 0, 2), (0, 2, 4), (48, 0, 0), (96, 1, 2)], 16),
]


@pytest.mark.parametrize("seed", range(4))
def test_both_searches_give_the_same_optimal_plan(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = search.compiled  # None (not built, ARENA_PURE_PYTHON): the Python one alone
    rng = random.Random(seed)
    instances = [_instance(rng) for _ in range(45)]
    for index, (blocks, alignment) in enumerate(instances + MISSED[seed::4]):
        if index >= len(instances):
            assert not plan_offsets(blocks, alignment=alignment).optimal  # still missed
        best = _optimum(blocks, alignment)
        unlimited = plan_offsets(blocks, alignment=alignment)
        plans = []
        for module in (compiled, None) if compiled is not None else (None,):
            monkeypatch.setattr(search, "compiled", module)
            plan = plan_offsets(blocks, alignment=alignment, time_limit=5)
            _check(blocks, plan, alignment)
            assert plan.total_bytes == best and plan.optimal, (blocks, alignment, plan)
            assert plan.proven_bound == best and not plan.limit_reached
            assert plan.total_bytes <= unlimited.total_bytes
            plans.append(plan)
        assert plans[0] == plans[-1], (blocks, alignment)
