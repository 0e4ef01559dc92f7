"""Memory statistics under ``torch.cuda.memory_stats()`` key names, and their resets.

:func:`memory_stats` returns a flat dict. Each torch key is ``FAMILY.POOL.METRIC``: the
pool is ``all``, ``large_pool`` or ``small_pool`` (every block of an arena is a "large"
segment of its own, so ``large_pool`` repeats ``all`` and ``small_pool`` is 0), and the
metric is, as torch defines it:

``current``
    the current value of this metric;
``peak``
    the maximum value of this metric (since creation or :func:`reset_peaks`);
``allocated``, ``freed``
    the historical total increase and decrease of this metric (since creation or
    :func:`reset_accumulated`); only for ``reserved_bytes`` and ``segment``, the
    figures the memory source sees. The arena's hot path counts nothing per request, so
    ``allocated_bytes``, ``active_bytes``, ``requested_bytes``, ``allocation`` and
    ``active`` have ``current`` and ``peak`` only.

The families, torch's definition first, then what it is for an arena. Every figure is
what :meth:`arena.Arena.memory_snapshot` shows summed by torch's own consistency rules
(``_check_memory_stat_consistency`` in torch's ``test/test_cuda.py``), so the two agree:

``reserved_bytes``
    Amount of reserved memory: bytes the arena holds from its memory source, every live
    block (scratch, retired, persistent, library workspaces, Triton blocks). What the
    cap limits.
``segment``
    Number of reserved segments from ``cudaMalloc()``: blocks the arena holds.
``allocated_bytes``
    Amount of allocated memory: bytes of those blocks that requests have used, per slot
    the largest request served from its scratch buffer (its layout, alignment padding
    included; at most the buffer's capacity), plus each persistent buffer's, library
    workspace's and Triton block's whole block. Retired blocks and unused scratch are
    reserved, not allocated. 0 after close.
``active_bytes``
    Amount of active memory: the same as ``allocated_bytes`` (an arena block released
    while its streams still use it is no longer the arena's; see
    ``arena.pending_release_bytes``).
``requested_bytes``
    Memory requested by client code (compare with ``allocated_bytes`` for the rounding
    overhead): scratch as allocated (a request's layout is what it asked for), a
    persistent buffer's view bytes, a library workspace's or Triton block's bytes.
``allocation``
    Number of allocation requests received by the memory allocator: blocks in use, one
    per slot whose scratch served a request, one per persistent buffer, library
    workspace and Triton block.
``active``
    Number of active memory blocks: the same as ``allocation``.
``inactive_split``, ``inactive_split_bytes`` (``current`` only)
    Number and amount of inactive, non-releasable memory blocks: the unused tail of each
    scratch buffer that requests used part of.

The counters:

``num_alloc_retries``
    Failed ``cudaMalloc`` calls that result in a cache flush and retry: always 0, the
    arena never retries.
``num_ooms``
    Out-of-memory errors thrown: :class:`~arena.ArenaOutOfMemoryError` raised (the
    source out of memory, or the cap).
``num_sync_all_streams``
    ``synchronize_and_free_events`` calls: always 0, the arena never synchronizes every
    stream (a released block waits for its own streams' events).
``num_device_alloc``, ``num_device_free``
    CUDA allocation and free calls: calls to the memory source's ``allocate`` and
    ``release``.

``arena.*`` keys: ``scratch_bytes``, ``retired_bytes``, ``persistent_bytes``,
``workspace_bytes``, ``triton_bytes`` (what the slots hold, by kind; with a source that
returns exactly the bytes asked they add up to ``reserved_bytes.all.current``),
``pending_release_bytes`` (released, waiting for their streams before going back to the
source; not reserved), ``planned_bytes``, ``max_bytes`` (0: no cap), ``growths``,
``calls``, ``locked``, ``closed`` (0 or 1); ``locked_growths`` (growths served in place
while locked, ``lock(growth="in_place")``), ``asleep`` (0, or the level of ``sleep()``),
``resident_bytes`` (``reserved_bytes.all.current`` while awake, 0 asleep: the memory is
released) and ``address_bytes`` (address space the blocks reserve: with
``source="virtual"`` each slot's whole range).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from arena.kernels.budget import address_bytes, planned_bytes
from arena.observe.snapshot import memory_segments
from arena.slots.governor import Governor
from arena.slots.hooks import LockHook
from arena.slots.persistent import PersistentStore
from arena.slots.table import SlotTable
from arena.slots.workspaces import WorkspaceStore

if TYPE_CHECKING:
    from arena.slots.slot import Slot

__all__ = [
    "POOLS",
    "PeakHook",
    "memory_stats",
    "note_peaks",
    "reset_accumulated",
    "reset_peaks",
    "torch_figures",
]

POOLS = ("all", "large_pool", "small_pool")
#: Families whose figures come from the slots (``current`` and ``peak``).
_HELD = ("allocated_bytes", "active_bytes", "requested_bytes", "allocation", "active")
#: Families with ``current`` only (they fall as requests rise: a peak would depend on
#: when it was read).
_CURRENT_ONLY = ("inactive_split", "inactive_split_bytes")


def torch_figures(segments: Sequence[dict[str, Any]]) -> dict[str, int]:
    """The ``*.current`` figures torch's ``_check_memory_stat_consistency`` expects of
    ``segments`` (a ``memory_snapshot()["segments"]`` list), by its own rules."""
    figures: dict[str, int] = {}

    def add(family: str, pool: str, value: int) -> None:
        for where in ("all", pool):
            key = f"{family}.{where}.current"
            figures[key] = figures.get(key, 0) + value

    for segment in segments:
        pool = segment["segment_type"] + "_pool"
        add("segment", pool, 1)
        add("allocated_bytes", pool, segment["allocated_size"])
        add("reserved_bytes", pool, segment["total_size"])
        add("active_bytes", pool, segment["active_size"])
        add("requested_bytes", pool, segment["requested_size"])
        split = len(segment["blocks"]) > 1
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                add("allocation", pool, 1)
            if block["state"].startswith("active_"):
                add("active", pool, 1)
            if block["state"] == "inactive" and split and not segment["is_expandable"]:
                add("inactive_split", pool, 1)
                add("inactive_split_bytes", pool, block["size"])
    return figures


def _held(governor: Governor, slots: Sequence[Slot]) -> dict[str, int]:
    """The current figures of the slots' blocks (mutex held; all 0 once closed)."""
    if governor.closed:
        return {}
    return torch_figures(memory_segments(slots, governor.device, governor.alignment, {}))


def note_peaks(governor: Governor, slots: Sequence[Slot]) -> dict[str, int]:
    """Raise the governor's peaks of the held figures to their current values; return
    those values. Call with the mutex held: at every read and before every change that
    can lower them (a slot fitted smaller, close), so that no peak depends on when
    :func:`memory_stats` was read."""
    figures = _held(governor, slots)
    peaks = governor.stat_peaks
    for family in _HELD:
        for pool in POOLS:
            key = f"{family}.{pool}"
            peaks[key] = max(peaks.get(key, 0), figures.get(f"{key}.current", 0))
    return figures


def reset_peaks(governor: Governor, slots: Sequence[Slot]) -> None:
    """Set every peak of :func:`memory_stats` to its current figure."""
    with governor.mutex:
        governor.ledger.reset_peaks()
        figures = _held(governor, slots)
        governor.stat_peaks = {
            f"{family}.{pool}": figures.get(f"{family}.{pool}.current", 0)
            for family in _HELD
            for pool in POOLS
        }


def reset_accumulated(governor: Governor) -> None:
    """Set the accumulated figures (``.allocated``, ``.freed``, ``num_*``) to 0."""
    with governor.mutex:
        ledger = governor.ledger
        governor.stat_base = {
            "segment.allocated": ledger.allocations,
            "segment.freed": ledger.frees,
            "reserved_bytes.allocated": ledger.allocated_total,
            "reserved_bytes.freed": ledger.freed_total,
            "num_ooms": ledger.ooms,
        }


def memory_stats(table: SlotTable) -> dict[str, int]:
    """See :meth:`arena.Arena.memory_stats` and the module's docstring for each key."""
    governor, slots = table.governor, table.slots
    with governor.mutex:
        ledger = governor.ledger
        held = note_peaks(governor, slots)
        base = governor.stat_base
        peaks = governor.stat_peaks
        stats: dict[str, int] = {}
        for family in _HELD:
            for pool in POOLS:
                stats[f"{family}.{pool}.current"] = held.get(f"{family}.{pool}.current", 0)
                stats[f"{family}.{pool}.peak"] = peaks.get(f"{family}.{pool}", 0)
        accumulated = {
            "segment.allocated": ledger.allocations,
            "segment.freed": ledger.frees,
            "reserved_bytes.allocated": ledger.allocated_total,
            "reserved_bytes.freed": ledger.freed_total,
        }
        ledger_figures = {
            "reserved_bytes": (ledger.live_bytes, ledger.peak_bytes),
            "segment": (ledger.live_blocks, ledger.peak_blocks),
        }
        for family, (current, peak) in ledger_figures.items():
            for pool in POOLS:
                small = pool == "small_pool"
                stats[f"{family}.{pool}.current"] = 0 if small else current
                stats[f"{family}.{pool}.peak"] = 0 if small else peak
                for metric in ("allocated", "freed"):
                    key = f"{family}.{metric}"
                    value = accumulated[key] - base.get(key, 0)
                    stats[f"{family}.{pool}.{metric}"] = 0 if small else value
        for family in _CURRENT_ONLY:
            for pool in POOLS:
                stats[f"{family}.{pool}.current"] = held.get(f"{family}.{pool}.current", 0)
        workspaces = [s.store(WorkspaceStore) for s in slots]
        stats.update(
            {
                "num_alloc_retries": 0,
                "num_ooms": ledger.ooms - base.get("num_ooms", 0),
                "num_sync_all_streams": 0,
                "num_device_alloc": accumulated["segment.allocated"]
                - base.get("segment.allocated", 0),
                "num_device_free": accumulated["segment.freed"] - base.get("segment.freed", 0),
                "arena.scratch_bytes": sum(s.buffer.capacity for s in slots),
                "arena.retired_bytes": sum(s.retired_bytes for s in slots),
                "arena.persistent_bytes": sum(s.store(PersistentStore).nbytes for s in slots),
                "arena.workspace_bytes": sum(w.library_bytes for w in workspaces),
                "arena.triton_bytes": sum(w.triton_bytes for w in workspaces),
                "arena.pending_release_bytes": ledger.pending_bytes,
                "arena.planned_bytes": planned_bytes(table),
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
        )
        return stats


class PeakHook(LockHook):
    """The peaks' part in the slot table (a :class:`~arena.slots.hooks.LockHook` the
    facade registers with every slot table): at every allocation and before ``close()``
    the peaks rise to the current figures (see :func:`note_peaks`)."""

    __slots__ = ()

    def note_figures(self, governor: Governor, slots: Sequence[Slot]) -> None:
        """Raise the peaks to the current figures of ``slots``."""
        note_peaks(governor, slots)
