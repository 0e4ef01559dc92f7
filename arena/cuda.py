"""CUDA memory sources through CuPy (imported only when a CUDA or pinned arena is made).

=============  ==========================================  ==================================
name           memory                                      released memory goes
=============  ==========================================  ==================================
``"device"``   ``cupy.cuda.Memory`` (direct cudaMalloc)    back to the driver (cudaFree)
``"pool"``     CuPy's current allocator (MemoryPool, ...)  back to that pool (pool keeps it)
``"torch"``    torch's caching allocator                   back to torch's cache
``"pinned"``   ``cupy.cuda.PinnedMemory`` (cudaHostAlloc)  back to the driver (cudaFreeHost)
=============  ==========================================  ==================================

Every allocation happens with the arena's device current, whatever device the caller has
made current. ``allocation.owner`` is a CuPy ``uint8`` array for device memory and a NumPy
``uint8`` array for pinned host memory.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .devices import CPU, Device, cuda_device_count
from .errors import ConfigError, DeviceUnavailableError, GraphCaptureError
from .sources import Allocation, MemorySource

__all__ = [
    "CUDA_SOURCES",
    "DeviceSource",
    "PinnedSource",
    "PoolSource",
    "TorchSource",
    "check_not_capturing",
    "cuda_source",
    "require_cuda",
]

#: Names accepted by ``Arena(source=...)`` for CUDA arenas.
CUDA_SOURCES = ("device", "pool", "torch")


def require_cuda(device: Device) -> Any:
    """Import CuPy and check that ``device`` exists; return the ``cupy`` module.

    Raises
    ------
    DeviceUnavailableError
        Saying which CuPy package to install, or to use the host device.
    """
    if importlib.util.find_spec("cupy") is None:
        raise DeviceUnavailableError(
            f"a {device} arena needs CuPy: pip install 'cupy-arena[cuda12]' (CUDA 12) or "
            "'cupy-arena[cuda13]' (CUDA 13), or use device='cpu' for a host arena"
        )
    count = cuda_device_count()
    if device.index >= count:
        raise DeviceUnavailableError(
            f"{device} is not available: CuPy sees {count} CUDA device(s)"
            + (" (no driver or no GPU on this machine)" if count == 0 else "")
            + "; use device='cpu' for a host arena"
            + (f" or an ordinal below {count}" if count else "")
        )
    import cupy

    return cupy


#: cudaErrorMemoryAllocation: what a direct cudaMalloc or cudaHostAlloc reports when full.
_CUDA_ERROR_MEMORY_ALLOCATION = 2


@contextmanager
def _out_of_memory_as_memory_error() -> Iterator[None]:
    """Report every framework's out-of-memory as ``MemoryError``.

    CuPy's pool raises ``OutOfMemoryError`` (a ``MemoryError``), but a direct
    ``cupy.cuda.Memory`` raises ``CUDARuntimeError`` and torch raises
    ``torch.OutOfMemoryError`` (a ``RuntimeError``); the arena turns ``MemoryError`` into
    its own ``ArenaOutOfMemoryError``.
    """
    try:
        yield
    except MemoryError:
        raise
    except Exception as exc:
        status = getattr(exc, "status", None)
        if status == _CUDA_ERROR_MEMORY_ALLOCATION or type(exc).__name__ == "OutOfMemoryError":
            raise MemoryError(str(exc)) from exc
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


class _CudaSource:
    """Shared plumbing: the device, CuPy, and wrapping a pointer as a CuPy array."""

    def __init__(self, device: Device) -> None:
        self._cupy = require_cuda(device)
        self._device = device

    @property
    def device(self) -> Device:
        """The CUDA device."""
        return self._device

    def _array(self, pointer: Any, nbytes: int) -> Allocation:
        cupy = self._cupy
        array = cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=pointer)
        return Allocation(int(pointer.ptr), nbytes, array, self._device)

    def release(self, allocation: Allocation) -> None:
        """Nothing to do: CuPy frees the memory once the last view of it is gone."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._device)!r})"


class DeviceSource(_CudaSource):
    """Direct ``cudaMalloc`` through ``cupy.cuda.Memory``, bypassing CuPy's pool.

    Releasing a slot buffer returns its memory to the driver (once no view holds it), so
    growth from N to 2N never holds more than 2N.
    """

    def allocate(self, nbytes: int) -> Allocation:
        """cudaMalloc ``nbytes`` on the arena's device."""
        cupy = self._cupy
        with cupy.cuda.Device(self._device.index), _out_of_memory_as_memory_error():
            memory = cupy.cuda.Memory(nbytes)
        return self._array(cupy.cuda.MemoryPointer(memory, 0), nbytes)


class PoolSource(_CudaSource):
    """CuPy's current allocator (``MemoryPool``, ``MemoryAsyncPool``, RMM, ...).

    Keeps a user's allocator setup; the trade-off is that the pool keeps released blocks
    cached, so growth can hold old + new until the pool is trimmed.
    """

    def allocate(self, nbytes: int) -> Allocation:
        """Allocate ``nbytes`` from CuPy's current allocator on the arena's device."""
        cupy = self._cupy
        with cupy.cuda.Device(self._device.index), _out_of_memory_as_memory_error():
            pointer = cupy.cuda.alloc(nbytes)
        return self._array(pointer, nbytes)


class TorchSource(_CudaSource):
    """Memory from torch's caching allocator, so torch's memory statistics see it.

    Before each allocation torch's cache is emptied (as vLLM does), so the block released
    by growth goes back to the driver instead of staying as a dead cached segment.
    """

    def allocate(self, nbytes: int) -> Allocation:
        """``torch.empty(nbytes, uint8)`` on the arena's device, seen as a CuPy array."""
        import torch

        cupy = self._cupy
        torch.cuda.empty_cache()
        with _out_of_memory_as_memory_error():
            tensor = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{self._device.index}")
        memory = cupy.cuda.UnownedMemory(
            tensor.data_ptr(), nbytes, tensor, device_id=self._device.index
        )
        return self._array(cupy.cuda.MemoryPointer(memory, 0), nbytes)


class PinnedSource:
    """Page-locked host memory (``cudaHostAlloc``) for staging arenas.

    Views are host views (NumPy, torch CPU tensors) whose copies to and from the GPU can
    run asynchronously.
    """

    def __init__(self, device_index: int = 0) -> None:
        self._cupy = require_cuda(Device("cuda", device_index))
        self._index = device_index

    @property
    def device(self) -> Device:
        """Pinned memory is host memory."""
        return CPU

    def allocate(self, nbytes: int) -> Allocation:
        """cudaHostAlloc ``nbytes`` (page aligned)."""
        import numpy as np

        cupy = self._cupy
        with cupy.cuda.Device(self._index), _out_of_memory_as_memory_error():
            memory = cupy.cuda.PinnedMemory(nbytes)
        pointer = cupy.cuda.PinnedMemoryPointer(memory, 0)
        array = np.frombuffer(pointer, dtype=np.uint8, count=nbytes)
        return Allocation(int(pointer.ptr), nbytes, array, CPU)

    def release(self, allocation: Allocation) -> None:
        """Nothing to do: freed once the last view of it is gone."""

    def __repr__(self) -> str:
        return "PinnedSource()"


def check_not_capturing(device: Device, what: str) -> None:
    """Refuse memory work while the current CuPy or torch stream captures a CUDA graph.

    A cudaMalloc (or free) during capture either fails or bakes an address into the graph
    that growth would then invalidate; both corrupt the capture.

    Raises
    ------
    GraphCaptureError
        Naming the device and what was asked for.
    """
    capturing = False
    # torch first: torch.cuda.graph captures in "global" mode, where querying the legacy
    # default stream (CuPy's usual current stream) is itself an illegal call.
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        with torch.cuda.device(device.index):
            capturing = bool(torch.cuda.is_current_stream_capturing())
    cupy = sys.modules.get("cupy")
    if not capturing and cupy is not None:
        with cupy.cuda.Device(device.index):
            stream = cupy.cuda.get_current_stream()
            # The legacy default stream (handle 0 or 1) can never capture; skip the query.
            if stream.ptr not in (0, 1):
                capturing = bool(stream.is_capturing())
    if capturing:
        raise GraphCaptureError(
            f"{what} on {device} was requested while the current stream is capturing a CUDA "
            "graph; growth would corrupt the capture. Run the same step once eagerly "
            "(warm-up) before capturing, or reserve() the size before capture"
        )
