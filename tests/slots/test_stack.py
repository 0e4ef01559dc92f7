"""A slot's region stack (arena/slots/stack.py, issue 27 item 3): the scopes and steps
open on a slot are an object of their own, and the slot keeps its ``detour`` flag in step
with it, raised before a region is pushed and lowered only after one is removed."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import pytest

from arena import Arena
from arena.slots.slot import Slot
from arena.slots.stack import RegionStack


class _Region:
    """A stand-in scope: a region with ``held``."""

    def __init__(self) -> None:
        self.held = 0


class _Step(_Region):
    """A stand-in step: a region with ``note_above``."""

    def __init__(self) -> None:
        super().__init__()
        self.above: list[int] = []

    def note_above(self, reach: int) -> None:
        self.above.append(reach)


def test_the_stack_pushes_removes_and_accounts() -> None:
    stack = RegionStack()
    outer, inner = _Step(), _Region()
    stack.push(outer)
    first = stack.regions
    stack.push(inner)
    assert stack.regions == [outer, inner] and first == [outer]  # a new list each time
    outer.held = 256
    stack.settle(512, outer)  # the outer region, under the innermost: counted again
    inner.held = 128
    stack.settle(768, inner)
    assert (stack.top, stack.live, stack.below) == (768, 384, 256)
    # Counted from the regions, not added: a figure an interrupt left behind (the
    # region's store made, its settle not) is right at the next settle.
    inner.held = 512
    stack.settle(768, inner)
    assert (stack.top, stack.live) == (768, 768)
    # The regions under the innermost are counted once after a change, not per settle.
    outer.held = 10**6  # unseen: only a settle of the outer region tells the stack
    stack.settle(768, inner)
    assert stack.live == 768
    stack.settle(768, outer)
    assert (stack.live, stack.below) == (10**6 + 512, 10**6)
    outer.held = 256
    stack.settle(768, outer)
    assert (stack.top, stack.live) == (768, 768)
    assert stack.step_below(None) is outer and stack.step_below(inner) is outer
    assert stack.step_below(outer) is None
    assert stack.remove(inner, 256, 128) and (stack.top, stack.live) == (256, 128)
    assert stack.below == -1  # counted again at the next settle
    stack.settle(256, outer)
    assert (stack.live, stack.below) == (256, 0)
    assert not stack.remove(inner, 1, 1) and (stack.top, stack.live) == (256, 256)
    assert stack.remove(outer, 9, 9) and (stack.regions, stack.top, stack.live) == ([], 0, 0)


def test_a_slot_keeps_its_regions_on_its_stack() -> None:
    with Arena("cpu", framework="numpy") as ws:
        slot = ws.numpy._select()
        assert isinstance(slot.stack, RegionStack)
        assert not {"regions", "top", "live", "steps"} & set(Slot.__slots__)
        with ws.scope() as scope:
            scope.get_simultaneous(((256,), "float32"))
            assert slot.stack.regions == [scope] and slot.detour == 1
            assert (slot.stack.top, slot.stack.live) == (1024, 1024)
            # A plain request above the open scope counts in LOAD from the slot's start.
            ws.get_simultaneous(((64,), "float32"))
            assert slot.load == 1024 + 256
        assert (slot.stack.regions, slot.stack.top, slot.stack.live, slot.detour) == ([], 0, 0, 0)


def _interrupt_at(name: str) -> Any:
    """A trace function raising KeyboardInterrupt at the first call of ``name``."""

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and frame.f_code.co_name == name:
            sys.settrace(None)
            raise KeyboardInterrupt(f"at {name}")
        return None

    return trace


def test_an_interrupted_open_leaves_the_detour_raised_until_the_region_is_closed() -> None:
    with Arena("cpu", framework="numpy") as ws:
        slot = ws.numpy._select()
        region = object()
        sys.settrace(_interrupt_at("push"))
        try:
            with pytest.raises(KeyboardInterrupt):
                slot.open_region(region)
        finally:
            sys.settrace(None)
        # Never lowered under an open region: raised, with nothing pushed.
        assert slot.stack.regions == [] and slot.detour == 1
        assert not slot.close_region(region, 0, 0)  # what a region's exit does
        assert slot.detour == 0


def test_an_interrupted_close_leaves_the_detour_raised_never_lowered_early() -> None:
    with Arena("cpu", framework="numpy") as ws:
        slot = ws.numpy._select()
        region = object()
        slot.open_region(region)
        sys.settrace(_interrupt_at("update_detour"))
        try:
            with pytest.raises(KeyboardInterrupt):
                slot.close_region(region, 0, 0)
        finally:
            sys.settrace(None)
        assert slot.stack.regions == [] and slot.detour == 1  # the checked path, still
        slot.open_region(region)
        assert slot.close_region(region, 0, 0) and slot.detour == 0


@pytest.mark.parametrize("where", ["push", "update_detour"])
def test_the_next_plain_request_heals_a_detour_left_raised_with_nothing_open(
    where: str,
) -> None:
    """An interrupt inside open_region (the flag raised, nothing pushed: a scope's enter
    that never reached its ``with``, so no exit closes it) or inside close_region (the
    region removed, the flag not yet lowered) leaves plain requests on the checked path;
    the next plain request lowers the flag, so the ones after it take the hit again."""
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((64,), "float32"))
        slot = ws.numpy._select()
        region = object()
        if where == "update_detour":
            slot.open_region(region)
        sys.settrace(_interrupt_at(where))
        try:
            with pytest.raises(KeyboardInterrupt):
                (slot.open_region if where == "push" else slot.close_region)(
                    region, *(() if where == "push" else (0, 0))
                )
        finally:
            sys.settrace(None)
        assert slot.stack.regions == [] and slot.detour == 1
        (view,) = ws.get_simultaneous(((64,), "float32"))
        assert slot.detour == 0  # healed: the next request is a hit at offset 0
        assert ws.numpy.data_ptr(view) == ws.numpy.data_ptr(ws.get_simultaneous(((8,), "int8"))[0])
