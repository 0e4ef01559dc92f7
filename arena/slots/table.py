"""The :class:`SlotTable`: every slot of one arena, and the operations on all of them.

:class:`~arena.Arena` composes one. Each operation takes the governor's mutex, re-checks
the arena's state under it, and announces its resizes and event once the mutex is
released (see docs/overview.md, "Threads and safety").

The table imports nothing above the slots layer, and none of the features' stores.
Features with state of their own take part through the lock hooks they register
(:mod:`arena.slots.hooks`): persistent buffers (:mod:`arena.slots.persistent`) and
workspace blocks (:mod:`arena.slots.workspaces`) give each slot a store and share a
lane's blocks at ``lock()``, step plans (:mod:`arena.planning.plan`) size each lane at
``lock()``, and the peaks of ``memory_stats()`` (:mod:`arena.kernels.memstats`) are
told when the figures change. The
readers of the table (``stats()``, ``memory_snapshot()``, step planning) live with their
features and take the table.
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
from arena.base.layout import MAX_BYTES, int_not_bool, plain_int_fix, str_bytes_fix
from arena.config import Settings
from arena.errors import ConfigError, SpecError
from arena.memory.ledger import Ledger
from arena.memory.sources import Allocation
from arena.slots.governor import Governor
from arena.slots.hooks import LockHook
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
    events : callable or None
        Writes the ledger's allocations and frees to the event log file (an
        :class:`~arena.observe.snapshot.EventLog`, called as the ledger's observer); None
        when no event log is asked for (the ledger keeps the recent events itself). Made
        by the arena itself, so that the warning of an unwritable file points at the
        arena's caller.
    """

    # Weak-referenceable: a profile recorder reads the slots' figures without keeping the
    # table (and its buffers) alive.
    __slots__ = (
        "__weakref__",
        "emptied",
        "governor",
        "hooks",
        "lanes",
        "listeners",
        "slots",
        "ubatches",
        "watched",
    )

    def __init__(
        self,
        config: Settings,
        alloc_context: Callable[[], AbstractContextManager[Any]] | None,
        events: Callable[[str, int, int, str], None] | None,
    ) -> None:
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
        #: Whether a resize is announced whatever the logging level: a listener waits for
        #: it, or debug mode logs it (kept by add_listener and remove_listener; see
        #: :meth:`announce` for when the request path may skip the call).
        self.watched = governor.debug
        #: The lock hooks features registered (:meth:`add_hook`), in order.
        self.hooks: tuple[LockHook, ...] = ()
        #: Whether close() emptied the slots (a close an interrupt split has not).
        self.emptied = False
        self.slots = [
            Slot(governor, ub * lanes + lane, ub, lane)
            for ub in range(ubatches)
            for lane in range(lanes)
        ]
        for slot in self.slots:
            slot.set_siblings([s for s in self.slots if s.lane == slot.lane and s is not slot])
        # Weak: the governor must not keep the table (and every buffer) in a cycle.
        governor.allocated_watch = weakref.WeakMethod(self.note_stat_peaks)

    def add_hook(self, hook: LockHook) -> None:
        """Register a feature's lock hook (see :mod:`arena.slots.hooks`); it gives each
        slot its store, if it keeps one."""
        with self.governor.mutex:
            hook.attach(self.slots)
            self.hooks = (*self.hooks, hook)  # installed in one store

    def note_stat_peaks(self) -> None:
        """Tell every hook that the figures are about to change (mutex held): the peaks
        of :meth:`arena.Arena.memory_stats` rise to the current figures."""
        for hook in self.hooks:
            hook.note_figures(self.governor, self.slots)

    def lane_estimate(self, group: Sequence[Slot]) -> int:
        """What the hooks would have each slot of the lane ``group`` hold at ``lock()``,
        changing nothing (mutex held)."""
        alignment = self.governor.alignment
        return max((h.lane_estimate(group, alignment) for h in self.hooks), default=0)

    def lock_additions(self) -> int:
        """Bytes :meth:`lock` would allocate now: each lane's scratch buffers brought to
        the largest, or to what the hooks need (the smaller ones are retired, not
        released; on a fixed-address source only the bytes committed in place), and what
        the hooks would share in the lane (the persistent buffers, library workspaces and
        Triton blocks siblings lack or hold smaller). Call with the mutex held."""
        slots = self.slots
        alignment = self.governor.alignment
        total = 0
        in_place = self.governor.fixed_address
        for lane in range(self.lanes):
            group = [s for s in slots if s.lane == lane]
            target = max(self.lane_estimate(group), *(s.buffer.capacity for s in group))
            total += sum(
                target - (s.buffer.capacity if in_place else 0)
                for s in group
                if s.buffer.capacity < target
            )
            total += sum(h.lane_additions(group, alignment) for h in self.hooks)
        return total

    def reserve(self, nbytes: int, lane: int | None) -> None:
        """Grow every slot (or ``lane``'s slots) to hold ``nbytes``; see
        :meth:`arena.Arena.reserve_bytes` for the errors."""
        if not int_not_bool(nbytes) or nbytes < 0:
            # A (shape, dtype) spec here is reserve()'s job: say so.
            hint = (
                "; to reserve room for views call reserve() with the same specs"
                if isinstance(nbytes, (tuple, list))  # a spec may be a 2-item list
                else ""
            )
            hint += plain_int_fix(nbytes) + str_bytes_fix(nbytes)
            raise ConfigError(f"nbytes must be an int >= 0, got {nbytes!r}{hint}")
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
                    raise short[0].locked_error(nbytes, reserving=True)
                for slot in self.slots:  # a floor: planning never shrinks a slot below it
                    if lane is None or slot.lane == lane:
                        slot.note_plain(nbytes)
                for slot in short:
                    resize = slot.reserve(nbytes)
                    if resize is not None:
                        resizes.append(resize)
        finally:
            self.announce("resize", resizes)

    def lock(self, in_place: bool = False, only_if: Callable[[], bool] | None = None) -> None:
        """Bring each lane's slots to the largest of them, retiring (never releasing) the
        smaller buffers, let the hooks give every slot of a lane the blocks any of them
        has (persistent buffers, library workspaces, Triton blocks), then refuse growth
        (``in_place``: grow at the same addresses instead); see :meth:`arena.Arena.lock`.
        ``only_if``: called under the mutex once the arena is checked open; False does
        nothing (a lock-state block's check that it still wants the lock, in one step
        with the lock for the other threads' blocks)."""
        governor = self.governor
        resizes: list[Resize] = []
        moved: list[Resize] = []  # slots whose captured buffer lock() replaced
        warnings: list[str] = []  # the hooks', given once the mutex is released
        try:
            with governor.mutex:
                governor.check_open()
                if only_if is not None and not only_if():
                    return
                # Sizing commits memory and copies persistent buffers: not into released
                # ranges. A lock with nothing to size (with ws.unlocked() ending) is fine.
                if governor.asleep and self.lock_additions():
                    governor.check_awake("lock()")
                if governor.max_bytes is not None:  # all or nothing: before any allocation
                    governor.check_budget(
                        self.lock_additions(),
                        "lock()'s sizing of every slot like its lane's largest",
                    )
                for lane in range(self.lanes):
                    group = [s for s in self.slots if s.lane == lane]
                    # The hooks fix their sizes for the lane now (steps not planned yet
                    # are planned, one plan per key for the lane).
                    need = max(
                        (
                            h.lane_need(group, governor.alignment, merge=not governor.locked)
                            for h in self.hooks
                        ),
                        default=0,
                    )
                    if governor.locked:  # lock() again: nothing may grow while locked
                        continue
                    for hook in self.hooks:
                        warnings += hook.lock_warnings(group)
                    target = max(need, *(s.buffer.capacity for s in group))
                    for slot in group:
                        captured = slot.buffer.captured
                        resize = slot.size_for_lock(target)
                        if resize is not None:
                            resizes.append(resize)
                            if captured:
                                moved.append(resize)
                    for hook in self.hooks:
                        hook.share_lane(group)
                governor.set_lock(True, in_place)
        finally:
            self.announce("resize", resizes)
        self.announce("lock")
        for text in warnings:
            warn_user(text)
        for slot, old_bytes, new_bytes in moved:
            warn_user(
                f"lock() brought slot {slot.describe()} from {old_bytes} to {new_bytes} bytes, "
                "its lane's largest, on a new buffer: a CUDA graph captured its old buffer, "
                "which is kept (retired) for the graph, but locked eager runs there get other "
                "pointers than the graph's. Warm every micro-batch of a lane up to the same "
                "sizes before capturing"
            )

    def unlock(self, only_if: Callable[[], bool] | None = None) -> None:
        """Allow growth again. ``only_if``: called under the mutex first; False does
        nothing (no closed check either: a lock-state block's check, see :meth:`lock`)."""
        governor = self.governor
        with governor.mutex:
            if only_if is not None and not only_if():
                return
            # The check and the unlock in one call with no call between them: an
            # interrupt cannot leave an open arena checked and still locked.
            if not governor.unlock_open():
                raise governor.closed_error()
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
            ledger = governor.ledger
            held = [a for s in self.slots for part in s.blocks() for a in part]
            blocks: list[Allocation] = []
            try:
                for slot in self.slots:
                    blocks += slot.take_retired(include_captured)
                ledger.release_each(blocks)
            except BaseException:
                # An interrupt may have taken blocks out of a slot that never reached the
                # list (at a take_retired's return) or the release: every block the slots
                # gave up and the ledger still counts goes back now.
                kept = {id(a) for s in self.slots for part in s.blocks() for a in part}
                live = {id(a) for a in ledger.blocks()}
                ledger.release_each([a for a in held if id(a) not in kept and id(a) in live])
                raise
        return sum(a.nbytes for a in blocks)

    def close(self, *, collected: bool = False) -> None:
        """Mark the arena closed and release every block (once; later calls do nothing);
        ``collected``: the arena was garbage collected (its fronts' errors say so)."""
        governor = self.governor
        ledger = governor.ledger
        with governor.mutex:
            if governor.closed and not ledger.live_blocks and self.emptied:
                return  # closed already (a close an interrupt split goes on below)
            try:
                if not governor.closed:
                    # Before the arena is marked closed: an interrupt leaves close() to be
                    # called again.
                    wake_for_close(governor)
                    try:
                        self.note_stat_peaks()  # the figures drop to 0 now
                    finally:  # closed before any block goes, whatever interrupts
                        governor.collected = collected
                        governor.closed = True
                blocks = [a for s in self.slots for a in s.take_blocks()]
                self.emptied = True
                ledger.release_each(blocks)
            finally:
                # Every block still counted live goes back too, so an interrupt anywhere
                # (in a holder's change, or in this close) leaks nothing.
                try:
                    if governor.closed:
                        ledger.release_live()
                finally:
                    try:
                        if governor.closed and not self.emptied:
                            # An interrupt came before the slots gave their blocks up
                            # (released just above): they let go, and stats() reads 0.
                            for slot in self.slots:
                                slot.take_blocks()
                            self.emptied = True
                    finally:
                        ledger.flush()
        self.announce("close")

    # ------------------------------------------------------------------ events
    def add_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Register ``listener``; see :meth:`arena.Arena.add_listener`."""
        if not callable(listener):
            raise ConfigError(f"listener must be callable, got {listener!r}")
        with self.governor.mutex:
            self.listeners.append(listener)
            self.watched = True

    def remove_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Unregister ``listener`` (ignored if it was never added)."""
        with self.governor.mutex:
            if listener in self.listeners:
                self.listeners.remove(listener)
                self.watched = bool(self.listeners) or self.governor.debug

    def sizes(self) -> tuple[int, ...]:
        """Every slot's capacity, ubatch-major."""
        return tuple(s.buffer.capacity for s in self.slots)

    def announce(self, kind: str, resizes: Sequence[Resize] = ()) -> None:
        """Log and emit ``resizes`` then one ``kind`` event (skipped when ``kind`` is
        ``"resize"``). Called with the mutex released, so a listener may use the arena.

        ``announce("resize", resizes)`` does nothing unless :attr:`watched` is set, the
        governor holds notes of locked growths (``governor.notes``) or the ``arena``
        logger logs ``DEBUG``: a request's growth tests these three and calls nothing
        when none holds (the request path's files, tests/views/test_request_path.py).
        """
        debug = self.governor.debug
        # The line is formatted only where it is logged, and the event made only where a
        # listener waits for it: a growth nobody watches calls nothing here.
        logged = debug or logger.isEnabledFor(logging.DEBUG)
        for slot, old, new in resizes:
            if logged:
                log_event(
                    f"resized slot {slot.describe()} from '{caller_info()}': "
                    # The bytes too: a small slot's growth read "0.00 MB -> 0.00 MB".
                    f"{format_mb(old)} -> {format_mb(new)} ({old} -> {new} bytes; "
                    f"{self.ubatches} ubatches x {self.lanes} lanes, total memory "
                    f"{format_mb(sum(self.sizes()))})",
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

    def announce_block(
        self, slot: Slot, kind: str, what: str, *, old: int, new: int, key: object
    ) -> None:
        """Log and emit (event ``kind``) the creation or growth of a store's block
        ``what`` (``"library workspace 'fi'"``) of ``slot`` (mutex released)."""
        log_event(
            f"{'grew' if old else 'created'} {what} of slot {slot.describe()} "
            f"from '{caller_info()}': {format_mb(old)} -> {format_mb(new)}",
            debug=self.governor.debug,
        )
        self._emit(kind, (slot.ubatch, slot.lane), old, new, key)

    def _emit(
        self, kind: str, slot: tuple[int, int] | None, old: int, new: int, key: object = None
    ) -> None:
        listeners = self.listeners
        if not listeners:
            return
        event = ArenaEvent(kind, caller_info(), slot, old, new, self.sizes(), key)
        for listener in list(listeners):
            listener(event)
