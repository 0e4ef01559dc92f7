"""Framework-free dtype resolution.

The core only needs a dtype's canonical name and item size. This module turns NumPy,
torch, JAX and ml_dtypes dtype objects, and strings, into a :class:`DType` without
importing any framework: torch dtypes are recognised by their type, NumPy-like objects
by duck typing, and NumPy (a hard dependency) parses the strings the table does not know.

What a dtype is:

* a name (``"float32"``, ``"bf16"``, ``"<f4"``), a NumPy dtype, a torch dtype, a
  :class:`DType`, or a scalar *type* (``np.float32``, ``jnp.bfloat16``,
  ``ml_dtypes.float8_e5m2``);
* Python's own types read as their names do: ``bool`` is ``"bool"``, ``complex`` is
  ``"complex"`` (complex128), and ``float`` and ``int`` are refused like ``"float"`` and
  ``"int"``, because NumPy reads them as 64-bit and torch (``torch.float``,
  ``torch.int``) as 32-bit;
* never a value: ``np.float32(1.0)``, an array, a tensor, ``1``, ``True`` or ``1.0`` is a
  :class:`~arena.errors.DTypeError` naming it (pass its ``.dtype``).

Resolutions are cached by ``(type, object)``, so objects that compare and hash alike
but are of different types (``np.dtype("float64") == "float" == float``) never answer
for one another.
"""

from __future__ import annotations

import numbers
import reprlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from arena.errors import ArenaError, DTypeError

__all__ = ["KNOWN_DTYPES", "PLANNER_SEEDS", "DType", "resolve_dtype", "resolve_natives", "seeds"]


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

#: Python's own types read as the names they are spelled with (see the module docstring).
_PYTHON_TYPES: dict[type, str] = {bool: "bool", int: "int", float: "float", complex: "complex"}

_TYPES: dict[str, DType] = {name: DType(name, size) for name, size in KNOWN_DTYPES.items()}
#: (type of the object, object) -> DType: equal objects of different types never alias.
_CACHE: dict[tuple[type, Any], DType] = {}
_CACHE_LIMIT = 1024
#: The most dtype objects :func:`seeds` keeps: half the compiled Planner's table (its
#: PLAN_MAX_DTYPES, 32), the rest left to each front's own dtypes.
PLANNER_SEEDS = 16
_SEEDS: tuple[Any, ...] = ()


def resolve_dtype(dtype: Any) -> DType:
    """Resolve any supported dtype object or string to a :class:`DType`.

    Parameters
    ----------
    dtype : Any
        A :class:`DType`, a string (``"float32"``, ``"bf16"``, ``"<f4"``), a NumPy dtype or
        scalar type, a torch dtype, a JAX dtype or an ml_dtypes type; Python's ``bool``
        and ``complex`` (``float`` and ``int`` are ambiguous, like ``"float"`` and
        ``"int"``).

    Returns
    -------
    DType
        The canonical dtype.

    Raises
    ------
    DTypeError
        If the dtype is unknown, ambiguous, has a non-native byte order or is structured,
        or if it is a value (a scalar, an array) rather than a dtype.
    """
    key = (dtype.__class__, dtype)
    try:
        return _CACHE[key]
    except KeyError:
        pass
    except TypeError:  # unhashable: resolve without caching
        return _resolve_uncached(dtype)
    resolved = _resolve_uncached(dtype)  # values raise: they are never cached
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    _CACHE[key] = resolved
    return resolved


def resolve_natives(dtypes: Sequence[Any], native: Any) -> tuple[tuple[int, Any] | None, ...]:
    """``(itemsize, native(resolved))`` of each of ``dtypes``, or None for one that does not
    resolve (the caller's general path explains): the compiled Planner's dtype resolution
    (``arena.views._hit``), given a framework's ``native_dtype`` as ``native``. Every dtype
    is resolved first, then every native dtype, in loops: a first request passes this
    module once and the framework's adapter once, however many new dtypes it names.

    Each loop stops at the first dtype that does not resolve (the rest answer None): the
    caller's layout declines at that spec, and the general path names that dtype, so no
    later one's resolution (which may raise anything) runs first."""
    global _SEEDS
    resolved: list[DType] = []
    for dtype in dtypes:
        try:
            resolved.append(resolve_dtype(dtype))
        except (ArenaError, TypeError, ValueError):
            break
    answers: list[tuple[int, Any] | None] = []
    for one in resolved:
        try:
            answers.append((one.itemsize, native(one)))
        except (ArenaError, TypeError, ValueError):
            break
    # The dtype objects that resolved, kept for the next Planner made (seeds()): a loop
    # here, not a helper, so that a first request passes no more functions.
    if len(_SEEDS) < PLANNER_SEEDS:
        numpy = sys.modules.get("numpy")
        for dtype in dtypes[: len(answers)]:
            kind = dtype.__class__
            if (
                kind is type
                or (kind is DType and _TYPES.get(dtype.name) is dtype)
                or (
                    numpy is not None
                    and isinstance(dtype, numpy.dtype)
                    and numpy.dtype(dtype.type) is dtype
                )
            ):
                for seed in _SEEDS:  # by identity, as the Planner's table is keyed
                    if seed is dtype:
                        break
                else:
                    if len(_SEEDS) < PLANNER_SEEDS:
                        # Installed in one store, a new tuple: a thread racing this one
                        # loses its seed at worst (no duplicate, never more than the bound).
                        _SEEDS = (*_SEEDS, dtype)
    return (*answers, *[None] * (len(dtypes) - len(answers)))


def seeds() -> tuple[Any, ...]:
    """The dtype objects :func:`resolve_natives` resolved in this process (at most
    :data:`PLANNER_SEEDS`, first resolved first): a new compiled Planner resolves them
    when it is made, so that a new arena's first request of a dtype the process used
    already resolves nothing in Python (issue 32 item 4: a fresh arena's Planner asked
    about each new dtype, about 2 us of a never-seen request's 19). Only objects that
    live as long as the process are kept: types (``np.float32``), the canonical
    :class:`DType` objects and NumPy's canonical dtype objects (``np.dtype("float32")``),
    never a string or a dtype object made per call."""
    return _SEEDS


def _resolve_uncached(dtype: Any) -> DType:
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return _from_string(dtype)
    kind = type(dtype)
    if kind.__module__ == "torch" and kind.__name__ == "dtype":
        return _from_name(str(dtype).removeprefix("torch."), dtype)
    if isinstance(dtype, type):
        name = _PYTHON_TYPES.get(dtype)
        if name is not None:  # bool, int, float, complex: as their names read
            return _from_string(name, f"{name} (the Python type)")
        return _from_numpy_like(dtype)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(dtype, numpy.dtype):
        return _from_numpy_dtype(dtype, dtype)
    if isinstance(dtype, numbers.Number) or hasattr(dtype, "dtype"):
        raise DTypeError(_value_message(dtype))
    if dtype is None:
        raise DTypeError(_unknown_message(dtype))
    return _from_numpy_like(dtype)


def _from_string(text: str, shown: str = "") -> DType:
    key = text.strip().lower()
    if key in _AMBIGUOUS:
        raise DTypeError(
            f"dtype {shown or repr(text)} is ambiguous ({_AMBIGUOUS[key]}); name the width, "
            f"e.g. {'float32' if key == 'float' else 'int32'!r} or "
            f"{'float64' if key == 'float' else 'int64'!r}. Python's float and int types "
            "are refused like the strings 'float' and 'int'"
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


def _value_message(value: Any) -> str:
    inner = getattr(value, "dtype", None)
    if inner is not None:
        fix = f"pass its dtype (.dtype, here {inner})"
    else:
        fix = "pass a dtype such as 'float32', np.float32 or torch.float32"
    return (
        f"{_short_repr(value)} is a value ({type(value).__name__}), not a dtype; {fix}. "
        "Values are refused, never read as their type: 1, 1.0, True and np.float32(1.0) "
        "compare equal but would mean different dtypes"
    )


def _short_repr(value: Any) -> str:
    shorten = reprlib.Repr()
    shorten.maxother = shorten.maxstring = 80
    return shorten.repr(value)


#: How a framework's dtype attribute reads when written as a string ("torch.bfloat16",
#: what ``str(torch.bfloat16)`` gives): refused (a name is a name), but the message
#: names the bare one.
_FRAMEWORK_PREFIXES = (
    "torch.",
    "numpy.",
    "np.",
    "jax.numpy.",
    "jnp.",
    "cupy.",
    "cp.",
    "ml_dtypes.",
)


def _bare_name(text: str) -> str | None:
    """The dtype name arena knows in ``text`` spelled with a framework's prefix
    (``'torch.bfloat16'`` -> ``'bfloat16'``), or None."""
    key = text.strip().lower()
    for prefix in _FRAMEWORK_PREFIXES:
        if key.startswith(prefix):
            name = key.removeprefix(prefix)
            name = _ALIASES.get(name, name)
            return name if name in _TYPES else None
    return None


def _unknown_message(dtype: Any) -> str:
    names = ", ".join(sorted(KNOWN_DTYPES))
    aliases = ", ".join(f"{alias}={name}" for alias, name in sorted(_ALIASES.items()))
    bare = _bare_name(dtype) if isinstance(dtype, str) else None
    hint = f"; write {bare!r}: names take no framework prefix" if bare else ""
    return (
        f"unknown dtype {dtype!r} ({type(dtype).__name__}){hint}; pass a NumPy, torch, JAX or "
        f"ml_dtypes dtype, or one of the names: {names} (or the short names {aliases})"
    )
