"""Slot selection, events and open/closed state shared by the arena's parts."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from .devices import Device
from .errors import ArenaClosedError, ConfigError, SlotError
from .observe import ArenaEvent, caller_info
from .slot import Slot
from .sources import Allocation, MemorySource

__all__ = ["ArenaState"]


class _UbatchBinding(threading.local):
    """Per-thread micro-batch binding; the class attribute is every thread's default."""

    ubatch = 0


class ArenaState:
    """The state every part of :class:`arena.Arena` works on, and slot selection."""

    _ubatches: int
    _lanes: int
    _alignment: int
    _growth: str | int
    _max_cached: int
    _resolver: Callable[[], int] | None
    _lane_resolver: Callable[[], int] | None
    _single: bool
    _listeners: list[Callable[[ArenaEvent], None]]
    _alloc_context: Callable[[], AbstractContextManager[Any]] | None
    _source: MemorySource
    _device: Device
    _capture_check: Callable[[Device, str], None] | None
    _debug: bool
    _slots: list[Slot]
    _id: int
    _tls: _UbatchBinding
    _lane: contextvars.ContextVar[int]
    _growth_lock: threading.RLock
    _locked: bool
    _closed: bool
    _allocations: int
    _frees: int
    _allocations_while_locked: int
    _call_sites: dict[str, int]
    _empty: Allocation | None
    _track_sites: bool

    # ------------------------------------------------------------------ slots
    def _slot(self) -> Slot:
        if self._closed:
            raise self._closed_error()
        if self._single:
            return self._slots[0]
        if self._resolver is None:
            ubatch = self._tls.ubatch
        else:
            ubatch = self._resolver()
            if ubatch.__class__ is not int or not 0 <= ubatch < self._ubatches:
                raise SlotError(
                    f"ubatch_resolver returned {ubatch!r}, but this arena has "
                    f"{self._ubatches} ubatch slot(s) (0..{self._ubatches - 1}); "
                    "construct the arena with a larger ubatches="
                )
        if self._lane_resolver is None:
            lane = self._lane.get()
        else:
            lane = self._lane_resolver()
            if lane.__class__ is not int or not 0 <= lane < self._lanes:
                raise SlotError(
                    f"lane_resolver returned {lane!r}, but this arena has {self._lanes} "
                    f"lane(s) (0..{self._lanes - 1}); construct the arena with a larger lanes="
                )
        return self._slots[ubatch * self._lanes + lane]

    def current_slot(self) -> tuple[int, int]:
        """``(ubatch, lane)`` of the slot the calling thread and context use."""
        slot = self._slot()
        return slot.ubatch, slot.lane

    def bind_ubatch(self, ubatch: int) -> None:
        """Bind the calling thread to a micro-batch slot (default 0)."""
        self._check_index("ubatch", ubatch, self._ubatches)
        self._tls.ubatch = ubatch

    @contextmanager
    def ubatch(self, ubatch: int) -> Iterator[None]:
        """Bind the calling thread to ``ubatch`` inside the block, then restore."""
        self._check_index("ubatch", ubatch, self._ubatches)
        previous = self._tls.ubatch
        self._tls.ubatch = ubatch
        try:
            yield
        finally:
            self._tls.ubatch = previous

    @contextmanager
    def lane(self, lane: int) -> Iterator[None]:
        """Use ``lane`` inside the block (context-local: threads and tasks stay apart)."""
        self._check_index("lane", lane, self._lanes)
        token = self._lane.set(lane)
        try:
            yield
        finally:
            self._lane.reset(token)

    def _check_index(self, what: str, value: Any, count: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SlotError(f"{what} must be an int, got {type(value).__name__} {value!r}")
        if not 0 <= value < count:
            fix = (
                f"{what} indices start at 0"
                if value < 0
                else f"construct the arena with {what}{'es' if what == 'ubatch' else 's'}="
                f"{value + 1} or more"
            )
            raise SlotError(
                f"{what} {value} is out of range: this arena has {count} {what} slot(s) "
                f"(0..{count - 1}); {fix}"
            )

    # ------------------------------------------------------------------ events
    def add_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Call ``listener(event)`` after every resize, lock, unlock and close.

        Listeners run on the slow paths only; an exception in a listener propagates.
        """
        if not callable(listener):
            raise ConfigError(f"listener must be callable, got {listener!r}")
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Stop calling ``listener``; a listener never added is ignored."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _emit(
        self, kind: str, slot: Slot | None = None, old_bytes: int = 0, new_bytes: int = 0
    ) -> None:
        if not self._listeners:
            return
        event = ArenaEvent(
            kind,
            caller_info(),
            None if slot is None else (slot.ubatch, slot.lane),
            old_bytes,
            new_bytes,
            tuple(s.capacity for s in self._slots),
        )
        for listener in list(self._listeners):
            listener(event)

    # ------------------------------------------------------------------ open/closed
    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> ArenaClosedError:
        return ArenaClosedError(
            f"this arena on {self._device} is closed (close() or reset_arena() was called); "
            "views made before stay valid, but new requests need a new Arena or init_arena()"
        )
