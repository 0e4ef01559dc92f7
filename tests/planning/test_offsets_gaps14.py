"""Round 14h's mutation survivors of the planning group (docs/testing.md, "Round 14h")."""

from __future__ import annotations

import numpy as np
import pytest

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


class _Sizes(list[int]):
    """Two blocks' sizes that report ``count`` blocks: the placer's choice of placement
    reads the count alone, and 2**30 real blocks would take gigabytes."""

    def __init__(self, sizes: list[int], count: int) -> None:
        super().__init__(sizes)
        self.blocks = count

    def __len__(self) -> int:
        return self.blocks


def test_the_compiled_placement_is_used_below_two_to_the_thirty_blocks_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # offsets.py _Placer.__init__ #20 (`n < 3**30`): the compiled placement ranks the
    # uses in int32 (at most 2n distinct), so from 2**30 blocks on it must not be used;
    # the mutant used it up to 3**30. A stand-in for the extension, so that both paths
    # choose (the placer builds the compiled path's graph of the two real blocks).
    extension = object()
    monkeypatch.setattr(offsets, "compiled", extension)
    below = offsets._Placer(_Sizes([16, 16], 2**30 - 1), [0, 1], [0, 1], np.int64)
    assert below.compiled is extension
    at = offsets._Placer(_Sizes([16, 16], 2**30), [0, 1], [0, 1], np.int64)
    assert at.compiled is None
