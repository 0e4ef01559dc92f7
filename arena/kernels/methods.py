"""The :class:`~arena.Arena` methods for kernel libraries and budgets.

They live here, in a base class of :class:`~arena.Arena`, so that ``arena/core.py`` stays
the lifecycle; each is a thin delegation to its component in :mod:`arena.kernels`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from arena.kernels.budget import memory_stats, planned_bytes, reset_peaks
from arena.kernels.triton import TritonAllocator

if TYPE_CHECKING:
    from arena.kernels.library import LibraryWorkspaces
    from arena.slots.selector import SlotSelector
    from arena.slots.table import SlotTable

__all__ = ["KernelLibraryMethods"]


class KernelLibraryMethods:
    """Workspaces for kernel libraries, budgets and memory statistics of an arena."""

    _table: SlotTable
    _selector: SlotSelector
    _workspaces: LibraryWorkspaces

    def triton_allocator(self, *, lane: int | None = None) -> TritonAllocator:
        """An allocator for ``triton.set_allocator`` over this arena.

        Called as ``(size, alignment, stream)``, it returns a ``torch.uint8`` tensor (a
        CPU tensor on a host arena) from one block per slot and stream: the same size
        returns the same pointer (replay-safe), streams never share bytes, and growth
        follows the arena's rules. See :mod:`arena.kernels.triton`.

        Parameters
        ----------
        lane : int, optional
            Serve this lane's slot of the calling thread's micro-batch; default the
            lane of the caller's context at each call.

        Returns
        -------
        TritonAllocator
            ``triton.set_allocator(ws.triton_allocator())`` installs it.

        Raises
        ------
        FrameworkUnavailableError
            Without torch (``pip install torch``).
        SlotError
            For a lane out of range.
        """
        return TritonAllocator(self._table, self._selector, lane)

    def get_library_workspace(
        self, key: Any, nbytes: int, *, on_grow: Callable[[Any], Any] | None = None
    ) -> Any:
        """A ``uint8`` view of at least ``nbytes`` that a library holds across calls.

        The same key and size return the same memory, in the arena's framework, apart
        from the scratch buffer. A larger ``nbytes`` while unlocked allocates a larger
        block, copies the old contents and calls ``on_grow(new_view)`` (for FlashInfer:
        ``wrapper.reset_workspace_buffer(new_view, ...)``). See
        :mod:`arena.kernels.library`.

        Parameters
        ----------
        key : hashable
            Names the workspace within the caller's slot.
        nbytes : int
            Bytes needed (>= 1).
        on_grow : callable, optional
            Called with the new view after a growth (kept for the key: later growths
            call it too); not called when the key is created.

        Returns
        -------
        array
            A 1-D ``uint8`` view of the whole block.

        Raises
        ------
        ArenaLockedError
            To create or grow the workspace while locked.
        GraphCaptureError, ArenaOutOfMemoryError
            To grow it while capturing, or past the memory or ``max_bytes``; the old
            workspace is kept.
        """
        return self._workspaces.get(key, nbytes, on_grow)

    def planned_bytes(self) -> int:
        """What the arena will hold after :meth:`lock`, over every slot.

        Scratch (each lane's slots brought to its largest; smaller buffers retired, not
        released), retired, persistent, library workspaces and Triton blocks: subtract it
        from the device's memory before sizing a KV cache.

        Returns
        -------
        int
            Bytes; what it holds now once locked or closed.
        """
        return planned_bytes(self._table.governor, self._table.slots, self._table.lanes)

    def memory_stats(self) -> dict[str, int]:
        """A flat dict under ``torch.cuda.memory_stats()`` key names, plus ``arena.*`` keys.

        ``reserved_bytes.all.current``/``.peak`` (bytes held from the source),
        ``allocated_bytes.all.current``/``.peak`` (bytes requests used),
        ``segment.all.*``, ``num_device_alloc``, ``num_device_free``, ``num_ooms``,
        ``num_alloc_retries`` (0); :mod:`arena.kernels.budget` defines each.

        Returns
        -------
        dict of str to int
            A snapshot.
        """
        return memory_stats(self._table.governor, self._table.slots, self._table.lanes)

    def reset_peak_memory_stats(self) -> None:
        """Set the ``.peak`` figures of :meth:`memory_stats` to their current values."""
        reset_peaks(self._table.governor, self._table.slots)
