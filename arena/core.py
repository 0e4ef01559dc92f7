"""The :class:`Arena`: slots, growth, locking, persistent buffers and statistics."""

from __future__ import annotations

import contextvars
import importlib
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, TypeVar

from .devices import Device, default_device, parse_device
from .errors import (
    ArenaClosedError,
    ArenaLockedError,
    ArenaOutOfMemoryError,
    ConfigError,
    PersistentMismatchError,
    SlotError,
)
from .front import Front
from .layout import DEFAULT_ALIGNMENT, check_alignment, compute_layout, round_up
from .observe import ArenaEvent, caller_info, debug_from_env, format_mb, log_event
from .slot import PersistentBuffer, Slot
from .sources import Allocation, MemorySource
from .stats import ArenaStats, SlotStats

__all__ = ["FRAMEWORKS", "Arena"]

T = TypeVar("T")

#: Framework names an arena can hand out views in.
FRAMEWORKS = ("numpy", "torch", "cupy", "jax")

_arena_ids = itertools.count()


class Arena:
    """A workspace of preallocated byte buffers carved into typed, zero-copy views.

    One buffer per (micro-batch, lane) slot, allocated lazily and grown on demand during
    warm-up. After :meth:`lock`, requests that fit are served with no allocation at all,
    and pointers never move; requests that would grow raise :class:`ArenaLockedError`.

    Parameters
    ----------
    device : str, int, Device, torch.device, cupy.cuda.Device or None
        Where the memory lives. ``None`` picks CUDA device 0 when CuPy sees one, else
        the host (``"cpu"``).
    ubatches : int, optional
        Number of micro-batch slots (threads running overlapped micro-batches).
    lanes : int, optional
        Number of independent lanes per micro-batch (e.g. draft and target models).
    alignment : int, optional
        Byte alignment of every view's offset: a power of two >= 16 (default 256).
    growth : "exact", "pow2" or int, optional
        How a growing buffer is sized: exactly the request, the next power of two, or
        the request rounded up to a multiple of the given number of bytes.
    framework : str, optional
        Framework of :meth:`get_simultaneous`'s views: ``"numpy"``, ``"torch"``,
        ``"cupy"`` or ``"jax"``. By default torch when it is already imported, else
        CuPy for a CUDA arena, else NumPy.
    source : MemorySource or str, optional
        Where memory comes from. Default: page-aligned NumPy memory on the host, direct
        ``cudaMalloc`` through CuPy on a GPU. Strings name the built-in CUDA sources
        (``"device"``, ``"pool"``, ``"torch"``, ``"pinned"``).
    ubatch_resolver : callable, optional
        Called on every request to get the current micro-batch id (like vLLM's
        ``dbo_current_ubatch_id``); replaces the per-thread binding.
    lane_resolver : callable, optional
        Called on every request to get the current lane; replaces :meth:`lane`.
    alloc_context : callable, optional
        Called with no arguments around every allocation; must return a context manager
        (e.g. a sleep-mode memory pool's ``use_memory_pool``), like vLLM's hook.
    debug : bool, optional
        Log every resize, lock and unlock at INFO. Default: the ``ARENA_DEBUG`` variable.
    max_cached_layouts : int, optional
        Prepared view sets kept per slot and framework (oldest dropped first).
    cached_views : bool, optional
        Make every front cached by default (see :meth:`front`): a repeated identical
        request returns the very same view objects. Off by default.
    """

    def __init__(
        self,
        device: Any = None,
        *,
        ubatches: int = 1,
        lanes: int = 1,
        alignment: int = DEFAULT_ALIGNMENT,
        growth: str | int = "exact",
        framework: str | None = None,
        source: MemorySource | str | None = None,
        ubatch_resolver: Callable[[], int] | None = None,
        lane_resolver: Callable[[], int] | None = None,
        alloc_context: Callable[[], AbstractContextManager[Any]] | None = None,
        debug: bool | None = None,
        max_cached_layouts: int = 256,
        cached_views: bool = False,
    ) -> None:
        self._ubatches = _positive("ubatches", ubatches)
        self._lanes = _positive("lanes", lanes)
        self._alignment = check_alignment(alignment)
        self._growth = _check_growth(growth)
        self._max_cached = _positive("max_cached_layouts", max_cached_layouts)
        if ubatch_resolver is not None and not callable(ubatch_resolver):
            raise ConfigError(
                f"ubatch_resolver must be a callable returning an int, got {ubatch_resolver!r}"
            )
        if lane_resolver is not None and not callable(lane_resolver):
            raise ConfigError(
                f"lane_resolver must be a callable returning an int, got {lane_resolver!r}"
            )
        self._resolver = ubatch_resolver
        self._lane_resolver = lane_resolver
        self._single = (
            ubatch_resolver is None
            and lane_resolver is None
            and self._ubatches == 1
            and self._lanes == 1
        )
        self._listeners: list[Callable[[ArenaEvent], None]] = []
        if alloc_context is not None and not callable(alloc_context):
            raise ConfigError(
                f"alloc_context must be a callable returning a context manager, got "
                f"{alloc_context!r}"
            )
        self._alloc_context = alloc_context
        self._source = _make_source(device, source)
        self._device: Device = self._source.device
        self._capture_check: Callable[[Device, str], None] | None = None
        if self._device.is_cuda:
            from .cuda import check_not_capturing

            self._capture_check = check_not_capturing
        self._debug = debug_from_env() if debug is None else bool(debug)
        self._slots = [
            Slot(ub * self._lanes + lane, ub, lane)
            for ub in range(self._ubatches)
            for lane in range(self._lanes)
        ]
        self._id = next(_arena_ids)
        self._tls = _UbatchBinding()
        self._lane: contextvars.ContextVar[int] = contextvars.ContextVar(
            f"arena_lane_{self._id}", default=0
        )
        self._growth_lock = threading.RLock()
        self._locked = False
        self._closed = False
        self._allocations = 0
        self._frees = 0
        self._allocations_while_locked = 0
        self._call_sites: dict[str, int] = {}
        self._fronts: dict[tuple[str, bool], Front] = {}
        self._cached_views = bool(cached_views)
        self._framework = self._pick_framework(framework)
        self._default_front: Front | None = None

    # ------------------------------------------------------------------ properties
    @property
    def device(self) -> Device:
        """The device the arena's memory lives on."""
        return self._device

    @property
    def source(self) -> MemorySource:
        """The memory source."""
        return self._source

    @property
    def ubatches(self) -> int:
        """Number of micro-batch slots."""
        return self._ubatches

    @property
    def lanes(self) -> int:
        """Number of lanes per micro-batch."""
        return self._lanes

    @property
    def alignment(self) -> int:
        """Byte alignment of every view offset."""
        return self._alignment

    @property
    def framework(self) -> str:
        """Framework of the views :meth:`get_simultaneous` returns."""
        return self._framework

    @property
    def is_locked(self) -> bool:
        """Whether growth is refused."""
        return self._locked

    @property
    def is_closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # ------------------------------------------------------------------ fronts
    def front(self, framework: str, *, cached: bool | None = None) -> Front:
        """The front that hands out views of this arena in ``framework``.

        Parameters
        ----------
        framework : str
            ``"numpy"``, ``"torch"``, ``"cupy"`` or ``"jax"``.
        cached : bool, optional
            Return the very same view objects for a repeated identical request in the
            same slot (until the buffer changes) instead of fresh views. Cheaper, but the
            objects are shared: never change their metadata in place. Default: the
            arena's ``cached_views`` setting.

        Raises
        ------
        FrameworkUnavailableError
            If the framework is not installed or cannot view this device's memory.
        """
        use_cache = self._cached_views if cached is None else bool(cached)
        front = self._fronts.get((framework, use_cache))
        if front is None:
            if framework not in FRAMEWORKS:
                raise ConfigError(
                    f"unknown framework {framework!r}; choose one of {', '.join(FRAMEWORKS)}"
                )
            adapter = importlib.import_module(f"arena.adapters.{framework}")
            adapter.check_device(self._device)
            front = Front(self, adapter, use_cache)
            self._fronts[(framework, use_cache)] = front
        return front

    @property
    def numpy(self) -> Front:
        """Views as NumPy arrays (host memory only)."""
        return self.front("numpy")

    @property
    def torch(self) -> Front:
        """Views as torch tensors."""
        return self.front("torch")

    @property
    def cupy(self) -> Front:
        """Views as CuPy arrays (device memory only)."""
        return self.front("cupy")

    @property
    def jax(self) -> Front:
        """Views as JAX arrays (read-only by JAX's contract)."""
        return self.front("jax")

    def _default(self) -> Front:
        front = self._default_front
        if front is None:
            front = self._default_front = self.front(self._framework)
        return front

    def _pick_framework(self, framework: str | None) -> str:
        if framework is not None:
            if framework not in FRAMEWORKS:
                raise ConfigError(
                    f"unknown framework {framework!r}; choose one of {', '.join(FRAMEWORKS)}"
                )
            return framework
        import sys

        if "torch" in sys.modules:
            return "torch"
        return "cupy" if self._device.is_cuda else "numpy"

    # ------------------------------------------------------------------ requests
    def get_simultaneous(self, *specs: tuple[Any, Any]) -> list[Any]:
        """Views for several ``(shape, dtype)`` requests, all usable at the same time.

        The views live in the current slot's buffer and stay valid until the next call on
        the same slot, which reuses the same bytes. They are in :attr:`framework`; use
        ``arena.torch.get_simultaneous`` (or ``.numpy``, ``.cupy``, ``.jax``) for another.

        Raises
        ------
        ArenaLockedError
            The request needs more memory than the slot holds and the arena is locked.
        SpecError, DTypeError
            Malformed request.
        """
        return self._default().get_simultaneous(*specs)

    def try_get_simultaneous(self, *specs: tuple[Any, Any]) -> list[Any] | None:
        """Like :meth:`get_simultaneous`, but ``None`` when locked and too small."""
        return self._default().try_get_simultaneous(*specs)

    def get_persistent(
        self, key: Any, shape: tuple[int, ...], dtype: Any, zero_init: bool = False
    ) -> Any:
        """A buffer that keeps its contents across calls; see :meth:`Front.get_persistent`."""
        return self._default().get_persistent(key, shape, dtype, zero_init)

    def get_persistent_resource(self, key: Any, factory: Callable[[], T]) -> T:
        """Any object built once per key and slot by ``factory()``, then returned as is.

        Raises
        ------
        ArenaLockedError
            For a new key while locked.
        """
        slot = self._slot()
        try:
            return slot.resources[key]  # type: ignore[no-any-return]
        except KeyError:
            pass
        if self._locked:
            raise self._new_key_refused(slot, key, "resource")
        resource = factory()
        slot.resources[key] = resource
        return resource

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

    # ------------------------------------------------------------------ growth
    def _ensure(self, slot: Slot, required: int) -> bool:
        """Make ``slot`` hold ``required`` bytes; False when that needs growth while locked."""
        if slot.allocation is None or required > slot.capacity or slot.pending > slot.capacity:
            if self._locked:
                return False
            with self._growth_lock:
                self._grow(slot, max(required, slot.pending))
        slot.high_water = max(slot.high_water, required)
        return True

    def _grow(self, slot: Slot, target: int) -> None:
        capacity = self._grown_size(target)
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
                        self._replace_buffer(slot, target)
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
    def locked(self) -> Iterator[Arena]:
        """Lock inside the block; restore the previous state after."""
        was_locked = self._locked
        self.lock()
        try:
            yield self
        finally:
            if not was_locked and not self._closed:
                self.unlock()

    @contextmanager
    def unlocked(self) -> Iterator[Arena]:
        """Unlock inside the block (re-warm-up); lock again after if it was locked."""
        was_locked = self._locked
        self.unlock()
        try:
            yield self
        finally:
            if was_locked and not self._closed:
                self.lock()

    def _sizes_mb(self) -> list[float]:
        return [round(s.capacity / 2**20, 2) for s in self._slots]

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

    # ------------------------------------------------------------------ stats
    def _note_call_site(self, required: int) -> None:
        site = caller_info()
        if self._call_sites.get(site, -1) < required:
            with self._growth_lock:
                if self._call_sites.get(site, -1) < required:
                    self._call_sites[site] = required

    def stats(self) -> ArenaStats:
        """A snapshot of capacities, growths, allocations and per-call-site peaks."""
        slots = tuple(
            SlotStats(
                s.ubatch,
                s.lane,
                s.capacity,
                s.high_water,
                s.growths,
                s.calls,
                s.persistent_bytes,
                len(s.persistent) + len(s.resources),
            )
            for s in self._slots
        )
        return ArenaStats(
            device=str(self._device),
            locked=self._locked,
            closed=self._closed,
            slots=slots,
            allocations=self._allocations,
            frees=self._frees,
            allocations_while_locked=self._allocations_while_locked,
            calls=sum(s.calls for s in self._slots),
            call_sites=dict(self._call_sites),
        )

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Release every buffer. Views made before stay valid (they own their memory)."""
        if self._closed:
            return
        with self._growth_lock:
            self._closed = True
            for slot in self._slots:
                allocation, slot.allocation, slot.capacity = slot.allocation, None, 0
                slot.drop_views()
                if allocation is not None:
                    self._release(allocation)
                persistent, slot.persistent = slot.persistent, {}
                for entry in persistent.values():
                    self._release(entry.allocation)
                slot.resources = {}
        self._emit("close")
        log_event(f"closed arena on {self._device}", debug=self._debug)

    def __enter__(self) -> Arena:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> ArenaClosedError:
        return ArenaClosedError(
            f"this arena on {self._device} is closed (close() or reset_arena() was called); "
            "views made before stay valid, but new requests need a new Arena or init_arena()"
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("locked" if self._locked else "unlocked")
        sizes = ", ".join(format_mb(s.capacity) for s in self._slots)
        return (
            f"Arena(device='{self._device}', ubatches={self._ubatches}, lanes={self._lanes}, "
            f"alignment={self._alignment}, framework='{self._framework}', {state}, "
            f"slots=[{sizes}])"
        )


class _UbatchBinding(threading.local):
    """Per-thread micro-batch binding; the class attribute is every thread's default."""

    ubatch = 0


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
    return value


def _check_growth(growth: Any) -> str | int:
    if growth in ("exact", "pow2"):
        return str(growth)
    if isinstance(growth, int) and not isinstance(growth, bool) and growth >= 1:
        return growth
    raise ConfigError(
        f"growth must be 'exact', 'pow2' or a positive int granularity in bytes, got {growth!r}"
    )


def _make_source(device: Any, source: MemorySource | str | None) -> MemorySource:
    if source is not None and not isinstance(source, str):
        if not isinstance(source, MemorySource):
            raise ConfigError(
                f"source must provide device, allocate(nbytes) and release(allocation); "
                f"got {type(source).__name__}"
            )
        if device is not None and parse_device(device) != source.device:
            raise ConfigError(
                f"device={device!r} disagrees with the source's device {source.device}; "
                "pass only one of them"
            )
        return source
    resolved = default_device() if device is None else parse_device(device)
    if not resolved.is_cuda:
        if source in (None, "host"):
            from .sources import HostSource

            return HostSource()
        if source == "pinned":
            from .cuda import PinnedSource

            return PinnedSource()
        raise ConfigError(
            f"source={source!r} is not a host source; on device {resolved} use 'host' "
            "(default) or 'pinned', or a CUDA device for 'device', 'pool' or 'torch'"
        )
    from .cuda import cuda_source

    return cuda_source(resolved, source or "device")


def _oom_hint(device: Device) -> str:
    if not device.is_cuda:
        return ""
    import sys

    if "jax" in sys.modules:
        return (
            ". JAX is imported and preallocates 75% of GPU memory at first use: set "
            "XLA_PYTHON_CLIENT_PREALLOCATE=false or XLA_PYTHON_CLIENT_MEM_FRACTION before "
            "importing JAX"
        )
    return ""
