"""Steps: recorded request sequences whose bytes are planned by lifetime.

``with ws.step("layer") as step:`` records a key's first run, plans it from the second
(:func:`~arena.planning.plan_offsets`) and replays the plan's pointers after; views live
until ``step.release(view)`` or the step's end (the whole contract: docs/planning.md)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from arena.base.events import caller_info, warn_user
from arena.base.layout import Layout, ViewLayout, compute_layout, round_up
from arena.base.poison import poison_slot_bytes
from arena.errors import ArenaError, ArenaLockedError, GraphCaptureError, SpecError
from arena.planning.nesting import cover_nested
from arena.planning.records import StepBook, StepRun, fit_to_plans
from arena.planning.scopes import Placer, close_region, heal_regions, open_region
from arena.planning.stepcheck import divergence, fits, refused_release
from arena.slots.slot import Slot
from arena.uncopyable import refuse_copies
from arena.views import hit
from arena.views.aliases import origin_of
from arena.views.hit import StepHitBase, compiled

__all__ = ["CompiledStep", "Step", "step_class"]

ViewT = TypeVar("ViewT")


#: The run of a step that is not running (never written: entering makes a new one).
_ENDED = StepRun()


class Step(StepHitBase, Generic[ViewT]):
    """One run of a step key (see the module doc). Obtain one from ``ws.step(key)`` or
    ``ws.torch.step(key)``; enter it with ``with``."""

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
        self.run = StepRun()
        self.replay = self.moved = False  # moved: what runs inside starts at a new height
        self.slot: Slot | None = None
        self.base = self.end = self.held = 0
        self.above = 0  # the most bytes a request inside the run needed above its end
        self.nested: Any = None  # the step running below this run on its slot, if any
        self.inside = False  # started right inside ``nested``, above its live views
        self.request = 0
        self._memo: tuple[Any, ...] = ()
        self._caches: list[dict[Any, Any]] | None = None
        self._buffer: Any = None  # the buffer whose remembered views _caches holds
        self._expiring: list[tuple[int, ...]] = []
        self._fresh_view = fresh_view
        self._watch = False
        self._bind(self.run, False)

    def __enter__(self) -> Step[ViewT]:
        if self.slot is not None:
            raise ArenaError(f"step {self.key!r} is already running; make a new ws.step()")
        slot = self._select()
        if slot.regions:
            heal_regions(slot)  # regions an interrupt left open, their owner gone
        book = slot.steps.get(self.key)
        if book is None:
            book = slot.steps.setdefault(self.key, StepBook())
        if book.running:
            raise ArenaError(
                f"step {self.key!r} is already running on slot {slot.describe()}: a step "
                "inside a run of the same key would share its record and plan; give the "
                "inner step a key of its own"
            )
        if not slot.regions and (book.stale or (not book.planned and book.runs)):
            # Plan the slot's keys and size it (stale: a key run inside recorded anew).
            self._placer.announce(fit_to_plans(slot, self._alignment))
        elif not book.planned and book.runs:
            # Only this key: the others are sized at their own first planned run.
            book.make_plan(self._alignment)
            cover_nested(slot.steps)
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
        # A capture probe, or a request log while unlocked: served requests need their
        # bookkeeping (decided per run: the hot path reads one flag).
        placer = self._placer
        self._watch = placer.probe is not None or (
            placer.log is not None and not slot.governor.locked
        )
        self.above = 0
        try:
            self.nested = slot.step_below(None)
            outer_step = self.nested if slot.regions and slot.regions[-1] is self.nested else None
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
                slot.account(end, held)
                self.end, self.held = end, held  # plain stores after the call: all or nothing
                slot.note_load(slot.live)
                # Where a replay's views are remembered: per front, key, start and plan.
                self._memo = (self._placer.key, "step", self.key, self.base, book.version)
                self._buffer = buffer = slot.buffer
                self._caches = buffer.prepared.get(self._memo)
                self._expiring = book.expiring
        except BaseException as error:  # a warning raised as an error, an interrupt
            self.__exit__(type(error), error, error.__traceback__)
            raise
        return self

    def _bind(self, run: StepRun, replay: bool) -> None:
        """Start ``run`` (a replay of the plan, or a recording): where the compiled hit
        and release read its records, and whether release() of one view may take the
        compiled hit."""
        self._released, self._handed = run.released, run.handed
        self._views, self._ended, self._lasts = run.views, run.ended, run.lasts
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
        if caches is not None and slot is not None and slot.regions[-1] is self:
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
                    if (
                        views is not None
                        and slot.buffer is self._buffer
                        and (not self._watch or self._served(slot, entry, specs, views))
                    ):
                        entry.used = True
                        slot.count_call()
                        self._handed.append((entry.metadata, views))
                        self.request = r + 1
                        return views  # type: ignore[no-any-return]
        if slot is None:
            raise ArenaError(
                f"step {self.key!r} is not running: request inside its with block (with "
                "ws.step(key) as step: step.get_simultaneous(...))"
            )
        return self._checked(slot, specs)

    #: The Python request path: CompiledStep's compiled hit hands it what it does not serve.
    _python_get = get_simultaneous

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
        if run.indexed < len(run.handed):
            run.index()
        by_view = run.views
        if len(views) == 1 and self.replay and not (self._poison or self._debug):  # hot path
            view = views[0]
            found = by_view.pop(id(view), None)
            if found is not None:
                block = found[0]
                run.ended[id(view)] = view
                run.lasts[block] = self.request - 1  # a diverging replay records it
                run.released.add(block)
                return
        # All or nothing: every view is checked before any is released.
        blocks: dict[int, tuple[Any, Any]] = {}  # block -> (the view handed out, given)
        for view in views:
            found = by_view.get(id(view))
            target = view
            if found is None:  # a live view's id is its own
                target = origin_of(view)  # the view a write_into result was written through
                found = by_view.get(id(target))
            if found is None or found[0] in blocks:
                raise refused_release(self.key, view, found is not None, id(target) in run.ended)
            blocks[found[0]] = (found[1], view)
        for block, (handed, given) in blocks.items():
            del by_view[id(handed)]
            run.ended[id(handed)] = handed
            run.ended[id(given)] = given
            run.lasts[block] = self.request - 1  # a diverging replay records it
            if self.replay:  # its place is the plan's; the plan's LOAD stays counted
                run.released.add(block)
                if not (self._poison or self._debug):
                    continue
                book = self._book
                assert book is not None and book.offsets is not None
                placed = (book.offsets[block], book.sizes[block])
            else:
                placed = run.live.pop(block)
                slot.account(slot.top, -placed[1])
                self.held -= placed[1]
            if self._poison:
                offset, size = placed
                poison_slot_bytes(slot, self.base + offset, self.base + offset + size)
            if self._debug:
                self._placer.retire([handed] if given is handed else [handed, given])

    #: The Python release: CompiledStep's compiled release hands it what it does not serve.
    _python_release = release

    def _start_inside(self, outer: Step[Any]) -> int:
        """Start right inside the run ``outer``, above its live views only; returns what
        ``outer`` counts as live beyond them (a replay counts its plan's LOAD)."""
        plan = outer._book if outer.replay else None
        height, holds = outer.run.live_extent(plan)
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

    def _finish(
        self, slot: Slot, run: StepRun, book: StepBook, kind: type[BaseException] | None
    ) -> list[Any]:
        """An ending run's record (ended normally, every request booked) and its reach in
        the step it ran inside; returns the views debug mode retires."""
        if self._debug:
            run.index()
        handed = [view for _, view in run.views.values()] if self._debug else []
        start, end = self.base, self.end
        if kind is None and not run.broken:  # an interrupted run is not a record
            if not self.replay:
                for block in run.live:
                    run.lasts[block] = max(self.request - 1, run.firsts[block])
                book.record(run, start)
                root = self.nested
                while root is not None and root.nested is not None:
                    root = root.nested
                if root is not None and root._book is not None:
                    root._book.stale = True  # its next run sizes the slot for this plan
            book.ran(start, self.above, nested=self.nested, replay=self.replay, nests=run.nests)
        outer = slot.step_below(self)
        if outer is not None:  # its replays put this run above their plan: it reaches
            outer.note_above(end + self.above)  # this run's end plus what it had above
            # Replays start it at their live views' end (right inside) or lifted (scope).
            lift = None if self.inside and outer is self.nested else max(0, start - outer.end)
            outer.run.nests.append((outer.request, self.key, lift, end + self.above - start))
        return handed

    # ------------------------------------------------------------------ internals
    def _served(self, slot: Slot, entry: Any, specs: Any, views: Any) -> bool:
        """Capture marks and the request log; False when a growth raced a capture."""
        if not self._placer.probe and (slot.governor.locked or self._placer.log is None):
            return True
        served = self._placer.served(
            slot, slot.buffer, specs, entry.required, views, strict=True, retry=lambda: None
        )
        return served is views

    def _checked(self, slot: Slot, specs: Any) -> list[ViewT]:
        """Every request the replay's hit does not serve: records, diverges, or places at
        the plan's offsets and remembers the views."""
        if slot.regions[-1] is not self:
            heal_regions(slot)  # one above it an interrupt left open
        if slot.regions[-1] is not self:
            inner = slot.regions[-1]
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
        if self.replay:
            blocks = range(book.starts[r], book.starts[r] + len(sizes))
            offsets = [book.offsets[b] for b in blocks]
        else:
            # The request's views side by side in the lowest gap that holds them all: one
            # search per request, not one per view (a request of n views stays O(n)).
            offset = run.first_fit(sum(sizes))
            offsets = []
            for size in sizes:
                offsets.append(offset)
                offset += size
            blocks = range(len(run.sizes), len(run.sizes) + len(sizes))
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
            memo=self._keep(r, specs, tuple(blocks)) if self.replay else None,
        )
        assert views is not None  # strict placement raises instead
        # An interrupt between here and the request's count leaves the run broken: it is
        # no record (its blocks and requests may not match).
        run.broken = True
        if self.replay:
            run.handed.append((tuple(blocks), views))
            if extent > self.end:
                slot.account(extent, 0)
        else:  # recorded once placed: a refused request is no block
            for view, block, offset, size in zip(views, blocks, offsets, sizes, strict=True):
                run.live[block] = (offset, size)
                run.views[id(view)] = (block, view)
            run.add(r, offsets, sizes)
            added = sum(sizes)
            slot.account(extent if extent > self.end else slot.top, added)
            self.held += added
        self.end = max(self.end, extent)
        if not self.replay:
            slot.note_load(slot.live)
        self.request, run.broken = r + 1, False
        return views  # type: ignore[no-any-return]

    def _keep(self, r: int, specs: Any, blocks: tuple[int, ...]) -> Callable[[Any, Any], None]:
        """Where a replayed request's views are remembered: per buffer, a dict per request
        index of this plan."""

        def store(buffer: Any, entry: Any) -> None:
            caches = buffer.prepared.get(self._memo)
            if caches is None:
                caches = buffer.prepared[self._memo] = [{} for _ in self._book.counts]  # type: ignore[union-attr]
            entry.metadata = blocks
            self._placer.remember(caches[r], specs, entry)
            if buffer is self.slot.buffer:  # type: ignore[union-attr]
                self._buffer, self._caches = buffer, caches

        return store

    def _diverge(self, slot: Slot, r: int, sizes: list[int]) -> None:
        book = self._book
        assert book is not None
        reason = divergence(book, r, sizes)
        caller = caller_info()
        where = f"step {self.key!r} request {r} from '{caller}' in slot {slot.describe()}"
        governor = slot.governor
        if governor.locked:
            raise ArenaLockedError(
                f"arena is locked but {where} diverges from the step's plan ({reason}); "
                "warm up every shape the step takes before lock() (the largest token count "
                "of each CUDA-graph bucket), or use one step key per shape",
                caller=caller,
                slot=(slot.ubatch, slot.lane),
                key=self.key,
            )
        if governor.capturing():
            raise GraphCaptureError(
                f"{where} diverges from the step's plan ({reason}) while a CUDA graph is "
                "being captured; run every shape the capture uses eagerly first"
            )
        # Record from here: the requests so far are recorded as planned, and their live
        # blocks keep their planned offsets (counted live now, as a recording run does).
        # Broken until every field says so (an interrupt halfway: no record).
        run = self.run
        run.broken = True
        run.adopt(book, r)
        held = sum(size for _, size in run.live.values())
        self._quick = False
        self._handed, self._caches, self.replay = run.handed, None, False
        slot.account(slot.top, held - self.held)
        self.held, run.broken = held, False


class CompiledStep(Step[ViewT]):
    """A :class:`Step` whose replayed requests are served by the compiled hit
    (``arena.views._hit``); every other request goes to the same Python path. Made only
    where the extension is in use."""

    __slots__ = ()

    if compiled is not None:
        get_simultaneous = compiled.StepHitBase.get_simultaneous
        release = compiled.StepHitBase.release


def step_class() -> type[Step[Any]]:
    """The class of new steps: :class:`CompiledStep` where the compiled hit path is in use
    (:data:`arena.views.hit.HIT_PATH`), else :class:`Step`."""
    return CompiledStep if hit.HIT_PATH == "compiled" and compiled is not None else Step
