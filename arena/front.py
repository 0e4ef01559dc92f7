"""Fronts: one arena, seen through one framework.

``ws.torch``, ``ws.numpy``, ``ws.cupy`` and ``ws.jax`` are :class:`Front`
objects over the same slots. The request path reads top to bottom:
front (this module) -> :class:`~arena.slots.slot.Slot` -> :mod:`~arena.base.layout` -> adapter.

A request seen before in the same slot (a *hit*) costs one dictionary lookup, an int check
of its dimensions and one cheap fresh view per tensor: in C where the compiled hit path is
in use (:mod:`arena.views.hit`), else in :meth:`Front._request`. A request with new sizes
but a known structure is served by the structure's plan (:mod:`arena.views.plan`).
Neither takes a lock: both read the slot's current :class:`~arena.slots.slot.Buffer` once
and build views over that buffer only.
"""

from __future__ import annotations

import functools
import importlib
import sys
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from arena.base.dtypes import resolve_natives, seeds
from arena.base.events import RequestLog
from arena.base.extensions import numpy_array_api
from arena.base.layout import compute_layout
from arena.base.poison import poison_outgrown, poison_stale_bytes
from arena.config import check_flag, load_adapter
from arena.errors import ConfigError, DTypeError, SpecError
from arena.planning.scopes import Scope, scope_class
from arena.planning.steps import Step, step_class
from arena.slots.persistent import PersistentStore
from arena.slots.slot import Slot
from arena.slots.table import SlotTable
from arena.slots.workspaces import WorkspaceStore, fixed_block
from arena.uncopyable import refuse_copies
from arena.views import hit
from arena.views.aliases import note_alias
from arena.views.builder import ViewBuilder
from arena.views.hit import HitBase, compiled

__all__ = ["CompiledFront", "Front", "ViewT", "front_class"]

#: The type of the views a front hands out (``torch.Tensor`` for ``ws.torch``, ...).
ViewT = TypeVar("ViewT")


class Front(HitBase, Generic[ViewT]):
    """Hands out views of an arena's slots as one framework's arrays.

    Obtain one with ``ws.torch``, ``ws.numpy``, ``ws.cupy``, ``ws.jax`` or
    :meth:`arena.Arena.front`; do not construct it directly. A type checker sees
    ``ws.torch`` as ``Front[torch.Tensor]``, so its requests are lists of tensors.
    """

    # The hit's settings (_select, _key, _debug, _probe, _log, _governor, _builder, ...)
    # are the base's: arena.views.hit.PyHitBase, or the compiled HitBase.
    __slots__ = ("_adapter", "_cached", "_name", "_owner", "_poison")
    __reduce_ex__ = __copy__ = __deepcopy__ = refuse_copies("a front")

    def __init__(
        self,
        owner: object,
        select: Callable[[], Slot],
        table: SlotTable,
        adapter: Any,
        *,
        cached: bool = False,
        max_cached: int = 256,
        poison: bool = False,
        log: RequestLog | None = None,
        shortcut: tuple[tuple[Slot, ...] | None, Any] = (None, None),
    ) -> None:
        # Weak: the arena holds its fronts, and a cycle would keep every buffer alive
        # until the cycle collector runs after the arena is dropped.
        self._owner = weakref.ref(owner)
        self._select = select
        # The compiled hit path's way to the caller's slot (see SlotSelector.shortcut).
        self._slots, self._tls = shortcut
        self._governor = governor = table.governor
        self._adapter = adapter
        self._name: str = adapter.framework
        self._cached = cached
        self._poison = poison
        self._builder = builder = ViewBuilder(
            table, adapter, cached=cached, max_cached=max_cached, poison=poison, log=log
        )
        # What the hot path reads, kept here: one attribute load each.
        self._key = builder.key
        self._log = log
        self._probe = governor.capture_probe
        # Debug mode and poisoning take the checked path (_debug_request), off the hot one.
        self._debug = governor.debug or poison
        self._fresh_view = builder.fresh_view
        if _numpy_fresh(adapter, builder.fresh_view) is not None:
            # A first sighting is placed from the request, its structure planned at its
            # second sighting: in C by the compiled Planner (CompiledFront), else in Python.
            builder.later = {}

    @property
    def cached(self) -> bool:
        """Whether repeated requests return the very same view objects."""
        return self._cached

    @property
    def framework(self) -> str:
        """The framework this front returns."""
        return self._name

    @property
    def inference(self) -> bool:
        """Whether the views are torch inference tensors (``ws.front("torch",
        inference=True)``, docs/torch-cuda.md)."""
        return bool(self._adapter.inference)

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
        return self._request(slot, specs, True)  # type: ignore[return-value]

    def try_get_simultaneous(self, *specs: tuple[Any, Any]) -> list[ViewT] | None:
        """Like :meth:`get_simultaneous`, but ``None`` instead of raising when locked and
        too small. Other errors (bad specs, closed arena) still raise."""
        slot = self._select()
        if self._debug:
            return self._debug_request(slot, specs, False)
        return self._request(slot, specs, False)

    def _python_request(self, slot: Slot, specs: Any, strict: bool) -> list[Any] | None:
        """A request the compiled hit path leaves to Python whole (debug mode, poisoning,
        fronts whose fresh views need Python: JAX)."""
        if self._debug:
            return self._debug_request(slot, specs, strict)
        return self._request(slot, specs, strict)

    def _request(self, slot: Slot, specs: Any, strict: bool) -> list[Any] | None:
        """A request on ``slot``: the hit, else the builder's miss path. The one place the
        hit's bookkeeping is written in Python (arena/views/_hit.c mirrors it)."""
        buffer = slot.buffer
        cache = buffer.prepared.get(self._key)
        if cache is not None and not slot.detour:
            try:
                entry = cache[specs]
            except (KeyError, TypeError):
                pass
            else:
                # The entry's server checks every dimension is a plain int (1.0 == 1 and
                # True == 1 hash alike) and returns fresh views.
                views = entry.serve(specs)
                if views is not None:
                    entry.used = True
                    slot.count_call()
                    if self._probe is None and (self._log is None or self._governor.locked):
                        return views  # type: ignore[no-any-return]
                    return self._builder.served(
                        slot, buffer, specs, entry.required, views, strict=strict
                    )
                entry = None
        # Hold nothing of the current buffer while the slot may grow: the old block must
        # go back before the new one is allocated.
        buffer = cache = None  # type: ignore[assignment]
        return self._builder.miss(slot, specs, strict)

    def _debug_request(self, slot: Slot, specs: Any, strict: bool) -> list[Any] | None:
        """Debug mode and poisoning: the same request, with the check that no two threads
        share the slot (debug) and the stale bytes poisoned."""
        debug = self._governor.debug
        # The hold is named by a token of this call and taken inside the try: an
        # interrupt at the return of Slot.enter still lets go in the finally, and a hold
        # refused (another thread's) or never taken is none of this call's to let go.
        token = object()
        try:
            if debug:
                slot.enter(token)
            views = self._request(slot, specs, strict)
            if views is not None and self._poison:
                poison_stale_bytes(slot.buffer, self._adapter, views, slot.stack.top)
                poison_outgrown(slot)
            return views
        finally:
            if debug:
                slot.leave(token)

    def scope(self) -> Scope[ViewT]:
        """A ``with`` block whose requests stay valid until it exits; nested scopes stack
        and an exited scope's bytes are the next request's (see docs/planning.md).

        Returns
        -------
        Scope
            Enter it (``with ws.torch.scope() as s:``) and request with
            ``s.get_simultaneous(...)``.
        """
        governor = self._governor
        return scope_class()(
            self._builder,
            self._select,
            alignment=governor.alignment,
            poison=self._poison,
            debug=governor.debug,
        )

    def step(self, key: Hashable) -> Step[ViewT]:
        """One run of the step ``key``: its requests live until released or the step's
        end, recorded on the first run and placed by a plan from the second (see
        docs/planning.md).

        Returns
        -------
        Step
            Enter it (``with ws.torch.step("layer") as st:``), request with
            ``st.get_simultaneous(...)``, end a view's life with ``st.release(view)``.

        Raises
        ------
        SpecError
            ``key`` is not hashable, or not equal to itself (a NaN; one inside a tuple
            key is refused when the step is entered).
        """
        governor = self._governor
        return step_class()(
            self._builder,
            self._select,
            key,
            alignment=governor.alignment,
            poison=self._poison,
            debug=governor.debug,
            fresh_view=self._fresh_view,
        )

    def scratch_callback(
        self,
        fn: Callable[..., Any],
        result_shape_dtypes: Any,
        *,
        scratch: Sequence[tuple[Any, Any]],
        command_buffer_compatible: bool = False,
        input_output_aliases: dict[int, int] | None = None,
    ) -> Callable[..., Any]:
        """``ws.jax`` only: a function usable inside ``jax.jit`` that runs
        ``fn(ctx, outputs, *inputs, scratch=views)`` through
        ``jax.experimental.buffer_callback`` (docs/jax.md, "Arena scratch inside jax.jit").

        ``views`` are arena views of ``scratch`` (a sequence of ``(shape, dtype)``) in the
        arena's device framework, NumPy on the host and CuPy on CUDA, over a block of their
        own made now in the caller's slot (zeroed, counted as a library workspace): the
        same pointers at every call, never moved by growth. ``fn`` writes its outputs in
        place into ``outputs`` (JAX ``Buffer`` objects: ``np.asarray``, or CuPy through
        ``__cuda_array_interface__``) and may read ``inputs``; a plain input that is an
        arena view arrives at the arena's own address (zero-copy).

        Parameters
        ----------
        fn : callable
            ``fn(ctx, outputs, *inputs, scratch=views) -> None``; ``ctx.stream`` is XLA's
            stream on a GPU: launch CuPy kernels on it.
        result_shape_dtypes : pytree of ``jax.ShapeDtypeStruct`` (or anything with
            ``shape`` and ``dtype``)
            The outputs.
        scratch : sequence of (shape, dtype)
            The scratch views, laid out like one request.
        command_buffer_compatible : bool, optional
            Let XLA record the callback into a command buffer and replay it without Python:
            the arena must be locked when a call is traced (``GraphCaptureError``
            otherwise).
        input_output_aliases : dict, optional
            ``buffer_callback``'s aliases; an arena view passed as an aliased input is
            refused (``ArenaError``): XLA would copy it.

        Raises
        ------
        ConfigError
            On a front other than ``ws.jax``, or for a bad ``fn`` or flag.
        ArenaLockedError
            The scratch block would be made while the arena is locked (make the callback
            during warm-up).
        SpecError, DTypeError
            For a malformed ``scratch``.
        """
        if self._name != "jax":
            raise ConfigError(
                f"scratch_callback runs inside jax.jit: use ws.jax.scratch_callback, not the "
                f"{self._name} front"
            )
        check_flag("command_buffer_compatible", command_buffer_compatible)
        if not callable(fn):
            raise ConfigError(
                f"scratch_callback needs fn(ctx, outputs, *inputs, scratch=views), got {fn!r}"
            )
        governor = self._governor
        try:
            specs = tuple(scratch)
        except TypeError:
            raise SpecError(
                f"scratch must be a sequence of (shape, dtype) specs, got "
                f"{type(scratch).__name__} {scratch!r}; pass e.g. scratch=[((4, 128), 'float32')]"
            ) from None
        layout = compute_layout(specs, governor.alignment)
        device = governor.device
        # Only here, on the JAX front: JAX is imported already (importing arena imports no
        # framework).
        jax_adapter = importlib.import_module("arena.adapters.jax")
        make = functools.partial(
            jax_adapter.ScratchCallback,
            fn,
            result_shape_dtypes,
            command_buffer_compatible=command_buffer_compatible,
            input_output_aliases=input_output_aliases,
            locked=lambda: governor.locked,
            owns=governor.ledger.owns,
            on_gpu=device.is_cuda,
        )
        # JAX checks the outputs and the aliases (buffer_callback) before the block is
        # made: a refused callback leaves no block behind (it stayed until close()).
        make(())
        block = fixed_block(
            self._select().store(WorkspaceStore), ("jax.scratch_callback",), layout.total
        )
        host = load_adapter("cupy" if device.is_cuda else "numpy", device)
        views = tuple(host.typed_views(host.wrap(block), layout))
        callback: Callable[..., Any] = make(views)
        return callback

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
        shape : tuple of int
            As in :meth:`get_simultaneous`; must match the first request for ``key``.
        dtype : dtype or str
            As in :meth:`get_simultaneous`; must match the first request for ``key``.
        zero_init : bool
            Fill with zeros when the buffer is created (later calls do not re-zero).

        Raises
        ------
        PersistentMismatchError
            ``key`` exists with another shape or dtype.
        ArenaLockedError
            ``key`` is new and the arena is locked.
        ConfigError
            ``zero_init`` is not a bool (``"false"`` would be truthy), as for library
            workspaces.
        """
        check_flag("zero_init", zero_init)
        layout = compute_layout(((shape, dtype),), self._governor.alignment)
        entry = self._select().store(PersistentStore).buffer(key, layout, zero_init)
        # Keyed by the adapter's space: an inference front's view is an inference tensor.
        space = self._adapter.space
        view = entry.views.get(space)
        # A kept view passes the same check as a prepared one: a JAX array deleted by
        # donation is built again (and none is handed out while JAX traces).
        if view is None or self._adapter.fresh_views((view,)) is None:
            buffer = self._adapter.wrap(entry.allocation)
            built = self._adapter.typed_views(buffer, entry.layout)[0]
            if view is None:  # two threads at once: both get the view stored first
                view = entry.views.setdefault(space, built)
            else:
                view = entry.views[space] = built
        return view

    def data_ptr(self, view: Any) -> int:
        """Address of a view's first element.

        Raises
        ------
        DTypeError
            ``view`` is not an array of this front's framework (a torch tensor given to
            the NumPy front, say): use the front of the view's framework.
        """
        try:
            return int(self._adapter.data_ptr(view))
        except (AttributeError, TypeError) as exc:  # each framework says it its own way
            module = type(view).__module__
            root = {"jaxlib": "jax"}.get(module.split(".")[0], module.split(".")[0])
            given = f"the {self._name} front takes {self._name} arrays, got a "
            given += f"{module}.{type(view).__qualname__}"
            if root in {"numpy", "torch", "cupy", "jax"}:
                fix = f"call ws.{root}.data_ptr or ws.{root}.write_into (the front of the "
                fix += "view's framework)"
            else:  # no framework's array at all: no other front takes it either
                fix = f"pass a view this arena handed out (ws.{self._name}.get_simultaneous)"
            raise DTypeError(f"{given}; {fix}") from exc

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
            ``value`` has another dtype than ``view``, or none (a number, a list);
            ``view`` is not an array of this front's framework (see :meth:`data_ptr`).
        SpecError
            ``value`` has another shape than ``view``.
        """
        self.data_ptr(view)  # a foreign view is named here, not by the framework's copy
        written = self._adapter.write_into(view, value)
        note_alias(written, view)  # a step's release() takes it for the view
        return written

    def __repr__(self) -> str:
        kind = ("cached " if self._cached else "") + ("inference " if self.inference else "")
        owner = self._owner()
        # "of None" told a new user nothing: the arena was collected (Arena(...).numpy).
        shown = "a garbage-collected Arena, closed" if owner is None else repr(owner)
        return f"<arena {kind}front {self._name!r} of {shown}>"


class CompiledFront(Front[ViewT]):
    """A :class:`Front` whose :meth:`get_simultaneous` and :meth:`try_get_simultaneous`
    are the compiled hit path's (``arena.views._hit``); every request that is not a plain
    hit goes on to the same Python methods. Made only where the extension is in use."""

    __slots__ = ()
    #: The compiled HitBase's member: offsets computed where the cache misses (see
    #: :func:`_planner`), or None.
    _planner: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._planner = planner = _planner(
            self._adapter, self._fresh_view, self._governor.alignment
        )
        # The miss path builds a structure's first sighting with it (ViewBuilder.miss).
        self._builder.planner = planner

    if compiled is not None:
        get_simultaneous = compiled.HitBase.get_simultaneous
        try_get_simultaneous = compiled.HitBase.try_get_simultaneous


#: Remembered requests a front's cache holds before the compiled path computes the offsets
#: of the requests it misses instead of remembering more (``arena.views._hit.Planner``).
PLANNER_HOT = 64


def _planner(adapter: Any, fresh_view: Any, alignment: int) -> Any:
    """The compiled path's Planner for a NumPy front handing out fresh views, else None.

    Once a front remembers :data:`PLANNER_HOT` requests, the requests its cache misses
    are computed in C from the request (offsets, then one array per view through NumPy's
    C-API) instead of built in Python and remembered: that costs about what a fresh view
    of a remembered one costs, so hundreds of layouts in rotation cost no more than a few
    (remembered ones no longer fit the CPU's caches). A torch view built from a request
    (``as_strided`` of a typed alias) costs more than a fresh view (``t.data``) of a
    remembered one, so torch fronts keep remembering."""
    numpy = _numpy_fresh(adapter, fresh_view)
    if compiled is None or numpy is None:
        return None
    api = numpy_array_api()
    if api is None:
        return None

    # None where a dtype does not resolve: the Python path explains.
    resolve = functools.partial(resolve_natives, native=adapter.native_dtype)
    try:
        planner = compiled.Planner(
            resolve, api, numpy.ndarray, numpy.dtype, adapter.framework, alignment, PLANNER_HOT
        )
    except TypeError:  # a NumPy whose C-API table is not the one the Planner knows
        return None
    # The dtypes this process resolved already, learnt in one call now: a new arena's
    # first requests then resolve only dtypes the process never used (issue 32 item 4).
    known = seeds()
    if known:
        planner.layout(tuple(((1,), dtype) for dtype in known))
    return planner


def _numpy_fresh(adapter: Any, fresh_view: Any) -> Any:
    """NumPy, where ``adapter`` is NumPy's and the front hands out fresh views
    (``numpy.ndarray.view``: not a cached front, which hands out the same objects, nor
    poisoning or debug mode); else None. Such a front places a structure's first sighting
    from the request (:attr:`~arena.views.builder.ViewBuilder.later`)."""
    numpy = sys.modules.get("numpy")
    if adapter.framework != "numpy" or numpy is None or fresh_view is not numpy.ndarray.view:
        return None
    return numpy


def front_class() -> type[Front[Any]]:
    """The class of new fronts: :class:`CompiledFront` where the hit path in use
    (:data:`arena.views.hit.HIT_PATH`) is ``"compiled"``, else :class:`Front` (the
    pure-Python hit path)."""
    if hit.HIT_PATH == "compiled" and compiled is not None:
        return CompiledFront
    return Front
