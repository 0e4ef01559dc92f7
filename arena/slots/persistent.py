"""One slot's persistent buffers and resources: state that outlives requests.

A persistent buffer has its own allocation, never part of the slot's scratch buffer, so
scratch growth never moves it; the same key returns the same memory until the arena
closes. A persistent resource is any object a factory builds once per key and slot.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from arena.base.events import caller_info
from arena.base.layout import Layout
from arena.errors import ArenaLockedError, PersistentMismatchError, SpecError
from arena.memory.sources import Allocation
from arena.slots.governor import Governor
from arena.slots.hooks import LockHook
from arena.slots.slot import Slot

__all__ = ["PersistentBuffer", "PersistentHook", "PersistentStore", "check_key", "check_new_key"]


@dataclass(slots=True)
class PersistentBuffer:
    """A persistent buffer: its own allocation, never part of the scratch buffer.

    Attributes
    ----------
    allocation : Allocation
        The block.
    layout : Layout
        The one view the buffer holds.
    zero_init : bool
        Whether it was zeroed when created (siblings created at lock() are too).
    views : dict
        Adapter space (``Adapter.space``: the framework's name, or torch's inference
        adapter's) -> the view handed out (the same object every time).
    """

    allocation: Allocation
    layout: Layout
    zero_init: bool = False
    views: dict[str, Any] = field(default_factory=dict)


class PersistentStore:
    """The persistent buffers and resources of one slot.

    Parameters
    ----------
    governor : Governor
        The arena's shared machinery (mutex, lock state, ledger).
    ubatch, lane : int
        Which slot the store belongs to, for messages.

    Every method that creates takes the governor's mutex and re-checks under it.
    """

    __slots__ = ("__weakref__", "_siblings", "buffers", "governor", "lane", "resources", "ubatch")

    def __init__(self, governor: Governor, ubatch: int, lane: int) -> None:
        self.governor = governor
        self.ubatch = ubatch
        self.lane = lane
        self.buffers: dict[Any, PersistentBuffer] = {}
        self.resources: dict[Any, Any] = {}
        # The stores of the other slots of this lane, for messages. Weak: stores of one
        # lane must not keep each other (and their blocks) alive in a reference cycle.
        self._siblings: tuple[weakref.ref[PersistentStore], ...] = ()

    def set_siblings(self, siblings: list[PersistentStore]) -> None:
        """The stores of the other slots of this store's lane."""
        self._siblings = tuple(weakref.ref(s) for s in siblings if s is not self)

    def describe(self) -> str:
        """``"(ubatch 0, lane 1)"``, for messages."""
        return f"(ubatch {self.ubatch}, lane {self.lane})"

    @property
    def nbytes(self) -> int:
        """Bytes held by persistent buffers."""
        return sum(p.allocation.nbytes for p in list(self.buffers.values()))

    @property
    def retired_bytes(self) -> int:
        """0: a persistent buffer is never replaced."""
        return 0

    @property
    def retired_count(self) -> int:
        """0: a persistent buffer is never replaced."""
        return 0

    @property
    def keys(self) -> int:
        """How many persistent keys (buffers and resources) exist."""
        return len(self.buffers) + len(self.resources)

    # ------------------------------------------------------------------ buffers
    def buffer(self, key: Any, layout: Layout, zero_init: bool) -> PersistentBuffer:
        """The persistent buffer for ``key``, created on first use.

        Raises
        ------
        PersistentMismatchError
            ``key`` exists with another shape or dtype.
        ArenaLockedError
            ``key`` is new and the arena is locked.
        ArenaClosedError
            The arena is closed.
        """
        check_key(key)
        self.governor.check_awake(f"persistent buffer {key!r}")
        entry = self.buffers.get(key)
        if entry is None:
            check_new_key(key)
            governor = self.governor
            with governor.mutex:
                governor.check_open()
                entry = self.buffers.get(key)
                if entry is None:
                    if governor.locked:
                        raise self.new_key_refused(key, "buffer")
                    return self.create(key, layout, zero_init)
        self._check_same(key, entry.layout, layout)
        return entry

    def create(self, key: Any, layout: Layout, zero_init: bool) -> PersistentBuffer:
        """Allocate the buffer of a new ``key``; the caller holds the mutex and checked
        that the arena is open and unlocked."""
        governor = self.governor
        mark = governor.ledger.allocations
        try:
            allocation = governor.allocate(
                max(layout.total, governor.alignment),
                f"persistent buffer {key!r} of slot {self.describe()}",
            )
            if zero_init:
                _zero(allocation.owner)
            entry = PersistentBuffer(allocation, layout, zero_init)
            self.buffers[key] = entry  # installed last: an interrupt before it reclaims
        except BaseException:
            self.buffers.pop(key, None)
            governor.ledger.reclaim(mark)  # even one allocated as allocate() returned
            raise
        return entry

    def _check_same(self, key: Any, existing: Layout, requested: Layout) -> None:
        old, new = existing.views[0], requested.views[0]
        if old.shape != new.shape or old.dtype != new.dtype:
            raise PersistentMismatchError(
                f"persistent buffer {key!r} in slot {self.describe()} was created as "
                f"shape {old.shape} {old.dtype.name}, now requested as {new.shape} "
                f"{new.dtype.name}; use another key for a different buffer",
                key=key,
                existing=(old.shape, old.dtype.name),
                requested=(new.shape, new.dtype.name),
            )

    # ------------------------------------------------------------------ resources
    def resource(self, key: Any, factory: Callable[[], Any]) -> Any:
        """The object ``factory()`` built for ``key`` in this slot (built once).

        Raises
        ------
        ArenaLockedError
            For a new key while locked.
        """
        check_key(key)
        try:
            return self.resources[key]
        except KeyError:
            pass
        check_new_key(key)
        if not callable(factory):
            raise SpecError(f"factory must be callable with no arguments, got {factory!r}")
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            if key in self.resources:
                return self.resources[key]
            if governor.locked:
                raise self.new_key_refused(key, "resource")
        # Built with no lock held: a factory may be slow, or use the arena from another
        # thread. If two threads build the same key at once, the first stored wins; one
        # that finishes after lock() returned is refused, as it would be had it started then.
        resource = factory()
        with governor.mutex:
            governor.check_open()
            if governor.locked and key not in self.resources:
                raise self.new_key_refused(key, "resource")
            return self.resources.setdefault(key, resource)

    # ------------------------------------------------------------------ lifetime
    def blocks(self) -> tuple[list[Allocation], list[Allocation]]:
        """``(kept, [])``: every persistent buffer's contents are kept by sleep(level=1)."""
        return [p.allocation for p in self.buffers.values()], []

    def take_retired(self, include_captured: bool) -> list[Allocation]:
        """Nothing: a persistent buffer is never retired."""
        return []

    def take_blocks(self) -> list[Allocation]:
        """Empty the store for close(): every block it holds, to be released."""
        blocks = [p.allocation for p in self.buffers.values()]
        self.buffers = {}
        self.resources = {}
        return blocks

    def new_key_refused(self, key: Any, what: str) -> ArenaLockedError:
        """The error for a new persistent key while locked; names the sibling slots that
        have the key (a micro-batch that did not run during warm-up)."""
        caller = caller_info()
        siblings = [s for s in (ref() for ref in self._siblings) if s is not None]
        owners = [
            s.describe()
            for s in siblings
            if key in (s.buffers if what == "buffer" else s.resources)
        ]
        if owners:
            fix = (
                f"slot {', '.join(owners)} created it during warm-up but this one never "
                f"ran then. Warm up every micro-batch before lock() (one step with each "
                f"ubatch bound: Arena.ubatch(i)), or create the {what} on each ubatch first"
            )
        else:
            fix = f"create persistent {what}s during warm-up, before lock()"
        return ArenaLockedError(
            f"arena is locked but '{caller}' asks for a new persistent {what} {key!r} in slot "
            f"{self.describe()}; {fix}",
            caller=caller,
            slot=(self.ubatch, self.lane),
            key=key,
        )


class PersistentHook(LockHook):
    """Persistent buffers' part in the slot table (a :class:`~arena.slots.hooks.LockHook`
    the facade registers with every slot table): each slot gets a
    :class:`PersistentStore`, and ``lock()`` gives every slot of a lane the persistent
    buffers any of them has."""

    __slots__ = ()

    def attach(self, slots: Sequence[Slot]) -> None:
        """A store for each slot; the stores of one lane know each other (for messages)."""
        stores = [PersistentStore(s.governor, s.ubatch, s.lane) for s in slots]
        for slot, store in zip(slots, stores, strict=True):
            store.set_siblings(
                [o for o, s in zip(stores, slots, strict=True) if s.lane == slot.lane]
            )
            slot.attach(store)

    def lane_additions(self, group: Sequence[Slot], alignment: int) -> int:
        """The bytes of the persistent buffers siblings lack."""
        stores = [s.store(PersistentStore) for s in group]
        sizes: dict[Any, int] = {}
        for store in stores:
            for key, entry in list(store.buffers.items()):
                sizes.setdefault(key, max(entry.layout.total, alignment))
        return sum(
            size for store in stores for key, size in sizes.items() if key not in store.buffers
        )

    def share_lane(self, group: Sequence[Slot]) -> None:
        """Give every slot of ``group`` (one lane) each persistent buffer one of them has:
        same key, shape, dtype and zeroing. A micro-batch that did not run during warm-up
        then finds its buffers after lock()."""
        stores = [s.store(PersistentStore) for s in group]
        for store in stores:
            for key, entry in list(store.buffers.items()):
                for sibling in stores:
                    if key not in sibling.buffers:
                        sibling.create(key, entry.layout, entry.zero_init)


def check_key(key: Any, what: str = "persistent key") -> None:
    """Refuse a key that cannot be looked up (on every call: a hash).

    Raises
    ------
    SpecError
        For an unhashable key, naming ``what``, the key and the fix.
    """
    try:
        hash(key)
    except TypeError:
        raise SpecError(
            f"{what} {key!r} ({type(key).__name__}) is not hashable; use a str, an int or a "
            "tuple of them"
        ) from None


def check_new_key(key: Any, what: str = "persistent key") -> None:
    """Refuse a key about to get an entry that is not equal to itself (a NaN, also inside
    a tuple or a frozenset): a new NaN object would never find that entry again, so every call would
    make a new one. Called on the miss path only (a key found is equal to itself).

    Raises
    ------
    SpecError
        Naming ``what``, the key and the fix.
    """
    if _unequal(key):
        raise SpecError(
            f"{what} {key!r} ({type(key).__name__}) is not equal to itself (a NaN); every "
            "call would make a new one. Use a str, an int or a tuple of them"
        )


def _unequal(key: Any) -> bool:
    """Whether ``key`` or an item of a tuple or frozenset key is not equal to itself (a
    NaN: both compare their items by identity first, so the key itself seems equal)."""
    if isinstance(key, (tuple, frozenset)):  # namedtuples too
        for item in key:  # noqa: SIM110 - any() over a generator can lose an interrupt
            if _unequal(item):
                return True
        return False
    try:
        return not bool(key == key)  # noqa: PLR0124 (the point: a NaN is not)
    except Exception:  # an __eq__ that cannot answer cannot find its entry again either
        return True


def _zero(owner: Any) -> None:
    fill = getattr(owner, "fill", None)
    if fill is not None:
        fill(0)  # NumPy and CuPy arrays
    else:
        owner.zero_()  # a torch tensor
