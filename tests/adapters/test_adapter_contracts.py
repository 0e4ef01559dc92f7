"""What every adapter promises beyond its views' bytes: it says whether its framework is
installed, it serves zero-byte views of a slot that holds no memory, torch views are never
inference tensors whatever mode the request ran in, and refusals name both sides."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

from arena import Arena, DTypeError, resolve_dtype

F32 = "float32"


@pytest.mark.parametrize("name", ["numpy", "torch", "jax"])
def test_an_installed_framework_is_available(name: str) -> None:
    pytest.importorskip(name)
    adapter = importlib.import_module(f"arena.adapters.{name}").ADAPTER
    assert adapter.is_available() is True
    assert name == adapter.framework


def test_a_framework_that_is_not_installed_is_not_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    from arena.adapters.numpy import ADAPTER as adapter

    asked: list[str] = []

    def find_spec(name: str, *args: Any) -> Any:
        asked.append(name)
        return None

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert adapter.is_available() is False
    assert asked == ["numpy"]


@pytest.mark.parametrize("name", ["numpy", "torch", "jax"])
def test_a_slot_that_holds_no_memory_serves_zero_byte_views(name: str) -> None:
    framework = pytest.importorskip(name)
    dtype: Any = F32 if name != "torch" else framework.float32
    with Arena("cpu", framework="numpy") as a:
        front = a.front(name)
        for shape in [(0,), (0, 3), (5, 0)]:
            (view,) = front.get_simultaneous((shape, dtype))
            assert tuple(view.shape) == shape
        assert a.stats().allocations == 0


@pytest.mark.parametrize("cached", [False, True], ids=["fresh", "cached"])
def test_torch_views_are_never_inference_tensors_whatever_the_mode_of_the_request(
    cached: bool,
) -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch") as ws:
        a = ws.front("torch", cached=cached)
        seen = []
        with torch.inference_mode():
            a.get_simultaneous(((3, 4), torch.float32))  # the import and the first alias
            for _ in range(2):  # a plan's view, seen twice: remembered
                (planned,) = a.get_simultaneous(((5, 4), torch.float32))
                seen.append(planned)
            a.get_simultaneous(((5,), torch.float16))  # a new dtype's alias, made by a plan
        (again,) = a.get_simultaneous(((5, 4), torch.float32))  # the remembered one
        (new,) = a.get_simultaneous(((6, 4), torch.float32))  # a plan, outside the mode
        (half,) = a.get_simultaneous(((6,), torch.float16))  # over the alias the plan made
        for view in (again, new, half):
            assert not view.is_inference()
            view.add_(1)  # in place, outside the mode: refused for a view made inside it
        for view in (again, new, half.float()):
            weight = torch.ones(view.shape[-1], requires_grad=True)
            (view * weight).sum().backward()  # usable under autograd
        assert all(isinstance(v, torch.Tensor) for v in seen)


def test_torch_refuses_a_dtype_it_lacks_naming_the_bytes_to_ask_for() -> None:
    torch = pytest.importorskip("torch")
    from arena.adapters.torch import ADAPTER as adapter

    lacking = [name for name in ("float8_e4m3b11fnuz",) if not hasattr(torch, name)]
    if not lacking:
        pytest.skip("this torch has every dtype arena knows")
    (name,) = lacking
    with pytest.raises(DTypeError) as info:
        adapter.native_dtype(resolve_dtype(name))
    assert str(info.value) == (
        f"torch {torch.__version__} has no {name} dtype; request the bytes as 'uint8' or "
        "upgrade torch"
    )


class ShapeWithoutDtype:
    shape = (3,)


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_write_into_names_what_the_value_lacks_or_has(name: str) -> None:
    framework = pytest.importorskip(name)
    dtype: Any = F32 if name == "numpy" else framework.float32
    with Arena("cpu", framework="numpy") as a:
        front = a.front(name)
        (view,) = front.get_simultaneous(((3,), dtype))
        with pytest.raises(DTypeError) as no_dtype:
            front.write_into(view, ShapeWithoutDtype())
        assert str(no_dtype.value) == (
            "write_into: the value (ShapeWithoutDtype) has no dtype; pass an array of the "
            "view's dtype float32 and shape (3,), e.g. np.asarray(value, dtype='float32')"
        )
        torch = pytest.importorskip("torch")
        with pytest.raises(DTypeError) as other:
            front.write_into(view, torch.zeros(3, dtype=torch.float64))
        assert str(other.value) == (
            "write_into: the value is float64 but the view is float32; arena never casts: "
            "convert the value first (e.g. value.astype('float32'))"
        )
        front.write_into(view, np.arange(3, dtype=np.float32))
        assert np.asarray(view).tolist() == [0.0, 1.0, 2.0]
