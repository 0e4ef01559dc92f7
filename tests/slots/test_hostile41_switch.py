"""Hostile review (hostile41) of ``ws.locked()`` and ``ws.unlocked()`` (arena/slots/
governor.py), which now return a block that refuses to be tested as a bool."""

from __future__ import annotations

from arena import Arena


def test_locked_and_unlocked_blocks_still_decorate_a_function() -> None:
    """``ws.locked()`` was a generator context manager, which decorates a function too
    (contextlib.ContextDecorator): ``@ws.locked()`` ran the function locked, each call.
    The block that refuses bool tests was not callable: TypeError at the decoration."""
    with Arena("cpu", framework="numpy") as ws:

        @ws.locked()
        def inside() -> bool:
            return bool(ws.is_locked)  # the flag read inside, not later

        @ws.unlocked()
        def outside() -> bool:
            return bool(ws.is_locked)  # the flag read inside, not later

        assert not ws.is_locked
        assert inside() and inside()  # every call, not the first only
        assert not ws.is_locked
        ws.lock()
        assert not outside() and not outside()
        assert ws.is_locked
        assert inside.__name__ == "inside"


def test_the_block_names_itself() -> None:
    with Arena("cpu", framework="numpy") as ws:
        assert repr(ws.locked()) == "<context manager ws.locked()>"
        assert repr(ws.unlocked()) == "<context manager ws.unlocked()>"
