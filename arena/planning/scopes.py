"""Scopes: scratch whose views live until a ``with`` block exits.

``with ws.scope() as s:`` opens a region on the caller's slot. Every ``s.get_simultaneous``
puts its views at the top of the slot's open regions, and they stay valid until the scope
exits (not until the next request, as plain requests). Scopes nest: an inner scope starts
where the outer one's views end, and when it exits its bytes are the next request's.
Requests go to the innermost open scope or step (an outer one's requests come before the
inner one opens), so the regions of a slot always form a stack. A plain
``get_simultaneous`` inside a scope lives above every open region (vLLM's semantics, one
level up: valid until the next request on the slot).

The slot's capacity is the peak of its stack plus the plain requests above it, learned
during warm-up like any other request and sized by ``lock()``; after ``lock()`` a scope
request that needs more raises :class:`~arena.ArenaLockedError` naming the call site.

The owning thread changes a slot's regions without a lock (a slot belongs to one thread at
a time, see docs/overview.md, "Threads and safety"); opening and closing a region take the
arena's mutex only to flip the slot's detour flag, which makes plain requests take the
checked path while regions are open. Where the compiled hit path is in use, the usual
scope's construction, enter and exit (not in debug mode, not poisoning, nothing to heal)
are compiled (``arena/planning/_region_hit.c``), mirroring :class:`Scope`'s ``__init__``,
:meth:`Scope._enter_on` and :meth:`Scope.__exit__`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from arena.base.layout import Layout, compute_layout, shifted
from arena.base.poison import poison_slot_bytes
from arena.errors import ArenaError
from arena.planning.region_hit import ScopeHitBase, compiled
from arena.slots.governor import Governor
from arena.slots.regions import heal_regions
from arena.slots.slot import Buffer, Resize, Slot
from arena.uncopyable import refuse_copies
from arena.views import hit
from arena.views.builder import ViewBuilder

__all__ = [
    "CompiledScope",
    "Placer",
    "Region",
    "Scope",
    "close_region",
    "heal_regions",
    "open_region",
    "scope_class",
    "served",
]

ViewT = TypeVar("ViewT")

#: The key of each front's scope cache in ``Buffer.prepared``, by the front's key.
_MEMO_KEYS: dict[str, str] = {}


class Placer(Protocol):
    """What scopes and steps need of a front (an
    :class:`~arena.views.builder.ViewBuilder`): views of a layout placed in a slot, the
    bookkeeping of a request served from remembered views, and announcements."""

    key: str
    probe: Callable[[], bool] | None
    log: Any
    fresh_view: Any

    def place(
        self,
        slot: Slot,
        layout: Layout,
        specs: Any,
        *,
        strict: bool = True,
        keep: int = 0,
        what: str = "",
        memo: Callable[[Buffer, Any], None] | None = None,
    ) -> list[Any] | None:
        """Views of ``layout`` in ``slot``, growing it if needed."""
        ...

    def remember(self, cache: dict[Any, Any], key: Any, entry: Any) -> None:
        """Keep a prepared entry in a bounded cache."""
        ...

    def served(
        self,
        slot: Slot,
        buffer: Buffer,
        specs: Any,
        required: int,
        views: Any,
        *,
        strict: bool,
        retry: Callable[[], list[Any] | None] | None = None,
        capturing: bool | None = None,
    ) -> list[Any] | None:
        """Capture marks and the request log for views served from memory
        (``capturing``: the capture probe's answer where the caller asked it)."""
        ...

    def announce(self, resizes: Sequence[Resize]) -> None:
        """Tell the arena's listeners of ``resizes``."""
        ...

    def retire(self, views: Sequence[Any]) -> None:
        """Debug mode: make views unusable where the framework allows it."""
        ...


def served(
    placer: Placer, slot: Slot, entry: Any, specs: Any, views: Any, *, capturing: bool = False
) -> bool:
    """A replay's or scope's hit whose bookkeeping Python does: the capture mark where
    the capture probe answered True (``capturing``, asked by the caller), the request log
    while unlocked; False when a growth raced a capture (the hit's count given back: the
    checked path then places and counts the request)."""
    if not capturing and (slot.governor.locked or placer.log is None):
        return True
    done = placer.served(
        slot,
        slot.buffer,
        specs,
        entry.required,
        views,
        strict=True,
        retry=lambda: None,
        capturing=capturing,
    )
    if done is not views:
        # served() took back the count of a request it serves again; a hit counts only
        # once served, so give it back: the checked path counts the request once.
        slot.count_call()
        return False
    return True


class Region(ScopeHitBase):
    """An open scope on one slot: where it starts and how far its views reach (its
    fields are the base's: :class:`arena.planning.region_hit.PyScopeHitBase`, or the compiled
    ``ScopeHitBase``).

    Attributes
    ----------
    base : int
        The slot's top when the region opened (its first byte).
    end : int
        The end of its highest view (``base`` while it has none).
    held : int
        Bytes of its views still live (less than ``end - base`` where holes are).
    """

    __slots__ = ()

    def __init__(self) -> None:
        self.slot: Slot | None = None
        self.base = 0
        self.end = 0
        self.held = 0
        self._memo = ""
        self._fresh_view = False  # every request takes the Python path
        self._watch = True
        self._probe: Callable[[], bool] | None = None

    def open_on(self, slot: Slot) -> None:
        """Open this region on ``slot``, at its top (see :func:`open_region`)."""
        open_region(self, slot)


def open_region(region: Any, slot: Slot) -> None:
    """Open ``region`` (a scope or a step: ``base``, ``end``, ``held`` and ``slot``) on
    ``slot``, at its top. In debug mode the calling thread holds the slot until the region
    closes: another thread's request on it raises :class:`~arena.SlotError` naming both
    threads."""
    slot.governor.check_open()
    try:  # from the hold on: an interrupt at Slot.enter's return lands inside
        if slot.governor.debug:
            slot.enter(region)
        region.slot = slot
        region.base = region.end = slot.stack.top
        region.held = 0
        slot.open_region(region)  # last, and all or nothing: see close_region
    except BaseException:  # closed while it waited for the mutex, or an interrupt
        # Nothing opened (not on the stack): the owner's exit (close_region, which finds
        # it not open) resets the region. One that opened before an interrupt is left to
        # its exit or to heal_regions, which let go. A hold refused (SlotError) or never
        # taken is no hold of this region's: leave() then does nothing.
        if slot.governor.debug and region not in slot.stack.regions:
            slot.leave(region)  # once per region, however often it is called
        raise


def close_region(region: Any) -> None:
    """Close ``region``: its bytes are free for the next request, unless a region still
    open reaches above them (requests on an outer region while this one was open).

    Safe to call again after an interrupt stopped it halfway: the slot drops the region
    and sets its new top and live bytes (what the regions still open hold) in one step,
    and a region no longer open changes nothing on the slot."""
    slot = region.slot
    if slot is None:
        return
    # The regions still open keep what they reach (a step opened right inside a step starts
    # below the outer one's end; one closed out of order may have others above it). What
    # stays live is what they hold: a sum, not the stack's figure less this region's, so
    # that an interrupt between a region's bookkeeping and the stack's (the region's own
    # stores, then RegionStack.settle) heals when the region closes. One loop, no generator.
    top, live = region.base, 0
    for other in slot.stack.regions:
        if other is not region:
            if other.end > top:  # noqa: PLR1730 (a compare, no call)
                top = other.end
            live += other.held
    # Debug mode: the slot is let go of for this region first, once however often the
    # close runs (the holder knows the regions it holds for). While the region is on the
    # stack, an interrupt anywhere here leaves it to a close run again or to
    # heal_regions, which let go; let go after the stack's close, an interrupt at
    # leave()'s call would keep the slot held with nothing left open to heal.
    if slot.governor.debug:
        slot.leave(region)
    slot.close_region(region, top, live)
    region.slot = None


class Scope(Region, Generic[ViewT]):
    """A ``with`` block whose requests stay valid until it exits (see the module doc).

    Obtain one from ``ws.scope()`` or ``ws.torch.scope()`` (any front); enter it with
    ``with``. The slot is the caller's slot when the block is entered. Entered again
    after it exited, it is a new block, as a new ``ws.scope()`` would be (entering it
    while it is open raises :class:`~arena.ArenaError`).
    """

    __slots__ = ("_alignment", "_debug", "_handed", "_placer", "_poison", "_select")
    __reduce_ex__ = __copy__ = __deepcopy__ = refuse_copies("a scope")

    def __init__(
        self,
        placer: Placer,
        select: Callable[[], Slot],
        *,
        alignment: int,
        poison: bool,
        debug: bool,
    ) -> None:
        # Region.__init__'s fields, inline (a scope is made per ``with`` block).
        self.slot: Slot | None = None
        self.base = self.end = self.held = 0
        self._watch = True
        self._probe: Callable[[], bool] | None = None  # entering reads the placer's
        self._placer = placer
        self._select = select
        self._alignment = alignment
        self._poison = poison
        self._debug = debug
        self._handed: list[Any] = []
        # Where this front's scopes remember views: per buffer, per top, per request. One
        # str object per front key: the hit's lookup in Buffer.prepared ends at identity.
        memo = _MEMO_KEYS.get(placer.key)
        if memo is None:
            memo = _MEMO_KEYS[placer.key] = f"{placer.key}/scope"
        self._memo = memo
        self._fresh_view = placer.fresh_view

    #: The Python __init__: CompiledScope's compiled one hands it what it does not make.
    _python_init = __init__

    def __enter__(self) -> Scope[ViewT]:
        if self.slot is not None:
            raise ArenaError("this scope is already open; make a new one with ws.scope()")
        return self._enter_on(self._select())

    def _enter_on(self, slot: Slot) -> Scope[ViewT]:
        """The enter on the caller's ``slot`` (the compiled enter hands it what it does
        not enter itself: debug mode, poisoning, a region to heal...)."""
        if self.slot is not None:  # entered meanwhile (choosing the slot runs user code)
            raise ArenaError("this scope is already open; make a new one with ws.scope()")
        if slot.stack.regions:
            heal_regions(slot)
        # Debug mode, poisoning or a request log while unlocked: requests need their
        # bookkeeping (decided per block: the hot path reads one flag). A capture probe
        # is asked per request the hit serves (a capture: the mark).
        placer = self._placer
        governor = slot.governor
        self._watch = (
            self._debug or self._poison or (placer.log is not None and not governor.locked)
        )
        self._probe = placer.probe
        # open_region(self, slot), inline (a scope is opened per ``with`` block).
        governor.check_open()
        try:  # from the hold on: an interrupt at Slot.enter's return lands inside
            if governor.debug:
                slot.enter(self)
            self.slot = slot
            self.base = self.end = slot.stack.top
            self.held = 0
            slot.open_region(self)  # last, and all or nothing: see close_region
        except BaseException:  # closed while it waited for the mutex, or an interrupt:
            if self not in slot.stack.regions:  # nothing opened, and no exit follows a
                self.slot = None  # refused enter (one that opened is healed later)
                if governor.debug:
                    slot.leave(self)
            raise
        return self

    def get_simultaneous(self, *specs: tuple[Any, Any]) -> list[ViewT]:
        """Views for several ``(shape, dtype)`` requests, valid until this scope exits.

        Raises
        ------
        ArenaLockedError
            The slot must grow while the arena is locked (names the call site).
        ArenaError
            The scope is not open.
        SpecError, DTypeError
            Malformed request.
        """
        slot = self.slot
        if slot is not None and not self._watch and slot.stack.regions[-1] is self:
            # The hit: views remembered over this buffer for this front's scopes, at this
            # top (arena/planning/_region_hit.c mirrors it).
            cache = slot.buffer.prepared.get(self._memo)
            if cache is not None:
                top = slot.stack.top
                try:
                    entry = cache[top, specs]
                except (KeyError, TypeError):
                    pass
                else:
                    views = entry.serve(specs)
                    if views is not None:
                        # The capture probe, asked once the views are built (as a plain
                        # request's hit asks it): a capture takes the bookkeeping.
                        probe = self._probe
                        if probe is not None and probe():
                            return self._captured(slot, top, entry, specs, views)  # type: ignore[no-any-return]
                        entry.used = True
                        slot.count_call()
                        self._account(slot, top, entry.required)
                        return views  # type: ignore[no-any-return]
        return self._checked(slot, specs)

    #: The Python request path: CompiledScope's compiled hit hands it what it does not serve.
    _python_get = get_simultaneous

    def _captured(
        self, slot: Slot, top: int, entry: Any, specs: Any, views: list[Any]
    ) -> list[ViewT]:
        """A request the hit found at ``top`` (``entry``, its fresh ``views``) while the
        capture probe says a CUDA graph is being captured: the buffer is marked captured,
        then the request is served as the hit serves it; where a growth replaced the
        buffer first, the checked path places it anew. The compiled hit hands it such a
        request with the views it built."""
        if not served(self._placer, slot, entry, specs, views, capturing=True):
            return self._checked(slot, specs)
        entry.used = True
        slot.count_call()
        self._account(slot, top, entry.required)
        return views

    def _checked(self, slot: Slot | None, specs: Any) -> list[ViewT]:
        """Every request the hit does not serve: placed at the slot's top (and
        remembered there for the next scope's hit, unless watched)."""
        if slot is None:
            raise ArenaError(
                "this scope is not open: request inside its with block (with ws.scope() "
                "as s: s.get_simultaneous(...))"
            )
        if slot.stack.regions[-1] is not self:
            heal_regions(slot)  # one above it an interrupt left open
        if slot.stack.regions[-1] is not self:
            raise ArenaError(
                "this scope is not the innermost one open on its slot: request through the "
                "innermost scope or step (its views live shorter), or make this scope's "
                "requests before opening the inner one"
            )
        layout = compute_layout(specs, self._alignment)
        base = slot.stack.top
        views = self._placer.place(
            slot,
            shifted(layout, base),
            specs,
            what="scope request",
            memo=None if self._watch else self._keeper(base, specs),
        )
        assert views is not None  # strict placement raises instead
        self._account(slot, base, base + layout.total)
        if self._debug:
            self._handed.extend(views)
        return views  # type: ignore[no-any-return]

    def _account(self, slot: Slot, base: int, end: int) -> None:
        """A request placed from ``base`` to ``end``: the slot's top, live bytes and LOAD."""
        total = end - base
        # The scope's own figures in one store, then the stack counts from them: an
        # interrupt at that call leaves the stack's figures behind until the next
        # request through a scope or step (compiled hits included), or this scope's
        # close, counts them again.
        self.end, self.held = end, self.held + total
        slot.stack.settle(end, self)
        slot.note_load(slot.stack.live, reach=end, placer=self)

    def _keeper(self, base: int, specs: Any) -> Callable[[Buffer, Any], None]:
        """Where a request's views placed at ``base`` are remembered: per buffer, in one
        dict of this front's scopes under ``(base, specs)`` (bounded like every cache of
        prepared views). The entry's ``key`` is that very tuple: the compiled hit finds a
        repeated request again by its identity (``scope_look_up`` in ``_region_hit.c``)."""

        def store(buffer: Buffer, entry: Any) -> None:
            cache = buffer.prepared.get(self._memo)
            if cache is None:
                cache = buffer.prepared[self._memo] = {}
            key = (base, specs)
            entry.key = key
            self._placer.remember(cache, key, entry)

        return store

    def __exit__(self, *exc_info: object) -> None:
        slot = self.slot
        if slot is None:
            return
        start, end = self.base, self.end
        close_region(self)
        if self._poison and end > start:
            poison_slot_bytes(slot, start, end)
        if self._handed:
            handed, self._handed = self._handed, []
            self._placer.retire(handed)

    #: The Python enter and exit: CompiledScope's compiled ones hand them what they do not do.
    _python_enter = __enter__
    _python_exit = __exit__


class CompiledScope(Scope[ViewT]):
    """A :class:`Scope` whose repeated requests are served by the compiled hit
    (``arena.planning._region_hit``); every other request goes to the same Python path. Made only
    where the extension is in use."""

    __slots__ = ()

    if compiled is not None:
        get_simultaneous = compiled.ScopeHitBase.get_simultaneous
        __init__ = compiled.ScopeHitBase.__init__
        __enter__ = compiled.ScopeHitBase.__enter__
        __exit__ = compiled.ScopeHitBase.__exit__


if compiled is not None:
    # Where the compiled init, enter and exit read and write: the fields of Scope, the
    # placer (a ViewBuilder), Slot and Governor; and the scopes' memo keys by front key.
    compiled.bind_scopes(Scope, ViewBuilder, Slot, Governor, _MEMO_KEYS)


def scope_class() -> type[Scope[Any]]:
    """The class of new scopes: :class:`CompiledScope` where the compiled hit path is in
    use (:data:`arena.views.hit.HIT_PATH`), else :class:`Scope`."""
    return CompiledScope if hit.HIT_PATH == "compiled" and compiled is not None else Scope
