"""A stand-in for the parts of CuPy that arena's CuPy adapter uses, over host memory.

``adapters/cupy.py`` builds its views with ``cupy.ndarray(shape, dtype, memptr, strides)``
over ``MemoryPointer``/``UnownedMemory``, copies with ``view[...] = value`` and
``cupy.asarray``, and reads ``view.data.ptr``. These classes do the same over host bytes,
so the adapter's pointer, shape, stride and dtype arithmetic runs (and is compared with
NumPy's over the same bytes) on machines without a GPU or CuPy.

The stand-in is stricter than CuPy where that catches arena bugs: an array whose bytes
would reach outside its memory raises instead of being made.
"""

from __future__ import annotations

import ctypes
import types
from typing import Any

import numpy as np

__all__ = ["MemoryPointer", "UnownedMemory", "ndarray", "with_arrays"]


class UnownedMemory:
    """``cupy.cuda.UnownedMemory``: ``size`` bytes at ``ptr`` that ``owner`` keeps alive."""

    def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
        self.ptr = int(ptr)
        self.size = int(size)
        self.owner = owner
        self.device_id = device_id


class MemoryPointer:
    """``cupy.cuda.MemoryPointer``: an address inside ``mem``; ``+ n`` moves it ``n`` bytes."""

    def __init__(self, mem: UnownedMemory, offset: int) -> None:
        self.mem = mem
        self.ptr = mem.ptr + int(offset)
        self.device_id = mem.device_id

    def __add__(self, offset: int) -> MemoryPointer:
        if offset.__class__ is not int:
            return NotImplemented
        return MemoryPointer(self.mem, self.ptr - self.mem.ptr + offset)


class ndarray:
    """``cupy.ndarray`` over host bytes: the constructor, ``data``, metadata, ``view()``,
    ``[...] =`` and ``get()``."""

    def __init__(
        self,
        shape: Any,
        dtype: Any = float,
        memptr: MemoryPointer | None = None,
        strides: Any = None,
        order: str = "C",
    ) -> None:
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)
        dtype = np.dtype(dtype)
        if strides is None:  # C order
            strides = tuple(
                int(np.prod(shape[k + 1 :], dtype=np.int64)) * dtype.itemsize
                for k in range(len(shape))
            )
        strides = tuple(int(s) for s in strides)
        if len(strides) != len(shape):
            raise ValueError(f"strides {strides} do not match shape {shape}")
        count = int(np.prod(shape, dtype=np.int64))
        extent = (
            0
            if count == 0
            else dtype.itemsize + sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
        )
        if memptr is None:  # CuPy allocates; here host memory stands in
            host = np.zeros(max(extent, 1), np.uint8)
            memptr = MemoryPointer(UnownedMemory(host.ctypes.data, extent, host, 0), 0)
        start = memptr.ptr - memptr.mem.ptr
        if min(strides, default=0) < 0 or start < 0 or start + extent > memptr.mem.size:
            raise ValueError(
                f"an array of shape {shape}, strides {strides} at byte {start} reaches "
                f"outside its {memptr.mem.size}-byte memory"
            )
        raw: Any = bytearray(0)
        if extent:
            raw = (ctypes.c_uint8 * extent).from_address(memptr.ptr)
        self._host = np.ndarray(shape, dtype, buffer=raw, strides=strides)
        self.data = memptr
        self.shape = shape
        self.dtype = dtype
        self.strides = strides
        self.size = count
        self.ndim = len(shape)
        self.itemsize = dtype.itemsize
        self.nbytes = count * dtype.itemsize

    def view(self) -> ndarray:
        """A new array object over the same memory, with the same metadata."""
        return ndarray(self.shape, self.dtype, self.data, self.strides)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._host[key] = value._host if isinstance(value, ndarray) else value

    def get(self) -> np.ndarray:
        """A host copy (a device-to-host copy in CuPy)."""
        return self._host.copy()


def asarray(value: Any) -> ndarray:
    """``cupy.asarray`` of host data: a new array holding a copy."""
    host = np.ascontiguousarray(value)
    array = ndarray(host.shape, host.dtype)
    array[...] = host
    return array


def with_arrays(cupy: types.ModuleType) -> types.ModuleType:
    """Add the array API above to a stand-in ``cupy`` module (one with ``cupy.cuda``, as
    ``tests.memory.test_cuda_fakes.fake_cupy`` makes it)."""
    cupy.ndarray = ndarray  # type: ignore[attr-defined]
    cupy.asarray = asarray  # type: ignore[attr-defined]
    cupy.uint8 = np.uint8  # type: ignore[attr-defined]
    cupy.__version__ = "0.0-standin"  # type: ignore[attr-defined]
    cupy.cuda.UnownedMemory = UnownedMemory  # type: ignore[attr-defined]
    cupy.cuda.MemoryPointer = MemoryPointer  # type: ignore[attr-defined]
    return cupy
