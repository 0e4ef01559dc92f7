"""Growth, lock, reservation and persistent buffers: everything that allocates."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

from .devices import Device
from .errors import ArenaLockedError, ArenaOutOfMemoryError, ConfigError, PersistentMismatchError
from .layout import compute_layout, round_up
from .observe import MB, caller_info, format_mb, log_event
from .slot import PersistentBuffer, Slot
from .sources import Allocation, empty_allocation
from .state import ArenaState

__all__ = ["GrowthMixin"]

_A = TypeVar("_A", bound="GrowthMixin")


class GrowthMixin(ArenaState):
    """The allocating half of :class:`arena.Arena`.

    Invariant: nothing here allocates while ``_locked`` is set, except through paths that
    check it first and refuse.
    """

    def reserve(self, *specs: tuple[Any, Any], lane: int | None = None) -> int:
        """Size slots so that this request fits in each of them; returns its bytes.

        Parameters
        ----------
        *specs : tuple of (shape, dtype)
            The worst-case request.
        lane : int, optional
            Size only this lane's slots (every micro-batch); default every slot.
        """
        layout = compute_layout(specs, self._alignment)
        self.reserve_bytes(layout.total, lane=lane)
        return layout.total

    def reserve_bytes(self, nbytes: int, *, lane: int | None = None) -> int:
        """Size slots (every one, or one lane's) to hold at least ``nbytes``.

        Returns ``nbytes``. Growth follows the arena's growth policy.

        Raises
        ------
        ArenaLockedError
            If a slot would have to grow while locked.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ConfigError(f"nbytes must be an int >= 0, got {nbytes!r}")
        if lane is not None:
            self._check_index("lane", lane, self._lanes)
        self._check_open()
        with self._growth_lock:
            short = [
                s for s in self._slots if s.capacity < nbytes and (lane is None or s.lane == lane)
            ]
            if short and self._locked:
                raise self._locked_error(short[0], nbytes)
            for slot in short:
                self._grow(slot, nbytes)
        return nbytes

    # ------------------------------------------------------------------ growth
    def _ensure(self, slot: Slot, required: int) -> bool:
        """Make ``slot`` hold ``required`` bytes; False when that needs growth while locked."""
        if required > slot.capacity or slot.pending > slot.capacity:
            if self._locked:
                return False
            with self._growth_lock:
                self._grow(slot, max(required, slot.pending))
        slot.high_water = max(slot.high_water, required)
        return True

    def _grow(self, slot: Slot, target: int) -> None:
        """Grow ``slot`` to hold ``target`` bytes, following the growth policy."""
        self._resize(slot, self._grown_size(target))

    def _resize(self, slot: Slot, capacity: int) -> None:
        """Give ``slot`` a buffer of exactly ``capacity`` bytes; mark, emit and log it."""
        old_capacity = slot.capacity
        self._replace_buffer(slot, capacity)
        for sibling in self._siblings(slot):
            if sibling.capacity < capacity:
                sibling.pending = max(sibling.pending, capacity)
        total = sum(s.capacity for s in self._slots)
        self._emit("resize", slot, old_capacity, capacity)
        log_event(
            f"resized slot {slot.describe()} from '{caller_info()}': "
            f"{format_mb(old_capacity)} -> {format_mb(capacity)} "
            f"({self._ubatches} ubatches x {self._lanes} lanes, total memory {format_mb(total)})",
            debug=self._debug,
        )

    def _replace_buffer(self, slot: Slot, capacity: int) -> None:
        if self._capture_check is not None:
            self._capture_check(self._device, f"growing slot {slot.describe()} to {capacity} bytes")
        old = slot.allocation
        slot.allocation = None
        slot.capacity = 0
        slot.pending = 0
        slot.drop_views()
        if old is not None:
            self._release(old)
            del old  # the source's memory goes back before the new block is asked for
        slot.allocation = self._allocate(capacity, slot, "scratch buffer")
        slot.capacity = capacity
        slot.growths += 1

    def _allocate(self, nbytes: int, slot: Slot, what: str) -> Allocation:
        if self._locked:  # defensive: every caller checks first
            self._allocations_while_locked += 1
        if self._capture_check is not None:
            self._capture_check(self._device, f"allocating the {what}")
        context = nullcontext() if self._alloc_context is None else self._alloc_context()
        try:
            with context:
                allocation = self._source.allocate(nbytes)
        except MemoryError as exc:
            raise ArenaOutOfMemoryError(
                f"could not allocate {nbytes} bytes ({format_mb(nbytes)}) for the {what} of "
                f"slot {slot.describe()} on {self._device} from {self._source!r}: {exc}; "
                "free memory elsewhere, request less, or presize with reserve() earlier"
                + _oom_hint(self._device)
            ) from exc
        self._allocations += 1
        return allocation

    def _empty_allocation(self) -> Allocation:
        """A zero-byte block on the arena's device, made without the memory source."""
        if self._empty is None:
            self._empty = empty_allocation(self._device)
        return self._empty

    def _release(self, allocation: Allocation) -> None:
        self._source.release(allocation)
        self._frees += 1

    def _grown_size(self, target: int) -> int:
        target = max(target, self._alignment)
        growth = self._growth
        if growth == "exact":
            return round_up(target, self._alignment)
        if growth == "pow2":
            return 1 << (target - 1).bit_length()
        assert isinstance(growth, int)
        return round_up(-(-target // growth) * growth, self._alignment)

    def _siblings(self, slot: Slot) -> list[Slot]:
        return [s for s in self._slots if s.lane == slot.lane and s is not slot]

    def _locked_error(self, slot: Slot, required: int) -> ArenaLockedError:
        caller = caller_info()
        return ArenaLockedError(
            f"arena is locked but allocation from '{caller}' requires "
            f"{format_mb(required)} ({required} bytes), current size is "
            f"{format_mb(slot.capacity)} in slot {slot.describe()} on {self._device}"
            + (" (this slot was never sized during warm-up)" if slot.allocation is None else "")
            + "; growth after lock() is refused. Warm up this size before locking, presize "
            "with reserve(), or use try_get_simultaneous() to fall back",
            caller=caller,
            required=required,
            current=slot.capacity,
            slot=(slot.ubatch, slot.lane),
        )

    def _new_key_refused(self, slot: Slot, key: Any, what: str) -> ArenaLockedError:
        caller = caller_info()
        return ArenaLockedError(
            f"arena is locked but '{caller}' asks for a new persistent {what} {key!r} in slot "
            f"{slot.describe()}; create persistent {what}s during warm-up, before lock()",
            caller=caller,
            slot=(slot.ubatch, slot.lane),
            key=key,
        )

    # ------------------------------------------------------------------ persistent
    def _persistent(
        self, slot: Slot, key: Any, shape: Any, dtype: Any, zero_init: bool
    ) -> PersistentBuffer:
        entry = slot.persistent.get(key)
        layout = compute_layout(((shape, dtype),), self._alignment)
        if entry is not None:
            old, new = entry.layout.views[0], layout.views[0]
            if old.shape != new.shape or old.dtype != new.dtype:
                raise PersistentMismatchError(
                    f"persistent buffer {key!r} in slot {slot.describe()} was created as "
                    f"shape {old.shape} {old.dtype.name}, now requested as {new.shape} "
                    f"{new.dtype.name}; use another key for a different buffer",
                    key=key,
                    existing=(old.shape, old.dtype.name),
                    requested=(new.shape, new.dtype.name),
                )
            return entry
        if self._locked:
            raise self._new_key_refused(slot, key, "buffer")
        with self._growth_lock:
            allocation = self._allocate(
                max(layout.total, self._alignment), slot, f"persistent buffer {key!r}"
            )
        if zero_init:
            allocation.owner.fill(0)
        entry = PersistentBuffer(allocation, layout)
        slot.persistent[key] = entry
        return entry

    # ------------------------------------------------------------------ lock
    def lock(self) -> None:
        """Freeze sizes: size every slot like its siblings, then refuse growth.

        Slots of one lane grow to the largest of them first, so no micro-batch is left
        unsized. After this, no allocation of any kind happens until :meth:`unlock`.
        """
        self._check_open()
        with self._growth_lock:
            for lane in range(self._lanes):
                group = [s for s in self._slots if s.lane == lane]
                target = max(s.capacity for s in group)
                for slot in group:
                    if slot.capacity < target:
                        self._resize(slot, target)
            self._locked = True
        self._emit("lock")
        log_event(f"locked. Current sizes (MB): {self._sizes_mb()}", debug=self._debug)

    def unlock(self) -> None:
        """Allow growth again (for a new warm-up, e.g. after elastic re-sharding)."""
        self._check_open()
        self._locked = False
        self._emit("unlock")
        log_event(f"unlocked. Current sizes (MB): {self._sizes_mb()}", debug=self._debug)

    @contextmanager
    def locked(self: _A) -> Iterator[_A]:
        """Lock inside the block; restore the previous state after."""
        was_locked = self._locked
        self.lock()
        try:
            yield self
        finally:
            if not was_locked and not self._closed:
                self.unlock()

    @contextmanager
    def unlocked(self: _A) -> Iterator[_A]:
        """Unlock inside the block (re-warm-up); lock again after if it was locked."""
        was_locked = self._locked
        self.unlock()
        try:
            yield self
        finally:
            if was_locked and not self._closed:
                self.lock()

    def _sizes_mb(self) -> list[float]:
        return [round(s.capacity / MB, 2) for s in self._slots]

    def _note_call_site(self, required: int) -> None:
        site = caller_info()
        if self._call_sites.get(site, -1) < required:
            with self._growth_lock:
                if self._call_sites.get(site, -1) < required:
                    self._call_sites[site] = required


def _oom_hint(device: Device) -> str:
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
