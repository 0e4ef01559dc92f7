"""Lock hooks: how a feature above the slots takes part in sizing, ``lock()`` and the
figures, without the slot table importing it.

The slot table (:class:`~arena.slots.table.SlotTable`) sizes the scratch buffers itself.
A feature with its own per-slot state that changes what a slot must hold (step plans,
:mod:`arena.planning.plan`), that keeps blocks of its own for each slot (persistent
buffers, :mod:`arena.slots.persistent`; library workspaces and Triton blocks,
:mod:`arena.slots.workspaces`) or that watches the figures (the peaks of
``memory_stats()``, :mod:`arena.kernels.memstats`) registers a :class:`LockHook` with
:meth:`~arena.slots.table.SlotTable.add_hook`; the facade does so when it assembles an
arena (:mod:`arena.assembly`). The table calls every hook with its mutex held; the
defaults do nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from arena.slots.governor import Governor
from arena.slots.slot import Slot

__all__ = ["LockHook"]


class LockHook:
    """A feature's part in the slot table's sizing and figures (every method is called
    with the governor's mutex held; the defaults do nothing)."""

    __slots__ = ()

    def attach(self, slots: Sequence[Slot]) -> None:
        """At registration: give each of ``slots`` the feature's store of blocks for it
        (:meth:`~arena.slots.slot.Slot.attach`), if the feature keeps any."""

    def lane_additions(self, group: Sequence[Slot], alignment: int) -> int:
        """Bytes :meth:`share_lane` would allocate now for the lane ``group`` (for the
        cap's check before ``lock()`` allocates, and ``lock()``'s check that it is awake)."""
        return 0

    def share_lane(self, group: Sequence[Slot]) -> None:
        """As ``lock()`` sizes the lane ``group``, after its scratch buffers: give every
        slot of the lane the blocks the feature keeps for any of them (a micro-batch that
        did not run during warm-up finds them after ``lock()``)."""

    def lane_need(self, group: Sequence[Slot], alignment: int, *, merge: bool) -> int:
        """As ``lock()`` sizes the lane ``group``: the bytes each of its slots must hold
        from now on (the feature fixes its sizes here; ``merge`` is False when the arena
        is locked already and nothing may grow)."""
        return 0

    def lane_estimate(self, group: Sequence[Slot], alignment: int) -> int:
        """What :meth:`lane_need` would return now, changing nothing (for
        ``planned_bytes()`` and the checks before ``lock()`` allocates)."""
        return 0

    def lock_warnings(self, group: Sequence[Slot]) -> list[str]:
        """Called right after :meth:`lane_need`, before the lane is sized: warnings to
        give once ``lock()`` is done (the mutex released)."""
        return []

    def note_figures(self, governor: Governor, slots: Sequence[Slot]) -> None:
        """After every allocation and before ``close()`` releases the blocks: the
        figures of ``slots`` are about to change."""
