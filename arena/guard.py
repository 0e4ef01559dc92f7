"""Debug mode's guard on cached views: a cached front hands the same view objects to every
caller of a request, so a caller that changes one in place (shape, dtype, strides, start,
and for torch ``requires_grad``) would change it for all. In debug mode the front
remembers each view's metadata and checks it on every hit; a changed view warns and its
request is rebuilt.

``requires_grad_()`` is covered because it breaks the next caller outright: torch refuses
in-place writes to a leaf that requires grad. Outside debug mode nothing is checked (the
check costs about a third of a cached request); a cached view's metadata is then the
caller's to leave alone, as the docs say."""

from __future__ import annotations

import warnings
from typing import Any

from .errors import ArenaWarning

__all__ = ["array_start", "metadata", "unchanged", "warn_changed"]


def unchanged(cache: dict[Any, Any], specs: Any, entry: Any) -> bool:
    """Whether cached views still have the metadata they were made with.

    ``entry`` is the :data:`~arena.slot.Prepared` of ``specs`` in ``cache``. When a view
    changed, warns (:class:`~arena.ArenaWarning`), drops the entry and returns False.
    """
    for index, view in enumerate(entry[1]):
        expected = entry[2][index]
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
    warnings.warn(
        "a cached arena view was changed in place (shape, dtype, strides, start, "
        f"requires_grad: {expected} -> {found}); cached views are shared by every caller "
        "of the same request, so "
        "never change their metadata in place (take .view()/.reshape() instead; for "
        "gradients, .detach().requires_grad_() gives a tensor of your own). The views were "
        "rebuilt",
        ArenaWarning,
        stacklevel=5,
    )
