"""What every slot of one arena shares: the mutex, lock and closed state, the counted memory
source, the growth policy and the capture probe.

The concurrency model (docs/overview.md, "Threads and safety"):

* ``mutex`` guards every change of slot state: growth, retiring, persistent buffers, lock,
  unlock, close. Every check-then-act re-checks under it.
* The hot path takes no lock. It reads ``slot.buffer`` once (one attribute load) and
  builds views from that :class:`~arena.slots.slot.Buffer` only; a buffer's capacity never
  changes, and views keep its memory alive, so a concurrent growth or close can never
  leave a view over memory smaller than its layout, or freed.
* ``locked`` and ``closed`` are written under the mutex; growth reads them under it, so
  nothing allocates after :meth:`~arena.Arena.lock` or :meth:`~arena.Arena.close` returns.

The governor knows nothing of slots: slots hold it, never the other way round.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from arena.errors import (
    ArenaClosedError,
    ArenaOutOfMemoryError,
    GraphCaptureError,
)
from arena.memory.devices import Device
from arena.memory.ledger import Ledger
from arena.memory.sources import Allocation, empty_allocation
from arena.views.layout import MAX_BYTES, round_up

__all__ = ["Governor"]


class Governor:
    """The shared machinery of one arena's slots.

    Parameters
    ----------
    ledger : Ledger
        The counted memory source.
    alignment : int
        Byte alignment of every view offset.
    growth : "exact", "pow2" or int
        The growth policy.
    capture_probe : callable or None
        Returns True while memory work would land in a CUDA graph capture.
    debug : bool
        Log resizes and lock changes at INFO; check slot sharing between threads.
    """

    __slots__ = (
        "_empty",
        "alignment",
        "allocations_while_locked",
        "capture_probe",
        "closed",
        "debug",
        "growth",
        "ledger",
        "locked",
        "mutex",
    )

    def __init__(
        self,
        ledger: Ledger,
        *,
        alignment: int,
        growth: str | int,
        capture_probe: Callable[[], bool] | None,
        debug: bool,
    ) -> None:
        self.ledger = ledger
        self.alignment = alignment
        self.growth = growth
        self.capture_probe = capture_probe
        self.debug = debug
        self.mutex = threading.RLock()
        self.locked = False
        self.closed = False
        self.allocations_while_locked = 0
        self._empty: Allocation | None = None

    @property
    def device(self) -> Device:
        """The arena's device."""
        return self.ledger.device

    # ------------------------------------------------------------------ memory
    def allocate(self, nbytes: int, what: str) -> Allocation:
        """A counted block; call with the mutex held, after checking ``locked``."""
        if self.locked:  # defensive: every caller refuses first, so this stays 0
            self.allocations_while_locked += 1
        self.check_not_capturing(f"allocating {what}")
        return self.ledger.allocate(nbytes, what)

    def empty_allocation(self) -> Allocation:
        """A zero-byte block on the arena's device that no memory source is asked for."""
        if self._empty is None:
            self._empty = empty_allocation(self.device)
        return self._empty

    def grown_size(self, target: int) -> int:
        """Bytes a buffer that must hold ``target`` is given under the growth policy.

        Raises
        ------
        ArenaOutOfMemoryError
            When the policy would need more bytes than a buffer can address.
        """
        target = max(target, self.alignment)
        growth = self.growth
        if growth == "exact":
            size = round_up(target, self.alignment)
        elif growth == "pow2":
            size = 1 << (target - 1).bit_length()
        else:
            assert isinstance(growth, int)
            size = round_up(-(-target // growth) * growth, self.alignment)
        if size > MAX_BYTES:
            raise ArenaOutOfMemoryError(
                f"a buffer of {target} bytes grows to {size} bytes under growth={growth!r}, "
                f"more than the {MAX_BYTES} bytes a buffer can address; request less"
            )
        return size

    def capturing(self) -> bool:
        """Whether the probe says a CUDA graph is being captured now (False without one)."""
        probe = self.capture_probe
        return probe is not None and bool(probe())

    def check_not_capturing(self, what: str) -> None:
        """Refuse memory work while a CUDA graph is being captured.

        Raises
        ------
        GraphCaptureError
            Naming the device and what was asked for.
        """
        if self.capturing():
            raise GraphCaptureError(
                f"{what} on {self.device} was requested while a CUDA graph is being "
                "captured; it would corrupt the capture. Run the same step once eagerly "
                "(warm-up) before capturing, or reserve() the size before capture"
            )

    # ------------------------------------------------------------------ errors
    def check_open(self) -> None:
        """Raise :class:`ArenaClosedError` if the arena is closed."""
        if self.closed:
            raise self.closed_error()

    def closed_error(self) -> ArenaClosedError:
        """The error for any request on a closed arena."""
        return ArenaClosedError(
            f"this arena on {self.device} is closed (close() or reset_arena() was called); "
            "views made before stay valid, but new requests need a new Arena or init_arena()"
        )
