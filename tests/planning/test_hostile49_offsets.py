"""plan_offsets names a block it cannot read, whatever the block is: a 0-d NumPy array or
torch tensor has ``__len__`` but no length, and ``len()`` of it raised the framework's own
TypeError ("len() of unsized object"), no ArenaError and no fix."""

from __future__ import annotations

import numpy as np
import pytest

from arena import SpecError, plan_offsets


def test_a_0d_array_block_is_named() -> None:
    with pytest.raises(SpecError, match=r"block 0: must be a \(nbytes, first, last\) tuple"):
        plan_offsets([np.array(5)])


def test_a_0d_torch_tensor_block_is_named() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(SpecError, match=r"block 1: must be a \(nbytes, first, last\) tuple"):
        plan_offsets([(16, 0, 1), torch.tensor(4)])
    with pytest.raises(SpecError, match=r"block 0: must be a \(nbytes, first, last\) tuple"):
        plan_offsets(torch.tensor([4]))  # iterates as 0-d tensors


def test_a_block_of_three_still_plans() -> None:
    plan = plan_offsets([np.array([16, 0, 1]), (32, 1, 2)])
    assert plan.offsets[0] != plan.offsets[1] or plan.sizes[0] == 0
