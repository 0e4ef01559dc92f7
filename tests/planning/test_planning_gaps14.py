"""Round 14h's mutation survivors of the planning group (docs/testing.md, "Round 14h")."""

from __future__ import annotations

import numpy as np

from arena.planning import offsets


def test_the_local_search_tries_the_blocks_beside_the_top_highest_end_first() -> None:
    # offsets.py _Placer.candidates #17 (`near.sort(key=None)`): the blocks live beside
    # one that reaches the total came in block order, not highest end first, so the local
    # search moved the lowest of them first.
    size, first, last = [16, 32, 64], [0, 0, 0], [0, 0, 0]
    placer = offsets._Placer(size, first, last, np.int64)
    best = placer.place([0, 1, 2])
    assert best.offsets == [0, 16, 48]  # block 2 reaches the total, 112
    assert placer.candidates(best) == [2, 1, 0]  # then block 1 (ends at 48), block 0 (16)
