"""Memory safety under races, faults and graph capture: each test forces one bad
interleaving or failure that the design must survive (gated on events, not on luck)."""

from __future__ import annotations

import gc
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import arena
from arena import (
    Arena,
    ArenaClosedError,
    ArenaEvent,
    ArenaLockedError,
    ArenaOutOfMemoryError,
    ConfigError,
    GraphCaptureError,
    SlotError,
)
from tests.gates import TIMEOUT, Gate, Probe, moving_only, run
from tests.sources import FaultySource, RecordingSource, check_books

F32 = "float32"


# ---------------------------------------------------------------------- 1. close races
def test_a_request_whose_growth_is_closed_under_it_raises_closed_not_a_bad_view() -> None:
    a = Arena("cpu", framework="numpy")
    a.add_listener(lambda ev: a.close() if ev.kind == "resize" else None)
    with pytest.raises(ArenaClosedError):
        a.get_simultaneous(((1 << 20,), F32))
    assert a.stats().live_blocks == 0  # nothing it allocated outlives close()


def test_reset_arena_inside_a_growth_gives_closed_error() -> None:
    a = arena.init_arena("cpu", framework="numpy")
    a.add_listener(lambda ev: arena.reset_arena("cpu") if ev.kind == "resize" else None)
    with pytest.raises(ArenaClosedError):
        a.get_simultaneous(((1 << 16,), F32))
    check_books(a)
    assert a.stats().live_blocks == 0


def test_close_while_another_thread_is_inside_its_growth() -> None:
    gate = Gate()
    source = RecordingSource()
    a = Arena(source=source, framework="numpy", alloc_context=gate)
    a.get_simultaneous(((16,), F32))
    gate.armed = True
    worker, out = run(a.get_simultaneous, ((1 << 16,), F32))
    assert gate.inside.wait(TIMEOUT)
    closer, closed = run(a.close)
    gate.go.set()
    worker.join(TIMEOUT)
    closer.join(TIMEOUT)
    assert closed == [None]
    result = out[0]
    if isinstance(result, BaseException):
        assert isinstance(result, ArenaClosedError)
    else:  # served before close(): a valid view over memory it keeps alive
        (view,) = result
        view[:] = 7
        assert view.base.nbytes >= view.nbytes and (view == 7).all()
    assert source.live == {} and a.stats().live_blocks == 0


# ---------------------------------------------------------------------- 2. one slot, two threads
def test_a_smaller_request_racing_a_growth_never_shrinks_the_buffer() -> None:
    gate = Gate()
    source = RecordingSource()
    a = Arena(source=source, framework="numpy", alloc_context=gate)
    gate.armed = True
    big, big_out = run(a.get_simultaneous, ((1 << 16,), F32))  # 256 KiB: grows first
    assert gate.inside.wait(TIMEOUT)
    small, small_out = run(a.get_simultaneous, ((1 << 10,), F32))  # saw capacity 0 too
    gate.go.set()
    big.join(TIMEOUT)
    small.join(TIMEOUT)
    (big_view,) = big_out[0]
    (small_view,) = small_out[0]
    assert a.stats().slots[0].capacity == 1 << 18
    assert source.allocations() == [1 << 18]  # one growth, no shrink
    big_view[:] = 1.0  # in bounds of live memory
    assert big_view.base.nbytes >= big_view.nbytes
    assert small_view.base is big_view.base


def test_views_are_never_built_past_their_buffer() -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=1, framework="numpy") as a:
        for n in (10, 1000, 10, 50_000, 3):
            (v,) = a.get_simultaneous(((n,), F32))
            base = v.base
            assert v.nbytes <= base.nbytes


# ---------------------------------------------------------------------- 3. nothing after lock()
def test_lock_waits_for_a_growth_in_flight_and_nothing_allocates_after_it() -> None:
    gate = Gate()
    order: list[str] = []
    source = RecordingSource()
    a = Arena(source=source, framework="numpy", alloc_context=gate)
    gate.armed = True
    grower, _ = run(a.get_simultaneous, ((4096,), F32))
    assert gate.inside.wait(TIMEOUT)

    def lock_and_note() -> None:
        a.lock()
        order.append(f"locked after {len(source.allocations())} allocation(s)")

    locker, _ = run(lock_and_note)
    locker.join(0.2)
    assert locker.is_alive()  # lock() waits for the growth it would otherwise race
    gate.go.set()
    grower.join(TIMEOUT)
    locker.join(TIMEOUT)
    assert order == ["locked after 1 allocation(s)"]
    before = list(source.events)
    assert a.try_get_simultaneous(((1 << 20,), F32)) is None
    assert source.events == before and a.stats().allocations_while_locked == 0
    a.close()


# ---------------------------------------------------------------------- 4. lock releases nothing
def test_lock_retires_a_smaller_sibling_instead_of_releasing_it() -> None:
    source = RecordingSource()
    a = Arena(source=source, ubatches=2, framework="numpy")
    with a.ubatch(1):
        a.get_simultaneous(((64,), F32))  # a graph may have captured this buffer
    a.get_simultaneous(((100_000,), F32))
    releases = [e for e in source.events if e[0] == "release"]
    a.lock()
    assert [e for e in source.events if e[0] == "release"] == releases  # lock() freed nothing
    slots = a.stats().slots
    assert slots[1].capacity == slots[0].capacity
    assert slots[1].retired_bytes == 256 and slots[1].retired_buffers == 1
    check_books(a, source)
    assert a.release_retired() == 256
    assert a.stats().slots[1].retired_buffers == 0
    check_books(a, source)
    a.close()
    assert source.live == {}


def test_buffers_served_during_capture_are_retired_until_close() -> None:
    probe = Probe()
    source = RecordingSource()
    a = Arena(source=source, framework="numpy", capture_probe=probe)
    a.get_simultaneous(((256,), F32))  # warm-up, eager
    probe.capturing = True
    a.get_simultaneous(((256,), F32))  # served inside the capture
    with pytest.raises(GraphCaptureError):
        a.get_simultaneous(((1 << 16,), F32))  # growth during capture stays refused
    probe.capturing = False
    a.get_simultaneous(((1 << 16,), F32))  # later growth, unlocked
    assert ("release", 1024) not in source.events  # the captured buffer was not freed
    assert a.stats().slots[0].retired_bytes == 1024
    assert a.release_retired() == 0  # captured buffers wait for close() ...
    check_books(a, source)
    a.close()
    assert ("release", 1024) in source.events and source.live == {}  # ... which frees them


@moving_only("growth after a capture retires nothing in place, so there is nothing to release")
def test_release_retired_can_include_captured_buffers_on_request() -> None:
    probe = Probe()
    a = Arena("cpu", framework="numpy", capture_probe=probe)
    a.get_simultaneous(((256,), F32))
    probe.capturing = True
    a.get_simultaneous(((256,), F32))
    probe.capturing = False
    a.get_simultaneous(((1 << 16,), F32))
    assert a.release_retired(include_captured=True) == 1024
    check_books(a)
    with pytest.raises(ConfigError, match="include_captured"):
        a.release_retired(include_captured="yes")  # type: ignore[arg-type]


def test_uncaptured_growth_still_releases_before_allocating() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy", capture_probe=Probe()) as a:
        a.get_simultaneous(((256,), F32))
        a.get_simultaneous(((1 << 16,), F32))
        assert source.events[:3] == [("allocate", 1024), ("release", 1024), ("allocate", 1 << 18)]


def test_first_framework_import_during_capture_is_refused() -> None:
    torch = pytest.importorskip("torch")
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as a:
        a.get_simultaneous(((256,), F32))
        probe.capturing = True
        a.get_simultaneous(((256,), F32))  # NumPy: already imported, fine
        with pytest.raises(GraphCaptureError, match="first torch view"):
            a.torch.get_simultaneous(((256,), torch.float32))


# ---------------------------------------------------------------------- 5. failure-atomic growth
@pytest.mark.parametrize("fault", [MemoryError, KeyboardInterrupt, RuntimeError])
def test_a_failed_growth_keeps_a_buffer_of_the_old_capacity(fault: type[BaseException]) -> None:
    source = FaultySource(fail_at={2}, fault=fault)
    a = Arena(source=source, ubatches=2, framework="numpy")
    a.get_simultaneous(((1000,), F32))
    expected: type[BaseException] = ArenaOutOfMemoryError if fault is MemoryError else fault
    with pytest.raises(expected) as info:
        a.get_simultaneous(((1 << 20,), F32))
    assert a.stats().slots[0].capacity == 4096
    if sys.version_info >= (3, 11):
        assert any("keeps a buffer of its old 4096 bytes" in n for n in info.value.__notes__)
    check_books(a, source)
    a.lock()  # the old size is still served after lock, and nothing says "never sized"
    (w,) = a.get_simultaneous(((1000,), F32))
    w[:] = 3
    with pytest.raises(ArenaLockedError) as locked:
        a.get_simultaneous(((2000,), F32))
    assert "never sized" not in str(locked.value) and "keeps a buffer" not in str(locked.value)
    assert locked.value.current == 4096  # and the message says so: "(4096 bytes) in slot"
    assert "current size is 0.00 MB (4096 bytes) in slot" in str(locked.value)
    a.close()
    assert source.live == {}


# ---------------------------------------------------------------------- 6. interrupts
def test_interrupt_in_a_release_during_close_still_releases_everything() -> None:
    source = FaultySource(fail_release_at={1}, fault=KeyboardInterrupt)
    a = Arena(source=source, ubatches=2, framework="numpy")
    a.get_simultaneous(((1000,), F32))
    a.get_persistent("kv", (16,), F32)
    with a.ubatch(1):
        a.get_simultaneous(((10,), F32))
    with pytest.raises(KeyboardInterrupt):
        a.close()
    assert source.live == {}
    check_books(a, source)
    assert a.stats().live_blocks == 0 and a.is_closed


def test_interrupt_in_alloc_context_exit_after_a_successful_allocation() -> None:
    source = RecordingSource()
    state = {"fail": False}

    @contextmanager
    def context() -> Iterator[None]:
        yield
        if state["fail"]:
            state["fail"] = False
            raise KeyboardInterrupt

    a = Arena(source=source, framework="numpy", alloc_context=context)
    a.get_simultaneous(((1000,), F32))
    state["fail"] = True
    with pytest.raises(KeyboardInterrupt):
        a.get_simultaneous(((1 << 16,), F32))
    check_books(a, source)
    assert a.stats().slots[0].capacity == 4096  # the old size came back
    a.close()
    assert source.live == {}


def test_interrupt_in_a_listener_leaves_a_complete_growth() -> None:
    source = RecordingSource()
    a = Arena(source=source, framework="numpy")

    def listener(event: ArenaEvent) -> None:
        if event.kind == "resize":
            raise KeyboardInterrupt

    a.add_listener(listener)
    with pytest.raises(KeyboardInterrupt):
        a.get_simultaneous(((1000,), F32))
    a.remove_listener(listener)
    assert a.stats().slots[0].capacity == 4096
    check_books(a, source)
    a.close()


def test_interrupt_while_zeroing_a_persistent_buffer_leaves_no_entry() -> None:
    class Refusing(np.ndarray):
        def fill(self, value: Any) -> None:
            raise KeyboardInterrupt

    class ZeroFails(RecordingSource):
        def allocate(self, nbytes: int) -> arena.Allocation:
            block = super().allocate(nbytes)
            return arena.Allocation(block.ptr, nbytes, block.owner.view(Refusing), block.device)

    source = ZeroFails()
    with Arena(source=source, framework="numpy") as a:
        with pytest.raises(KeyboardInterrupt):
            a.get_persistent("kv", (16,), F32, zero_init=True)
        assert a.stats().slots[0].persistent_keys == 0
        check_books(a, source)


# ---------------------------------------------------------------------- 8. growth peak
def _traced_peak(n: int, keep_old_view: bool) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        a = Arena("cpu", framework="numpy")  # traced from before the first allocation
        (old,) = a.get_simultaneous(((n,), "uint8"))
        if not keep_old_view:
            del old
        a.get_simultaneous(((2 * n,), "uint8"))
        _, peak = tracemalloc.get_traced_memory()
        a.close()
    finally:
        tracemalloc.stop()
    return peak


@moving_only(
    "traces NumPy allocations with tracemalloc; mapped memory is not traced (the peak on "
    "fixed addresses is checked in test_virtual_memory.py)"
)
def test_growth_peak_is_the_new_size_traced_from_the_start() -> None:
    n = 32 << 20
    peak = _traced_peak(n, keep_old_view=False)
    assert 2 * n <= peak < 2 * n + (1 << 20), f"peak {peak / n:.3f} N; allocate-first gives 3 N"


@moving_only(
    "in place the peak is the new size even with an old view alive (test_virtual_memory.py)"
)
def test_growth_peak_with_a_live_old_view_is_old_plus_new() -> None:
    n = 32 << 20
    peak = _traced_peak(n, keep_old_view=True)
    assert peak >= 3 * n  # the honest figure: a live view keeps the old buffer


# ---------------------------------------------------------------------- 9. smaller ones
def test_zero_byte_request_on_a_pending_sibling_does_not_allocate() -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=2, framework="numpy") as a:
        a.get_simultaneous(((1000,), F32))
        before = list(source.events)
        with a.ubatch(1):
            (empty,) = a.get_simultaneous(((0, 4), F32))
            assert empty.shape == (0, 4)
        assert source.events == before
        with a.ubatch(1):
            a.get_simultaneous(((1,), F32))  # its first real request follows its sibling
        assert a.stats().slots[1].capacity == 4096


# ---------------------------------------------------------------------- 9. capture window
class PausingProbe:
    """A capture probe that says "capturing" to one thread only (as a stream probe does)
    and holds that thread inside its first call until released."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.paused = False
        self.inside = threading.Event()
        self.go = threading.Event()

    def __call__(self) -> bool:
        if threading.current_thread() is not self.thread:
            return False
        if not self.paused:
            self.paused = True
            self.inside.set()
            assert self.go.wait(TIMEOUT)
        return True


def _live_block_of(source: RecordingSource, ptr: int) -> tuple[int, int] | None:
    for start, nbytes in source.live.items():
        if start <= ptr < start + nbytes:
            return start, nbytes
    return None


@pytest.mark.parametrize("cached", [False, True], ids=["fresh", "cached"])
@pytest.mark.parametrize("shape", [(256,), (200,)], ids=["hit", "miss"])
def test_a_growth_inside_the_capture_window_never_frees_what_the_capture_reads(
    shape: tuple[int, ...], cached: bool, hit_path: str
) -> None:
    """The capturing thread is paused between building its views and learning that it
    captures; another thread grows the slot by a request in that window. The capture must
    end up on a buffer the arena keeps until close(), never on one it released."""
    source = RecordingSource()
    probe = PausingProbe()
    a = Arena(source=source, framework="numpy", capture_probe=probe, cached_views=cached)
    a.get_simultaneous(((256,), F32))  # warm-up, eager: (256,) is now remembered

    def capture() -> Any:
        probe.thread = threading.current_thread()
        return a.get_simultaneous((shape, F32))

    thread, out = run(capture)
    assert probe.inside.wait(TIMEOUT)
    a.get_simultaneous(((1 << 18,), F32))  # another thread grows the slot in the window
    probe.go.set()
    thread.join(TIMEOUT)
    (view,) = out[0]
    block = _live_block_of(source, a.numpy.data_ptr(view))
    assert block is not None, "the capture reads a buffer the arena released"
    a.reserve_bytes(1 << 22)  # a later growth, not capturing, must retire it
    assert _live_block_of(source, a.numpy.data_ptr(view)) == block
    assert a.release_retired() == 0  # captured: kept until close()
    check_books(a, source)
    a.close()
    assert source.live == {}


def test_a_reserve_inside_the_capture_window_fails_the_capture_by_name(hit_path: str) -> None:
    """reserve_bytes() from another thread replaces the buffer before the capturing
    request could mark it: the request must not hand out views of the released buffer.
    The new buffer has no NumPy handle yet and cannot get one during a capture, so the
    request fails, naming the race."""
    source = RecordingSource()
    probe = PausingProbe()
    a = Arena(source=source, framework="numpy", capture_probe=probe)
    a.get_simultaneous(((256,), F32))

    def capture() -> Any:
        probe.thread = threading.current_thread()
        return a.get_simultaneous(((256,), F32))

    thread, out = run(capture)
    assert probe.inside.wait(TIMEOUT)
    a.reserve_bytes(1 << 20)
    probe.go.set()
    thread.join(TIMEOUT)
    assert isinstance(out[0], GraphCaptureError)
    assert "another thread" in str(out[0]) and "(ubatch 0, lane 0)" in str(out[0])
    check_books(a, source)
    a.close()


# ---------------------------------------------------------------------- 10. dropped arenas
class WatchedSource(RecordingSource):
    """Records a weak reference to the memory behind every block it hands out."""

    def __init__(self) -> None:
        super().__init__()
        self.owners: list[Any] = []

    def allocate(self, nbytes: int) -> arena.Allocation:
        allocation = super().allocate(nbytes)
        import weakref

        self.owners.append(weakref.ref(allocation.owner))
        return allocation


@pytest.mark.parametrize("ubatches", [1, 2])
def test_dropping_an_arena_frees_its_memory_without_the_cycle_collector(
    tmp_path: Any, ubatches: int
) -> None:
    torch = pytest.importorskip("torch")
    source = WatchedSource()
    gc.collect()
    gc.disable()  # only reference counting may free the memory
    try:
        a = Arena(
            source=source,
            framework="numpy",
            ubatches=ubatches,
            lanes=2,
            profile=tmp_path / "profile.json",
            event_log=tmp_path / "events.csv",
        )
        a.get_simultaneous(((1 << 20,), F32))
        a.torch.get_simultaneous(((64,), torch.float32))
        a.front("numpy", cached=True).get_simultaneous(((64,), F32))
        a.get_persistent("p", (16,), F32)
        a.get_persistent_resource("r", dict)
        with a.lane(1):
            a.get_simultaneous(((128,), F32))
        a.lock()
        assert source.owners and any(ref() is not None for ref in source.owners)
        del a
        alive = [ref for ref in source.owners if ref() is not None]
        assert alive == [], f"{len(alive)} blocks outlive the dropped arena until gc runs"
    finally:
        gc.enable()


# ---------------------------------------------------------------------- 11. outlived arenas
COLLECTED = r"garbage collected.*Keep a reference to the Arena"


def test_a_front_of_an_arena_never_kept_is_closed(hit_path: str) -> None:
    source = RecordingSource()
    front = Arena(source=source, framework="numpy").numpy  # the arena is gone at once
    with pytest.raises(ArenaClosedError, match=COLLECTED):
        front.get_simultaneous(((64,), F32))
    with pytest.raises(ArenaClosedError, match=COLLECTED):
        front.arena  # noqa: B018
    assert source.events == []


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_front_that_outlives_its_arena_stops_and_its_views_stay(
    hit_path: str, framework: str
) -> None:
    pytest.importorskip(framework)
    source = RecordingSource()
    a = Arena(source=source, framework="numpy")
    front = a.front(framework)
    for _ in range(2):  # the second is a hit: remembered by both hit paths
        (x,) = front.get_simultaneous(((1024,), F32))
    x[:] = 7
    a.lock()
    gc.collect()
    assert source.allocations() == [4096]
    del a
    gc.collect()
    # Closed: its blocks went back to the source; x keeps its own memory alive.
    assert source.live == {} and source.events[-1] == ("release", 4096)
    for request in (((1024,), F32), ((1 << 20,), F32)):  # a remembered one, a new one
        with pytest.raises(ArenaClosedError, match=COLLECTED):
            front.get_simultaneous(request)
        with pytest.raises(ArenaClosedError, match=COLLECTED):
            front.try_get_simultaneous(request)
    assert source.allocations() == [4096]  # nothing allocated after the arena went
    assert (np.asarray(x) == 7).all()
    x[:] = 8  # still writable: its memory is its own
    assert (np.asarray(x) == 8).all()


def listen_to_itself(a: Arena) -> None:
    a.add_listener(lambda event: a.stats())


def test_the_finalizer_never_keeps_the_arena_alive() -> None:
    import weakref

    source = WatchedSource()
    a = Arena(source=source, framework="numpy")
    a.get_simultaneous(((64,), F32))
    listen_to_itself(a)  # a cycle through the arena's own table
    gone = weakref.ref(a)
    del a
    gc.collect()
    # Collected with its table: the memory went with them (no close() to run).
    assert gone() is None and all(ref() is None for ref in source.owners)
    b = Arena(source=source, framework="numpy")  # no cycle: reference counting alone
    front = b.numpy
    gone = weakref.ref(b)
    del b
    assert gone() is None
    with pytest.raises(ArenaClosedError, match=COLLECTED):
        front.get_simultaneous(((64,), F32))


def test_close_then_collection_says_close() -> None:
    source = RecordingSource()
    a = Arena(source=source, framework="numpy")
    front = a.numpy
    front.get_simultaneous(((64,), F32))
    a.close()
    a.close()
    events = list(source.events)
    del a
    gc.collect()
    assert source.events == events  # released once, by close()
    with pytest.raises(ArenaClosedError, match=r"close\(\) or reset_arena\(\) was called"):
        front.get_simultaneous(((64,), F32))


# ---------------------------------------------------------------------- debug: slot sharing
def test_debug_mode_names_two_threads_inside_one_slot() -> None:
    gate = Gate()
    a = Arena("cpu", framework="numpy", debug=True, alloc_context=gate)
    gate.armed = True
    first, first_out = run(a.get_simultaneous, ((4096,), F32))
    assert gate.inside.wait(TIMEOUT)
    with pytest.raises(SlotError) as info:
        a.get_simultaneous(((16,), F32))
    gate.go.set()
    first.join(TIMEOUT)
    message = str(info.value)
    assert "worker-get_simultaneous" in message and "MainThread" in message
    assert "(ubatch 0, lane 0)" in message and "bind_ubatch" in message
    assert not isinstance(first_out[0], BaseException)
    a.get_simultaneous(((16,), F32))  # once the other thread is out, the slot is free
    a.close()


def test_debug_mode_allows_threads_on_their_own_slots() -> None:
    a = Arena("cpu", ubatches=2, framework="numpy", debug=True)

    def work(ubatch: int) -> None:
        a.bind_ubatch(ubatch)
        for n in range(1, 200):
            a.get_simultaneous(((n,), F32))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert a.stats().calls == 2 * 199
    a.close()
