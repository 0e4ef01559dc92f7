"""The CUDA driver layer of the fixed-address CUDA source (:mod:`arena.memory.cudavm`).

:class:`Driver` is the handful of driver calls the source makes, with plain ints for
pointers and handles. :func:`load_driver` picks NVIDIA's maintained binding
(``cuda.bindings.driver`` from cuda-python, the ``cuda-python`` extra) where it is
installed, else :class:`CtypesDriver`, the same calls through ``ctypes`` over
``libcuda.so.1`` (the GPU machines arena is checked on have no cuda-python and no
network, so the fallback is what runs there). Out of memory is ``MemoryError``; any other
failed call is :class:`~arena.errors.ArenaError` naming the call and CUDA's error name.
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

from arena.errors import ArenaError

__all__ = ["BindingsDriver", "CtypesDriver", "Driver", "load_driver"]

#: CUDA_ERROR_OUT_OF_MEMORY: what the driver reports when physical memory is exhausted.
_OUT_OF_MEMORY = 2


class Driver(Protocol):
    """The CUDA driver calls the fixed-address source makes (``ptr``/``handle`` are ints).

    Every call is made with the device's primary context current (:meth:`push`).
    """

    def retain(self, device: int) -> Any:
        """``cuInit`` and ``cuDevicePrimaryCtxRetain``: the device's primary context."""
        ...

    def push(self, context: Any) -> None:
        """``cuCtxSetCurrent(context)``."""
        ...

    def granularity(self, device: int) -> int:
        """The minimum allocation granularity of pinned device memory on ``device``."""
        ...

    def total_memory(self, device: int) -> int:
        """``cuDeviceTotalMem``."""
        ...

    def address_reserve(self, size: int, alignment: int) -> int:
        """``cuMemAddressReserve``: a range of ``size`` bytes."""
        ...

    def address_free(self, ptr: int, size: int) -> None:
        """``cuMemAddressFree``."""
        ...

    def create(self, size: int, device: int) -> int:
        """``cuMemCreate``: physical memory on ``device``; raises MemoryError when full."""
        ...

    def release(self, handle: int) -> None:
        """``cuMemRelease``."""
        ...

    def map(self, ptr: int, size: int, handle: int) -> None:
        """``cuMemMap`` of ``handle`` at ``ptr``."""
        ...

    def unmap(self, ptr: int, size: int) -> None:
        """``cuMemUnmap``."""
        ...

    def set_access(self, ptr: int, size: int, device: int) -> None:
        """``cuMemSetAccess``: read and write from ``device``."""
        ...

    def synchronize(self) -> None:
        """``cuCtxSynchronize``: the work queued in the context is done."""
        ...

    def memset(self, ptr: int, byte: int, size: int) -> None:
        """``cuMemsetD8``."""
        ...

    def copy_to_host(self, host: int, ptr: int, size: int) -> None:
        """``cuMemcpyDtoH``."""
        ...

    def copy_to_device(self, ptr: int, host: int, size: int) -> None:
        """``cuMemcpyHtoD``."""
        ...


def load_driver() -> Driver:
    """NVIDIA's ``cuda.bindings.driver`` where installed, else the ctypes layer."""
    try:
        from cuda.bindings import driver as bindings  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return CtypesDriver()
    return BindingsDriver(bindings)


# --------------------------------------------------------------------------- ctypes
_ATTR_GRANULARITY_MINIMUM = 0
_LOCATION_TYPE_DEVICE = 1
_ALLOCATION_TYPE_PINNED = 1
_ACCESS_READ_WRITE = 3


class _Location(ctypes.Structure):
    _fields_ = (("type", ctypes.c_int), ("id", ctypes.c_int))


class _AllocFlags(ctypes.Structure):
    _fields_ = (
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    )


class _AllocProp(ctypes.Structure):
    _fields_ = (
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    )


class _AccessDesc(ctypes.Structure):
    _fields_ = (("location", _Location), ("flags", ctypes.c_int))


class CtypesDriver:
    """The :class:`Driver` calls through ``ctypes`` over ``libcuda.so.1``.

    Raises
    ------
    ArenaError
        Where the driver library cannot be loaded.
    """

    def __init__(self, library: str = "libcuda.so.1") -> None:
        try:
            self._cuda = ctypes.CDLL(library)
        except OSError as exc:
            raise ArenaError(
                f"source='virtual' on CUDA needs the CUDA driver ({library}): {exc}. Install "
                "the NVIDIA driver, or use another source"
            ) from exc
        self._check(self._cuda.cuInit(0), "cuInit")

    def _check(self, status: int, call: str) -> None:
        if status == 0:
            return
        name = ctypes.c_char_p()
        self._cuda.cuGetErrorName(status, ctypes.byref(name))
        text = f"{call} failed: {(name.value or b'?').decode()} ({status})"
        if status == _OUT_OF_MEMORY:
            raise MemoryError(text)
        raise ArenaError(text)

    def retain(self, device: int) -> Any:
        handle = ctypes.c_int()
        self._check(self._cuda.cuDeviceGet(ctypes.byref(handle), device), "cuDeviceGet")
        context = ctypes.c_void_p()
        self._check(
            self._cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle),
            "cuDevicePrimaryCtxRetain",
        )
        return context

    def push(self, context: Any) -> None:
        self._check(self._cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    def _prop(self, device: int) -> _AllocProp:
        prop = _AllocProp()
        prop.type = _ALLOCATION_TYPE_PINNED
        prop.location = _Location(_LOCATION_TYPE_DEVICE, device)
        return prop

    def granularity(self, device: int) -> int:
        size = ctypes.c_size_t()
        prop = self._prop(device)
        self._check(
            self._cuda.cuMemGetAllocationGranularity(
                ctypes.byref(size), ctypes.byref(prop), _ATTR_GRANULARITY_MINIMUM
            ),
            "cuMemGetAllocationGranularity",
        )
        return int(size.value)

    def total_memory(self, device: int) -> int:
        size = ctypes.c_size_t()
        self._check(self._cuda.cuDeviceTotalMem_v2(ctypes.byref(size), device), "cuDeviceTotalMem")
        return int(size.value)

    def address_reserve(self, size: int, alignment: int) -> int:
        ptr = ctypes.c_uint64()
        self._check(
            self._cuda.cuMemAddressReserve(
                ctypes.byref(ptr),
                ctypes.c_size_t(size),
                ctypes.c_size_t(alignment),
                ctypes.c_uint64(0),
                ctypes.c_ulonglong(0),
            ),
            "cuMemAddressReserve",
        )
        return int(ptr.value)

    def address_free(self, ptr: int, size: int) -> None:
        self._check(
            self._cuda.cuMemAddressFree(ctypes.c_uint64(ptr), ctypes.c_size_t(size)),
            "cuMemAddressFree",
        )

    def create(self, size: int, device: int) -> int:
        handle = ctypes.c_uint64()
        prop = self._prop(device)
        self._check(
            self._cuda.cuMemCreate(
                ctypes.byref(handle),
                ctypes.c_size_t(size),
                ctypes.byref(prop),
                ctypes.c_ulonglong(0),
            ),
            "cuMemCreate",
        )
        return int(handle.value)

    def release(self, handle: int) -> None:
        self._check(self._cuda.cuMemRelease(ctypes.c_uint64(handle)), "cuMemRelease")

    def map(self, ptr: int, size: int, handle: int) -> None:
        self._check(
            self._cuda.cuMemMap(
                ctypes.c_uint64(ptr),
                ctypes.c_size_t(size),
                ctypes.c_size_t(0),
                ctypes.c_uint64(handle),
                ctypes.c_ulonglong(0),
            ),
            "cuMemMap",
        )

    def unmap(self, ptr: int, size: int) -> None:
        self._check(
            self._cuda.cuMemUnmap(ctypes.c_uint64(ptr), ctypes.c_size_t(size)), "cuMemUnmap"
        )

    def set_access(self, ptr: int, size: int, device: int) -> None:
        desc = _AccessDesc(_Location(_LOCATION_TYPE_DEVICE, device), _ACCESS_READ_WRITE)
        self._check(
            self._cuda.cuMemSetAccess(
                ctypes.c_uint64(ptr), ctypes.c_size_t(size), ctypes.byref(desc), ctypes.c_size_t(1)
            ),
            "cuMemSetAccess",
        )

    def synchronize(self) -> None:
        self._check(self._cuda.cuCtxSynchronize(), "cuCtxSynchronize")

    def memset(self, ptr: int, byte: int, size: int) -> None:
        self._check(
            self._cuda.cuMemsetD8_v2(
                ctypes.c_uint64(ptr), ctypes.c_ubyte(byte), ctypes.c_size_t(size)
            ),
            "cuMemsetD8",
        )

    def copy_to_host(self, host: int, ptr: int, size: int) -> None:
        self._check(
            self._cuda.cuMemcpyDtoH_v2(
                ctypes.c_void_p(host), ctypes.c_uint64(ptr), ctypes.c_size_t(size)
            ),
            "cuMemcpyDtoH",
        )

    def copy_to_device(self, ptr: int, host: int, size: int) -> None:
        self._check(
            self._cuda.cuMemcpyHtoD_v2(
                ctypes.c_uint64(ptr), ctypes.c_void_p(host), ctypes.c_size_t(size)
            ),
            "cuMemcpyHtoD",
        )


# --------------------------------------------------------------------------- cuda-python
class BindingsDriver:
    """The :class:`Driver` calls through NVIDIA's ``cuda.bindings.driver``."""

    def __init__(self, bindings: Any) -> None:
        self._cu = bindings
        self._check(bindings.cuInit(0), "cuInit")

    def _check(self, result: Any, call: str) -> Any:
        status, *values = result if isinstance(result, tuple) else (result,)
        if int(status) != 0:
            text = f"{call} failed: {status!r}"
            if int(status) == _OUT_OF_MEMORY:
                raise MemoryError(text)
            raise ArenaError(text)
        return values[0] if values else None

    def _prop(self, device: int) -> Any:
        cu = self._cu
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device
        return prop

    def retain(self, device: int) -> Any:
        handle = self._check(self._cu.cuDeviceGet(device), "cuDeviceGet")
        return self._check(self._cu.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")

    def push(self, context: Any) -> None:
        self._check(self._cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    def granularity(self, device: int) -> int:
        cu = self._cu
        option = cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
        return int(
            self._check(
                cu.cuMemGetAllocationGranularity(self._prop(device), option),
                "cuMemGetAllocationGranularity",
            )
        )

    def total_memory(self, device: int) -> int:
        return int(self._check(self._cu.cuDeviceTotalMem(device), "cuDeviceTotalMem"))

    def address_reserve(self, size: int, alignment: int) -> int:
        return int(
            self._check(self._cu.cuMemAddressReserve(size, alignment, 0, 0), "cuMemAddressReserve")
        )

    def address_free(self, ptr: int, size: int) -> None:
        self._check(self._cu.cuMemAddressFree(ptr, size), "cuMemAddressFree")

    def create(self, size: int, device: int) -> int:
        return int(self._check(self._cu.cuMemCreate(size, self._prop(device), 0), "cuMemCreate"))

    def release(self, handle: int) -> None:
        self._check(self._cu.cuMemRelease(handle), "cuMemRelease")

    def map(self, ptr: int, size: int, handle: int) -> None:
        self._check(self._cu.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap")

    def unmap(self, ptr: int, size: int) -> None:
        self._check(self._cu.cuMemUnmap(ptr, size), "cuMemUnmap")

    def set_access(self, ptr: int, size: int, device: int) -> None:
        cu = self._cu
        desc = cu.CUmemAccessDesc()
        desc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = device
        desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self._check(cu.cuMemSetAccess(ptr, size, [desc], 1), "cuMemSetAccess")

    def synchronize(self) -> None:
        self._check(self._cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def memset(self, ptr: int, byte: int, size: int) -> None:
        self._check(self._cu.cuMemsetD8(ptr, byte, size), "cuMemsetD8")

    def copy_to_host(self, host: int, ptr: int, size: int) -> None:
        self._check(self._cu.cuMemcpyDtoH(host, ptr, size), "cuMemcpyDtoH")

    def copy_to_device(self, ptr: int, host: int, size: int) -> None:
        self._check(self._cu.cuMemcpyHtoD(ptr, host, size), "cuMemcpyHtoD")
