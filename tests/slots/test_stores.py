"""Issue 27 item 3: the features' stores live with their features.

Persistent buffers (:mod:`arena.slots.persistent`), workspace blocks
(:mod:`arena.slots.workspaces`) and step books (:mod:`arena.planning.books`) give each
slot a store when they register with the slot table (a lock hook's ``attach``); the Slot
and the SlotTable neither make nor import them, and count and empty their blocks through
the store interface (``SlotStore``).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

import pytest

from arena import Arena
from arena.memory.sources import Allocation
from arena.planning.books import StepBooks, books_of, restore_step_plans
from arena.slots.hooks import LockHook
from arena.slots.persistent import PersistentStore
from arena.slots.slot import Slot
from arena.slots.workspaces import WorkspaceStore

ROOT = Path(__file__).resolve().parents[2]
_STORES = ("arena.slots.persistent", "arena.slots.workspaces", "arena.planning.books")


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at module level, under TYPE_CHECKING or in a body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_slot_and_the_table_import_no_store() -> None:
    for name in ("slot.py", "table.py"):
        path = ROOT / "arena" / "slots" / name
        source = path.read_text(encoding="utf-8")
        assert not _imported(path) & set(_STORES), name
        assert "PersistentStore" not in source and "WorkspaceStore" not in source, name
        assert "StepBooks" not in source and "StepBook" not in source, name


def test_the_import_reader_sees_an_import() -> None:
    assert "arena.slots.persistent" in _imported(ROOT / "arena" / "front.py")


def test_every_slot_has_the_stores_the_features_registered() -> None:
    with Arena("cpu", framework="numpy", ubatches=2, lanes=2) as a:
        for slot in a._table.slots:
            assert list(slot.stores) == [PersistentStore, WorkspaceStore, StepBooks]
            persistent = slot.store(PersistentStore)
            assert (persistent.ubatch, persistent.lane) == (slot.ubatch, slot.lane)


def test_each_slot_keeps_its_step_books_in_the_steps_store() -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        with a.numpy.step("k") as step:
            step.get_simultaneous(((64,), "float32"))
        first, second = a._table.slots
        assert not hasattr(first, "steps") and "steps" not in Slot.__slots__
        assert list(books_of(first)) == ["k"] and books_of(second) == {}
        assert first.store(StepBooks) is not second.store(StepBooks)
        assert first.store(StepBooks).retired_bytes == 0
        assert first.store(StepBooks).blocks() == ([], [])


def test_restoring_step_plans_takes_one_list_of_plans_per_slot() -> None:
    # A profile's plans go to the slots in order, one list each: a list for another
    # number of slots is refused, not given to the first slots and the rest dropped (the
    # profile's schema check makes the counts agree before its plans are restored).
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        assert restore_step_plans(a._table, [[], []]) == []
        for plans in ([[]], [[], [], []]):
            with pytest.raises(ValueError, match="zip"):
                restore_step_plans(a._table, plans)


class _Kept:
    """A store of a planted feature: one retired block, one kept, one discarded."""

    def __init__(self, blocks: list[Allocation]) -> None:
        self.retired, self.kept, self.discarded = blocks
        self.taken: list[str] = []

    @property
    def retired_bytes(self) -> int:
        return self.retired.nbytes

    @property
    def retired_count(self) -> int:
        return 1

    def blocks(self) -> tuple[list[Allocation], list[Allocation]]:
        return [self.kept], [self.discarded]

    def take_blocks(self) -> list[Allocation]:
        self.taken.append("all")
        return [self.retired, self.kept, self.discarded]

    def take_retired(self, include_captured: bool) -> list[Allocation]:
        self.taken.append(f"retired {include_captured}")
        return [self.retired] if include_captured else []


class _Feature(LockHook):
    __slots__ = ("stores",)

    def __init__(self) -> None:
        self.stores: list[_Kept] = []

    def attach(self, slots: Sequence[Slot]) -> None:
        for slot in slots:
            governor = slot.governor
            with governor.mutex:
                blocks = [governor.allocate(n, "a planted store") for n in (256, 512, 768)]
            store = _Kept(blocks)
            slot.attach(store)
            self.stores.append(store)


def test_a_registered_store_counts_in_the_slots_figures_and_close() -> None:
    a = Arena("cpu", framework="numpy")
    feature = _Feature()
    a._table.add_hook(feature)
    (slot,) = a._table.slots
    (store,) = feature.stores
    assert slot.stores[_Kept] is store and slot.store(_Kept) is store
    stats = a.stats().slots[0]
    assert (stats.retired_bytes, stats.retired_buffers) == (256, 1)
    kept, scratch = slot.blocks()
    assert store.kept in kept and store.discarded in scratch
    assert a.release_retired(include_captured=True) == 256
    assert store.taken == ["retired True"]
    ledger = a._table.governor.ledger
    assert ledger.holds(store.kept)
    a.close()
    assert store.taken == ["retired True", "all"]
    assert not ledger.holds(store.kept) and not ledger.holds(store.discarded)
