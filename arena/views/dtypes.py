"""Framework-free dtype resolution.

The core only needs a dtype's canonical name and item size. This module turns NumPy,
torch, JAX and ml_dtypes dtype objects, and strings, into a :class:`DType` without
importing any framework: torch dtypes are recognised by their type, NumPy-like objects
by duck typing, and NumPy (a hard dependency) parses the strings the table does not know.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from arena.errors import DTypeError

__all__ = ["KNOWN_DTYPES", "DType", "resolve_dtype"]


@dataclass(frozen=True, slots=True)
class DType:
    """A dtype as the core sees it.

    Parameters
    ----------
    name : str
        Canonical name shared by every framework (``"float32"``, ``"bfloat16"``, ...).
    itemsize : int
        Bytes per element.
    """

    name: str
    itemsize: int

    def __str__(self) -> str:
        return self.name


#: Canonical names and item sizes of every dtype arena can lay out.
KNOWN_DTYPES: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "complex32": 4,
    "complex64": 8,
    "complex128": 16,
    "float8_e4m3fn": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
    "float8_e4m3b11fnuz": 1,
    "float4_e2m1fn_x2": 1,
}

# Unambiguous spellings that NumPy does not parse the same way (or at all).
_ALIASES: dict[str, str] = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "fp64": "float64",
    "double": "float64",
    "chalf": "complex32",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
}

# Spellings the frameworks read differently: NumPy's "float" is float64 and its "int" int64,
# torch.float is float32 and torch.int int32. A request must not depend on which one wins.
_AMBIGUOUS: dict[str, str] = {
    "float": "NumPy reads it as float64, torch.float is float32",
    "int": "NumPy reads it as int64, torch.int is int32",
    "long": "C's long is 32 bits on Windows and 64 elsewhere",
}

_TYPES: dict[str, DType] = {name: DType(name, size) for name, size in KNOWN_DTYPES.items()}
_CACHE: dict[Any, DType] = {}
_CACHE_LIMIT = 1024


def resolve_dtype(dtype: Any) -> DType:
    """Resolve any supported dtype object or string to a :class:`DType`.

    Parameters
    ----------
    dtype : Any
        A :class:`DType`, a string (``"float32"``, ``"bf16"``, ``"<f4"``), a NumPy dtype or
        scalar type, a torch dtype, a JAX dtype or an ml_dtypes type.

    Returns
    -------
    DType
        The canonical dtype.

    Raises
    ------
    DTypeError
        If the dtype is unknown, has a non-native byte order or is structured.
    """
    try:
        return _CACHE[dtype]
    except KeyError:
        pass
    except TypeError:  # unhashable: resolve without caching
        return _resolve_uncached(dtype)
    resolved = _resolve_uncached(dtype)
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    # bool and int compare equal to 1/0 and would alias cached entries; never cache them.
    if not isinstance(dtype, (bool, int, float)):
        _CACHE[dtype] = resolved
    return resolved


def _resolve_uncached(dtype: Any) -> DType:
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return _from_string(dtype)
    kind = type(dtype)
    if kind.__module__ == "torch" and kind.__name__ == "dtype":
        return _from_name(str(dtype).removeprefix("torch."), dtype)
    if isinstance(dtype, (bool, int, float)) or dtype is None:
        raise DTypeError(_unknown_message(dtype))
    return _from_numpy_like(dtype)


def _from_string(text: str) -> DType:
    key = text.strip().lower()
    if key in _AMBIGUOUS:
        raise DTypeError(
            f"dtype {text!r} is ambiguous ({_AMBIGUOUS[key]}); name the width, e.g. "
            f"{'float32' if key == 'float' else 'int32'!r} or "
            f"{'float64' if key == 'float' else 'int64'!r}"
        )
    key = _ALIASES.get(key, key)
    if key in _TYPES:
        return _TYPES[key]
    import numpy  # a hard dependency; parses "f4", "<f4", "float", ...

    try:
        parsed = numpy.dtype(text)
    except (TypeError, ValueError):
        raise DTypeError(_unknown_message(text)) from None
    return _from_numpy_dtype(parsed, text)


def _from_numpy_like(dtype: Any) -> DType:
    numpy = sys.modules.get("numpy")
    if numpy is None:
        raise DTypeError(_unknown_message(dtype))
    # JAX scalar types (jnp.float32) carry their NumPy dtype in ``.dtype``.
    inner = getattr(dtype, "dtype", None)
    candidate = inner if isinstance(inner, numpy.dtype) else dtype
    try:
        parsed = numpy.dtype(candidate)
    except (TypeError, ValueError):
        raise DTypeError(_unknown_message(dtype)) from None
    return _from_numpy_dtype(parsed, dtype)


def _from_numpy_dtype(parsed: Any, original: Any) -> DType:
    if parsed.fields is not None or parsed.subdtype is not None:
        raise DTypeError(
            f"structured or sub-array dtype {original!r} is not supported; "
            "request the bytes as 'uint8' and reinterpret them yourself"
        )
    if not parsed.isnative:
        raise DTypeError(
            f"dtype {original!r} has non-native byte order {parsed.byteorder!r}; "
            f"arena views share the device's byte order: use {parsed.newbyteorder('=').name!r}"
        )
    return _from_name(parsed.name, original)


def _from_name(name: str, original: Any) -> DType:
    resolved = _TYPES.get(name)
    if resolved is None:
        raise DTypeError(_unknown_message(original))
    return resolved


def _unknown_message(dtype: Any) -> str:
    names = ", ".join(sorted(KNOWN_DTYPES))
    aliases = ", ".join(f"{alias}={name}" for alias, name in sorted(_ALIASES.items()))
    return (
        f"unknown dtype {dtype!r} ({type(dtype).__name__}); pass a NumPy, torch, JAX or "
        f"ml_dtypes dtype, or one of the names: {names} (or the short names {aliases})"
    )
