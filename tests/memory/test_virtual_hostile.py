"""The fixed-address host source under attack: faults and interrupts inside sleep, and
close() while asleep. No view may ever be handed out, or left, over released memory.

Whether memory is accessible is checked without touching it from Python: ``os.write``
of a byte of it into a pipe fails with ``EFAULT`` where it is not mapped readable, where
a read from NumPy would kill the process with ``SIGSEGV``.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaAsleepError, ArenaWarning, ConfigError
from arena.memory.virtual import PAGE, VirtualHostSource
from tests.gates import TIMEOUT, run
from tests.interrupts import Injector

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="source='virtual' on the host is Linux's"
)

MiB = 1 << 20


def _accessible(*views: np.ndarray) -> bool:
    """Whether every page of every view can be read (without faulting the process).
    Tests assert on a local holding the result: pytest would print the arrays of a
    failing expression, reading the memory this checks."""
    read, write = os.pipe()
    try:
        for view in views:
            data = memoryview(view).cast("B")
            for offset in range(0, len(data), PAGE):
                try:
                    os.write(write, data[offset : offset + 1])
                except OSError:
                    return False
                os.read(read, 1)
        return True
    finally:
        os.close(read)
        os.close(write)


def _arena() -> tuple[Arena, np.ndarray, np.ndarray, np.ndarray]:
    a = Arena("cpu", source="virtual", max_bytes="16MiB", framework="numpy")
    weights = a.numpy.get_persistent("w", (PAGE,), "uint8")
    weights[:] = 7
    library = a.get_library_workspace("lib", 2 * PAGE)
    library[:] = 9
    (scratch,) = a.numpy.get_simultaneous(((2 * PAGE,), "uint8"))
    scratch[:] = 3
    return a, weights, library, scratch


def check_books(a: Arena) -> None:
    """Every block the arena took is released or held (workspaces included)."""
    stats = a.stats()
    assert stats.allocations == stats.frees + stats.live_blocks
    held = sum(
        s.capacity + s.retired_bytes + s.persistent_bytes + s.workspace_bytes + s.triton_bytes
        for s in stats.slots
    )
    assert stats.live_bytes == held


def test_a_failed_level_1_sleep_keeps_the_persistent_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, weights, library, _ = _arena()
    evict = VirtualHostSource.evict
    calls = []

    def failing(self: VirtualHostSource, allocation: Any) -> None:
        calls.append(allocation)
        if len(calls) == 3:  # the persistent buffer and the workspace are released first
            raise OSError(22, "injected")
        evict(self, allocation)

    monkeypatch.setattr(VirtualHostSource, "evict", failing)
    with pytest.raises(OSError, match="injected"):
        a.sleep(1)
    monkeypatch.undo()
    assert not a.is_asleep
    readable = _accessible(weights, library)
    assert readable
    assert (weights == 7).all() and (library == 9).all()
    a.sleep(1)
    a.wake()
    assert (weights == 7).all() and (library == 9).all()
    check_books(a)
    a.close()


@pytest.mark.parametrize("level", [1, 2])
def test_an_interrupt_anywhere_in_sleep_leaves_no_view_over_released_memory(level: int) -> None:
    at = 1
    while True:
        a, weights, library, scratch = _arena()
        tracer = Injector(at)
        sys.settrace(tracer)
        try:
            a.sleep(level)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        if not tracer.fired:
            break
        where = f"interrupt at call/return {at}"
        if a.is_asleep:
            with pytest.raises(ArenaAsleepError):
                a.numpy.get_simultaneous(((16,), "uint8"))
            a.wake()
        else:
            # Awake: every block is readable and a level-1 sleep lost nothing.
            readable = _accessible(weights, library, scratch)
            assert readable, where
            if level == 1:
                assert (weights == 7).all() and (library == 9).all(), where
        (again,) = a.numpy.get_simultaneous(((2 * PAGE,), "uint8"))
        readable = _accessible(again, weights, library)
        assert readable, where
        if level == 1:
            assert (weights == 7).all() and (library == 9).all(), where
        check_books(a)
        a.close()
        at += 1
    assert at > 20  # the tracer did reach into sleep()


@pytest.mark.parametrize("level", [1, 2])
def test_close_while_asleep_leaves_held_views_readable(level: int) -> None:
    a, weights, library, scratch = _arena()
    a.sleep(level)
    a.close()
    # close() promises views made before stay valid: none may be left over released memory.
    readable = _accessible(scratch, weights, library)
    assert readable
    scratch[:] = 1
    assert (scratch == 1).all()
    assert not a.is_asleep
    stats = a.memory_stats()
    assert stats["arena.asleep"] == 0 and stats["arena.closed"] == 1


def test_lock_while_asleep_is_refused_and_commits_nothing() -> None:
    # lock() brings siblings to the largest and gives them each other's persistent
    # buffers: asleep, that committed memory into released ranges, unseen by wake().
    a = Arena("cpu", source="virtual", max_bytes="16MiB", framework="numpy", ubatches=2)
    with a.ubatch(0):
        weights = a.numpy.get_persistent("w", (PAGE,), "uint8")
        weights[:] = 7
        a.numpy.get_simultaneous(((MiB,), "uint8"))
    with a.ubatch(1):
        a.numpy.get_simultaneous(((PAGE,), "uint8"))
    before = a.memory_stats()["reserved_bytes.all.current"]
    a.sleep(1)
    with pytest.raises(ArenaAsleepError, match="lock"):
        a.lock()
    with pytest.raises(ArenaAsleepError, match="lock"):
        a.lock(growth="in_place")
    assert not a.is_locked
    assert a.memory_stats()["reserved_bytes.all.current"] == before
    a.wake()
    a.lock(growth="in_place")
    with a.ubatch(1):
        (grown,) = a.numpy.get_simultaneous(((MiB,), "uint8"))
    readable = _accessible(grown, weights)
    assert readable
    assert (weights == 7).all()
    check_books(a)
    a.close()


@pytest.mark.parametrize("poison", [False, True])
def test_an_interrupt_anywhere_in_wake_leaves_it_asleep_with_nothing_committed_or_awake(
    poison: bool,
) -> None:
    at = 1
    while True:
        a, weights, library, scratch = _arena()
        a.sleep(1)
        tracer = Injector(at)
        sys.settrace(tracer)
        try:
            a.wake(poison=poison)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        if not tracer.fired:
            break
        where = f"interrupt at call/return {at}"
        if a.is_asleep:
            # Asleep: the memory stays released (memory_stats says 0 resident), the
            # copies kept for the next wake.
            assert a.memory_stats()["arena.resident_bytes"] == 0
            for view in (weights, library, scratch):
                readable = _accessible(view)
                assert not readable, where
            a.wake(poison=poison)
        readable = _accessible(weights, library, scratch)
        assert readable, where
        assert (weights == 7).all() and (library == 9).all(), where
        (again,) = a.numpy.get_simultaneous(((2 * PAGE,), "uint8"))
        readable = _accessible(again)
        assert readable, where
        check_books(a)
        a.close()
        at += 1
    assert at > 20  # the tracer did reach into wake()


@pytest.mark.parametrize(
    "call",
    [
        lambda a: a.reserve_bytes(MiB),
        lambda a: a.reserve(((MiB,), "uint8")),
        lambda a: a.plan_steps(),
    ],
    ids=["reserve_bytes", "reserve", "plan_steps"],
)
def test_sizing_while_asleep_is_refused_and_commits_nothing(call: Any) -> None:
    # Each sizes slots: asleep, that committed memory into released ranges (resident
    # while memory_stats says 0, and on CUDA mapped where wake() maps again).
    a, weights, _, _ = _arena()
    with a.numpy.step("k") as step:
        step.get_simultaneous(((MiB,), "uint8"))
    a.sleep(1)
    before = a.stats().slots[0].capacity
    with pytest.raises(ArenaAsleepError):
        call(a)
    assert a.stats().slots[0].capacity == before
    a.wake()
    call(a)
    assert (weights == 7).all()
    check_books(a)
    a.close()


def test_release_retired_while_asleep_is_refused_and_wake_still_works() -> None:
    # A workspace a capture read is retired when it grows; released while asleep, wake()
    # found a block it had released that the source no longer knew: asleep for good.
    capturing = [False]
    a = Arena(
        "cpu",
        source="virtual",
        max_bytes="16MiB",
        framework="numpy",
        capture_probe=lambda: capturing[0],
    )
    old = a.get_library_workspace("lib", PAGE)
    old[:] = 4
    capturing[0] = True
    a.get_library_workspace("lib", PAGE)  # read by a "graph": kept when it grows
    capturing[0] = False
    grown = a.get_library_workspace("lib", 16 * PAGE)
    assert a.stats().slots[0].retired_bytes == PAGE
    a.sleep(1)
    with pytest.raises(ArenaAsleepError, match="release_retired"):
        a.release_retired(include_captured=True)
    a.wake()
    assert not a.is_asleep
    readable = _accessible(old, grown)
    assert readable
    assert a.release_retired(include_captured=True) == PAGE
    check_books(a)
    a.close()


def test_arena_source_is_read_only_where_no_source_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Like ARENA_MAX_BYTES: an explicit argument wins, and a bad default breaks nothing
    # that does not use it.
    monkeypatch.setenv("ARENA_SOURCE", "bogus")
    with Arena("cpu", source="host", framework="numpy") as a:
        assert type(a.source).__name__ == "HostSource"
    with Arena("cpu", source="virtual", max_bytes="1MiB", framework="numpy") as a:
        assert type(a.source).__name__ == "VirtualHostSource"
    with pytest.raises(ConfigError, match="ARENA_SOURCE is 'bogus'"):
        Arena("cpu", framework="numpy")


def test_a_request_made_once_sleep_has_begun_is_refused_not_served_over_released_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # sleep() held inside its host copy (mutex held): a warm request from another thread
    # arriving then took the hit path, got prepared views, and sleep() released their
    # memory under them.
    a, weights, _, _ = _arena()
    for _ in range(3):
        a.numpy.get_simultaneous(((2 * PAGE,), "uint8"))  # warm: the hit path serves it
    inside, go = threading.Event(), threading.Event()
    offload = VirtualHostSource.offload

    def held(self: VirtualHostSource, allocation: Any) -> Any:
        inside.set()
        assert go.wait(TIMEOUT)
        return offload(self, allocation)

    monkeypatch.setattr(VirtualHostSource, "offload", held)
    sleeper, slept = run(a.sleep, 1)
    assert inside.wait(TIMEOUT)
    requester, got = run(a.numpy.get_simultaneous, ((2 * PAGE,), "uint8"))
    requester.join(0.2)  # served at once by the hit path, or waiting for the mutex
    go.set()
    sleeper.join(TIMEOUT)
    requester.join(TIMEOUT)
    assert slept == [None] and a.is_asleep
    assert len(got) == 1
    if not isinstance(got[0], ArenaAsleepError):
        readable = _accessible(*got[0])
        assert readable, "a view was served over memory sleep() released"
        raise AssertionError(f"served while falling asleep: {type(got[0]).__name__}")
    monkeypatch.undo()
    a.wake()
    assert (weights == 7).all()
    a.close()


def test_a_lock_that_commits_nothing_is_allowed_asleep_so_unlocked_blocks_restore_it() -> None:
    a, weights, _, _ = _arena()
    a.lock(growth="in_place")
    a.sleep(1)
    with a.unlocked():  # leaving it locks again: nothing to size, nothing committed
        assert not a.is_locked
    assert a.is_locked and a.is_asleep
    assert a.memory_stats()["arena.resident_bytes"] == 0
    a.wake()
    with pytest.warns(ArenaWarning, match="in_place"):
        (grown,) = a.numpy.get_simultaneous(((MiB,), "uint8"))  # in place, as before
    readable = _accessible(grown)
    assert readable
    assert a.memory_stats()["arena.locked_growths"] == 1
    assert (weights == 7).all()
    a.close()
