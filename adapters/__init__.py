"""Framework adapters, installed as ``arena.adapters``.

Each module exposes the same public names with the same signatures (checked by a test):

``FRAMEWORK``
    The framework's name.
``is_available()``
    Whether the framework is installed (without importing it).
``check_device(device)``
    Raise :class:`~arena.errors.FrameworkUnavailableError` if the framework cannot view
    memory on ``device``.
``native_dtype(dtype)``
    The framework's dtype for an :class:`arena.DType`, or a clear error.
``wrap(allocation)``
    The framework's handle on a whole buffer: done once per buffer (per growth).
``typed_views(buffer, layout)``
    One typed view per entry of a layout.
``fresh_views(views)``
    New view objects over the same memory (cheap; metadata not shared).
``data_ptr(view)``
    Address of a view's first element.
``write_into(view, value)``
    Copy ``value`` into the memory behind ``view``; return what to read the new contents
    through (``view`` itself, except for JAX: a new array over the same bytes).

The framework itself is imported inside the adapter module only, so importing
:mod:`arena` imports no framework.
"""

from __future__ import annotations

__all__ = ["ADAPTER_NAMES"]

#: Every adapter module shipped with arena.
ADAPTER_NAMES = ("numpy", "torch", "cupy", "jax")
