"""A caller's in-place change of a NumPy array's metadata (``a.shape = ...``,
``a.dtype = ...``), which several tests make to check that arena copes with it.

NumPy 2.5 deprecates both (a ``DeprecationWarning``, an error under the suite's
``filterwarnings = error``; the first GPU run had NumPy 2.5). Callers can still do it,
so the tests still check it: these helpers make the change with that one warning
silenced, and nothing else."""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["set_dtype", "set_shape"]


def set_shape(array: Any, shape: tuple[int, ...]) -> None:
    """``array.shape = shape`` in place, as a caller may still write it."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="Setting the shape on a NumPy array", category=DeprecationWarning
        )
        array.shape = shape


def set_dtype(array: Any, dtype: Any) -> None:
    """``array.dtype = dtype`` in place, as a caller may still write it."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="Setting the dtype on a NumPy array", category=DeprecationWarning
        )
        array.dtype = dtype
