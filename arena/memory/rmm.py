"""Memory from any object with RMM's protocol: ``allocate(nbytes, stream)`` returning a
pointer and ``deallocate(ptr, nbytes, stream)``.

An ``rmm.mr.DeviceMemoryResource`` (a pool, an arena, a logging or statistics adaptor,
``CudaAsyncMemoryResource``, ...) is one; so is a host resource that returns host
pointers, which is how this path is tested without a GPU. ``Arena(source=resource)`` wraps
such an object in :class:`RmmSource` by itself (detected by its two methods; RMM is never
imported).

The stream: :class:`RmmSource` reads the signatures of ``allocate`` and ``deallocate``
once, when it is made. A stream given as ``stream=`` is passed to both. Without one, a
method whose stream is optional (RMM's own resources: their default is RMM's
``DEFAULT_STREAM``) gets none and uses its default; a method that requires it, or whose
signature cannot be read (a C function without one), gets the default stream: RMM's
``DEFAULT_STREAM`` where RMM is imported, else None. A method that takes no stream
(``allocate(nbytes)``, ``deallocate(ptr, nbytes)``) gets none.

The pointer: ``allocate`` must return the block's address as an int from 1 to 2**64 - 1.
A null pointer (0) is taken as out of memory (:class:`~arena.ArenaOutOfMemoryError`);
anything else that is not such an int (None, a float, a negative number, a bool) is a
:class:`~arena.ConfigError`: no view is ever made over it, and the resource is not asked
to deallocate it.

A block is deallocated through the resource only when the arena has released it *and* no
view holds it any more: the block's ``allocation.owner`` is an array over the pointer whose
base object calls ``deallocate`` when it is collected. On CUDA the release is stream
ordered (:mod:`arena.memory.deferred`): the block is held until the streams that used it
are done, then ``deallocate`` runs on the resource's stream.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import operator
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from arena.errors import ArenaError, ArenaOutOfMemoryError, ConfigError
from arena.forks import after_fork
from arena.memory.devices import CPU, Device, cupy_device_count
from arena.memory.sources import Allocation

__all__ = ["RmmSource", "default_stream", "has_rmm_protocol"]

#: Least base-address alignment accepted from a resource (what the arena's views assume).
_MIN_ALIGNMENT = 256

#: One past the largest address a pointer can hold.
_ADDRESS_LIMIT = 1 << 64

#: Where RMM keeps ``DEFAULT_STREAM`` (RMM 24.12 and later, then earlier releases).
_RMM_STREAM_MODULES = ("rmm.pylibrmm.stream", "rmm._cuda.stream")


def has_rmm_protocol(obj: Any) -> bool:
    """Whether ``obj`` has RMM's ``allocate`` and ``deallocate`` methods."""
    return callable(getattr(obj, "allocate", None)) and callable(getattr(obj, "deallocate", None))


def default_stream() -> Any:
    """The stream passed where a resource needs one and none was given: RMM's
    ``DEFAULT_STREAM`` where RMM is imported (an RMM resource means it is), else None."""
    for name in _RMM_STREAM_MODULES:
        stream = getattr(sys.modules.get(name), "DEFAULT_STREAM", None)
        if stream is not None:
            return stream
    return None


def _stream_args(resource: Any, name: str, before: tuple[str, ...], stream: Any) -> tuple[Any, ...]:
    """What follows ``before`` in calls of ``resource.<name>``: ``(stream,)`` or ``()``.

    Raises
    ------
    ConfigError
        If the method takes neither call, or takes no stream while ``stream`` is given.
    """
    method = getattr(resource, name)
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        # Unreadable (a C function without a signature): RMM's protocol has the stream.
        return (default_stream() if stream is None else stream,)
    takes = []
    for args in (before, (*before, "stream")):
        try:
            signature.bind(*args)
        except TypeError:
            takes.append(False)
        else:
            takes.append(True)
    bare, streamed = takes
    call = f"{type(resource).__name__}.{name}{signature}"
    if not bare and not streamed:
        raise ConfigError(
            f"{call} takes neither {name}({', '.join(before)}) nor {name}("
            f"{', '.join(before)}, stream) with positional arguments; RMM's protocol is "
            "allocate(nbytes, stream) and deallocate(ptr, nbytes, stream)"
        )
    if not streamed:
        if stream is not None:
            raise ConfigError(
                f"{call} takes no stream, but RmmSource was given stream={stream!r}; "
                "construct RmmSource without stream=, or give the resource a stream argument"
            )
        return ()
    if stream is not None:
        return (stream,)
    return () if bare else (default_stream(),)


class _Block:
    """One pointer from the resource; deallocated through it when collected.

    Arrays over the block (NumPy on the host, CuPy or torch on CUDA) hold it, so the
    memory lives as long as the arena or any view needs it.
    """

    __slots__ = ("__weakref__", "_interface", "ptr")

    def __init__(self, ptr: int, nbytes: int, free: Callable[[], None]) -> None:
        self.ptr = ptr
        self._interface = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
        }
        # Not at exit: the resource (or the CUDA context) may be gone by then.
        weakref.finalize(self, free).atexit = False

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return self._interface


class _CudaBlock(_Block):
    """A device pointer: seen through ``__cuda_array_interface__`` only."""

    __slots__ = ()

    @property
    def __array_interface__(self) -> dict[str, Any]:
        raise AttributeError("a device pointer has no host array interface")

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self._interface


class RmmSource:
    """A memory source over an object with RMM's allocation protocol.

    Parameters
    ----------
    resource : object
        Has ``allocate(nbytes[, stream]) -> int`` (a pointer) and
        ``deallocate(ptr, nbytes[, stream])``; an ``rmm.mr.DeviceMemoryResource``, for
        instance. ``MemoryError`` from ``allocate`` means out of memory (RMM raises it).
    device : Device
        Where the pointers live: a CUDA device for device memory, the host for host
        pointers.
    stream : object, optional
        Passed as the second argument of ``allocate`` and the third of ``deallocate``
        (an ``rmm.pylibrmm.stream.Stream``, for instance). Default: the default stream,
        passed only to a method that requires a stream or whose signature cannot be
        read: RMM's ``DEFAULT_STREAM`` where RMM is imported, else None; a method whose
        stream is optional uses its own default (RMM's is ``DEFAULT_STREAM``).

    Raises
    ------
    ConfigError
        If ``resource`` lacks either method, if a method takes neither the call without a
        stream nor the one with it positionally, or if ``stream`` is given and a method
        takes no stream.
    """

    def __init__(self, resource: Any, device: Device = CPU, stream: Any = None) -> None:
        if not has_rmm_protocol(resource):
            raise ConfigError(
                f"an RMM-style resource needs allocate(nbytes, stream) and deallocate(ptr, "
                f"nbytes, stream) methods; {type(resource).__name__} lacks them"
            )
        self.resource = resource
        self._device = device
        self._allocate_args = _stream_args(resource, "allocate", ("nbytes",), stream)
        self._deallocate_args = _stream_args(resource, "deallocate", ("ptr", "nbytes"), stream)
        self._mutex = threading.Lock()
        after_fork(self, RmmSource._renew)
        #: Pointers handed out and not yet deallocated (for tests and repr).
        self.outstanding = 0

    def _renew(self) -> None:
        self._mutex = threading.Lock()

    @property
    def device(self) -> Device:
        """Where the resource's pointers live."""
        return self._device

    def allocate(self, nbytes: int) -> Allocation:
        """``resource.allocate(nbytes[, stream])``, as a block of ``uint8`` owned by an
        array that deallocates it when the last reference goes."""
        ptr = self._pointer(self.resource.allocate(nbytes, *self._allocate_args), nbytes)
        try:
            if ptr % _MIN_ALIGNMENT:
                raise ArenaError(
                    f"{self!r} returned pointer {ptr:#x} for {nbytes} bytes, not aligned to "
                    f"{_MIN_ALIGNMENT} bytes; the arena's views need at least that (RMM's "
                    "resources align to 256)"
                )
            with self._mutex:
                self.outstanding += 1
            kind = _CudaBlock if self._device.is_cuda else _Block
            block = kind(ptr, nbytes, self._deallocator(ptr, nbytes))
        except BaseException:
            self.resource.deallocate(ptr, nbytes, *self._deallocate_args)
            raise
        return Allocation(ptr, nbytes, self._owner(block, nbytes), self._device)

    def _pointer(self, value: Any, nbytes: int) -> int:
        """``value`` as an address, or a named error (the resource is not called again:
        what it returned is not a pointer it could take back)."""
        ptr: int | None = None
        if not isinstance(value, bool):
            try:
                ptr = operator.index(value)
            except TypeError:
                ptr = None
        if ptr == 0:
            raise ArenaOutOfMemoryError(
                f"{type(self.resource).__name__}.allocate({nbytes}) returned a null "
                "pointer (0), taken as out of memory; a resource with no memory should raise "
                "MemoryError (RMM's do)"
            )
        if ptr is None or not 0 < ptr < _ADDRESS_LIMIT:
            raise ConfigError(
                f"{self!r}: {type(self.resource).__name__}.allocate({nbytes}) returned "
                f"{value!r} ({type(value).__name__}), not a pointer; allocate must return "
                "the block's address as an int from 1 to 2**64 - 1 (or raise MemoryError "
                "when it has no memory)"
            )
        return ptr

    def _deallocator(self, ptr: int, nbytes: int) -> Callable[[], None]:
        resource, args = self.resource, self._deallocate_args
        source = weakref.ref(self)

        def free() -> None:
            resource.deallocate(ptr, nbytes, *args)
            kept = source()
            if kept is not None:
                with kept._mutex:
                    kept.outstanding -= 1

        return free

    def _owner(self, block: _Block, nbytes: int) -> Any:
        """A 1-D ``uint8`` array over ``block`` that keeps it alive."""
        if not self._device.is_cuda:
            import numpy as np

            return np.asarray(block)
        index = self._device.index
        if importlib.util.find_spec("cupy") is not None and cupy_device_count() > index:
            cupy = importlib.import_module("cupy")
            memory = cupy.cuda.UnownedMemory(block.ptr, nbytes, block, device_id=index)
            pointer = cupy.cuda.MemoryPointer(memory, 0)
            return cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=pointer)
        torch = importlib.import_module("torch")
        return torch.as_tensor(block, device=f"cuda:{index}")

    def release(self, allocation: Allocation) -> None:
        """Nothing to do: the block is deallocated when its last view is gone."""

    def stream_events(self) -> Any:
        """On CUDA, release in stream order (see :mod:`arena.memory.deferred`); on the
        host, None (released at once)."""
        if not self._device.is_cuda:
            return None
        from arena.memory.deferred import stream_events

        return stream_events(self._device)

    def __repr__(self) -> str:
        return f"RmmSource({type(self.resource).__name__}, device='{self._device}')"
