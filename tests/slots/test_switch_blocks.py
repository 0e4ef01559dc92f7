"""``with ws.locked():`` and ``ws.unlocked()`` blocks (arena/slots/governor.py): the lock
state they found is back after the block however it ends, interrupts included (issue 26,
leftovers), and a block object is reusable but refuses to be entered while active."""

from __future__ import annotations

import copy
import gc
import pickle

import pytest

from arena import Arena, ArenaClosedError, ArenaError, BlockActiveError
from tests.interrupts import ENTER_RETURN, switch_points, switch_signal_rounds

F32 = "float32"


def test_an_interrupt_anywhere_in_a_switch_block_leaves_the_state_it_found() -> None:
    """A KeyboardInterrupt at every entry and return in arena's code of a ``with
    ws.locked():`` block (and ``ws.unlocked()``, on locked and unlocked arenas): the
    unlock at the exit ran a chain of calls (contextlib's exit, the generator's
    ``finally``, ``_set``, ``unlock``, ``check_open``, ``set_lock``) before its store,
    and an interrupt at any of them left the arena locked for good (102 of 524 points
    on 0a7a770). The exit's one point left is its own call, before its first line (the
    block then restores once the interrupt is dropped); at the return of the block's
    enter only the tracer can raise."""
    total, caught, dropped = switch_points()
    assert total > 100
    assert dropped == []
    left = {line.split(": ", 1)[1].rsplit(" (", 1)[0] for line in caught}
    assert left <= {ENTER_RETURN, "call of _Switched.__exit__"}, caught


def test_real_signals_in_switch_blocks_leave_the_state_they_found() -> None:
    """A real SIGALRM at random moments of switch blocks (13 of 1000 rounds left the
    state switched before)."""
    landed, _, dropped = switch_signal_rounds(300, seed=26)
    assert landed > 50
    assert dropped == [], dropped


def test_a_block_is_reusable_once_it_exited() -> None:
    """A second ``with`` of one ``ws.locked()`` object raised contextlib's raw
    AttributeError ('_GeneratorContextManager' object has no attribute 'args'); it
    saves the state anew and switches again, as a new block would."""
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((8,), F32))
        block = ws.locked()
        for _ in range(3):
            with block as inside:
                assert inside is ws and ws.is_locked
            assert not ws.is_locked
        ws.lock()
        with block:
            assert ws.is_locked
        assert ws.is_locked  # the state it found this time
        again = ws.unlocked()
        for _ in range(2):
            with again:
                assert not ws.is_locked
            assert ws.is_locked


def test_entering_an_active_block_again_names_the_fix() -> None:
    """Entering one block inside itself raised contextlib's RuntimeError ('generator
    didn't yield'); it is a BlockActiveError (an ArenaError and a RuntimeError) naming
    the fix, and the outer block still restores the state it found."""
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((8,), F32))
        block = ws.locked()
        with block:
            with (
                pytest.raises(BlockActiveError, match=r"call ws\.locked\(\) again") as info,
                block,
            ):
                pass
            assert ws.is_locked
        assert not ws.is_locked
        assert isinstance(info.value, ArenaError) and isinstance(info.value, RuntimeError)
        with ws.locked():  # a new block nests
            with ws.locked():
                assert ws.is_locked
            assert ws.is_locked
        assert not ws.is_locked
        with block:  # usable after the refusal
            assert ws.is_locked


def test_the_decorator_runs_every_call_and_recursion_in_its_state() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((8,), F32))

        @ws.locked()
        def depth(n: int) -> list[bool]:
            return [bool(ws.is_locked)] + (depth(n - 1) if n else [])

        for _ in range(50):
            assert depth(3) == [True] * 4
            assert not ws.is_locked


def test_a_block_dropped_active_restores_and_the_others_run_nothing_when_dropped() -> None:
    """Only an active block restores when it is collected (a block entered by hand and
    dropped); an exited one is of a class without ``__del__``, so dropping it runs no
    Python code where an interrupt would be lost."""
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((8,), F32))
        block = ws.locked()
        assert not hasattr(type(block), "__del__")
        block.__enter__()
        assert hasattr(type(block), "__del__") and ws.is_locked
        del block
        assert not ws.is_locked
        block = ws.locked()
        with block:
            pass
        assert not hasattr(type(block), "__del__")


def test_a_block_refuses_copies_so_no_copy_of_an_active_one_restores_early() -> None:
    """copy.copy of an active block was an active block too (its saved state and class
    copied), and dropping the copy restored the state inside the original block: the
    arena was unlocked in the middle of ``with ws.locked():``. A block refuses copies
    and pickles, as scopes and steps do."""
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((8,), F32))
        block = ws.locked()
        with block:
            for copier in (copy.copy, copy.deepcopy, pickle.dumps):
                with pytest.raises(TypeError, match=r"ws\.unlocked\(\) block cannot be copied"):
                    copier(block)
            gc.collect()
            assert ws.is_locked
        assert not ws.is_locked


def test_the_restore_brings_back_an_in_place_lock() -> None:
    """A block on an arena locked with ``growth='in_place'`` whose body locked it again
    plainly left it locked plainly (the restore saw it locked and did nothing; 0a7a770
    restored it after ``ws.unlocked()``); a plain lock changed to in place inside is
    restored too. The switch itself keeps whichever lock it finds."""
    with Arena("cpu", framework="numpy", source="virtual") as ws:
        ws.get_simultaneous(((8,), F32))
        governor = ws._governor
        for switch in (ws.locked, ws.unlocked):
            ws.lock(growth="in_place")
            with switch():
                ws.lock()
            assert (governor.locked, governor.in_place) == (True, True)
            ws.lock()
            with switch():
                ws.lock(growth="in_place")
            assert (governor.locked, governor.in_place) == (True, False)
        ws.lock(growth="in_place")
        with ws.locked():
            assert (governor.locked, governor.in_place) == (True, True)


def test_a_block_on_a_closed_arena_raises_as_lock_and_unlock_do() -> None:
    """``with ws.locked():`` on a closed arena ran its body as if locked (the switch
    skipped a closed arena, as the restore must); it raises ArenaClosedError, as
    ``ws.lock()`` does and the block did on 0a7a770. A block closed inside still ends
    quietly."""
    ws = Arena("cpu", framework="numpy")
    ws.get_simultaneous(((8,), F32))
    with ws.locked():
        ws.close()
    for switch in (ws.locked, ws.unlocked):
        block = switch()
        with pytest.raises(ArenaClosedError, match="closed"), block:
            pytest.fail("the body ran on a closed arena")
        assert not hasattr(type(block), "__del__")  # not left active
