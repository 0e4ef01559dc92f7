"""The :class:`SlotTable`: every slot of one arena, and the operations on all of them.

:class:`~arena.Arena` composes one. Each operation takes the governor's mutex, re-checks
the arena's state under it, and announces its resizes and event once the mutex is
released (see docs/overview.md, "Threads and safety").
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from arena.base.events import (
    MB,
    ArenaEvent,
    caller_info,
    format_mb,
    log_event,
    logger,
    warn_user,
)
from arena.base.layout import MAX_BYTES
from arena.config import Settings
from arena.errors import ConfigError, SpecError
from arena.ints import int_not_bool
from arena.kernels.budget import address_bytes, lock_additions
from arena.kernels.memstats import note_peaks
from arena.kernels.workspaces import (
    LIBRARY,
    Workspace,
    share_library_workspaces,
    share_triton_blocks,
)
from arena.memory.ledger import Ledger
from arena.observe.snapshot import EventLog, build_snapshot
from arena.observe.stats import ArenaStats, SlotStats
from arena.planning.records import (
    fit_to_plans,
    plan_slot_steps,
    planned_need,
    restore_plans,
    share_plans,
    stored_plans,
)
from arena.slots.governor import Governor
from arena.slots.selector import check_index
from arena.slots.sleep import Sleeper, fall_asleep, wake_for_close, wake_up
from arena.slots.slot import Resize, Slot

__all__ = ["SlotTable"]


class SlotTable:
    """An arena's slots, ubatch-major (slot ``ubatch * lanes + lane``), the governor and
    event log they share, and the listeners told of every resize, lock, unlock and close.

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

    # Weak-referenceable: a profile recorder reads the slots' figures without keeping the
    # table (and its buffers) alive.
    __slots__ = ("__weakref__", "events", "governor", "lanes", "listeners", "slots", "ubatches")

    def __init__(
        self,
        config: Settings,
        alloc_context: Callable[[], AbstractContextManager[Any]] | None,
        events: EventLog,
    ) -> None:
        self.events = events
        self.governor = governor = Governor(
            Ledger(config.source, alloc_context, observer=events),
            alignment=config.alignment,
            growth=config.growth,
            capture_probe=config.capture_probe,
            debug=config.debug,
            max_bytes=config.max_bytes,
            poison=config.poison,
        )
        self.ubatches = ubatches = config.ubatches
        self.lanes = lanes = config.lanes
        self.listeners: list[Callable[[ArenaEvent], None]] = []
        self.slots = [
            Slot(governor, ub * lanes + lane, ub, lane)
            for ub in range(ubatches)
            for lane in range(lanes)
        ]
        for slot in self.slots:
            lane_slots = [s for s in self.slots if s.lane == slot.lane and s is not slot]
            slot.set_siblings(lane_slots)
            slot.persistent.set_siblings([s.persistent for s in lane_slots])
        # Weak: the governor must not keep the table (and every buffer) in a cycle.
        governor.allocated_watch = weakref.WeakMethod(self.note_stat_peaks)

    def note_stat_peaks(self) -> None:
        """Raise the peaks of :meth:`arena.Arena.memory_stats` to the current figures
        (mutex held)."""
        note_peaks(self.governor, self.slots)

    def reserve(self, nbytes: int, lane: int | None) -> None:
        """Grow every slot (or ``lane``'s slots) to hold ``nbytes``; see
        :meth:`arena.Arena.reserve_bytes` for the errors."""
        if not int_not_bool(nbytes) or nbytes < 0:
            raise ConfigError(f"nbytes must be an int >= 0, got {nbytes!r}")
        if nbytes > MAX_BYTES:
            raise SpecError(
                f"nbytes={nbytes} is more than the {MAX_BYTES} bytes a buffer can address"
            )
        if lane is not None:
            lane = check_index("lane", lane, self.lanes)
        governor = self.governor
        resizes: list[Resize] = []
        try:
            with governor.mutex:
                governor.check_open()
                # Sizing commits memory: not into ranges sleep() released.
                governor.check_awake(f"reserving {nbytes} bytes")
                short = [
                    s
                    for s in self.slots
                    if s.buffer.capacity < nbytes and (lane is None or s.lane == lane)
                ]
                if short and governor.locked:
                    raise short[0].locked_error(nbytes)
                for slot in self.slots:  # a floor: planning never shrinks a slot below it
                    if lane is None or slot.lane == lane:
                        slot.plain_high = max(slot.plain_high, nbytes)
                for slot in short:
                    resize = slot.reserve(nbytes)
                    if resize is not None:
                        resizes.append(resize)
        finally:
            self.announce("resize", resizes)

    def presize_workspace(self, ubatch: int, lane: int, kind: str, key: Any, nbytes: int) -> None:
        """From a profile: see :meth:`arena.observe.profile.ProfiledSlots.presize_workspace`."""
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            self.slots[ubatch * self.lanes + lane].workspaces.presize(kind, key, nbytes)

    def restore_step_plans(self, plans: list[list[dict[str, Any]]]) -> list[tuple[Any, ...]]:
        """From a profile: see :meth:`arena.observe.profile.ProfiledSlots.restore_step_plans`."""
        governor = self.governor
        refused = []
        with governor.mutex:
            governor.check_open()
            for slot, entries in zip(self.slots, plans, strict=True):
                capacity = slot.buffer.capacity
                refused += [
                    ((slot.ubatch, slot.lane), key, need, capacity)
                    for key, need in restore_plans(slot.steps, entries, capacity)
                ]
        return refused

    def lock(self, in_place: bool = False) -> None:
        """Bring each lane's slots to the largest of them, retiring (never releasing) the
        smaller buffers, give every slot of a lane the persistent buffers any of them has,
        then refuse growth (``in_place``: grow at the same addresses instead); see
        :meth:`arena.Arena.lock`."""
        governor = self.governor
        resizes: list[Resize] = []
        moved: list[Resize] = []  # slots whose captured buffer lock() replaced
        short: list[tuple[Slot, Any, int, int]] = []  # captured plans smaller than a sibling's
        try:
            with governor.mutex:
                governor.check_open()
                # Sizing commits memory and copies persistent buffers: not into released
                # ranges. A lock with nothing to size (with ws.unlocked() ending) is fine.
                if governor.asleep and lock_additions(self.slots, self.lanes, governor.alignment):
                    governor.check_awake("lock()")
                if governor.max_bytes is not None:  # all or nothing: before any allocation
                    governor.check_budget(
                        lock_additions(self.slots, self.lanes, governor.alignment),
                        "lock()'s sizing of every slot like its lane's largest",
                    )
                for lane in range(self.lanes):
                    group = [s for s in self.slots if s.lane == lane]
                    # Steps not planned yet are planned now, one plan per key for the
                    # lane: sizes are fixed from here.
                    need = share_plans(
                        [s.steps for s in group],
                        governor.alignment,
                        merge=not governor.locked,
                        frozen=[s.buffer.captured for s in group],
                    )
                    if governor.locked:  # lock() again: nothing may grow while locked
                        continue
                    short += _plans_kept_short(group)
                    target = max(need, *(s.buffer.capacity for s in group))
                    for slot in group:
                        captured = slot.buffer.captured
                        resize = slot.size_for_lock(target)
                        if resize is not None:
                            resizes.append(resize)
                            if captured:
                                moved.append(resize)
                    _share_persistent_buffers(group)
                    share_library_workspaces([s.workspaces for s in group])
                    share_triton_blocks([s.workspaces for s in group])
                governor.set_lock(True, in_place)
        finally:
            self.announce("resize", resizes)
        self.announce("lock")
        for slot, key, own, largest in short:
            warn_user(
                f"lock() left step {key!r} of slot {slot.describe()} on its own plan "
                f"({own} bytes; a sibling micro-batch's needs {largest}): a CUDA graph "
                "captured its buffer, so its plan may not move, and a run of the sibling's "
                "sizes there raises ArenaLockedError. Warm every micro-batch of a lane up "
                "to the same sizes before capturing"
            )
        for slot, old_bytes, new_bytes in moved:
            warn_user(
                f"lock() brought slot {slot.describe()} from {old_bytes} to {new_bytes} bytes, "
                "its lane's largest, on a new buffer: a CUDA graph captured its old buffer, "
                "which is kept (retired) for the graph, but locked eager runs there get other "
                "pointers than the graph's. Warm every micro-batch of a lane up to the same "
                "sizes before capturing"
            )

    def plan_steps(self, time_limit: float | None = None) -> dict[Any, int]:
        """Plan every recorded step not planned yet (each searching up to ``time_limit``
        seconds) and size slots to their plans where allowed; see
        :meth:`arena.Arena.plan_steps`."""
        governor = self.governor
        planned: dict[Any, int] = {}
        resizes: list[Resize] = []
        try:
            for slot in self.slots:
                with governor.mutex:
                    governor.check_open()
                    governor.check_awake("plan_steps()")  # sizing commits memory
                    plan_slot_steps(slot, governor.alignment, time_limit)
                    for key, book in list(slot.steps.items()):
                        if book.planned:
                            planned[key] = max(planned.get(key, 0), book.total)
                resizes.extend(fit_to_plans(slot, governor.alignment))
        finally:
            self.announce("resize", resizes)
        return planned

    def unlock(self) -> None:
        """Allow growth again."""
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            governor.set_lock(False)
        self.announce("unlock")

    def sleep(self, level: int) -> None:
        """Release the memory of every block, keeping the addresses; see
        :meth:`arena.Arena.sleep`."""
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            if governor.asleep:
                return
            sleeper = fall_asleep(governor, self.slots, level)
        self._emit("sleep", None, sleeper.nbytes, 0)

    def wake(self, poison: bool) -> None:
        """Commit every block again at its addresses; see :meth:`arena.Arena.wake`."""
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            sleeper = governor.sleeper
            if not isinstance(sleeper, Sleeper):
                return
            wake_up(governor, self.slots, sleeper, poison)
        self._emit("wake", None, 0, sleeper.nbytes)

    def release_retired(self, include_captured: bool) -> int:
        """Release retired buffers (captured ones only if asked); return their bytes."""
        governor = self.governor
        with governor.mutex:
            # wake() commits every block sleep() released again: none may go meanwhile.
            governor.check_awake("release_retired()")
            blocks = [a for s in self.slots for a in s.take_retired(include_captured)]
            governor.ledger.release_each(blocks)
        return sum(a.nbytes for a in blocks)

    def close(self, *, collected: bool = False) -> None:
        """Mark the arena closed and release every block (once; later calls do nothing);
        ``collected``: the arena was garbage collected (its fronts' errors say so)."""
        governor = self.governor
        ledger = governor.ledger
        with governor.mutex:
            if governor.closed and not ledger.live_blocks:
                return  # closed already (a close an interrupt split goes on below)
            try:
                if not governor.closed:
                    # Before the arena is marked closed: an interrupt leaves close() to be
                    # called again.
                    wake_for_close(governor)
                    try:
                        note_peaks(governor, self.slots)  # the figures drop to 0 now
                    finally:  # closed before any block goes, whatever interrupts
                        governor.collected = collected
                        governor.closed = True
                blocks = [a for s in self.slots for a in s.take_blocks()]
                ledger.release_each(blocks)
            finally:
                # Every block still counted live goes back too, so an interrupt anywhere
                # (in a holder's change, or in this close) leaks nothing.
                try:
                    if governor.closed:
                        ledger.release_live()
                finally:
                    ledger.flush()
        self.announce("close")

    def stats(self, call_sites: dict[str, int]) -> ArenaStats:
        """A snapshot of every slot's figures and the arena's counters, with the peak bytes
        per call site the arena's request log recorded."""
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
                    s.persistent.keys,
                    s.retired_bytes,
                    s.retired_count,
                    s.load,
                    s.workspaces.library_bytes,
                    len(s.workspaces.library),
                    s.workspaces.triton_bytes,
                    len(s.workspaces.triton),
                )
                for s in self.slots
            )
            ledger = governor.ledger
            # A front's cache is {specs: Prepared}; a step replay's, one such dict per request.
            caches = [
                inner
                for s in self.slots
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
                calls=sum(s.calls for s in self.slots),
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

    def memory_snapshot(self, last_requests: dict[int, tuple[str, Any]]) -> dict[str, Any]:
        """See :meth:`arena.Arena.memory_snapshot`; ``last_requests`` maps a slot index to
        the call site and specs of its last request recorded while unlocked."""
        governor = self.governor
        with governor.mutex:
            return build_snapshot(
                self.slots,
                governor.device,
                governor.alignment,
                last_requests,
                list(self.events.events),
            )

    # ------------------------------------------------------------------ events
    def add_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Register ``listener``; see :meth:`arena.Arena.add_listener`."""
        if not callable(listener):
            raise ConfigError(f"listener must be callable, got {listener!r}")
        with self.governor.mutex:
            self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Unregister ``listener`` (ignored if it was never added)."""
        with self.governor.mutex:
            if listener in self.listeners:
                self.listeners.remove(listener)

    def sizes(self) -> tuple[int, ...]:
        """Every slot's capacity, ubatch-major."""
        return tuple(s.buffer.capacity for s in self.slots)

    def plan_figures(self) -> tuple[tuple[int, int], ...]:
        """Per slot, ubatch-major: ``(LOAD, planned need)``; see
        :meth:`arena.observe.profile.ProfiledSlots.plan_figures`."""
        with self.governor.mutex:
            return tuple((s.load, planned_need(s)) for s in self.slots)

    def step_plans(self) -> tuple[list[dict[str, Any]], ...]:
        """Per slot, ubatch-major: its step plans as profile entries; see
        :meth:`arena.observe.profile.ProfiledSlots.step_plans`."""
        with self.governor.mutex:
            return tuple(stored_plans(s.steps) for s in self.slots)

    def announce(self, kind: str, resizes: Sequence[Resize] = ()) -> None:
        """Log and emit ``resizes`` then one ``kind`` event (skipped when ``kind`` is
        ``"resize"``). Called with the mutex released, so a listener may use the arena."""
        debug = self.governor.debug
        # The line is formatted only where it is logged, and the event made only where a
        # listener waits for it: a growth nobody watches calls nothing here.
        logged = debug or logger.isEnabledFor(logging.DEBUG)
        for slot, old, new in resizes:
            if logged:
                log_event(
                    f"resized slot {slot.describe()} from '{caller_info()}': "
                    f"{format_mb(old)} -> {format_mb(new)} ({self.ubatches} ubatches x "
                    f"{self.lanes} lanes, total memory {format_mb(sum(self.sizes()))})",
                    debug=debug,
                )
            if self.listeners:
                self._emit("resize", (slot.ubatch, slot.lane), old, new)
        if self.governor.notes:
            self._announce_locked_growths()
        if kind != "resize":
            if kind in ("lock", "unlock"):
                sizes = [round(s / MB, 2) for s in self.sizes()]
                log_event(f"{kind}ed. Current sizes (MB): {sizes}", debug=debug)
            else:
                log_event(f"{kind}d arena on {self.governor.device}", debug=debug)
            self._emit(kind, None, 0, 0)

    def _announce_locked_growths(self) -> None:
        """Warn (once per call site) and emit a ``"locked_growth"`` event for each growth
        served in place while locked (mutex released)."""
        with self.governor.mutex:
            notes = self.governor.take_notes()
        for slot, old, new, first_site in notes:
            assert isinstance(slot, Slot)
            if first_site:
                warn_user(
                    f"arena is locked with growth='in_place' and the request from "
                    f"'{first_site}' needed {new} bytes ({format_mb(new)}) in slot "
                    f"{slot.describe()}, which held {old}: {new - old} bytes were committed "
                    "at the same addresses (outside a capture). Warm this size up before "
                    "lock() to avoid it (warned once per call site)"
                )
            self._emit("locked_growth", (slot.ubatch, slot.lane), old, new)

    def announce_workspace(self, slot: Slot, entry: Workspace, old: int) -> None:
        """Log and emit the creation or growth of a workspace block (mutex released)."""
        kind = "workspace" if entry.kind == LIBRARY else "triton"
        log_event(
            f"{'grew' if old else 'created'} {entry.describe()} of slot {slot.describe()} "
            f"from '{caller_info()}': {format_mb(old)} -> {format_mb(entry.nbytes)}",
            debug=self.governor.debug,
        )
        self._emit(kind, (slot.ubatch, slot.lane), old, entry.nbytes, entry.key)

    def _emit(
        self, kind: str, slot: tuple[int, int] | None, old: int, new: int, key: object = None
    ) -> None:
        listeners = self.listeners
        if not listeners:
            return
        event = ArenaEvent(kind, caller_info(), slot, old, new, self.sizes(), key)
        for listener in list(listeners):
            listener(event)


def _plans_kept_short(group: list[Slot]) -> list[tuple[Slot, Any, int, int]]:
    """(slot, key, its plan's bytes, the largest sibling's) for each planned step of a
    slot whose buffer a CUDA graph captured that a sibling's plan outgrows: lock() keeps
    such plans as they are."""
    short = []
    for slot in group:
        if not slot.buffer.captured:
            continue
        for key, book in list(slot.steps.items()):
            totals = [s.steps[key].total for s in group if key in s.steps and s.steps[key].planned]
            if book.planned and max(totals, default=0) > book.total:
                short.append((slot, key, book.total, max(totals)))
    return short


def _share_persistent_buffers(group: list[Slot]) -> None:
    """Give every slot of ``group`` (one lane) each persistent buffer one of them has: same
    key, shape, dtype and zeroing. A micro-batch that did not run during warm-up then finds
    its buffers after lock(). The mutex is held by the caller."""
    for slot in group:
        for key, entry in list(slot.persistent.buffers.items()):
            for sibling in group:
                if key not in sibling.persistent.buffers:
                    sibling.persistent.create(key, entry.layout, entry.zero_init)
