"""The requests a front's hit does not serve, as one miss path.

:meth:`ViewBuilder.miss` reads top to bottom, like vLLM's ``_ensure_workspace_size``: the
placement (for a plain request: the structure's plan serves it in the slot's current buffer
when it fits, :meth:`ViewBuilder.deliver`, else hands over its placement; a first sighting
on a NumPy front handing out fresh views is placed from the request, by the front's
compiled planner or by ``compute_layout``, and planned at its second; else the request's
layout, at offset 0 or above the scopes and steps open on the slot), ensure the capacity
(the slot grows under the arena's mutex, :meth:`~arena.slots.slot.Slot.ensure`), build the
views from the buffer and the placement (a :class:`~arena.base.layout.Layout`: per view its
offset, shape, strides and dtype, and the total bytes), remember them for the hit, one
observer branch (capture mark, request log), return. Scopes and steps pick their own
placement and come in through :meth:`ViewBuilder.place`. The structure's plan is found or
made here, next to its one caller (:func:`plan_for`). ``tests/views/test_request_path.py``
bounds how many functions and files a first request passes, and how often it calls back
into a file it had left. ``miss`` is one function, not split to fit a statement count:
split, every request a plan serves in the current buffer paid a frame more (5 %, measured).

Every method reads the slot's buffer and builds views over that buffer only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from arena.base.events import RequestLog, logger
from arena.base.layout import Layout, compute_layout, shifted
from arena.base.poison import poisoned
from arena.errors import GraphCaptureError
from arena.slots.regions import heal_regions
from arena.slots.slot import Buffer, Resize, Slot, check_in_bounds
from arena.slots.table import SlotTable
from arena.views.framework import FrameworkViews
from arena.views.plan import MAX_PLANS, SEQUENCES, Plan, make_plan
from arena.views.prepared import Prepared, guarded_server, plain_key, prepare, remember, server

__all__ = ["ALWAYS", "NEVER", "ONCE", "ViewBuilder", "plan_for", "structure_of"]

#: How :meth:`ViewBuilder.miss` keeps the views of a request: remembered for later
#: identical requests (plain requests at offset 0), remembered from the request's second
#: sighting (a plain request at offset 0 placed by its structure's plan or by the front's
#: planner, on a front that does not hand out the same objects: a plan-built request is
#: remembered from its second sighting too, :meth:`ViewBuilder.deliver`), or never (views
#: placed above scopes and in steps: their offsets are not the request's).
ALWAYS, ONCE, NEVER = 2, 1, 0
#: What plan_for finds for a structure it has no entry for (a plan may be None).
_UNKNOWN: Any = object()


class ViewBuilder:
    """Builds, places and remembers one front's views.

    Parameters
    ----------
    table : SlotTable
        The arena's slots (growth announcements).
    adapter : Adapter
        The framework's adapter.
    cached : bool
        Cached front: hand out the prepared objects themselves.
    max_cached : int
        Prepared view sets kept per slot buffer.
    poison : bool
        Fill every request's views with a sentinel.
    log : RequestLog or None
        Told of every unlocked request.
    """

    __slots__ = (
        "_adapter",
        "_cached",
        "_governor",
        "_guarded",
        "_last_plan",
        "_max_cached",
        "_name",
        "_plans",
        "_poison",
        "_seen",
        "_shared",
        "_table",
        "_views",
        "fresh",
        "fresh_view",
        "key",
        "later",
        "log",
        "planner",
        "probe",
    )

    def __init__(
        self,
        table: SlotTable,
        adapter: Any,
        *,
        cached: bool,
        max_cached: int,
        poison: bool,
        log: RequestLog | None,
    ) -> None:
        self._table = table
        self._governor = governor = table.governor
        self._adapter = adapter
        self._views = FrameworkViews(adapter, governor)
        self._name: str = adapter.framework
        self._cached = cached
        self._max_cached = max_cached
        self._poison = poison
        self.log = log
        self.probe = governor.capture_probe
        self._plans: dict[Any, Plan | None] = {}
        self._last_plan: Plan | None = None
        #: The compiled Planner (``arena.views._hit.Planner``) that builds a structure's
        #: first sighting in C, or None (set by a compiled NumPy front, see miss).
        self.planner: Any = None
        #: The structures seen once, planned at their second sighting, where the front
        #: places a first sighting from the request (a NumPy front handing out fresh
        #: views: in C by :attr:`planner`, else by ``compute_layout``); None where a
        #: structure is planned at its first sighting (set by the front).
        self.later: dict[Any, bool] | None = None
        # Layouts a plan served once and did not remember yet (see deliver).
        self._seen: dict[Any, Any] = {}
        # Cached fronts hand out the prepared objects themselves where the adapter allows
        # it (JAX does not: a shared jax.Array may hold a host copy cached by an earlier
        # read, which would show stale bytes).
        self._shared = shared = cached and adapter.shares_views
        # The in-place-change guard costs about 0.1 us per view per call, a third of a
        # cached request: it runs in debug mode.
        self._guarded = shared and governor.debug
        #: Where this front's entries live in a buffer's ``prepared``. Cached fronts keep
        #: their own entries: a caller's in-place change must never leak into an uncached
        #: front.
        #: A torch front of inference tensors keeps its own too (``Adapter.space``).
        space: str = adapter.space
        self.key = f"{space}/cached" if cached else space
        #: Fresh views of prepared ones (the hand-out of every request).
        self.fresh: Callable[[Any], list[Any] | None] = list if shared else adapter.fresh_views
        #: How the compiled hit path makes one fresh view: a per-view function, None for
        #: the prepared view itself, False to leave every request to Python.
        self.fresh_view: Any = None if shared else (adapter.fresh_view or False)
        if poison:  # every request's views are filled with a sentinel on return
            self.fresh = poisoned(adapter, self.fresh)
            self.fresh_view = False

    @property
    def framework(self) -> str:
        """The framework of the views."""
        return self._name

    def retire(self, views: Sequence[Any]) -> None:
        """Debug mode: make ``views`` unusable where the framework allows it.

        Not on a cached front that hands out shared objects: the next request of the same
        layout hands the very same objects out again (poisoning still marks the bytes).
        """
        if not self._shared:
            self._adapter.retire_views(views)

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
        """The bookkeeping of a served request off the locked hot path: mark a capture and
        note the request while unlocked.

        A buffer read by a CUDA graph being captured is marked under the arena's mutex, so
        no concurrent growth can release it unmarked; when a growth replaced it between
        the read and the mark, the request is served again from the current buffer
        (``retry``, by default the plain request). ``capturing`` is the capture probe's
        answer where the caller asked it already (the compiled hit path), after the views
        were built.
        """
        if capturing is None:
            probe = self.probe
            capturing = probe is not None and bool(probe())
        if capturing and not slot.mark_captured(buffer):
            slot.count_call(-1)  # counted again by the request that replaces this one
            try:
                if retry is not None:
                    return retry()
                return self.miss(slot, specs, strict)
            except GraphCaptureError as exc:
                raise GraphCaptureError(
                    f"slot {slot.describe()} was resized by another thread while this "
                    "thread was capturing a CUDA graph (between building this request's "
                    "views and marking them captured), and the new buffer cannot serve it "
                    f"during the capture: {exc}. Finish growth before capturing (warm-up "
                    "or reserve()), and keep other threads from growing the arena during a "
                    "capture (lock() it first)"
                ) from exc
        log = self.log
        if log is not None and not self._governor.locked:
            log.note(required, slot.index, specs)
        return views  # type: ignore[no-any-return]

    def place(
        self,
        slot: Slot,
        layout: Layout,
        specs: Any,
        *,
        strict: bool = True,
        keep: int = NEVER,
        what: str = "",
        memo: Callable[[Buffer, Prepared], None] | None = None,
    ) -> list[Any] | None:
        """A scope's or a step's request, at the placement it picked (its record, a
        :class:`~arena.base.layout.Layout`): :meth:`miss`."""
        return self.miss(slot, specs, strict, layout, keep=keep, what=what, memo=memo)

    def miss(  # noqa: PLR0915 (one path read top to bottom: split, a frame more per plan)
        self,
        slot: Slot,
        specs: Any,
        strict: bool = True,
        layout: Layout | int | None = None,
        *,
        keep: int = ALWAYS,
        what: str = "",
        memo: Callable[[Buffer, Prepared], None] | None = None,
    ) -> list[Any] | None:
        """A request a hit did not serve: views of ``specs`` in ``slot`` at ``layout`` (the
        placement: offsets from the buffer's start), growing the slot to ``layout.total``
        bytes if needed. The one way plain requests, scopes and steps (:meth:`place`) get
        views, read top to bottom, like vLLM's ``_ensure_workspace_size``.

        1. *Placement.* ``layout`` None is a plain request: the
           structure's plan over the slot's current buffer, which hands the views it
           built to :meth:`deliver` where they fit (making its sources over the buffer
           only then), else its placement; a first sighting on a front that plans
           structures :attr:`later` is placed from the request (by the compiled
           :attr:`planner`: the total alone; in Python: its layout), built at once where it
           fits; both are built after the growth and remembered from
           the second sighting on (:data:`ONCE`; at once by a cached front); else the
           request's layout, at offset 0, or above the scopes and steps open on the slot
           (then not remembered: the base moves). Scopes and steps pass their own
           placement, and ``keep``.
        2. *Capacity*: the slot grows (under the arena's mutex,
           :meth:`~arena.slots.slot.Slot.ensure`); its listeners hear of it.
        3. *Views*, built over the buffer at the placement.
        4. *Remember*: as a plain request at offset 0 (``keep``: :data:`ALWAYS`,
           :data:`ONCE`, :data:`NEVER`), or as ``memo(buffer, entry)`` is given them as a
           :class:`Prepared` (step replays).
        5. *One observer branch*: a capture mark, the request log.
        6. *Return* fresh views.

        ``what`` names a scope or step request in the locked error (``strict``) that
        growth while locked raises.
        """
        # 1. The placement of a plain request. ``above``: None at offset 0, else the top of
        # the scopes and steps open on the slot (the views' base).
        above: int | None = None
        if layout is None:
            buffer: Buffer | None = slot.buffer
            # A slot holding no memory (never sized, or closed) takes the general path,
            # which serves zero-byte requests and raises ArenaClosedError.
            if buffer is not None and buffer.allocation is not None and not slot.detour:
                built: Any = None
                plan = self._last_plan
                if plan is not None:
                    # The same structure as last time calls the plan itself, with its
                    # sources over this buffer where made (None: True where it fits).
                    built = plan.build(specs, buffer.capacity, buffer.wrappers.get(plan.key))
                if built is None:  # another structure than last time
                    planned = plan_for(
                        self._plans, specs, self._adapter, self._governor.alignment, self.later
                    )
                    planner = self.planner
                    if planned is False and planner is None:  # a first sighting, in Python
                        # Its layout (what the Planner computes in C); built here where it
                        # fits, else after the growth; remembered from the second sighting.
                        built = compute_layout(specs, self._governor.alignment)
                        if built.total <= buffer.capacity:
                            views = self._views.typed(buffer, built)
                            return self.deliver(
                                slot, buffer, specs, built.total, views, strict=strict
                            )
                        keep = ONCE
                    elif planned is False:  # a first sighting: the planner builds it in C
                        source = buffer.wrappers.get(self._views.name)  # its import
                        made = None
                        if source is None:
                            # No import of this buffer yet: one that does not fit grows
                            # first (its total, as the planner gives it), never importing
                            # the buffer, which a capture refuses (FrameworkViews.wrapper).
                            total = compute_layout(specs, self._governor.alignment).total
                            if total > buffer.capacity:
                                made = total
                            else:
                                source = self._views.wrapper(buffer)
                        if made is None:
                            made = planner.views(specs, source, buffer.capacity)
                        if made.__class__ is tuple:
                            return self.deliver(
                                slot, buffer, specs, made[0], made[1], strict=strict
                            )
                        if made is not None:  # the total, more than the buffer holds
                            built, keep = made, ONCE
                        else:  # a request the planner leaves to Python: its plan, now
                            planned = plan_for(
                                self._plans, specs, self._adapter, self._governor.alignment
                            )
                    if keep != ONCE:
                        plan = planned if isinstance(planned, Plan) else None
                        if plan is not None:
                            sources = buffer.wrappers.get(plan.key)  # None: True if it fits
                            built = plan.build(specs, buffer.capacity, sources)
                            self._last_plan = plan
                if built is True:  # it fits: the plan's sources over this buffer, then views
                    built = self._views.build(plan, buffer, specs)  # type: ignore[arg-type]
                if built.__class__ is Layout or keep == ONCE:  # more than the buffer holds
                    layout = built
                    if not self._cached:
                        # Seen once: remembered from the second sighting on, as deliver()
                        # remembers what a plan builds (no entry for a one-off layout).
                        keep = ONCE
                        seen = self._seen
                        if len(seen) < self._max_cached:  # remember() once full
                            try:
                                seen[specs] = True
                            except TypeError:  # unhashable (list shapes): never remembered
                                pass
                        else:
                            remember(seen, specs, True, self._max_cached)
                elif built:
                    plan.built()  # type: ignore[union-attr]
                    return self.deliver(slot, buffer, specs, built[0], built[1], strict=strict)
            # No reference to the buffer that growth may replace, nor to its imports: the
            # old block must go back before the new one is allocated.
            buffer = source = sources = None
            if layout is None:
                # A plain request lives at offset 0, or above the scopes and steps open
                # on the slot (then its views are not remembered: the base moves).
                layout = compute_layout(specs, self._governor.alignment)
                if slot.stack.regions:
                    heal_regions(slot)  # one an interrupt left open, its owner gone
                if slot.stack.top or slot.stack.regions:
                    above = slot.stack.top
                    keep = NEVER
                    if above:
                        layout = shifted(layout, above)
        required = layout.total if isinstance(layout, Layout) else layout
        buffer, resizes = slot.ensure(required)  # counts the request it gives a buffer
        # At offset 0 nothing else is live (ensure() raised the high-water mark). A request
        # refused from here on never held bytes: it counts neither in LOAD nor as a call.
        # Only a listener hearing of the resize (it may raise, or close the arena) or a
        # capture (no first import of a buffer then) can refuse it: LOAD waits for the
        # views where either may.
        note = buffer is not None and keep != NEVER and required > slot.plain_high
        watched = self.probe is not None or bool(resizes and self._table.listeners)
        if note and not watched:
            slot.note_load(required, reach=required)
        try:
            # Announced where anyone hears of it (the rule: SlotTable.announce).
            if resizes and (
                self._table.watched or self._governor.notes or logger.isEnabledFor(logging.DEBUG)
            ):
                self._table.announce("resize", resizes)
                if self._governor.closed:  # a listener closed the arena
                    self._governor.check_open()
            if buffer is None:
                if strict:
                    raise slot.locked_error(required, what)
                return None
            if required > buffer.capacity:  # raises: a bug in arena
                check_in_bounds(
                    slot,
                    buffer,
                    layout
                    if isinstance(layout, Layout)
                    else compute_layout(specs, self._governor.alignment),
                )
            views = self._views.typed(buffer, layout, specs, self.planner)
        except BaseException:
            if buffer is not None:
                slot.count_call(-1)  # ensure() counted it; it was refused after all
            raise
        if note and watched:
            slot.note_load(required, reach=required)
        if keep != NEVER:
            if keep == ALWAYS:
                prepare(
                    buffer.prepared,
                    self.key,
                    specs,
                    required,
                    views,
                    fresh=self.fresh,
                    limit=self._max_cached,
                    guarded=self._guarded,
                )
                handed = self.fresh(views)
            else:  # ONCE: handed out as built, remembered from the second sighting on
                if self._poison:
                    self._adapter.fill(views)
                handed = views
            if self.probe is not None:  # the observer branch: a capture mark, the log
                return self.served(slot, buffer, specs, required, handed, strict=strict)
            if self.log is not None and not self._governor.locked:
                self.log.note(required, slot.index, specs)
            return handed

        # Served again from the current buffer if a growth replaced it before the capture
        # mark (a partial, not a closure: no cell for the locals of every request).
        again = partial(self.miss, slot, specs, strict, layout, keep=NEVER, what=what)
        served = self.served(slot, buffer, specs, required, views, strict=strict, retry=again)
        if served is views:
            # Kept in any mode: typed views are built outside torch.inference_mode()
            # whatever the caller's mode (views_can_be_kept is about a plan's views, not
            # these), so a replay run under inference mode is served by the hit like one
            # under no_grad.
            if memo is not None and plain_key(specs):
                entry = Prepared(required, views, specs)
                entry.serve = server(specs, views, self.fresh)
                memo(buffer, entry)
            served = self.fresh(views)
        if above is not None and served is not None:
            # Live from the slot's start: what the scopes and steps hold, and this request.
            slot.note_load(slot.stack.live + required - above, reach=required)
        return served

    def remember(self, cache: dict[Any, Any], key: Any, entry: Prepared) -> None:
        """Keep ``entry`` in ``cache`` (bounded like every cache of prepared views)."""
        remember(cache, key, entry, self._max_cached)

    def announce(self, resizes: Sequence[Resize]) -> None:
        """Tell the arena's listeners of ``resizes`` (a slot shrunk by step planning)."""
        if resizes:
            self._table.announce("resize", resizes)

    def deliver(
        self,
        slot: Slot,
        buffer: Buffer,
        specs: Any,
        required: int,
        views: list[Any],
        *,
        strict: bool,
    ) -> list[Any] | None:
        """Hand out the views a plan built: count the call, remember them, then the
        observer branch (mark a capture, note the request).

        Views built by a plan are remembered from a layout's second sighting on (or at
        once by a cached front): a layout seen once is handed out as built, which saves
        the copies a remembered set needs and keeps one-off layouts from sweeping the
        cache.
        """
        if required > slot.high_water:
            slot.note_high_water(required)
        if required > slot.plain_high:
            slot.note_load(required, reach=required)  # at offset 0: nothing else is live
        slot.count_call()
        admit = True
        if not self._cached:
            seen = self._seen
            try:
                admit = seen.pop(specs, False)
            except TypeError:  # unhashable (list shapes): never remembered
                admit = False
            else:
                if not admit:
                    remember(seen, specs, True, self._max_cached)
        handed = views
        if not admit:
            if self._poison:
                self._adapter.fill(views)
        else:
            if not self._adapter.views_can_be_kept():
                # e.g. built inside torch.inference_mode(): remember views built outside it
                layout = compute_layout(specs, self._governor.alignment)
                views = self._views.typed(buffer, layout)
            cache = buffer.prepared.get(self.key)
            if cache is None:
                cache = buffer.prepared[self.key] = {}
            entry = Prepared(required, views, specs)
            if self._guarded:
                entry.serve = guarded_server(cache, specs, entry, self.fresh)
            else:
                entry.serve = server(specs, views, self.fresh)
            remember(cache, specs, entry, self._max_cached)
            handed = self.fresh(views)  # type: ignore[assignment]
        return self.served(slot, buffer, specs, required, handed, strict=strict)


def plan_for(
    plans: dict[Any, Plan | None],
    specs: Any,
    adapter: Any,
    alignment: int,
    later: dict[Any, bool] | None = None,
) -> Plan | bool | None:
    """The plan of ``specs``'s structure from ``plans`` (a front's), made and kept on first
    sight; None when the request has no plan (the general path serves it).

    With ``later`` (the structures seen once, kept by a front that places a first sighting
    from the request, :attr:`ViewBuilder.later`), a structure
    is planned at its second sighting: the first is noted there, and False returned."""
    structure = structure_of(specs)
    if structure is None:
        return None
    try:
        # get(), not [] and KeyError: the exception cost a first sighting about 0.3 us.
        plan = plans.get(structure, _UNKNOWN)
    except TypeError:  # an unhashable dtype object
        return None
    if plan is not _UNKNOWN:
        return plan  # type: ignore[no-any-return]
    if later is not None and not later.pop(structure, False):
        if len(later) < MAX_PLANS:  # remember() once full: no call on a first request
            later[structure] = True
        else:
            remember(later, structure, True, MAX_PLANS)
        return False
    plan = make_plan(structure, adapter, alignment)
    if len(plans) < MAX_PLANS:
        plans[structure] = plan  # hashable: the lookup above found no TypeError
    else:
        remember(plans, structure, plan, MAX_PLANS)
    return plan


def structure_of(specs: Any) -> tuple[Any, ...] | None:
    """``((ndim, dtype), ...)`` of a request, or None when it is not a sequence of
    ``(shape, dtype)`` pairs (tuples or lists) with tuple or list shapes (the general path
    explains)."""
    structure = []
    try:
        for spec in specs:
            if not isinstance(spec, SEQUENCES) or len(spec) != 2:
                return None
            shape = spec[0]
            if not isinstance(shape, SEQUENCES):
                return None
            structure.append((len(shape), spec[1]))
    except TypeError:
        return None
    return tuple(structure)
