"""Hostile review (hostile41) of ``ws.locked()`` and ``ws.unlocked()`` (arena/slots/
governor.py), which now return a block that refuses to be tested as a bool."""

from __future__ import annotations

import sys

from arena import Arena
from tests.interrupts import ENTER_RETURN, Injector


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


def test_an_interrupt_while_the_block_switches_the_state_restores_the_one_before() -> None:
    """``with ws.locked():`` switched the state before its try: a KeyboardInterrupt at any
    call or return inside lock() (sizing the slots, logging) left the arena locked for
    good, the block never entered. Swept over every entry and return in arena's code up
    to the block's body (tests/interrupts.py's injector); the exit's own unlock, once the
    body ran, is not swept (an interrupt inside a cleanup stops that cleanup)."""

    def run(ws: Arena, entered: list[bool]) -> None:
        with ws.locked():
            entered.append(True)
            ws.get_simultaneous(((8,), "float32"))
        entered.append(False)

    def fresh() -> Arena:
        ws = Arena("cpu", framework="numpy")
        ws.get_simultaneous(((8,), "float32"))
        return ws

    counter = Injector()
    ws = fresh()
    sys.settrace(counter)
    try:
        run(ws, [])
    finally:
        sys.settrace(None)
    ws.close()
    left = []
    for at in range(1, counter.count + 1):
        ws, entered = fresh(), []
        shot = Injector(at)
        sys.settrace(shot)
        try:
            run(ws, entered)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        # The enter's own "return" event is the tracer's artifact (the with statement
        # calls the enter from C and runs no check before the body: a real signal cannot
        # land there); the block, active, restores once the interrupt is dropped.
        if not entered and bool(ws.is_locked) and shot.where != ENTER_RETURN:
            left.append(shot.where)
        ws.close()
    assert left == []


def test_an_interrupt_as_the_block_is_entered_restores_the_state_once_dropped() -> None:
    """The landing spot of a real signal right after the block switched the state: the
    block is never exited, and dropping it (the interrupt's traceback gone) restores."""
    ws = Arena("cpu", framework="numpy")
    ws.get_simultaneous(((8,), "float32"))
    block = ws.locked()
    block.__enter__()
    assert ws.is_locked
    del block
    assert not ws.is_locked
    ws.close()
