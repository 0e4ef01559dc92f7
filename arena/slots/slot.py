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

import threading
import weakref
from typing import Any, Protocol, TypeVar, cast

from arena.base.events import caller_info, format_mb
from arena.base.extensions import load_extension
from arena.base.layout import MAX_BYTES, Layout
from arena.errors import ArenaError, ArenaLockedError, ArenaOutOfMemoryError
from arena.memory.ledger import compiled_replace
from arena.memory.sources import Allocation
from arena.slots.governor import Governor
from arena.slots.holder import SlotHolder
from arena.slots.stack import RegionStack

__all__ = ["Buffer", "Resize", "Slot", "SlotHolder", "SlotStore", "check_in_bounds"]

#: A finished resize, announced after the mutex is released: (slot, old bytes, new bytes).
Resize = tuple["Slot", int, int]


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
        Front key -> {request signature: :class:`~arena.views.prepared.Prepared`}.
    captured : bool
        A request was served from this buffer while a CUDA graph was being captured.
    """

    __slots__ = ("allocation", "capacity", "captured", "poisoned_end", "prepared", "wrappers")

    def __init__(self, allocation: Allocation | None, capacity: int) -> None:
        self.allocation = allocation
        self.capacity = capacity
        self.wrappers: dict[Any, Any] = {}
        self.prepared: dict[Any, Any] = {}
        self.captured = False
        #: Poisoning: the end of the last request's bytes (see :mod:`arena.base.poison`).
        self.poisoned_end = 0


class SlotStore(Protocol):
    """What a slot asks of a feature's store: the state one feature keeps for one slot,
    and the blocks it keeps outside the slot's scratch buffer (persistent buffers,
    :mod:`arena.slots.persistent`; library workspaces and Triton blocks,
    :mod:`arena.slots.workspaces`; the step books, :mod:`arena.planning.books`, keep none).

    A feature makes its stores and gives each slot its own (:meth:`Slot.attach`) when it
    registers with the slot table (:meth:`arena.slots.hooks.LockHook.attach`); the slot
    neither makes nor imports them, and counts and empties their blocks through this.
    """

    @property
    def retired_bytes(self) -> int:
        """Bytes of replaced blocks kept because a CUDA graph may read them."""
        ...

    @property
    def retired_count(self) -> int:
        """How many such blocks the store keeps."""
        ...

    def blocks(self) -> tuple[list[Allocation], list[Allocation]]:
        """``(kept, discarded)``: the blocks whose contents sleep(level=1) keeps, and those
        it discards."""
        ...

    def take_blocks(self) -> list[Allocation]:
        """Empty the store for close(): every block it holds, to be released."""
        ...

    def take_retired(self, include_captured: bool) -> list[Allocation]:
        """Remove retired blocks (captured ones only if asked); return them."""
        ...


#: ``[replace]``: the compiled growth of a host ledger (``compiled_replace()``, None where
#: it is not in use), filled at the first growth (one store).
_REPLACE: list[Any] = []


def _compiled_replace() -> Any:
    if not _REPLACE:
        _REPLACE[:] = [compiled_replace()]
    return _REPLACE[0]


#: The slot's compiled growth (arena/slots/_growth.c: :meth:`Slot.ensure`'s common case
#: in C, calling the host ledger's compiled replace through arena.memory._host's C-API), or
#: None where it is not in use (not built, ``ARENA_PURE_PYTHON`` set, or the memory
#: layer's extension not in use); and why.
compiled, WHY_PYTHON = load_extension("arena.slots._growth")

#: ``[grow]``: a slot's compiled growth for a request (``SlotGrowth.grow``,
#: arena/slots/_growth.c; None where it is not in use), filled at the first growth (one
#: store). :meth:`Slot.ensure` calls it first where the request needs more than the buffer
#: holds; it declines (None, nothing done) wherever the common case does not hold, and
#: reads ``_REPLACE`` per call, so a test that sets the compiled replace aside sets it
#: aside too.
_GROW: list[Any] = []


def _compiled_growth() -> Any:
    if not _GROW:
        grow = None
        if compiled is not None and _compiled_replace() is not None:
            # The classes are read here, at the first growth: Slot is defined below.
            grow = compiled.SlotGrowth(
                Slot, Buffer, Governor, type(threading.RLock()), globals(), MAX_BYTES
            ).grow
        _GROW[:] = [grow]
    return _GROW[0]


#: A store's type, for :meth:`Slot.store`.
S = TypeVar("S", bound=SlotStore)


class Slot:
    """State of one (ubatch, lane) slot and the protocol that grows it.

    Every method that changes state takes the governor's mutex and re-checks what it
    read before acting. Reading :attr:`buffer` needs no lock.
    """

    __slots__ = (
        "__weakref__",
        "_siblings",
        "buffer",
        "calls",
        "detour",
        "governor",
        "growing",
        "growths",
        "high_water",
        "holder",
        "index",
        "lane",
        "load",
        "outgrown",
        "pending",
        "plain_high",
        "retired",
        "scratch_name",
        "stack",
        "stores",
        "ubatch",
    )

    def __init__(self, governor: Governor, index: int, ubatch: int, lane: int) -> None:
        self.governor = governor
        self.index = index
        self.ubatch = ubatch
        self.lane = lane
        self.buffer = Buffer(None, 0)
        #: The buffer installed while a growth asks for its new block (the growth's empty
        #: placeholder, or the buffer grown in place) and the growing thread's ident, None
        #: otherwise: a growth in that thread that finds it still installed was started
        #: from inside the first one (alloc_context, the memory source) and is refused.
        #: (Another thread's: a growth a fork left unfinished in the child, where the
        #: mutex is renewed, which the child's own growth replaces.)
        self.growing: tuple[Buffer, int] | None = None
        # Bytes a sibling grew to: this slot grows to match at its own next call.
        self.pending = 0
        #: Nonzero when plain requests must take the checked path: a growth is pending,
        #: or scopes or steps are open (plain requests then live above them), or the
        #: arena sleeps. Written under the mutex only; the hot path reads it once.
        self.detour = 0
        #: The scopes and steps open on this slot, their top and live bytes (see
        #: :mod:`arena.slots.stack`): placement above them asks it.
        self.stack = RegionStack()
        #: The most bytes live at once in this slot: its LOAD (a lower bound on capacity).
        self.load = 0
        #: The largest bytes a request outside every step needed (steps are planned).
        self.plain_high = 0
        # Weak: slots of one lane must not keep each other alive (a reference cycle would
        # hold every buffer until the cycle collector runs, after the arena is dropped).
        self._siblings: tuple[weakref.ref[Slot], ...] = ()
        self.retired: list[Buffer] = []
        #: Poisoning: buffers a growth replaced whose views may go stale later (a scope's
        #: or step's, the last plain request's); their bytes are poisoned with the slot's.
        self.outgrown: list[Buffer] = []
        #: Store type -> the store of that feature for this slot (:meth:`attach`).
        self.stores: dict[type[Any], SlotStore] = {}
        self.calls = 0
        self.growths = 0
        self.high_water = 0
        self.holder = SlotHolder()
        #: What the ledger's trace names this slot's scratch blocks (formatted once).
        self.scratch_name = f"the scratch buffer of slot {self.describe()}"

    def describe(self) -> str:
        """``"(ubatch 0, lane 1)"``, for messages."""
        return f"(ubatch {self.ubatch}, lane {self.lane})"

    def set_siblings(self, siblings: list[Slot]) -> None:
        """The other slots of this slot's lane: they grow to match at their next call."""
        self._siblings = tuple(weakref.ref(s) for s in siblings if s is not self)

    def siblings(self) -> list[Slot]:
        """The other slots of this slot's lane."""
        return [s for s in (ref() for ref in self._siblings) if s is not None]

    def attach(self, store: SlotStore) -> None:
        """Keep ``store``, a feature's blocks for this slot (a feature registering with the
        slot table calls this; installed in one store)."""
        self.stores = {**self.stores, type(store): store}

    def store(self, kind: type[S]) -> S:
        """This slot's store of type ``kind`` (the feature registered it: :meth:`attach`)."""
        return cast(S, self.stores[kind])

    @property
    def retired_bytes(self) -> int:
        """Bytes held by retired scratch buffers and the stores' retired blocks."""
        stores = list(self.stores.values())
        return sum(b.capacity for b in list(self.retired)) + sum(s.retired_bytes for s in stores)

    @property
    def retired_count(self) -> int:
        """How many retired scratch buffers and store blocks this slot keeps."""
        return len(self.retired) + sum(s.retired_count for s in list(self.stores.values()))

    # ------------------------------------------------------------------ requests
    def ensure(self, required: int) -> tuple[Buffer | None, list[Resize]]:
        """A buffer holding at least ``required`` bytes, growing the slot if needed.

        Returns ``(buffer, resizes)``: ``buffer`` is None when growth is needed while the
        arena is locked; ``resizes`` are to be announced once the mutex is released. A
        request given a buffer is counted (``calls``): its views are built from it next.
        A zero-byte request never grows the slot.

        Raises
        ------
        ArenaClosedError, GraphCaptureError, ArenaOutOfMemoryError
        """
        # The common growth (a host ledger, unlocked, no check or listener of any kind set)
        # in one C call, mutex and all; it declines, with nothing done, wherever this
        # method's other branches or _grow's would be taken (issue 32 item 4: this frame's
        # and _grow's statements were a fresh arena's first growth's largest Python cost).
        if required > self.buffer.capacity:
            grow = _GROW[0] if _GROW else _compiled_growth()
            if grow is not None:
                grown = grow(self, required)
                if grown is not None:
                    return grown  # type: ignore[no-any-return]
        governor = self.governor
        resizes: list[Resize] = []
        with governor.mutex:
            if governor.closed or governor.asleep:  # the checks, called only to raise
                governor.check_open()
                governor.check_awake(f"a request of {required} bytes in slot {self.describe()}")
            # No local reference to the current buffer across _grow(): it would keep the
            # old block alive while the new one is allocated (peak old + new).
            capacity = self.buffer.capacity
            target = max(required, self.pending) if required else 0
            if target <= capacity:
                if self.pending and self.pending <= capacity:
                    self.pending = 0
                    self.update_detour()
                elif self.detour and not self.stack.regions:
                    # Heals a flag an interrupt left raised with nothing open (between
                    # open_region's two stores, or close_region's): plain requests would
                    # otherwise take this checked path until the next region closed.
                    self.update_detour()
            elif not governor.locked:
                resizes.append(self._grow(target))
            elif required > capacity and governor.in_place:
                # lock(growth="in_place"): commit more at the same addresses.
                resize = self._grow(required)
                governor.note_locked_growth(self, resize[1], resize[2])
                resizes.append(resize)
            elif required > capacity:
                return None, resizes
            self.high_water = max(self.high_water, required)
            self.calls += 1  # the request is served from this buffer
            return self.buffer, resizes

    def count_call(self, count: int = 1) -> None:
        """Count ``count`` requests served (``-1``: one counted already is served again).
        The compiled hits count one through its compiled form
        (``arena_slot_count_call`` in ``arena/slots/_slot_api.h``, the slots layer's
        C-API), as they open and close regions through :meth:`open_region`'s and
        :meth:`close_region`'s (``arena/slots/_slot.c``)."""
        self.calls += count

    def note_plain(self, nbytes: int) -> None:
        """A floor for ``plain_high`` (the largest request outside every step): a
        reserve, or a figure another rank agreed on. The mutex is held by the caller."""
        self.plain_high = max(self.plain_high, nbytes)

    def note_high_water(self, required: int) -> None:
        """Raise the high-water mark to ``required`` (a request served without growth)."""
        with self.governor.mutex:
            self.high_water = max(self.high_water, required)

    def note_load(self, live: int, reach: int = 0, placer: Any = None) -> None:
        """After a request: raise LOAD to ``live``; the bytes up to ``reach`` (the end of
        a plain request, ``placer`` None, or of a scope's) count above the innermost step
        open below ``placer`` on the :attr:`stack` (its replays put them above its plan),
        else in ``plain_high``. Only the slot's own thread calls this."""
        self.load = max(self.load, live)
        if reach:
            stack = self.stack
            step = stack.step_below(placer) if stack.regions else None
            if step is not None:
                step.note_above(reach)
            else:
                self.plain_high = max(self.plain_high, reach)

    def update_detour(self) -> None:
        """Recompute :attr:`detour`; the mutex is held by the caller."""
        self.detour = 1 if (self.pending or self.stack.regions or self.governor.asleep) else 0

    def renew_buffer(self) -> None:
        """Give the slot a new :class:`Buffer` over the same block, with no prepared
        views: for sleep (every request then takes the checked path, which refuses it)
        and wake (views are prepared again over memory committed again). The mutex is
        held by the caller."""
        old = self.buffer
        if old.allocation is not None:
            fresh = Buffer(old.allocation, old.capacity)
            fresh.captured = old.captured
            self.buffer = fresh
        self.update_detour()

    def blocks(self) -> tuple[list[Allocation], list[Allocation]]:
        """``(kept, scratch)``: the blocks whose contents sleep(level=1) keeps (the stores'
        kept ones: persistent buffers, library workspaces) and those it discards (scratch,
        retired, and the stores' others: Triton)."""
        scratch = [b.allocation for b in (self.buffer, *self.retired) if b.allocation is not None]
        kept: list[Allocation] = []
        for store in self.stores.values():
            held, discarded = store.blocks()
            kept += held
            scratch += discarded
        return kept, scratch

    def open_region(self, region: Any) -> None:
        """Push a scope or step on the slot's :attr:`stack`: plain requests detour above
        it until it closes.

        The detour flag is raised before the stack takes the region (the stack installs
        its new list in one store): an interrupt between the two leaves plain requests
        detouring with nothing open (the checked path, never offset 0 under an open
        region), and the flag is recomputed when the region is closed (not found: see
        :meth:`close_region`) or at the next plain request (:meth:`ensure`).

        Raises
        ------
        ArenaClosedError
            The arena was closed (checked under the mutex: a close by the thread that
            held it while this one waited counts); nothing changed on the slot."""
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            self.detour = 1
            self.stack.push(region)

    def close_region(self, region: Any, top: int, live: int) -> bool:
        """Remove ``region`` (the innermost, or any) from the :attr:`stack` and set what
        stays: the new top and live bytes. Returns False when it is not open (closed
        already: the stack stays as it is, and the detour flag is recomputed).

        The stack changes in one step (:meth:`~arena.slots.stack.RegionStack.remove`),
        and the detour flag is lowered only after it: an interrupt between them leaves
        the flag raised (the checked path, until the next plain request lowers it: see
        :meth:`ensure`), never lowered under an open region."""
        with self.governor.mutex:
            closed = self.stack.remove(region, top, live)
            self.update_detour()
            return closed

    def fit(self, target: int) -> Resize | None:
        """Replace the buffer by one of the grown size for ``target`` (step planning:
        smaller, the old one released first, or larger); nothing when the arena is locked,
        a capture used the buffer, a scope or step is open on the slot, or the size is
        the buffer's.

        Raises
        ------
        ArenaOutOfMemoryError
            If the new buffer cannot be had (the slot keeps one of its old capacity).
        """
        governor = self.governor
        with governor.mutex:
            governor.check_open()
            if (
                governor.locked
                or self.buffer.captured
                or governor.capturing()
                or self.stack.regions
            ):
                return None
            size = self.grown_size(max(target, self.pending, 1))  # a sibling is larger
            if size == self.buffer.capacity:
                return None
            return self._grow(size, shrinking=True)

    def grown_size(self, target: int) -> int:
        """Bytes a buffer that must hold ``target`` is given under the arena's growth
        policy (``governor.growth``, rounded to ``governor.alignment``).

        The slot's own rule, not the governor's: a growth then leaves this module only
        for the ledger (the request path's files, tests/views/test_request_path.py).

        Raises
        ------
        ArenaOutOfMemoryError
            When the policy would need more bytes than a buffer can address.
        """
        governor = self.governor
        alignment = governor.alignment
        target = max(target, alignment)
        growth = governor.growth
        # round_up (arena.base.layout) written out: a growth calls no helper of another
        # module's (the request path's file count, tests/views/test_request_path.py).
        if growth == "exact":
            size = (target + alignment - 1) & -alignment
        elif growth == "pow2":
            size = 1 << (target - 1).bit_length()
        else:
            assert isinstance(growth, int)
            size = (-(-target // growth) * growth + alignment - 1) & -alignment
        if size > MAX_BYTES:
            raise ArenaOutOfMemoryError(
                f"a buffer of {target} bytes grows to {size} bytes under growth={growth!r}, "
                f"more than the {MAX_BYTES} bytes a buffer can address; request less"
            )
        return size

    def reserve(self, nbytes: int) -> Resize | None:
        """Grow to hold ``nbytes`` (mutex held by the caller, lock already checked)."""
        if self.buffer.capacity >= nbytes:
            return None
        return self._grow(nbytes)

    def _grow(self, target: int, *, shrinking: bool = False) -> Resize:  # noqa: PLR0915
        """Replace the buffer by one holding ``target`` bytes (exactly, ``shrinking``:
        already a grown size); the mutex is held."""
        # One growth read top to bottom (arena/slots/_growth.c mirrors its common case):
        # split, each growth paid a frame more.
        governor = self.governor
        growing = self.growing
        if growing is not None and growing[0] is self.buffer:
            self._refuse_reentry(target, growing[1])  # a growth started inside this one?
        # First: the growth then calls nothing more of this module's until the new block
        # is held (the request path's call-backs, tests/views/test_request_path.py).
        # Named only where a check that can fail is set: formatting it was a growth's own
        # cost (issue 32 item 4); the allocation's name is the slot's, made once.
        checked = governor.capture_probe is not None or governor.max_bytes is not None
        where = self.describe() if checked else ""
        empty = Buffer(None, 0)
        if shrinking:
            capacity = governor.shrinking_to(target)
        else:
            # The default policy ("exact": rounded up to the alignment) written out, as
            # grown_size() computes it: a growth's frame less (issue 32 item 4: each
            # frame a fresh arena's first growth runs costs about a microsecond cold).
            alignment = governor.alignment
            capacity = (max(target, alignment) + alignment - 1) & -alignment
            if governor.growth != "exact" or capacity > MAX_BYTES:
                capacity = self.grown_size(target)  # another policy, or its error
        # The governor's checks are called where they can fail (messages built there only).
        if governor.capture_probe is not None:
            governor.check_not_capturing(f"growing slot {where} to {capacity} bytes")
        if governor.fixed_address:
            return self._commit(capacity, count=not shrinking)
        old = self.buffer
        old_capacity = old.capacity
        kept = old if old.captured and old.allocation is not None else None
        # The cap is checked before the old buffer goes, so a refusal leaves it in place.
        freed = 0 if kept is not None or old.allocation is None else old.allocation.nbytes
        if governor.max_bytes is not None:
            governor.check_budget(capacity, f"growing slot {where} to {capacity} bytes", freed)
        ledger = governor.ledger
        mark = ledger.allocations
        block = old.allocation
        # The slot's only hold on the old block while it is replaced: the ledger empties
        # it once the block is counted freed (the old memory goes back before the new is
        # asked for); one still there after a failure was never released.
        held = [block] if kept is None and block is not None else []
        poisoned = old if governor.poison and block is not None else None
        del old, block
        try:
            # Inside the try: an interrupt as poisoning keeps the old buffer gives the
            # slot its old block back (_restore), rather than leaving it empty.
            # Concurrent readers take the slow path meanwhile; a growth started inside
            # this one (alloc_context, the source) finds the placeholder and is refused.
            self.buffer = empty
            self.growing = (empty, threading.get_ident())
            if poisoned is not None:
                self.outgrow(poisoned)
                poisoned = None
            if kept is not None:
                self.retired.append(kept)
            # From the ledger itself, in one visit (release, then allocate): what the
            # governor's allocate() checks (a capture, the cap) was checked above, before
            # the old buffer went, and this path runs only unlocked (a locked growth in
            # place commits: _commit).
            # The compiled growth of a host ledger first (None: another ledger, or the
            # allocation refused after the old block went; Ledger.replace goes on from
            # there with the same held): no Python frame of the ledger's (issue 32 item 4).
            replace = _REPLACE[0] if _REPLACE else _compiled_replace()
            allocation = None
            if replace is not None:
                allocation = replace(ledger, held, capacity, self.scratch_name)
            if allocation is None:
                allocation = ledger.replace(held, capacity, self.scratch_name)
            # Installed by this one store: an interrupt before it leaves the block to
            # reclaim(), none after it leaves the block unheld.
            self.buffer, self.growing = Buffer(allocation, capacity), None
        except BaseException as exc:
            self.growing = None
            ledger.reclaim(mark)
            self._restore(old_capacity, kept, held, exc)
            raise
        if not shrinking:
            self.growths += 1
        if self.pending or self._siblings:  # else nothing more to install (a call saved)
            self._install(self.buffer, count=False)
        return self, old_capacity, capacity

    def _commit(self, capacity: int, *, count: bool = True) -> Resize:
        """Grow in place on a fixed-address source: the same base address, nothing
        copied, retired or released; the old buffer stays valid (the mutex is held)."""
        governor = self.governor
        old = self.buffer
        held = 0 if old.allocation is None else old.allocation.nbytes
        what = f"slot {self.describe()}'s scratch buffer of {capacity} bytes"
        governor.check_budget(capacity, f"growing {what}", held)
        ledger = governor.ledger
        mark = ledger.allocations
        try:
            self.growing = (old, threading.get_ident())  # one started inside it: refused
            if old.allocation is None:
                allocation = ledger.reserve(capacity, what)
            else:
                allocation = ledger.commit(old.allocation, capacity, what)
            fresh = Buffer(allocation, capacity)
            fresh.captured = old.captured
            self.buffer = fresh  # installed by this one store, as in _grow
            self.growing = None
        except BaseException:
            self.growing = None
            if old.allocation is None:
                ledger.reclaim(mark)  # a reserved range nobody holds goes back
            else:
                grown = ledger.handed_since(mark)
                if grown is not None and self.buffer is old:
                    # Committed in place, the ledger counting the grown block: the slot
                    # holds it too (the same address; the old capacity is a part of it).
                    kept = Buffer(grown, capacity)
                    kept.captured = old.captured
                    self.buffer = kept
            raise
        self._install(fresh, count=count)
        return self, old.capacity, capacity

    def _refuse_reentry(self, target: int, thread: int) -> None:
        """Raise for a growth to ``target`` bytes started while this slot's growth, in the
        same ``thread``, asks for its block (from inside ``alloc_context`` or the memory
        source, which it calls): the growth's buffer is still installed (:attr:`growing`)."""
        if thread != threading.get_ident():
            return  # a growth a fork left unfinished in another thread: replaced
        raise ArenaError(
            f"slot {self.describe()} was asked to grow to {target} bytes while it is growing: "
            "a request was made on this slot from inside alloc_context (or the memory "
            "source), which the growth calls for its new block; the slot has no buffer to "
            "serve it until that growth ends. Make the request outside alloc_context (a "
            "request on another slot is served there)"
        )

    def outgrow(self, buffer: Buffer) -> None:
        """Poisoning: keep ``buffer``, which a growth replaces, until its views are
        poisoned (mutex held)."""
        if not [b for b in self.outgrown if b is buffer]:
            self.outgrown = [*self.outgrown, buffer]

    def forget_outgrown(self) -> None:
        """Poisoning: every view of the buffers a growth replaced is poisoned; let them go."""
        self.outgrown = []

    def _restore(
        self,
        old_capacity: int,
        kept: Buffer | None,
        held: list[Allocation],
        exc: BaseException,
    ) -> None:
        """After a failed growth, give the slot a buffer of its old capacity again: the
        old one where it is still held (retired, or its release interrupted: the block
        still in ``held``, see :meth:`~arena.memory.ledger.Ledger.replace`)."""
        if kept is not None:
            if kept in self.retired:
                self.retired.remove(kept)
            self.buffer = kept
            # The slot's buffer again, not outgrown: its next views are not stale.
            self.outgrown = [b for b in self.outgrown if b is not kept]
            return
        governor = self.governor
        ledger = governor.ledger
        if held and ledger.holds(held[0]):
            block = held[0]
            # The buffer poisoning keeps is the old one itself; else a new record of it.
            for outgrown in self.outgrown:
                if outgrown.allocation is block:
                    self.buffer = outgrown
                    self.outgrown = [b for b in self.outgrown if b is not outgrown]
                    return
            self.buffer = Buffer(block, old_capacity)
            return
        if old_capacity == 0:
            return
        mark = ledger.allocations
        try:
            allocation = ledger.allocate(
                old_capacity, f"the restored scratch buffer of slot {self.describe()}"
            )
            self.buffer = Buffer(allocation, old_capacity)
        except BaseException:
            ledger.reclaim(mark)
            _note(
                exc,
                f"arena: slot {self.describe()} could not get its old {old_capacity}-byte "
                "buffer back either; it holds no memory now",
            )
            return
        _note(exc, f"arena: slot {self.describe()} keeps a buffer of its old {old_capacity} bytes")

    def _install(self, buffer: Buffer, *, count: bool = True) -> None:
        self.buffer = buffer
        if count:
            self.growths += 1
        if self.pending and self.pending <= buffer.capacity:  # none pending: detour stands
            self.pending = 0
            self.update_detour()
        if self._siblings:
            for sibling in self.siblings():  # to match the lane's largest now (a fit shrinks)
                largest = max(s.buffer.capacity for s in sibling.siblings())
                sibling.pending = largest if largest > sibling.buffer.capacity else 0
                sibling.update_detour()

    def size_for_lock(self, target: int) -> Resize | None:
        """Hold ``target`` bytes before the arena locks, releasing nothing.

        The new buffer is allocated first; the old one, if any, is retired (a CUDA graph
        captured before ``lock()`` may read it). The mutex is held by the caller.
        """
        old = self.buffer
        if old.capacity >= target:
            self.pending = 0
            self.update_detour()
            return None
        governor = self.governor
        if governor.fixed_address:
            governor.check_not_capturing(f"sizing slot {self.describe()} for lock()")
            return self._commit(target)
        mark = governor.ledger.allocations
        try:
            allocation = governor.allocate(target, self.scratch_name)
            buffer = Buffer(allocation, target)
            retired = [*self.retired, old] if old.allocation is not None else self.retired
            self.buffer, self.retired = buffer, retired  # installed in one step
            if governor.poison and old.allocation is not None:
                self.outgrow(old)
        except BaseException:
            governor.ledger.reclaim(mark)
            raise
        self._install(buffer)
        return self, old.capacity, target

    def take_blocks(self) -> list[Allocation]:
        """Empty the slot for close(): every block it holds, to be released."""
        blocks = [b.allocation for b in (self.buffer, *self.retired) if b.allocation is not None]
        for store in self.stores.values():
            blocks.extend(store.take_blocks())
        self.buffer = Buffer(None, 0)
        self.retired = []
        self.outgrown = []
        self.pending = 0
        self.update_detour()
        return blocks

    def take_retired(self, include_captured: bool) -> list[Allocation]:
        """Remove retired buffers (captured ones only if asked); return their blocks."""
        keep = [b for b in self.retired if b.captured and not include_captured]
        gone = [b.allocation for b in self.retired if b not in keep and b.allocation is not None]
        self.retired = keep
        for store in self.stores.values():
            gone.extend(store.take_retired(include_captured))
        return gone

    # ------------------------------------------------------------------ captures
    def mark_captured(self, buffer: Buffer) -> bool:
        """Mark ``buffer`` as read by a CUDA graph being captured, atomically with every act
        that could free it (growth, reserve, release_retired all decide under the mutex).

        Returns False when ``buffer`` is no longer this slot's buffer: a growth replaced
        it between the caller's read and now, and the caller must serve its request again
        from the current buffer (a graph must never read a buffer the arena let go).
        """
        with self.governor.mutex:
            if self.buffer is not buffer:
                return False
            buffer.captured = True
            self.governor.captures += 1
            return True

    # ------------------------------------------------------------------ errors
    def locked_error(
        self, required: int, what: str = "", *, reserving: bool = False
    ) -> ArenaLockedError:
        """The error for a request that would grow this slot while the arena is locked;
        ``what`` names a scope or step request (the bytes then count what lies below it);
        ``reserving``: the growth is ``reserve()``'s, whose fix is not "presize with
        reserve()" but to call it before ``lock()``."""
        caller = caller_info()
        capacity = self.buffer.capacity
        below = f" for a {what} (with the {self.stack.top} bytes of the open scopes and steps)"
        # A scope or step has no try_get_simultaneous() (told so, a new user reached for
        # it): its fixes are warm-up and presizing, here to the bytes just named.
        fix = (
            "Warm up this size before locking, presize with reserve(), or use "
            "try_get_simultaneous() to fall back"
            if not what
            else f"Warm up this size before locking, or presize with reserve_bytes({required})"
            f"; a {what.split(maxsplit=1)[0]} has no try_get_simultaneous() to fall back on"
        )
        return ArenaLockedError(
            f"arena is locked but {'reserve()' if reserving else 'allocation'} from "
            f"'{caller}' requires "
            f"{format_mb(required)} ({required} bytes{below if what else ''}), current size is "
            f"{format_mb(capacity)} ({capacity} bytes) in slot {self.describe()} on "
            f"{self.governor.device}"
            + (" (this slot was never sized during warm-up)" if self.growths == 0 else "")
            + "; growth after lock() is refused. "
            + (
                "reserve() sizes slots ahead of the requests: call it before lock(), or "
                "inside with ws.unlocked(): ..."
                if reserving
                else fix
            ),
            caller=caller,
            required=required,
            current=capacity,
            slot=(self.ubatch, self.lane),
        )

    # ------------------------------------------------------------------ debug
    def enter(self, region: object = None) -> None:
        """Debug mode: mark the calling thread as using this slot (re-entrant), for a
        request or, with ``region`` (a scope or step, or a plain request's token), until
        :meth:`leave` names it: once, however often it is called.

        Raises
        ------
        SlotError
            Another thread is inside a request on this slot at the same time.
        """
        self.holder.enter(self, region)

    def leave(self, region: object = None) -> None:
        """Debug mode: the calling thread's request on this slot is done (with
        ``region``: that scope or step closed; once per region however often called)."""
        self.holder.leave(region)


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


def _note(exc: BaseException, text: str) -> None:
    add_note = getattr(exc, "add_note", None)  # Python >= 3.11
    if add_note is not None:
        add_note(text)
