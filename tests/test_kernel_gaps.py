"""Gaps the mutation rerun of the kernels group found (issue 26, item 12): each test fails
on the mutants it names (applied by hand, seen to fail) and passes on the real code."""

from __future__ import annotations

import enum

import pytest

from arena import Arena, SpecError
from arena.base.layout import MAX_BYTES


class _Bytes(enum.IntEnum):
    NONE = 0
    SOME = 64


@pytest.mark.parametrize("alignment", [1, 2, 16])
def test_triton_sizes_of_an_int_subclass_pass_the_full_check(alignment: int) -> None:
    # triton.py _check_ints #12, #14, #15, #17, #19: a size that is no exact int (an
    # IntEnum member) takes the full check, which refused every alignment, alignment 1 or
    # 2, or every power of two.
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        for size in _Bytes:
            tensor = allocate(size, alignment, None)
            assert isinstance(tensor, torch.Tensor) and tensor.numel() == size
            assert tensor.data_ptr() % alignment == 0


@pytest.mark.parametrize("size", [0, MAX_BYTES])
def test_a_bad_triton_alignment_is_named_whatever_the_valid_size(size: int) -> None:
    # triton.py _check_ints #5, #6, #7: the size check's bounds 0 and MAX_BYTES moved in,
    # so a valid size of 0 or of the largest request was refused instead of the alignment.
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        with pytest.raises(SpecError, match="alignment must be") as info:
            allocate(size, 3, None)
        assert "size must be" not in str(info.value)
