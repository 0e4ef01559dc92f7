"""Helpers for tests that force one interleaving or one fault: a gate that
holds a thread inside an allocation, a capture probe, and a thread runner."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from arena.environment import word
from tests.sources import RecordingSource

TIMEOUT = 10


def moving_only(reason: str) -> pytest.MarkDecorator:
    """Skip a test of a moving source's growth (a new buffer; the old one retired or
    released) when ``ARENA_SOURCE=virtual`` makes the fixed-address source the host
    default (CI's second pass): growth there keeps the address and retires nothing,
    which tests/memory/test_virtual_memory.py checks."""
    # Read as arena reads it (any case), so that the skip follows the source in use.
    virtual = word(os.environ.get("ARENA_SOURCE", "")) == "virtual"
    return pytest.mark.skipif(virtual, reason=f"ARENA_SOURCE=virtual: {reason}")


def live_block_of(source: RecordingSource, ptr: int) -> tuple[int, int] | None:
    """The live block of ``source`` holding address ``ptr``, as ``(start, nbytes)``."""
    for start, nbytes in source.live.items():
        if start <= ptr < start + nbytes:
            return start, nbytes
    return None


class Gate:
    """An alloc_context that holds the allocating thread inside the allocation until
    released, so another thread can act at exactly that moment."""

    def __init__(self) -> None:
        self.armed = False
        self.inside = threading.Event()
        self.go = threading.Event()

    @contextmanager
    def __call__(self) -> Iterator[None]:
        if self.armed:
            self.armed = False
            self.inside.set()
            assert self.go.wait(TIMEOUT)
        yield


class Probe:
    """An injectable capture-status probe: ``capturing`` says what it answers."""

    def __init__(self) -> None:
        self.capturing = False

    def __call__(self) -> bool:
        return self.capturing


def run(target: Any, *args: Any) -> tuple[threading.Thread, list[Any]]:
    """Start ``target(*args)`` in a thread; its result or exception lands in the list."""
    out: list[Any] = []

    def body() -> None:
        try:
            out.append(target(*args))
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=body, name=f"worker-{getattr(target, '__name__', 'call')}")
    thread.start()
    return thread, out


def intrude(ws: Any) -> list[BaseException]:
    """``ws.get_simultaneous(((4,), "float32"))`` from a thread named "intruder" (micro-batch
    0: the same slot as the caller's); what it raised, if anything."""
    errors: list[BaseException] = []

    def intruder() -> None:
        try:
            ws.get_simultaneous(((4,), "float32"))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=intruder, name="intruder")
    thread.start()
    thread.join(TIMEOUT)
    return errors


def behind_the_mutex(slot: Any, region: Any, stage: str) -> None:
    """Another thread holds ``slot``'s governor mutex (reading its open regions, as a
    thread acting on them would) while this one enters (``stage`` "enter") or exits
    ``region`` (a scope or step; entered first for "exit"): the enter or exit waits, the
    holder sees the regions unchanged, and once it lets go the region is open (closed)."""
    import time

    mutex = slot.governor.mutex
    if stage == "exit":
        region.__enter__()
    before = list(slot.stack.regions)
    held, go, done = threading.Event(), threading.Event(), threading.Event()
    seen: list[Any] = []

    def hold() -> None:
        with mutex:
            held.set()
            go.wait(TIMEOUT)
            seen.append(list(slot.stack.regions))  # what the holder reads: unchanged

    def act() -> None:
        if stage == "enter":
            region.__enter__()
        else:
            region.__exit__(None, None, None)
        done.set()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(TIMEOUT)
    runner = threading.Thread(target=act)
    runner.start()
    time.sleep(0.05)
    assert not done.is_set()  # waiting for the mutex, the slot unchanged
    assert slot.stack.regions == before
    go.set()
    holder.join(TIMEOUT)
    runner.join(TIMEOUT)
    assert done.is_set()
    assert seen == [before]
    assert slot.stack.regions == ([region] if stage == "enter" else before[:-1])
