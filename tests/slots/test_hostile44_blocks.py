"""Hostile round 44 on the lock-state blocks (docs/overview.md, "Lock-state blocks"):
a block's record and its switch are two steps, so another thread's block can be entered
between them. That block found the state before the first block's switch, and restored
it at its end although the first block was still active: a ``ws.locked()`` block went on
with the arena unlocked (growth allowed inside it), unlike the same blocks a moment
later, where the first had switched already."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from arena import Arena
from arena.slots.governor import Governor
from tests.gates import TIMEOUT

F32 = "float32"


Gates = tuple[threading.Event, threading.Event]


@pytest.fixture
def paused_entry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gates]:
    """Hold the thread named "first" between its block's record and its switch:
    ``recorded`` is set there, and it goes on once ``go`` is set."""
    recorded, go = threading.Event(), threading.Event()
    enter = Governor.enter_block

    def enter_block(self: Governor, token: object) -> None:
        enter(self, token)
        if threading.current_thread().name == "first":
            recorded.set()
            assert go.wait(TIMEOUT)

    monkeypatch.setattr(Governor, "enter_block", enter_block)
    yield recorded, go
    go.set()


@pytest.mark.parametrize(
    ("first", "second", "was_locked"),
    [
        ("locked", "unlocked", False),
        ("locked", "locked", False),
        ("unlocked", "locked", True),
        ("unlocked", "unlocked", True),
    ],
)
@pytest.mark.parametrize("second_ends_first", [True, False])
def test_a_block_entered_between_another_blocks_record_and_switch(
    paused_entry: Gates,
    first: str,
    second: str,
    was_locked: bool,
    second_ends_first: bool,
) -> None:
    """Thread "first" enters its block and is held after the record, before the switch;
    the main thread enters a block of its own; then "first" switches (its block is not the
    last entered: nothing to switch) and reaches its body. When the main thread's block
    ends, the first block is the last active one, and its state holds, as it would had it
    switched before the second was entered; after both, the state before them."""
    recorded, go = paused_entry
    ws = Arena("cpu", framework="numpy")
    ws.get_simultaneous(((8,), F32))
    if was_locked:
        ws.lock()
    inside, leave, left = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def run() -> None:
        try:
            with getattr(ws, first)():
                inside.set()
                assert leave.wait(TIMEOUT)
                seen["last"] = bool(ws.is_locked)
        except BaseException as error:  # handed to the test
            seen["error"] = error
        finally:
            inside.set()
            left.set()

    thread = threading.Thread(target=run, name="first")
    thread.start()
    assert recorded.wait(TIMEOUT)
    block = getattr(ws, second)()
    block.__enter__()
    go.set()
    assert inside.wait(TIMEOUT)
    assert bool(ws.is_locked) == (second == "locked")  # the last entered holds
    if second_ends_first:
        block.__exit__(None, None, None)
        assert bool(ws.is_locked) == (first == "locked")  # the first is the last active
        leave.set()
        assert left.wait(TIMEOUT)
        thread.join(TIMEOUT)
        assert seen.get("last") == (first == "locked")
    else:
        leave.set()
        assert left.wait(TIMEOUT)
        thread.join(TIMEOUT)
        assert bool(ws.is_locked) == (second == "locked")
        block.__exit__(None, None, None)
    assert "error" not in seen
    assert bool(ws.is_locked) == was_locked
    assert ws._governor.blocks == ()
    ws.close()


def _first_holding(
    ws: Arena, kind: str
) -> tuple[threading.Thread, threading.Event, threading.Event, dict[str, Any]]:
    """Start thread "first" in a ``ws.locked()`` or ``ws.unlocked()`` block (``kind``):
    ``inside`` is set once it is in the block (or failed), it leaves once ``leave`` is
    set, and an error it meets is in ``seen["error"]``."""
    inside, leave = threading.Event(), threading.Event()
    seen: dict[str, Any] = {}

    def run() -> None:
        try:
            with getattr(ws, kind)():
                inside.set()
                assert leave.wait(TIMEOUT)
        except BaseException as error:  # handed to the test
            seen["error"] = error
        finally:
            inside.set()

    thread = threading.Thread(target=run, name="first")
    thread.start()
    return thread, inside, leave, seen


def test_a_block_entered_between_records_hands_its_state_to_the_block_after_it_not_before(
    paused_entry: Gates,
) -> None:
    """Three blocks: the main thread's ``ws.locked()`` (the oldest), then "first"'s
    ``ws.unlocked()``, held between its record and its switch, then the main thread's
    second ``ws.locked()``. "first"'s switch hands the state it makes (unlocked) to the
    block entered after it, so when that one ends, "first" (the last active) has the arena
    unlocked (Round 14i: ``needs_entry_switch`` #21 read the block before it instead)."""
    recorded, go = paused_entry
    ws = Arena("cpu", framework="numpy")
    ws.get_simultaneous(((8,), F32))
    oldest = ws.locked()
    oldest.__enter__()
    thread, inside, leave, seen = _first_holding(ws, "unlocked")
    assert recorded.wait(TIMEOUT)
    newest = ws.locked()
    newest.__enter__()
    go.set()
    assert inside.wait(TIMEOUT)
    assert ws.is_locked  # the last entered holds
    newest.__exit__(None, None, None)
    assert not ws.is_locked  # "first" is the last active
    leave.set()
    thread.join(TIMEOUT)
    assert ws.is_locked  # the oldest again
    oldest.__exit__(None, None, None)
    assert "error" not in seen
    assert not ws.is_locked
    assert ws._governor.blocks == ()
    ws.close()


def test_a_block_whose_restore_fails_twice_is_forgotten_and_the_state_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A block's exit restores once more when its restore is cut short, and gives up after
    a second failure: the block is dropped from the governor's list (the state stays),
    and the first error goes on (Round 14i: ``drop_block`` #9 and #10, ``__exit__`` #6)."""
    ws = Arena("cpu", framework="numpy")
    ws.get_simultaneous(((8,), F32))
    block = ws.locked()
    block.__enter__()
    assert ws.is_locked

    def refuse(self: Governor, token: object) -> None:
        raise RuntimeError("restore refused")

    with monkeypatch.context() as patched:
        patched.setattr(Governor, "leave_block", refuse)
        with pytest.raises(RuntimeError, match="restore refused"):
            block.__exit__(None, None, None)
    assert ws._governor.blocks == ()
    assert ws.is_locked  # the state stays
    block.__exit__(None, None, None)  # inactive after: nothing more happens
    assert ws.is_locked
    ws.close()


def test_a_locked_block_held_before_its_switch_keeps_the_in_place_lock_it_found(
    paused_entry: Gates,
) -> None:
    """The arena is locked with ``growth="in_place"``; "first" enters ``ws.locked()`` and
    is held between its record and its switch while the main thread enters
    ``ws.unlocked()``. The lock "first" wants is there already (``ws.locked()`` asks for a
    lock of either kind), so nothing is handed to the block after it: when that one ends,
    the in-place lock it found comes back (Round 14i: ``needs_entry_switch`` #25 handed it
    a lock that is not in place)."""
    recorded, go = paused_entry
    ws = Arena("cpu", framework="numpy", source="virtual")
    ws.get_simultaneous(((8,), F32))
    ws.lock(growth="in_place")
    assert ws._governor.in_place
    thread, inside, leave, seen = _first_holding(ws, "locked")
    assert recorded.wait(TIMEOUT)
    block = ws.unlocked()
    block.__enter__()
    go.set()
    assert inside.wait(TIMEOUT)
    assert not ws.is_locked  # the last entered holds
    block.__exit__(None, None, None)
    assert ws.is_locked and ws._governor.in_place  # as it was before either block
    leave.set()
    thread.join(TIMEOUT)
    assert "error" not in seen
    assert ws.is_locked and ws._governor.in_place
    assert ws._governor.blocks == ()
    ws.close()
