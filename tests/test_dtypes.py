from __future__ import annotations

import numpy as np
import pytest

from arena import DType, DTypeError, resolve_dtype


@pytest.mark.parametrize(
    ("value", "name", "itemsize"),
    [
        ("float32", "float32", 4),
        ("f4", "float32", 4),
        ("<f2", "float16", 2),
        ("bf16", "bfloat16", 2),
        ("BFloat16", "bfloat16", 2),
        ("half", "float16", 2),
        ("float8_e4m3fn", "float8_e4m3fn", 1),
        ("bool", "bool", 1),
        (np.float64, "float64", 8),
        (np.dtype("int16"), "int16", 2),
        (DType("uint8", 1), "uint8", 1),
    ],
)
def test_strings_and_numpy(value: object, name: str, itemsize: int) -> None:
    assert resolve_dtype(value) == DType(name, itemsize)


def test_torch_dtypes_without_importing_torch_in_the_core() -> None:
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.bool, torch.half):
        resolved = resolve_dtype(dtype)
        assert resolved.itemsize == dtype.itemsize
        assert getattr(torch, resolved.name) is dtype


def test_ml_dtypes_and_jax() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert resolve_dtype(ml_dtypes.bfloat16) == DType("bfloat16", 2)
    assert resolve_dtype(np.dtype(ml_dtypes.float8_e5m2)).name == "float8_e5m2"
    jnp = pytest.importorskip("jax.numpy")
    assert resolve_dtype(jnp.bfloat16) == DType("bfloat16", 2)
    assert resolve_dtype(jnp.int8) == DType("int8", 1)


@pytest.mark.parametrize("bad", ["float12", "", None, 3, 1.5, object(), "qint8"])
def test_unknown(bad: object) -> None:
    with pytest.raises(DTypeError, match="unknown dtype"):
        resolve_dtype(bad)


def test_torch_quantised_dtype_is_unknown() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(DTypeError, match="qint8"):
        resolve_dtype(torch.qint8)
