"""One slot's workspace blocks: library workspaces and Triton blocks.

A workspace is a keyed block of its own, never part of the slot's scratch buffer, that
keeps its address until it must grow (like a persistent buffer, but growable). Two kinds
share the machinery:

* ``"library"``: :meth:`arena.Arena.get_library_workspace`, keyed by the caller's key; its
  contents are copied into the larger block when it grows;
* ``"triton"``: :meth:`arena.Arena.triton_allocator`, keyed by the stream Triton passes;
  scratch, so nothing is copied.

Growth happens under the arena's mutex, through the governor (counted, capped, refused
while locked or capturing). The new block is allocated first, the old contents copied,
and only then is the new block installed and the old one let go: a failure anywhere
before the install (out of memory, the cap, an interrupt during the copy) releases the new
block and leaves the old workspace as it was. The old block follows the scratch rule:
retired (kept until :meth:`~arena.Arena.close` or ``release_retired(include_captured=True)``)
when a CUDA graph may read it, released otherwise; views still held keep its memory alive.

A Triton block is known to serve a capture when the allocator is called during one. A
library holds its workspace across calls, so the arena cannot see every capture that uses
it: a library workspace counts as captured when it was handed out during a capture, or
when any capture was seen by the arena (a request, a Triton allocation, a workspace call)
while it was current.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from arena.base.events import caller_info, format_mb
from arena.errors import ArenaLockedError
from arena.memory.sources import Allocation
from arena.slots.governor import Governor
from arena.slots.hooks import LockHook
from arena.slots.slot import Slot

__all__ = [
    "LIBRARY",
    "TRITON",
    "Workspace",
    "WorkspaceHook",
    "WorkspaceStore",
    "fixed_block",
    "missing_library_bytes",
    "missing_triton_bytes",
    "presize_workspace",
    "share_library_workspaces",
    "share_triton_blocks",
]

LIBRARY = "library"
TRITON = "triton"


class Workspace:
    """One workspace block.

    Attributes
    ----------
    kind : str
        ``"library"`` or ``"triton"``.
    key : hashable
        The library's key, or the Triton stream.
    allocation : Allocation
        The block.
    nbytes : int
        Bytes usable (the block's size).
    captured : bool
        Served while a CUDA graph was being captured.
    epoch : int
        The governor's capture count when the block was installed.
    views : dict
        Library: framework -> the view handed out. Triton: (size, alignment) -> tensor.
    on_grow : callable or None
        Library: called with the new view after a growth.
    zero_init : bool
        Library: zeroed when made (its first user, or a growth, asked for zeros).
    handed : bool
        Library: handed out at least once (its contents belong to a library now).
    untold : bool
        Library: replaced an older block and ``on_grow`` has not returned for it yet (it
        raised, or none was given): the next call tells it.
    lent : bool
        Triton: made by ``lock()`` for a slot that never used this stream; a new stream of
        that slot may take it over while locked.
    """

    __slots__ = (
        "allocation",
        "captured",
        "epoch",
        "handed",
        "key",
        "kind",
        "lent",
        "nbytes",
        "on_grow",
        "untold",
        "views",
        "zero_init",
    )

    def __init__(self, kind: str, key: Any, allocation: Allocation, epoch: int) -> None:
        self.kind = kind
        self.key = key
        self.allocation = allocation
        self.nbytes = allocation.nbytes
        self.captured = False
        self.epoch = epoch
        self.views: dict[Any, Any] = {}
        self.on_grow: Callable[[Any], Any] | None = None
        self.zero_init = False
        self.handed = False
        self.untold = False
        self.lent = False

    def describe(self) -> str:
        """``"library workspace 'flashinfer'"`` or ``"Triton block for stream 7"``."""
        if self.kind == TRITON:
            return f"Triton block for stream {self.key!r}"
        return f"library workspace {self.key!r}"


class WorkspaceStore:
    """The workspace blocks of one slot.

    Parameters
    ----------
    governor : Governor
        The arena's shared machinery (mutex, lock state, ledger, cap).
    ubatch, lane : int
        Which slot the store belongs to, for messages.

    Reads of :attr:`library` and :attr:`triton` take no lock (an entry never changes size;
    growth replaces it); every change happens under the governor's mutex.
    """

    __slots__ = ("governor", "lane", "library", "retired", "triton", "triton_hint", "ubatch")

    def __init__(self, governor: Governor, ubatch: int, lane: int) -> None:
        self.governor = governor
        self.ubatch = ubatch
        self.lane = lane
        self.library: dict[Any, Workspace] = {}
        self.triton: dict[Any, Workspace] = {}
        self.retired: list[Workspace] = []
        #: Bytes a profile recorded for this slot's Triton blocks: a new block gets at least
        #: this, so a restarted engine does not grow them again.
        self.triton_hint = 0

    def describe(self) -> str:
        """``"(ubatch 0, lane 1)"``, for messages."""
        return f"(ubatch {self.ubatch}, lane {self.lane})"

    def entries(self, kind: str) -> dict[Any, Workspace]:
        """The current blocks of ``kind``, by key."""
        return self.triton if kind == TRITON else self.library

    @property
    def library_bytes(self) -> int:
        """Bytes of the current library workspaces."""
        return sum(w.nbytes for w in list(self.library.values()))

    @property
    def triton_bytes(self) -> int:
        """Bytes of the current Triton blocks."""
        return sum(w.nbytes for w in list(self.triton.values()))

    @property
    def retired_bytes(self) -> int:
        """Bytes of replaced blocks kept because a CUDA graph may read them."""
        return sum(w.nbytes for w in list(self.retired))

    @property
    def retired_count(self) -> int:
        """How many replaced blocks are kept."""
        return len(self.retired)

    # ------------------------------------------------------------------ growth
    def grow(
        self,
        kind: str,
        key: Any,
        need: int,
        size: int,
        *,
        copy: bool,
        zero_init: bool = False,
        retire: bool = False,
    ) -> tuple[Workspace, Workspace | None, bool]:
        """The block of ``key``, replaced by one of ``size`` bytes unless it holds ``need``.

        Returns ``(entry, old, grew)``: ``old`` is the block replaced (None for a new key
        or none replaced), ``grew`` whether anything was allocated. Takes the mutex. With
        ``zero_init`` (or an old block made with it) the new block is zeroed instead of
        receiving the old contents. ``retire``: the old block is retired, never released
        (``lock()`` releases nothing). A new Triton stream of a locked slot takes over a
        block ``lock()`` lent the slot (made for a sibling's stream it never used).

        Raises
        ------
        ArenaClosedError, ArenaLockedError, GraphCaptureError, ArenaOutOfMemoryError
            The workspace is left as it was.
        """
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            governor.check_awake(f"a {kind} workspace {key!r} in slot {self.describe()}")
            entries = self.entries(kind)
            old = entries.get(key)
            if old is not None and old.nbytes >= need:  # another thread grew it meanwhile
                return old, None, False
            if governor.locked:
                lent = self._lent(need) if kind == TRITON and old is None else None
                if lent is None:
                    raise self.locked_error(kind, key, need, old)
                # Lent to a stream this slot never used: now key's. One assignment, so an
                # interrupt cannot leave the block out of the store (close() would miss it).
                moved = {k: v for k, v in entries.items() if v is not lent}
                moved[key] = lent
                self.triton = moved
                lent.key, lent.lent = key, False
                return lent, None, False
            what = (
                f"{'a new' if old is None else 'a larger'} "
                + (
                    f"Triton block for stream {key!r}"
                    if kind == TRITON
                    else f"library workspace {key!r}"
                )
                + f" of {format_mb(size)} ({size} bytes) in slot {self.describe()}"
            )
            mark = governor.ledger.allocations
            try:
                allocation = governor.allocate(size, what)
                entry = Workspace(kind, key, allocation, governor.captures)
                entry.zero_init = zero_init or (old is not None and old.zero_init)
                if old is not None:
                    entry.on_grow = old.on_grow
                    entry.untold = True
                if entry.zero_init:
                    _zero(allocation.owner, allocation.nbytes)
                elif copy and old is not None:
                    _copy(allocation.owner, old.allocation.owner, old.nbytes)
                entries[key] = entry
            except BaseException:
                if old is not None:
                    entries[key] = old
                else:
                    entries.pop(key, None)
                governor.ledger.reclaim(mark)  # even one allocated as allocate() returned
                raise
            if old is not None:
                if retire:
                    old.captured = True  # kept like a block a capture read: until close()
                    self.retired.append(old)
                else:
                    try:
                        self._let_go(old)
                    except BaseException:  # an interrupt: the old block stays held (retired)
                        held = governor.ledger.holds(old.allocation)
                        if held and not [w for w in self.retired if w is old]:
                            old.captured = True  # kept until close() or release_retired(True)
                            self.retired = [*self.retired, old]
                        raise
            return entry, old, True

    def _lent(self, need: int) -> Workspace | None:
        """A Triton block ``lock()`` lent this slot that holds ``need`` bytes (mutex held)."""
        for entry in list(self.triton.values()):
            if entry.lent and entry.nbytes >= need:
                return entry
        return None

    def claim(self, entry: Workspace) -> None:
        """``entry`` (a lent Triton block) is used by the stream it was made for: it is no
        longer lent. Takes the mutex."""
        with self.governor.mutex:
            entry.lent = False

    def _let_go(self, old: Workspace) -> None:
        """Retire ``old`` when a CUDA graph may read it, else release it (mutex held)."""
        governor = self.governor
        if old.captured or (old.kind == LIBRARY and old.epoch != governor.captures):
            old.captured = True
            self.retired.append(old)
            return
        streams = (old.key,) if old.kind == TRITON and isinstance(old.key, int) else ()
        governor.ledger.release(old.allocation, streams)

    def mark_captured(self, entry: Workspace) -> bool:
        """Mark ``entry`` as read by a CUDA graph being captured, under the mutex; False
        when a growth replaced it meanwhile (serve the request again)."""
        governor = self.governor
        with governor.mutex:
            if self.entries(entry.kind).get(entry.key) is not entry:
                return False
            entry.captured = True
            governor.captures += 1
            return True

    def hand_out(self, entry: Workspace, zero_init: bool) -> None:
        """Before ``entry`` (a library workspace) is handed out: zero it if ``zero_init``
        is asked and no library has had it yet (``lock()`` or a profile made it), and
        remember both. Takes the mutex."""
        with self.governor.mutex:
            if zero_init and not entry.zero_init:
                if not entry.handed:
                    _zero(entry.allocation.owner, entry.nbytes)
                entry.zero_init = True
            entry.handed = True

    def claim_untold(self, entry: Workspace) -> bool:
        """Whether ``on_grow`` is owed for ``entry``: True once per owed call (the caller
        then calls it, and :meth:`owe` again if it raises). Takes the mutex."""
        with self.governor.mutex:
            owed = entry.untold and entry.on_grow is not None
            if owed:
                entry.untold = False
            return owed

    def owe(self, entry: Workspace) -> None:
        """``on_grow`` raised for ``entry``: the next call tells it again."""
        with self.governor.mutex:
            entry.untold = True

    def presize(self, kind: str, key: Any, nbytes: int) -> None:
        """From a profile: a library workspace of ``nbytes`` (unless one holds that much),
        or a larger first size for new Triton blocks. The mutex is held by the caller."""
        if kind == TRITON:
            self.triton_hint = max(self.triton_hint, nbytes)
        elif self.library.get(key) is None or self.library[key].nbytes < nbytes:
            self.grow(LIBRARY, key, nbytes, nbytes, copy=True)

    # ------------------------------------------------------------------ lifetime
    def blocks(self) -> tuple[list[Allocation], list[Allocation]]:
        """``(library, other)``: the current library workspaces' blocks, whose contents
        sleep(level=1) keeps, and the Triton and retired blocks, which it discards."""
        library = [w.allocation for w in self.library.values()]
        other = [w.allocation for w in (*self.triton.values(), *self.retired)]
        return library, other

    def take_blocks(self) -> list[Allocation]:
        """Empty the store for close(): every block it holds, to be released."""
        blocks = [w.allocation for w in (*self.library.values(), *self.triton.values())]
        blocks.extend(w.allocation for w in self.retired)
        self.library = {}
        self.triton = {}
        self.retired = []
        return blocks

    def take_retired(self, include_captured: bool) -> list[Allocation]:
        """Remove retired blocks (all of them are captured: only if asked); their blocks."""
        if not include_captured:
            return []
        gone = [w.allocation for w in self.retired]
        self.retired = []
        return gone

    # ------------------------------------------------------------------ errors
    def locked_error(
        self, kind: str, key: Any, need: int, old: Workspace | None
    ) -> ArenaLockedError:
        """The error for a workspace that would be created or grow while locked."""
        caller = caller_info()
        held = 0 if old is None else old.nbytes
        what = "Triton scratch block for stream" if kind == TRITON else "library workspace"
        return ArenaLockedError(
            f"arena is locked but '{caller}' needs {'a new' if old is None else 'a larger'} "
            f"{what} {key!r} of {format_mb(need)} ({need} bytes) in slot {self.describe()}; "
            f"it holds {format_mb(held)}. Growth after lock() is refused: "
            + (
                "run every Triton kernel (on every stream it uses) once during warm-up, "
                "before lock()"
                if kind == TRITON
                else "ask for the largest size during warm-up, before lock(), on every "
                "micro-batch that asks at all (lock() gives the lane's largest size only "
                "to a micro-batch that never asked: one that asked for less keeps its "
                "size, which its library holds)"
            ),
            caller=caller,
            required=need,
            current=held,
            slot=(self.ubatch, self.lane),
            key=key,
        )


class WorkspaceHook(LockHook):
    """Workspace blocks' part in the slot table (a :class:`~arena.slots.hooks.LockHook`
    the facade registers with every slot table): each slot gets a
    :class:`WorkspaceStore`, and ``lock()`` shares each lane's library workspaces and
    Triton blocks (:func:`share_library_workspaces`, :func:`share_triton_blocks`)."""

    __slots__ = ()

    def attach(self, slots: Sequence[Slot]) -> None:
        """A store for each slot."""
        for slot in slots:
            slot.attach(WorkspaceStore(slot.governor, slot.ubatch, slot.lane))

    def lane_additions(self, group: Sequence[Slot], alignment: int) -> int:
        """The bytes of the library workspaces and Triton blocks siblings lack or hold
        smaller."""
        stores = [s.store(WorkspaceStore) for s in group]
        return missing_library_bytes(stores) + missing_triton_bytes(stores)

    def share_lane(self, group: Sequence[Slot]) -> None:
        """Share the lane's library workspaces, then its Triton blocks."""
        stores = [s.store(WorkspaceStore) for s in group]
        share_library_workspaces(stores)
        share_triton_blocks(stores)


def presize_workspace(slot: Slot, kind: str, key: Any, nbytes: int) -> None:
    """From a profile: give ``slot`` a library workspace ``key`` of ``nbytes`` (kind
    ``"library"``), or a first size for its Triton blocks (kind ``"triton"``). Takes the
    mutex."""
    governor = slot.governor
    with governor.mutex:
        governor.check_open()
        slot.store(WorkspaceStore).presize(kind, key, nbytes)


def share_library_workspaces(stores: list[WorkspaceStore]) -> None:
    """Give every store of one lane each library workspace a sibling has, at the largest
    size any of them holds (contents not copied): a micro-batch that did not run during
    warm-up finds its workspaces after lock(). The mutex is held by the caller."""
    sizes: dict[Any, int] = {}
    zeroed: set[Any] = set()
    for store in stores:
        for key, entry in list(store.library.items()):
            sizes[key] = max(sizes.get(key, 0), entry.nbytes)
            if entry.zero_init:
                zeroed.add(key)
    for store in stores:
        for key, size in sizes.items():
            if key not in store.library:
                store.grow(LIBRARY, key, size, size, copy=False, zero_init=key in zeroed)


def share_triton_blocks(stores: list[WorkspaceStore]) -> None:
    """Size the Triton blocks of every store of one lane like the largest any of them has:
    each stream a sibling used gets a block of that size in every store (a store that
    never used the stream gets it lent: its own first new stream may take it over), and
    smaller blocks grow (the old ones retired). A micro-batch that did not run a kernel
    during warm-up, or ran it with a smaller grid, is then served after ``lock()``. The
    mutex is held by the caller."""
    largest, streams = _triton_target(stores)
    for store in stores:
        for stream in streams:
            entry = store.triton.get(stream)
            if entry is None or entry.nbytes < largest:
                new, _, _ = store.grow(TRITON, stream, largest, largest, copy=False, retire=True)
                new.lent = entry is None


def missing_triton_bytes(stores: list[WorkspaceStore]) -> int:
    """Bytes :func:`share_triton_blocks` would allocate for ``stores`` (one lane)."""
    largest, streams = _triton_target(stores)
    return sum(
        largest
        for store in stores
        for stream in streams
        if stream not in store.triton or store.triton[stream].nbytes < largest
    )


def _triton_target(stores: list[WorkspaceStore]) -> tuple[int, list[Any]]:
    """The largest Triton block of a lane, and every stream its stores have blocks for."""
    largest = 0
    streams: list[Any] = []
    for store in stores:
        for stream, entry in list(store.triton.items()):
            largest = max(largest, entry.nbytes)
            if stream not in streams:
                streams.append(stream)
    return largest, streams


def missing_library_bytes(stores: list[WorkspaceStore]) -> int:
    """Bytes :func:`share_library_workspaces` would allocate for ``stores`` (one lane)."""
    sizes: dict[Any, int] = {}
    for store in stores:
        for key, entry in list(store.library.items()):
            sizes[key] = max(sizes.get(key, 0), entry.nbytes)
    return sum(size for store in stores for key, size in sizes.items() if key not in store.library)


def fixed_block(store: WorkspaceStore, kind_key: tuple[str], nbytes: int) -> Allocation:
    """A zeroed block of its own in ``store``'s slot, of at least ``nbytes``, that never
    grows (its views keep their pointers): a library workspace keyed by ``kind_key`` plus a
    number unique in the process. Takes the mutex.

    Raises
    ------
    ArenaClosedError, ArenaLockedError, GraphCaptureError, ArenaOutOfMemoryError
        As for any new workspace.
    """
    governor = store.governor
    size = -(-max(nbytes, 1) // governor.alignment) * governor.alignment
    key = (*kind_key, next(_fixed_numbers))
    entry, _, _ = store.grow(LIBRARY, key, size, size, copy=False, zero_init=True)
    entry.handed = True
    return entry.allocation


#: Numbers that make each :func:`fixed_block` a key of its own.
_fixed_numbers = itertools.count()


def _zero(owner: Any, nbytes: int) -> None:
    """Zero the first ``nbytes`` of a 1-D uint8 owner (NumPy, CuPy or torch)."""
    owner[:nbytes] = 0


def _copy(destination: Any, source: Any, nbytes: int) -> None:
    """Copy the first ``nbytes`` of one 1-D uint8 owner into another (NumPy, CuPy or torch:
    each supports slice assignment from its own kind)."""
    destination[:nbytes] = source[:nbytes]
