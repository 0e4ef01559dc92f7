"""Fronts: one arena, seen through one framework.

``ws.torch``, ``ws.numpy``, ``ws.cupy`` and ``ws.jax`` are :class:`Front`
objects over the same slots. The request path reads top to bottom:
front (this module) -> :class:`~arena.slots.slot.Slot` -> :mod:`~arena.views.layout` -> adapter.

A request seen before in the same slot costs one dictionary lookup and one call of code
generated for it (an int check of its dimensions and one cheap fresh view per tensor). A
request with new sizes but a known structure is served by the structure's generated plan
(:mod:`arena.views.plan`). Neither takes a lock: both read the slot's current
:class:`~arena.slots.slot.Buffer` once and build views over that buffer only.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any, Generic, TypeVar

from arena.errors import GraphCaptureError
from arena.observe.requests import RequestLog
from arena.slots.slot import Buffer, Slot, check_in_bounds
from arena.slots.table import SlotTable
from arena.views.layout import compute_layout
from arena.views.plan import Plan, plan_for, server
from arena.views.poison import fill_views, poison_stale_bytes, poisoned
from arena.views.prepared import Prepared, metadata, remember, unchanged

__all__ = ["Front", "ViewT", "plain_key"]

#: The type of the views a front hands out (``torch.Tensor`` for ``ws.torch``, ...).
ViewT = TypeVar("ViewT")


class Front(Generic[ViewT]):
    """Hands out views of an arena's slots as one framework's arrays.

    Obtain one with ``ws.torch``, ``ws.numpy``, ``ws.cupy``, ``ws.jax`` or
    :meth:`arena.Arena.front`; do not construct it directly. A type checker sees
    ``ws.torch`` as ``Front[torch.Tensor]``, so its requests are lists of tensors.
    """

    __slots__ = (
        "_adapter",
        "_cached",
        "_debug",
        "_fresh",
        "_fresh_expression",
        "_governor",
        "_guarded",
        "_key",
        "_last_plan",
        "_log",
        "_max_cached",
        "_name",
        "_owner",
        "_plans",
        "_poison",
        "_probe",
        "_seen",
        "_select",
        "_table",
    )

    #: Debug mode, cached fronts: whether a hit's views still have the metadata they were
    #: made with (see :mod:`arena.views.prepared`). A plain function: no extra frame.
    _unchanged = staticmethod(unchanged)

    def __init__(
        self,
        owner: object,
        select: Callable[[], Slot],
        table: SlotTable,
        adapter: ModuleType,
        *,
        cached: bool = False,
        max_cached: int = 256,
        poison: bool = False,
        log: RequestLog | None = None,
    ) -> None:
        # Weak: the arena holds its fronts, and a cycle would keep every buffer alive
        # until the cycle collector runs after the arena is dropped.
        self._owner = weakref.ref(owner)
        self._select = select
        self._table = table
        self._governor = governor = table.governor
        self._adapter = adapter
        self._name: str = adapter.FRAMEWORK
        self._cached = cached
        self._max_cached = max_cached
        self._poison = poison
        self._log = log
        self._probe = governor.capture_probe
        self._plans: dict[Any, Plan | None] = {}
        self._last_plan: Plan | None = None
        # Layouts a plan served once and did not remember yet (see _deliver).
        self._seen: dict[Any, Any] = {}
        # Debug mode and poisoning take the checked path (_debug_request), off the hot one.
        self._debug = governor.debug or poison
        # The in-place-change guard costs about 0.1 us per view per call, a third of a
        # cached request: it runs in debug mode. JAX arrays are immutable.
        self._guarded = cached and self._name != "jax" and governor.debug
        # Cached fronts hand out the prepared objects themselves, so they keep their own
        # entries: a caller's in-place change must never leak into an uncached front.
        self._key = f"{self._name}/cached" if cached else self._name
        # JAX fronts hand out new arrays even when cached: a shared jax.Array may hold a
        # host copy cached by an earlier read, which would show stale bytes.
        self._fresh = list if cached and self._name != "jax" else adapter.fresh_views
        # How a hit makes its fresh views, in the code generated per remembered request.
        self._fresh_expression: str = (
            "{view}" if cached and self._name != "jax" else adapter.FRESH_EXPRESSION
        )
        if poison:  # every request's views are filled with a sentinel on return
            self._fresh = poisoned(self._name, self._fresh)
            self._fresh_expression = ""

    @property
    def cached(self) -> bool:
        """Whether repeated requests return the very same view objects."""
        return self._cached

    @property
    def framework(self) -> str:
        """The framework this front returns."""
        return self._name

    @property
    def arena(self) -> Any:
        """The :class:`~arena.Arena` behind this front.

        Raises
        ------
        ArenaClosedError
            If the arena was garbage collected (the front holds it weakly).
        """
        owner = self._owner()
        if owner is None:
            raise self._governor.closed_error()
        return owner

    def get_simultaneous(self, *specs: tuple[Any, Any]) -> list[ViewT]:
        """Views for several ``(shape, dtype)`` requests, valid until the next call.

        Parameters
        ----------
        *specs : tuple of (shape, dtype)
            ``shape`` a sequence of non-negative ints; ``dtype`` any NumPy, torch, JAX or
            ml_dtypes dtype, or a name such as ``"bfloat16"``.

        Returns
        -------
        list
            One view per request, in order, each covering exactly its own bytes at an
            offset aligned to the arena's alignment.

        Raises
        ------
        ArenaLockedError
            The request needs more memory than the slot holds while the arena is locked.
        ArenaClosedError
            The arena is closed.
        SpecError, DTypeError
            Malformed request.
        """
        slot = self._select()
        if self._debug:
            return self._debug_request(slot, specs, True)  # type: ignore[return-value]
        # The hit, inline: one lookup of the exact request in the slot's current buffer.
        buffer = slot.buffer
        cache = buffer.prepared.get(self._key)
        entry: Any = None
        if cache is not None and not slot.pending:
            try:
                entry = cache[specs]
            except (KeyError, TypeError):
                pass
            else:
                # The entry's server checks every dimension is a plain int (1.0 == 1 and
                # True == 1 hash alike) and returns fresh views, in one generated call.
                views = entry.serve(specs)
                if views is not None:
                    entry.used = True
                    slot.calls += 1
                    if self._probe is None and (self._log is None or self._governor.locked):
                        return views  # type: ignore[no-any-return]
                    return self._served(  # type: ignore[return-value]
                        slot, buffer, specs, entry.required, views, strict=True
                    )
        # Hold nothing of the current buffer while the slot may grow: the old block must
        # go back before the new one is allocated.
        buffer = cache = entry = None  # type: ignore[assignment]
        return self._miss(slot, specs, True)  # type: ignore[return-value]

    def try_get_simultaneous(self, *specs: tuple[Any, Any]) -> list[ViewT] | None:
        """Like :meth:`get_simultaneous`, but ``None`` instead of raising when locked and
        too small. Other errors (bad specs, closed arena) still raise."""
        slot = self._select()
        if self._debug:
            return self._debug_request(slot, specs, False)
        views = self._hit(slot, specs, False)
        if views is None:
            views = self._miss(slot, specs, False)
        return views

    def _debug_request(self, slot: Slot, specs: Any, strict: bool) -> list[Any] | None:
        debug = self._governor.debug
        if debug:
            slot.enter()
        try:
            views = self._hit(slot, specs, strict)
            if views is None:
                views = self._miss(slot, specs, strict)
            if views is not None and self._poison:
                poison_stale_bytes(slot.buffer, self._name, views, self._adapter.data_ptr)
            return views
        finally:
            if debug:
                slot.leave()

    def _hit(self, slot: Slot, specs: Any, strict: bool) -> list[Any] | None:
        """Fresh views of an entry prepared over the slot's buffer, or None."""
        buffer = slot.buffer
        cache = buffer.prepared.get(self._key)
        if cache is None or slot.pending:
            return None
        try:
            entry = cache[specs]
        except (KeyError, TypeError):
            return None
        views = entry.serve(specs)
        if views is None:
            return None
        entry.used = True
        slot.calls += 1
        return self._served(slot, buffer, specs, entry.required, views, strict=strict)

    def _served(
        self, slot: Slot, buffer: Buffer, specs: Any, required: int, views: Any, *, strict: bool
    ) -> list[Any] | None:
        """The bookkeeping of a served request off the locked hot path: mark a capture and
        note the request while unlocked.

        A buffer read by a CUDA graph being captured is marked under the arena's mutex, so
        no concurrent growth can release it unmarked; when a growth replaced it between
        the read and the mark, the request is served again from the current buffer.
        """
        probe = self._probe
        if probe is not None and probe() and not slot.mark_captured(buffer):
            slot.calls -= 1  # counted again by the request that replaces this one
            try:
                return self._request(slot, specs, strict)
            except GraphCaptureError as exc:
                raise GraphCaptureError(
                    f"slot {slot.describe()} was resized by another thread while this "
                    "thread was capturing a CUDA graph (between building this request's "
                    "views and marking them captured), and the new buffer cannot serve it "
                    f"during the capture: {exc}. Finish growth before capturing (warm-up "
                    "or reserve()), and keep other threads from growing the arena during a "
                    "capture (lock() it first)"
                ) from exc
        log = self._log
        if log is not None and not self._governor.locked:
            log.note(required, slot.index, specs)
        return views  # type: ignore[no-any-return]

    def _miss(self, slot: Slot, specs: Any, strict: bool) -> list[Any] | None:
        """A request not prepared over the slot's buffer: the structure's plan if it fits,
        else the general path (layout, growth, typed views)."""
        buffer: Buffer | None = slot.buffer
        # A slot holding no memory (never sized, or closed) takes the general path, which
        # serves zero-byte requests and raises ArenaClosedError.
        if buffer is not None and buffer.allocation is not None and not slot.pending:
            built: Any = None
            plan = self._last_plan
            if plan is not None:
                built = self._build(plan, buffer, specs)
            if built is None:  # another structure than last time
                plan = plan_for(self._plans, specs, self._adapter, self._governor.alignment)
                if plan is not None:
                    built = self._build(plan, buffer, specs)
                    self._last_plan = plan
            if built:
                return self._deliver(
                    slot, buffer, specs, built[0], built[1], strict=strict, admit=False
                )
        buffer = None  # see get_simultaneous: no reference to the buffer that may be replaced
        return self._request(slot, specs, strict)

    def _build(self, plan: Plan, buffer: Buffer, specs: Any) -> Any:
        sources = buffer.wrappers.get(plan.key)
        if sources is None:
            sources = self._plan_sources(buffer, plan)
        try:
            return plan.build(specs, buffer.capacity, *sources)
        except (ValueError, TypeError):  # unpacking: another structure
            return None

    def _plan_sources(self, buffer: Buffer, plan: Plan) -> tuple[Any, ...]:
        wrapper = self._wrapper(buffer)
        source = self._adapter.plan_source
        sources = tuple(source(wrapper, native) for native in plan.natives)
        buffer.wrappers[plan.key] = sources
        return sources

    def _request(self, slot: Slot, specs: Any, strict: bool) -> list[Any] | None:
        governor = self._governor
        layout = compute_layout(specs, governor.alignment)
        required = layout.total
        buffer, resizes = slot.ensure(required)
        if resizes:
            self._table.announce("resize", resizes)
            governor.check_open()  # a listener may have closed the arena
        if buffer is None:
            if strict:
                raise slot.locked_error(required)
            return None
        check_in_bounds(slot, buffer, layout)
        views = self._adapter.typed_views(self._wrapper(buffer), layout)
        return self._deliver(slot, buffer, specs, required, views, strict=strict)

    def _deliver(
        self,
        slot: Slot,
        buffer: Buffer,
        specs: Any,
        required: int,
        views: list[Any],
        *,
        strict: bool,
        admit: bool = True,
    ) -> list[Any] | None:
        """Count the call, mark a capture, and hand out the views.

        Views built by the general path are remembered when the request is keyed by plain
        ints (anything else could alias a plain request it is equal to but does not mean).
        Views built by a plan are remembered from a layout's second sighting on (or at once
        by a cached front): a layout seen once is handed out as built, which saves the
        copies a remembered set needs and keeps one-off layouts from sweeping the cache.
        """
        if required > slot.high_water:
            slot.note_high_water(required)
        slot.calls += 1
        served = self._served(slot, buffer, specs, required, views, strict=strict)
        if served is not views:  # the buffer was replaced during a capture: served again
            return served
        if not admit:  # built by a plan
            if not self._cached:
                seen = self._seen
                try:
                    admit = seen.pop(specs, False)
                except TypeError:  # unhashable (list shapes): never remembered
                    admit = False
                else:
                    if not admit:
                        remember(seen, specs, True, self._max_cached)
                if not admit:
                    if self._poison:
                        fill_views(self._name, views)
                    return views
            if not self._adapter.views_can_be_kept():
                # e.g. built inside torch.inference_mode(): remember views built outside it
                layout = compute_layout(specs, self._governor.alignment)
                views = self._adapter.typed_views(self._wrapper(buffer), layout)
        elif not plain_key(specs):
            return self._fresh(views)
        cache = buffer.prepared.get(self._key)
        if cache is None:
            cache = buffer.prepared[self._key] = {}
        entry = Prepared(required, views)
        if self._guarded:
            entry.metadata = tuple(metadata(v) for v in views)
            entry.serve = functools.partial(self._serve_guarded, cache, entry)
        else:
            entry.serve = server(specs, views, self._fresh_expression, self._fresh)
        remember(cache, specs, entry, self._max_cached)
        return self._fresh(views)

    def _serve_guarded(self, cache: dict[Any, Any], entry: Prepared, specs: Any) -> Any:
        """Debug mode's server for cached fronts: the int check, then the in-place guard."""
        for shape, _ in specs:
            for dim in shape:
                if dim.__class__ is not int:
                    return None
        if not self._unchanged(cache, specs, entry):
            return None
        return self._fresh(entry.views)

    def _wrapper(self, buffer: Buffer) -> Any:
        """The framework's handle on the whole buffer: one import per buffer."""
        wrapper = buffer.wrappers.get(self._name)
        if wrapper is None:
            allocation = buffer.allocation
            if allocation is None:
                # A slot that holds no memory serves only zero-byte requests.
                allocation = self._governor.empty_allocation()
            elif self._probe is not None and self._probe():
                raise GraphCaptureError(
                    f"the first {self._name} view of a {buffer.capacity}-byte slot buffer "
                    f"was requested while a CUDA graph is being captured; importing it into "
                    f"{self._name} may record work on another stream. Make the same request "
                    "once eagerly (warm-up) before capturing"
                )
            wrapper = buffer.wrappers[self._name] = self._adapter.wrap(allocation)
        return wrapper

    def get_persistent(
        self, key: Any, shape: tuple[int, ...], dtype: Any, zero_init: bool = False
    ) -> Any:
        """A buffer of its own that keeps its contents across requests.

        The same key in the same slot returns the same view object every time (for JAX:
        until a jitted function's donation deletes it; the next call builds it again). It
        never overlaps the scratch buffer, and scratch growth does not move it.

        Parameters
        ----------
        key : hashable
            Identifies the buffer within the slot.
        shape, dtype
            As in :meth:`get_simultaneous`; must match the first request for ``key``.
        zero_init : bool
            Fill with zeros when the buffer is created (later calls do not re-zero).

        Raises
        ------
        PersistentMismatchError
            ``key`` exists with another shape or dtype.
        ArenaLockedError
            ``key`` is new and the arena is locked.
        """
        layout = compute_layout(((shape, dtype),), self._governor.alignment)
        entry = self._select().persistent.buffer(key, layout, zero_init)
        view = entry.views.get(self._name)
        # A kept view passes the same check as a prepared one: a JAX array deleted by
        # donation is built again (and none is handed out while JAX traces).
        if view is None or self._adapter.fresh_views((view,)) is None:
            buffer = self._adapter.wrap(entry.allocation)
            built = self._adapter.typed_views(buffer, entry.layout)[0]
            if view is None:  # two threads at once: both get the view stored first
                view = entry.views.setdefault(self._name, built)
            else:
                view = entry.views[self._name] = built
        return view

    def data_ptr(self, view: Any) -> int:
        """Address of a view's first element."""
        return int(self._adapter.data_ptr(view))

    def write_into(self, view: Any, value: Any) -> Any:
        """Copy ``value`` into the arena memory behind ``view``.

        The way to fill a JAX view (JAX arrays have no in-place writes); every front has it.

        Parameters
        ----------
        view
            A view this front handed out (or any array of this framework over arena memory).
        value
            What to write: an array of any framework with exactly ``view``'s dtype and
            shape. Nothing is cast or broadcast (convert first, e.g. ``value.astype``).

        Returns
        -------
        Any
            The view to read the new contents through: ``view`` itself for NumPy, torch and
            CuPy; for JAX a new array over the same bytes (``view`` may hold a host copy
            cached by an earlier read).

        Raises
        ------
        DTypeError
            ``value`` has another dtype than ``view``, or none (a number, a list).
        SpecError
            ``value`` has another shape than ``view``.
        """
        return self._adapter.write_into(view, value)

    def __repr__(self) -> str:
        kind = "cached " if self._cached else ""
        owner = self._owner()
        return f"<arena {kind}front {self._name!r} of {owner!r}>"


def plain_key(specs: Any) -> bool:
    """Whether ``specs`` may key a remembered request: hashable, with every dimension a
    plain ``int``. An object equal to 4 whose ``__index__`` says 1000 must never be the key
    a later plain ``(4,)`` request finds."""
    try:
        for shape, _ in specs:
            for dim in shape:
                if dim.__class__ is not int:
                    return False
        hash(specs)
    except TypeError:
        return False
    return True
