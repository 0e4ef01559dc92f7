"""What Round 14f of the mutation tests found the `others` group's tests let through in
``arena/slots/holder.py`` (issue 26 item 12): debug mode's hold let go once per region,
however often a region's close runs. Each test names the mutants it kills (mutmut's numbers
on ``335b43c``); tests/slots/test_debug_hold_interrupts.py and tests/planning/test_scopes.py
kill them too, through scopes and steps, but no test of that group runs there."""

from __future__ import annotations

import threading

from arena.errors import SlotError
from arena.slots.holder import SlotHolder


class _Slot:
    def describe(self) -> str:
        return "(ubatch 0, lane 0)"


def _enter_from_another_thread(holder: SlotHolder) -> BaseException | None:
    """What entering ``holder`` from a new thread raised (None: it entered, and left)."""
    got: list[BaseException | None] = []

    def run() -> None:
        try:
            holder.enter(_Slot())
        except SlotError as error:
            got.append(error)
        else:
            holder.leave()
            got.append(None)

    thread = threading.Thread(target=run, name="intruder")
    thread.start()
    thread.join(10)
    assert got, "the other thread did not finish"
    return got[0]


def test_a_region_let_go_twice_drops_its_hold_once() -> None:
    # leave #1 (`if region is None:`): a region's leave skipped its once-only check, so
    # the inner region's close run again dropped the outer region's hold too (and a plain
    # leave never let go); leave #5 (`self.regions.discard(None)`): the region stayed
    # marked, so its second close was taken for a first and dropped the outer hold.
    holder, slot = SlotHolder(), _Slot()
    outer, inner = object(), object()
    me = threading.current_thread()
    holder.enter(slot, outer)
    holder.enter(slot, inner)
    holder.leave(inner)
    holder.leave(inner)  # the close run again after an interrupt cut the first short
    assert (holder.thread, holder.depth, holder.regions) == (me, 1, {id(outer)})
    assert isinstance(_enter_from_another_thread(holder), SlotError)
    holder.leave(outer)
    holder.leave(outer)
    assert (holder.thread, holder.depth, holder.regions) == (None, 0, set())
    assert _enter_from_another_thread(holder) is None


def test_a_plain_request_lets_go_at_its_leave() -> None:
    # leave #1 also: a leave without a region returned at the region check, so the
    # thread kept the slot after its request and the next thread was refused.
    holder, slot = SlotHolder(), _Slot()
    holder.enter(slot)
    holder.enter(slot)
    holder.leave()
    assert (holder.thread, holder.depth) == (threading.current_thread(), 1)
    holder.leave()
    assert (holder.thread, holder.depth, holder.regions) == (None, 0, set())
    assert _enter_from_another_thread(holder) is None


def test_a_region_never_held_lets_nothing_go() -> None:
    # A leave naming a region refused before it opened drops nothing of the hold the
    # thread has for its request.
    holder, slot = SlotHolder(), _Slot()
    holder.enter(slot)
    holder.leave(object())
    assert (holder.thread, holder.depth) == (threading.current_thread(), 1)
    assert isinstance(_enter_from_another_thread(holder), SlotError)
    holder.leave()
    assert holder.thread is None
