"""The steps feature's store on each slot: what the slot knows of each step key.

Every slot has one :class:`StepBooks`, step key -> :class:`~arena.planning.records.StepBook`
(the record, plan and replay state of that key on that slot, see
:mod:`arena.planning.steps`). The steps feature makes the stores and gives each slot its
own when its lock hook registers with the slot table
(:meth:`arena.planning.plan.StepPlanHook.attach`, through
:meth:`arena.slots.slot.Slot.attach`): the slot neither makes nor imports it, and the
table imports nothing of the steps. The slot holds a reference to its store among the
stores of its features (``slot.stores``); the store holds no memory blocks, so it answers
the slot's questions about blocks (:class:`~arena.slots.slot.SlotStore`) with none.

Readers reach a slot's books by :func:`books_of` (the mapping) or :func:`step_books`
(the store); the compiled step enter (``arena/planning/_region_hit.c``, ``bind_steps``)
finds the store in ``slot.stores`` under :class:`StepBooks` and reads its :attr:`StepBooks.by_key`
by member offset. Only this module rebinds ``by_key``; the planning functions fill and
read the mapping (the feature's own store).
"""

from __future__ import annotations

from typing import Any

from arena.memory.sources import Allocation
from arena.planning.records import StepBook, restore_plans, stored_plans
from arena.slots.slot import Slot
from arena.slots.table import SlotTable

__all__ = ["StepBooks", "books_of", "restore_step_plans", "step_books", "step_plans"]


class StepBooks:
    """One slot's step books: step key -> :class:`~arena.planning.records.StepBook`.

    A :class:`~arena.slots.slot.SlotStore` that keeps no blocks (its retired bytes and
    count are 0, it has no blocks to keep, release or retire).

    Attributes
    ----------
    by_key : dict
        Step key -> what this slot knows of that step.
    """

    __slots__ = ("by_key",)

    def __init__(self) -> None:
        self.by_key: dict[Any, StepBook] = {}

    def book(self, key: Any) -> StepBook:
        """The book of ``key``, a new empty one (kept) where the slot has none."""
        return self.by_key.setdefault(key, StepBook())

    def keep(self, key: Any, book: StepBook) -> None:
        """Keep ``book`` as what this slot knows of step ``key`` (one store)."""
        self.by_key[key] = book

    # ------------------------------------------------------------------ SlotStore
    @property
    def retired_bytes(self) -> int:
        """0: step books hold no memory."""
        return 0

    @property
    def retired_count(self) -> int:
        """0: step books hold no memory."""
        return 0

    def blocks(self) -> tuple[list[Allocation], list[Allocation]]:
        """No blocks to keep or discard."""
        return [], []

    def take_blocks(self) -> list[Allocation]:
        """No blocks to release (the books stay: a closed arena refuses every step)."""
        return []

    def take_retired(self, include_captured: bool) -> list[Allocation]:
        """No retired blocks."""
        return []


def step_books(slot: Slot) -> StepBooks:
    """The step books the steps feature gave ``slot`` (:class:`StepBooks`)."""
    return slot.store(StepBooks)


def books_of(slot: Slot) -> dict[Any, StepBook]:
    """``slot``'s step books, step key -> :class:`~arena.planning.records.StepBook`."""
    return slot.store(StepBooks).by_key


def restore_step_plans(
    table: SlotTable, plans: list[list[dict[str, Any]]]
) -> list[tuple[Any, ...]]:
    """From a profile: give each slot of ``table`` (ubatch-major) its checked stored
    ``plans`` (keys it has no book of); ``(slot, key, bytes, capacity)`` per plan reaching
    past the slot's capacity."""
    governor = table.governor
    refused = []
    with governor.mutex:
        governor.check_open()
        for slot, entries in zip(table.slots, plans, strict=True):
            capacity = slot.buffer.capacity
            refused += [
                ((slot.ubatch, slot.lane), key, need, capacity)
                for key, need in restore_plans(books_of(slot), entries, capacity)
            ]
    return refused


def step_plans(table: SlotTable) -> tuple[list[dict[str, Any]], ...]:
    """Per slot of ``table``, ubatch-major: its plans of str or int step keys as profile
    entries."""
    with table.governor.mutex:
        return tuple(stored_plans(books_of(s)) for s in table.slots)
