"""The process-wide arenas, one per device, for code that cannot pass an arena around."""

from __future__ import annotations

import sys
import threading
import warnings
from typing import Any

from arena.config import check_flag
from arena.core import Arena
from arena.errors import ArenaWarning, NotInitializedError
from arena.forks import after_fork
from arena.memory.devices import Device, default_device, parse_device

__all__ = [
    "current_arena",
    "init_arena",
    "is_arena_initialized",
    "lock_arena",
    "reset_arena",
    "unlock_arena",
]

_arenas: dict[Device, Arena] = {}
_registry_lock = threading.Lock()


def _renew_registry_lock(module: object) -> None:
    global _registry_lock
    _registry_lock = threading.Lock()


after_fork(sys.modules[__name__], _renew_registry_lock)


def _key(device: Any) -> Device:
    return default_device() if device is None else parse_device(device)


def _found(device: Any, key: Device) -> Device:
    """The registry key ``device`` names, given ``key = _key(device)``; call with the
    registry lock held (and ``key`` found before it: the default device is found by
    counting devices, which imports CuPy or torch the first time).

    ``None`` names the default device's arena or, where that device has none and exactly
    one arena is initialised, that one: a process that called ``init_arena("cpu")`` on a
    machine with a GPU (where the default device is CUDA) finds it with
    ``current_arena()``, as it does on a machine without one.
    """
    if device is None and key not in _arenas and len(_arenas) == 1:
        (key,) = _arenas
    return key


def init_arena(device: Any = None, **options: Any) -> Arena:
    """Create the process-wide arena for ``device`` (default device when ``None``).

    ``options`` are passed to :class:`Arena`. Initialising a device again warns
    (:class:`ArenaWarning`), closes the previous arena and replaces it.
    """
    key = _key(device)
    arena = Arena(key, **options)
    with _registry_lock:
        previous = _arenas.get(key)
        _arenas[key] = arena
    if previous is not None:
        try:
            warnings.warn(
                f"init_arena({str(key)!r}) called again: the previous arena ({previous!r}) "
                "is closed and replaced; its views stay valid. Call reset_arena() first to "
                "make this explicit",
                ArenaWarning,
                stacklevel=2,
            )
        finally:  # raised as an error too: it left the registry, so it closes here
            previous.close()
    return arena


def current_arena(device: Any = None) -> Arena:
    """The process-wide arena for ``device``.

    ``None`` (the default) means the default device's arena or, where that device has
    none, the only arena initialised.

    Raises
    ------
    NotInitializedError
        If :func:`init_arena` has not been called for that device.
    """
    key = _key(device)
    with _registry_lock:
        key = _found(device, key)
        arena = _arenas.get(key)
        known = ", ".join(str(d) for d in _arenas) or "none"
    if arena is None:
        raise NotInitializedError(
            f"no process-wide arena on {key} (initialised: {known}); call "
            f"arena.init_arena({str(key)!r}) first"
        )
    return arena


def lock_arena(device: Any = None) -> None:
    """Lock the process-wide arena for ``device`` (``None``: as :func:`current_arena`)."""
    current_arena(device).lock()


def unlock_arena(device: Any = None) -> None:
    """Unlock the process-wide arena for ``device`` (``None``: as :func:`current_arena`)."""
    current_arena(device).unlock()


def reset_arena(device: Any = None, *, all_devices: bool = False) -> None:
    """Close and forget the process-wide arena for ``device`` (``None``: as
    :func:`current_arena`), or every one.

    Views made before stay valid. Meant for tests and for re-configuring an engine.

    Raises
    ------
    ConfigError
        ``all_devices`` is not a bool.
    """
    key = None if check_flag("all_devices", all_devices) else _key(device)
    with _registry_lock:
        if key is None:
            closing = list(_arenas.values())
            _arenas.clear()
        else:
            found = _arenas.pop(_found(device, key), None)
            closing = [] if found is None else [found]
    for arena in closing:
        arena.close()


def is_arena_initialized(device: Any = None) -> bool:
    """Whether :func:`init_arena` has been called for ``device`` (``None``: whether
    :func:`current_arena` finds an arena)."""
    key = _key(device)
    with _registry_lock:
        return _found(device, key) in _arenas
