"""The :class:`SlotTable`: every slot of one arena, and the operations on all of them.

:class:`~arena.Arena` composes one. Each operation takes the governor's mutex, re-checks
the arena's state under it, and announces its resizes and event once the mutex is
released (see docs/overview.md, "Threads and safety").
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from .config import Settings
from .errors import ConfigError, SpecError
from .governor import Governor, Resize
from .layout import MAX_BYTES
from .ledger import Ledger
from .selector import check_index
from .slot import Slot
from .snapshot import EventLog, build_snapshot
from .sources import Allocation
from .stats import ArenaStats, SlotStats

__all__ = ["SlotTable", "release_all"]


class SlotTable:
    """An arena's slots, ubatch-major (slot ``ubatch * lanes + lane``), and the governor
    and event log they share.

    Parameters
    ----------
    config : Settings
        The arena's validated settings.
    alloc_context : callable or None
        Called around every allocation (see :class:`arena.Arena`).
    events : EventLog
        Records the ledger's allocations and frees. Made by the arena itself, so that the
        warning of an unwritable file points at the arena's caller.
    """

    __slots__ = ("events", "governor", "lanes", "slots")

    def __init__(
        self,
        config: Settings,
        alloc_context: Callable[[], AbstractContextManager[Any]] | None,
        events: EventLog,
    ) -> None:
        ledger = Ledger(config.source, alloc_context)
        self.events = ledger.observer = events
        self.governor = governor = Governor(
            ledger,
            alignment=config.alignment,
            growth=config.growth,
            capture_probe=config.capture_probe,
            debug=config.debug,
            track_sites=config.track_sites,
        )
        ubatches = config.ubatches
        self.lanes = lanes = config.lanes
        governor.shape = (ubatches, lanes)
        governor.poison = config.poison
        self.slots = [
            Slot(governor, ub * lanes + lane, ub, lane)
            for ub in range(ubatches)
            for lane in range(lanes)
        ]
        for slot in self.slots:
            slot.siblings = tuple(s for s in self.slots if s.lane == slot.lane and s is not slot)
        governor.slots = self.slots

    def reserve(self, nbytes: int, lane: int | None) -> None:
        """Grow every slot (or ``lane``'s slots) to hold ``nbytes``; see
        :meth:`arena.Arena.reserve_bytes` for the errors."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ConfigError(f"nbytes must be an int >= 0, got {nbytes!r}")
        if nbytes > MAX_BYTES:
            raise SpecError(
                f"nbytes={nbytes} is more than the {MAX_BYTES} bytes a buffer can address"
            )
        if lane is not None:
            check_index("lane", lane, self.lanes)
        governor = self.governor
        resizes: list[Resize] = []
        try:
            with governor.mutex:
                governor.check_open()
                short = [
                    s
                    for s in self.slots
                    if s.buffer.capacity < nbytes and (lane is None or s.lane == lane)
                ]
                if short and governor.locked:
                    raise governor.locked_error(short[0], nbytes)
                for slot in short:
                    resize = slot.reserve(nbytes)
                    if resize is not None:
                        resizes.append(resize)
        finally:
            governor.announce("resize", resizes)

    def lock(self) -> None:
        """Bring each lane's slots to the largest of them, retiring (never releasing) the
        smaller buffers, then refuse growth; see :meth:`arena.Arena.lock`."""
        governor = self.governor
        resizes: list[Resize] = []
        try:
            with governor.mutex:
                governor.check_open()
                for lane in range(self.lanes):
                    group = [s for s in self.slots if s.lane == lane]
                    target = max(s.buffer.capacity for s in group)
                    for slot in group:
                        resize = slot.size_for_lock(target)
                        if resize is not None:
                            resizes.append(resize)
                governor.locked = True
        finally:
            governor.announce("resize", resizes)
        governor.announce("lock")

    def unlock(self) -> None:
        """Allow growth again."""
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            governor.locked = False
        governor.announce("unlock")

    def release_retired(self, include_captured: bool) -> int:
        """Release retired buffers (captured ones only if asked); return their bytes."""
        governor = self.governor
        with governor.mutex:
            blocks = [a for s in self.slots for a in s.take_retired(include_captured)]
            release_all(governor.ledger, blocks)
        return sum(a.nbytes for a in blocks)

    def close(self) -> None:
        """Mark the arena closed and release every block (once; later calls do nothing)."""
        governor = self.governor
        with governor.mutex:
            if governor.closed:
                return
            governor.closed = True
            blocks = [a for s in self.slots for a in s.take_blocks()]
            release_all(governor.ledger, blocks)
        governor.announce("close")

    def stats(self) -> ArenaStats:
        """A snapshot of every slot's figures and the arena's counters."""
        governor = self.governor
        with governor.mutex:
            slots = tuple(
                SlotStats(
                    s.ubatch,
                    s.lane,
                    s.buffer.capacity,
                    s.high_water,
                    s.growths,
                    s.calls,
                    s.persistent_bytes,
                    len(s.persistent) + len(s.resources),
                    s.retired_bytes,
                    len(s.retired),
                )
                for s in self.slots
            )
            ledger = governor.ledger
            caches = [c for s in self.slots for c in list(s.buffer.prepared.values())]
            return ArenaStats(
                device=str(governor.device),
                locked=governor.locked,
                closed=governor.closed,
                slots=slots,
                allocations=ledger.allocations,
                frees=ledger.frees,
                allocations_while_locked=governor.allocations_while_locked,
                calls=sum(s.calls for s in self.slots),
                call_sites=dict(governor.call_sites),
                live_blocks=ledger.live_blocks,
                live_bytes=ledger.live_bytes,
                cached_layouts=sum(len(c) for c in caches),
                cached_views=sum(len(e[1]) for c in caches for e in list(c.values())),
            )

    def memory_snapshot(self) -> dict[str, Any]:
        """See :meth:`arena.Arena.memory_snapshot`."""
        governor = self.governor
        with governor.mutex:
            return build_snapshot(
                self.slots,
                governor.device,
                governor.alignment,
                dict(governor.last_requests),
                list(self.events.events),
            )


def release_all(ledger: Ledger, blocks: list[Allocation]) -> None:
    """Release every block, even if releasing one raises (an interrupt included); the
    first such error propagates after all were attempted."""
    first: BaseException | None = None
    for allocation in blocks:
        try:
            ledger.release(allocation)
        except BaseException as exc:  # keep releasing: an interrupt must not leak the rest
            if first is None:
                first = exc
    if first is not None:
        raise first
