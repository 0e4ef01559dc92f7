"""Plant round 47 on Triton's allocator (:class:`arena.kernels.triton.TritonAllocator`):
a stream's block must hold ``size`` bytes at the first ``alignment``-aligned byte, and
the source only promises 256-aligned bases, so a block is asked for ``size`` plus
``alignment - 256`` bytes. A block sized for ``size`` alone could not serve an alignment
past the base's (a page, on the host): the allocator grew nothing (the block already held
``size``) and gave up with ``ArenaError`` ("the memory source returned a block
misaligned"), a bug of the arena's blamed on the source."""

from __future__ import annotations

import pytest

from arena import Arena


@pytest.mark.parametrize("alignment", [1 << 14, 1 << 20])
def test_an_alignment_past_the_block_base_s_is_served(alignment: int) -> None:
    pytest.importorskip("torch")
    with Arena("cpu", framework="torch") as ws:
        allocate = ws.triton_allocator()
        tensor = allocate(1000, alignment, None)
        assert tensor.data_ptr() % alignment == 0
        assert tensor.numel() == 1000
        again = allocate(1000, alignment, None)  # the same block serves it again
        assert again.data_ptr() == tensor.data_ptr()
