"""JAX arrays over arena memory, zero-copy through DLPack.

JAX treats imported buffers as immutable. The contract (see docs/jax.md):

* write through another framework's view (NumPy, torch, CuPy) or :func:`write_into`, then
  read in JAX;
* never donate an arena-backed array to a jitted function;
* JAX dispatch is asynchronous: block on results (``jax.block_until_ready``) before the
  next ``get_simultaneous`` on the same slot reuses the bytes.

Importing costs about 30 us per array, so the views a layout needs are imported once per
(slot, layout, buffer) and the very same ``jax.Array`` objects are returned afterwards
(they are immutable, so sharing them is safe). Growth drops them with the old buffer.

Zero-copy is checked on every import: JAX silently copies buffers that are not 64-byte
aligned on CPU and converts 64-bit dtypes when ``jax_enable_x64`` is off. Both raise here
instead.
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from arena.devices import Device
from arena.dtypes import DType
from arena.errors import ArenaError, DTypeError
from arena.layout import Layout
from arena.sources import Allocation

__all__ = [
    "FRAMEWORK",
    "check_device",
    "data_ptr",
    "fresh_views",
    "is_available",
    "native_dtype",
    "typed_views",
    "wrap",
    "write_into",
]

FRAMEWORK = "jax"

#: JAX imports host memory without a copy only at this alignment.
CPU_ZERO_COPY_ALIGNMENT = 64
_SIXTY_FOUR_BIT = {"int64", "uint64", "float64", "complex128"}


def is_available() -> bool:
    """Whether JAX is installed."""
    return importlib.util.find_spec("jax") is not None


def check_device(device: Device) -> None:
    """JAX views host memory (CPU backend) and CUDA memory (through CuPy) alike."""


def native_dtype(dtype: DType) -> Any:
    """The NumPy dtype JAX uses for ``dtype``.

    Raises
    ------
    DTypeError
        For 64-bit dtypes while ``jax_enable_x64`` is off (JAX would silently convert
        them, which is a copy) and for dtypes JAX lacks.
    """
    if dtype.name in _SIXTY_FOUR_BIT and not jax.config.read("jax_enable_x64"):  # type: ignore[no-untyped-call]
        raise DTypeError(
            f"{dtype.name} needs 64-bit mode in JAX: without it JAX silently converts to a "
            "32-bit copy. Enable it with jax.config.update('jax_enable_x64', True) (or "
            "JAX_ENABLE_X64=1) before making arrays, or request a 32-bit dtype"
        )
    from . import numpy as numpy_adapter

    return numpy_adapter.native_dtype(dtype)


def wrap(allocation: Allocation) -> Any:
    """The allocation itself: every view is imported from a typed NumPy or CuPy view."""
    return allocation


def typed_views(buffer: Any, layout: Layout) -> list[Any]:
    """Zero-copy ``jax.Array`` views at the layout's offsets (checked by pointer)."""
    allocation: Allocation = buffer
    owner = allocation.owner
    views: list[Any] = []
    for v in layout.views:
        dtype = native_dtype(v.dtype)
        address = allocation.ptr + v.offset
        if allocation.device.is_cuda:
            import cupy

            source = cupy.ndarray(
                v.shape, dtype=dtype, memptr=owner.data + v.offset, strides=v.byte_strides
            )
        else:
            if address % CPU_ZERO_COPY_ALIGNMENT and v.nbytes:
                raise ArenaError(
                    f"JAX copies host buffers that are not {CPU_ZERO_COPY_ALIGNMENT}-byte "
                    f"aligned; this view sits at offset {v.offset} (arena alignment "
                    f"{layout.alignment}). Construct the arena with alignment>="
                    f"{CPU_ZERO_COPY_ALIGNMENT} for JAX views"
                )
            source = np.ndarray(
                v.shape, dtype=dtype, buffer=owner, offset=v.offset, strides=v.byte_strides
            )
        array = _import(source, v.dtype)
        if v.nbytes and array.unsafe_buffer_pointer() != address:
            raise ArenaError(
                f"JAX copied view #{len(views)} ({v.shape} {v.dtype.name}) instead of "
                f"viewing the arena's memory at {address:#x}; please report this with your "
                f"JAX version ({jax.__version__})"
            )
        views.append(array)
    return views


def _import(source: Any, dtype: DType) -> Any:
    """``jax.dlpack.from_dlpack``; NumPy and CuPy cannot export bfloat16 and float8 through
    DLPack, torch can: those dtypes travel through a zero-copy torch view when torch is
    installed."""
    try:
        return jax.dlpack.from_dlpack(source)
    except BufferError:
        if importlib.util.find_spec("torch") is None:
            raise DTypeError(
                f"JAX can only import {dtype.name} arena views through torch's DLPack export "
                "(NumPy and CuPy have no DLPack code for it): install torch, or request "
                f"'uint{8 * dtype.itemsize}' and use jax.lax.bitcast_convert_type"
            ) from None
        import torch
        from torch.utils.dlpack import from_dlpack

        raw = source.view(np.uint8).reshape(-1) if source.size else source.view(np.uint8)
        tensor = from_dlpack(raw).view(getattr(torch, dtype.name)).reshape(source.shape)
        return jax.dlpack.from_dlpack(tensor)


def fresh_views(views: Sequence[Any]) -> list[Any]:
    """The same immutable ``jax.Array`` objects (a new list)."""
    return list(views)


def data_ptr(view: Any) -> int:
    """Address of the first element."""
    return int(view.unsafe_buffer_pointer())


def write_into(view: Any, value: Any) -> Any:
    """Write ``value`` (e.g. a JAX result) into the arena bytes behind ``view``.

    One copy, straight into the arena memory: no intermediate array. ``value`` is
    blocked on first; ``view`` (immutable in JAX's eyes) then reads the new contents.
    Returns ``view``.
    """
    value = jax.block_until_ready(value)  # type: ignore[no-untyped-call]
    address = int(view.unsafe_buffer_pointer())
    nbytes = int(view.nbytes)
    platform = next(iter(view.devices())).platform
    if platform in {"gpu", "cuda"}:
        import cupy

        device_id = next(iter(view.devices())).id
        memory = cupy.cuda.UnownedMemory(address, nbytes, view, device_id=device_id)
        target = cupy.ndarray(
            view.shape, dtype=view.dtype, memptr=cupy.cuda.MemoryPointer(memory, 0)
        )
        if isinstance(value, jax.Array):
            target[...] = cupy.from_dlpack(value)
        else:
            target[...] = cupy.asarray(value)
        cupy.cuda.get_current_stream().synchronize()
        return view
    if nbytes == 0:
        return view
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
    target = raw.view(view.dtype).reshape(view.shape)
    np.copyto(target, np.asarray(value), casting="same_kind")
    return view
