"""Budgets: what a request needs and what an arena will hold after ``lock()``.

* :func:`layout_bytes`: the bytes one request needs, with no arena and no allocation;
* :func:`planned_bytes`: what an arena will hold once :meth:`~arena.Arena.lock` has sized
  every slot like its lane's largest (``lock()`` releases nothing), so an engine can
  subtract it before sizing its KV cache;
* the cap (``Arena(max_bytes=N)``, ``ARENA_MAX_BYTES``) is enforced by
  :meth:`~arena.slots.governor.Governor.check_budget` before every allocation.

:mod:`arena.kernels.memstats` defines each key of :meth:`~arena.Arena.memory_stats`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arena.base.layout import DEFAULT_ALIGNMENT, check_alignment, compute_layout
from arena.kernels.workspaces import missing_library_bytes, missing_triton_bytes
from arena.planning.records import share_plans
from arena.slots.governor import Governor

if TYPE_CHECKING:
    from arena.slots.slot import Slot

__all__ = ["address_bytes", "layout_bytes", "lock_additions", "planned_bytes"]


def layout_bytes(*specs: tuple[Any, Any], alignment: int = DEFAULT_ALIGNMENT) -> int:
    """The bytes one request of ``(shape, dtype)`` specs needs in a slot buffer.

    Computed as a request is (each view rounded up to ``alignment``), with no arena and
    no allocation: ``Arena.reserve(*specs)`` would size a slot to exactly this.

    Parameters
    ----------
    *specs : tuple of (shape, dtype)
        The request, as :meth:`arena.Arena.get_simultaneous` takes it.
    alignment : int, optional
        The arena's alignment: a power of two from 16 to 2**30 (default 256).

    Returns
    -------
    int
        Bytes.

    Raises
    ------
    ConfigError
        For a bad alignment.
    SpecError, DTypeError
        For a malformed request.
    """
    return compute_layout(specs, check_alignment(alignment)).total


def lock_additions(slots: Sequence[Slot], lanes: int, alignment: int) -> int:
    """Bytes :meth:`~arena.slots.table.SlotTable.lock` would allocate now: each lane's
    scratch buffers brought to the largest, or to what its planned steps need (the
    smaller ones are retired, not released; on a fixed-address source only the bytes
    committed in place), the persistent buffers, library workspaces and Triton blocks
    siblings lack or hold smaller. Call with the mutex held."""
    total = 0
    in_place = bool(slots) and slots[0].governor.fixed_address
    for lane in range(lanes):
        group = [s for s in slots if s.lane == lane]
        need = _planned_lane_bytes(group, alignment)
        target = max(need, *(s.buffer.capacity for s in group))
        total += sum(
            target - (s.buffer.capacity if in_place else 0)
            for s in group
            if s.buffer.capacity < target
        )
        sizes: dict[Any, int] = {}
        for slot in group:
            for key, entry in list(slot.persistent.buffers.items()):
                sizes.setdefault(key, max(entry.layout.total, alignment))
        total += sum(
            size
            for slot in group
            for key, size in sizes.items()
            if key not in slot.persistent.buffers
        )
        total += missing_library_bytes([s.workspaces for s in group])
        total += missing_triton_bytes([s.workspaces for s in group])
    return total


def _planned_lane_bytes(group: list[Slot], alignment: int) -> int:
    """What :func:`~arena.planning.records.share_plans` would return for the lane
    ``group``, without planning anything: it runs on copies of the slots' books."""
    lane = [{k: b.copy(running=True) for k, b in list(s.steps.items())} for s in group]
    return share_plans(lane, alignment, frozen=[s.buffer.captured for s in group])


def planned_bytes(governor: Governor, slots: Sequence[Slot], lanes: int) -> int:
    """What the arena will hold after ``lock()``: every block it holds now plus what
    ``lock()`` adds (nothing once locked). See :meth:`arena.Arena.planned_bytes`."""
    with governor.mutex:
        held = governor.ledger.live_bytes
        if governor.locked or governor.closed:
            return held
        return held + lock_additions(slots, lanes, governor.alignment)


def address_bytes(governor: Governor) -> int:
    """Bytes of address space the arena's blocks reserve: each block's whole range on a
    fixed-address source, else the live bytes. Call with the mutex held."""
    ledger = governor.ledger
    if not governor.fixed_address:
        return ledger.live_bytes
    source: Any = ledger.source
    return sum(source.reserved(a) for a in ledger.blocks())
