"""What every slot of one arena shares: the mutex, lock and closed state, the counted memory
source, the growth policy's settings (the size a buffer grows to is the slot's own rule,
:meth:`~arena.slots.slot.Slot.grown_size`) and the capture probe.

The concurrency model (docs/overview.md, "Threads and safety"):

* ``mutex`` guards every change of slot state: growth, retiring, persistent buffers, lock,
  unlock, close. Every check-then-act re-checks under it.
* The hot path takes no lock. It reads ``slot.buffer`` once (one attribute load) and
  builds views from that :class:`~arena.slots.slot.Buffer` only; a buffer's capacity never
  changes, and views keep its memory alive, so a concurrent growth or close can never
  leave a view over memory smaller than its layout, or freed.
* ``locked`` and ``closed`` are written under the mutex; growth reads them under it, so
  nothing allocates after :meth:`~arena.Arena.lock` or :meth:`~arena.Arena.close` returns.

The governor knows nothing of slots: slots hold it, never the other way round.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from arena.base.events import caller_info, format_mb
from arena.errors import (
    ArenaAsleepError,
    ArenaClosedError,
    ArenaOutOfMemoryError,
    BlockActiveError,
    GraphCaptureError,
)
from arena.forks import after_fork
from arena.memory.devices import Device
from arena.memory.ledger import Ledger
from arena.memory.sources import Allocation, empty_allocation, fixed_address
from arena.uncopyable import refuse_copies

__all__ = ["Governor", "Lockable", "StateFlag", "StateSwitch", "address_bytes"]

_T = TypeVar("_T")
_P = ParamSpec("_P")
_R = TypeVar("_R")
#: The active lock-state blocks of an arena (see :attr:`Governor.blocks`).
_Blocks = tuple[tuple[object, bool, bool, int], ...]


class Governor:
    """The shared machinery of one arena's slots.

    Parameters
    ----------
    ledger : Ledger
        The counted memory source.
    alignment : int
        Byte alignment of every view offset.
    growth : "exact", "pow2" or int
        The growth policy.
    capture_probe : callable or None
        Returns True while memory work would land in a CUDA graph capture.
    debug : bool
        Log resizes and lock changes at INFO; check slot sharing between threads.
    max_bytes : int or None
        The cap on the bytes the arena holds (see :meth:`check_budget`); None for none.
    poison : bool
        Poisoning is on: slots keep the buffers a growth replaced while views of them may
        be stale, so their bytes are poisoned too (see :mod:`arena.base.poison`).
    """

    __slots__ = (
        "__weakref__",
        "_empty",
        "alignment",
        "allocated_watch",
        "allocations_while_locked",
        "asleep",
        "blocks",
        "capture_probe",
        "captures",
        "closed",
        "collected",
        "debug",
        "fixed_address",
        "growth",
        "in_place",
        "ledger",
        "locked",
        "locked_growths",
        "max_bytes",
        "mutex",
        "notes",
        "poison",
        "sleeper",
        "stat_base",
        "stat_peaks",
        "warned_sites",
    )

    def __init__(
        self,
        ledger: Ledger,
        *,
        alignment: int,
        growth: str | int,
        capture_probe: Callable[[], bool] | None,
        debug: bool,
        max_bytes: int | None = None,
        poison: bool = False,
    ) -> None:
        self.ledger = ledger
        self.poison = poison
        self.alignment = alignment
        self.growth = growth
        self.capture_probe = capture_probe
        self.debug = debug
        self.mutex = threading.RLock()
        after_fork(self, _renew_mutex)
        self.locked = False
        self.closed = False
        #: Whether the close was the arena's garbage collection (a front outlived it).
        self.collected = False
        self.allocations_while_locked = 0
        self.max_bytes = max_bytes
        #: How many times a block was seen serving a CUDA graph capture (any slot, any
        #: kind): a library workspace current at such a time may be read by the graph.
        self.captures = 0
        #: The peaks of the figures :mod:`arena.kernels.memstats` reads from the slots
        #: (``"allocated_bytes.all"`` -> bytes), and the accumulated figures at the last
        #: ``reset_accumulated_memory_stats()``.
        self.stat_peaks: dict[str, int] = {}
        self.stat_base: dict[str, int] = {}
        #: Raises :attr:`stat_peaks` to the current figures (set by the slot table, weakly
        #: held: the table owns the governor); called before the figures can fall.
        self.allocated_watch: Callable[[], Callable[[], object] | None] | None = None
        self._empty: Allocation | None = None
        #: ``lock(growth="in_place")``: a locked request that needs more commits more.
        self.in_place = False
        #: Whether the source keeps every address through growth, sleep and wake (the
        #: ledger's source is fixed for the arena's life: read once).
        self.fixed_address = fixed_address(ledger.source)
        #: Growths served while locked (in place), and the call sites warned of them.
        self.locked_growths = 0
        self.warned_sites: set[str] = set()
        #: Locked growths to announce once the mutex is released: (slot, old, new, site).
        self.notes: list[tuple[object, int, int, str]] = []
        #: 0 awake, else the level of ``sleep()``; ``sleeper`` holds what sleep() kept.
        self.asleep = 0
        self.sleeper: object = None
        #: The active ``ws.locked()`` / ``ws.unlocked()`` blocks, first entered first:
        #: (token, locked, in_place, thread). The state of the first is the one before
        #: them all; each other's is the state to restore when it ends while the one
        #: before it is still active (see :meth:`leave_block`). Replaced whole, never
        #: changed in place, so an interrupt finds the old tuple or the new one.
        self.blocks: _Blocks = ()

    @property
    def device(self) -> Device:
        """The arena's device."""
        return self.ledger.device

    def set_lock(self, locked: bool, in_place: bool = False) -> None:
        """Lock (``in_place``: growth while locked commits in place) or unlock; the mutex
        is held by the caller."""
        self.locked, self.in_place = locked, locked and in_place

    def unlock_open(self) -> bool:
        """Unlock unless the arena is closed (False then, nothing changed); the mutex is
        held by the caller. The check and the stores have no call between them, so an
        interrupt (a signal's handler runs at a call) finds the arena unlocked, or closed,
        or as it was, never checked open and left locked."""
        if self.closed:
            return False
        self.locked, self.in_place = False, False
        return True

    # ------------------------------------------------------------------ lock-state blocks
    def enter_block(self, token: object) -> None:
        """Record the block ``token`` active, after those active already, with the state
        it finds (one store: an interrupt finds it recorded or not). Its switch comes
        next, while :meth:`needs_switch` says so.

        Raises
        ------
        ArenaClosedError
            On a closed arena, as ``lock()`` and ``unlock()`` do.
        """
        with self.mutex:
            if self.closed:
                raise self.closed_error()
            block = (token, self.locked, self.in_place, threading.get_ident())
            self.blocks = (*self.blocks, block)

    def needs_switch(self, token: object, locked: bool, in_place: bool | None) -> bool:
        """Whether the block ``token`` is the last entered of the active ones and the
        open arena is not in the state ``locked`` (a lock with ``in_place``; None: either
        lock will do): the switch or restore it wants is still to do. Called under the
        mutex by the ``lock()`` or ``unlock()`` that makes it (their ``only_if``), so the
        check and the change are one step for the other threads' blocks: a block another
        thread entered meanwhile is never overruled."""
        blocks = self.blocks
        if self.closed or not blocks or blocks[-1][0] is not token:
            return False
        if not locked:
            return self.locked
        return not self.locked or (in_place is not None and self.in_place != in_place)

    def needs_entry_switch(self, token: object, locked: bool, in_place: bool | None) -> bool:
        """:meth:`needs_switch` for the switch a block makes on entry (called under the
        mutex by its ``lock()`` or ``unlock()``). A block entered by another thread
        between this block's record and its switch found the state before the switch,
        the one it would restore while this block is still active: that state becomes
        what this switch makes of it (the block entered after takes it as found, as it
        would have had this switch come first), and this block switches nothing (the
        state of the last entered holds)."""
        blocks = self.blocks
        at = _index(blocks, token)
        if self.closed or at < 0 or at + 1 == len(blocks):
            return self.needs_switch(token, locked, in_place)
        following, was_locked, was_in_place, thread = blocks[at + 1]
        if locked:
            kept = was_locked and (in_place is None or was_in_place == in_place)
        else:
            kept = not was_locked
        if not kept:
            handed = (following, locked, locked and bool(in_place), thread)
            self.blocks = (*blocks[: at + 1], handed, *blocks[at + 2 :])
        return False

    def leave_block(self, token: object) -> tuple[bool, bool] | None:
        """End the block ``token`` (nothing for one not active): the state it found
        comes back once the blocks entered after it ended too. None when the block is
        gone; else the state, as (locked, in_place), to bring the arena to first.

        A block that is not the last entered of the active ones hands the state it found
        to the next (which found this block's state, now owed to nobody) and changes
        nothing: the later block's state holds while it is active. The last is removed
        once the arena is in the state it found (or closed); until then this returns
        that state and keeps the block, and the caller brings the arena there
        (``lock(in_place)`` or ``unlock()``, while :meth:`needs_switch`) and calls again.
        """
        with self.mutex:
            blocks = self.blocks
            at = _index(blocks, token)
            if at < 0:
                return None
            _, locked, in_place, _ = blocks[at]
            last = at + 1 == len(blocks)
            if (
                not last
                or self.closed
                or (self.locked == locked and (not locked or self.in_place == in_place))
            ):
                # the next block, if any, takes the state it found
                self.blocks = _without(blocks, at)
                return None
            return locked, in_place

    def drop_block(self, token: object) -> None:
        """Forget the block ``token`` without restoring anything (its restore failed
        twice): the state stays, and the blocks after it inherit the state it found."""
        with self.mutex:
            blocks = self.blocks
            at = _index(blocks, token)
            if at >= 0:
                self.blocks = _without(blocks, at)

    def forget_other_threads(self) -> None:
        """In a child after ``os.fork()``: forget the blocks of the parent's other
        threads, which never end here (as :meth:`drop_block`: the state stays)."""
        thread = threading.get_ident()
        blocks = self.blocks
        at = len(blocks)
        while at:
            at -= 1
            if blocks[at][3] != thread:
                blocks = _without(blocks, at)
        self.blocks = blocks

    def note_locked_growth(self, slot: object, old: int, new: int) -> None:
        """Count a growth served while locked, to be announced (mutex held)."""
        self.locked_growths += 1
        self.notes.append((slot, old, new, caller_info()))

    def take_notes(self) -> list[tuple[object, int, int, str]]:
        """The locked growths not announced yet, each with whether its call site is new
        (warned once per site); the mutex is held by the caller."""
        notes, self.notes = self.notes, []
        fresh = []
        for slot, old, new, site in notes:
            first = site not in self.warned_sites
            self.warned_sites.add(site)
            fresh.append((slot, old, new, site if first else ""))
        return fresh

    def fall_asleep(self, level: int, record: object) -> None:
        """Mark the arena asleep at ``level`` with what sleep() kept (mutex held)."""
        self.sleeper = record
        self.asleep = level

    def awaken(self) -> None:
        """Mark the arena awake (mutex held)."""
        self.asleep = 0
        self.sleeper = None

    def check_awake(self, what: str) -> None:
        """Refuse ``what`` while the arena sleeps.

        Raises
        ------
        ArenaAsleepError
            Naming the call site, the level and the fix.
        """
        if self.asleep:
            site = caller_info()
            raise ArenaAsleepError(
                f"{what} from '{site}' on {self.device} while the arena is asleep (level "
                f"{self.asleep}): its memory is released. Call wake() first",
                caller=site,
            )

    # ------------------------------------------------------------------ memory
    def allocate(self, nbytes: int, what: str) -> Allocation:
        """A counted block; call with the mutex held, after checking ``locked``.

        Raises
        ------
        GraphCaptureError
            While a CUDA graph is being captured.
        ArenaOutOfMemoryError
            Past the cap (:meth:`check_budget`) or when the source is out of memory.
        """
        if self.locked:  # defensive: every caller refuses first, so this stays 0
            self.allocations_while_locked += 1
        if self.capture_probe is not None:  # the checks are called only where they can fail
            self.check_not_capturing(f"allocating {what}")
        if self.max_bytes is not None:
            self.check_budget(nbytes, what)
        return self.ledger.allocate(nbytes, what)

    def shrinking_to(self, capacity: int) -> int:
        """``capacity``, for a slot about to be fitted to it (possibly smaller): the
        allocated figure may fall, so its peak is recorded first, and never depends on
        whether ``memory_stats()`` was read in between. Call with the mutex held."""
        watch = self.allocated_watch
        note = None if watch is None else watch()
        if note is not None:
            note()
        return capacity

    def check_budget(self, nbytes: int, what: str, freed: int = 0) -> None:
        """Refuse an allocation of ``nbytes`` that would take the arena past ``max_bytes``.

        The arena's total is every block it holds (scratch, retired, persistent, library
        workspaces, Triton blocks): the ledger's live bytes. ``freed`` is what the caller
        releases before allocating (a growing scratch buffer's old block), so the check is
        on the total after the growth. Call with the mutex held.

        Raises
        ------
        ArenaOutOfMemoryError
            Naming the cap, the need, the current total and the call site.
        """
        cap = self.max_bytes
        if cap is None:
            return
        held = self.ledger.live_bytes
        after = held - freed + nbytes
        if after <= cap:
            return
        self.ledger.ooms += 1
        released = f", of which {freed} bytes are released first" if freed else ""
        raise ArenaOutOfMemoryError(
            f"arena cap max_bytes={cap} ({format_mb(cap)}) refuses {what} from "
            f"'{caller_info()}': it needs {nbytes} bytes ({format_mb(nbytes)}), the arena "
            f"holds {held} bytes ({format_mb(held)}){released}, so it would hold {after} "
            f"bytes. The arena keeps what it has. Raise max_bytes (or ARENA_MAX_BYTES), "
            "release retired buffers (release_retired()), or size the work smaller"
        )

    def empty_allocation(self) -> Allocation:
        """A zero-byte block on the arena's device that no memory source is asked for."""
        if self._empty is None:
            self._empty = empty_allocation(self.device)
        return self._empty

    def capturing(self) -> bool:
        """Whether the probe says a CUDA graph is being captured now (False without one)."""
        probe = self.capture_probe
        return probe is not None and bool(probe())

    def check_not_capturing(self, what: str) -> None:
        """Refuse memory work while a CUDA graph is being captured.

        Raises
        ------
        GraphCaptureError
            Naming the device and what was asked for.
        """
        if self.capturing():
            raise GraphCaptureError(
                f"{what} on {self.device} was requested while a CUDA graph is being "
                "captured; it would corrupt the capture. Run the same step once eagerly "
                "(warm-up) before capturing, or reserve() the size before capture"
            )

    # ------------------------------------------------------------------ errors
    def check_open(self) -> None:
        """Raise :class:`ArenaClosedError` if the arena is closed."""
        if self.closed:
            raise self.closed_error()

    def closed_error(self) -> ArenaClosedError:
        """The error for any request on a closed arena."""
        if self.collected:
            return ArenaClosedError(
                f"the Arena on {self.device} behind this front was garbage collected, which "
                "closed it and released its memory; views made before stay valid. Keep a "
                "reference to the Arena for as long as you use its fronts (ws = Arena(...); "
                "front = ws.torch, not Arena(...).torch)"
            )
        return ArenaClosedError(
            f"this arena on {self.device} is closed (close() or reset_arena() was called); "
            "views made before stay valid, but new requests need a new Arena or init_arena()"
        )


def _renew_mutex(governor: Governor) -> None:
    governor.mutex = threading.RLock()
    governor.forget_other_threads()


def _index(blocks: _Blocks, token: object) -> int:
    """Where the block ``token`` is in ``blocks``; -1 for none. A loop, not a generator:
    an interrupt in a generator being closed is printed and lost."""
    for at in range(len(blocks)):
        if blocks[at][0] is token:
            return at
    return -1


def _without(blocks: _Blocks, at: int) -> _Blocks:
    """``blocks`` without the one at ``at``; the one after it, if any, takes the state it
    found (it found the state of the one removed, which nobody restores now)."""
    if at + 1 == len(blocks):
        return blocks[:at]
    _, locked, in_place, _ = blocks[at]
    following, _, _, thread = blocks[at + 1]
    return (*blocks[:at], (following, locked, in_place, thread), *blocks[at + 2 :])


class StateFlag:
    """A yes/no state of an arena that reads the same as a property and as a call.

    ``if ws.is_locked:`` and vLLM's ``ws.is_locked()`` agree, so neither spelling can be
    misread (a bound method is always true). Compares equal to the bool it stands for.
    """

    __slots__ = ("_read",)

    def __init__(self, read: Callable[[], bool]) -> None:
        self._read = read

    def __bool__(self) -> bool:
        return self._read()

    def __call__(self) -> bool:
        return self._read()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (bool, StateFlag)):
            return bool(self) == bool(other)
        return NotImplemented

    # The state changes, so a hash would too: unhashable, like a mutable value.
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(bool(self))


class Lockable(Protocol):
    """What :class:`StateSwitch` locks and unlocks (an arena's slot table)."""

    governor: Governor

    def lock(self, in_place: bool = False, only_if: Callable[[], bool] | None = None) -> None:
        """Size every slot, then refuse growth (``in_place``: grow at the same addresses);
        nothing when ``only_if`` (called under the mutex) says False."""

    def unlock(self, only_if: Callable[[], bool] | None = None) -> None:
        """Allow growth again; nothing when ``only_if`` (called under the mutex) says
        False."""


class StateSwitch(Generic[_T]):
    """``ws.locked()`` and ``ws.unlocked()``: call it for a block (:class:`_Switched`)
    that puts the arena in one lock state inside and restores the previous one after,
    however the block ends (unless the arena was closed inside).

    Testing it as a bool (``if ws.locked:``, always true for a method) raises a
    TypeError that gives the spelling meant: ``ws.is_locked``.
    """

    __slots__ = ("_locked", "_owner", "_slots", "name")

    def __init__(self, name: str, owner: _T, locked: bool, slots: Lockable) -> None:
        self.name = name  # "locked" or "unlocked"
        self._owner = owner
        self._locked = locked
        self._slots = slots

    def _enter(self, token: object) -> None:
        """Record the block ``token`` active and bring the arena to the switch's state
        (a locked one: either lock will do), unless a block entered by another thread
        meanwhile is the last entered."""
        slots = self._slots
        governor = slots.governor
        governor.enter_block(token)
        self._put(token, self._locked, None, entry=True)

    def _restore(self, token: object) -> None:
        """End the block ``token`` (:meth:`Governor.leave_block`), bringing the arena
        first to the state it found where it is the last entered (a lock with the
        ``in_place`` saved, so a block whose body changed a lock in place to a plain one,
        or back, restores that too). Run again after an interrupt cut it short, it
        finishes what is left: the block stays recorded until the state is back, and
        unlocking is one check and one store (:meth:`Governor.unlock_open`), locking a
        whole ``lock()``."""
        governor = self._slots.governor
        while (state := governor.leave_block(token)) is not None:
            self._put(token, *state)

    def _put(self, token: object, locked: bool, in_place: bool | None, entry: bool = False) -> None:
        """``lock(in_place)`` or ``unlock()`` while the block ``token`` wants it
        (:meth:`Governor.needs_switch`, or :meth:`Governor.needs_entry_switch` for the
        switch on ``entry``, checked under the mutex by the call itself)."""
        slots = self._slots
        governor = slots.governor
        needs = governor.needs_entry_switch if entry else governor.needs_switch

        def wanted() -> bool:
            return needs(token, locked, in_place)

        try:
            if locked:
                slots.lock(bool(in_place), only_if=wanted)
            else:
                slots.unlock(only_if=wanted)
        except ArenaClosedError:  # closed meanwhile by another thread: nothing to switch
            return

    def __call__(self) -> _Switched[_T]:
        return _Switched(self)

    def __bool__(self) -> bool:
        raise TypeError(_not_a_state(f"ws.{self.name}", self.name))

    def __repr__(self) -> str:
        return f"<context manager factory ws.{self.name}()>"


def _not_a_state(spelled: str, name: str) -> str:
    """What testing ``ws.locked`` or ``ws.locked()`` as a bool says (both always true)."""
    return (
        f"{spelled} is a context manager (with ws.{name}(): ...), not a state; to test "
        "whether the arena is locked use ws.is_locked (or vLLM's ws.is_locked())"
    )


class _Switched(Generic[_T]):
    """What ``ws.locked()`` returns: a block that puts the arena in its switch's state
    and restores the one before at its exit, however the block ends.

    Reusable: entered again after it exited, it saves the state then and switches
    again, as a new ``ws.locked()`` would (as ``torch.no_grad()`` and arena's scopes and
    steps can be). A block stands for one saved state, so entering it again while it is
    active (nested in itself, or from another thread) raises :class:`BlockActiveError`:
    nest a new one, ``with ws.locked():``, which restores the state it found.
    It refuses copies and pickles (a copy of an active block would restore when
    dropped), and raises :class:`~arena.errors.ArenaClosedError` on a closed arena.
    ``@ws.locked()`` decorates a function with a new block at every call, so the
    function may call itself. Refuses to be tested as a bool (``if ws.locked():``,
    vLLM's ``is_locked()`` misspelt, would otherwise be always true and lock nothing).

    Overlapping blocks (threads; docs/overview.md, "Lock-state blocks"). The lock
    state is one per arena, and its blocks are counted there (:attr:`Governor.blocks`,
    under the mutex), not each on its own: a block that saved and restored the state by
    itself restored a state another thread's block had put, when blocks did not end in
    the reverse order of their entries (the arena left unlocked after two
    ``ws.unlocked()`` blocks on a locked arena). Now the state before the first of
    overlapping blocks comes back when the last of them ends, and while some are
    active the state is the one of the last entered (a block ending out of order
    changes nothing: it hands the state it found to the block entered after it). A
    block of the other kind entered while some are active nests, as it does in one
    thread (``with ws.locked():`` around a ``with ws.unlocked():`` re-warm-up): its
    state holds while it is active, and the state before it comes back after. It is
    not refused, because the blocks are ``lock()`` and ``unlock()`` in a ``with``, which
    any thread may call at any time, and a refusal could only depend on the
    interleaving (an error that comes some runs and not others); threads that need the
    arena locked while another unlocks it must agree on it (the lock state is not per
    thread).

    Interrupts (docs/overview.md, "Lock-state blocks"): the block is recorded with the
    state it finds before the switch starts, and the switch runs inside the ``try``
    that restores it, so an interrupt inside ``lock()`` restores it. The exit's first
    call is the restore, and the record goes only once the state is back
    (:meth:`Governor.leave_block`). Restoring an unlocked state is one check and one
    store (:meth:`Governor.unlock_open`: no call between them, so a signal's handler,
    which runs at a call, cannot split them); an interrupt that lands before them (at a
    call on the way there, or waiting for the mutex), or inside the ``lock()`` that restores
    a locked state, is followed by the restore once more, before the interrupt goes on
    out of the block. What is left: an interrupt at the very call of the exit (before
    its first line) leaves the block active, and it restores the state when it is
    dropped (for ``with ws.locked():``, once the interrupt's traceback is: see
    :class:`_Active`).
    """

    __slots__ = ("_switch", "_token")

    # A copy of an active block would be active too, and dropping it would restore the
    # state in the middle of the original's body.
    __reduce_ex__ = __copy__ = __deepcopy__ = refuse_copies(
        "a ws.locked() or ws.unlocked() block",
        "a block stands for one saved state to restore once; call ws.locked() "
        "(or ws.unlocked()) again for a new block",
    )

    def __init__(self, switch: StateSwitch[_T]) -> None:
        self._switch = switch
        #: While the block is active, the token that names its record in the
        #: governor's blocks (not the block itself, which an active record would keep
        #: alive: an active block dropped restores); None when it is not.
        self._token: object | None = None

    def __enter__(self) -> _T:
        switch = self._switch
        governor = switch._slots.governor
        token = object()
        # The check and the stores with no call between them: two threads (or a block
        # nested in itself) cannot both take the block. Active, it is of the class that
        # restores at its collection (see _Active).
        if governor.closed:  # as lock() and unlock() do
            raise governor.closed_error()
        if self._token is not None:
            raise BlockActiveError(
                f"this ws.{switch.name}() block is active already (entered and not exited): "
                "one block saves one state to restore; nest a new block instead: with "
                f"ws.{switch.name}(): (call ws.{switch.name}() again)"
            )
        self._token, self.__class__ = token, _Active
        try:
            switch._enter(token)
        except BaseException as error:  # an interrupt inside lock(): the state comes back
            self.__exit__(type(error), error, error.__traceback__)
            raise
        return switch._owner

    def __exit__(self, *exc_info: Any) -> None:
        # The restore is this method's first call: an interrupt before it can land only
        # at this method's own call (see the class doc).
        token = self._token
        if token is None:  # not entered, or restored already
            return
        switch = self._switch
        try:
            switch._restore(token)
        except BaseException:
            # Cut short (an interrupt on the way, or inside the lock() that restores a
            # locked state): once more, which finishes what is left, then the first
            # error goes on. A second error gives up: the block is forgotten (the
            # state stays) and inactive after.
            try:
                switch._restore(token)
            finally:
                try:
                    switch._slots.governor.drop_block(token)
                finally:
                    self._token, self.__class__ = None, _Switched
            raise
        self._token, self.__class__ = None, _Switched

    def __call__(self, function: Callable[_P, _R]) -> Callable[_P, _R]:
        """``@ws.locked()``: ``function`` runs in this state at every call, each in a new
        block (a recursive call nests a block of its own)."""
        switch = self._switch

        @functools.wraps(function)
        def switched(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            with _Switched(switch):
                return function(*args, **kwargs)

        return switched

    def __bool__(self) -> bool:
        name = self._switch.name
        raise TypeError(_not_a_state(f"ws.{name}()", name))

    def __repr__(self) -> str:
        return f"<context manager ws.{self._switch.name}()>"


class _Active(_Switched[_T]):
    """A :class:`_Switched` block while it is active: dropped so (entered by hand and
    never exited, or an interrupt at the very call of its exit), it restores the state
    it saved. Only an active block is of this class, so dropping the others runs no
    Python code, where an interrupt would be printed as "Exception ignored" and lost."""

    __slots__ = ()

    def __del__(self) -> None:
        self.__exit__(None, None, None)


def address_bytes(governor: Governor) -> int:
    """Bytes of address space the arena's blocks reserve: each block's whole range on a
    fixed-address source, else the live bytes. Call with the mutex held."""
    ledger = governor.ledger
    if not governor.fixed_address:
        return ledger.live_bytes
    source: Any = ledger.source
    return sum(source.reserved(a) for a in ledger.blocks())
