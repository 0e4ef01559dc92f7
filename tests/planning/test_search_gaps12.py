"""Round 12b (issue 26 item 12): tests that kill mutants the suite let through in
``arena/planning/search.py``'s Python search (the one in use without the ``_search``
extension, or with ``ARENA_PURE_PYTHON=1``; tested directly here, on both paths)."""

from __future__ import annotations

import random
import time

from arena.planning import search
from tests.tilings import tiling_by_area

#: Nodes the 40 tilings' 160 decisions below take with the section inference as written
#: (measured on 2026-12-03): pruning less, as a floor taken over all sections instead of
#: per section, takes more.
TILING_NODES = 1943


def _tilings() -> list[tuple[list[int], list[int], list[int]]]:
    """40 rectangles of 8 steps by 16 units cut into 8 to 14 blocks (sizes, firsts, lasts):
    a plan at LOAD, 16 units, exists by construction."""
    rng = random.Random(12)
    out = []
    for _ in range(40):
        blocks = tiling_by_area(rng, rng.randint(8, 14), 8, 16, 1)
        out.append(([b[0] for b in blocks], [b[1] for b in blocks], [b[2] for b in blocks]))
    return out


def _valid(size: list[int], first: list[int], last: list[int], off: list[int], cap: int) -> bool:
    n = len(size)
    for i in range(n):
        if off[i] < 0 or off[i] + size[i] > cap:
            return False
        for j in range(i):
            live = first[i] <= last[j] and first[j] <= last[i]
            apart = off[i] + size[i] <= off[j] or off[j] + size[j] <= off[i]
            if live and not apart:
                return False
    return True


def test_every_preorder_finds_the_plan_at_load_and_the_sections_prune_each_their_own() -> None:
    # The search is complete under each preorder: with no node limit a plan at LOAD is
    # found whatever the order (a candidate skipped at a node lost one tiling's plan).
    nodes = 0
    for size, first, last in _tilings():
        decider = search._PythonDecider(size, first, last)
        for which in range(len(search._HEURISTICS)):
            status, offsets, used = decider.decide(16, which, 10**9, time.perf_counter() + 600)
            assert status == search._FOUND, (size, first, last, which)
            assert _valid(size, first, last, offsets, 16)
            assert decider.decide(15, which, 10**9, time.perf_counter() + 600)[0] == search._NONE
            nodes += used
    assert nodes <= TILING_NODES


def test_the_floor_check_stays_exact_for_sizes_past_2_to_the_53_units() -> None:
    # Two blocks live together that fill the capacity exactly: the plan exists, whichever
    # goes first. Summed as floats (2**53 + 3 rounds to 2**53 + 4), the section check would
    # see 2**53 + 8 > 2**53 + 6 and refuse both orders.
    size, first, last = [3, 2**53 + 3], [0, 0], [0, 0]
    decider = search._PythonDecider(size, first, last)
    for which in range(len(search._HEURISTICS)):
        status, offsets, _ = decider.decide(2**53 + 6, which, 1000, time.perf_counter() + 600)
        assert status == search._FOUND and _valid(size, first, last, offsets, 2**53 + 6)


def test_a_seed_at_the_lower_bound_is_returned_as_optimal_and_not_timed_out() -> None:
    out = search.improve([2, 2], [0, 0], [0, 0], [0, 2], lower=4, time_limit=5)
    assert out == search.Outcome([0, 2], 4, True, False, 4, 0)
    assert out.limit_reached is False
