"""Fronts: one arena, seen through one framework.

``arena.torch``, ``arena.numpy``, ``arena.cupy`` and ``arena.jax`` are :class:`Front`
objects over the same slots. The request path lives here because it is the hot path: a
request seen before in the same slot costs one dictionary lookup, a type check of its
dimensions and one cheap fresh view per tensor.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .errors import ArenaWarning
from .layout import compute_layout

if TYPE_CHECKING:
    from .core import Arena
    from .slot import Slot

__all__ = ["Front"]


class Front:
    """Hands out views of an arena's slots as one framework's arrays.

    Obtain one with ``arena.torch``, ``arena.numpy``, ``arena.cupy``, ``arena.jax`` or
    :meth:`arena.Arena.front`; do not construct it directly.
    """

    __slots__ = ("_adapter", "_arena", "_cached", "_fresh", "_guarded", "_key", "_name")

    def __init__(self, arena: Arena, adapter: ModuleType, cached: bool = False) -> None:
        self._arena = arena
        self._adapter = adapter
        self._name: str = adapter.FRAMEWORK
        self._cached = cached
        # The in-place-change guard costs about 0.1 us per view per call, a third of a
        # cached request: it runs in debug mode (debug=True or ARENA_DEBUG=1). JAX arrays
        # are immutable, so there is nothing to guard there.
        self._guarded = cached and self._name != "jax" and arena._debug
        # Cached fronts hand out the prepared objects themselves, so they keep their own
        # entries: a caller's in-place change must never leak into an uncached front.
        self._key = f"{self._name}/cached" if cached else self._name
        self._fresh = list if cached else adapter.fresh_views

    @property
    def cached(self) -> bool:
        """Whether repeated requests return the very same view objects."""
        return self._cached

    @property
    def framework(self) -> str:
        """The framework this front returns."""
        return self._name

    @property
    def arena(self) -> Arena:
        """The arena behind this front."""
        return self._arena

    def get_simultaneous(self, *specs: tuple[Any, Any]) -> list[Any]:
        """Views for several ``(shape, dtype)`` requests, valid until the next call.

        Parameters
        ----------
        *specs : tuple of (shape, dtype)
            ``shape`` a tuple of non-negative ints; ``dtype`` any NumPy, torch, JAX or
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
        SpecError, DTypeError
            Malformed request.
        """
        slot = self._arena._slot()
        views = self._prepared(slot, specs)
        if views is None:
            views = self._request(slot, specs, True)
        return views  # type: ignore[return-value]

    def try_get_simultaneous(self, *specs: tuple[Any, Any]) -> list[Any] | None:
        """Like :meth:`get_simultaneous`, but ``None`` instead of raising when locked and
        too small. Other errors (bad specs, closed arena) still raise."""
        slot = self._arena._slot()
        views = self._prepared(slot, specs)
        if views is None:
            views = self._request(slot, specs, False)
        return views

    def _prepared(self, slot: Slot, specs: Any) -> list[Any] | None:
        """Fresh views of a prepared entry for ``specs``, or None (take the slow path)."""
        cache = slot.prepared.get(self._key)
        if cache is None or slot.pending:
            return None
        try:
            entry = cache.get(specs)
        except TypeError:  # unhashable spec: the slow path explains what is wrong
            return None
        if entry is None:
            return None
        # 1.0 == 1 and True == 1 hash alike: only plain ints may use the hit.
        for shape, _ in specs:
            for dim in shape:
                if dim.__class__ is not int:
                    return None
        if self._guarded:
            shapes = entry[2]
            for index, view in enumerate(entry[1]):
                if view.shape != shapes[index]:
                    _warn_reshaped(shapes[index], view.shape)
                    del cache[specs]
                    return None
        slot.calls += 1
        arena = self._arena
        if not arena._locked and arena._track_sites:
            arena._note_call_site(entry[0])
        return self._fresh(entry[1])

    def _request(self, slot: Slot, specs: Any, strict: bool) -> list[Any] | None:
        arena = self._arena
        layout = compute_layout(specs, arena._alignment)
        required = layout.total
        if not arena._ensure(slot, required):
            if strict:
                raise arena._locked_error(slot, required)
            return None
        slot.calls += 1
        if not arena._locked and arena._track_sites:
            arena._note_call_site(required)
        cache = slot.prepared.get(self._key)
        if cache is None:
            cache = slot.prepared[self._key] = {}
        try:
            entry = cache.get(specs)
        except TypeError:
            entry = None
        if entry is None:
            views = self._adapter.typed_views(self._buffer(slot), layout)
            entry = (required, views, tuple(v.shape for v in layout.views))
            if len(cache) >= arena._max_cached:
                del cache[next(iter(cache))]
            try:
                cache[specs] = entry
            except TypeError:  # unhashable but valid (e.g. a list of specs)
                pass
        return self._fresh(entry[1])

    def _buffer(self, slot: Slot) -> Any:
        buffer = slot.buffers.get(self._name)
        if buffer is None:
            # A slot that never grew serves only zero-byte requests: from an empty block.
            allocation = slot.allocation or self._arena._empty_allocation()
            buffer = slot.buffers[self._name] = self._adapter.wrap(allocation)
        return buffer

    def get_persistent(
        self, key: Any, shape: tuple[int, ...], dtype: Any, zero_init: bool = False
    ) -> Any:
        """A buffer of its own that keeps its contents across requests.

        The same key in the same slot returns the same view object every time. It never
        overlaps the scratch buffer, and scratch growth does not move it.

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
        arena = self._arena
        entry = arena._persistent(arena._slot(), key, shape, dtype, zero_init)
        view = entry.views.get(self._name)
        if view is None:
            buffer = self._adapter.wrap(entry.allocation)
            view = entry.views[self._name] = self._adapter.typed_views(buffer, entry.layout)[0]
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
            What to write: an array of any framework, or anything this framework converts
            (same shape, or broadcastable; same-kind dtype casts).

        Returns
        -------
        Any
            The view to read the new contents through: ``view`` itself for NumPy, torch and
            CuPy; for JAX a new array over the same bytes (``view`` may hold a host copy
            cached by an earlier read).
        """
        return self._adapter.write_into(view, value)

    def __repr__(self) -> str:
        kind = "cached " if self._cached else ""
        return f"<arena {kind}front {self._name!r} of {self._arena!r}>"


def _warn_reshaped(expected: tuple[int, ...], found: Any) -> None:
    warnings.warn(
        f"a cached arena view's shape was changed in place ({expected} -> {tuple(found)}); "
        "cached views are shared by every caller of the same request, so never change "
        "their metadata in place (take .view()/.reshape() instead). The views were rebuilt",
        ArenaWarning,
        stacklevel=5,
    )
