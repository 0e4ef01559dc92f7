"""Steps: recorded request sequences whose bytes are planned by lifetime.

``with ws.step(key) as step:`` (``ws.torch.step(key)``, ... on a front) opens a run of
the step ``key`` on the caller's slot. ``step.get_simultaneous(...)`` hands out views that
live until ``step.release(view)`` or the run's end, in any order; plain requests made
inside the run live above it, until the next request. The runs of a key pass through
three phases, each in a module of its own, as TensorFlow Lite's arena planner keeps its
plan, calculate, commit and resolve apart. They pass one record along, the slot's
:class:`~arena.planning.records.StepBook` of the key: per block (one view of one
request, numbered in request order) its size, the request that made it and the last
request it was live for.

* **Record** (:mod:`arena.planning.record`). A key's first run puts each request's views
  side by side in the lowest gap that holds them all, over what is live at that moment
  (first fit), so warm-up does not grow the slot to the sum. A recording run that ends
  normally with every request booked is the key's record: it merges with the record by
  the largest size of each block where both made the same requests with the same
  lifetimes, and replaces it otherwise. A run that an exception ended is no record.
* **Plan** (:mod:`arena.planning.plan`). The next run of a recorded key plans it (so do
  ``ws.plan_steps()`` and ``lock()``): :func:`~arena.planning.plan_offsets` over the
  blocks' sizes and lifetimes, or the recording's own first fit where that is no
  larger. With no scope or step open on the slot, the run plans every recorded key of
  the slot first and sizes the slot, once, to what its planned steps and its other
  requests need (larger or smaller; where the arena is unlocked, not capturing and no
  CUDA graph captured the buffer), so the planned runs never grow it; inside an open
  scope or step it plans only its own key. ``lock()`` plans every key still recording
  and gives the micro-batches of a lane one plan per key where they recorded the same
  requests and lifetimes (each block at the largest size any of them saw).
* **Replay** (:mod:`arena.planning.replay`). Every later run puts each view at its
  block's planned offset from the run's start, so, started at the same byte of the same
  buffer, it hands out the same pointers. Its views are remembered per buffer, plan and
  request index, and a request served before is a hit (the compiled one, or the loop at
  the top of :meth:`Step.get_simultaneous`). A replay counts the plan's LOAD as live from its start.
  A run whose views are smaller than planned follows the plan unchanged.

**Divergence.** A replayed request that does not fit the plan (beyond the plan's
requests, another number of views, a view larger than planned, or a block whose planned
life has ended still unreleased) is caught at that request, before any view overlaps.
Unlocked, the run records from there on: its requests so far are recorded as planned,
and the views it holds keep their bytes; the key is planned again at its next run.
Locked, it raises :class:`~arena.ArenaLockedError`; during a CUDA graph capture,
:class:`~arena.GraphCaptureError`; both name the key, the request index and the call
site. A key's first run during a capture raises ``GraphCaptureError`` too: plans are
fixed before capture (run each step twice eagerly first).

**Height.** A run's offsets count from the byte it starts at. Unlocked and not
capturing, a replay that starts at another byte moves the plan's height there (so does
the first replay inside a step whose plan or start is new); otherwise a replay that
starts elsewhere warns once per key and slot (``ArenaWarning``): its views are not where
its warm-up put them. Enter a step at the same stack height every time.

**Nesting.** A step may run inside another step of another key (the same key raises
:class:`~arena.ArenaError`) or inside a scope. Opened right inside a step, it starts at
the end of the highest view the outer run holds (at its planned offset when the outer
run replays); the outer run's own requests must come before or after it. A replayed
step right inside a replayed one counts as live only what exceeds the outer plan's LOAD
beyond the outer run's live views. When a run ends, the step it ran inside notes how
far it reached above its own end and where it ran, so the outer key's plan covers the
steps run inside it (:func:`~arena.planning.plan.cover_nested`). A step recorded anew
inside another makes the outermost step's next top-level run plan and size the slot
first.

**Release.** ``release(a, b, ...)`` releases every view given or, naming the one it
refuses, none. What a front's ``write_into(view, value)`` returned stands for the view.
A recording run frees the view's bytes for its later requests; a replay marks the block
released (the plan's LOAD stays counted). With ``poison=True`` released bytes and the
run's bytes at its end are poisoned; with ``debug=True`` views are retired.

**Interrupts.** An interrupt (a ``KeyboardInterrupt`` from a signal) can land at any
call or return. State an interrupt could split is built in locals and installed in one
step; while a request is booked its run is marked broken, and a broken run is no record.
An ``__enter__`` interrupted after its region opened exits the run; ``__exit__`` closes
the region whatever stopped its bookkeeping; a region left open whose step nothing
refers to any more is closed by the next scope or step on the slot (see
:func:`~arena.slots.regions.heal_regions`).

``docs/planning.md`` runs a step program: a recording run, a planned one, and replays
whose pointers repeat, locked too.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from threading import RLock
from typing import Any, Generic, TypeVar

from arena.base.events import warn_user
from arena.base.layout import Layout, ViewLayout, compute_layout, round_up
from arena.base.poison import poison_slot_bytes
from arena.errors import ArenaError, GraphCaptureError, SpecError
from arena.planning.books import StepBooks
from arena.planning.plan import plan_for_run
from arena.planning.record import book_request, end_recording, lowest_gap
from arena.planning.records import StepBook
from arena.planning.region_hit import StepHitBase, compiled
from arena.planning.replay import fits, planned_places, refuse_divergence, remembering
from arena.planning.runs import StepRun, lean
from arena.planning.scopes import Placer, close_region, heal_regions, open_region, served
from arena.slots.governor import Governor
from arena.slots.persistent import check_new_key
from arena.slots.slot import Buffer, Slot
from arena.uncopyable import refuse_copies
from arena.views import hit
from arena.views.builder import ViewBuilder

__all__ = ["CompiledStep", "Step", "step_class"]

ViewT = TypeVar("ViewT")

#: Most views one ``release(*views)`` serves on the hot path (``STEP_RELEASE_MAX`` in
#: ``_region_hit.c``); more go through the checked path, which does the same.
RELEASE_MAX = 8

#: The run of a step that is not running (never written: entering makes a new one).
_ENDED = StepRun()
#: A step's ``_starts`` outside a replay (a replay's: its plan's first block per request).
_NO_STARTS: tuple[int, ...] = ()


class Step(StepHitBase, Generic[ViewT]):
    """One run of a step key (see the module doc). Obtain one from ``ws.step(key)`` or
    ``ws.torch.step(key)``; enter it with ``with``. Entered again after it exited, it
    is the key's next run, as a new ``ws.step(key)`` would be (entering it while it runs
    raises :class:`~arena.ArenaError`)."""

    # The replay's hit settings (slot, request, _caches, ...) are the base's slots.
    __reduce_ex__ = __copy__ = __deepcopy__ = refuse_copies("a step")
    __slots__ = (
        "_alignment",
        "_book",
        "_debug",
        "_memo",
        "_placer",
        "_poison",
        "_select",
        "above",
        "base",
        "end",
        "held",
        "inside",
        "key",
        "moved",
        "nested",
        "replay",
        "run",
        "under",
    )

    def __init__(
        self,
        placer: Placer,
        select: Callable[[], Slot],
        key: Hashable,
        *,
        alignment: int,
        poison: bool,
        debug: bool,
        fresh_view: Any = False,
    ) -> None:
        try:
            hash(key)
            same = bool(key == key)  # noqa: PLR0124 (a NaN never finds its book again)
        except TypeError:
            same = None
        if not same:
            what = "not hashable" if same is None else "not equal to itself (a NaN)"
            raise SpecError(
                f"step key {key!r} ({type(key).__name__}) is {what}; use a str, an int or a "
                "tuple of them"
            )
        self._placer = placer
        self._select = select
        self.key = key
        self._alignment = alignment
        self._poison = poison
        self._debug = debug
        self._book: StepBook | None = None
        self.run = _ENDED  # entering makes its run
        self.replay = self.moved = False  # moved: what runs inside starts at a new height
        self.slot: Slot | None = None
        self.base = self.end = self.held = 0
        self.above = 0  # the most bytes a request inside the run needed above its end
        self.nested: Any = None  # the step running below this run on its slot, if any
        self.inside = False  # started right inside ``nested``, above its live views
        self.under: tuple[int, ...] = ()  # those views' blocks in ``nested``'s run
        self.request = 0
        self._memo: tuple[Any, ...] = ()
        self._caches: list[dict[Any, Any]] | None = None
        self._buffer: Any = None  # the buffer whose remembered views _caches holds
        self._expiring: list[tuple[int, ...]] = []
        self._fresh_view = fresh_view
        self._watch = False
        self._probe: Callable[[], bool] | None = None  # entering reads the placer's
        run = _ENDED  # _bind(_ENDED, False), inline: nothing running reads or writes it
        self._released, self._handed = run.released, run.handed
        self._starts: Sequence[int] = _NO_STARTS
        self._ids, self._lasts = run.ids, run.lasts
        self._quick = False

    #: The Python __init__: CompiledStep's compiled one hands it what it does not make.
    _python_init = __init__

    def __enter__(self) -> Step[ViewT]:
        if self.slot is not None:
            raise ArenaError(f"step {self.key!r} is already running; make a new ws.step()")
        return self._enter_on(self._select())

    def _enter_on(self, slot: Slot) -> Step[ViewT]:
        """The enter on the caller's ``slot`` (the compiled enter hands it what it does
        not enter itself)."""
        if self.slot is not None:  # entered meanwhile (choosing the slot runs user code)
            raise ArenaError(f"step {self.key!r} is already running; make a new ws.step()")
        if slot.stack.regions:
            heal_regions(slot)  # regions an interrupt left open, their owner gone
        book = slot.store(StepBooks).by_key.get(self.key)
        if (
            book is not None
            and not slot.stack.regions
            and book.offsets is not None
            and not (book.running or book.stale)
            and slot.stack.top == book.recorded_at
            and slot.governor.locked
            and not slot.governor.debug
        ):
            return self._replay_locked(slot, book)
        return self._enter_checked(slot, book)

    def _enter_checked(self, slot: Slot, book: StepBook | None) -> Step[ViewT]:
        """Every enter (a recording, a plan, a nested step, unlocked...): ``book`` is the
        slot's of the key, if any."""
        if book is None:  # the slot has none: a new key
            # A NaN inside a tuple key passes __init__'s check (a tuple compares its items
            # by identity first), but a new NaN would never find this book again.
            check_new_key(self.key, "step key")
            book = slot.store(StepBooks).book(self.key)
        if book.running:
            raise ArenaError(
                f"step {self.key!r} is already running on slot {slot.describe()}: a step "
                "inside a run of the same key would share its record and plan; give the "
                "inner step a key of its own (or, where another thread runs it on this "
                "slot, give each thread its own slot: with ws.ubatch(i) or a lane)"
            )
        if book.stale or (not book.planned and book.runs):
            # The plan phase (stale: a key run inside recorded anew; size the slot first).
            self._placer.announce(plan_for_run(slot, book, self._alignment))
        if not book.planned and slot.governor.capturing():
            raise GraphCaptureError(
                f"step {self.key!r} runs for the first time while a CUDA graph is being "
                f"captured in slot {slot.describe()}; run it eagerly twice (record, then "
                "plan) before capturing, so the capture records the planned pointers"
            )
        # Once the region opens, an interrupt (or a warning as error) exits the run.
        run = StepRun() if self.run is _ENDED else self.run
        self._book, self.run = book, run
        self._bind(run, book.planned)
        self.request = 0
        # A request log while unlocked: served requests need their bookkeeping (decided
        # per run: the hot path reads one flag). A capture probe is asked per request.
        placer = self._placer
        self._watch = placer.log is not None and not slot.governor.locked
        self._probe = placer.probe
        self.above = 0
        try:
            self.nested = slot.stack.step_below(None)
            outer_step = (
                self.nested
                if slot.stack.regions and slot.stack.regions[-1] is self.nested
                else None
            )
            self.inside = outer_step is not None
            open_region(self, slot)
            spare = 0 if outer_step is None else self._start_inside(outer_step)
            book.running = True
            outer, governor = self.nested, slot.governor
            # Warm-up decides the height, and so does the first replay inside a step whose
            # plan or start is new (a plan lock() made or merged): no caller moved it.
            free = not (governor.locked or governor.capturing()) or bool(outer and outer.moved)
            self.moved = self.replay and book.settle(self.base, free)
            if self.replay and self.base != book.recorded_at and not book.warned:
                book.warned = True
                warn_user(
                    f"step {self.key!r} starts at byte {self.base} of slot {slot.describe()}, "
                    f"its plan at byte {book.recorded_at}: its views are not where its "
                    "warm-up put them (a CUDA graph captured at the other height reads other "
                    "bytes). Enter the step at the same stack height every time (outside "
                    "any scope, typically)"
                )
            if self.replay:
                end = self.base + book.total
                # A replay's live bytes are bounded by the plan's LOAD: counted once here.
                held = max(0, book.load - spare)
                self.end, self.held = end, held  # one store, then the stack recounts
                slot.stack.settle(end, self)
                slot.note_load(slot.stack.live)
                # Where a replay's views are remembered: per front, key, start and plan.
                self._memo = (self._placer.key, "step", self.key, self.base, book.version)
                self._buffer = buffer = slot.buffer
                self._caches = buffer.prepared.get(self._memo)
                self._expiring = book.expiring
        except BaseException as error:  # a warning raised as an error, an interrupt
            self.__exit__(type(error), error, error.__traceback__)
            raise
        return self

    def _replay_locked(self, slot: Slot, book: StepBook) -> Step[ViewT]:
        """The enter of the usual replay, what ``__enter__`` does in fewer steps: a
        planned key, locked, on a slot with nothing open, entered at its plan's height
        (no step below: nothing to start inside; locked: the height stays, and no capture
        matters to a planned key)."""
        run = StepRun() if self.run is _ENDED else self.run
        placer = self._placer
        self._book, self.run = book, run
        self._released, self._handed = run.released, run.handed
        self._ids, self._starts, self._lasts = run.ids, book.starts, run.lasts
        self.replay = True
        self._quick = not (self._poison or self._debug)
        self.request = self.above = 0
        self._watch = False  # locked: the request log is not told
        self._probe = placer.probe  # asked per request (a capture: the mark)
        self.nested, self.inside = None, False
        try:
            # open_region(self, slot), inline (not in debug mode: the slot is not held)
            slot.governor.check_open()
            self.slot = slot
            self.base = self.end = base = slot.stack.top
            self.held = 0
            slot.open_region(self)  # last, and all or nothing
            book.running = True
            self.moved = book.settled != book.version  # book.settle(base, free=False)
            end = base + book.total
            held = book.load  # a replay's live bytes: the plan's LOAD, counted once here
            self.end, self.held = end, held  # one store, then the stack recounts
            slot.stack.settle(end, self)
            if slot.stack.live > slot.load:
                slot.note_load(slot.stack.live)
            self._memo = memo = (placer.key, "step", self.key, base, book.version)
            self._buffer = buffer = slot.buffer
            self._caches = buffer.prepared.get(memo)
            self._expiring = book.expiring
        except BaseException as error:  # a warning raised as an error, an interrupt
            self.__exit__(type(error), error, error.__traceback__)
            raise
        return self

    def _bind(self, run: StepRun, replay: bool) -> None:
        """Start ``run`` (a replay of the plan, or a recording): where the compiled hit
        and release read its records, and whether release() of one view may take the
        compiled hit."""
        if not replay:
            run.start_recording()
        book = self._book
        starts = book.starts if replay and book is not None else _NO_STARTS
        self._released, self._handed = run.released, run.handed
        self._ids, self._starts, self._lasts = run.ids, starts, run.lasts
        self.replay = replay
        self._quick = replay and not (self._poison or self._debug)

    def get_simultaneous(self, *specs: tuple[Any, Any]) -> list[ViewT]:
        """Views for several ``(shape, dtype)`` requests, live until released or the end
        of the step.

        Raises
        ------
        ArenaLockedError, GraphCaptureError
            The run diverges from the key's plan while locked or capturing (naming the
            key, the request index and the call site), or the slot must grow while locked.
        ArenaError
            The step is not running, or a scope opened inside it is still open.
        """
        caches = self._caches
        slot = self.slot
        if caches is not None and slot is not None and slot.stack.regions[-1] is self:
            # The replay's hit: views remembered for this request index over this buffer.
            r = self.request
            try:
                entry = caches[r][specs]
            except (IndexError, KeyError, TypeError):
                pass
            else:
                released = self._released
                for block in self._expiring[r]:
                    if block not in released:
                        break  # kept past its planned life: the checked path names it
                else:
                    views = entry.serve(specs)
                    if views is not None and slot.buffer is self._buffer:
                        # The capture probe, asked once the views are built (as a plain
                        # request's hit asks it): a capture takes the bookkeeping.
                        probe = self._probe
                        if probe is not None and probe():
                            return self._captured(entry, specs, views)  # type: ignore[no-any-return]
                        if self._watch and not served(self._placer, slot, entry, specs, views):
                            return self._checked(slot, specs)  # type: ignore[no-any-return]
                        return self._hand(slot, entry, views)  # type: ignore[no-any-return]
        if slot is None:
            raise ArenaError(
                f"step {self.key!r} is not running: request inside its with block (with "
                "ws.step(key) as step: step.get_simultaneous(...))"
            )
        return self._checked(slot, specs)

    #: The Python request path: CompiledStep's compiled hit hands it what it does not serve.
    _python_get = get_simultaneous

    def _captured(self, entry: Any, specs: Any, views: Any) -> list[ViewT]:
        """A request the replay's hit found (``entry``, its fresh ``views``) while the
        capture probe says a CUDA graph is being captured: the buffer is marked captured
        (and the request noted where a request log listens), then the request is served as
        the hit serves it; where a growth replaced the buffer first, the checked path
        places it. The compiled hit hands it such a request with the views it built."""
        slot = self.slot
        assert slot is not None
        if not served(self._placer, slot, entry, specs, views, capturing=True):
            return self._checked(slot, specs)
        return self._hand(slot, entry, views)

    def _hand(self, slot: Slot, entry: Any, views: Any) -> list[ViewT]:
        """Hand out ``views``, the hit's for this request index (``entry``): the entry
        used, the call counted, the run's record of what it handed out, the next index."""
        r = self.request
        entry.used = True
        slot.count_call()
        kept = entry.views
        if not lean(self._quick, self._fresh_view, kept):
            kept = views  # the views themselves (see StepRun.handed)
        self.run.hand(r, self._starts, kept, views)
        self.request = r + 1
        return views  # type: ignore[no-any-return]

    def release(self, *views: Any) -> None:
        """End the life of ``views`` (handed out by this run) now; their bytes are free
        for the step's later requests.

        All or nothing: when one view is refused, none is released. What a front's
        ``write_into(view, value)`` returned (JAX: a new array over the view's bytes)
        stands for the view.

        Raises
        ------
        ArenaError
            A view this run did not hand out, released already, or given twice.
        """
        slot = self.slot
        if slot is None:
            raise ArenaError(f"step {self.key!r} is not running: release inside its with block")
        run = self.run
        if self._quick and 0 < len(views) <= RELEASE_MAX:
            # Hot path (a replay, no poisoning or debug mode): every view's block found,
            # distinct and live, before any is released; else the checked path names it.
            released = run.released
            blocks: list[int] = []
            for view in views:
                found = run.find(view)
                if found is None or found[0] in released or found[0] in blocks:
                    break
                blocks.append(found[0])
            else:
                last = self.request - 1  # a diverging replay records it
                for block in blocks:
                    run.lasts[block] = last
                    released.add(block)
                return
        # All or nothing: every view is checked before any is released.
        by_view = run.views
        for block, (handed, given) in run.claim(views, self.key).items():
            run.lasts[block] = self.request - 1  # a diverging replay records it
            recorded = by_view.get(id(handed))
            # A recording's view, or a replay's (the run may record since: it adopted the
            # plan's record). The view ends, and a block the run counts live leaves its
            # live blocks and their bytes, in one call (no interrupt among them).
            counted = run.end_block(
                block, handed, given, recorded is not None and recorded[1] is handed
            )
            if self.replay:  # its place is the plan's; the plan's LOAD stays counted
                if not (self._poison or self._debug):
                    continue
                book = self._book
                assert book is not None and book.offsets is not None
                placed = (book.offsets[block], book.sizes[block])
            else:
                # The step's count follows the run's, then the stack counts from it: an
                # interrupt at a call between leaves a figure behind until the run's next
                # request or its close derives and counts it again.
                assert counted is not None  # recording: every block handed out is live
                placed = counted
                # The count under the innermost (this step, where a region opened inside
                # it is open) is marked stale first: an interrupt at the settle's call
                # leaves no count the innermost's settles carry on (RegionStack.recount).
                slot.stack.recount()
                self.held = run.held
                slot.stack.settle(slot.stack.top, self)
            if self._poison:
                offset, size = placed
                poison_slot_bytes(slot, self.base + offset, self.base + offset + size)
            if self._debug:
                self._placer.retire([handed] if given is handed else [handed, given])

    #: The Python release: CompiledStep's compiled release hands it what it does not serve.
    _python_release = release

    def _start_inside(self, outer: Step[Any]) -> int:
        """Start right inside the run ``outer``, above its live views only; returns what
        ``outer`` counts as live beyond them (a replay counts its plan's LOAD; a
        recording counts its live blocks and never more, so nothing: its count follows
        them with no call between, or is derived from them, and only falls behind them,
        by a block an interrupted request booked, until its next request)."""
        plan = outer._book if outer.replay else None
        height, holds, self.under = outer.run.live_extent(plan)
        self.base = self.end = outer.base + height
        return max(0, outer.held - holds) if plan is not None else 0

    def note_above(self, reach: int) -> None:
        """What this run holds above its end reached byte ``reach`` of the slot (a plain
        request or a scope's, or a step run inside it with what it held above): the
        run's replays place it above the plan's end."""
        self.above = max(self.above, reach - self.end)

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        slot = self.slot
        if slot is None:
            return
        run, book = self.run, self._book
        if (
            kind is None
            and self._quick
            and self.nested is None
            and book is not None
            and run is not _ENDED
            and not run.broken
            and len(slot.stack.regions) == 1
            and slot.stack.regions[0] is self
        ):
            self._end_replay(slot, run, book)
            return
        self._exit_checked(slot, run, book, kind)

    #: The Python enter and exit: CompiledStep's compiled ones hand them what they do not do.
    _python_enter = __enter__
    _python_exit = __exit__

    def _exit_checked(
        self, slot: Slot, run: StepRun, book: StepBook | None, kind: type[BaseException] | None
    ) -> None:
        """Every exit: whatever ended the run (``kind``), and whatever is open."""
        start, end = self.base, self.end
        handed: list[Any] = []
        try:
            if run is not _ENDED and book is not None:
                self.run = _ENDED  # first: an exit run again (healing) counts it once
                handed = self._finish(slot, run, book, kind)
        finally:  # whatever interrupted the bookkeeping, the region closes
            if book is not None:
                book.running = False
            self._quick = False
            self._buffer = self._caches = None
            close_region(self)
            self.nested = None
        if self._poison and end > start:
            poison_slot_bytes(slot, start, end)
        if handed:
            self._placer.retire(handed)

    def _end_replay(self, slot: Slot, run: StepRun, book: StepBook) -> None:
        """The exit of the usual replay, what ``__exit__`` does in fewer steps: ended
        normally, no poisoning or debug mode, the only region open on its slot (no step
        below to tell, nothing above to keep)."""
        start = self.base
        try:
            self.run = _ENDED  # first: an exit run again (healing) counts it once
            book.ran(start, self.above, nested=None, replay=True, nests=run.nests)
        finally:  # whatever interrupted the bookkeeping, the region closes
            book.running = False
            self._quick = False
            self._buffer = self._caches = None
            if slot.governor.debug:  # as close_region: once per region, before the stack
                slot.leave(self)
            slot.close_region(self, start, 0)  # close_region(self), nothing else open
            self.slot = None
            self.nested = None

    def _finish(
        self, slot: Slot, run: StepRun, book: StepBook, kind: type[BaseException] | None
    ) -> list[Any]:
        """An ending run's record (ended normally, every request booked) and its reach in
        the step it ran inside; returns the views debug mode retires."""
        handed = run.live_witnesses() if self._debug else []
        start, end = self.base, self.end
        if kind is None and not run.broken:  # an interrupted run is not a record
            if not self.replay:
                end_recording(run, book, start, self.request)
                # The outermost step below: a step closed out of order and entered again
                # above one opened inside it names it in turn, so stop at a step seen.
                # (Ids of steps alive here; a set, not any() over a generator: one left
                # suspended is closed when collected, and an interrupt there is lost.)
                root, seen = self.nested, {id(self)}
                while root is not None and root.nested is not None:
                    seen.add(id(root))
                    if id(root.nested) in seen:
                        break
                    root = root.nested
                if root is not None and root._book is not None:
                    root._book.stale = True  # its next run sizes the slot for this plan
            book.ran(start, self.above, nested=self.nested, replay=self.replay, nests=run.nests)
        outer = slot.stack.step_below(self)
        if outer is not None:  # its replays put this run above their plan: it reaches
            outer.note_above(end + self.above)  # this run's end plus what it had above
            # Replays start it at the end of the blocks live under it at its start (right
            # inside: those, not every block the plan may have live at that request, which
            # counts one released just before it) or lifted above their plan (a scope).
            right_inside = self.inside and outer is self.nested
            place = self.under if right_inside else max(0, start - outer.end)
            outer.run.nests.append((outer.request, self.key, place, end + self.above - start))
        return handed

    # ------------------------------------------------------------------ internals
    def _checked(self, slot: Slot, specs: Any) -> list[ViewT]:
        """Every request the replay's hit does not serve: records, diverges, or places at
        the plan's offsets and remembers the views."""
        if slot.stack.regions[-1] is not self:
            heal_regions(slot)  # one above it an interrupt left open
        if slot.stack.regions[-1] is not self:
            inner = slot.stack.regions[-1]
            if isinstance(inner, Step):
                raise ArenaError(
                    f"step {inner.key!r}, opened inside step {self.key!r}, is still open: "
                    f"make step {self.key!r}'s requests before or after it"
                )
            raise ArenaError(
                f"a scope opened inside step {self.key!r} is still open: make the step's "
                "requests outside it (or through the scope)"
            )
        book, run, r = self._book, self.run, self.request
        assert book is not None
        layout = compute_layout(specs, self._alignment)
        sizes = [round_up(v.nbytes, self._alignment) for v in layout.views]
        if self.replay and not fits(book, r, sizes, run.released):
            self._diverge(slot, r, sizes)
        if self.replay:  # the replay: the plan's offsets
            blocks, offsets = planned_places(book, r, len(sizes))
        else:  # the recording: the lowest gap
            blocks, offsets = lowest_gap(run, sizes)
        # Resolve: the views at the run's start plus their offsets.
        base = self.base
        placed = tuple(
            ViewLayout(v.shape, v.dtype, base + o, v.nbytes, v.strides)
            for v, o in zip(layout.views, offsets, strict=True)
        )
        end = base + max((o + s for o, s in zip(offsets, sizes, strict=True)), default=0)
        extent = max(end, self.end)
        views = self._placer.place(
            slot,
            Layout(placed, extent, self._alignment),
            specs,
            what=f"step {self.key!r} request {r}",
            memo=self._keep(r, specs) if self.replay else None,
        )
        assert views is not None  # strict placement raises instead
        # An interrupt between here and the request's count leaves the run broken: it is
        # no record (its blocks and requests may not match).
        run.broken = True
        held = self.held
        if self.replay:
            run.hand(r, book.starts, views, views)  # kept: the views themselves
        else:  # recorded once placed: a refused request is no block
            book_request(run, r, views, blocks=blocks, offsets=offsets, sizes=sizes)
            # Derived, not added: a block an interrupted request booked is counted too
            # (the run counts its live blocks' bytes as it books them: O(1) here).
            held = run.held
        top = extent if extent > self.end else slot.stack.top
        # The step's own figures in one store, then the stack recounts from them (every
        # request here does: one an interrupt left behind is recounted by the next).
        self.end, self.held = max(self.end, extent), held
        slot.stack.settle(top, self)
        if not self.replay:
            slot.note_load(slot.stack.live)
        self.request, run.broken = r + 1, False
        return views  # type: ignore[no-any-return]

    def _keep(self, r: int, specs: Any) -> Callable[[Buffer, Any], None]:
        """Where a replayed request's views are remembered (see
        :func:`~arena.planning.replay.remembering`)."""
        book = self._book
        assert book is not None
        return remembering(
            self._placer,
            self._memo,
            requests=len(book.counts),
            r=r,
            specs=specs,
            install=self._hit_from,
        )

    def _hit_from(self, buffer: Buffer, caches: list[dict[Any, Any]]) -> None:
        """The replay's hit looks in ``caches`` (remembered over ``buffer``), while
        ``buffer`` is the slot's."""
        slot = self.slot
        if slot is not None and buffer is slot.buffer:
            self._buffer, self._caches = buffer, caches

    def _diverge(self, slot: Slot, r: int, sizes: list[int]) -> None:
        """Request ``r`` leaves the plan: refused locked or capturing, else the run goes
        back to recording."""
        book = self._book
        assert book is not None
        refuse_divergence(slot, self.key, book, r, sizes)
        # Record from here: the requests so far are recorded as planned, and their live
        # blocks keep their planned offsets (counted live now, as a recording run does).
        # Broken until every field says so (an interrupt halfway: no record).
        run = self.run
        run.broken = True
        run.adopt(book, r)
        held = run.held
        self._quick, self._caches = False, None  # no hit (the checked path) from here
        # The switch to recording and what the step holds then (the adopted blocks, not
        # the plan's LOAD) in one store, then the stack recounts its live bytes from the
        # regions' counts: an interrupt before the store leaves a replay (the request
        # diverges again), one at the recount's call the stack's figure behind until the
        # run's next request or its close recounts it.
        self.replay, self.held, run.broken = False, held, False
        slot.stack.settle(slot.stack.top, self)


class CompiledStep(Step[ViewT]):
    """A :class:`Step` whose replayed requests are served by the compiled hit
    (``arena.planning._region_hit``); every other request goes to the same Python path. Made only
    where the extension is in use."""

    __slots__ = ()

    if compiled is not None:
        get_simultaneous = compiled.StepHitBase.get_simultaneous
        release = compiled.StepHitBase.release
        __init__ = compiled.StepHitBase.__init__
        __enter__ = compiled.StepHitBase.__enter__
        __exit__ = compiled.StepHitBase.__exit__


def _bind_compiled(read_rlocks: bool = True) -> bool:
    """Tell the compiled init, enter and exit where they read and write (see
    ``arena/planning/_region_hit.c``): the fields of Step, StepRun, StepBook, StepBooks (a slot's
    step books, found among its stores), the placer, Slot and Governor, and how
    ``__init__`` makes a step's fields and a run's (from two of each made in Python, the
    steps from seven marks for their arguments). Returns whether the governor's RLock is
    read directly (``read_rlocks`` and a layout that checks out; else it is taken and
    given back by its methods)."""
    assert compiled is not None
    marks: tuple[Any, ...] = tuple(object() for _ in range(7))
    placer, select, key, alignment, poison, debug, fresh = marks
    steps: tuple[Step[Any], ...] = tuple(
        Step(placer, select, key, alignment=alignment, poison=poison, debug=debug, fresh_view=fresh)
        for _ in range(2)
    )
    kinds = (Step, StepRun, StepBook, StepBooks, ViewBuilder, type(RLock()), Slot, Governor)
    runs = (StepRun(), StepRun())
    return bool(compiled.bind_steps(*kinds, _ENDED, runs, steps, marks, read_rlocks))


#: Whether the compiled enter and exit read the governor's RLock directly.
READS_RLOCK = _bind_compiled() if compiled is not None else False


def step_class() -> type[Step[Any]]:
    """The class of new steps: :class:`CompiledStep` where the compiled hit path is in use
    (:data:`arena.views.hit.HIT_PATH`), else :class:`Step`."""
    return CompiledStep if hit.HIT_PATH == "compiled" and compiled is not None else Step
