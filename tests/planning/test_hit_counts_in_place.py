"""The compiled plain, step and scope hits count the slot's calls up in place where only
the slot refers to its count (an exact one-digit int of reference count 1, CPython 3.11's
layout; ``arena_slot_counts_in_place``, in the slots layer's C-API that the hits call,
``arena/slots/_slot_api.h``): the count must come out as the Python path's, and an int
anyone else holds (a value read from ``slot.calls`` or from the stats) must never change
under them.
"""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena

F32 = "float32"
SPEC = ((4, 8), F32)


def _region(ws: Arena, kind: str) -> Any:
    return ws.numpy.step("count") if kind == "step" else ws.numpy.scope()


def _serve(ws: Arena, kind: str) -> None:
    """One request of ``kind``: a plain one, or one inside a step or scope of its own."""
    if kind == "plain":
        ws.numpy.get_simultaneous(SPEC)
        return
    with _region(ws, kind) as region:
        region.get_simultaneous(SPEC)


def _slot_of(ws: Arena) -> Any:
    """The arena's one slot (a scope's, read while it is open)."""
    with ws.numpy.scope() as region:
        slot = region.slot
    assert slot is not None
    return slot


def _warm(ws: Arena, kind: str) -> None:
    ws.reserve_bytes(1 << 16)
    for _ in range(3):  # record, plan, replay (remembered)
        with _region(ws, kind) as region:
            region.get_simultaneous(SPEC)
    ws.lock()
    for _ in range(300):  # the count past the cached small ints (257 and up: heap ints)
        ws.numpy.get_simultaneous(SPEC)
    for _ in range(3):  # the compiled hit from here
        _serve(ws, kind)


@pytest.mark.parametrize("kind", ["plain", "step", "scope"])
def test_the_call_count_comes_out_as_on_the_python_path(hit_path: str, kind: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        _warm(ws, kind)
        before = ws.stats().slots[0].calls
        for _ in range(500):
            _serve(ws, kind)
        assert ws.stats().slots[0].calls == before + 500


@pytest.mark.parametrize("kind", ["plain", "step", "scope"])
def test_a_count_someone_holds_is_never_changed_in_place(hit_path: str, kind: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        _warm(ws, kind)
        slot = _slot_of(ws)
        for _ in range(3):
            held = slot.calls  # a second reference to the slot's count
            value = int(str(held))  # a copy that is no reference to it
            _serve(ws, kind)
            assert held == value
            assert slot.calls == value + 1
            del held


@pytest.mark.parametrize("kind", ["plain", "step", "scope"])
def test_a_count_at_the_top_digit_goes_on_into_a_second_digit(hit_path: str, kind: str) -> None:
    """A one-digit count at 2**30 - 2 is counted in place once (to 2**30 - 1, the largest
    digit) and then made a new two-digit int: a digit of 2**30 is no int CPython knows
    (it equals no int, not even 2**30). Fails with counts_in_place's bound one off
    (``digit < 2**30`` in place of ``digit + 1 < 2**30``; planted, 2026-12-03)."""
    top = (1 << 30) - 2
    with Arena("cpu", framework="numpy") as ws:
        _warm(ws, kind)
        slot = _slot_of(ws)
        slot.calls = int(str(top))  # a fresh int that only the slot refers to
        for n in range(1, 5):
            _serve(ws, kind)
            assert slot.calls == top + n, n
        assert ws.stats().slots[0].calls == top + 4
