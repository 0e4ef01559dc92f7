"""One (micro-batch, lane) slot: its scratch buffer and the grow/retire protocol.

A slot's scratch memory is a :class:`Buffer`: an allocation with a fixed capacity and the
framework views prepared over it. Growth never changes a buffer; it replaces the slot's
buffer with a new one (one attribute store, under the arena's mutex). The hot path reads
``slot.buffer`` once and builds views from that buffer alone, so its views are always in
bounds of, and keep alive, the memory they were built on.

What happens to the buffer a growth replaces:

* released to the memory source *before* the new one is allocated, so the peak is the
  new size (plus whatever live views still hold of the old one);
* retired instead (kept until :meth:`~arena.Arena.close` or
  :meth:`~arena.Arena.release_retired`) when a request was served from it while a CUDA
  graph was being captured, or when :meth:`~arena.Arena.lock` resizes a sibling: a graph
  may read it, and ``lock()`` releases nothing.

If the new allocation fails, whatever the failure (out of memory, ``alloc_context``, an
interrupt), the slot gets a buffer of its old capacity back before the error propagates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import ArenaError, PersistentMismatchError, SpecError
from .governor import Governor, Resize
from .layout import Layout
from .sharing import SlotHolder
from .sources import Allocation

__all__ = ["Buffer", "PersistentBuffer", "Prepared", "Slot", "check_in_bounds", "check_key"]

#: A prepared request: [bytes it needs, its typed views, per-view metadata for the debug
#: guard, used since the cache's last sweep, its server] (see :mod:`arena.cache`).
Prepared = list[Any]


class Buffer:
    """A slot's scratch memory: one allocation of a fixed capacity, and views over it.

    Attributes
    ----------
    allocation : Allocation or None
        The block; None for a slot that holds no memory (capacity 0).
    capacity : int
        Bytes usable; never changes.
    wrappers : dict
        Framework name -> that framework's handle on the whole block (one import each);
        plan key -> the view sources of that plan.
    prepared : dict
        Front key -> {request signature: :data:`Prepared`}.
    captured : bool
        A request was served from this buffer while a CUDA graph was being captured.
    """

    __slots__ = ("allocation", "capacity", "captured", "poisoned_end", "prepared", "wrappers")

    def __init__(self, allocation: Allocation | None, capacity: int) -> None:
        self.allocation = allocation
        self.capacity = capacity
        self.wrappers: dict[Any, Any] = {}
        self.prepared: dict[str, dict[Any, Prepared]] = {}
        self.captured = False
        #: Poisoning: the end of the last request's bytes (see :mod:`arena.poison`).
        self.poisoned_end = 0


@dataclass(slots=True)
class PersistentBuffer:
    """A persistent buffer: its own allocation, never part of the scratch buffer."""

    allocation: Allocation
    layout: Layout
    views: dict[str, Any] = field(default_factory=dict)


class Slot:
    """State of one (ubatch, lane) slot and the protocol that grows it.

    Every method that changes state takes the governor's mutex and re-checks what it
    read before acting. Reading :attr:`buffer` needs no lock.
    """

    __slots__ = (
        "buffer",
        "calls",
        "governor",
        "growths",
        "high_water",
        "holder",
        "index",
        "lane",
        "pending",
        "persistent",
        "resources",
        "retired",
        "siblings",
        "ubatch",
    )

    def __init__(self, governor: Governor, index: int, ubatch: int, lane: int) -> None:
        self.governor = governor
        self.index = index
        self.ubatch = ubatch
        self.lane = lane
        self.buffer = Buffer(None, 0)
        # Bytes a sibling grew to: this slot grows to match at its own next call.
        self.pending = 0
        self.siblings: tuple[Slot, ...] = ()
        self.retired: list[Buffer] = []
        self.persistent: dict[Any, PersistentBuffer] = {}
        self.resources: dict[Any, Any] = {}
        self.calls = 0
        self.growths = 0
        self.high_water = 0
        self.holder = SlotHolder()

    def describe(self) -> str:
        """``"(ubatch 0, lane 1)"``, for messages."""
        return f"(ubatch {self.ubatch}, lane {self.lane})"

    @property
    def persistent_bytes(self) -> int:
        """Bytes held by persistent buffers."""
        return sum(p.allocation.nbytes for p in list(self.persistent.values()))

    @property
    def retired_bytes(self) -> int:
        """Bytes held by retired scratch buffers."""
        return sum(b.capacity for b in list(self.retired))

    # ------------------------------------------------------------------ requests
    def ensure(self, required: int) -> tuple[Buffer | None, list[Resize]]:
        """A buffer holding at least ``required`` bytes, growing the slot if needed.

        Returns ``(buffer, resizes)``: ``buffer`` is None when growth is needed while the
        arena is locked; ``resizes`` are to be announced once the mutex is released.
        A zero-byte request never grows the slot.

        Raises
        ------
        ArenaClosedError, GraphCaptureError, ArenaOutOfMemoryError
        """
        governor = self.governor
        resizes: list[Resize] = []
        with governor.mutex:
            governor.check_open()
            # No local reference to the current buffer across _grow(): it would keep the
            # old block alive while the new one is allocated (peak old + new).
            capacity = self.buffer.capacity
            target = max(required, self.pending) if required else 0
            if target <= capacity:
                if self.pending <= capacity:
                    self.pending = 0
            elif not governor.locked:
                resizes.append(self._grow(target))
            elif required > capacity:
                return None, resizes
            self.high_water = max(self.high_water, required)
            return self.buffer, resizes

    def note_high_water(self, required: int) -> None:
        """Raise the high-water mark to ``required`` (a request served without growth)."""
        with self.governor.mutex:
            self.high_water = max(self.high_water, required)

    def reserve(self, nbytes: int) -> Resize | None:
        """Grow to hold ``nbytes`` (mutex held by the caller, lock already checked)."""
        if self.buffer.capacity >= nbytes:
            return None
        return self._grow(nbytes)

    def _grow(self, target: int) -> Resize:
        """Replace the buffer by one holding ``target`` bytes; the mutex is held."""
        governor = self.governor
        capacity = governor.grown_size(target)
        governor.check_not_capturing(f"growing slot {self.describe()} to {capacity} bytes")
        old = self.buffer
        old_capacity = old.capacity
        kept = old if old.captured and old.allocation is not None else None
        self.buffer = Buffer(None, 0)  # concurrent readers take the slow path meanwhile
        try:
            if kept is not None:
                self.retired.append(kept)
            elif old.allocation is not None:
                governor.ledger.release(old.allocation)
            del old  # the old block goes back before the new one is asked for
            allocation = governor.allocate(
                capacity, f"the scratch buffer of slot {self.describe()}"
            )
        except BaseException as exc:
            self._restore(old_capacity, kept, exc)
            raise
        self._install(Buffer(allocation, capacity))
        return self, old_capacity, capacity

    def _restore(self, old_capacity: int, kept: Buffer | None, exc: BaseException) -> None:
        """After a failed growth, give the slot a buffer of its old capacity again."""
        if kept is not None:
            self.retired.remove(kept)
            self.buffer = kept
            return
        if old_capacity == 0:
            return
        governor = self.governor
        try:
            allocation = governor.ledger.allocate(
                old_capacity, f"the restored scratch buffer of slot {self.describe()}"
            )
        except BaseException:
            _note(
                exc,
                f"arena: slot {self.describe()} could not get its old {old_capacity}-byte "
                "buffer back either; it holds no memory now",
            )
            return
        self.buffer = Buffer(allocation, old_capacity)
        _note(exc, f"arena: slot {self.describe()} keeps a buffer of its old {old_capacity} bytes")

    def _install(self, buffer: Buffer) -> None:
        self.buffer = buffer
        self.growths += 1
        if self.pending <= buffer.capacity:
            self.pending = 0
        for sibling in self.siblings:
            if sibling.buffer.capacity < buffer.capacity:
                sibling.pending = max(sibling.pending, buffer.capacity)

    def size_for_lock(self, target: int) -> Resize | None:
        """Hold ``target`` bytes before the arena locks, releasing nothing.

        The new buffer is allocated first; the old one, if any, is retired (a CUDA graph
        captured before ``lock()`` may read it). The mutex is held by the caller.
        """
        old = self.buffer
        if old.capacity >= target:
            self.pending = 0
            return None
        governor = self.governor
        allocation = governor.allocate(target, f"the scratch buffer of slot {self.describe()}")
        if old.allocation is not None:
            self.retired.append(old)
        self._install(Buffer(allocation, target))
        return self, old.capacity, target

    def take_blocks(self) -> list[Allocation]:
        """Empty the slot for close(): every block it holds, to be released."""
        blocks = [b.allocation for b in (self.buffer, *self.retired) if b.allocation is not None]
        blocks.extend(p.allocation for p in self.persistent.values())
        self.buffer = Buffer(None, 0)
        self.retired = []
        self.persistent = {}
        self.resources = {}
        self.pending = 0
        return blocks

    def take_retired(self, include_captured: bool) -> list[Allocation]:
        """Remove retired buffers (captured ones only if asked); return their blocks."""
        keep = [b for b in self.retired if b.captured and not include_captured]
        gone = [b.allocation for b in self.retired if b not in keep and b.allocation is not None]
        self.retired = keep
        return gone

    # ------------------------------------------------------------------ persistent
    def persistent_buffer(self, key: Any, layout: Layout, zero_init: bool) -> PersistentBuffer:
        """The persistent buffer for ``key``, created on first use.

        Raises
        ------
        PersistentMismatchError
            ``key`` exists with another shape or dtype.
        ArenaLockedError
            ``key`` is new and the arena is locked.
        """
        check_key(key)
        entry = self.persistent.get(key)
        if entry is None:
            governor = self.governor
            with governor.mutex:
                governor.check_open()
                entry = self.persistent.get(key)
                if entry is None:
                    if governor.locked:
                        raise governor.new_key_refused(self, key, "buffer")
                    entry = self._create_persistent(key, layout, zero_init)
                    return entry
        self._check_same(key, entry.layout, layout)
        return entry

    def _create_persistent(self, key: Any, layout: Layout, zero_init: bool) -> PersistentBuffer:
        governor = self.governor
        allocation = governor.allocate(
            max(layout.total, governor.alignment),
            f"persistent buffer {key!r} of slot {self.describe()}",
        )
        try:
            if zero_init:
                _zero(allocation.owner)
            entry = PersistentBuffer(allocation, layout)
            self.persistent[key] = entry
        except BaseException:
            self.persistent.pop(key, None)
            governor.ledger.release(allocation)
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

    def resource(self, key: Any, factory: Any) -> Any:
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
        if not callable(factory):
            raise SpecError(f"factory must be callable with no arguments, got {factory!r}")
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            if key in self.resources:
                return self.resources[key]
            if governor.locked:
                raise governor.new_key_refused(self, key, "resource")
        # Built with no lock held: a factory may be slow, or use the arena from another
        # thread. If two threads build the same key at once, the first stored wins.
        resource = factory()
        with governor.mutex:
            governor.check_open()
            return self.resources.setdefault(key, resource)

    # ------------------------------------------------------------------ debug
    def enter(self) -> None:
        """Debug mode: mark the calling thread as using this slot (re-entrant).

        Raises
        ------
        SlotError
            Another thread is inside a request on this slot at the same time.
        """
        self.holder.enter(self)

    def leave(self) -> None:
        """Debug mode: the calling thread's request on this slot is done."""
        self.holder.leave()


def check_key(key: Any) -> None:
    """Refuse a persistent key that cannot be looked up.

    Raises
    ------
    SpecError
        For an unhashable key, naming it.
    """
    try:
        hash(key)
    except TypeError:
        raise SpecError(
            f"persistent key {key!r} ({type(key).__name__}) is not hashable; use a str, an "
            "int or a tuple of them"
        ) from None


def check_in_bounds(slot: Slot, buffer: Buffer, layout: Layout) -> None:
    """Refuse to build views past the end of ``buffer``: the core's last line of defence.

    Raises
    ------
    ArenaError
        Naming the slot, the layout's bytes and the buffer's capacity.
    """
    if layout.total > buffer.capacity and layout.total:
        raise ArenaError(
            f"refusing to build views of {layout.total} bytes over the {buffer.capacity}-byte "
            f"buffer of slot {slot.describe()}; this is a bug in arena, please report it"
        )


def _zero(owner: Any) -> None:
    fill = getattr(owner, "fill", None)
    if fill is not None:
        fill(0)  # NumPy and CuPy arrays
    else:
        owner.zero_()  # a torch tensor


def _note(exc: BaseException, text: str) -> None:
    add_note = getattr(exc, "add_note", None)  # Python >= 3.11
    if add_note is not None:
        add_note(text)
