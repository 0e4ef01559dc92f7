"""Framework adapters, installed as ``arena.adapters``.

Each module exposes the same public names with the same signatures (checked by a test):

``FRAMEWORK``
    The framework's name.
``is_available()``
    Whether the framework is installed (without importing it).
``check_device(device)``
    Raise :class:`~arena.errors.FrameworkUnavailableError` if the framework cannot view
    memory on ``device``.
``native_dtype(dtype)``
    The framework's dtype for an :class:`arena.DType`, or a clear error.
``wrap(allocation)``
    The framework's handle on a whole buffer: done once per buffer (per growth).
``typed_views(buffer, layout)``
    One typed view per entry of a layout.
``fresh_views(views)``
    New view objects over the same memory (cheap; metadata not shared), or None when a
    prepared view can no longer be used (a JAX array deleted by donation or ``delete()``):
    the front then builds the views again. Raises when no view may be handed out now
    (JAX: :class:`~arena.errors.TracedRequestError` while JAX traces a function).
``data_ptr(view)``
    Address of a view's first element.
``retire_views(views)``
    Debug mode, when a scope exits or a step view is released: make the views handed out
    unusable where the framework allows it (torch: an empty storage; JAX: ``delete()``;
    NumPy and CuPy: nothing, poisoning shows stale reads).
``write_into(view, value)``
    Copy ``value`` into the memory behind ``view``; return what to read the new contents
    through (``view`` itself, except for JAX: a new array over the same bytes). Every
    adapter applies the same rule first (:func:`check_write`): ``value`` is an array of
    any framework (it has ``.dtype`` and ``.shape``) with exactly the view's dtype and
    shape. Nothing is cast or broadcast: another dtype is a
    :class:`~arena.errors.DTypeError`, another shape a :class:`~arena.errors.SpecError`,
    both naming the two sides, and nothing is written.

The framework itself is imported inside the adapter module only, so importing
:mod:`arena` imports no framework.
"""

from __future__ import annotations

from typing import Any

from arena.errors import DTypeError, SpecError
from arena.views.dtypes import resolve_dtype

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
