"""A slot's growth (Slot._grow and _restore) around the ledger's one call."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena
from arena.base.layout import MAX_BYTES
from arena.errors import ArenaOutOfMemoryError
from arena.memory.ledger import Ledger
from arena.slots import slot as slots
from arena.slots.slot import Slot
from tests.gates import moving_only
from tests.sources import check_books


def _interrupt(*args: Any) -> Any:
    raise KeyboardInterrupt("inside a growth")


@moving_only("a growth in place neither replaces nor poisons the old buffer")
@pytest.mark.parametrize(
    ("where", "poison"),
    [(Ledger, False), (Ledger, True), ("compiled", False), ("compiled", True), (Slot, True)],
    ids=[
        "Ledger.replace",
        "Ledger.replace-poison",
        "compiled replace",
        "compiled replace-poison",
        "Slot.outgrow-poison",
    ],
)
def test_an_interrupted_growth_keeps_the_old_buffer(
    where: Any, poison: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt as the slot hands its old block to ``Ledger.replace`` (before the
    ledger counted it freed; the compiled growth set aside, as for a ledger it declines),
    or to the compiled growth of a host ledger (``compiled_replace()``, which the slot
    calls first), or as poisoning keeps the buffer the growth replaces (``Slot.outgrow``):
    the slot keeps its old block, the books balance, and the next request grows. Slips:
    _restore read only a buffer the slot held itself, and left the slot empty with its
    block counted live; ``outgrow`` ran before the growth's ``try``, so the slot was left
    empty with its old block counted live and held by nobody."""
    with Arena("cpu", framework="numpy", poison=poison) as a:
        a.get_simultaneous(((4096,), "uint8"))
        slot = a.numpy._select()
        before = slot.buffer
        ledger = a._table.governor.ledger
        if where == "compiled":
            monkeypatch.setattr(slots, "_REPLACE", [_interrupt])
        else:
            monkeypatch.setattr(slots, "_REPLACE", [None])  # Ledger.replace is called
            monkeypatch.setattr(where, "replace" if where is Ledger else "outgrow", _interrupt)
        with pytest.raises(KeyboardInterrupt):
            a.get_simultaneous(((1 << 20,), "uint8"))
        monkeypatch.undo()
        assert slot.buffer.allocation is before.allocation
        assert slot.buffer.capacity == before.capacity
        if poison and where is not Slot:
            assert slot.buffer is before  # the very buffer poisoning keeps
        assert ledger.holds(before.allocation)
        assert ledger.allocations == ledger.frees + ledger.live_blocks == 1
        check_books(a)
        (view,) = a.get_simultaneous(((1 << 20,), "uint8"))
        assert view.nbytes == 1 << 20
        check_books(a)


@moving_only("a growth in place neither replaces nor poisons the old buffer")
@pytest.mark.parametrize("compiled", [False, True], ids=["Ledger.replace", "compiled replace"])
@pytest.mark.parametrize("captured", [False, True])
def test_a_restored_buffer_is_not_poisoned_as_outgrown(
    captured: bool, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """review35: a growth interrupted as the slot calls Ledger.replace (or the compiled
    growth of a host ledger, which it calls first) gives the slot its
    old buffer back (the one poisoning kept, or the retired captured one); that buffer is
    the slot's current one again, not outgrown. Slip: it stayed in ``slot.outgrown``, so
    the next plain request's own views were poisoned as stale after they were filled:
    an int32 view read 0xFF, not the 0xA5 pattern (docs: arena/base/poison.py)."""
    from arena.base.poison import PATTERN_BYTE
    from tests.gates import Probe

    probe = Probe()
    with Arena("cpu", framework="numpy", poison=True, capture_probe=probe) as a:
        a.get_simultaneous(((4096,), "uint8"))
        if captured:  # served during a capture: a growth retires it (kept), not releases
            probe.capturing = True
            a.get_simultaneous(((64,), "uint8"))
            probe.capturing = False
        slot = a.numpy._select()
        before = slot.buffer

        def interrupted(self: Ledger, held: Any, nbytes: int, what: str) -> Any:
            raise KeyboardInterrupt("as the slot called Ledger.replace")

        if compiled:
            monkeypatch.setattr(slots, "_REPLACE", [interrupted])
        else:
            monkeypatch.setattr(slots, "_REPLACE", [None])  # Ledger.replace is called
            monkeypatch.setattr(Ledger, "replace", interrupted)
        with pytest.raises(KeyboardInterrupt):
            a.get_simultaneous(((1 << 20,), "uint8"))
        monkeypatch.undo()
        assert slot.buffer is before
        assert all(b is not before for b in slot.outgrown)
        check_books(a)
        (view,) = a.get_simultaneous(((256,), "int32"))
        assert set(view.view("uint8").tolist()) == {PATTERN_BYTE}
        check_books(a)


@moving_only("a growth in place commits the fixed-address source's own granularity")
@pytest.mark.parametrize("growth", ["exact", "pow2", 1000, 4096])
def test_a_growth_sizes_the_buffer_as_grown_size_says(growth: str | int) -> None:
    """_grow writes the default policy ("exact") out, without calling grown_size(): the
    capacity is grown_size's for every policy and target, and past what a buffer can
    address the error is grown_size's."""
    with Arena("cpu", framework="numpy", growth=growth) as a:
        slot = a.numpy._select()
        governor = a._table.governor
        for target in (1, 255, 256, 257, 1000, 4097, 65_536, 1_000_003):
            with governor.mutex:
                slot._grow(target)
            assert slot.buffer.capacity == slot.grown_size(target), (growth, target)
        with pytest.raises(ArenaOutOfMemoryError) as expected:
            slot.grown_size(MAX_BYTES)
        with governor.mutex, pytest.raises(ArenaOutOfMemoryError) as raised:
            slot._grow(MAX_BYTES)
        assert str(raised.value) == str(expected.value)
        assert slot.buffer.capacity == slot.grown_size(1_000_003)  # kept
