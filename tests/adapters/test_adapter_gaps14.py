"""Round 14e (issue 26 item 12): tests that kill mutants the suite let through in
``arena/adapters/torch.py``: poisoning a CUDA tensor (its branch of ``fill``), checked here
on a host tensor that says it is on CUDA, so no GPU is needed."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from arena.adapters.torch import ADAPTER  # noqa: E402

from arena.base.poison import sentinel_byte  # noqa: E402


class _OnCuda:
    """A host tensor that says it is on CUDA: ``fill`` takes its GPU branch (a byte
    view's ``fill_``, on torch's current stream) over the host bytes."""

    is_cuda = True

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        self.dtype = tensor.dtype

    def view(self, *args: Any) -> Any:
        return self.tensor.view(*args)


@pytest.mark.parametrize("adapter", [ADAPTER, ADAPTER.for_inference()], ids=["plain", "inference"])
def test_a_cuda_tensor_is_poisoned_through_a_byte_view_of_every_byte(adapter: Any) -> None:
    floats = torch.zeros((3, 5), dtype=torch.float32)
    ints = torch.zeros((4,), dtype=torch.int16)
    adapter.fill([_OnCuda(floats), _OnCuda(ints)])
    for tensor in (floats, ints):
        raw = tensor.view(-1).view(torch.uint8)
        assert raw.numel() == tensor.numel() * tensor.element_size()
        assert raw.tolist() == [sentinel_byte(tensor.dtype)] * raw.numel()
    assert bool(torch.isnan(floats).all())
