"""The :class:`Arena`: slots, growth, locking, persistent buffers and statistics."""

from __future__ import annotations

import contextvars
import importlib
import itertools
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from .config import check_growth, make_source, positive
from .devices import Device
from .errors import ConfigError
from .front import Front
from .growth import GrowthMixin
from .layout import DEFAULT_ALIGNMENT, check_alignment
from .observe import ArenaEvent, debug_from_env, format_mb, log_event
from .slot import Slot
from .sources import Allocation, MemorySource
from .state import _UbatchBinding
from .stats import ArenaStats, SlotStats

__all__ = ["FRAMEWORKS", "Arena"]

T = TypeVar("T")

#: Framework names an arena can hand out views in.
FRAMEWORKS = ("numpy", "torch", "cupy", "jax")

_arena_ids = itertools.count()


class Arena(GrowthMixin):
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
    track_call_sites : bool, optional
        Record the peak bytes requested per ``file:line:function`` while unlocked (see
        :meth:`stats`). The stack walk costs about 2 us per unlocked request; locked
        requests never pay it. Turn it off for arenas that are never locked.
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
        track_call_sites: bool = True,
    ) -> None:
        self._ubatches = positive("ubatches", ubatches)
        self._lanes = positive("lanes", lanes)
        self._alignment = check_alignment(alignment)
        self._growth = check_growth(growth)
        self._max_cached = positive("max_cached_layouts", max_cached_layouts)
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
        self._source = make_source(device, source)
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
        self._empty: Allocation | None = None
        self._fronts: dict[tuple[str, bool], Front] = {}
        self._cached_views = bool(cached_views)
        self._track_sites = bool(track_call_sites)
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
            objects are shared: never change their metadata in place (checked, with a
            warning and a rebuild, in debug mode). Default: the arena's ``cached_views``
            setting.

        Raises
        ------
        FrameworkUnavailableError
            If the framework is not installed or cannot view this device's memory.
        """
        use_cache = self._cached_views if cached is None else bool(cached)
        front = self._fronts.get((framework, use_cache))
        if front is None:
            _check_framework(framework)
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
            return _check_framework(framework)
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

    # ------------------------------------------------------------------ slots
    # ------------------------------------------------------------------ stats
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

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("locked" if self._locked else "unlocked")
        sizes = ", ".join(format_mb(s.capacity) for s in self._slots)
        return (
            f"Arena(device='{self._device}', ubatches={self._ubatches}, lanes={self._lanes}, "
            f"alignment={self._alignment}, framework='{self._framework}', {state}, "
            f"slots=[{sizes}])"
        )


def _check_framework(framework: str) -> str:
    if framework not in FRAMEWORKS:
        raise ConfigError(f"unknown framework {framework!r}; choose one of {', '.join(FRAMEWORKS)}")
    return framework
