"""CuPy arrays over device arena memory.

Views are ``cupy.ndarray(shape, dtype, memptr=base.data + offset, strides=...)``: the
memory pointer carries the device id and keeps the buffer alive, so no driver query
happens per view. CuPy has no float8 types and only experimental bfloat16 (through
ml_dtypes); those requests get a working view where the installed CuPy supports it, else a
clear error.
"""

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

try:
    import cupy
except ImportError as _exc:
    raise FrameworkUnavailableError(
        f"the CuPy front needs CuPy, which cannot be imported here ({_exc}): pip install "
        "'cupy-arena[cuda12]' (CUDA 12) or 'cupy-arena[cuda13]' (CUDA 13), or use the torch "
        "front (ws.torch) for views of a torch-backed CUDA arena"
    ) from _exc

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

FRAMEWORK = "cupy"

#: How arena's per-structure plans build one view (``arena.views.plan``): a format string over
#: ``src`` (from :func:`plan_source`), ``native``, ``shape``, ``strides`` and ``offset`` (in
#: elements), ``bstrides`` and ``boffset`` (in bytes) and ``numel``; empty for no plan.
PLAN_EXPRESSION = "_ndarray({shape}, {native}, {src}.data + {boffset}, {bstrides})"
#: One fresh view of a prepared view ``{view}``, as :func:`fresh_views` makes it, for
#: the code arena generates per cached request; empty to call :func:`fresh_views`.
FRESH_EXPRESSION = "{view}.view()"
#: Names the plan expression uses.
PLAN_GLOBALS: dict[str, Any] = {"_ndarray": cupy.ndarray}

_NATIVE: dict[str, Any] = {}
_view = cupy.ndarray.view
# DLPack device types whose memory CuPy can read directly: kDLCUDA, kDLCUDAManaged.
_CUDA_DLPACK_DEVICES = (2, 13)


def is_available() -> bool:
    """Whether CuPy is installed."""
    return importlib.util.find_spec("cupy") is not None


def check_device(device: Device) -> None:
    """CuPy views need device memory."""
    if not device.is_cuda:
        raise FrameworkUnavailableError(
            f"CuPy cannot view host memory ({device}); use ws.numpy or ws.torch for "
            "this arena, or make the arena on a CUDA device"
        )


def native_dtype(dtype: DType) -> Any:
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


def plan_source(buffer: Any, native: Any) -> Any:
    """What :data:`PLAN_EXPRESSION` builds views from: the buffer's ``uint8`` array."""
    return buffer


def retire_views(views: Sequence[Any]) -> None:
    """Debug mode, at the end of a scope or a step view's life: nothing to do, CuPy
    arrays cannot be invalidated (poisoning shows stale reads)."""


def views_can_be_kept() -> bool:
    """Whether views a plan builds now may be remembered and handed out later: always."""
    return True


def wrap(allocation: Allocation) -> Any:
    """The allocation's CuPy ``uint8`` array.

    A CuPy owner is used as it is. Any other owner (the torch source's ``uint8`` tensor
    when CuPy was not usable as the arena was made) is wrapped without a copy and without
    any CUDA call: ``UnownedMemory`` over its pointer with the device id given, keeping
    the owner alive.
    """
    check_device(allocation.device)
    owner = allocation.owner
    if isinstance(owner, cupy.ndarray):
        return owner
    memory = cupy.cuda.UnownedMemory(
        allocation.ptr, allocation.nbytes, owner, device_id=allocation.device.index
    )
    pointer = cupy.cuda.MemoryPointer(memory, 0)
    return cupy.ndarray((allocation.nbytes,), dtype=cupy.uint8, memptr=pointer)


def typed_views(buffer: Any, layout: Layout) -> list[Any]:
    """CuPy arrays at the layout's offsets, with explicit strides."""
    base = buffer.data
    return [
        cupy.ndarray(
            v.shape,
            dtype=native_dtype(v.dtype),
            memptr=base + v.offset,
            strides=v.byte_strides,
        )
        for v in layout.views
    ]


def fresh_views(views: Sequence[Any]) -> list[Any] | None:
    """``a.view()`` of each prepared view: new array objects, same memory."""
    return list(map(_view, views))


def data_ptr(view: Any) -> int:
    """Device address of the first element."""
    return int(view.data.ptr)


def write_into(view: Any, value: Any) -> Any:
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
