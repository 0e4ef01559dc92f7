"""Stream-ordered release (a released block goes back once events on its streams have
completed; the device is never synchronised) and sources with RMM's protocol
(``allocate(nbytes, stream)``/``deallocate(ptr, nbytes, stream)``), checked with recording
fakes on the CPU. Nothing here touches a GPU."""

from __future__ import annotations

import gc
import importlib.util
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from arena import (
    Allocation,
    Arena,
    ArenaError,
    ArenaOutOfMemoryError,
    ConfigError,
    Device,
    RmmSource,
)
from arena.memory import deferred
from tests.fakecupy import with_arrays
from tests.memory.test_cuda_fakes import fake_cupy, fake_torch, install
from tests.sources import RecordingSource

CUDA0 = Device("cuda", 0)
MB = 1 << 20


#: Every test starts and ends with no device count remembered (tests/memory/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh_device_counts")


# ====================================================================== the ledger's rule
@dataclass
class FakeEvent:
    stream: Any
    complete: bool = False


@dataclass
class FakeEvents:
    """A :class:`~arena.memory.deferred.StreamEvents` that records every call."""

    current: tuple[Any, ...] = (0,)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    recorded: list[FakeEvent] = field(default_factory=list)
    fail_record: bool = False

    def streams(self, handles: Any) -> list[Any]:
        self.calls.append(("streams", tuple(handles)))
        return list(dict.fromkeys([*self.current, *handles]))

    def record(self, stream: Any) -> FakeEvent:
        if self.fail_record:
            raise KeyboardInterrupt("interrupted while recording")
        self.calls.append(("record", stream))
        event = FakeEvent(stream)
        self.recorded.append(event)
        return event

    def done(self, event: FakeEvent) -> bool:
        return event.complete

    def wait(self, event: FakeEvent) -> None:
        self.calls.append(("wait", event.stream))
        event.complete = True

    def synchronize(self) -> None:
        self.calls.append(("synchronize",))

    def complete_all(self) -> None:
        for event in self.recorded:
            event.complete = True


@dataclass
class StreamOrderedSource(RecordingSource):
    """Host memory from a source that opts in to stream-ordered release."""

    fake: FakeEvents = field(default_factory=FakeEvents)

    def stream_events(self) -> FakeEvents:
        return self.fake


def test_growth_releases_the_old_block_after_its_streams_never_the_device() -> None:
    source = StreamOrderedSource()
    with Arena(source=source, framework="numpy") as a:
        a.get_simultaneous(((1024,), "uint8"))
        a.get_simultaneous(((MB,), "uint8"))  # growth: the 1 KiB block is released
        assert ("release", 1024) not in source.events  # still pending: its event runs
        assert source.fake.calls == [("streams", ()), ("record", 0)]
        assert a.memory_stats()["arena.pending_release_bytes"] == 1024
        assert a.stats().frees == 1 and a.stats().live_bytes == MB  # the arena let it go
        a.get_persistent("p", (16,), "uint8")  # an allocation: not done yet, still held
        assert ("release", 1024) not in source.events
        source.fake.complete_all()
        a.get_persistent("q", (16,), "uint8")  # the next allocation gives it back
        assert ("release", 1024) in source.events
        assert a.memory_stats()["arena.pending_release_bytes"] == 0
        assert ("synchronize",) not in source.fake.calls


def test_close_waits_for_each_pending_event_only() -> None:
    source = StreamOrderedSource(fake=FakeEvents(current=(0, 5)))
    a = Arena(source=source, framework="numpy")
    a.get_simultaneous(((1024,), "uint8"))
    a.get_simultaneous(((4096,), "uint8"))
    a.close()  # the 1 KiB block (released by growth) and the 4 KiB one, two streams each
    waits = [c for c in source.fake.calls if c[0] == "wait"]
    assert waits == [("wait", 0), ("wait", 5), ("wait", 0), ("wait", 5)]
    assert ("synchronize",) not in source.fake.calls
    assert source.live == {}
    assert sorted(n for kind, n in source.events if kind == "release") == [1024, 4096]


def test_a_triton_block_is_released_after_its_own_stream() -> None:
    pytest.importorskip("torch")
    source = StreamOrderedSource()
    with Arena(source=source, framework="numpy") as a:
        allocate = a.triton_allocator()
        allocate(1024, 16, 7)
        allocate(MB, 16, 7)
        assert ("streams", (7,)) in source.fake.calls
        assert [c for c in source.fake.calls if c[0] == "record"] == [("record", 0), ("record", 7)]


def test_an_interrupt_while_recording_holds_the_block_until_a_full_sync() -> None:
    source = StreamOrderedSource()
    a = Arena(source=source, framework="numpy")
    a.get_simultaneous(((1024,), "uint8"))
    source.fake.fail_record = True
    with pytest.raises(KeyboardInterrupt):
        a.get_simultaneous(((4096,), "uint8"))
    source.fake.fail_record = False
    stats = a.stats()
    assert stats.allocations == stats.frees + stats.live_blocks
    assert ("release", 1024) not in source.events  # never given back unordered
    a.close()
    assert ("synchronize",) in source.fake.calls
    assert source.live == {}


def test_a_source_without_stream_events_releases_at_once() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy") as a:
        a.get_simultaneous(((1024,), "uint8"))
        a.get_simultaneous(((4096,), "uint8"))
        assert source.events[:3] == [("allocate", 1024), ("release", 1024), ("allocate", 4096)]


# ====================================================================== CuPy and torch events
def cupy_with_events() -> types.ModuleType:
    cupy = fake_cupy()
    calls = cupy.calls

    class Event:
        def __init__(self, disable_timing: bool = False) -> None:
            calls.append(("Event", disable_timing))
            self.done = False

        def record(self, stream: Any) -> None:
            calls.append(("record", stream.ptr))

        def synchronize(self) -> None:
            calls.append(("event.synchronize",))
            self.done = True

    cupy.cuda.Event = Event
    cupy.cuda.ExternalStream = lambda ptr: types.SimpleNamespace(ptr=ptr)
    cupy.cuda.get_current_stream = lambda index=-1: types.SimpleNamespace(ptr=3)
    return cupy


def test_cupy_events_record_on_the_current_and_known_streams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy = cupy_with_events()
    install(monkeypatch, cupy=cupy, torch=fake_torch(stream=9))
    events = deferred.stream_events(CUDA0)
    assert isinstance(events, deferred.CupyEvents)
    streams = events.streams([7, 3])
    assert [s.ptr for s in streams] == [3, 9, 7]  # CuPy's, torch's, Triton's; no repeats
    event = events.record(streams[2])
    assert ("Event", True) in cupy.calls and ("record", 7) in cupy.calls
    assert events.done(event) is False
    events.wait(event)
    assert events.done(event) is True
    assert ("deviceSynchronize",) not in cupy.calls
    events.synchronize()
    assert cupy.calls[-1] == ("deviceSynchronize",)


def test_cupy_14_streams_come_from_stream_from_external_not_the_deprecated_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CuPy 14 warns (DeprecationWarning) at every ``ExternalStream``: where
    ``Stream.from_external`` exists, the events' streams come from it, given an object
    whose ``__cuda_stream__()`` is ``(0, handle)``, and the deprecated class is never
    built."""
    cupy = cupy_with_events()
    wrapped: list[Any] = []

    class Stream:
        @classmethod
        def from_external(cls, obj: Any) -> Any:
            version, pointer = obj.__cuda_stream__()
            assert type(version) is int and type(pointer) is int  # CuPy checks both
            wrapped.append((version, pointer))
            return types.SimpleNamespace(ptr=pointer, foreign=obj)

    def deprecated(ptr: int) -> None:
        raise AssertionError(f"ExternalStream({ptr}) built where Stream.from_external exists")

    cupy.cuda.Stream = Stream
    cupy.cuda.ExternalStream = deprecated
    install(monkeypatch, cupy=cupy, torch=fake_torch(stream=9))
    events = deferred.stream_events(CUDA0)
    streams = events.streams([7, 3])
    assert [s.ptr for s in streams] == [3, 9, 7]
    assert wrapped == [(0, 3), (0, 9), (0, 7)]
    assert repr(streams[2].foreign) == "StreamHandle(0x7)"
    events.record(streams[2])
    assert ("record", 7) in cupy.calls


def test_a_stream_handle_speaks_the_cuda_stream_protocol() -> None:
    handle = deferred.StreamHandle(np.int64(0x7F00))  # a handle from another library
    assert handle.__cuda_stream__() == (0, 0x7F00)
    assert type(handle.__cuda_stream__()[1]) is int


def test_torch_events_where_cupy_does_not_see_the_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = fake_torch(stream=9)
    recorded: list[Any] = []

    class Event:
        def record(self, stream: Any) -> None:
            recorded.append(stream.cuda_stream)

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            recorded.append("synchronize")

    torch.cuda.Event = Event
    torch.cuda.ExternalStream = lambda handle, device=None: types.SimpleNamespace(
        cuda_stream=handle
    )
    install(monkeypatch, cupy=None, torch=torch)
    events = deferred.stream_events(CUDA0)
    assert isinstance(events, deferred.TorchEvents)
    streams = events.streams([9, 4])
    assert [s.cuda_stream for s in streams] == [9, 4]
    event = events.record(streams[1])
    assert recorded == [4] and events.done(event)
    events.wait(event)
    assert torch.calls == []  # no torch.cuda.synchronize
    events.synchronize()
    assert torch.calls == [("synchronize", 0)]


# ====================================================================== RMM's protocol
@dataclass
class HostResource:
    """An RMM-style resource over page-aligned host memory, recording every call."""

    calls: list[tuple[Any, ...]] = field(default_factory=list)
    blocks: dict[int, np.ndarray] = field(default_factory=dict)
    limit: int = 1 << 30
    misalign: int = 0

    def allocate(self, nbytes: int, stream: Any = None) -> int:
        if nbytes > self.limit:
            raise MemoryError(f"std::bad_alloc: out_of_memory: {nbytes} bytes")
        raw = np.empty(nbytes + 8192, np.uint8)
        ptr = raw.ctypes.data + (-raw.ctypes.data % 4096) + self.misalign
        self.blocks[ptr] = raw
        self.calls.append(("allocate", nbytes, stream))
        return ptr

    def deallocate(self, ptr: int, nbytes: int, stream: Any = None) -> None:
        self.calls.append(("deallocate", nbytes, stream))
        del self.blocks[ptr]


def test_an_rmm_style_resource_is_a_source() -> None:
    resource = HostResource()
    a = Arena("cpu", source=resource, framework="numpy")
    assert isinstance(a.source, RmmSource)
    (x,) = a.get_simultaneous(((1024,), "uint8"))
    x[:] = 3
    (y,) = a.get_simultaneous(((MB,), "uint8"))  # growth: the arena releases the old block
    assert ("deallocate", 1024, None) not in resource.calls  # x still holds it
    assert (x == 3).all()
    del x
    gc.collect()
    assert ("deallocate", 1024, None) in resource.calls
    y[:] = 1
    a.close()
    assert ("deallocate", MB, None) not in resource.calls  # y holds it after close too
    del y
    gc.collect()
    assert resource.blocks == {} and a.source.outstanding == 0  # type: ignore[attr-defined]


def test_rmm_source_passes_its_stream() -> None:
    resource = HostResource()
    source = RmmSource(resource, stream="stream-1")
    allocation = source.allocate(4096)
    assert allocation.ptr % 4096 == 0 and allocation.owner.nbytes == 4096
    del allocation
    gc.collect()
    assert resource.calls == [("allocate", 4096, "stream-1"), ("deallocate", 4096, "stream-1")]


def test_rmm_source_errors() -> None:
    resource = HostResource(limit=1024)
    with (
        Arena("cpu", source=resource, framework="numpy") as a,
        pytest.raises(ArenaOutOfMemoryError, match="out_of_memory"),
    ):
        a.get_simultaneous(((4096,), "uint8"))
    crooked = HostResource(misalign=16)
    with pytest.raises(ArenaError, match="not aligned to 256"):
        RmmSource(crooked).allocate(4096)
    assert crooked.blocks == {}  # given back at once
    with pytest.raises(ConfigError, match="RMM's allocate"):
        Arena("cpu", source=object())
    with pytest.raises(ConfigError, match="deallocate"):
        RmmSource(types.SimpleNamespace(allocate=lambda n: 0))


class StreamRequired(HostResource):
    """RMM's protocol with the stream required, as a resource written to it may have it."""

    def allocate(self, nbytes: int, stream: Any) -> int:  # type: ignore[override]
        return super().allocate(nbytes, stream)

    def deallocate(self, ptr: int, nbytes: int, stream: Any) -> None:  # type: ignore[override]
        super().deallocate(ptr, nbytes, stream)


class NoStream(HostResource):
    """The old two-argument protocol: ``allocate(nbytes)``, ``deallocate(ptr, nbytes)``."""

    def allocate(self, nbytes: int) -> int:  # type: ignore[override]
        return super().allocate(nbytes, "none given")

    def deallocate(self, ptr: int, nbytes: int) -> None:  # type: ignore[override]
        super().deallocate(ptr, nbytes, "none given")


class Unreadable:
    """A method whose signature :func:`inspect.signature` cannot read (as a C function
    without a text signature)."""

    __signature__ = "unreadable"

    def __init__(self, method: Any) -> None:
        self.method = method

    def __call__(self, *args: Any) -> Any:
        return self.method(*args)


def one_block(source: RmmSource) -> None:
    allocation = source.allocate(4096)
    assert allocation.owner.nbytes == 4096
    del allocation
    gc.collect()


def test_a_resource_that_requires_the_stream_gets_the_default_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resource = StreamRequired()
    with Arena("cpu", source=resource, framework="numpy") as a:
        (x,) = a.get_simultaneous(((1024,), "uint8"))
        x[:] = 5
    del x
    gc.collect()
    # RMM not imported: None, Python's "the default stream".
    assert resource.calls == [("allocate", 1024, None), ("deallocate", 1024, None)]
    rmm_stream = types.ModuleType("rmm.pylibrmm.stream")
    rmm_stream.DEFAULT_STREAM = "rmm's default stream"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rmm.pylibrmm.stream", rmm_stream)
    resource = StreamRequired()
    one_block(RmmSource(resource))
    assert resource.calls == [
        ("allocate", 4096, "rmm's default stream"),
        ("deallocate", 4096, "rmm's default stream"),
    ]
    resource = StreamRequired()
    one_block(RmmSource(resource, stream="mine"))
    assert resource.calls == [("allocate", 4096, "mine"), ("deallocate", 4096, "mine")]
    resource = HostResource()  # an optional stream: the resource's own default
    one_block(RmmSource(resource))
    assert resource.calls == [("allocate", 4096, None), ("deallocate", 4096, None)]


def test_a_resource_without_a_stream_gets_none() -> None:
    resource = NoStream()
    with Arena("cpu", source=resource, framework="numpy") as a:
        a.get_simultaneous(((1024,), "uint8"))
    gc.collect()
    assert resource.calls == [("allocate", 1024, "none given"), ("deallocate", 1024, "none given")]
    assert resource.blocks == {}
    with pytest.raises(
        ConfigError, match=r"NoStream.allocate\(nbytes.* takes no stream.*stream='s1'"
    ):
        RmmSource(NoStream(), stream="s1")


def test_an_unreadable_signature_gets_the_stream() -> None:
    resource = StreamRequired()
    wrapped = types.SimpleNamespace(
        allocate=Unreadable(resource.allocate), deallocate=Unreadable(resource.deallocate)
    )
    one_block(RmmSource(wrapped, stream="s2"))
    one_block(RmmSource(wrapped))
    assert resource.calls == [
        ("allocate", 4096, "s2"),
        ("deallocate", 4096, "s2"),
        ("allocate", 4096, None),
        ("deallocate", 4096, None),
    ]


def test_a_signature_that_takes_neither_call_is_refused() -> None:
    def keyword_stream(nbytes: int, *, stream: Any) -> int:
        return 0

    resource = types.SimpleNamespace(allocate=keyword_stream, deallocate=lambda p, n, s: None)
    with pytest.raises(ConfigError, match=r"takes neither allocate\(nbytes\) nor allocate"):
        RmmSource(resource)


@dataclass
class Returning(HostResource):
    """Allocates, then returns ``value`` instead of the pointer."""

    value: Any = None

    def allocate(self, nbytes: int, stream: Any = None) -> int:
        super().allocate(nbytes, stream)
        return self.value  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "value", [None, -4096, 4096.0, True, "4096", 1 << 64, np.float64(4096), b"\x10"]
)
def test_a_returned_value_that_is_no_pointer_is_refused(value: Any) -> None:
    resource = Returning(value=value)
    with pytest.raises(ConfigError, match=r"Returning.allocate\(4096\) returned .*not a pointer"):
        RmmSource(resource).allocate(4096)
    assert [c[0] for c in resource.calls] == ["allocate"]  # never given back: not a pointer
    with (
        Arena("cpu", source=Returning(value=value), framework="numpy") as a,
        pytest.raises(ConfigError, match="int from 1 to 2\\*\\*64 - 1"),
    ):
        a.get_simultaneous(((64,), "uint8"))
    assert a.stats().live_blocks == 0


def test_a_null_pointer_is_out_of_memory() -> None:
    resource = Returning(value=0)
    with pytest.raises(ArenaOutOfMemoryError, match=r"null pointer \(0\)"):
        RmmSource(resource).allocate(4096)
    with Arena("cpu", source=Returning(value=0), framework="numpy") as a:
        with pytest.raises(
            ArenaOutOfMemoryError, match=r"could not allocate 256 bytes.*null pointer"
        ):
            a.get_simultaneous(((64,), "uint8"))
        assert a.memory_stats()["num_ooms"] == 1


def test_a_numpy_integer_pointer_is_taken() -> None:
    resource = HostResource()
    numpy_pointers = types.SimpleNamespace(
        allocate=lambda n, s=None: np.uint64(resource.allocate(n, s)),
        deallocate=resource.deallocate,
    )
    allocation = RmmSource(numpy_pointers).allocate(4096)
    assert type(allocation.ptr) is int and allocation.ptr in resource.blocks


def test_rmm_source_on_cuda_owns_through_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = with_arrays(cupy_with_events())
    install(monkeypatch, cupy=cupy, torch=None)
    resource = HostResource()
    source = RmmSource(resource, CUDA0)
    allocation = source.allocate(4096)
    assert isinstance(allocation, Allocation) and allocation.device == CUDA0
    owner = allocation.owner
    assert owner.data.ptr == allocation.ptr and owner.shape == (4096,)
    assert isinstance(source.stream_events(), deferred.CupyEvents)
    del allocation, owner
    gc.collect()
    assert resource.calls[-1] == ("deallocate", 4096, None)


def test_a_resource_with_host_pointers_needs_no_gpu() -> None:
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("a check of the host default; CuPy is installed here")
    assert RmmSource(HostResource()).stream_events() is None


# ====================================================================== on a GPU
@pytest.mark.gpu
@pytest.mark.parametrize("source", ["pool", "torch"])
def test_real_events_release_the_old_block(source: str) -> None:
    """CuPy's or torch's events on real streams: a growth records them, and once the
    device is idle the next allocation gives the old block back."""
    torch = pytest.importorskip("torch")
    if source == "pool":
        pytest.importorskip("cupy")
    with Arena("cuda:0", source=source, framework="torch") as a:
        (x,) = a.get_simultaneous(((MB,), torch.float32))
        x.fill_(1.0)  # work queued on the current stream over the old block
        a.get_simultaneous(((4 * MB,), torch.float32))
        assert a.stats().frees == 1
        torch.cuda.synchronize()
        a.get_persistent("next", (16,), torch.float32)  # collects what has completed
        assert a.memory_stats()["arena.pending_release_bytes"] == 0
        allocate = a.triton_allocator()
        side = torch.cuda.Stream()
        allocate(1024, 16, side.cuda_stream)
        allocate(MB, 16, side.cuda_stream)  # the old block waits on the side stream too
    assert a.memory_stats()["arena.pending_release_bytes"] == 0  # close() waited


@pytest.mark.parametrize("finished", [0, 5])
def test_a_block_used_on_two_streams_waits_for_both(finished: int) -> None:
    # Planted bug: a block given back once any one of its streams' events completed.
    source = StreamOrderedSource(fake=FakeEvents(current=(0, 5)))
    with Arena(source=source, framework="numpy") as a:
        a.get_simultaneous(((1024,), "uint8"))
        a.get_simultaneous(((MB,), "uint8"))  # growth: the 1 KiB block waits on 0 and 5
        events = {e.stream: e for e in source.fake.recorded}
        assert sorted(events) == [0, 5]
        events[finished].complete = True  # one stream is done with it, the other is not
        a.get_persistent("p", (16,), "uint8")  # an allocation collects what is done
        assert ("release", 1024) not in source.events
        assert a.memory_stats()["arena.pending_release_bytes"] == 1024
        events[5 - finished].complete = True
        a.get_persistent("q", (16,), "uint8")
        assert ("release", 1024) in source.events
        assert a.memory_stats()["arena.pending_release_bytes"] == 0


@dataclass
class FaultyStreamOrderedSource(StreamOrderedSource):
    """Raises ``KeyboardInterrupt`` at the releases whose 1-based numbers are in
    ``fail_at`` (after taking the block back, as an interrupt in the source would)."""

    fail_at: set[int] = field(default_factory=set)
    releases: int = 0

    def release(self, allocation: Allocation) -> None:
        self.releases += 1
        super().release(allocation)
        if self.releases in self.fail_at:
            raise KeyboardInterrupt(f"interrupted at release #{self.releases}")


@pytest.mark.parametrize("how", ["collect", "close"])
def test_an_interrupt_giving_one_block_back_still_gives_back_the_others(how: str) -> None:
    # deferred.py _give_back: every ready block goes to the source even when one release
    # raises, each removed from the pending list first; the first error propagates.
    source = FaultyStreamOrderedSource(fail_at={1})
    a = Arena(source=source, framework="numpy")
    a.get_simultaneous(((1024,), "uint8"))
    a.get_simultaneous(((4096,), "uint8"))
    a.get_simultaneous(((MB,), "uint8"))  # two blocks now wait on their events
    assert a.memory_stats()["arena.pending_release_bytes"] == 1024 + 4096
    source.fake.complete_all()
    with pytest.raises(KeyboardInterrupt, match="release #1"):
        if how == "collect":
            a.get_persistent("p", (16,), "uint8")  # an allocation collects both
        else:
            a.close()
    assert sorted(n for kind, n in source.events if kind == "release")[:2] == [1024, 4096]
    if how == "collect":
        assert a.memory_stats()["arena.pending_release_bytes"] == 0
        a.get_persistent("p", (16,), "uint8")  # the arena goes on
        a.close()
    assert source.live == {}


def test_a_block_whose_recording_failed_is_skipped_by_collection() -> None:
    # deferred.py collect #5: entries without events (recording failed) were queried.
    source = StreamOrderedSource()
    a = Arena(source=source, framework="numpy")
    a.get_simultaneous(((1024,), "uint8"))
    source.fake.fail_record = True
    with pytest.raises(KeyboardInterrupt):
        a.get_simultaneous(((4096,), "uint8"))
    source.fake.fail_record = False
    held = a.memory_stats()["arena.pending_release_bytes"]
    assert held > 0  # a block without events
    a.get_simultaneous(((MB,), "uint8"))  # collects (and holds another block, with events)
    source.fake.complete_all()
    a.get_persistent("p", (16,), "uint8")  # collects again: only the block with events goes
    assert a.memory_stats()["arena.pending_release_bytes"] == held
    assert ("synchronize",) not in source.fake.calls
    a.close()
    assert ("synchronize",) in source.fake.calls and source.live == {}


CUDA1 = Device("cuda", 1)


def _indexed_cupy(count: int) -> types.ModuleType:
    """CuPy with events whose calls name the device index they are made for."""
    cupy = cupy_with_events()
    calls = cupy.calls
    cupy.cuda.runtime.getDeviceCount = lambda: count

    def current(index: int = -1) -> Any:
        calls.append(("get_current_stream", index))
        return types.SimpleNamespace(ptr=30 + index)

    cupy.cuda.get_current_stream = current
    return cupy


def _indexed_torch(initialized: bool = True) -> types.ModuleType:
    torch = fake_torch(stream=9)
    calls = torch.calls

    def current(index: Any = None) -> Any:
        calls.append(("current_stream", index))
        return types.SimpleNamespace(cuda_stream=90 + index)

    def external(handle: int, device: Any = "unset") -> Any:
        calls.append(("ExternalStream", handle, device))
        return types.SimpleNamespace(cuda_stream=handle)

    torch.cuda.current_stream = current
    torch.cuda.ExternalStream = external
    torch.cuda.is_initialized = lambda: initialized
    return torch


def test_cupy_events_act_on_the_arenas_device(monkeypatch: pytest.MonkeyPatch) -> None:
    # deferred.py CupyEvents: the device index of every call (the current streams, the
    # device made current around recording and synchronising), for a device other than 0.
    cupy = _indexed_cupy(count=2)
    torch = _indexed_torch()
    install(monkeypatch, cupy=cupy, torch=torch)
    events = deferred.stream_events(CUDA1)
    assert isinstance(events, deferred.CupyEvents)
    streams = events.streams([7, 31])
    assert [s.ptr for s in streams] == [31, 91, 7]  # CuPy's, torch's, Triton's; no repeats
    assert ("get_current_stream", 1) in cupy.calls and ("current_stream", 1) in torch.calls
    events.record(streams[0])
    events.synchronize()
    assert [c for c in cupy.calls if c[0] == "device"] == [("device", 1)] * 3


def test_cupy_events_leave_out_torch_before_torch_initialises_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # deferred.py _torch_current: torch's stream asked for only once torch initialised
    # CUDA (asking would initialise it), and never without torch.
    for torch in (_indexed_torch(initialized=False), None):
        cupy = _indexed_cupy(count=1)
        install(monkeypatch, cupy=cupy, torch=torch)
        streams = deferred.stream_events(CUDA0).streams([7])
        assert [s.ptr for s in streams] == [30, 7]
        assert torch is None or torch.calls == []


def test_torch_events_where_cupy_does_not_see_the_arenas_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # deferred.py stream_events #1/#6: CuPy installed but seeing one device: device 1's
    # events are torch's; TorchEvents.streams asks for device 1's streams.
    cupy = _indexed_cupy(count=1)
    torch = _indexed_torch()
    install(monkeypatch, cupy=cupy, torch=torch)
    events = deferred.stream_events(CUDA1)
    assert isinstance(events, deferred.TorchEvents)
    streams = events.streams([4, 91])
    assert [s.cuda_stream for s in streams] == [91, 4]
    assert torch.calls == [("current_stream", 1), ("ExternalStream", 4, 1)]
