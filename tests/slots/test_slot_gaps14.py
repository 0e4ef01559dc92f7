"""What Round 14f of the mutation tests found the suite let through in ``arena/slots/slot.py``
(issue 26 item 12); each test names the mutants it kills (mutmut's numbers on ``335b43c``)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from arena import Arena, ArenaEvent, ArenaWarning
from arena.errors import ArenaOutOfMemoryError
from arena.memory.sources import Allocation
from arena.memory.virtual import PAGE, VirtualHostSource
from tests.gates import moving_only


def test_a_failed_commit_names_the_slots_scratch_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    # Slot._commit #27 (`ledger.commit(old.allocation, capacity, None)`): a growth in
    # place that the fixed-address source could not commit said "for None", not which
    # buffer of which slot it was growing.
    def refuse(self: Any, allocation: Allocation, nbytes: int) -> Allocation:
        raise MemoryError("out of memory (injected)")

    with Arena("cpu", source="virtual", max_bytes="64MiB", framework="numpy") as a:
        a.numpy.get_simultaneous(((PAGE,), "uint8"))
        monkeypatch.setattr(VirtualHostSource, "commit", refuse)
        with pytest.raises(
            ArenaOutOfMemoryError,
            match=r"for slot \(ubatch 0, lane 0\)'s scratch buffer of \d+ bytes on",
        ):
            a.numpy.get_simultaneous(((4 * PAGE,), "uint8"))


def test_a_locked_growth_warns_with_the_bytes_the_slot_held() -> None:
    # Slot.ensure #46 (`note_locked_growth(self, resize[2], resize[2])`): the warning and
    # the "locked_growth" event gave the new size as the old, so "0 bytes were committed".
    events: list[ArenaEvent] = []
    with Arena("cpu", source="virtual", max_bytes="64MiB", framework="numpy") as a:
        a.numpy.get_simultaneous(((PAGE,), "uint8"))
        held = a.numpy._select().buffer.capacity
        a.add_listener(events.append)
        a.lock(growth="in_place")
        grown = 4 * PAGE
        with pytest.warns(
            ArenaWarning, match=f"needed {grown} bytes .* which held {held}: {grown - held} bytes"
        ):
            a.numpy.get_simultaneous(((grown,), "uint8"))
    assert [(e.slot, e.old_bytes, e.new_bytes) for e in events if e.kind == "locked_growth"] == [
        ((0, 0), held, grown)
    ]


@moving_only("a growth in place neither replaces nor keeps the old buffer")
def test_lock_sizing_a_slot_keeps_no_old_buffer_alive_without_poisoning() -> None:
    # Slot.size_for_lock #24 (`governor.poison or old.allocation is not None`): without
    # poisoning, lock() sizing a slot up to its lane's largest kept the old buffer as
    # "outgrown" (for poisoning its views), which nothing ever let go before close(): the
    # old block's memory stayed alive after release_retired() freed it in the books.
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        with a.ubatch(1):  # first: a request on its sibling then leaves it small
            a.numpy.get_simultaneous(((4096,), "uint8"))
            slot = a.numpy._select()
        with a.ubatch(0):
            a.numpy.get_simultaneous(((1 << 20,), "uint8"))
        assert slot.buffer.capacity < 1 << 20
        old = slot.buffer.allocation
        assert old is not None
        owner = weakref.ref(old.owner)
        del old
        a.lock()
        assert slot.buffer.capacity >= 1 << 20
        assert slot.outgrown == []
        a.release_retired()
        gc.collect()
        assert owner() is None
