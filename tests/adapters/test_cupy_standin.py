"""The CuPy adapter's own rules, checked on the stand-in CuPy (``tests/fakecupy.py``) so
they run without a GPU: which dtypes CuPy cannot hold and what the error says, bfloat16
through ml_dtypes, a foreign owner wrapped without a copy (kept alive, on its device), and
``write_into`` taking a CUDA DLPack producer zero-copy and host data through a copy."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from arena import Allocation, Arena, DTypeError, resolve_dtype
from tests.fakecupy import ndarray as FakeArray
from tests.fakecupy import with_arrays
from tests.memory.test_cuda_fakes import CUDA0, HostMemoryAsCuda, _load_cupy_front, fake_cupy


def _adapter(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    cupy = with_arrays(fake_cupy())
    _load_cupy_front(monkeypatch, cupy)
    import arena.adapters.cupy as adapter

    return adapter, cupy


@pytest.mark.parametrize(
    "name", ["float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn_x2", "complex32"]
)
def test_dtypes_cupy_cannot_hold_are_refused_with_the_bytes_to_ask_for(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    adapter, _ = _adapter(monkeypatch)
    dtype = resolve_dtype(name)
    with pytest.raises(DTypeError) as info:
        adapter.ADAPTER.native_dtype(dtype)
    assert str(info.value) == (
        f"CuPy has no {name} dtype; request the bytes as 'uint{8 * dtype.itemsize}' or use "
        "the torch front"
    )


@pytest.mark.parametrize("name", ["float32", "int8", "bool", "complex64", "uint16", "float16"])
def test_other_dtypes_are_numpys_and_remembered(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    adapter, _ = _adapter(monkeypatch)
    native = adapter.ADAPTER.native_dtype(resolve_dtype(name))
    assert native == np.dtype(name)
    assert adapter._NATIVE[name] is native
    assert adapter.ADAPTER.native_dtype(resolve_dtype(name)) is native


def test_bfloat16_is_ml_dtypes_when_cupy_can_make_the_arrays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    adapter, cupy = _adapter(monkeypatch)
    made: list[Any] = []
    original = cupy.ndarray

    class Recording(original):  # type: ignore[misc, valid-type]
        def __init__(self, shape: Any, dtype: Any = float, *args: Any, **kwargs: Any) -> None:
            made.append((shape, np.dtype(dtype)))
            super().__init__(shape, dtype, *args, **kwargs)

    monkeypatch.setattr(cupy, "ndarray", Recording)
    native = adapter.ADAPTER.native_dtype(resolve_dtype("bfloat16"))
    assert native == np.dtype(ml_dtypes.bfloat16)
    assert made == [((0,), np.dtype(ml_dtypes.bfloat16))]  # one empty trial array


def test_bfloat16_is_refused_by_name_where_cupy_cannot_make_the_arrays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("ml_dtypes")
    adapter, cupy = _adapter(monkeypatch)

    def refuse(shape: Any, dtype: Any = float, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("dtype not supported")

    monkeypatch.setattr(cupy, "ndarray", refuse)
    with pytest.raises(DTypeError) as info:
        adapter.ADAPTER.native_dtype(resolve_dtype("bfloat16"))
    assert str(info.value) == (
        "CuPy 0.0-standin cannot make bfloat16 arrays (dtype not supported); request the "
        "bytes as 'uint16' or use the torch front"
    )
    assert "bfloat16" not in adapter._NATIVE


def test_bfloat16_without_ml_dtypes_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    adapter, _ = _adapter(monkeypatch)
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(DTypeError) as info:
        adapter.ADAPTER.native_dtype(resolve_dtype("bfloat16"))
    assert str(info.value) == (
        "CuPy's bfloat16 support needs ml_dtypes (pip install ml_dtypes); or request the "
        "bytes as 'uint16' or use the torch front"
    )


def test_a_foreign_owner_is_wrapped_without_a_copy_kept_alive_on_its_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adapter, cupy = _adapter(monkeypatch)
    owner = np.zeros(512, np.uint8)
    device = type(CUDA0)("cuda", 3)
    wrapped = adapter.ADAPTER.wrap(Allocation(owner.ctypes.data, 512, owner, device))
    assert isinstance(wrapped, cupy.ndarray) and wrapped.shape == (512,)
    assert wrapped.dtype == np.uint8
    assert wrapped.data.ptr == owner.ctypes.data
    assert wrapped.data.mem.owner is owner and wrapped.data.mem.size == 512
    assert wrapped.data.device_id == 3
    mine = FakeArray((64,), np.uint8)
    assert adapter.ADAPTER.wrap(Allocation(mine.data.ptr, 64, mine, CUDA0)) is mine  # used as it is


def test_typed_views_have_explicit_strides_and_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    from arena import compute_layout

    adapter, _ = _adapter(monkeypatch)
    base = FakeArray((4096,), np.uint8)
    layout = compute_layout((((3, 4), "float32"), ((2, 0, 5), "int16")))
    first, second = adapter.ADAPTER.typed_views(base, layout)
    assert first.data.ptr == base.data.ptr and first.strides == (16, 4)
    assert second.data.ptr == base.data.ptr + 256 and second.strides == (10, 10, 2)
    assert adapter.ADAPTER.views_can_be_kept() is True


class DLPackProducer:
    """A value that exports DLPack from a device of the given type."""

    def __init__(self, host: np.ndarray, device_type: int) -> None:
        self.host = host
        self.dtype = host.dtype
        self.shape = host.shape
        self.device_type = device_type

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device_type, 0)


@pytest.mark.parametrize(("device_type", "zero_copy"), [(2, True), (13, True), (1, False)])
def test_write_into_takes_cuda_dlpack_producers_zero_copy_and_host_data_by_copy(
    monkeypatch: pytest.MonkeyPatch, device_type: int, zero_copy: bool
) -> None:
    _, cupy = _adapter(monkeypatch)
    imported: list[Any] = []

    def from_dlpack(value: Any) -> Any:
        imported.append(value)
        return cupy.asarray(value.host)

    monkeypatch.setattr(cupy, "from_dlpack", from_dlpack, raising=False)
    monkeypatch.setattr(cupy, "asarray", _copy)
    source = HostMemoryAsCuda(cupy, cupy_owner=True)
    with Arena(source=source, framework="cupy", capture_probe=lambda: False) as a:
        (view,) = a.cupy.get_simultaneous(((3,), "int32"))
        value = DLPackProducer(np.array([4, 5, 6], np.int32), device_type)
        if not zero_copy:  # a host producer goes through np.asarray, then a copy
            value = np.array([4, 5, 6], np.int32)  # type: ignore[assignment]
        assert a.cupy.write_into(view, value) is view
        assert view.get().tolist() == [4, 5, 6]
        assert imported == ([value] if zero_copy else [])


def _copy(value: Any) -> Any:
    host = np.ascontiguousarray(getattr(value, "host", value))
    array = FakeArray(host.shape, host.dtype)
    array[...] = host
    return array


def test_cupy_is_available_when_it_can_be_found(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    adapter, _ = _adapter(monkeypatch)
    assert adapter.ADAPTER.is_available() is True  # the stand-in has a module spec
    asked: list[str] = []

    def find_spec(name: str, *args: Any) -> Any:
        asked.append(name)
        return None

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert adapter.ADAPTER.is_available() is False
    assert asked == ["cupy"]
