"""``write_into`` a torch view from a value torch reads only through DLPack or the host
(a JAX array on a GPU): what is read is checked against the view, not only what the value
says of itself. A value whose ``__dlpack__`` (or ``__array__``) gives another shape or
dtype than its ``shape`` and ``dtype`` was broadcast or cast silently by ``copy_``: one
element written into all six, int32 values cast to float32."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arena import Arena, DTypeError, SpecError

torch = pytest.importorskip("torch")
pytest.importorskip("arena.adapters.torch")


class _ReadOnlyOnTheGpu:
    """Says float32 (2, 3); torch refuses its read-only CUDA array interface, as it does
    a JAX array's on a GPU; its DLPack gives ``self.given``."""

    dtype = np.dtype("float32")
    shape = (2, 3)

    def __init__(self, given: np.ndarray[Any, Any], dlpack: bool = True) -> None:
        self.given = given
        self.dlpack = dlpack

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": (2, 3), "typestr": "<f4", "data": (0, True), "version": 3}

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.dlpack:
            raise BufferError("read-only DLPack tensors are not supported")
        return self.given.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        return self.given


def _written(value: Any) -> list[list[float]]:
    with Arena("cpu", framework="torch") as ws:
        (view,) = ws.torch.get_simultaneous(((2, 3), torch.float32))
        view.fill_(-1.0)
        try:
            ws.torch.write_into(view, value)
        finally:
            seen: list[list[float]] = view.tolist()
    return seen


def test_torch_refuses_the_stand_in_as_it_refuses_a_gpu_jax_array() -> None:
    with pytest.raises(TypeError, match="read only"):
        torch.as_tensor(_ReadOnlyOnTheGpu(np.zeros((2, 3), np.float32)))


@pytest.mark.parametrize("dlpack", [True, False], ids=["dlpack", "host"])
def test_an_honest_value_is_written(dlpack: bool) -> None:
    value = _ReadOnlyOnTheGpu(np.arange(6, dtype=np.float32).reshape(2, 3), dlpack)
    assert _written(value) == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


@pytest.mark.parametrize("dlpack", [True, False], ids=["dlpack", "host"])
def test_bytes_of_another_shape_are_refused_not_broadcast(dlpack: bool) -> None:
    value = _ReadOnlyOnTheGpu(np.array([7.0], np.float32), dlpack)
    with pytest.raises(SpecError, match=r"shape \(1,\) but the view has shape \(2, 3\)"):
        _written(value)


@pytest.mark.parametrize("dlpack", [True, False], ids=["dlpack", "host"])
def test_bytes_of_another_dtype_are_refused_not_cast(dlpack: bool) -> None:
    value = _ReadOnlyOnTheGpu(np.arange(6, dtype=np.int32).reshape(2, 3), dlpack)
    with pytest.raises(DTypeError, match=r"int32 but the view is float32"):
        _written(value)


def test_a_refused_value_leaves_the_view_as_it_was() -> None:
    with Arena("cpu", framework="torch") as ws:
        (view,) = ws.torch.get_simultaneous(((2, 3), torch.float32))
        view.fill_(-1.0)
        with pytest.raises(SpecError):
            ws.torch.write_into(view, _ReadOnlyOnTheGpu(np.array([7.0], np.float32)))
        assert view.tolist() == [[-1.0] * 3] * 2


def test_a_strided_value_through_dlpack_is_written_element_by_element() -> None:
    strided = np.arange(12, dtype=np.float32).reshape(2, 6)[:, ::2]
    assert _written(_ReadOnlyOnTheGpu(strided)) == [[0.0, 2.0, 4.0], [6.0, 8.0, 10.0]]


class _DlpackOnly(_ReadOnlyOnTheGpu):
    """Its bytes are read through DLPack only: a host copy fails (a GPU array's would cost
    a round trip through the host)."""

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("read through the host although DLPack gave the bytes")


def test_a_value_dlpack_reads_is_not_copied_through_the_host() -> None:
    # Round 18c (torch.py _as_tensor #14, `from_dlpack(None)`: every such value went
    # through the host copy, which gave the same numbers on the CPU).
    value = _DlpackOnly(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert _written(value) == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
