"""CUDA memory sources (imported only when a CUDA or pinned arena is made). The check that
refuses memory work while a CUDA graph is being captured lives in :mod:`arena.memory.capture`;
its :func:`capture_probe` and :func:`check_not_capturing` are importable from here too.

=============  ==========================================  ==================================
name           memory                                      released memory goes
=============  ==========================================  ==================================
``"device"``   ``cupy.cuda.Memory`` (direct cudaMalloc)    back to the driver (cudaFree)
``"pool"``     CuPy's current allocator (MemoryPool, ...)  back to that pool (pool keeps it)
``"torch"``    torch's caching allocator                   back to torch's cache
``"pinned"``   ``cupy.cuda.PinnedMemory`` (cudaHostAlloc,  back to the driver (cudaFreeHost)
               portable)
=============  ==========================================  ==================================

``"device"``, ``"pool"`` and ``"pinned"`` need CuPy; ``"torch"`` needs torch only. Every
allocation happens with the arena's device current, whatever device the caller has made
current. ``allocation.owner`` is a CuPy ``uint8`` array for device memory when CuPy is
installed and sees the device, a torch ``uint8`` CUDA tensor for the torch source without
CuPy, and a NumPy ``uint8`` array for pinned host memory.

Stream order: the pool and torch sources release in stream order
(:mod:`arena.memory.deferred`): a released block is held until events recorded on the
streams that used it have completed, so a caching allocator cannot hand out a block that a
kernel still uses, and the host never waits for the whole device. The device source needs
none of it: ``cudaFree`` itself waits for the device (CUDA's rule).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from arena.errors import ConfigError, DeviceUnavailableError
from arena.memory.capture import capture_error, capture_probe, check_not_capturing, is_capture_error
from arena.memory.deferred import CupyEvents, StreamEvents, stream_events
from arena.memory.devices import (
    CPU,
    Device,
    cuda_device_count,
    cuda_unavailable_reason,
    cupy_device_count,
    torch_device_count,
)
from arena.memory.sources import Allocation, MemorySource

__all__ = [
    "CUDA_SOURCES",
    "DeviceSource",
    "PinnedSource",
    "PoolSource",
    "TorchSource",
    "capture_probe",
    "check_not_capturing",
    "cuda_source",
    "refuse_missing_ordinal",
    "require_cuda",
    "require_torch_cuda",
]

#: Names accepted by ``Arena(source=...)`` for CUDA arenas.
CUDA_SOURCES = ("device", "pool", "torch")

#: cudaErrorMemoryAllocation: what a direct cudaMalloc or cudaHostAlloc reports when full.
_CUDA_ERROR_MEMORY_ALLOCATION = 2


def require_cuda(device: Device) -> Any:
    """Import CuPy and check that ``device`` exists; return the ``cupy`` module.

    Raises
    ------
    DeviceUnavailableError
        Saying which CuPy package to install, or to use the host device.
    """
    if importlib.util.find_spec("cupy") is None:
        count = cuda_device_count()  # torch's, without CuPy
        if count == 0:
            raise DeviceUnavailableError(
                f"{device} is not available: no CUDA device is visible here "
                f"({cuda_unavailable_reason()}). Use device='cpu' (or device=None, which "
                "picks the host when there is no GPU) for a host arena; on a machine with a "
                "GPU, install CuPy: pip install cupy-cuda12x (CUDA 12) or "
                "cupy-cuda13x (CUDA 13)"
            )
        # A GPU is visible (torch sees it), not this ordinal: say which ones exist.
        refuse_missing_ordinal(device, count, "is not available: torch sees")
        raise DeviceUnavailableError(
            f"a {device} arena with this source needs CuPy: pip install cupy-cuda12x "
            "(CUDA 12) or cupy-cuda13x (CUDA 13), use source='torch' (torch sees the GPU), "
            "or use device='cpu' for a host arena"
        )
    refuse_missing_ordinal(device, cupy_device_count(), "is not available: CuPy sees")
    import cupy

    return cupy


def refuse_missing_ordinal(device: Device, count: int, seen: str) -> None:
    """Raise :class:`DeviceUnavailableError` when ``device``'s ordinal is not below
    ``count``, the number of CUDA devices a framework sees (``seen`` says who, as the
    message reads: "is not available: CuPy sees"), with why none is usable and the
    ordinals that are."""
    if device.index >= count:
        raise DeviceUnavailableError(
            f"{device} {seen} {count} CUDA device(s)"
            + (f" ({cuda_unavailable_reason()})" if cuda_device_count() == 0 else "")
            + "; use device='cpu' for a host arena"
            + (f" or an ordinal below {count}" if count else "")
        )


def require_torch_cuda(device: Device) -> Any:
    """Import torch and check that it sees ``device``; return the ``torch`` module.

    Raises
    ------
    DeviceUnavailableError
        Saying to install torch, or which ordinals torch sees.
    """
    if importlib.util.find_spec("torch") is None:
        raise DeviceUnavailableError(
            f"source='torch' on {device} needs torch: pip install torch (a CUDA build), "
            "or use source='device' with CuPy"
        )
    refuse_missing_ordinal(device, torch_device_count(), "is not available to torch: torch sees")
    import torch

    return torch


@contextmanager
def _out_of_memory_as_memory_error(
    device: Device | None = None, what: str = "memory work"
) -> Iterator[None]:
    """Report out-of-memory as ``MemoryError`` and capture collisions as GraphCaptureError.

    A direct ``cupy.cuda.Memory`` raises ``CUDARuntimeError`` and torch
    ``torch.OutOfMemoryError`` (a ``RuntimeError``); the arena turns ``MemoryError`` into
    ``ArenaOutOfMemoryError``. A call refused because a capture is under way (such as a
    global-mode capture on another thread) becomes :class:`~arena.errors.GraphCaptureError`.
    """
    try:
        yield
    except MemoryError:
        raise
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status == _CUDA_ERROR_MEMORY_ALLOCATION or type(exc).__name__ == "OutOfMemoryError":
            raise MemoryError(str(exc)) from exc
        if is_capture_error(exc):
            where = device if device is not None else Device("cuda", 0)
            raise capture_error(where, what, f"a CUDA graph capture refused it ({exc})") from exc
        raise


def cuda_source(device: Device, kind: str) -> MemorySource:
    """The built-in CUDA source called ``kind`` for ``device``."""
    if kind not in CUDA_SOURCES:
        raise ConfigError(
            f"unknown CUDA source {kind!r}; choose one of {', '.join(CUDA_SOURCES)} or pass a "
            "MemorySource object"
        )
    if kind == "device":
        return DeviceSource(device)
    if kind == "pool":
        return PoolSource(device)
    return TorchSource(device)


def _cupy_allocation(cupy: Any, pointer: Any, nbytes: int, device: Device) -> Allocation:
    array = cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=pointer)
    return Allocation(int(pointer.ptr), nbytes, array, device)


class _CupySource:
    """Shared plumbing of the CuPy sources: the device and CuPy."""

    def __init__(self, device: Device) -> None:
        self._cupy = require_cuda(device)
        self._device = device

    @property
    def device(self) -> Device:
        """The CUDA device."""
        return self._device

    def release(self, allocation: Allocation) -> None:
        """Nothing to do: CuPy frees the memory once the last view of it is gone."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._device)!r})"


class DeviceSource(_CupySource):
    """Direct ``cudaMalloc`` through ``cupy.cuda.Memory``, bypassing CuPy's pool.

    Releasing a slot buffer returns its memory to the driver (once no view holds it), so
    growth from N to 2N never holds more than 2N. cudaFree synchronises the device, so no
    kernel still uses a block when it goes back.
    """

    def allocate(self, nbytes: int) -> Allocation:
        """cudaMalloc ``nbytes`` on the arena's device."""
        cupy = self._cupy
        with (
            cupy.cuda.Device(self._device.index),
            _out_of_memory_as_memory_error(self._device, "cudaMalloc"),
        ):
            memory = cupy.cuda.Memory(nbytes)
        pointer = cupy.cuda.MemoryPointer(memory, 0)
        return _cupy_allocation(cupy, pointer, nbytes, self._device)


class PoolSource(_CupySource):
    """CuPy's current allocator (``MemoryPool``, ``MemoryAsyncPool``, RMM, ...).

    Keeps a user's allocator setup; the trade-off is that the pool keeps released blocks
    cached, so growth can hold old + new until the pool is trimmed.
    """

    def allocate(self, nbytes: int) -> Allocation:
        """Allocate ``nbytes`` from CuPy's current allocator on the arena's device."""
        cupy = self._cupy
        with (
            cupy.cuda.Device(self._device.index),
            _out_of_memory_as_memory_error(self._device, "allocation"),
        ):
            pointer = cupy.cuda.alloc(nbytes)
        return _cupy_allocation(cupy, pointer, nbytes, self._device)

    def stream_events(self) -> StreamEvents:
        """Release in stream order: the pool reuses a freed block at once on its
        allocating stream, without waiting for work other streams queued on it, so the
        ledger holds a released block until events on its streams have completed."""
        return CupyEvents(self._device)


class TorchSource:
    """Memory from torch's caching allocator, so torch's memory statistics see it.

    Needs torch only. torch's cache is emptied before each allocation (as vLLM does), so
    the block released by growth goes back to the driver. ``allocation.owner`` is a CuPy
    array over the tensor where CuPy sees the device, else the ``torch.uint8`` tensor.
    """

    def __init__(self, device: Device) -> None:
        self._torch = require_torch_cuda(device)
        self._device = device
        self._cupy: Any = None
        if importlib.util.find_spec("cupy") is not None and cupy_device_count() > device.index:
            self._cupy = importlib.import_module("cupy")

    @property
    def device(self) -> Device:
        """The CUDA device."""
        return self._device

    def allocate(self, nbytes: int) -> Allocation:
        """``torch.empty(nbytes, uint8)`` on the arena's device."""
        torch = self._torch
        torch.cuda.empty_cache()
        with _out_of_memory_as_memory_error(self._device, "torch.empty"):
            tensor = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{self._device.index}")
        cupy = self._cupy
        if cupy is None:
            return Allocation(int(tensor.data_ptr()), nbytes, tensor, self._device)
        memory = cupy.cuda.UnownedMemory(
            tensor.data_ptr(), nbytes, tensor, device_id=self._device.index
        )
        return _cupy_allocation(cupy, cupy.cuda.MemoryPointer(memory, 0), nbytes, self._device)

    def release(self, allocation: Allocation) -> None:
        """Nothing to do: torch's cache takes the block back once the last view is gone
        (the ledger calls this only after the block's streams are done with it)."""

    def stream_events(self) -> StreamEvents:
        """Release in stream order: torch's cache reuses a freed block at once on its
        allocating stream, unaware of other streams that still use it."""
        return stream_events(self._device)

    def __repr__(self) -> str:
        return f"TorchSource({str(self._device)!r})"


class PinnedSource:
    """Page-locked host memory (``cudaHostAlloc``) for staging arenas.

    Allocated with ``cudaHostAllocPortable`` (as CuPy's own pinned allocator does), so it
    counts as pinned for every CUDA context, not only the allocating device's. Views are
    host views (NumPy, torch CPU tensors) whose copies to and from the GPU can run
    asynchronously.
    """

    def __init__(self, device_index: int = 0) -> None:
        try:
            self._cupy = require_cuda(Device("cuda", device_index))
        except DeviceUnavailableError as exc:
            if cuda_device_count() > 0:
                raise  # a GPU is there: the message says what to install, or which ordinals exist
            raise DeviceUnavailableError(  # page-locking host memory is a CUDA call
                f"source='pinned' (page-locked host memory, for fast copies to and from a "
                f"GPU) needs CUDA, and no CUDA device is visible here "
                f"({cuda_unavailable_reason()}); without a GPU use the default host source "
                "(Arena('cpu'), source='host')"
            ) from exc
        self._index = device_index

    @property
    def device(self) -> Device:
        """Pinned memory is host memory."""
        return CPU

    def allocate(self, nbytes: int) -> Allocation:
        """cudaHostAlloc ``nbytes`` (page aligned, portable)."""
        import numpy as np

        cupy = self._cupy
        flags = cupy.cuda.runtime.hostAllocPortable
        device = Device("cuda", self._index)
        with cupy.cuda.Device(self._index), _out_of_memory_as_memory_error(device, "cudaHostAlloc"):
            memory = cupy.cuda.PinnedMemory(nbytes, flags)
        pointer = cupy.cuda.PinnedMemoryPointer(memory, 0)
        array = np.frombuffer(pointer, dtype=np.uint8, count=nbytes)
        return Allocation(int(pointer.ptr), nbytes, array, CPU)

    def release(self, allocation: Allocation) -> None:
        """Nothing to do: freed once the last view of it is gone."""

    def __repr__(self) -> str:
        return "PinnedSource()"
