"""The ledger: an arena's memory source, with every block it handed out accounted for.

The ledger wraps a :class:`~arena.memory.sources.MemorySource` (composition, as RMM's resources
wrap one another). It is the only object that calls the source, so its counters are the
truth the arena reports: ``allocations == frees + live_blocks`` holds after any failure,
including a ``KeyboardInterrupt`` raised by the source, by ``alloc_context`` or by its exit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from arena.errors import ArenaError, ArenaOutOfMemoryError
from arena.memory.devices import Device
from arena.memory.sources import Allocation, MemorySource
from arena.observe.events import format_mb

__all__ = ["Ledger", "oom_hint"]


class Ledger:
    """Counts and holds every block an arena took from its memory source.

    Parameters
    ----------
    source : MemorySource
        Where memory comes from.
    alloc_context : callable, optional
        Called with no arguments around every allocation; returns a context manager.
    observer : callable, optional
        Called as ``observer(action, ptr, nbytes, what)`` after every allocation
        (``"allocate"``), failed allocation (``"allocate failure"``) and release
        (``"free"``); see :mod:`arena.observe.snapshot`. It must not raise.

    Notes
    -----
    Not thread-safe by itself: the arena calls it with its mutex held.
    """

    __slots__ = ("_alloc_context", "_live", "allocations", "frees", "observer", "source")

    def __init__(
        self,
        source: MemorySource,
        alloc_context: Callable[[], AbstractContextManager[Any]] | None = None,
        observer: Callable[[str, int, int, str], None] | None = None,
    ) -> None:
        self.source = source
        self._alloc_context = alloc_context
        self._live: dict[int, Allocation] = {}
        self.allocations = 0
        self.frees = 0
        self.observer = observer

    @property
    def device(self) -> Device:
        """The source's device."""
        return self.source.device

    @property
    def live_blocks(self) -> int:
        """Blocks handed out and not yet released."""
        return len(self._live)

    @property
    def live_bytes(self) -> int:
        """Bytes of the blocks handed out and not yet released."""
        return sum(a.nbytes for a in self._live.values())

    def allocate(self, nbytes: int, what: str) -> Allocation:
        """A block of ``nbytes`` from the source, counted as live.

        Parameters
        ----------
        nbytes : int
            Bytes wanted (>= 1).
        what : str
            What the block is for, for the error message.

        Raises
        ------
        ArenaOutOfMemoryError
            The source raised ``MemoryError``; the message names the bytes, the purpose,
            the device, the source and what to do.
        """
        context = nullcontext() if self._alloc_context is None else self._alloc_context()
        allocation: Allocation | None = None
        try:
            with context:
                allocation = self.source.allocate(nbytes)
                if allocation.nbytes < nbytes:
                    short = allocation
                    allocation = None
                    self.source.release(short)
                    raise ArenaError(
                        f"the memory source {self.source!r} returned {short.nbytes} bytes "
                        f"for {what}, which needs {nbytes}; a source must return at least "
                        "the bytes asked for (this is a bug in the source)"
                    )
                self._live[id(allocation)] = allocation
                self.allocations += 1
                if self.observer is not None:
                    self.observer("allocate", allocation.ptr, nbytes, what)
        except MemoryError as exc:
            if allocation is not None:  # the context's exit failed after the source gave it
                self.release(allocation)
            elif self.observer is not None:
                self.observer("allocate failure", 0, nbytes, what)
            raise ArenaOutOfMemoryError(
                f"could not allocate {nbytes} bytes ({format_mb(nbytes)}) for {what} on "
                f"{self.device} from {self.source!r}: {exc}; free memory elsewhere, request "
                "less, or presize with reserve() earlier" + oom_hint(self.device)
            ) from exc
        except BaseException:
            # Whatever failed (the context's exit, an interrupt), nothing stays half-counted.
            if allocation is not None:
                self.release(allocation)
            raise
        return allocation

    def release(self, allocation: Allocation) -> None:
        """Give ``allocation`` back to the source.

        It is counted as freed before the source is called, so an exception from the
        source (an interrupt included) leaves the counters true: the arena has dropped the
        block either way, and its memory returns once no view references it.
        """
        if self._live.pop(id(allocation), None) is None:
            return
        self.frees += 1
        if self.observer is not None:
            self.observer("free", allocation.ptr, allocation.nbytes, "")
        self.source.release(allocation)


def oom_hint(device: Device) -> str:
    """Why a CUDA allocation may have failed when the cause is another framework."""
    if not device.is_cuda or "jax" not in sys.modules:
        return ""
    if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").strip().lower() in {"false", "0"}:
        return ""
    return (
        ". JAX is imported with preallocation on: it holds 75% of GPU memory from its first "
        "use. Set XLA_PYTHON_CLIENT_PREALLOCATE=false (or a smaller "
        "XLA_PYTHON_CLIENT_MEM_FRACTION) before importing JAX"
    )
