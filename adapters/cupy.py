"""CuPy arrays over device arena memory.

Views are ``cupy.ndarray(shape, dtype, memptr=base.data + offset, strides=...)``: the
memory pointer carries the device id and keeps the buffer alive, so no driver query
happens per view. CuPy has no float8 types and only experimental bfloat16 (through
ml_dtypes); those requests get a working view where the installed CuPy supports it, else a
clear error.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from arena.base.dtypes import DType
from arena.base.layout import Layout
from arena.errors import DTypeError, FrameworkUnavailableError
from arena.memory.devices import Device
from arena.memory.sources import Allocation

from . import check_write
from .base import Adapter

try:
    import cupy
except ImportError as _exc:
    raise FrameworkUnavailableError(
        f"the CuPy front needs CuPy, which cannot be imported here ({_exc}): pip install "
        "cupy-cuda12x (CUDA 12) or cupy-cuda13x (CUDA 13), or use the torch front "
        "(ws.torch) for views of a torch-backed CUDA arena"
    ) from _exc

__all__ = ["ADAPTER", "CupyAdapter"]

_NATIVE: dict[str, Any] = {}
_ndarray = cupy.ndarray
# DLPack device types whose memory CuPy can read directly: kDLCUDA, kDLCUDAManaged.
_CUDA_DLPACK_DEVICES = (2, 13)


def _plan_view(
    source: Any, native: Any, shape: tuple[int, ...], strides: tuple[int, ...], offset: int
) -> Any:
    """A plan's view: ``cupy.ndarray`` at a memory pointer into the buffer (bytes)."""
    return _ndarray(shape, native, source.data + offset, strides)


class CupyAdapter(Adapter):
    """CuPy arrays over device arena memory: ``cupy.ndarray(shape, dtype, memptr=base.data
    + offset, strides=...)``; fresh views are ``a.view()``."""

    framework = "cupy"
    fresh_view = staticmethod(cupy.ndarray.view)
    plan_view = staticmethod(_plan_view)

    def check_device(self, device: Device) -> None:
        """CuPy views need device memory."""
        if not device.is_cuda:
            raise FrameworkUnavailableError(
                f"CuPy cannot view host memory ({device}); use ws.numpy or ws.torch for "
                "this arena, or make the arena on a CUDA device"
            )

    def native_dtype(self, dtype: DType) -> Any:
        """The dtype CuPy uses for ``dtype``; a clear error where CuPy has none."""
        native = _NATIVE.get(dtype.name)
        if native is not None:
            return native
        fix = f"request the bytes as 'uint{8 * dtype.itemsize}' or use the torch front"
        if dtype.name.startswith(("float8", "float4")) or dtype.name == "complex32":
            raise DTypeError(f"CuPy has no {dtype.name} dtype; {fix}")
        if dtype.name == "bfloat16":
            try:
                import ml_dtypes
            except ImportError:
                raise DTypeError(
                    f"CuPy's bfloat16 support needs ml_dtypes (pip install ml_dtypes); or {fix}"
                ) from None
            native = np.dtype(ml_dtypes.bfloat16)
            try:
                cupy.ndarray((0,), dtype=native)
            except Exception as exc:  # CuPy versions without bfloat16 raise various errors
                raise DTypeError(
                    f"CuPy {cupy.__version__} cannot make bfloat16 arrays ({exc}); {fix}"
                ) from None
        else:
            native = np.dtype(dtype.name)
        _NATIVE[dtype.name] = native
        return native

    def wrap(self, allocation: Allocation) -> Any:
        """The allocation's CuPy ``uint8`` array.

        A CuPy owner is used as it is. Any other owner (the torch source's ``uint8`` tensor
        when CuPy was not usable as the arena was made) is wrapped without a copy and without
        any CUDA call: ``UnownedMemory`` over its pointer with the device id given, keeping
        the owner alive.
        """
        self.check_device(allocation.device)
        owner = allocation.owner
        if isinstance(owner, cupy.ndarray):
            return owner
        memory = cupy.cuda.UnownedMemory(
            allocation.ptr, allocation.nbytes, owner, device_id=allocation.device.index
        )
        pointer = cupy.cuda.MemoryPointer(memory, 0)
        return cupy.ndarray((allocation.nbytes,), dtype=cupy.uint8, memptr=pointer)

    def typed_views(self, buffer: Any, layout: Layout) -> list[Any]:
        """CuPy arrays at the layout's offsets, with explicit strides. Made by
        :attr:`plan_view`, as a plan's are: one way to make a view."""
        views = []
        for v in layout.views:
            dtype = v.dtype
            strides = tuple(map(dtype.itemsize.__mul__, v.strides))  # in bytes
            views.append(_plan_view(buffer, self.native_dtype(dtype), v.shape, strides, v.offset))
        return views

    def data_ptr(self, view: Any) -> int:
        """Device address of the first element."""
        return int(view.data.ptr)

    def write_into(self, view: Any, value: Any) -> Any:
        """Copy ``value`` (an array of ``view``'s dtype and shape: see
        :func:`arena.adapters.check_write`) into ``view``: CUDA DLPack producers (torch, JAX)
        zero-copy on the device, host arrays through a host-to-device copy. Returns ``view``."""
        check_write(view, value)
        if not isinstance(value, cupy.ndarray):
            dlpack_device = getattr(value, "__dlpack_device__", None)
            if dlpack_device is not None and dlpack_device()[0] in _CUDA_DLPACK_DEVICES:
                value = cupy.from_dlpack(value)
            else:
                value = cupy.asarray(np.asarray(value))
        view[...] = value
        return view


#: The adapter a CuPy front uses.
ADAPTER = CupyAdapter()
