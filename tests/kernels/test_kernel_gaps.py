"""Gaps the mutation rerun of the kernels group found (issue 26, item 12): each test fails
on the mutants it names (applied by hand, seen to fail) and passes on the real code."""

from __future__ import annotations

import enum

import pytest

from arena import Arena, ArenaAsleepError, ArenaLockedError, ConfigError, SpecError
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
    # triton.py _check_ints #5, #6, #7 and TritonAllocator.__call__ #22: the size check's
    # bounds 0 and MAX_BYTES moved in, or the full check given None for the alignment,
    # so a valid size of 0 or of the largest request was refused instead of the alignment
    # (or the alignment named as None).
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        with pytest.raises(SpecError, match=r"alignment must be .*got 3$") as info:
            allocate(size, 3, None)
        assert "size must be" not in str(info.value)


def test_a_bad_triton_request_names_what_is_wrong_with_its_own_value() -> None:
    # triton.py TritonAllocator.__call__ #7, #22, #27, #35: the full check given None for
    # the alignment (an int-subclass size refused, a bad size or a too large alignment
    # reported as the alignment None), and a bad stream's type named as NoneType.
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        assert allocate(_Bytes.SOME, 16, None).numel() == 64
        with pytest.raises(SpecError, match=r"size must be .*got -1$"):
            allocate(-1, 16, None)
        with pytest.raises(SpecError, match=r"alignment must be .*got 2147483648$"):
            allocate(64, 1 << 31, None)
        with pytest.raises(SpecError, match=r"got str '7'"):
            allocate(64, 16, "7")


def test_a_refused_library_workspace_call_names_the_workspace_and_the_argument() -> None:
    # library.py LibraryWorkspaces.get #3, #5, #6, #7 (check_key), #44, #46, #47, #48
    # (check_new_key), #23 (check_flag), #26 (check_awake): the name given to the check
    # dropped, changed or replaced by None, so the error named a persistent key, None or
    # nothing instead of the library workspace key, zero_init or the workspace.
    with Arena("cpu", framework="numpy", source="virtual", max_bytes=1 << 24) as ws:
        with pytest.raises(SpecError, match=r"^library workspace key \[1\] \(list\)"):
            ws.get_library_workspace([1], 64)
        with pytest.raises(SpecError, match=r"^library workspace key nan \(float\)"):
            ws.get_library_workspace(float("nan"), 64)
        with pytest.raises(ConfigError, match=r"^zero_init must be True or False"):
            ws.get_library_workspace("k", 64, zero_init="yes")  # type: ignore[arg-type]
        ws.sleep(level=1)
        with pytest.raises(ArenaAsleepError, match=r"^library workspace 'k' from '"):
            ws.get_library_workspace("k", 64)
        ws.wake()


def test_a_library_workspace_refused_while_locked_says_what_it_needs_and_holds() -> None:
    # workspaces.py WorkspaceStore.locked_error #4, #5, #18, #19, #23, #24, #28, #32, #33: the
    # bytes held read 0 or 1, the error's current and slot fields None or left out, or
    # "a new" / another word for a workspace that had to grow.
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        with ws.ubatch(1):
            ws.get_library_workspace("k", 4096)
        ws.lock()
        with ws.ubatch(1), pytest.raises(ArenaLockedError) as grow:
            ws.get_library_workspace("k", 8192)
        with ws.ubatch(1), pytest.raises(ArenaLockedError) as new:
            ws.get_library_workspace("n", 64)
    assert "needs a larger library workspace 'k' of " in str(grow.value)
    assert "(8192 bytes)" in str(grow.value)
    assert (grow.value.required, grow.value.current, grow.value.slot) == (8192, 4096, (1, 0))
    assert "needs a new library workspace 'n' of " in str(new.value)
    assert (new.value.required, new.value.current, new.value.slot) == (64, 0, (1, 0))
