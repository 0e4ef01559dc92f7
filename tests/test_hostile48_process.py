"""The process-wide registry with no device named: the default device is found before
the registry lock is taken. Finding it counts devices, which imports CuPy or torch (seconds
the first time); under the lock every other thread's ``current_arena("cpu")`` waited for
that import."""

from __future__ import annotations

import threading

import pytest

import arena
from arena import process
from arena.memory.devices import Device


def test_another_threads_registry_calls_do_not_wait_for_the_default_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = arena.init_arena("cpu", framework="numpy")
    counting = threading.Event()
    go_on = threading.Event()

    def default_device() -> Device:  # a first device count: an import of CuPy or torch
        counting.set()
        go_on.wait(10)
        return Device("cuda", 0)

    monkeypatch.setattr(process, "default_device", default_device)
    found: list[object] = []
    finder = threading.Thread(target=lambda: found.append(arena.current_arena()))
    finder.start()
    try:
        assert counting.wait(10)
        answered: list[object] = []
        asker = threading.Thread(
            target=lambda: answered.append(
                (arena.is_arena_initialized("cpu"), arena.current_arena("cpu"))
            )
        )
        asker.start()
        asker.join(2)
        assert answered == [(True, made)], "waited for another thread's device count"
    finally:
        go_on.set()
        finder.join(10)
        asker.join(10)
    assert found == [made]  # the only arena, the default device (cuda:0) having none


def test_none_still_resolves_under_the_lock_against_a_reset_in_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The key is computed outside the lock, the stand-in (the only arena) inside it: an
    arena reset after the default device was found is not returned."""
    made = arena.init_arena("cpu", framework="numpy")

    def default_device() -> Device:
        # Another thread's reset, between the count and the look-up; it cannot finish
        # while this thread holds the registry lock (it waits 2 s, then the test fails).
        resetter = threading.Thread(target=arena.reset_arena, args=("cpu",))
        resetter.start()
        resetter.join(2)
        return Device("cuda", 0)

    monkeypatch.setattr(process, "default_device", default_device)
    with pytest.raises(arena.NotInitializedError, match=r"cuda:0 \(initialised: none\)"):
        arena.current_arena()
    assert made.is_closed
