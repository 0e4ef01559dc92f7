"""Exceptions and warnings raised by arena.

Every exception derives from :class:`ArenaError` and also from the built-in exception a
caller would expect for that kind of mistake, so ``except ValueError`` keeps working for
code that does not know about arena.
"""

from __future__ import annotations

__all__ = [
    "ArenaAsleepError",
    "ArenaClosedError",
    "ArenaError",
    "ArenaLockedError",
    "ArenaOutOfMemoryError",
    "ArenaSyncError",
    "ArenaWarning",
    "BlockActiveError",
    "ConfigError",
    "DTypeError",
    "DeviceError",
    "DeviceUnavailableError",
    "FrameworkUnavailableError",
    "GraphCaptureError",
    "NotInitializedError",
    "PersistentMismatchError",
    "SlotError",
    "SpecError",
    "TracedRequestError",
]


class ArenaError(Exception):
    """Base class of every exception raised by arena."""


class SpecError(ArenaError, ValueError):
    """A ``(shape, dtype)`` request is malformed: bad shape, bad nesting or too large."""


class DTypeError(ArenaError, TypeError):
    """A dtype is unknown to arena or cannot be represented by the requested framework, or
    an array of another framework was given where a front takes its own."""


class ConfigError(ArenaError, ValueError):
    """An :class:`~arena.Arena` was constructed with invalid settings."""


class SlotError(ArenaError, IndexError):
    """A micro-batch or lane index is outside the range the arena was configured with."""


class ArenaLockedError(ArenaError, RuntimeError):
    """A request needs more memory (or a new persistent buffer) while the arena is locked.

    Attributes
    ----------
    caller : str
        ``file:line:function`` of the first frame outside arena.
    required, current : int
        Bytes the request needs and bytes the slot holds (0 for persistent keys).
    slot : tuple of int
        ``(ubatch, lane)``.
    key : object
        The persistent key, for a refused new persistent buffer or resource, else None.
    """

    def __init__(
        self,
        message: str,
        *,
        caller: str = "<unknown>",
        required: int = 0,
        current: int = 0,
        slot: tuple[int, int] = (0, 0),
        key: object = None,
    ) -> None:
        super().__init__(message)
        self.caller = caller
        self.required = required
        self.current = current
        self.slot = slot
        self.key = key


class ArenaAsleepError(ArenaError, RuntimeError):
    """A request while the arena sleeps (:meth:`~arena.Arena.sleep`); call ``wake()``.

    Attributes
    ----------
    caller : str
        The request's call site (``file:line:function``).
    """

    def __init__(self, message: str, *, caller: str = "") -> None:
        super().__init__(message)
        self.caller = caller


class ArenaOutOfMemoryError(ArenaError, MemoryError):
    """The memory source could not provide the bytes a slot needed."""


class ArenaSyncError(ArenaError, RuntimeError):
    """:meth:`~arena.Arena.sync` could not agree with the other ranks: one did not join
    within the group's timeout (named where the backend tells), the backend failed, or the
    ranks' arenas differ in configuration. Raised on every rank that took part."""


class ArenaClosedError(ArenaError, RuntimeError):
    """The arena was closed (or reset) and can no longer hand out memory."""


class BlockActiveError(ArenaError, RuntimeError):
    """A ``ws.locked()`` or ``ws.unlocked()`` block was entered again while it is active
    (nested in itself, or from another thread): it saves one state to restore. Nest a new
    block (call ``ws.locked()`` again); a block that exited may be entered again."""


class PersistentMismatchError(ArenaError, ValueError):
    """A persistent key was requested again with another shape or dtype.

    Attributes
    ----------
    key : object
        The persistent key.
    existing, requested : tuple of (shape, dtype name)
        What the buffer was created as, and what was asked now.
    """

    def __init__(
        self,
        message: str,
        *,
        key: object = None,
        existing: tuple[tuple[int, ...], str] = ((), ""),
        requested: tuple[tuple[int, ...], str] = ((), ""),
    ) -> None:
        super().__init__(message)
        self.key = key
        self.existing = existing
        self.requested = requested


class NotInitializedError(ArenaError, RuntimeError):
    """Something was used before it was set up: the process-wide arena for a device before
    :func:`arena.init_arena`, or Triton's allocator in a thread that
    ``ws.triton_allocator().install()`` did not reach."""


class FrameworkUnavailableError(ArenaError, ImportError):
    """A framework adapter was asked for, but the framework is not installed."""


class DeviceError(ArenaError, ValueError):
    """A device specification could not be understood."""


class DeviceUnavailableError(ArenaError, RuntimeError):
    """The requested device exists in the specification but not on this machine."""


class GraphCaptureError(ArenaError, RuntimeError):
    """Memory was requested while a CUDA stream is capturing a graph."""


class TracedRequestError(ArenaError, RuntimeError):
    """A JAX view was requested while JAX traces a function (``jax.jit``, ``make_jaxpr``,
    ``vmap``, ``grad``, a ``lax`` loop body): the view would be baked into the traced
    function as a constant, and later writes to the arena would never be seen. Request the
    view outside the traced function and pass it in as an argument."""


class ArenaWarning(UserWarning):
    """Something works, but probably not the way the caller intended."""
