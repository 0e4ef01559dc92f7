"""Framework adapters, installed as ``arena.adapters``.

One module per framework (``numpy``, ``torch``, ``cupy``, ``jax``), each defining one
subclass of :class:`arena.adapters.base.Adapter` (the contract, its defaults and its
docs) and exposing its instance as ``ADAPTER``; a front holds that instance.

The framework itself is imported inside the adapter module only, so importing
:mod:`arena` imports no framework. This package holds what every adapter shares:
:func:`check_write`, the rule every ``write_into`` applies first.
"""

from __future__ import annotations

from typing import Any

from arena.base.dtypes import resolve_dtype
from arena.errors import DTypeError, SpecError

__all__ = ["ADAPTER_NAMES", "check_write"]

#: Every adapter module shipped with arena.
ADAPTER_NAMES = ("numpy", "torch", "cupy", "jax")


def check_write(view: Any, value: Any) -> None:
    """The rule every adapter's ``write_into`` applies before it copies anything.

    Raises
    ------
    DTypeError
        ``value`` has no dtype (a Python number or list, None), or another dtype than
        ``view``: arena never casts.
    SpecError
        ``value`` has another shape than ``view``: arena never broadcasts.
    """
    want = resolve_dtype(view.dtype)
    shape = tuple(view.shape)
    found = getattr(value, "dtype", None)
    if found is None or not hasattr(value, "shape"):
        raise DTypeError(
            f"write_into: the value ({type(value).__name__}) has no dtype; pass an array of "
            f"the view's dtype {want} and shape {shape}, e.g. "
            f"np.asarray(value, dtype={want.name!r})"
        )
    try:
        got = resolve_dtype(found)
    except DTypeError:
        got = None
    if got != want:
        raise DTypeError(
            f"write_into: the value is {got or found} but the view is {want}; arena never "
            f"casts: convert the value first (e.g. value.astype({want.name!r}))"
        )
    if tuple(value.shape) != shape:
        raise SpecError(
            f"write_into: the value has shape {tuple(value.shape)} but the view has shape "
            f"{shape}; arena never broadcasts or reshapes: pass a value of shape {shape}"
        )
