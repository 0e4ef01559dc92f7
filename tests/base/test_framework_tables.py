"""arena's tables checked against the frameworks themselves, not against arena: every
dtype's item size against NumPy's, ml_dtypes', torch's and JAX's own, and the strides of
every view (zero-size shapes included) against what the framework gives ``empty(shape)``,
on the general path, the plan and a remembered request."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from arena import Arena, compute_layout, resolve_dtype
from arena.base.dtypes import KNOWN_DTYPES

SHAPES = [
    (),
    (1,),
    (7,),
    (0,),
    (0, 3),
    (3, 0),
    (0, 0),
    (2, 0, 3),
    (4, 1, 0, 2),
    (7, 0, 1),
    (5, 3, 2),
    (1, 1),
    (3, 1, 4),
]
STRIDE_DTYPES = ["float32", "int8", "float64", "bfloat16", "complex64", "uint16"]


def _numpy_itemsize(name: str) -> int | None:
    try:
        return int(np.dtype(name).itemsize)
    except TypeError:
        pass
    ml_dtypes = pytest.importorskip("ml_dtypes")
    kind = getattr(ml_dtypes, name, None)
    return None if kind is None else int(np.dtype(kind).itemsize)


def _torch_empty(shape: tuple[int, ...], kind: Any) -> Any:
    import torch

    with warnings.catch_warnings():  # complex32: "ComplexHalf support is experimental"
        warnings.simplefilter("ignore", UserWarning)
        return torch.empty(shape, dtype=kind)


def _torch_itemsize(name: str) -> int | None:
    torch = pytest.importorskip("torch")
    kind = getattr(torch, name, None)
    if not isinstance(kind, torch.dtype):
        return None
    return int(_torch_empty((), kind).element_size())


def _jax_itemsize(name: str) -> int | None:
    jnp = pytest.importorskip("jax.numpy")
    kind = getattr(jnp, name, None)
    if kind is None:
        return None
    return int(jnp.dtype(kind).itemsize)


@pytest.mark.parametrize("name", sorted(KNOWN_DTYPES))
def test_every_item_size_is_what_the_frameworks_say(name: str) -> None:
    sizes = {
        "numpy": _numpy_itemsize(name),
        "torch": _torch_itemsize(name),
        "jax": _jax_itemsize(name),
    }
    known = {framework: size for framework, size in sizes.items() if size is not None}
    assert known, f"no framework here knows {name}: its item size is checked by nothing"
    assert set(known.values()) == {KNOWN_DTYPES[name]}, known
    assert resolve_dtype(name).itemsize == KNOWN_DTYPES[name]


@pytest.mark.parametrize("name", sorted(KNOWN_DTYPES))
def test_a_frameworks_own_dtype_resolves_to_its_name_and_item_size(name: str) -> None:
    torch = pytest.importorskip("torch")
    kind = getattr(torch, name, None)
    if isinstance(kind, torch.dtype):
        resolved = resolve_dtype(kind)
        assert resolved.name == name
        assert resolved.itemsize == _torch_empty((), kind).element_size()
    numpy_size = _numpy_itemsize(name)
    if numpy_size is not None:
        native = np.dtype(name) if name in np.sctypeDict else None
        if native is None:
            import ml_dtypes

            native = np.dtype(getattr(ml_dtypes, name))
        resolved = resolve_dtype(native)
        assert (resolved.name, resolved.itemsize) == (name, native.itemsize)


@pytest.mark.parametrize("framework", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("name", sorted(KNOWN_DTYPES))
def test_an_adapters_native_dtype_has_the_tables_item_size(framework: str, name: str) -> None:
    import importlib

    from arena import DTypeError

    pytest.importorskip(framework)
    adapter = importlib.import_module(f"arena.adapters.{framework}").ADAPTER
    try:
        native = adapter.native_dtype(resolve_dtype(name))
    except DTypeError:
        return  # the framework lacks it and says so
    if framework == "torch":
        size = _torch_empty((), native).element_size()
    else:
        size = np.dtype(native).itemsize
    assert size == KNOWN_DTYPES[name]


def _empty_strides(framework: str, shape: tuple[int, ...], dtype: str) -> tuple[int, ...]:
    """The strides the framework itself gives a new C-ordered array of ``shape``: elements
    for torch (``torch.empty``), bytes for NumPy.

    NumPy 2's ``np.empty`` gives an array with no elements all-zero strides, while an
    array it makes over a buffer (as arena's views are) gets C strides; both are valid
    for no elements. So for NumPy the reference is ``np.empty`` when the shape has
    elements, and NumPy's own strides for the same shape over a buffer otherwise.
    """
    if framework == "torch":
        import torch

        return tuple(_torch_empty(shape, getattr(torch, dtype)).stride())
    native = np.dtype(_native(dtype))
    if int(np.prod(shape)):
        return tuple(np.empty(shape, dtype=native).strides)
    return tuple(np.ndarray(shape, dtype=native, buffer=bytearray(native.itemsize)).strides)


def _native(dtype: str) -> Any:
    if dtype == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return dtype


def _strides(framework: str, view: Any) -> tuple[int, ...]:
    return tuple(view.stride()) if framework == "torch" else tuple(view.strides)


@pytest.mark.parametrize("dtype", STRIDE_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layout_strides_are_what_numpy_and_torch_give_empty(
    shape: tuple[int, ...], dtype: str
) -> None:
    (view,) = compute_layout(((shape, dtype),)).views
    assert view.byte_strides == _empty_strides("numpy", shape, dtype)
    assert view.nbytes == int(np.empty(shape, dtype=_native(dtype)).nbytes)
    pytest.importorskip("torch")
    assert view.strides == _empty_strides("torch", shape, dtype)


@pytest.mark.parametrize("cached", [False, True], ids=["fresh", "cached"])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_views_have_the_frameworks_strides_on_every_path(
    framework: str, dtype: str, cached: bool
) -> None:
    """Each shape is served by the general path (the first of its structure, or a
    zero-size one), the plan (a known structure, new sizes) and the hit (seen before);
    every view has the framework's own strides, shape and size for ``empty(shape)``."""
    if framework == "torch":
        pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as a:
        a.reserve_bytes(1 << 16)
        front = a.front(framework, cached=cached)
        for shape in SHAPES:
            for _ in range(3):  # general path or plan, then plan or hit, then hit
                (view,) = front.get_simultaneous((shape, dtype))
                assert tuple(view.shape) == shape
                assert _strides(framework, view) == _empty_strides(framework, shape, dtype)
                if framework == "numpy":
                    assert view.flags.c_contiguous
            # with another view before it: the plan's offsets and strides together
            first, second = front.get_simultaneous(((3,), "int8"), (shape, dtype))
            assert _strides(framework, second) == _empty_strides(framework, shape, dtype)
            assert _strides(framework, first) == _empty_strides(framework, (3,), "int8")
