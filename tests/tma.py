"""The Triton kernel the GPU tests of Triton's allocator run
(tests/kernels/test_kernel_workspaces.py, tests/kernels/test_triton_threads.py): a copy
through TMA descriptors made on the device, so the kernel asks the installed allocator for
global scratch."""

from __future__ import annotations

from typing import Any

import pytest


def tma_copy_kernel() -> Any:
    """The jitted copy kernel, or a skip (no Triton, a device before compute capability
    9.0) or a failure (a Triton without ``tl.make_tensor_descriptor``)."""
    copy = tma_copy_source()
    import torch

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("device-side tensor descriptors need compute capability 9.0 or later")
    return copy


def tma_copy_source() -> Any:
    """The jitted copy kernel, not yet compiled (no device needed), or a skip (no Triton)
    or a failure (a Triton without ``tl.make_tensor_descriptor``)."""
    triton = pytest.importorskip("triton")
    import triton.language as tl

    if not hasattr(tl, "make_tensor_descriptor"):
        pytest.fail(f"Triton {triton.__version__} has no tl.make_tensor_descriptor")

    # Triton reads the annotations: only the constexpr ones are given. The lists are
    # written inline: bound to names first (`block = [block_m, block_n]`), the block
    # shape reaches make_tensor_descriptor as a tuple of values, not of constexprs, and
    # Triton 3.6.0 fails to compile it ("Did you forget to add @triton.jit?": the first
    # GPU run; tests/kernels/test_tma_kernel.py compiles it without a device).
    @triton.jit  # type: ignore[misc]
    def copy(src, dst, m, n, block_m: tl.constexpr, block_n: tl.constexpr):  # noqa: PLR0917
        source = tl.make_tensor_descriptor(
            src, shape=[m, n], strides=[n, 1], block_shape=[block_m, block_n]
        )
        target = tl.make_tensor_descriptor(
            dst, shape=[m, n], strides=[n, 1], block_shape=[block_m, block_n]
        )
        row = tl.program_id(0) * block_m
        column = tl.program_id(1) * block_n
        target.store([row, column], source.load([row, column]))

    return copy
