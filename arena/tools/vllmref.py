"""The bench's vLLM reference: what a vLLM module runs when it asks for scratch.

A vLLM module spells a request inline, as
``current_workspace_manager().get_simultaneous(((n, h, d), dtype), ...)``, and that runs
the WorkspaceManager's own code (``vllm/v1/worker/workspace.py``, described in
``/work/shared/REFERENCE.md``): each view's bytes ``prod(shape) * dtype.itemsize``,
rounded up to 256, the offsets their running sum, the slot's buffer found through
``dbo_current_ubatch_id()`` and checked against the total, then one slice, ``view(dtype)``
and ``reshape(shape)`` of the ``uint8`` buffer per view. This module is that runtime path,
transcribed (the growth branch left out: the bench's manager is presized, like a locked
vLLM engine), so the bench's ``reference`` column times the very calls a vLLM module
makes, with no helper of ours in between.

Only the buffer's size query differs per framework: ``numel() * element_size()`` for a
torch tensor (vLLM's spelling), ``size * itemsize`` for a NumPy or CuPy array.
"""

from __future__ import annotations

import threading
from itertools import accumulate
from math import prod
from typing import Any

__all__ = ["WorkspaceManager", "current_workspace_manager", "init_workspace_manager"]

# vllm/v1/worker/ubatching.py: thread id -> micro-batch id, empty outside dual micro-batching.
_THREAD_ID_TO_CONTEXT: dict[int, int] = {}


def dbo_current_ubatch_id() -> int:
    """The calling thread's micro-batch (0 outside dual micro-batching), as vLLM finds it."""
    if len(_THREAD_ID_TO_CONTEXT) == 0:
        return 0
    return _THREAD_ID_TO_CONTEXT[threading.get_ident()]


def round_up(x: int, y: int) -> int:
    """vllm.utils.math_utils.round_up."""
    return ((x + y - 1) // y) * y


def _compute_bytes(shape: tuple[int, ...], dtype: Any) -> int:
    return prod(shape) * dtype.itemsize  # type: ignore[no-any-return]


def _torch_size(workspace: Any) -> int:
    return workspace.numel() * workspace.element_size()  # type: ignore[no-any-return]


def _array_size(workspace: Any) -> int:
    return workspace.size * workspace.itemsize  # type: ignore[no-any-return]


class WorkspaceManager:
    """vLLM's manager over one presized, locked ``uint8`` buffer per micro-batch.

    Parameters
    ----------
    buffers : list
        One ``uint8`` buffer per micro-batch (a torch tensor, a NumPy or CuPy array).
    """

    def __init__(self, buffers: list[Any]) -> None:
        self._current_workspaces = list(buffers)
        self._num_ubatches = len(buffers)
        self._locked = True
        torch = type(buffers[0]).__module__.startswith("torch")
        self._workspace_size_bytes = _torch_size if torch else _array_size

    def get_simultaneous(self, *shapes_and_dtypes: tuple[tuple[int, ...], Any]) -> list[Any]:
        """One view per ``(shape, dtype)``, at 256-aligned running offsets (vLLM's code)."""
        actual_bytes = [_compute_bytes(s, d) for s, d in shapes_and_dtypes]
        aligned_bytes = [round_up(actual, 256) for actual in actual_bytes]
        total_bytes = sum(aligned_bytes)
        offsets = list(accumulate([0, *aligned_bytes[:-1]]))
        current_workspace = self._ensure_workspace_size(total_bytes)
        return [
            current_workspace[offsets[i] : offsets[i] + actual_bytes[i]]
            .view(shapes_and_dtypes[i][1])
            .reshape(shapes_and_dtypes[i][0])
            for i in range(len(shapes_and_dtypes))
        ]

    def _ensure_workspace_size(self, required_bytes: int) -> Any:
        ubatch_id = dbo_current_ubatch_id()
        current_workspace = self._current_workspaces[ubatch_id]
        current_size = self._workspace_size_bytes(current_workspace)
        if current_size < required_bytes:
            # vLLM grows here while unlocked; the bench's manager is presized and locked.
            raise AssertionError(
                f"Workspace is locked but allocation requires {required_bytes} bytes, "
                f"current size is {current_size} bytes"
            )
        return current_workspace


_manager: WorkspaceManager | None = None


def init_workspace_manager(buffers: list[Any]) -> WorkspaceManager:
    """Make the process's manager (vLLM's ``init_workspace_manager``) over ``buffers``."""
    global _manager
    _manager = WorkspaceManager(buffers)
    return _manager


def current_workspace_manager() -> WorkspaceManager:
    """The process's manager, as every vLLM module reaches it."""
    assert _manager is not None
    return _manager
