"""What every slot of one arena shares: the mutex, lock and closed state, the counted memory
source, the growth policy, the capture probe and the listeners.

The concurrency model (docs/overview.md, "Threads and safety"):

* ``mutex`` guards every change of slot state: growth, retiring, persistent buffers, lock,
  unlock, close. Every check-then-act re-checks under it.
* The hot path takes no lock. It reads ``slot.buffer`` once (one attribute load) and
  builds views from that :class:`~arena.slot.Buffer` only; a buffer's capacity never
  changes, and views keep its memory alive, so a concurrent growth or close can never
  leave a view over memory smaller than its layout, or freed.
* ``locked`` and ``closed`` are written under the mutex; growth reads them under it, so
  nothing allocates after :meth:`~arena.Arena.lock` or :meth:`~arena.Arena.close` returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .devices import Device
from .errors import (
    ArenaClosedError,
    ArenaLockedError,
    ArenaOutOfMemoryError,
    ConfigError,
    GraphCaptureError,
)
from .layout import MAX_BYTES, round_up
from .ledger import Ledger
from .observe import MB, ArenaEvent, caller_info, format_mb, log_event
from .sources import Allocation, empty_allocation

if TYPE_CHECKING:
    from .slot import Slot

__all__ = ["Governor", "Resize"]

#: A finished resize, announced after the mutex is released: (slot, old bytes, new bytes).
Resize = tuple["Slot", int, int]


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
    track_sites : bool
        Record per-call-site peaks while unlocked.
    """

    __slots__ = (
        "_empty",
        "alignment",
        "allocations_while_locked",
        "call_sites",
        "capture_probe",
        "closed",
        "debug",
        "growth",
        "last_requests",
        "ledger",
        "listeners",
        "locked",
        "mutex",
        "poison",
        "recorder",
        "shape",
        "slots",
        "track_sites",
    )

    def __init__(
        self,
        ledger: Ledger,
        *,
        alignment: int,
        growth: str | int,
        capture_probe: Callable[[], bool] | None,
        debug: bool,
        track_sites: bool,
    ) -> None:
        self.ledger = ledger
        self.alignment = alignment
        self.growth = growth
        self.capture_probe = capture_probe
        self.debug = debug
        self.track_sites = track_sites
        self.mutex = threading.RLock()
        self.locked = False
        self.closed = False
        self.allocations_while_locked = 0
        self.call_sites: dict[str, int] = {}
        self.listeners: list[Callable[[ArenaEvent], None]] = []
        self.slots: list[Slot] = []
        #: Fill every request's views with a sentinel (see :mod:`arena.poison`).
        self.poison = False
        #: The profile recorder (see :mod:`arena.profile`), or None.
        self.recorder: Any = None
        #: Slot index -> (call site, specs) of the last request recorded while unlocked.
        self.last_requests: dict[int, tuple[str, Any]] = {}
        #: (ubatches, lanes), for log lines.
        self.shape = (1, 1)
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

    def check_not_capturing(self, what: str) -> None:
        """Refuse memory work while a CUDA graph is being captured.

        Raises
        ------
        GraphCaptureError
            Naming the device and what was asked for.
        """
        probe = self.capture_probe
        if probe is not None and probe():
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

    def locked_error(self, slot: Slot, required: int) -> ArenaLockedError:
        """The error for a request that would grow ``slot`` while locked."""
        caller = caller_info()
        capacity = slot.buffer.capacity
        return ArenaLockedError(
            f"arena is locked but allocation from '{caller}' requires "
            f"{format_mb(required)} ({required} bytes), current size is "
            f"{format_mb(capacity)} in slot {slot.describe()} on {self.device}"
            + (" (this slot was never sized during warm-up)" if slot.growths == 0 else "")
            + "; growth after lock() is refused. Warm up this size before locking, presize "
            "with reserve(), or use try_get_simultaneous() to fall back",
            caller=caller,
            required=required,
            current=capacity,
            slot=(slot.ubatch, slot.lane),
        )

    def new_key_refused(self, slot: Slot, key: Any, what: str) -> ArenaLockedError:
        """The error for a new persistent key while locked."""
        caller = caller_info()
        return ArenaLockedError(
            f"arena is locked but '{caller}' asks for a new persistent {what} {key!r} in slot "
            f"{slot.describe()}; create persistent {what}s during warm-up, before lock()",
            caller=caller,
            slot=(slot.ubatch, slot.lane),
            key=key,
        )

    # ------------------------------------------------------------------ observability
    def note_call_site(self, required: int, slot: Slot | None = None, specs: Any = None) -> None:
        """Remember the peak bytes requested from the caller's ``file:line:function``.

        With ``slot`` and ``specs`` (unlocked requests), also remember the slot's last
        request (for :meth:`arena.Arena.memory_snapshot`) and tell the profile recorder.
        """
        # Two frames are arena's own for sure: this method and the request that called it.
        site = caller_info(2)
        call_sites = self.call_sites
        if call_sites.get(site, -1) < required:
            with self.mutex:
                if call_sites.get(site, -1) < required:
                    call_sites[site] = required
        if slot is not None:
            self.last_requests[slot.index] = (site, specs)
            recorder = self.recorder
            if recorder is not None:
                recorder.note(site, slot, specs, required)

    def add_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Register ``listener``; see :meth:`arena.Arena.add_listener`."""
        if not callable(listener):
            raise ConfigError(f"listener must be callable, got {listener!r}")
        with self.mutex:
            self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Unregister ``listener`` (ignored if it was never added)."""
        with self.mutex:
            if listener in self.listeners:
                self.listeners.remove(listener)

    def sizes(self) -> tuple[int, ...]:
        """Every slot's capacity, ubatch-major."""
        return tuple(s.buffer.capacity for s in self.slots)

    def announce(self, kind: str, resizes: Sequence[Resize] = ()) -> None:
        """Log and emit ``resizes`` then one ``kind`` event (skipped when ``kind`` is
        ``"resize"``). Called with the mutex released, so a listener may use the arena."""
        for slot, old, new in resizes:
            ubatches, lanes = self.shape
            log_event(
                f"resized slot {slot.describe()} from '{caller_info()}': "
                f"{format_mb(old)} -> {format_mb(new)} ({ubatches} ubatches x {lanes} lanes, "
                f"total memory {format_mb(sum(self.sizes()))})",
                debug=self.debug,
            )
            self._emit("resize", (slot.ubatch, slot.lane), old, new)
        if kind != "resize":
            if kind in ("lock", "unlock"):
                sizes = [round(s / MB, 2) for s in self.sizes()]
                log_event(f"{kind}ed. Current sizes (MB): {sizes}", debug=self.debug)
            else:
                log_event(f"{kind}d arena on {self.device}", debug=self.debug)
            self._emit(kind, None, 0, 0)

    def _emit(self, kind: str, slot: tuple[int, int] | None, old: int, new: int) -> None:
        listeners = self.listeners
        if not listeners:
            return
        event = ArenaEvent(kind, caller_info(), slot, old, new, self.sizes())
        for listener in list(listeners):
            listener(event)
