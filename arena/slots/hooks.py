"""Lock hooks: how a feature above the slots takes part in sizing, ``lock()`` and the
figures, without the slot table importing it.

The slot table (:class:`~arena.slots.table.SlotTable`) sizes buffers, persistent buffers
and workspace blocks itself. A feature with its own per-slot state that changes what a
slot must hold (step plans, :mod:`arena.planning.plan`) or that watches the figures
(the peaks of ``memory_stats()``, :mod:`arena.kernels.memstats`) registers a
:class:`LockHook` with :meth:`~arena.slots.table.SlotTable.add_hook`; the facade does so
when it assembles an arena (:mod:`arena.assembly`). The table calls every hook with its
mutex held; the defaults do nothing.
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
