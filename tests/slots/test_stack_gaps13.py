"""Mutation round 13b (issue 26 item 12): the region stack's figures where nothing, or
nothing under the innermost, holds a byte (``RegionStack.__init__``, ``push``, ``settle``
since RegionStack.settle, below and recount came in).
"""

from __future__ import annotations

from arena import Arena
from arena.slots.stack import RegionStack


class _Region:
    """A stand-in region: ``held`` bytes."""

    def __init__(self, held: int = 0) -> None:
        self.held = held


def test_a_new_stack_holds_nothing_and_counts_nothing_under_its_innermost() -> None:
    stack = RegionStack()
    assert (stack.regions, stack.top, stack.live, stack.below) == ([], 0, 0, 0)


def test_a_settle_with_nothing_open_holds_no_live_byte() -> None:
    stack = RegionStack()
    stack.settle(64, None)
    assert (stack.top, stack.live, stack.below) == (64, 0, 0)
    region = _Region(held=32)
    stack.push(region)
    stack.remove(region, 96, 32)
    stack.settle(128, region)  # closed already: nothing open holds a byte
    assert (stack.top, stack.live, stack.below) == (128, 0, 0)


def test_a_push_marks_the_count_under_the_innermost_to_be_made_again() -> None:
    stack = RegionStack()
    outer = _Region()
    stack.push(outer)
    assert stack.below == -1  # as the compiled open stores (arena/slots/_slot.c)
    stack.settle(0, outer)
    assert stack.below == 0
    stack.push(_Region())
    assert stack.below == -1


def test_regions_under_the_innermost_that_hold_nothing_are_counted_once_too() -> None:
    """A count of 0 under the innermost is a count like any other: the innermost's
    settles carry it on (O(1)), until a change of the regions or a settle of a region
    under it (as test_stack.py's test with 256 bytes under)."""
    stack = RegionStack()
    outer, inner = _Region(), _Region()
    stack.push(outer)
    stack.push(inner)
    inner.held = 128
    stack.settle(128, inner)
    assert (stack.live, stack.below) == (128, 0)
    outer.held = 4096  # unseen: only a settle of the outer region tells the stack
    stack.settle(128, inner)
    assert (stack.live, stack.below) == (128, 0)
    stack.settle(4224, outer)
    assert (stack.live, stack.below) == (4096 + 128, 4096)


def test_a_plain_request_above_an_empty_first_scope_raises_load_by_its_own_bytes() -> None:
    """The first region ever opened on a slot holds nothing yet: a plain request made
    above it is all the slot's live bytes (LOAD), as without the scope."""
    with Arena("cpu", framework="numpy") as ws, ws.scope():
        ws.numpy.get_simultaneous(((256,), "float32"))
        assert ws.stats().slots[0].load == 1024
