"""Round 13d's mutation gaps in ``arena/slots/governor.py``: the lock-state blocks'
``unlock()`` checks under the mutex that the block still wants it (``only_if``), so it
neither announces an unlock that changes nothing nor overrules a block entered since."""

from __future__ import annotations

from typing import Any

import pytest

from arena.slots.governor import Governor
from tests.slots.test_switch_threads import arena


def test_an_unlocked_block_on_an_unlocked_arena_announces_nothing() -> None:
    """``with ws.unlocked():`` on an unlocked arena finds the state it wants: no
    "unlock" event at its entry or its exit (an unconditional ``unlock()`` announced
    one)."""
    ws = arena(locked=False)
    heard: list[str] = []
    ws.add_listener(lambda event: heard.append(event.kind))
    with ws.unlocked():
        assert not ws.is_locked
    assert not ws.is_locked
    assert [k for k in heard if k in ("lock", "unlock")] == []
    ws.close()


def test_a_restore_does_not_unlock_under_a_block_entered_on_its_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``ws.locked()`` block on an unlocked arena ends: its restore learns it must
    unlock (``leave_block``), and before its ``unlock()`` another block, ``ws.locked()``,
    is entered (here in the same thread, at that very point, as another thread could).
    That block is now the last entered, so the restore's ``unlock()`` does nothing and
    the arena stays locked until that block ends; then the state before both, unlocked,
    comes back."""
    ws = arena(locked=False)
    later = ws.locked()
    original = Governor.leave_block
    calls: list[object] = []

    def leave_block(governor: Governor, token: object) -> Any:
        state = original(governor, token)
        if not calls:
            calls.append(token)
            later.__enter__()  # on the restore's way to unlock()
        return state

    first = ws.locked()
    first.__enter__()
    assert ws.is_locked
    monkeypatch.setattr(Governor, "leave_block", leave_block)
    first.__exit__(None, None, None)
    assert calls
    assert ws.is_locked  # the later block's state holds
    later.__exit__(None, None, None)
    assert not ws.is_locked
    assert ws._governor.blocks == ()
    ws.close()
