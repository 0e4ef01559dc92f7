"""Stream-ordered release: a released block goes back to its source only once the GPU
work queued on it has completed, and the host never waits for the whole device.

A caching allocator (CuPy's pool, torch's caching allocator, an RMM pool) hands a freed
block out again at once on its allocating stream, unaware of other streams that may still
run kernels on it. Earlier versions synchronised the device before every release. Now the
ledger (:class:`~arena.memory.ledger.Ledger`) holds a released block in
:class:`PendingReleases`: it records one event on each stream that may use the block and
gives the block to the source at a later allocation, release or flush whose event query
says done. A source opts in by providing ``stream_events()`` returning a
:class:`StreamEvents`.

Which streams: the arena's hot path does not see streams (it hands out views; the work
is queued by the caller), so the events go on

* the calling thread's current streams on the arena's device (CuPy's and, when torch is
  initialised, torch's): growth happens in the thread whose previous request used the old
  buffer, normally on these streams;
* the streams the arena was told of: a Triton block's stream (Triton passes it to the
  allocator).

A kernel on any other stream that still runs on the block when it is released is not
waited for: make that stream's work finish (or make the current stream wait on it) before
the request that grows. ``docs/torch-cuda.md`` and ``docs/gpu-validation.md`` say the same.
"""

from __future__ import annotations

import importlib
import importlib.util
import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, SupportsIndex

from arena.errors import ConfigError
from arena.memory.devices import Device, cupy_device_count
from arena.memory.sources import Allocation

__all__ = [
    "CupyEvents",
    "PendingReleases",
    "StreamEvents",
    "StreamHandle",
    "TorchEvents",
    "cupy_external_stream",
    "stream_events",
]


class StreamEvents(Protocol):
    """What stream-ordered release needs of a GPU framework (CuPy, torch, or a test fake).

    Implementations make every call with the arena's device current.
    """

    def streams(self, handles: Sequence[int]) -> list[Any]:
        """The streams to order a release after: the calling thread's current streams on
        the device, then one stream object per raw handle in ``handles`` (duplicates
        removed)."""
        ...

    def record(self, stream: Any) -> Any:
        """A new event recorded on ``stream`` now."""
        ...

    def done(self, event: Any) -> bool:
        """Whether every piece of work queued before ``event`` has completed (no wait)."""
        ...

    def wait(self, event: Any) -> None:
        """Block the host until ``event`` has completed (this event only)."""
        ...

    def synchronize(self) -> None:
        """Wait for the whole device: used only when recording an event failed."""
        ...


class PendingReleases:
    """Blocks the arena released, each waiting for the events recorded on its streams.

    Parameters
    ----------
    events : StreamEvents
        The framework that records and queries events.
    release : callable
        The source's ``release(allocation)``, called once a block's events are done.

    Notes
    -----
    Called by the ledger with the arena's mutex held.
    """

    __slots__ = ("_entries", "_release", "events")

    def __init__(self, events: StreamEvents, release: Callable[[Allocation], None]) -> None:
        self.events = events
        self._release = release
        #: (events, allocation); events None: recording failed, synchronise before release.
        self._entries: list[tuple[list[Any] | None, Allocation]] = []

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks still waiting."""
        return sum(a.nbytes for _, a in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def hold(self, allocation: Allocation, handles: Sequence[int] = ()) -> None:
        """Keep ``allocation`` until the work queued so far on its streams has completed.

        If recording an event fails (an interrupt included), the block is still held, and
        goes back only after a device-wide synchronisation; the error propagates.
        """
        recorded: list[Any] = []
        entry: tuple[list[Any] | None, Allocation] = (recorded, allocation)
        self._entries.append(entry)
        try:
            for stream in self.events.streams(handles):
                recorded.append(self.events.record(stream))
        except BaseException:
            # A loop, not next() over a generator: its close could lose an interrupt.
            for index, e in enumerate(self._entries):
                if e is entry:
                    self._entries[index] = (None, allocation)
                    break
            raise

    def collect(self) -> None:
        """Give back every block whose events have all completed (no waiting)."""
        if not self._entries:
            return
        done = self.events.done
        ready = [e for e in self._entries if e[0] is not None and all(map(done, e[0]))]
        if ready:
            self._give_back(ready)

    def flush(self) -> None:
        """Wait for every held block's own events, then give them all back."""
        events = self.events
        if [e for e in self._entries if e[0] is None]:
            events.synchronize()
        for recorded, _ in list(self._entries):
            for event in recorded or ():
                events.wait(event)
        self._give_back(list(self._entries))

    def _give_back(self, entries: list[tuple[list[Any] | None, Allocation]]) -> None:
        """Hand ``entries`` to the source, each removed first (the ledger counted them as
        freed already); the first error propagates after every one was attempted."""
        first: BaseException | None = None
        for entry in entries:
            self._entries = [e for e in self._entries if e is not entry]
            try:
                self._release(entry[1])
            except BaseException as exc:  # keep going: an interrupt must not strand the rest
                if first is None:
                    first = exc
        if first is not None:
            raise first


class CupyEvents:
    """:class:`StreamEvents` through CuPy: ``cupy.cuda.Event`` on CuPy streams."""

    def __init__(self, device: Device) -> None:
        self._cupy = importlib.import_module("cupy")
        self._index = device.index

    def streams(self, handles: Sequence[int]) -> list[Any]:
        """CuPy's current stream, torch's (when initialised), then ``handles``."""
        cuda = self._cupy.cuda
        with cuda.Device(self._index):
            found = {int(cuda.get_current_stream(self._index).ptr): None}
            for handle in (*_torch_current(self._index), *handles):
                found.setdefault(int(handle), None)
            return [cupy_external_stream(cuda, handle) for handle in found]

    def record(self, stream: Any) -> Any:
        """``cupy.cuda.Event(disable_timing=True)`` recorded on ``stream``."""
        cuda = self._cupy.cuda
        with cuda.Device(self._index):
            event = cuda.Event(disable_timing=True)
            event.record(stream)
        return event

    def done(self, event: Any) -> bool:
        """``event.done`` (cudaEventQuery)."""
        return bool(event.done)

    def wait(self, event: Any) -> None:
        """``event.synchronize()``."""
        event.synchronize()

    def synchronize(self) -> None:
        """cudaDeviceSynchronize."""
        cuda = self._cupy.cuda
        with cuda.Device(self._index):
            cuda.runtime.deviceSynchronize()


class TorchEvents:
    """:class:`StreamEvents` through torch: ``torch.cuda.Event`` on torch streams (for a
    torch-backed arena where CuPy does not see the device)."""

    def __init__(self, device: Device) -> None:
        self._torch = importlib.import_module("torch")
        self._index = device.index

    def streams(self, handles: Sequence[int]) -> list[Any]:
        """torch's current stream, then ``handles``."""
        cuda = self._torch.cuda
        current = cuda.current_stream(self._index)
        found = {int(current.cuda_stream): current}
        for handle in handles:
            if int(handle) not in found:
                found[int(handle)] = cuda.ExternalStream(int(handle), device=self._index)
        return list(found.values())

    def record(self, stream: Any) -> Any:
        """``torch.cuda.Event()`` recorded on ``stream``."""
        event = self._torch.cuda.Event()
        event.record(stream)
        return event

    def done(self, event: Any) -> bool:
        """``event.query()``."""
        return bool(event.query())

    def wait(self, event: Any) -> None:
        """``event.synchronize()``."""
        event.synchronize()

    def synchronize(self) -> None:
        """``torch.cuda.synchronize(device)``."""
        self._torch.cuda.synchronize(self._index)


def stream_events(device: Device) -> StreamEvents:
    """The events of the framework that sees ``device``: CuPy where it does, else torch."""
    if importlib.util.find_spec("cupy") is not None and cupy_device_count() > device.index:
        return CupyEvents(device)
    return TorchEvents(device)


class StreamHandle:
    """A raw ``cudaStream_t`` handle that speaks the CUDA stream protocol
    (``__cuda_stream__``), so that ``cupy.cuda.Stream.from_external`` can wrap it.

    Parameters
    ----------
    handle : int
        The stream's address (``0`` is the legacy default stream): an ``int`` or a NumPy
        integer in ``[0, 2**63)`` (CuPy passes it on as an ``intptr_t``).

    Raises
    ------
    ConfigError
        For a float, a string or a bool (``int()`` would truncate or parse it), or an
        address outside that range (CuPy would fail only when an event is recorded).
    """

    __slots__ = ("handle",)

    def __init__(self, handle: SupportsIndex) -> None:
        try:
            value = operator.index(handle)  # not int(): 3.9 or "7" is no stream's address
        except TypeError:
            value = -1
        if handle.__class__ is bool or not 0 <= value < 1 << 63:
            raise ConfigError(
                "StreamHandle needs a CUDA stream's address, an int in [0, 2**63), got "
                f"{type(handle).__name__} {handle!r}"
            )
        self.handle = value

    def __cuda_stream__(self) -> tuple[int, int]:
        """``(0, handle)``: protocol version 0 and the raw handle."""
        return (0, self.handle)

    def __repr__(self) -> str:
        return f"StreamHandle({self.handle:#x})"


def cupy_external_stream(cuda: Any, handle: SupportsIndex) -> Any:
    """A CuPy stream object over the raw stream ``handle``, which CuPy does not own.

    CuPy 14 deprecates ``cupy.cuda.ExternalStream`` (a ``DeprecationWarning`` at every
    construction, an error wherever warnings are errors) in favour of
    ``cupy.cuda.Stream.from_external``, which takes an object speaking the CUDA stream
    protocol; CuPy 13 has only ``ExternalStream``. Either way the stream is not destroyed
    when the object is collected.

    Parameters
    ----------
    cuda : module
        ``cupy.cuda``.
    handle : int
        The stream's address (as :class:`StreamHandle` takes it).

    Returns
    -------
    cupy.cuda.Stream or cupy.cuda.ExternalStream
        A stream to record events on.
    """
    speaker = StreamHandle(handle)  # checked on either CuPy
    from_external = getattr(getattr(cuda, "Stream", None), "from_external", None)
    if from_external is None:  # CuPy 13 and older
        return cuda.ExternalStream(speaker.handle)
    return from_external(speaker)


def _torch_current(index: int) -> tuple[int, ...]:
    """torch's current stream handle on device ``index``, when torch is initialised."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return ()
    return (int(torch.cuda.current_stream(index).cuda_stream),)
