"""A drop-in for vLLM's workspace module (``vllm.v1.worker.workspace``), backed by arena.

Change one import and keep every call site::

    # from vllm.v1.worker.workspace import current_workspace_manager, ...
    from arena.compat.vllm import current_workspace_manager, ...

Same names, signatures, return types (torch tensors), errors and debug lines. Two
additions vLLM users asked for: :meth:`WorkspaceManager.try_get_simultaneous` (``None``
instead of raising when locked and too small) and :meth:`WorkspaceManager.reserve`
(sizes every micro-batch slot of the current lane up front).

Deliberate differences from vLLM:

* ``lock()`` first sizes every micro-batch slot of a lane to the largest of them, so a
  micro-batch that never ran during warm-up is not left at zero (vLLM #42275). Growth still
  happens only in the requesting slot (siblings follow at their own next call), so no
  thread's live views are orphaned (vLLM #39226).
* Memory comes from torch's caching allocator on CUDA (as in vLLM) and from arena's
  page-aligned host memory on CPU; views are cached per layout, so a locked request is
  several times cheaper than vLLM's slice + view + reshape.
* Persistent tensors live in blocks of their own, never inside the scratch buffer.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, TypeVar

import torch

from arena.base.events import MB, ArenaEvent, debug_from_env
from arena.core import Arena
from arena.errors import ArenaLockedError, PersistentMismatchError
from arena.memory.devices import parse_device

__all__ = [
    "WorkspaceManager",
    "current_workspace_manager",
    "dbo_current_ubatch_id",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "lock_workspace",
    "reset_workspace_manager",
    "unlock_workspace",
    "use_workspace_lane",
]

logger = logging.getLogger("arena.compat.vllm")
T = TypeVar("T")

_manager: WorkspaceManager | None = None
_workspace_lane: ContextVar[int] = ContextVar("arena_vllm_workspace_lane", default=0)

#: thread id -> micro-batch id, kept like vLLM's; used only while vLLM's ubatching module is
#: not loaded (empty means "no dual-batch overlap").
_THREAD_ID_TO_CONTEXT: dict[int, int] = {}

#: vLLM's module that owns the dual-batch-overlap thread map.
VLLM_UBATCHING = "vllm.v1.worker.ubatching"


def dbo_current_ubatch_id() -> int:
    """The calling thread's micro-batch id (0 when no dual-batch overlap is running).

    Inside a vLLM process this is vLLM's own answer: when ``vllm.v1.worker.ubatching`` is
    loaded, its ``dbo_current_ubatch_id`` (and so its ``_THREAD_ID_TO_CONTEXT`` thread map)
    decides, looked up at every call. vLLM registers its micro-batch threads only through
    that module, so while it is not loaded no thread can be in its map and vLLM's answer
    would be 0; arena never imports vLLM itself. Without vLLM, this module's own
    ``_THREAD_ID_TO_CONTEXT`` map is read the same way.

    Looked up through this module at every request, so an engine or a test can replace
    it: ``arena.compat.vllm.dbo_current_ubatch_id = my_resolver``.

    Returns
    -------
    int
        The micro-batch id of the calling thread.

    Raises
    ------
    KeyError
        Dual-batch overlap is running and the calling thread is not one of its threads
        (as in vLLM).
    """
    resolve = getattr(sys.modules.get(VLLM_UBATCHING), "dbo_current_ubatch_id", None)
    if resolve is not None:
        return int(resolve())
    if not _THREAD_ID_TO_CONTEXT:
        return 0
    return _THREAD_ID_TO_CONTEXT[threading.get_ident()]


def _resolve_ubatch() -> int:
    return globals()["dbo_current_ubatch_id"]()  # type: ignore[no-any-return]


@contextmanager
def use_workspace_lane(lane: int) -> Iterator[None]:
    """Select an independent workspace owner for this execution context."""
    if lane < 0:
        raise ValueError(f"Workspace lane must be non-negative, got {lane}.")
    token = _workspace_lane.set(lane)
    try:
        yield
    finally:
        _workspace_lane.reset(token)


def _debug() -> bool:
    return debug_from_env("VLLM_DEBUG_WORKSPACE")


class WorkspaceManager:
    """vLLM's workspace manager, backed by an :class:`arena.Arena` with torch views.

    Parameters
    ----------
    device : torch.device, int or str
        ``torch.device("cpu")``, ``torch.device("cuda", i)``, ``i`` or ``"cuda:i"``.
    num_ubatches : int, optional
        Micro-batch slots (default 1).
    num_lanes : int
        Lanes per micro-batch (default 1).
    alloc_context : callable
        Factory of the context every allocation runs in (e.g. a sleep-mode pool).
    """

    def __init__(
        self,
        device: Any,
        num_ubatches: int | None = None,
        num_lanes: int = 1,
        alloc_context: Callable[[], AbstractContextManager[Any]] = nullcontext,
    ) -> None:
        if num_lanes < 1:
            raise ValueError(f"num_lanes must be at least one, got {num_lanes}.")
        self._device = device
        self._num_ubatches = num_ubatches if num_ubatches is not None else 1
        self._num_lanes = num_lanes
        resolved = parse_device(device)
        self._arena = Arena(
            resolved,
            ubatches=self._num_ubatches,
            lanes=num_lanes,
            framework="torch",
            source="torch" if resolved.is_cuda else None,
            ubatch_resolver=_resolve_ubatch,
            lane_resolver=self._current_lane,
            alloc_context=alloc_context,
            debug=False,
        )
        self._arena.add_listener(self._log_event)
        self._front = self._arena.torch

    @property
    def arena(self) -> Arena:
        """The arena behind this manager (for stats, reserve_bytes, other fronts)."""
        return self._arena

    def _current_lane(self) -> int:
        lane = _workspace_lane.get()
        if lane >= self._num_lanes:
            raise RuntimeError(
                f"Workspace lane {lane} is not configured; manager has {self._num_lanes} lane(s)."
            )
        return lane

    def _log_event(self, event: ArenaEvent) -> None:
        if not _debug():
            return
        if event.kind == "resize":
            assert event.slot is not None
            logger.info(
                "[WORKSPACE DEBUG] Resized workspace from '%s': %.2f MB -> %.2f MB "
                "(ubatch %d, lane %d)",
                event.caller,
                event.old_bytes / MB,
                event.new_bytes / MB,
                event.slot[0],
                event.slot[1],
            )
        elif event.kind in {"lock", "unlock"}:
            logger.info(
                "[WORKSPACE DEBUG] Workspace %s. Current sizes: %s",
                "locked" if event.kind == "lock" else "unlocked",
                [size / MB for size in event.sizes if size],
            )

    def lock(self) -> None:
        """Lock the workspace to prevent growth or new persistent resources; locking a
        locked workspace changes no size, as in vLLM."""
        self._arena.lock()

    def unlock(self) -> None:
        """Unlock the workspace to allow growth (elastic EP re-warm-up); unlocking an
        unlocked workspace changes nothing, as in vLLM."""
        self._arena.unlock()

    def is_locked(self) -> bool:
        """Check if workspace is locked."""
        return self._arena.is_locked()

    def get_simultaneous(
        self, *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype]
    ) -> list[torch.Tensor]:
        """Get multiple workspace tensors simultaneously from a single allocation."""
        try:
            return self._front.get_simultaneous(*shapes_and_dtypes)
        except ArenaLockedError as exc:
            raise _locked(exc, _caller()) from None

    def try_get_simultaneous(
        self, *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype]
    ) -> list[torch.Tensor] | None:
        """Like :meth:`get_simultaneous`, but ``None`` when locked and too small."""
        return self._front.try_get_simultaneous(*shapes_and_dtypes)

    def reserve(self, *shapes_and_dtypes: tuple[tuple[int, ...], torch.dtype]) -> int:
        """Size every micro-batch slot of the current lane for this request; returns bytes.

        Raises ``AssertionError`` (vLLM's locked error) when that needs growth while locked.
        """
        try:
            return self._arena.reserve(*shapes_and_dtypes, lane=self._current_lane())
        except ArenaLockedError as exc:
            raise _locked(exc, _caller()) from None

    def get_persistent_resource(self, key: Hashable, factory: Callable[[], T]) -> T:
        """Return the resource cached for ``key`` in the current ubatch and lane.

        As in vLLM, the tensor made by :meth:`get_persistent` for ``key`` is the resource
        under ``(torch.Tensor, key)``.
        """
        try:
            return self._arena.get_persistent_resource(key, factory)
        except ArenaLockedError:
            raise _not_warmed_up(key) from None

    def get_persistent(
        self,
        key: Hashable,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        *,
        zero_init: bool = False,
    ) -> torch.Tensor:
        """Get a fixed-shape tensor, optionally zeroed on first allocation only.

        Stored as vLLM stores it: the persistent resource ``(torch.Tensor, key)``, so
        ``get_persistent_resource((torch.Tensor, key), factory)`` returns this tensor (and a
        tensor a factory registered there first is what this returns). The memory is an
        arena persistent block of its own, outside the scratch buffer. After ``lock()``, a
        micro-batch that did not run during warm-up gets the block ``lock()`` made for it
        from its siblings' (same key, shape and dtype).
        """

        def make() -> torch.Tensor:
            return self._front.get_persistent(key, shape, dtype, zero_init)  # type: ignore[no-any-return]

        try:
            try:
                workspace = self._arena.get_persistent_resource((torch.Tensor, key), make)
            except ArenaLockedError:
                # A micro-batch that did not run during warm-up: lock() gave it the block
                # its siblings registered (same key, shape, dtype), if any.
                try:
                    workspace = make()
                except ArenaLockedError:
                    raise _not_warmed_up((torch.Tensor, key)) from None
        except PersistentMismatchError as exc:  # the arena block exists under another shape
            old_shape, old_dtype = exc.existing
            raise _persistent_mismatch(
                key, torch.Size(old_shape), getattr(torch, old_dtype), shape, dtype
            ) from None
        if workspace.shape != shape or workspace.dtype != dtype:
            raise _persistent_mismatch(key, workspace.shape, workspace.dtype, shape, dtype)
        return workspace

    def __repr__(self) -> str:
        return f"WorkspaceManager(device={self._device!r}, arena={self._arena!r})"


def _caller() -> str:
    """vLLM's caller: the first frame whose ``self`` is not a WorkspaceManager (so helper
    methods of a subclass are skipped, as vLLM skips them), as ``file:line:function``."""
    frame = inspect.currentframe()
    try:
        frame = frame.f_back if frame is not None else None
        while frame is not None and isinstance(frame.f_locals.get("self"), WorkspaceManager):
            frame = frame.f_back
        if frame is None:
            return "unknown"
        code = frame.f_code
        return f"{os.path.basename(code.co_filename)}:{frame.f_lineno}:{code.co_name}"
    finally:
        del frame  # no reference cycle through the frames


def _locked(exc: ArenaLockedError, caller: str) -> AssertionError:
    return AssertionError(
        f"Workspace is locked but allocation from '{caller}' "
        f"requires {exc.required / MB:.2f} MB, current size is "
        f"{exc.current / MB:.2f} MB. "
        "Workspace growth is not allowed after locking."
    )


def _persistent_mismatch(
    key: Hashable, old_shape: Any, old_dtype: Any, shape: Any, dtype: Any
) -> ValueError:
    return ValueError(
        f"Persistent workspace {key!r} has shape={old_shape}, "
        f"dtype={old_dtype}; requested shape={shape}, dtype={dtype}."
    )


def _not_warmed_up(key: Hashable) -> AssertionError:
    return AssertionError(
        f"Workspace is locked but {key!r} was not allocated during "
        "warmup for the current ubatch and lane."
    )


def is_workspace_manager_initialized() -> bool:
    """Check if workspace manager has been initialized."""
    return _manager is not None


def current_workspace_manager() -> WorkspaceManager:
    """Get the current workspace manager instance (``AssertionError`` if none)."""
    assert _manager is not None, (
        "WorkspaceManager not initialized. Call init_workspace_manager() "
        "with a device before using workspace functions."
    )
    return _manager


def init_workspace_manager(
    device: Any,
    num_ubatches: int | None = None,
    num_lanes: int = 1,
    alloc_context: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> None:
    """Initialize the workspace manager with a device (warns when re-initialising)."""
    global _manager
    if _manager is not None:
        logger.warning(
            "WorkspaceManager already initialized on device %s, reinitializing on device %s",
            _manager._device,
            device,
        )
    _manager = WorkspaceManager(device, num_ubatches, num_lanes, alloc_context)


def lock_workspace() -> None:
    """Lock the workspace to prevent growth or new persistent resources (no size changes
    when it is locked already, as in vLLM)."""
    current_workspace_manager().lock()


def unlock_workspace() -> None:
    """Unlock the workspace to allow growth (a no-op when it is not locked, as in vLLM)."""
    current_workspace_manager().unlock()


def reset_workspace_manager() -> None:
    """Reset the workspace manager to uninitialized state (for tests)."""
    global _manager
    _manager = None
