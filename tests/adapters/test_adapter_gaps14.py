"""Round 14e (issue 26 item 12): tests that kill mutants the suite let through in
``arena/adapters/torch.py`` (poisoning a CUDA tensor, its branch of ``fill``, checked on a
host tensor that says it is on CUDA, so no GPU is needed), ``arena/adapters/jax.py`` (the
context a scratch callback's function is given, the refusal of complex32) and
``arena/adapters/numpy.py`` (the refusal of a type the installed ml_dtypes lacks)."""

from __future__ import annotations

import sys
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


def test_jax_refuses_complex32_naming_the_unsigned_type_of_its_width() -> None:
    pytest.importorskip("jax")
    with arena.Arena("cpu", framework="jax") as a, pytest.raises(arena.DTypeError) as refused:
        a.get_simultaneous(((4,), "complex32"))
    # complex32 is 4 bytes: its bytes are requested as uint32.
    assert "request the bytes as 'uint32' (or 'complex64'" in str(refused.value)


def test_an_ml_dtypes_without_the_type_is_named_with_the_unsigned_type_to_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import types

    from arena.adapters import numpy as numpy_adapter

    from arena.base.dtypes import resolve_dtype

    # ml_dtypes before 0.5 has no float8_e8m0fnu (a 1-byte type).
    old = types.ModuleType("ml_dtypes")
    old.__version__ = "0.4.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ml_dtypes", old)
    monkeypatch.delitem(numpy_adapter._NATIVE, "float8_e8m0fnu", raising=False)
    with pytest.raises(arena.DTypeError) as refused:
        numpy_adapter.ADAPTER.native_dtype(resolve_dtype("float8_e8m0fnu"))
    assert str(refused.value) == (
        "ml_dtypes 0.4.0 has no float8_e8m0fnu; upgrade ml_dtypes, request the bytes as "
        "'uint8', or use the torch front"
    )


def test_numpy_refuses_a_type_it_lacks_naming_the_unsigned_type_to_request() -> None:
    with arena.Arena("cpu", framework="numpy") as a, pytest.raises(arena.DTypeError) as refused:
        a.numpy.get_simultaneous(((4,), "float4_e2m1fn_x2"))
    assert str(refused.value) == (
        "NumPy has no float4_e2m1fn_x2 dtype; request the bytes as 'uint8' or use the torch front"
    )


def test_numpy_refuses_to_wrap_device_memory() -> None:
    from arena.adapters.numpy import ADAPTER

    from arena.memory.devices import Device
    from arena.memory.sources import Allocation

    cuda = Device("cuda", 0)
    block = Allocation(ptr=0x1000, nbytes=256, owner=np.zeros(256, np.uint8), device=cuda)
    with pytest.raises(arena.FrameworkUnavailableError, match="NumPy cannot view device memory"):
        ADAPTER.wrap(block)


def test_an_adapter_without_fresh_view_is_named_when_asked_for_fresh_views() -> None:
    from arena.adapters.numpy import NumpyAdapter

    class Bare(NumpyAdapter):
        fresh_view = None

    with pytest.raises(AssertionError, match=r"^Bare needs fresh_view or fresh_views$"):
        Bare().fresh_views([np.zeros(2)])
