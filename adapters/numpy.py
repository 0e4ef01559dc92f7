"""NumPy views of host arena memory."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np

from arena.errors import DTypeError, FrameworkUnavailableError
from arena.memory.devices import Device
from arena.memory.sources import Allocation
from arena.views.dtypes import DType
from arena.views.layout import Layout

from . import check_write

__all__ = [
    "FRAMEWORK",
    "FRESH_EXPRESSION",
    "PLAN_EXPRESSION",
    "PLAN_GLOBALS",
    "check_device",
    "data_ptr",
    "fresh_views",
    "is_available",
    "native_dtype",
    "plan_source",
    "retire_views",
    "typed_views",
    "views_can_be_kept",
    "wrap",
    "write_into",
]

FRAMEWORK = "numpy"

#: How arena's per-structure plans build one view (``arena.views.plan``): a format string over
#: ``src`` (from :func:`plan_source`), ``native``, ``shape``, ``strides`` and ``offset`` (in
#: elements), ``bstrides`` and ``boffset`` (in bytes) and ``numel``; empty for no plan.
PLAN_EXPRESSION = "_ndarray({shape}, {native}, {src}, {boffset}, {bstrides})"
#: One fresh view of a prepared view ``{view}``, as :func:`fresh_views` makes it, for
#: the code arena generates per cached request; empty to call :func:`fresh_views`.
FRESH_EXPRESSION = "{view}.view()"
#: Names the plan expression uses.
PLAN_GLOBALS: dict[str, Any] = {"_ndarray": np.ndarray}

_NATIVE: dict[str, Any] = {}
_view = np.ndarray.view
# Names NumPy lacks that ml_dtypes provides under the same name (complex32 since 0.5).
_ML_DTYPES = {
    "bfloat16",
    "complex32",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float8_e4m3b11fnuz",
}


def is_available() -> bool:
    """NumPy is a hard dependency: always True."""
    return importlib.util.find_spec("numpy") is not None


def check_device(device: Device) -> None:
    """NumPy views need host memory."""
    if device.is_cuda:
        raise FrameworkUnavailableError(
            f"NumPy cannot view device memory on {device}; use ws.cupy or ws.torch "
            "for this arena, or an arena on device='cpu' for NumPy views"
        )


def native_dtype(dtype: DType) -> Any:
    """The NumPy dtype for ``dtype`` (ml_dtypes for bfloat16 and float8 types)."""
    native = _NATIVE.get(dtype.name)
    if native is not None:
        return native
    if dtype.name in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            raise DTypeError(
                f"NumPy has no {dtype.name}; install ml_dtypes (pip install ml_dtypes), "
                "request the bytes as 'uint8'/'uint16', or use the torch front"
            ) from None
        if not hasattr(ml_dtypes, dtype.name):
            raise DTypeError(
                f"ml_dtypes {ml_dtypes.__version__} has no {dtype.name}; upgrade ml_dtypes, "
                f"request the bytes as 'uint{8 * dtype.itemsize}', or use the torch front"
            )
        native = np.dtype(getattr(ml_dtypes, dtype.name))
    else:
        try:
            native = np.dtype(dtype.name)
        except TypeError:
            raise DTypeError(
                f"NumPy has no {dtype.name} dtype; request the bytes as "
                f"'uint{8 * dtype.itemsize}' or use the torch front"
            ) from None
    _NATIVE[dtype.name] = native
    return native


def plan_source(buffer: Any, native: Any) -> Any:
    """What :data:`PLAN_EXPRESSION` builds views from: the buffer's ``uint8`` array."""
    return buffer


def retire_views(views: Sequence[Any]) -> None:
    """Debug mode, at the end of a scope or a step view's life: nothing to do, NumPy
    arrays cannot be invalidated (poisoning shows stale reads)."""


def views_can_be_kept() -> bool:
    """Whether views a plan builds now may be remembered and handed out later: always."""
    return True


def wrap(allocation: Allocation) -> Any:
    """The allocation's own ``uint8`` array (already a NumPy array on the host)."""
    check_device(allocation.device)
    return allocation.owner


def typed_views(buffer: Any, layout: Layout) -> list[Any]:
    """``np.ndarray`` views at the layout's offsets; each keeps ``buffer`` alive."""
    return [
        np.ndarray(
            v.shape,
            dtype=native_dtype(v.dtype),
            buffer=buffer,
            offset=v.offset,
            strides=v.byte_strides,
        )
        for v in layout.views
    ]


def fresh_views(views: Sequence[Any]) -> list[Any] | None:
    """``a.view()`` of each prepared view: new array objects, same memory."""
    return list(map(_view, views))


def data_ptr(view: Any) -> int:
    """Address of the first element."""
    return int(view.__array_interface__["data"][0])


def write_into(view: Any, value: Any) -> Any:
    """Copy ``value`` (an array of any framework NumPy can read, of ``view``'s dtype and
    shape: see :func:`arena.adapters.check_write`) into ``view``; returns ``view``."""
    check_write(view, value)
    np.copyto(view, np.asarray(value), casting="no")
    return view
