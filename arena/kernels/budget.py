"""Budgets: what a request needs, what an arena will hold after ``lock()``, and its memory
statistics under torch's key names.

* :func:`layout_bytes`: the bytes one request needs, with no arena and no allocation;
* :func:`planned_bytes`: what an arena will hold once :meth:`~arena.Arena.lock` has sized
  every slot like its lane's largest (``lock()`` releases nothing), so an engine can
  subtract it before sizing its KV cache;
* :func:`memory_stats`: a flat dict with ``torch.cuda.memory_stats()`` key names where the
  meaning is the same, plus ``arena.*`` keys;
* the cap (``Arena(max_bytes=N)``, ``ARENA_MAX_BYTES``) is enforced by
  :meth:`~arena.slots.governor.Governor.check_budget` before every allocation.

What each key of :func:`memory_stats` means for an arena:

``reserved_bytes.all.current`` / ``.peak``
    Bytes the arena holds from its memory source (every live block: scratch, retired,
    persistent, library workspaces, Triton blocks), now and at most since creation or
    :func:`reset_peaks`. What the cap limits.
``allocated_bytes.all.current`` / ``.peak``
    Bytes of those blocks that requests have used: per slot the largest request served
    from its scratch buffer (its layout, alignment padding included; at most the
    buffer's capacity), plus persistent views (their exact bytes), library
    workspaces and Triton blocks (in use by the library that holds them). Retired buffers
    and unused scratch are reserved, not allocated. It only grows while the arena is open
    (0 after close), so its peak is the value before close or since the last reset.
``segment.all.current`` / ``.peak``
    Blocks held (torch: segments), now and at most.
``num_device_alloc``, ``num_device_free``
    Calls to the memory source's ``allocate`` and ``release`` (torch: cudaMalloc and
    cudaFree calls).
``num_ooms``
    :class:`~arena.ArenaOutOfMemoryError` raised: the source out of memory, or the cap.
``num_alloc_retries``
    Always 0: the arena never retries an allocation (torch retries after freeing its
    cache).
``arena.*``
    ``scratch_bytes``, ``retired_bytes``, ``persistent_bytes``, ``workspace_bytes``,
    ``triton_bytes`` (what the slots hold, by kind; with a source that returns exactly
    the bytes asked they add up to ``reserved_bytes.all.current``),
    ``pending_release_bytes`` (released, waiting for their streams before going back to
    the source; not reserved), ``planned_bytes``, ``max_bytes`` (0: no cap), ``growths``,
    ``calls``, ``locked``, ``closed`` (0 or 1); ``locked_growths`` (growths served in
    place while locked, ``lock(growth="in_place")``), ``asleep`` (0, or the level of
    ``sleep()``), ``resident_bytes`` (``reserved_bytes.all.current`` while awake, 0
    asleep: the memory is released) and ``address_bytes`` (address space the blocks
    reserve: with ``source="virtual"`` each slot's whole range).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arena.kernels.workspaces import missing_library_bytes
from arena.planning.records import share_plans
from arena.slots.governor import Governor
from arena.views.layout import DEFAULT_ALIGNMENT, check_alignment, compute_layout

if TYPE_CHECKING:
    from arena.slots.slot import Slot

__all__ = [
    "allocated_bytes",
    "layout_bytes",
    "lock_additions",
    "memory_stats",
    "note_allocated_peak",
    "planned_bytes",
    "reset_peaks",
]


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
    committed in place), the persistent buffers and library workspaces siblings lack.
    Call with the mutex held."""
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


def allocated_bytes(slots: Sequence[Slot]) -> int:
    """Bytes of the arena's blocks that requests have used (see the module's docstring).
    Call with the mutex held."""
    total = 0
    for slot in slots:
        total += min(slot.high_water, slot.buffer.capacity)
        total += sum(p.layout.views[0].nbytes for p in list(slot.persistent.buffers.values()))
        total += slot.workspaces.library_bytes + slot.workspaces.triton_bytes
    return total


def note_allocated_peak(governor: Governor, slots: Sequence[Slot]) -> int:
    """Raise the governor's allocated peak to the current figure; return the figure. Call
    with the mutex held (and before close() empties the slots)."""
    current = allocated_bytes(slots) if not governor.closed else 0
    governor.allocated_peak = max(governor.allocated_peak, current)
    return current


def reset_peaks(governor: Governor, slots: Sequence[Slot]) -> None:
    """Set every peak of :func:`memory_stats` to its current figure."""
    with governor.mutex:
        governor.ledger.reset_peaks()
        governor.allocated_peak = allocated_bytes(slots) if not governor.closed else 0


def address_bytes(governor: Governor) -> int:
    """Bytes of address space the arena's blocks reserve: each block's whole range on a
    fixed-address source, else the live bytes. Call with the mutex held."""
    ledger = governor.ledger
    if not governor.fixed_address:
        return ledger.live_bytes
    source: Any = ledger.source
    return sum(source.reserved(a) for a in ledger.blocks())


def memory_stats(governor: Governor, slots: Sequence[Slot], lanes: int) -> dict[str, int]:
    """See :meth:`arena.Arena.memory_stats` and the module's docstring for each key."""
    with governor.mutex:
        ledger = governor.ledger
        allocated = note_allocated_peak(governor, slots)
        workspaces = [s.workspaces for s in slots]
        return {
            "allocated_bytes.all.current": allocated,
            "allocated_bytes.all.peak": governor.allocated_peak,
            "reserved_bytes.all.current": ledger.live_bytes,
            "reserved_bytes.all.peak": ledger.peak_bytes,
            "segment.all.current": ledger.live_blocks,
            "segment.all.peak": ledger.peak_blocks,
            "num_device_alloc": ledger.allocations,
            "num_device_free": ledger.frees,
            "num_ooms": ledger.ooms,
            "num_alloc_retries": 0,
            "arena.scratch_bytes": sum(s.buffer.capacity for s in slots),
            "arena.retired_bytes": sum(s.retired_bytes for s in slots),
            "arena.persistent_bytes": sum(s.persistent_bytes for s in slots),
            "arena.workspace_bytes": sum(w.library_bytes for w in workspaces),
            "arena.triton_bytes": sum(w.triton_bytes for w in workspaces),
            "arena.pending_release_bytes": ledger.pending_bytes,
            "arena.planned_bytes": planned_bytes(governor, slots, lanes),
            "arena.max_bytes": governor.max_bytes or 0,
            "arena.growths": sum(s.growths for s in slots),
            "arena.calls": sum(s.calls for s in slots),
            "arena.locked": int(governor.locked),
            "arena.locked_growths": governor.locked_growths,
            "arena.asleep": governor.asleep,
            "arena.resident_bytes": 0 if governor.asleep else ledger.live_bytes,
            "arena.address_bytes": address_bytes(governor),
            "arena.closed": int(governor.closed),
        }
