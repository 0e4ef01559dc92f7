"""Round 14e (issue 26 item 12): tests that kill mutants the suite let through in
``arena/adapters/torch.py`` (poisoning a CUDA tensor, its branch of ``fill``, checked on a
host tensor that says it is on CUDA, so no GPU is needed) and ``arena/adapters/jax.py``
(the context a scratch callback's function is given)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import arena
from arena.base.poison import sentinel_byte


class _OnCuda:
    """A host tensor that says it is on CUDA: ``fill`` takes its GPU branch (a byte
    view's ``fill_``, on torch's current stream) over the host bytes."""

    is_cuda = True

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        self.dtype = tensor.dtype

    def view(self, *args: Any) -> Any:
        return self.tensor.view(*args)


@pytest.mark.parametrize("inference", [False, True], ids=["plain", "inference"])
def test_a_cuda_tensor_is_poisoned_through_a_byte_view_of_every_byte(inference: bool) -> None:
    torch = pytest.importorskip("torch")
    from arena.adapters.torch import ADAPTER

    adapter = ADAPTER.for_inference() if inference else ADAPTER
    assert adapter is not None
    floats = torch.zeros((3, 5), dtype=torch.float32)
    ints = torch.zeros((4,), dtype=torch.int16)
    adapter.fill([_OnCuda(floats), _OnCuda(ints)])
    for tensor in (floats, ints):
        raw = tensor.view(-1).view(torch.uint8)
        assert raw.numel() == tensor.numel() * tensor.element_size()
        assert raw.tolist() == [sentinel_byte(tensor.dtype)] * raw.numel()
    assert bool(torch.isnan(floats).all())


def test_a_scratch_callbacks_function_is_given_jaxs_execution_context() -> None:
    jax = pytest.importorskip("jax")
    pytest.importorskip("jax.experimental.buffer_callback")
    from jax.experimental.buffer_callback import ExecutionContext

    contexts: list[Any] = []

    def kernel(ctx: Any, out: Any, x: Any, *, scratch: Any) -> None:
        contexts.append(ctx)  # ctx.stream is XLA's stream on a GPU
        np.asarray(out)[...] = np.asarray(x) + 1

    with arena.Arena("cpu", framework="numpy") as ws:
        call = ws.jax.scratch_callback(
            kernel, jax.ShapeDtypeStruct((2,), "float32"), scratch=[((1,), "uint8")]
        )
        result = jax.jit(call)(jax.numpy.zeros(2, dtype="float32"))
    assert np.asarray(result).tolist() == [1.0, 1.0]
    (ctx,) = contexts
    assert isinstance(ctx, ExecutionContext)
