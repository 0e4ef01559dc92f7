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
    triton = pytest.importorskip("triton")
    import torch
    import triton.language as tl

    if not hasattr(tl, "make_tensor_descriptor"):
        pytest.fail(f"Triton {triton.__version__} has no tl.make_tensor_descriptor")
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("device-side tensor descriptors need compute capability 9.0 or later")

    # Triton reads the annotations: only the constexpr ones are given.
    @triton.jit  # type: ignore[misc]
    def copy(src, dst, m, n, block_m: tl.constexpr, block_n: tl.constexpr):  # noqa: PLR0917
        shape, strides, block = [m, n], [n, 1], [block_m, block_n]
        source = tl.make_tensor_descriptor(src, shape=shape, strides=strides, block_shape=block)
        target = tl.make_tensor_descriptor(dst, shape=shape, strides=strides, block_shape=block)
        row = tl.program_id(0) * block_m
        column = tl.program_id(1) * block_n
        target.store([row, column], source.load([row, column]))

    return copy
