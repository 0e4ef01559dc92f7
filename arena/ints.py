"""The int rules, written once: what counts as a dimension, a count or an index.

Standard library only, and no other module of arena: every layer may import it.

Two rules. A dimension served as it is (a remembered request's fast paths) is *exactly*
an ``int`` (:func:`exact_int`, :func:`exact_dims`, and :func:`exact_dim_source` for
generated code): ``2.0`` and ``True`` hash and compare like ``2`` and ``1``, and an int
subclass or an object with ``__index__`` may say another number later, so none of them may
find what a plain request remembered; they take the validating path
(:func:`arena.base.layout.check_dim`), which also refuses whatever :func:`bool_like` says.
A count, size or setting is an ``int`` or int subclass but never a ``bool``
(:func:`int_not_bool`). The compiled hit path's mirror of the first rule is
``digest_of`` in ``arena/views/_hit.c`` (``PyLong_CheckExact``). tests/base/test_exact_int.py
scans the package for the rules written anywhere else.
"""

from __future__ import annotations

from typing import Any, TypeGuard

__all__ = ["bool_like", "exact_dim_source", "exact_dims", "exact_int", "int_not_bool"]


def exact_int(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is exactly an ``int`` (not a bool, an int subclass or a float)."""
    return value.__class__ is int


def exact_dims(shape: Any) -> bool:
    """Whether every dimension in ``shape`` (an iterable) is exactly an ``int``: the test a
    remembered request's fast paths apply before serving it."""
    for dim in shape:  # noqa: SIM110 - a loop: all() over a generator costs more on a hit
        if dim.__class__ is not int:
            return False
    return True


def exact_dim_source(name: str) -> str:
    """The source text of :func:`exact_dims`' test for one dimension named ``name``, negated
    (true when ``name`` is NOT exactly an ``int``): for servers generated as straight-line
    code, where a call per dimension would cost what the generation saves."""
    return f"{name}.__class__ is not int"


def int_not_bool(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` or an int subclass (an ``IntEnum`` member) other than
    ``bool``: the rule for counts, sizes and settings."""
    return isinstance(value, int) and not isinstance(value, bool)


def bool_like(value: Any) -> bool:
    """Whether ``value`` is a bool of any framework: Python's, NumPy's (``bool_`` in NumPy 1,
    ``bool`` in NumPy 2), or an array or tensor of a bool dtype."""
    kind = getattr(value, "dtype", None)
    return (
        isinstance(value, bool)
        or type(value).__name__ in ("bool", "bool_")
        or (kind is not None and "bool" in str(kind))
    )
