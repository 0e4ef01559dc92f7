"""A close() an interrupt split, then close() again: the slots hold nothing (review 39).

The first close() marks the arena closed and, whatever interrupts it, releases every
block the ledger still counts. Interrupted before the slots gave their blocks up, the
slots kept them: the second close() saw no live block and returned, and ``stats()`` went
on reporting the released buffers as capacity, persistent and retired bytes (16,896
bytes here, live bytes 0), at 212 of 250 interrupt points.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from arena import Arena
from arena.slots.slot import Slot
from tests.interrupts import Injector
from tests.sources import RecordingSource


def _arena() -> tuple[Arena, RecordingSource]:
    source = RecordingSource()
    ws = Arena("cpu", source=source, ubatches=2, framework="numpy", profile=False)
    for ubatch in (1, 0):
        with ws.ubatch(ubatch):
            ws.numpy.get_simultaneous(((1000 * (ubatch + 1),), "float32"))
            ws.numpy.get_persistent("p", (10,), "float32")
    return ws, source


def test_a_second_close_after_an_interrupted_one_leaves_nothing_held() -> None:
    ws, _ = _arena()
    injector = Injector(0)
    sys.settrace(injector)
    try:
        ws.close()
    finally:
        sys.settrace(None)
    points = injector.count
    assert points > 100
    damaged = []
    for at in range(1, points + 1):
        ws, source = _arena()
        injector = Injector(at)
        sys.settrace(injector)
        try:
            ws.close()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        ws.close()  # finishes what the interrupt split
        stats = ws.stats()
        held = sum(s.capacity + s.retired_bytes + s.persistent_bytes for s in stats.slots)
        if held or stats.live_bytes or source.live:
            damaged.append((at, injector.where, held, stats.live_bytes, len(source.live)))
    assert not damaged, damaged[:5]


def test_a_close_interrupted_again_while_it_heals_is_finished_by_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An interrupt at the slots' giving up their blocks, and a second one in close()'s
    healing of that (its own take_blocks): the ledger released every block, the slots
    still hold theirs, and the next close() must not take the arena for closed already
    (no live block) and return. Fails with close()'s early return not asking whether the
    slots were emptied (planted, 2026-12-03)."""
    ws, source = _arena()
    take_blocks = Slot.take_blocks
    interrupts = [2]

    def interrupted(self: Slot) -> Any:
        if interrupts[0]:
            interrupts[0] -= 1
            raise KeyboardInterrupt
        return take_blocks(self)

    monkeypatch.setattr(Slot, "take_blocks", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ws.close()
    assert interrupts == [0] and not source.live  # released, but still held by the slots
    ws.close()
    stats = ws.stats()
    assert sum(s.capacity + s.retired_bytes + s.persistent_bytes for s in stats.slots) == 0
    assert stats.live_bytes == 0 and not source.live
