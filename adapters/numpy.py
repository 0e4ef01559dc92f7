"""NumPy views of host arena memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from arena.base.dtypes import DType
from arena.base.layout import Layout
from arena.errors import DTypeError, FrameworkUnavailableError
from arena.memory.devices import CPU, Device
from arena.memory.sources import Allocation

from . import check_write
from .base import Adapter

__all__ = ["ADAPTER", "NumpyAdapter"]

_NATIVE: dict[str, Any] = {}
_ndarray = np.ndarray
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


def _plan_view(
    source: Any, native: Any, shape: tuple[int, ...], strides: tuple[int, ...], offset: int
) -> Any:
    """A plan's view: ``np.ndarray`` over the buffer's ``uint8`` array (bytes)."""
    return _ndarray(shape, native, source, offset, strides)


class NumpyAdapter(Adapter):
    """NumPy arrays over host arena memory: ``np.ndarray(shape, dtype, buffer, offset,
    strides)`` over the allocation's own ``uint8`` array; fresh views are ``a.view()``."""

    framework = "numpy"
    fresh_view = staticmethod(np.ndarray.view)
    plan_view = staticmethod(_plan_view)

    def check_device(self, device: Device) -> None:
        """NumPy views need host memory."""
        if device.is_cuda:
            raise FrameworkUnavailableError(
                f"NumPy cannot view device memory on {device}; use ws.cupy or ws.torch "
                "for this arena, or an arena on device='cpu' for NumPy views"
            )

    def native_dtype(self, dtype: DType) -> Any:
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
                    f"ml_dtypes {ml_dtypes.__version__} has no {dtype.name}; upgrade "
                    f"ml_dtypes, request the bytes as 'uint{8 * dtype.itemsize}', or use the "
                    "torch front"
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

    def wrap(self, allocation: Allocation) -> Any:
        """The allocation's own ``uint8`` array (already a NumPy array on the host)."""
        if allocation.device is not CPU:  # the host's one Device: nothing to check
            self.check_device(allocation.device)
        return allocation.owner

    def typed_views(self, buffer: Any, layout: Layout) -> list[Any]:
        """``np.ndarray`` views at the layout's offsets; each keeps ``buffer`` alive. Made
        by :attr:`plan_view`, as a plan's are: one way to make a view."""
        views = []
        for v in layout.views:  # a loop, not a comprehension: no frame of its own
            dtype = v.dtype
            native = _NATIVE.get(dtype.name)
            if native is None:
                native = self.native_dtype(dtype)
            strides = tuple(map(dtype.itemsize.__mul__, v.strides))  # in bytes
            views.append(_plan_view(buffer, native, v.shape, strides, v.offset))
        return views

    def data_ptr(self, view: Any) -> int:
        """Address of the first element."""
        return int(view.__array_interface__["data"][0])

    def write_into(self, view: Any, value: Any) -> Any:
        """Copy ``value`` (an array of any framework NumPy can read, of ``view``'s dtype
        and shape: see :func:`arena.adapters.check_write`) into ``view``; returns
        ``view``."""
        check_write(view, value)
        np.copyto(view, np.asarray(value), casting="no")
        return view


#: The adapter a NumPy front uses.
ADAPTER = NumpyAdapter()
