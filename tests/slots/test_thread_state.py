"""State kept per thread and per lock: debug mode's record of who is inside a request on a
slot (re-entrant: a request made inside another on the same thread), and the resets a
forked child runs (fresh locks, the parent's threads forgotten), run here in-process so
each one is seen to act."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from arena import Arena, SlotError, forks
from tests.gates import TIMEOUT, run

F32 = "float32"


class NestedGate:
    """An alloc_context that, once armed, makes a zero-byte request on the same slot from
    inside the allocation (a nested request on the same thread), then holds the thread
    there until released."""

    def __init__(self) -> None:
        self.arena: Arena | None = None
        self.armed = False
        self.inside = threading.Event()
        self.go = threading.Event()

    @contextmanager
    def __call__(self) -> Iterator[None]:
        if self.armed:
            self.armed = False
            assert self.arena is not None
            self.arena.get_simultaneous(((0,), F32))  # enters and leaves the slot again
            self.inside.set()
            assert self.go.wait(TIMEOUT)
        yield


def test_debug_mode_still_holds_a_slot_after_a_nested_request_on_it_returns() -> None:
    gate = NestedGate()
    a = Arena("cpu", framework="numpy", debug=True, alloc_context=gate)
    gate.arena = a
    gate.armed = True
    worker, out = run(a.get_simultaneous, ((4096,), F32))
    assert gate.inside.wait(TIMEOUT)
    with pytest.raises(SlotError, match="worker-get_simultaneous"):  # still inside its request
        a.get_simultaneous(((16,), F32))
    gate.go.set()
    worker.join(TIMEOUT)
    assert not isinstance(out[0], BaseException)
    a.get_simultaneous(((16,), F32))  # out: the slot is free for this thread ...
    other, other_out = run(a.get_simultaneous, ((16,), F32))
    other.join(TIMEOUT)
    assert not isinstance(other_out[0], BaseException)  # ... and then for any other
    a.close()


def test_the_resets_a_forked_child_runs_give_fresh_locks_and_forget_threads(
    tmp_path: Path,
) -> None:
    """A thread holds every lock of an arena and is inside a request on its slot, as a
    parent thread may be at a fork. After the resets a child runs, the arena serves,
    records and locks without waiting for that thread (which in a child does not exist)."""
    a = Arena("cpu", framework="numpy", debug=True, profile=tmp_path / "p.json")
    a.get_simultaneous(((8,), F32))
    slot = a._table.slots[0]
    holding = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with a._governor.mutex, a._recorder._mutex, a._log._mutex:  # type: ignore[union-attr]
            slot.holder.enter(slot)
            holding.set()
            assert release.wait(TIMEOUT)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(TIMEOUT)
    forks._reset_in_child()  # what os.fork() runs in the child

    def child_work() -> int:
        a.get_simultaneous(((64,), F32))  # new size: grows, records, notes the call site
        a.get_persistent("kv", (4,), F32)
        a.lock()
        return a.stats().slots[0].capacity

    worker, out = run(child_work)
    worker.join(TIMEOUT)
    blocked = worker.is_alive()
    release.set()
    holder.join(TIMEOUT)
    worker.join(TIMEOUT)
    assert not blocked, "a lock held by another thread at the fork was not renewed"
    assert out == [256]
    a.get_simultaneous(((8,), F32))  # the worker is out of the slot: this thread may enter
    a.close()
