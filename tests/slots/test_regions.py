"""Healing of regions an interrupt left open (``arena.slots.regions``), on both hit paths:
a region whose owner is gone is exited as interrupted by the next enter, a region its
owner holds is left alone, and the reference count the check compares with is the one a
region only its slot's stack refers to has (mutation Round 11: the healing had no
pure-path test, and ``_calibrate`` runs at import, where mutmut's runs cannot reach)."""

from __future__ import annotations

import gc
import sys
from typing import Any

import pytest

from arena import Arena
from arena.slots import regions

F32 = "float32"

cpython_only = pytest.mark.skipif(
    sys.implementation.name != "cpython", reason="healing reads CPython's reference counts"
)


class _Region:
    """A stand-in region: a step has ``nested``, the step below it."""

    def __init__(self, nested: Any = None) -> None:
        self.nested = nested


@cpython_only
def test_the_count_compared_with_is_a_region_only_a_stack_refers_to() -> None:
    """On CPython healing is on, and ``_ORPHANED`` is what ``_references`` finds for a
    region only its list refers to, called from a loop over a copy as heal_regions does."""
    assert regions._ORPHANED is not None
    stack: list[Any] = [_Region()]
    for region in reversed(tuple(stack)):
        assert regions._references(region, stack) == regions._ORPHANED
    held = stack[0]  # one more reference: the owner's
    for region in reversed(tuple(stack)):
        assert regions._references(region, stack) == regions._ORPHANED + 1
    del held


@cpython_only
def test_references_leave_out_the_stack_and_the_steps_above_whose_nested_it_is() -> None:
    """A step below other steps is referred to by its entry and by each ``nested`` above
    it: none of those count, so a dropped step below two steps is an orphan."""
    below = _Region()
    stack: list[Any] = [below, _Region(nested=below), _Region(nested=below)]
    alone = _Region()  # the same: a local and one list entry
    assert regions._references(below, stack) == regions._references(alone, [alone])
    scope_like = _Region()  # a region no step names: its entry alone
    assert regions._references(scope_like, [scope_like, _Region(nested=below)]) == (
        regions._references(alone, [alone])
    )


@cpython_only
def test_a_dropped_scope_is_exited_by_the_next_enter_and_a_held_one_is_left_open() -> None:
    ws = Arena("cpu", framework="numpy")
    slot = ws.numpy._select()
    held = ws.scope()
    held.__enter__()
    held.get_simultaneous(((64,), F32))
    ws.scope().__enter__()  # dropped: nothing but the stack refers to it
    gc.collect()
    assert len(slot.stack.regions) == 2
    with ws.scope() as scope:
        # The orphan is exited; the scope its owner holds stays open below.
        assert slot.stack.regions == [held, scope]
    held.__exit__(None, None, None)
    assert slot.stack.regions == []
    ws.close()


@cpython_only
def test_a_dropped_step_is_healed_as_interrupted_its_run_no_record() -> None:
    """An orphaned step is exited as interrupted (``KeyboardInterrupt``): its key stops
    running and its partial run is not a record, so the step's next run records again."""
    ws = Arena("cpu", framework="numpy")
    slot = ws.numpy._select()
    step = ws.step("k")
    step.__enter__()
    step.get_simultaneous(((64,), F32))
    del step
    gc.collect()
    with ws.scope() as scope:  # heals the step below
        assert slot.stack.regions == [scope]
    with ws.step("k") as again:  # not "already running"
        assert not again.replay  # the interrupted run left no record to replay
        again.get_simultaneous(((64,), F32))
    with ws.step("k") as third:
        assert third.replay
        third.get_simultaneous(((64,), F32))
    assert slot.stack.regions == []
    ws.close()


@cpython_only
def test_a_step_dropped_above_a_held_step_is_healed_and_the_held_one_stays_open() -> None:
    """The inner step's ``nested`` is the outer one: the outer step, held, is not an
    orphan; the inner one, dropped, is."""
    ws = Arena("cpu", framework="numpy")
    slot = ws.numpy._select()
    outer = ws.step("outer")
    outer.__enter__()
    outer.get_simultaneous(((64,), F32))
    inner = ws.step("inner")
    inner.__enter__()
    inner.get_simultaneous(((32,), F32))
    del inner
    gc.collect()
    with ws.scope() as scope:
        assert slot.stack.regions == [outer, scope]
    outer.__exit__(None, None, None)
    assert slot.stack.regions == []
    ws.close()
