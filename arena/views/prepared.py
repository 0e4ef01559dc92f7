"""Prepared requests: views built once over a slot buffer and served again on every hit.

A front remembers each request it served over the slot's current buffer as a
:class:`Prepared` entry (the typed views and the generated function that hands out fresh
copies of them), kept in a bounded dict per buffer and front:

* The cache is a plain dict, so a hit stays one C lookup. When it is full, the oldest
  eighth is swept as a CLOCK: entries used since the last sweep get a second chance
  (moved to the back, flag cleared), the others are dropped. A working set that fits is
  never evicted wholesale, and cyclic access over more layouts than fit keeps most of
  them instead of none.
* Cached fronts hand the same view objects to every caller, so a caller that changes one
  in place (shape, dtype, strides, start, ``requires_grad``) would change it for all. In
  debug mode the front remembers each view's :func:`metadata` and checks it on every hit;
  a changed view warns and its request is rebuilt (:func:`unchanged`).
  ``requires_grad_()`` is covered because it breaks the next caller outright: torch
  refuses in-place writes to a leaf that requires grad. Outside debug mode nothing is
  checked (the check costs about a third of a cached request).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any

from arena.base.events import warn_user
from arena.base.layout import exact_dims

__all__ = [
    "Prepared",
    "array_start",
    "guarded_server",
    "metadata",
    "plain_key",
    "prepare",
    "remember",
    "server",
    "unchanged",
    "warn_changed",
]


class Prepared:
    """One remembered request over one slot buffer.

    Attributes
    ----------
    required : int
        Bytes the request needs.
    views : list
        The typed views built for it, over the buffer.
    serve : callable
        ``serve(specs)`` -> fresh views of :attr:`views`, or None when ``specs`` must take
        the general path (see :func:`server`).
    metadata : tuple
        Debug mode, cached fronts: each view's :func:`metadata` when it was made.
    used : bool
        Served since the cache's last sweep.
    key : Any
        The request it is remembered under (the very object that keys it in its cache),
        or None: the compiled hit path looks it up again by that key's identity.
    """

    __slots__ = ("key", "metadata", "required", "serve", "used", "views")

    def __init__(self, required: int, views: list[Any], key: Any = None) -> None:
        self.required = required
        self.views = views
        self.key = key
        self.serve: Callable[[Any], Any] = _unset
        self.metadata: tuple[Any, ...] = ()
        self.used = False


def _unset(specs: Any) -> None:
    """The server of an entry not finished yet: every request takes the general path."""
    return None


def prepare(
    prepared: dict[str, dict[Any, Any]],
    key: str,
    specs: Any,
    required: int,
    views: list[Any],
    *,
    fresh: Callable[[Any], Any],
    limit: int,
    guarded: bool = False,
) -> None:
    """Remember ``views``, built for the request ``specs`` of ``required`` bytes, in
    ``prepared[key]`` (a buffer's entries for the front ``key``, made at its first entry;
    at most ``limit``), where ``specs`` may key a remembered request (:func:`plain_key`).
    ``fresh`` makes the fresh views of every hit; ``guarded``: debug mode's in-place guard
    (:func:`guarded_server`).

    The entry and its server are made first, then the key is checked, then the entry is
    stored: a first request calls this module's functions, then the exact-int rule
    (:mod:`arena.base.layout`), and nothing of this module's after
    (tests/views/test_request_path.py).
    """
    cache = prepared.get(key)
    if cache is None:
        cache = prepared[key] = {}
    entry = Prepared(required, views, specs)
    entry.serve = (
        guarded_server(cache, specs, entry, fresh) if guarded else server(specs, views, fresh)
    )
    if not plain_key(specs):
        return
    if len(cache) < limit:
        cache[specs] = entry  # a plain key is hashable
    else:
        remember(cache, specs, entry, limit)


def server(specs: Any, views: list[Any], fresh: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The function that serves a remembered request on a pure-Python hit: ``serve(specs)``
    checks that every shape is an exact tuple of plain ints and every dtype of the
    remembered dtype's own class (``2.0`` and ``True`` hash and compare like ``2`` and
    ``1``, so the exact-request lookup alone cannot tell) and returns ``fresh(views)``, or
    None (the general path then serves the request).

    One loop over the request for every structure, written as the compiled hit path's
    check is (``digest_of`` in ``arena/views/_hit.c``): one algorithm in two languages.
    """
    kinds = []
    for _, dtype in specs:
        kinds.append(dtype.__class__)
    classes = tuple(kinds)

    def serve(request: Any) -> Any:
        # ``request`` equals ``specs`` (it found this entry): the lengths agree.
        for (shape, dtype), kind in zip(request, classes):  # noqa: B905
            if shape.__class__ is not tuple or dtype.__class__ is not kind or not exact_dims(shape):
                return None
        return fresh(views)

    return serve


def remember(cache: dict[Any, Any], key: Any, entry: Any, limit: int) -> None:
    """Insert ``entry`` under ``key``, sweeping the oldest part first when full.

    Entries that are not :class:`Prepared` (a front's set of layouts seen once, plans,
    server factories) have no *used* flag: the sweep simply drops the oldest of them.

    Unhashable keys are not cached. Safe against a concurrent sweep of the same cache
    (two threads on one slot): keys that vanished are skipped.
    """
    if len(cache) >= limit:
        chunk = max(1, limit // 8)
        for old in list(islice(cache, chunk)):
            found = cache.pop(old, None)
            if found.__class__ is Prepared and found.used:
                found.used = False
                cache[old] = found
        # Whatever the flags said, free a whole chunk: the next sweep is `chunk` inserts
        # away, so a sweep costs O(1) per insert.
        while len(cache) > limit - chunk:
            try:
                del cache[next(iter(cache))]
            except (KeyError, StopIteration, RuntimeError):
                break
    try:
        cache[key] = entry
    except TypeError:  # unhashable but valid (e.g. list shapes)
        pass


def plain_key(specs: Any) -> bool:
    """Whether ``specs`` may key a remembered request: hashable, exact tuples of ``(shape,
    dtype)`` with exact-tuple shapes of plain ``int`` dimensions, and no ``str`` subclass
    for a dtype name. An object equal to 4 whose ``__index__`` says 1000, a tuple subclass
    that iterates as another shape, or a ``str`` subclass that equals ``"float32"`` but
    names another dtype must never be the key a later plain request finds."""
    if specs.__class__ is not tuple:
        return False
    try:
        for spec in specs:
            if spec.__class__ is not tuple or len(spec) != 2:
                return False
            shape, dtype = spec
            if shape.__class__ is not tuple:
                return False
            if isinstance(dtype, str) and dtype.__class__ is not str:
                return False
            if not exact_dims(shape):
                return False
        hash(specs)
    except TypeError:
        return False
    return True


# ---------------------------------------------------------------------- debug guard
def guarded_server(
    cache: dict[Any, Any], specs: Any, entry: Prepared, fresh: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    """Debug mode's server for a cached front's ``entry`` (the request ``specs`` in
    ``cache``): the int check, then the in-place guard (:func:`unchanged`), then
    ``fresh(entry.views)``. Records the views' :func:`metadata` now."""
    entry.metadata = tuple(metadata(v) for v in entry.views)

    def serve(request: Any) -> Any:
        for shape, _ in request:
            if not exact_dims(shape):
                return None
        if not unchanged(cache, specs, entry):
            return None
        return fresh(entry.views)

    return serve


def unchanged(cache: dict[Any, Any], specs: Any, entry: Prepared) -> bool:
    """Whether cached views still have the metadata they were made with.

    ``entry`` is the :class:`Prepared` of ``specs`` in ``cache``. When a view changed,
    warns (:class:`~arena.ArenaWarning`), drops the entry and returns False.
    """
    for index, view in enumerate(entry.views):
        expected = entry.metadata[index]
        found = metadata(view)
        if found != expected:
            warn_changed(expected, found)
            cache.pop(specs, None)
            return False
    return True


def metadata(view: Any) -> tuple[Any, ...]:
    """What a caller could change in place on a shared view: shape, dtype, strides, where
    it starts, and whether it requires grad (torch; False for other frameworks)."""
    strides = getattr(view, "strides", None)
    if strides is None or callable(strides):
        strides = view.stride()  # torch
    start = view.data_ptr() if hasattr(view, "data_ptr") else array_start(view)
    requires_grad = bool(getattr(view, "requires_grad", False))
    return (tuple(view.shape), str(view.dtype), tuple(strides), start, requires_grad)


def array_start(view: Any) -> int:
    """Address of a NumPy or CuPy array's first element."""
    interface = getattr(view, "__array_interface__", None)
    if interface is not None:
        return int(interface["data"][0])
    return int(view.data.ptr)  # CuPy


def warn_changed(expected: Any, found: Any) -> None:
    """Warn that a cached view's metadata went from ``expected`` to ``found``.

    Called through :func:`unchanged` from the front's debug request path; the warning is
    attributed five frames up, to the front's ``get_simultaneous`` or
    ``try_get_simultaneous``.
    """
    warn_user(
        "a cached arena view was changed in place (shape, dtype, strides, start, "
        f"requires_grad: {expected} -> {found}); cached views are shared by every caller "
        "of the same request, so never change their metadata in place (take "
        ".view()/.reshape() instead; for gradients, .detach().requires_grad_() gives a "
        "tensor of your own). The views were rebuilt"
    )
