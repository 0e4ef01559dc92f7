"""Gaps in the slot, table and governor tests that mutation Round 11 found (mutants that
survived every test of the ``slots`` group), each test failing with its mutant planted:
the in-place growth of a fixed-address source interrupted at every point, the Python
growth where the slot's extension is missing, ..."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from arena import Arena, ArenaAsleepError, ArenaWarning
from arena.memory.virtual import PAGE
from arena.slots import slot as slot_module
from arena.slots.slot import Slot
from tests.interrupts import Injector
from tests.sources import check_books

F32 = "float32"


def _traced(frame: FrameType) -> bool:
    return bool(frame.f_globals.get("__name__", "").startswith(("arena.memory.", "arena.slots.")))


def _committing_program(ws: Arena) -> None:
    """Growths of a fixed-address source: the first reserves, the next commit in place."""
    for n in (64, 1024, 4096):
        ws.numpy.get_simultaneous(((n,), F32))


def _run_interrupted(program: Callable[[Arena], None], at: int) -> tuple[int, bool]:
    ws = Arena("cpu", source="virtual", max_bytes="1MiB", framework="numpy")
    injector = Injector(at, counts=_traced)
    sys.settrace(injector)
    try:
        program(ws)
    except KeyboardInterrupt:
        assert injector.fired
    finally:
        sys.settrace(None)
    where = f"interrupt at event {at} ({injector.where})"
    check_books(ws)  # the ledger counts exactly what the slot holds
    program(ws)  # the slot still grows and serves
    (view,) = ws.numpy.get_simultaneous(((4096,), F32))
    view[:] = 1.0
    ws.close()
    stats = ws.stats()
    assert stats.allocations == stats.frees and stats.live_bytes == 0, where
    return injector.count, injector.fired


def test_an_interrupt_at_every_point_of_an_in_place_commit_keeps_the_books() -> None:
    """``Slot._commit``'s ``except`` clause: a first growth's reserved block nobody holds
    goes back, a committed one stays the slot's (Round 11: ``_commit`` #38 reclaimed the
    committed block the slot still held, #45 left the slot without a buffer)."""
    total, fired = _run_interrupted(_committing_program, 0)
    assert not fired and total > 20
    for at in range(1, total + 1):
        _run_interrupted(_committing_program, at)


def test_the_slot_grows_in_python_where_its_extension_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ``arena.slots._growth`` (a build that has the memory layer's extension
    alone) the slot's growth is Python's: ``_compiled_growth`` is None though the host
    ledger's compiled replace is in use, on the compiled path (Round 11:
    ``_compiled_growth`` #3 asked for the extension's class on None)."""
    monkeypatch.setattr(slot_module, "compiled", None)
    monkeypatch.setattr(slot_module, "_GROW", [])
    assert slot_module._compiled_growth() is None
    ws = Arena("cpu", framework="numpy")
    for n in (64, 4096):
        (view,) = ws.numpy.get_simultaneous(((n,), F32))
        view[:] = 2.0
    assert ws.stats().slots[0].capacity >= 4096 * 4
    ws.close()


def test_a_reserve_while_asleep_names_what_it_did_and_the_call_site() -> None:
    """The ArenaAsleepError of a reserve says what was refused and where from, in its
    message and its ``caller`` (Round 11: ``SlotTable.reserve`` #24, ``check_awake`` #1
    and #5 lost them)."""
    with Arena("cpu", source="virtual", max_bytes="16MiB", framework="numpy") as ws:
        ws.numpy.get_simultaneous(((256,), F32))
        ws.sleep()
        with pytest.raises(ArenaAsleepError) as caught:
            line = sys._getframe().f_lineno + 1
            ws.reserve_bytes(1 << 16)
        name = test_a_reserve_while_asleep_names_what_it_did_and_the_call_site.__name__
        site = f"test_slots_gaps11.py:{line}:{name}"
        assert caught.value.caller == site
        assert f"reserving {1 << 16} bytes from '{site}'" in str(caught.value)
        ws.wake()


def test_a_reserve_for_one_lane_floors_that_lanes_slots_alone() -> None:
    """``reserve_bytes(n, lane=1)`` is a floor for lane 1's slots, which planning never
    shrinks below; lane 0's slots keep theirs (Round 11: ``SlotTable.reserve`` #36 floored
    the other lanes instead)."""
    with Arena("cpu", framework="numpy", ubatches=2, lanes=2) as ws:
        ws.reserve_bytes(1 << 14, lane=1)
        floors = {(s.ubatch, s.lane): s.plain_high for s in ws._table.slots}
        assert floors == {(0, 0): 0, (1, 0): 0, (0, 1): 1 << 14, (1, 1): 1 << 14}


def test_locked_in_place_growths_warn_once_per_call_site_and_count_each() -> None:
    """Two locked in-place growths from one call site: one warning, two events
    (Round 11: ``Governor.take_notes`` #9 marked the repeated site as new)."""
    events: list[str] = []
    with Arena("cpu", source="virtual", max_bytes="64MiB", framework="numpy") as a:
        a.add_listener(lambda event: events.append(event.kind))
        a.numpy.get_simultaneous(((PAGE,), "uint8"))
        a.lock(growth="in_place")
        with pytest.warns(ArenaWarning, match="warned once per call site") as caught:
            for pages in (4, 8):
                a.numpy.get_simultaneous(((pages * PAGE,), "uint8"))
        assert len(caught) == 1
        assert events.count("locked_growth") == 2
        assert a.memory_stats()["arena.locked_growths"] == 2


def test_a_close_after_an_interrupted_close_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A close interrupted while the slots give their blocks up finishes the job in its
    ``finally`` (every block released, the slots emptied); a later close does nothing,
    as the docstring says: no event, no release (Round 11: ``SlotTable.close`` #19 left
    the table marked not emptied, and the next close went through again)."""
    interrupted: list[int] = []
    take_blocks = Slot.take_blocks

    def interrupted_once(self: Slot) -> Any:
        if not interrupted:
            interrupted.append(1)
            raise KeyboardInterrupt
        return take_blocks(self)

    events: list[str] = []
    ws = Arena("cpu", framework="numpy")
    ws.add_listener(lambda event: events.append(event.kind))
    ws.numpy.get_simultaneous(((1024,), F32))
    monkeypatch.setattr(Slot, "take_blocks", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        ws.close()
    stats = ws.stats()
    assert ws.is_closed and stats.live_bytes == 0 and stats.allocations == stats.frees
    events.clear()
    ws.close()
    assert events == []
