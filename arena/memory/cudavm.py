"""The fixed-address CUDA source (``source="virtual"`` on a GPU): CUDA's virtual memory calls.

Each block is an address range from ``cuMemAddressReserve``; growth creates physical memory
for the new part (``cuMemCreate``), maps it at the range's next bytes (``cuMemMap``) and
makes it readable and writable from the device (``cuMemSetAccess``), all at the device's
allocation granularity (``cuMemGetAllocationPropertiesGranularity``, about 2 MiB). Sleep
unmaps and releases the physical memory (``cuMemUnmap``, ``cuMemRelease``) after the
streams that used it are done, keeping the range; wake creates, maps and sets access again
at the same addresses. When no view holds a block any more its range is unmapped, its
memory released and its addresses freed (``cuMemAddressFree``).

The driver layer (:mod:`arena.memory.cudadriver`) is a handful of calls, made through
NVIDIA's ``cuda.bindings.driver`` where cuda-python is installed (``pip install -e
".[cuda-python]"``), else through ``ctypes`` over ``libcuda.so.1`` (the GPU
machines arena is checked on have no cuda-python and no network).

Both make the context explicit: the device's primary context is retained
(``cuDevicePrimaryCtxRetain``, the one CuPy and torch use) and made current around every
call, so a mapping never lands in another context (vLLM's cumem allocator reports
context mismatches with both bindings). Tests drive :class:`VirtualCudaSource` with a
recording fake of the driver layer that checks the order of the calls.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from arena.memory.cudadriver import Driver, load_driver
from arena.memory.devices import Device
from arena.memory.sources import Allocation, reserved_range

__all__ = ["VirtualCudaSource", "cuda_reserve_default"]


def cuda_reserve_default(driver: Driver, device: int) -> int:
    """Bytes of address space a CUDA slot reserves by default: the device's memory."""
    return driver.total_memory(device)


class _Range:
    """One reserved range: its chunks of mapped physical memory, as (offset, size, handle),
    and the handles unmapped whose release failed or was interrupted (released later)."""

    __slots__ = ("__weakref__", "chunks", "committed", "evicted", "loose", "ptr", "size")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr = ptr
        self.size = size
        self.committed = 0
        self.chunks: list[tuple[int, int, int]] = []
        self.loose: list[int] = []
        self.evicted = False


class VirtualCudaSource:
    """CUDA memory at fixed addresses: a :class:`~arena.memory.sources.FixedAddressSource`.

    Parameters
    ----------
    device : Device
        A CUDA device.
    reserve : int, optional
        Bytes of address space each growable block reserves (a slot's scratch); default
        the arena's ``max_bytes``, else the device's total memory.
    driver : Driver, optional
        The driver layer; default :func:`load_driver`.
    wrap : callable, optional
        ``wrap(ptr, nbytes, keeper, device)`` -> the allocation's owner array; default a
        CuPy array where CuPy sees the device, else a torch tensor. ``keeper`` must stay
        referenced by the owner: the range is unmapped and freed once it is collected.
    events : StreamEvents, optional
        Stream-ordered release; default CuPy's or torch's events on the current streams
        (:func:`arena.memory.deferred.stream_events`).
    """

    def __init__(
        self,
        device: Device,
        reserve: int | None = None,
        *,
        driver: Driver | None = None,
        wrap: Callable[[int, int, Any, Device], Any] | None = None,
        events: Any = None,
    ) -> None:
        self._device = device
        self.driver = driver if driver is not None else load_driver()
        self._wrap = wrap if wrap is not None else _wrap_device_memory
        self.context = self.driver.retain(device.index)
        self.driver.push(self.context)
        self.granularity = self.driver.granularity(device.index)
        size = reserve if reserve is not None else cuda_reserve_default(self.driver, device.index)
        self.reserve_bytes = self._round(size)
        self._ranges: dict[int, _Range] = {}
        self._guard = threading.Lock()
        self._events = events

    @property
    def device(self) -> Device:
        """The CUDA device."""
        return self._device

    def stream_events(self) -> Any:
        """Stream-ordered release: the ``events`` given, else CuPy's (where CuPy sees the
        device) or torch's events on the current streams."""
        if self._events is not None:
            return self._events
        from arena.memory.deferred import stream_events

        return stream_events(self._device)

    # ------------------------------------------------------------------ MemorySource
    def allocate(self, nbytes: int) -> Allocation:
        """``nbytes`` at fixed addresses (a range of exactly the rounded size)."""
        return self._make(nbytes, self._round(nbytes))

    def release(self, allocation: Allocation) -> None:
        """Forget the block: its range goes once no view holds it."""
        with self._guard:
            self._ranges.pop(allocation.ptr, None)

    # ------------------------------------------------------------------ FixedAddressSource
    def reserve(self, nbytes: int) -> Allocation:
        """``nbytes`` mapped at the start of a range of the source's reservation."""
        return self._make(nbytes, max(self._round(nbytes), self.reserve_bytes))

    def commit(self, allocation: Allocation, nbytes: int) -> Allocation:
        """Map physical memory for the range's next bytes up to ``nbytes``."""
        space = self._range(allocation)
        if nbytes > space.size:
            raise MemoryError(
                f"{nbytes} bytes do not fit the {space.size} bytes of address space reserved "
                "at this block; give the arena a larger max_bytes (the reservation)"
            )
        end = self._round(nbytes)
        if end > space.committed:
            self._map(space, space.committed, end - space.committed)
            space.committed = end
        return Allocation(space.ptr, nbytes, self._owner(space, nbytes), self._device)

    def reserved(self, allocation: Allocation) -> int:
        """Bytes of address space reserved for ``allocation``."""
        return self._range(allocation).size

    def settle(self) -> None:
        """Wait for the work queued in the context (before memory is unmapped)."""
        self.driver.push(self.context)
        self.driver.synchronize()

    def evict(self, allocation: Allocation) -> None:
        """Unmap and release the block's physical memory; the range stays reserved."""
        space = self._range(allocation)
        if not space.evicted:
            # Marked first: a release an interrupt splits is finished by restore().
            space.evicted = True
            _unmap(self.driver, self.context, space)

    def restore(self, allocation: Allocation) -> None:
        """Create, map and set access for the committed bytes again, at the same address."""
        space = self._range(allocation)
        if space.evicted:
            _unmap(self.driver, self.context, space)  # what a split evict() left mapped
            self._map(space, 0, space.committed)
            space.evicted = False

    def offload(self, allocation: Allocation) -> Any:
        """A copy of the block's bytes in pinned host memory (``cupyx``/torch pinned
        arrays where available, else ordinary NumPy memory)."""
        import numpy as np

        copy = _pinned(allocation.nbytes)
        if copy is None:
            copy = np.empty(allocation.nbytes, dtype=np.uint8)
        self.driver.push(self.context)
        self.driver.copy_to_host(int(copy.ctypes.data), allocation.ptr, allocation.nbytes)
        return copy

    def upload(self, allocation: Allocation, copy: Any) -> None:
        """Write the copy back (synchronous)."""
        self.driver.push(self.context)
        self.driver.copy_to_device(allocation.ptr, int(copy.ctypes.data), len(copy))

    def fill(self, allocation: Allocation, byte: int) -> None:
        """``cuMemsetD8`` over every committed byte of the block's range: all that
        :meth:`evict` discarded, the bytes past a block cut for the books included."""
        space = self._range(allocation)
        self.driver.push(self.context)
        self.driver.memset(space.ptr, byte, space.committed)
        self.driver.synchronize()

    def __repr__(self) -> str:
        return f"VirtualCudaSource({str(self._device)!r}, reserve={self.reserve_bytes})"

    # ------------------------------------------------------------------ internals
    def _round(self, nbytes: int) -> int:
        step = self.granularity
        return max(step, -(-nbytes // step) * step)

    def _make(self, nbytes: int, size: int) -> Allocation:
        driver = self.driver
        driver.push(self.context)
        ptr = driver.address_reserve(size, self.granularity)
        space = _Range(ptr, size)
        try:
            end = self._round(nbytes)
            self._map(space, 0, end)
            space.committed = end
        except BaseException:
            driver.address_free(ptr, size)
            raise
        # When no owner array holds the range any more: unmap, release, free addresses.
        weakref.finalize(
            space, _free, driver, self.context, ptr, size, chunks=space.chunks, loose=space.loose
        )
        with self._guard:
            self._ranges[ptr] = space
        return Allocation(ptr, nbytes, self._owner(space, nbytes), self._device)

    def _map(self, space: _Range, offset: int, size: int) -> None:
        """One chunk of physical memory mapped at ``offset``; nothing stays half done."""
        driver = self.driver
        index = self._device.index
        driver.push(self.context)
        if space.evicted or offset == 0:
            space.chunks.clear()
        handle = driver.create(size, index)
        try:
            driver.map(space.ptr + offset, size, handle)
        except BaseException:
            driver.release(handle)
            raise
        try:
            driver.set_access(space.ptr + offset, size, index)
        except BaseException:
            driver.unmap(space.ptr + offset, size)
            driver.release(handle)
            raise
        space.chunks.append((offset, size, handle))

    def _owner(self, space: _Range, nbytes: int) -> Any:
        return self._wrap(space.ptr, nbytes, space, self._device)

    def _range(self, allocation: Allocation) -> _Range:
        return reserved_range(self._ranges, self._guard, allocation, self)


def _unmap(driver: Driver, context: Any, space: _Range) -> None:
    """Unmap and release every chunk, each forgotten once unmapped: an interrupt leaves
    the list naming exactly the chunks still mapped (a handle released late at worst)."""
    driver.push(context)
    chunks = space.chunks
    _release_loose(driver, space.loose)
    while chunks:
        offset, size, _ = chunks[-1]
        driver.unmap(space.ptr + offset, size)
        space.loose.append(chunks.pop()[2])
        _release_loose(driver, space.loose)


def _release_loose(driver: Driver, loose: list[int]) -> None:
    """Release the handles unmapped but not released yet, each forgotten once released."""
    while loose:
        driver.release(loose[-1])
        loose.pop()


def _free(
    driver: Driver,
    context: Any,
    ptr: int,
    size: int,
    *,
    chunks: list[tuple[int, int, int]],
    loose: list[int],
) -> None:
    """Finalizer of a range: every chunk unmapped and released, then the addresses."""
    driver.push(context)
    _release_loose(driver, loose)
    for offset, length, handle in chunks:
        driver.unmap(ptr + offset, length)
        driver.release(handle)
    chunks.clear()
    driver.address_free(ptr, size)


def _pinned(nbytes: int) -> Any:
    """A pinned NumPy array of ``nbytes`` from CuPy, or None where CuPy is missing."""
    import importlib

    try:
        cupyx = importlib.import_module("cupyx")
    except ImportError:
        return None
    import numpy as np

    return cupyx.empty_pinned((nbytes,), dtype=np.uint8)


def _wrap_device_memory(ptr: int, nbytes: int, keeper: Any, device: Device) -> Any:
    """A CuPy array over the range where CuPy sees the device, else a torch tensor; each
    keeps ``keeper`` (the range) alive."""
    from arena.memory.devices import cupy_device_count

    if cupy_device_count() > device.index:
        import cupy

        memory = cupy.cuda.UnownedMemory(ptr, nbytes, keeper, device_id=device.index)
        return cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))
    import torch

    return torch.as_tensor(_Interface(ptr, nbytes, keeper), device=f"cuda:{device.index}")


class _Interface:
    """``__cuda_array_interface__`` over the range, for torch (which keeps the object)."""

    def __init__(self, ptr: int, nbytes: int, keeper: Any) -> None:
        self.keeper = keeper
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
        }
