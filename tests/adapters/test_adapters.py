"""Adapters: identical public surface, zero-copy views, writes visible across frameworks."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import numpy as np
import pytest

from arena import Arena, DTypeError, SpecError

HOST_FRAMEWORKS = ["numpy", "torch", "jax"]


def _load(name: str) -> Any:
    module = {"numpy": "numpy", "torch": "torch", "cupy": "cupy", "jax": "jax"}[name]
    pytest.importorskip(module)
    try:
        return importlib.import_module(f"arena.adapters.{name}")
    except ImportError as exc:  # framework present but not usable here (e.g. CuPy w/o CUDA)
        pytest.skip(f"arena.adapters.{name} cannot load: {exc}")


def test_every_adapter_keeps_to_the_contract_of_the_base() -> None:
    """Each module exposes ADAPTER, an Adapter subclass instance named after the module,
    whose public names are the contract's (nothing added) with the base's signatures."""
    from arena.adapters import ADAPTER_NAMES
    from arena.adapters.base import Adapter

    contract = {name for name in dir(Adapter) if not name.startswith("_")}
    checked = 0
    for name in ADAPTER_NAMES:
        try:
            module = importlib.import_module(f"arena.adapters.{name}")
        except ImportError:
            continue  # framework not installed: its adapter is checked where it is
        adapter = module.ADAPTER
        assert isinstance(adapter, Adapter) and adapter.framework == name
        assert sorted(module.__all__) == sorted(["ADAPTER", type(adapter).__name__])
        assert {n for n in dir(adapter) if not n.startswith("_")} == contract, name
        for attr in contract:
            ours, base = getattr(type(adapter), attr), getattr(Adapter, attr)
            if inspect.isfunction(base) and inspect.isfunction(ours):
                assert inspect.signature(ours) == inspect.signature(base), f"{name}.{attr}"
        # The compiled hit path calls fresh_view per view: it must agree with fresh_views.
        if adapter.fresh_view is not None:
            assert type(adapter).fresh_views is Adapter.fresh_views, name
        checked += 1
    assert checked >= 1


def _ptr(front_name: str, a: Arena, view: Any) -> int:
    return a.front(front_name).data_ptr(view)


@pytest.mark.parametrize("framework", HOST_FRAMEWORKS)
def test_views_alias_the_slot_buffer_zero_copy(framework: str) -> None:
    _load(framework)
    with Arena("cpu", framework="numpy") as a:
        specs = (((4, 8), "float32"), ((16,), "int32"))
        base = a.numpy.get_simultaneous(*specs)
        other = a.front(framework).get_simultaneous(*specs)
        for n, o in zip(base, other, strict=True):
            assert _ptr("numpy", a, n) == _ptr(framework, a, o)
            assert tuple(o.shape) == n.shape


@pytest.mark.parametrize("writer", ["numpy", "torch"])
@pytest.mark.parametrize("reader", HOST_FRAMEWORKS)
def test_writes_through_one_framework_are_seen_by_another(writer: str, reader: str) -> None:
    _load(writer)
    _load(reader)
    with Arena("cpu", framework="numpy") as a:
        specs = (((3, 5), "float32"), ((7,), "int64" if reader != "jax" else "int32"))
        w = a.front(writer).get_simultaneous(*specs)
        payload = [np.arange(15, dtype=np.float32).reshape(3, 5), np.arange(7) * 11]
        payload[1] = payload[1].astype(specs[1][1])  # write_into never casts
        for view, value in zip(w, payload, strict=True):
            a.front(writer)._adapter.write_into(view, value)
        r = a.front(reader).get_simultaneous(*specs)
        for view, value in zip(r, payload, strict=True):
            assert np.array_equal(np.asarray(view), value)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float16"])
def test_low_precision_dtypes(framework: str, dtype: str) -> None:
    _load(framework)
    if framework == "numpy":
        pytest.importorskip("ml_dtypes")
    with Arena("cpu", framework="numpy") as a:
        (view,) = a.front(framework).get_simultaneous(((4, 4), dtype))
        assert str(view.dtype).endswith(dtype)
        ones = np.ones((4, 4), dtype=np.float32)
        if framework == "torch":
            import torch

            ones = torch.from_numpy(ones).to(view.dtype)
        else:
            ones = ones.astype(view.dtype)
        a.front(framework)._adapter.write_into(view, ones)
        (raw,) = a.numpy.get_simultaneous(
            (
                (4 * 4 * view.itemsize if framework == "numpy" else 16 * view.element_size(),),
                "uint8",
            )
        )
        assert raw.any()


def test_numpy_without_a_dtype_says_what_to_do() -> None:
    with Arena("cpu", framework="numpy") as a, pytest.raises(TypeError, match=r"uint8.*torch"):
        a.numpy.get_simultaneous(((4,), "float4_e2m1fn_x2"))


def test_torch_views_share_one_dlpack_import_per_growth() -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch") as a:
        x, y = a.get_simultaneous(((4,), torch.float32), ((4,), torch.int32))
        assert x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
        (z,) = a.get_simultaneous(((4,), torch.float32))
        assert z.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        assert a.torch.get_persistent("p", (2,), torch.float32).untyped_storage().data_ptr() != (
            x.untyped_storage().data_ptr()
        )


def test_torch_views_keep_memory_alive_after_close() -> None:
    torch = pytest.importorskip("torch")
    a = Arena("cpu", framework="torch")
    (x,) = a.get_simultaneous(((1024,), torch.float32))
    x.fill_(2.5)
    a.get_simultaneous(((1 << 18,), torch.float32))
    a.close()
    import gc

    gc.collect()
    assert float(x.sum()) == 2.5 * 1024


def test_torch_persistent_is_the_same_tensor() -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch") as a:
        p = a.get_persistent("acc", (8,), torch.float32, zero_init=True)
        p += 1
        assert a.get_persistent("acc", (8,), torch.float32) is p
        assert float(a.torch.get_persistent("acc", (8,), "float32").sum()) == 8.0


def _array(framework: str, values: Any, dtype: str) -> Any:
    """``values`` as an array of ``framework`` with ``dtype``."""
    array = np.asarray(values, dtype=dtype)
    if framework == "torch":
        import torch

        return torch.from_numpy(array)
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.asarray(array)
    return array


@pytest.mark.parametrize("framework", HOST_FRAMEWORKS)
@pytest.mark.parametrize("source", HOST_FRAMEWORKS)
def test_write_into_refuses_another_dtype_naming_both(framework: str, source: str) -> None:
    _load(framework)
    _load(source)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework)
        (view,) = front.get_simultaneous(((2, 3), "float32"))
        (raw,) = a.numpy.get_simultaneous(((2, 3), "float32"))
        raw[...] = -1.0
        with pytest.raises(DTypeError, match=r"int32.*float32.*never casts"):
            front.write_into(view, _array(source, np.arange(6).reshape(2, 3), "int32"))
        with pytest.raises(DTypeError, match=r"float16.*float32"):
            front._adapter.write_into(view, _array(source, np.ones((2, 3)), "float16"))
        assert (raw == -1.0).all()  # nothing was written
        seen = front.write_into(view, _array(source, np.arange(6).reshape(2, 3), "float32"))
        assert front.data_ptr(seen) == front.data_ptr(view)
        assert raw.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


@pytest.mark.parametrize("framework", HOST_FRAMEWORKS)
def test_write_into_refuses_another_shape_naming_both(framework: str) -> None:
    _load(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework)
        (view,) = front.get_simultaneous(((2, 3), "float32"))
        for wrong in [(3,), (1, 3), (3, 2), (), (2, 3, 1)]:
            value = _array(framework, np.zeros(wrong), "float32")
            with pytest.raises(SpecError, match=rf"shape {re.escape(str(wrong))}.*\(2, 3\)"):
                front.write_into(view, value)


@pytest.mark.parametrize("framework", HOST_FRAMEWORKS)
@pytest.mark.parametrize("value", [1.0, [[1.0, 2.0, 3.0]] * 2, None])
def test_write_into_refuses_what_has_no_dtype(framework: str, value: Any) -> None:
    _load(framework)
    with Arena("cpu", framework="numpy") as a:
        front = a.front(framework)
        (view,) = front.get_simultaneous(((2, 3), "float32"))
        with pytest.raises(DTypeError, match=r"no dtype.*float32.*\(2, 3\)"):
            front.write_into(view, value)
