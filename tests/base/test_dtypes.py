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


@pytest.mark.parametrize("bad", ["float12", "", None, object(), "qint8", str])
def test_unknown(bad: object) -> None:
    with pytest.raises(DTypeError, match="unknown dtype"):
        resolve_dtype(bad)


def test_torch_quantised_dtype_is_unknown() -> None:
    torch = pytest.importorskip("torch")
    with pytest.raises(DTypeError, match="qint8"):
        resolve_dtype(torch.qint8)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (np.float32(1.0), "np.float32(1.0)"),
        (np.zeros(3, np.int16), "array([0, 0, 0], dtype=int16)"),
        (np.int64(2), "np.int64(2)"),
        (np.bool_(True), "np.True_"),
        (1, "1"),
        (True, "True"),
        (1.0, "1.0"),
        (2j, "2j"),
    ],
)
def test_a_value_is_not_a_dtype(value: object, shown: str) -> None:
    with pytest.raises(DTypeError, match=r"is a value") as error:
        resolve_dtype(value)
    assert shown in str(error.value)


def test_framework_arrays_are_values() -> None:
    torch = pytest.importorskip("torch")
    jnp = pytest.importorskip("jax.numpy")
    for value in (torch.zeros(2), jnp.zeros(2)):
        with pytest.raises(DTypeError, match=r"is a value.*\.dtype"):
            resolve_dtype(value)


def test_equal_values_never_alias_a_dtype() -> None:
    """np.float32(1.0) == 1 == 1.0 == True and they hash alike: resolving one must not make
    the others resolve (to float32) for the rest of the process."""
    for value in (np.float32(1.0), 1, True, 1.0, np.float64(1.0)):
        with pytest.raises(DTypeError, match="is a value"):
            resolve_dtype(value)


def test_equal_objects_of_another_type_never_alias_in_the_cache() -> None:
    class Impostor:
        """Equal to float32's dtype and hashed alike, but not a dtype."""

        def __eq__(self, other: object) -> bool:
            return other == np.dtype("float32")

        def __hash__(self) -> int:
            return hash(np.dtype("float32"))

    assert resolve_dtype(np.dtype("float32")).name == "float32"
    with pytest.raises(DTypeError, match="unknown dtype"):
        resolve_dtype(Impostor())


@pytest.mark.parametrize("ambiguous", [float, int, "float", "int", "FLOAT"])
def test_python_float_and_int_read_like_their_names(ambiguous: object) -> None:
    """One rule: a Python type resolves as its name does. ``float``/``int`` are refused like
    ``'float'``/``'int'`` (NumPy reads float64/int64, torch float32/int32)."""
    assert np.dtype("float64") == "float" and np.dtype("float64") == float
    resolve_dtype(np.dtype("float64"))  # cached: must not answer for its equals
    resolve_dtype(np.dtype("int64"))
    with pytest.raises(DTypeError, match=r"ambiguous.*float32.*float64|ambiguous.*int32.*int64"):
        resolve_dtype(ambiguous)


@pytest.mark.parametrize(("python_type", "name"), [(bool, "bool"), (complex, "complex128")])
def test_unambiguous_python_types_read_like_their_names(python_type: type, name: str) -> None:
    assert resolve_dtype(python_type).name == name
    assert resolve_dtype(python_type.__name__).name == name


def test_a_value_as_dtype_never_reaches_a_front(host: object) -> None:
    import arena

    assert isinstance(host, arena.Arena)
    for dtype in (np.float32(1.0), True, 1, 1.0):
        with pytest.raises(DTypeError, match="is a value"):
            host.numpy.get_simultaneous(((4,), dtype))
    with pytest.raises(DTypeError, match="is a value"):
        host.numpy.get_simultaneous(((4,), np.zeros(3, np.int16)))


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("torch.bfloat16", "bfloat16"),  # str(torch.bfloat16)
        ("np.float32", "float32"),
        ("numpy.float8_e4m3fn", "float8_e4m3fn"),
        ("jnp.int8", "int8"),
        ("torch.half", "float16"),
    ],
)
def test_a_framework_prefixed_name_is_refused_naming_the_bare_one(text: str, name: str) -> None:
    """A name is a name: ``'torch.bfloat16'`` stays unknown, but the message says what to
    write instead of leaving it to be found in the list of every name."""
    with pytest.raises(DTypeError, match=rf"unknown dtype '{text}' \(str\); write '{name}': "):
        resolve_dtype(text)


@pytest.mark.parametrize("text", ["torch.float", "torch.float12", "float12"])
def test_no_bare_name_is_offered_where_there_is_none(text: str) -> None:
    """``torch.float`` is float32 in torch but ``'float'`` is ambiguous: no name offered."""
    with pytest.raises(DTypeError, match=rf"unknown dtype '{text}' \(str\); pass a NumPy"):
        resolve_dtype(text)
