"""Planted bugs the suite let through in arena.kernels (branch plant36): each test names
the bug it kills, was seen to fail with that bug planted, and passes on the code."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena, SpecError


def test_an_on_grow_interrupted_by_keyboardinterrupt_is_told_again() -> None:
    # Plant K3: the library workspace owed its on_grow call only after an Exception; a
    # KeyboardInterrupt (or any BaseException from a signal handler) inside on_grow left
    # the library holding the old block, never told of the new one.
    with Arena("cpu", framework="numpy") as ws:
        told: list[Any] = []
        interrupt = [True]

        def on_grow(view: Any) -> None:
            if interrupt:
                interrupt.pop()
                raise KeyboardInterrupt
            told.append(view)

        ws.get_library_workspace("fi", 4096, on_grow=on_grow)
        with pytest.raises(KeyboardInterrupt):
            ws.get_library_workspace("fi", 8192)
        assert told == []
        again = ws.get_library_workspace("fi", 8192)
        assert len(told) == 1 and told[0] is again and again.nbytes == 8192


def test_a_triton_tensor_of_one_size_is_aligned_for_each_alignment_asked() -> None:
    # Plant K5: the Triton block's tensors were cached by size alone; a size asked first
    # at a small alignment was handed out again for a larger one, misaligned.
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as ws:
        allocate = ws.triton_allocator()
        big = allocate(1 << 21, 16, None)  # the block: large enough for any offset below
        base = big.data_ptr()
        alignment = next((1 << k for k in range(9, 21) if base % (1 << k)), 0)
        if not alignment:
            pytest.skip("the block happens to be aligned to 1 MiB")
        assert allocate(64, 16, None).data_ptr() == base
        tensor = allocate(64, alignment, None)
        assert tensor.data_ptr() % alignment == 0
        assert tensor.numel() == 64


def test_a_bool_stream_is_refused_by_the_triton_allocator() -> None:
    # Plant K7: the stream check took any int subclass: True was accepted as the handle
    # of stream 1 and shared its block (the exact-int rule, arena/base/layout.py, refuses
    # bools).
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as ws:
        allocate = ws.triton_allocator()
        with pytest.raises(SpecError, match="stream must be the stream's handle"):
            allocate(64, 16, True)
        assert ws.stats().slots[0].triton_blocks == 0


@pytest.mark.parametrize("stream", [-1, 1 << 63, 1 << 70])
def test_a_stream_outside_an_address_is_refused_by_the_triton_allocator(stream: int) -> None:
    # A negative or 2**63-and-up handle was accepted and failed only at the release of
    # its block, where CuPy wraps the stream (hostile48, the StreamHandle range).
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as ws:
        allocate = ws.triton_allocator()
        with pytest.raises(SpecError, match=r"int in \[0, 2\*\*63\)"):
            allocate(64, 16, stream)
        assert ws.stats().slots[0].triton_blocks == 0
        assert allocate(64, 16, (1 << 63) - 1).numel() == 64  # the largest handle is fine


def test_stream_0_the_legacy_default_stream_is_served_by_the_triton_allocator() -> None:
    # Round 18c (triton.py __call__ #36, #37: `1 <= stream`, `0 < stream`): the range check's
    # lower end is 0, the legacy default stream's handle (what Triton passes for
    # torch.cuda.current_stream() where no stream was set); a check refusing it refused
    # every kernel launched on the default stream. Its block is its own, not None's.
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as ws:
        allocate = ws.triton_allocator()
        tensor = allocate(64, 16, 0)
        assert tensor.numel() == 64 and ws.stats().slots[0].triton_blocks == 1
        allocate(64, 16, None)
        assert ws.stats().slots[0].triton_blocks == 2
