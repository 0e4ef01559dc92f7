"""Persistent buffers and resources created by two threads at once, and racing lock() and
close(): one thread is held inside the allocation (or the factory) while the other acts,
as the safety tests do for scratch growth."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaClosedError, PersistentMismatchError
from arena.slots.persistent import PersistentStore
from tests.gates import TIMEOUT, Gate, run
from tests.sources import RecordingSource, check_books

F32 = "float32"


def _blocked(thread: threading.Thread) -> bool:
    """Whether ``thread`` is still waiting (on the arena's mutex) after a moment."""
    thread.join(0.2)
    return thread.is_alive()


@pytest.mark.parametrize("zero_init", [False, True])
def test_two_threads_creating_one_persistent_key_get_one_buffer(zero_init: bool) -> None:
    gate = Gate()
    source = RecordingSource()
    a = Arena(source=source, framework="numpy", alloc_context=gate)
    gate.armed = True
    first, first_out = run(a.get_persistent, "kv", (64,), F32, zero_init)
    assert gate.inside.wait(TIMEOUT)  # the first thread is inside the allocation
    second, second_out = run(a.get_persistent, "kv", (64,), F32, zero_init)
    assert _blocked(second)  # it saw no entry and waits for the first to finish
    gate.go.set()
    first.join(TIMEOUT)
    second.join(TIMEOUT)
    one, two = first_out[0], second_out[0]
    assert isinstance(one, np.ndarray) and isinstance(two, np.ndarray)
    assert a.numpy.data_ptr(one) == a.numpy.data_ptr(two)
    assert source.allocations() == [256]  # one block, not one per thread
    one[:] = 5.0
    assert (a.get_persistent("kv", (64,), F32) == 5.0).all()  # created once, never re-zeroed
    assert a.stats().slots[0].persistent_keys == 1
    check_books(a, source)
    a.close()
    assert source.live == {}


def test_two_threads_creating_one_key_with_different_shapes_one_is_refused() -> None:
    gate = Gate()
    source = RecordingSource()
    a = Arena(source=source, framework="numpy", alloc_context=gate)
    gate.armed = True
    first, first_out = run(a.get_persistent, "kv", (64,), F32)
    assert gate.inside.wait(TIMEOUT)
    second, second_out = run(a.get_persistent, "kv", (32,), F32)
    assert _blocked(second)
    gate.go.set()
    first.join(TIMEOUT)
    second.join(TIMEOUT)
    assert first_out[0].shape == (64,)
    assert isinstance(second_out[0], PersistentMismatchError)
    assert source.allocations() == [256]
    check_books(a, source)
    a.close()


def test_lock_waits_for_a_persistent_buffer_in_creation_and_shares_it() -> None:
    gate = Gate()
    source = RecordingSource()
    a = Arena(source=source, ubatches=2, framework="numpy", alloc_context=gate)
    gate.armed = True
    creator, created = run(a.get_persistent, "kv", (64,), F32)
    assert gate.inside.wait(TIMEOUT)
    locker, locked = run(a.lock)
    assert _blocked(locker)
    gate.go.set()
    creator.join(TIMEOUT)
    locker.join(TIMEOUT)
    assert locked == [None] and created[0].shape == (64,)
    with a.ubatch(1):  # lock() saw the new key and gave it to the sibling
        assert a.get_persistent("kv", (64,), F32).shape == (64,)
    assert [s.persistent_keys for s in a.stats().slots] == [1, 1]
    assert source.allocations() == [256, 256]
    check_books(a, source)
    a.close()
    assert source.live == {}


def test_close_waits_for_a_persistent_buffer_in_creation_and_releases_it() -> None:
    gate = Gate()
    source = RecordingSource()
    a = Arena(source=source, framework="numpy", alloc_context=gate)
    gate.armed = True
    creator, created = run(a.get_persistent, "kv", (64,), F32)
    assert gate.inside.wait(TIMEOUT)
    closer, closed = run(a.close)
    assert _blocked(closer)
    gate.go.set()
    creator.join(TIMEOUT)
    closer.join(TIMEOUT)
    assert closed == [None]
    view = created[0]
    view[:] = 1.0  # served before close(): it keeps its memory alive
    assert source.live == {} and a.stats().live_blocks == 0
    with pytest.raises(ArenaClosedError):
        a.get_persistent("kv", (64,), F32)


def test_a_key_created_by_another_thread_meanwhile_is_not_created_again_after_lock() -> None:
    """The second thread checks the key, then lock() runs; the key exists by then, so the
    second thread gets it instead of a locked error."""
    gate = Gate()
    a = Arena("cpu", framework="numpy", alloc_context=gate)
    gate.armed = True
    creator, _ = run(a.get_persistent, "kv", (64,), F32)
    assert gate.inside.wait(TIMEOUT)
    reader, read = run(a.get_persistent, "kv", (64,), F32)
    assert _blocked(reader)
    gate.go.set()
    creator.join(TIMEOUT)
    reader.join(TIMEOUT)
    a.lock()
    assert read[0].shape == (64,)
    assert a.get_persistent("kv", (64,), F32).shape == (64,)
    a.close()


def test_two_threads_building_one_resource_both_get_the_first_stored() -> None:
    inside = threading.Event()
    go = threading.Event()
    built: list[Any] = []

    def slow_factory() -> Any:
        inside.set()
        assert go.wait(TIMEOUT)
        built.append(object())
        return built[-1]

    def quick_factory() -> Any:
        built.append(object())
        return built[-1]

    a = Arena("cpu", framework="numpy")
    slow, slow_out = run(a.get_persistent_resource, "handle", slow_factory)
    assert inside.wait(TIMEOUT)  # the slow builder runs its factory with no lock held
    quick = a.get_persistent_resource("handle", quick_factory)  # stored first
    go.set()
    slow.join(TIMEOUT)
    assert slow_out == [quick]  # the slow thread gets the object stored first, not its own
    assert a.get_persistent_resource("handle", quick_factory) is quick
    assert len(built) == 2
    assert a.stats().slots[0].persistent_keys == 1
    a.close()


def test_a_resource_whose_arena_closes_while_it_is_built_is_refused() -> None:
    inside = threading.Event()
    go = threading.Event()

    def factory() -> Any:
        inside.set()
        assert go.wait(TIMEOUT)
        return object()

    a = Arena("cpu", framework="numpy")
    builder, out = run(a.get_persistent_resource, "handle", factory)
    assert inside.wait(TIMEOUT)
    a.close()
    go.set()
    builder.join(TIMEOUT)
    assert isinstance(out[0], ArenaClosedError)
    assert a.stats().slots[0].persistent_keys == 0


def test_two_threads_asking_for_a_persistent_view_at_once_get_one_view_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first request of a framework's view of a persistent buffer builds it; two at
    once must still leave one view object, the one every later call returns."""
    a = Arena("cpu", framework="numpy")
    a.get_persistent("kv", (64,), F32)  # the buffer exists; torch has no view of it yet
    torch = pytest.importorskip("torch")
    from arena.adapters import torch as torch_adapter

    inside = threading.Event()
    go = threading.Event()
    original = torch_adapter.ADAPTER.typed_views
    holder: dict[str, Any] = {}

    def gated(buffer: Any, layout: Any) -> Any:
        if threading.current_thread() is holder.get("thread"):
            inside.set()
            assert go.wait(TIMEOUT)
        return original(buffer, layout)

    monkeypatch.setattr(torch_adapter.ADAPTER, "typed_views", gated)

    def first() -> Any:
        holder["thread"] = threading.current_thread()
        return a.torch.get_persistent("kv", (64,), torch.float32)

    thread, out = run(first)
    assert inside.wait(TIMEOUT)
    other = a.torch.get_persistent("kv", (64,), torch.float32)
    go.set()
    thread.join(TIMEOUT)
    later = a.torch.get_persistent("kv", (64,), torch.float32)
    assert out[0] is other is later
    a.close()


class _StoredMeanwhile(dict):  # type: ignore[type-arg]
    """A resource table whose first lookup misses while another thread stores the key:
    the interleaving "looked, then someone else stored" made deterministic."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value

    def __getitem__(self, key: Any) -> Any:
        if key not in self:
            dict.__setitem__(self, key, self.value)  # the other thread stores it now
            raise KeyError(key)
        return dict.__getitem__(self, key)


@pytest.mark.parametrize("locked", [False, True])
def test_a_resource_stored_by_another_thread_after_the_first_look_is_returned(
    locked: bool,
) -> None:
    """The key is checked again under the mutex: neither a second build nor, when the
    arena locked meanwhile, a locked error for a key that exists."""
    a = Arena("cpu", framework="numpy")
    theirs = object()
    a._table.slots[0].store(PersistentStore).resources = _StoredMeanwhile(theirs)
    if locked:
        a.lock()
    builds: list[object] = []
    mine = a.get_persistent_resource("handle", lambda: builds.append(object()) or builds[-1])
    assert mine is theirs and builds == []
    a.close()
