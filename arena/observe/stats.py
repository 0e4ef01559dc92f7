"""Statistics snapshots returned by :meth:`arena.Arena.stats`."""

from __future__ import annotations

from dataclasses import dataclass, field

from arena.base.events import MB
from arena.slots.governor import address_bytes
from arena.slots.persistent import PersistentStore
from arena.slots.table import SlotTable
from arena.slots.workspaces import WorkspaceStore

__all__ = ["ArenaStats", "SlotStats", "arena_stats"]


@dataclass(frozen=True, slots=True)
class SlotStats:
    """One slot's figures.

    Attributes
    ----------
    ubatch, lane : int
        The slot's coordinates.
    capacity : int
        Bytes of the current scratch buffer (0 before the first allocation).
    high_water : int
        Largest layout (bytes) ever requested from this slot.
    growths : int
        How many times the scratch buffer was (re)allocated.
    calls : int
        ``get_simultaneous`` calls served by this slot.
    persistent_bytes : int
        Bytes held by this slot's persistent buffers.
    persistent_keys : int
        Number of persistent buffers and resources in this slot.
    retired_bytes : int
        Bytes of replaced scratch buffers and workspace blocks kept alive because a CUDA
        graph may read them (see :meth:`arena.Arena.release_retired`).
    retired_buffers : int
        How many such buffers and blocks.
    load : int
        LOAD: the most bytes this slot's requests held live at once (a plain request's
        bytes, plus the views of open scopes and live step views). No buffer can serve
        them with less; ``capacity / load`` says how close planning came.
    workspace_bytes, workspace_keys : int
        Bytes and number of this slot's library workspaces
        (:meth:`arena.Arena.get_library_workspace`).
    triton_bytes, triton_blocks : int
        Bytes and number of this slot's Triton blocks (one per stream,
        :meth:`arena.Arena.triton_allocator`).
    """

    ubatch: int
    lane: int
    capacity: int
    high_water: int
    growths: int
    calls: int
    persistent_bytes: int
    persistent_keys: int
    retired_bytes: int = 0
    retired_buffers: int = 0
    load: int = 0
    workspace_bytes: int = 0
    workspace_keys: int = 0
    triton_bytes: int = 0
    triton_blocks: int = 0

    @property
    def capacity_over_load(self) -> float:
        """``capacity / load`` (1.0 is the bound; 0.0 before any request)."""
        return self.capacity / self.load if self.load else 0.0


@dataclass(frozen=True, slots=True)
class ArenaStats:
    """A snapshot of an arena's memory and activity.

    Attributes
    ----------
    device : str
        The arena's device.
    locked, closed : bool
        State at the time of the snapshot.
    slots : tuple of SlotStats
        One entry per (ubatch, lane) slot, ubatch-major.
    allocations, frees : int
        Calls made to the memory source's ``allocate`` and ``release``.
    allocations_while_locked : int
        Source allocations made while locked. Always 0: growth while locked is refused,
        under the same mutex that ``lock()`` takes.
    calls : int
        ``get_simultaneous`` calls over all slots.
    call_sites : dict of str to int
        Peak bytes requested per ``file:line:function``, recorded only while unlocked.
    live_blocks, live_bytes : int
        Blocks (and their bytes) taken from the source and not released:
        ``allocations == frees + live_blocks`` always holds.
    cached_layouts, cached_views : int
        Prepared requests kept over the slots' current buffers (all fronts), and the view
        objects they hold: the memory the view caches cost besides the buffers (each
        bounded by ``max_cached_layouts`` per slot and front).
    resident_bytes, address_bytes : int
        Bytes backed by memory now (0 while asleep), and bytes of address space the
        blocks reserve (with ``source="virtual"`` each slot's whole range; otherwise
        ``live_bytes``).
    asleep : int
        0 when awake, else the level of :meth:`arena.Arena.sleep`.
    locked_growths : int
        Growths served in place while locked (``lock(growth="in_place")``).
    """

    device: str
    locked: bool
    closed: bool
    slots: tuple[SlotStats, ...]
    allocations: int
    frees: int
    allocations_while_locked: int
    calls: int
    call_sites: dict[str, int] = field(default_factory=dict)
    live_blocks: int = 0
    live_bytes: int = 0
    cached_layouts: int = 0
    cached_views: int = 0
    resident_bytes: int = 0
    address_bytes: int = 0
    asleep: int = 0
    locked_growths: int = 0

    @property
    def reserved_bytes(self) -> int:
        """Scratch, retired, persistent, library workspace and Triton bytes of all slots."""
        return sum(
            s.capacity + s.retired_bytes + s.persistent_bytes + s.workspace_bytes + s.triton_bytes
            for s in self.slots
        )

    @property
    def growths(self) -> int:
        """Scratch buffer (re)allocations over all slots."""
        return sum(s.growths for s in self.slots)

    def table(self) -> str:
        """A plain-text table of the slots, for people.

        The persistent, retired, workspace and Triton columns appear only where a slot holds
        such bytes, so an arena of plain requests prints a table that fits 80 columns.
        """
        labels = [f"ubatch {s.ubatch} lane {s.lane}" for s in self.slots]
        # As wide as the longest label and a space: 14 put every row a column right of its
        # heading ("ubatch 0 lane 0" is 15 characters).
        first = max([15, *[len(label) for label in labels]]) + 1
        header = f"{'slot':<{first}}{'capacity MB':>13}{'LOAD MB':>9}{'cap/LOAD':>9}"
        header += f"{'growths':>9}{'calls':>10}"
        optional = [
            (name, width, field)
            for name, width, field in _OPTIONAL_COLUMNS
            if [s for s in self.slots if getattr(s, field)]
        ]
        header += "".join(f"{name:>{width}}" for name, width, _ in optional)
        lines = [header, "-" * len(header)]
        for s, label in zip(self.slots, labels, strict=True):
            ratio = f"{s.capacity_over_load:.2f}" if s.load else "-"
            lines.append(
                f"{label:<{first}}{s.capacity / MB:>13.2f}"
                f"{s.load / MB:>9.2f}{ratio:>9}{s.growths:>9}{s.calls:>10}"
                + "".join(f"{getattr(s, field) / MB:>{width}.2f}" for _, width, field in optional)
            )
        return "\n".join(lines)


#: The table's columns shown only where some slot has bytes there: (heading, width, field).
_OPTIONAL_COLUMNS = (
    ("persistent MB", 15, "persistent_bytes"),
    ("retired MB", 12, "retired_bytes"),
    ("workspace MB", 14, "workspace_bytes"),
    ("triton MB", 11, "triton_bytes"),
)


def arena_stats(table: SlotTable, call_sites: dict[str, int]) -> ArenaStats:
    """A snapshot of every slot's figures and the arena's counters, with the peak bytes
    per call site the arena's request log recorded (see :meth:`arena.Arena.stats`)."""
    governor = table.governor
    with governor.mutex:
        slots = tuple(
            SlotStats(
                s.ubatch,
                s.lane,
                s.buffer.capacity,
                s.high_water,
                s.growths,
                s.calls,
                p.nbytes,
                p.keys,
                s.retired_bytes,
                s.retired_count,
                s.load,
                w.library_bytes,
                len(w.library),
                w.triton_bytes,
                len(w.triton),
            )
            for s, p, w in (
                (s, s.store(PersistentStore), s.store(WorkspaceStore)) for s in table.slots
            )
        )
        ledger = governor.ledger
        # A front's cache is {specs: Prepared}; a step replay's, one such dict per request.
        caches = [
            inner
            for s in table.slots
            for c in list(s.buffer.prepared.values())
            for inner in (list(c) if isinstance(c, list) else [c])
        ]
        return ArenaStats(
            device=str(governor.device),
            locked=governor.locked,
            closed=governor.closed,
            slots=slots,
            allocations=ledger.allocations,
            frees=ledger.frees,
            allocations_while_locked=governor.allocations_while_locked,
            calls=sum(s.calls for s in table.slots),
            call_sites=call_sites,
            live_blocks=ledger.live_blocks,
            live_bytes=ledger.live_bytes,
            cached_layouts=sum(len(c) for c in caches),
            cached_views=sum(len(e.views) for c in caches for e in list(c.values())),
            resident_bytes=0 if governor.asleep else ledger.live_bytes,
            address_bytes=address_bytes(governor),
            asleep=governor.asleep,
            locked_growths=governor.locked_growths,
        )
