"""The :class:`Arena`: policy, memory source, lock state, and the slots it composes."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from numbers import Integral
from typing import TYPE_CHECKING, Any, TypeVar

from arena.assembly import assemble, close_when_collected, describe_arena
from arena.base.events import ArenaEvent
from arena.base.layout import DEFAULT_ALIGNMENT, compute_layout
from arena.config import FRAMEWORKS, check_flag, check_framework, check_inference, settings
from arena.distributed import SyncReport, sync_table
from arena.errors import SpecError
from arena.front import Front
from arena.kernels import memstats
from arena.kernels.budget import planned_bytes
from arena.kernels.library import OnGrow
from arena.kernels.triton import TritonAllocator
from arena.memory.devices import Device
from arena.memory.sources import MemorySource
from arena.observe.snapshot import table_snapshot
from arena.observe.stats import ArenaStats, arena_stats
from arena.planning.offsets import check_time_limit
from arena.planning.plan import plan_table_steps
from arena.planning.scopes import Scope
from arena.planning.steps import Step
from arena.slots.governor import StateFlag, StateSwitch
from arena.slots.persistent import PersistentStore
from arena.slots.sleep import check_level, in_place_mode
from arena.uncopyable import refuse_copies

if TYPE_CHECKING:
    import cupy
    import jax
    import numpy
    import torch

__all__ = ["FRAMEWORKS", "Arena"]

T = TypeVar("T")
_A = TypeVar("_A", bound="Arena")


class Arena:
    """A workspace of preallocated byte buffers carved into typed, zero-copy views.

    One buffer per (micro-batch, lane) slot, allocated lazily and grown on demand during
    warm-up. After :meth:`lock`, requests that fit are served with no allocation at all,
    and pointers never move; requests that would grow raise :class:`ArenaLockedError`.

    Parameters
    ----------
    device : str, int, Device, torch.device, cupy.cuda.Device or None
        Where the memory lives. ``None`` picks CUDA device 0 when one is usable, else
        the host (``"cpu"``).
    ubatches : int, optional
        Number of micro-batch slots (threads running overlapped micro-batches).
    lanes : int, optional
        Number of independent lanes per micro-batch (e.g. draft and target models).
    alignment : int, optional
        Byte alignment of every view's offset: a power of two from 16 to 2**30
        (default 256).
    growth : "exact", "pow2" or int, optional
        How a growing buffer is sized: exactly the request, the next power of two, or
        the request rounded up to a multiple of the given number of bytes.
    framework : str, optional
        Framework of :meth:`get_simultaneous`'s views: ``"numpy"``, ``"torch"``,
        ``"cupy"`` or ``"jax"``. By default torch when it is already imported, else
        CuPy for a CUDA arena (torch where CuPy is not installed), else NumPy.
    source : MemorySource, str or RMM-style resource, optional
        Where memory comes from. Default: page-aligned NumPy memory on the host
        (``ARENA_SOURCE``), direct ``cudaMalloc`` through CuPy on a GPU. Strings name
        the built-in sources (``"device"``, ``"pool"``, ``"torch"``, ``"pinned"``,
        ``"virtual"``: fixed addresses, docs/memory.md); an object with RMM's
        ``allocate``/``deallocate`` (``rmm.mr.DeviceMemoryResource``) is wrapped.
    ubatch_resolver : callable, optional
        Called on every request to get the current micro-batch id (like vLLM's
        ``dbo_current_ubatch_id``); replaces the per-thread binding (:meth:`ubatch` and
        :meth:`bind_ubatch` then raise ``ConfigError``).
    lane_resolver : callable, optional
        Called on every request to get the current lane; replaces :meth:`lane` (which
        then raises ``ConfigError``).
    alloc_context : callable, optional
        Called with no arguments around every allocation from the source (not around a
        fixed-address source's in-place commit); must return a context manager (e.g. a
        sleep-mode memory pool's ``use_memory_pool``), like vLLM's hook.
    debug : bool, optional
        Log resizes, lock and unlock at INFO, refuse two threads in one slot at once,
        check cached views for in-place changes, and retire torch and JAX views whose
        scope or step life ended (docs/planning.md). Default: ``ARENA_DEBUG``.
    max_cached_layouts : int, optional
        Prepared view sets kept per slot buffer and front (default 16384; only layouts
        seen twice are kept; when full, the oldest eighth not used lately is swept).
    cached_views : bool, optional
        Make every front cached by default (see :meth:`front`). Off by default.
    inference_views : bool, optional
        Make every torch front hand out torch inference tensors by default, and the
        library workspaces of a torch arena too (see :meth:`front`): for engines that run
        all their torch work, warm-up included, under ``torch.inference_mode()``. Off by
        default; other frameworks ignore it.
    track_call_sites : bool, optional
        Record the peak bytes per ``file:line:function`` while unlocked (:meth:`stats`).
    capture_probe : callable, optional
        Returns True while a CUDA graph is captured: growth is refused then and buffers
        served then are retired, not freed. Default: CuPy's and torch's current streams.
    profile : str, os.PathLike or False, optional
        A profile file that presizes the slots and records this run (``docs/sizing.md``).
        Default: a file of this arena's own beside ``ARENA_PROFILE``; False: none.
    poison : bool, optional
        Fill every request's views with a sentinel (NaN, or bytes ``0xA5``) so stale or
        unwritten scratch shows. Default: ``ARENA_POISON``.
    event_log : str or os.PathLike, optional
        Append every slot-buffer allocation and free to this CSV file in RMM's schema.
    max_bytes : int or str, optional
        Cap on every byte the arena holds (``"4GiB"`` works too): growth past it raises
        ``ArenaOutOfMemoryError``. Default: ``ARENA_MAX_BYTES``, else no cap.
    name : str, optional
        The arena's name (letters, digits, ``_``, ``-``): keys its profile (docs/sizing.md).
    """

    __reduce_ex__ = __copy__ = __deepcopy__ = refuse_copies("an Arena")

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
        max_cached_layouts: int = 16384,
        cached_views: bool = False,
        inference_views: bool = False,
        track_call_sites: bool = True,
        capture_probe: Callable[[], bool] | None = None,
        profile: Any = None,
        poison: bool | None = None,
        event_log: Any = None,
        max_bytes: int | str | None = None,
        name: str | None = None,
    ) -> None:
        config = settings(
            device,
            ubatches=ubatches,
            lanes=lanes,
            alignment=alignment,
            growth=growth,
            source=source,
            ubatch_resolver=ubatch_resolver,
            lane_resolver=lane_resolver,
            alloc_context=alloc_context,
            debug=debug,
            max_cached_layouts=max_cached_layouts,
            cached_views=cached_views,
            track_call_sites=track_call_sites,
            capture_probe=capture_probe,
            poison=poison,
            max_bytes=max_bytes,
            inference_views=inference_views,
        )
        parts = assemble(
            config,
            framework=framework,
            profile=profile,
            event_log=event_log,
            name=name,
            alloc_context=alloc_context,
            ubatch_resolver=ubatch_resolver,
            lane_resolver=lane_resolver,
        )
        self._config = config
        self._name = name
        self._table = parts.table
        self._governor = parts.table.governor
        self._selector = parts.selector
        self._fronts = parts.fronts
        self._framework = parts.framework
        self._recorder = parts.recorder
        self._log = parts.log
        self._workspaces = parts.workspaces
        self._default_front: Front[Any] | None = None
        self._closer = close_when_collected(self, parts.table, parts.recorder)

    @property
    def device(self) -> Device:
        """The device the arena's memory lives on."""
        return self._governor.device

    @property
    def name(self) -> str | None:
        """The arena's name (None unless given): it keys its profile."""
        return self._name

    @property
    def source(self) -> MemorySource:
        """The memory source."""
        return self._governor.ledger.source

    @property
    def ubatches(self) -> int:
        """Number of micro-batch slots."""
        return self._config.ubatches

    @property
    def lanes(self) -> int:
        """Number of lanes per micro-batch."""
        return self._config.lanes

    @property
    def alignment(self) -> int:
        """Byte alignment of every view offset."""
        return self._governor.alignment

    @property
    def framework(self) -> str:
        """Framework of the views :meth:`get_simultaneous` returns."""
        return self._framework

    @property
    def debug(self) -> bool:
        """Whether debug mode is on."""
        return self._governor.debug

    @property
    def is_locked(self) -> StateFlag:
        """Whether growth is refused: ``if ws.is_locked:``, or ``ws.is_locked()`` as in
        vLLM (both read the same)."""
        governor = self._governor
        return StateFlag(lambda: governor.locked)

    @property
    def is_closed(self) -> StateFlag:
        """Whether :meth:`close` was called: ``if ws.is_closed:`` or ``ws.is_closed()``."""
        governor = self._governor
        return StateFlag(lambda: governor.closed)

    def front(
        self, framework: str, *, cached: bool | None = None, inference: bool | None = None
    ) -> Front[Any]:
        """The front that hands out views of this arena in ``framework``.

        Parameters
        ----------
        framework : str
            ``"numpy"``, ``"torch"``, ``"cupy"`` or ``"jax"``.
        cached : bool, optional
            Hand out the very same view objects for a repeated request (cheaper; never
            change their metadata in place). Default: the arena's ``cached_views``.
        inference : bool, optional
            torch only: hand out torch inference tensors, built inside
            ``torch.inference_mode()`` whatever the caller's mode, which ops inside the
            mode run on as cheaply as on ``torch.empty``'s there (docs/torch-cuda.md).
            Outside the mode torch refuses writing them in place and saving them for
            backward. The front keeps view sets of its own. Default: the arena's
            ``inference_views`` for torch, False for other frameworks.

        Raises
        ------
        ConfigError, FrameworkUnavailableError
            An unknown framework, one not installed or unable to view this memory, or
            ``inference=True`` for another framework than torch.
        """
        if not isinstance(framework, str):  # a list or set is no key: named, not a TypeError
            check_framework(framework)
        use_cache = self._config.cached_views if cached is None else check_flag("cached", cached)
        if inference is None:
            inference = self._config.inference_for(framework)
        elif inference is not False:
            check_framework(framework)  # an unknown name is named first
            inference = check_inference(framework, inference)
        return self._fronts.get(self, framework, use_cache, inference)

    @property
    def numpy(self) -> Front[numpy.ndarray]:
        """Views as NumPy arrays (host memory only)."""
        return self.front("numpy")

    @property
    def torch(self) -> Front[torch.Tensor]:
        """Views as torch tensors."""
        return self.front("torch")

    @property
    def cupy(self) -> Front[cupy.ndarray]:
        """Views as CuPy arrays (device memory only)."""
        return self.front("cupy")

    @property
    def jax(self) -> Front[jax.Array]:
        """Views as JAX arrays (read-only by JAX's contract)."""
        return self.front("jax")

    def _default(self) -> Front[Any]:
        front = self._default_front
        if front is None:
            front = self._default_front = self.front(self._framework)
            # Made once, the default front serves the arena's requests itself: its own
            # methods, bound on this arena, so a request runs no frame of the arena's (a
            # subclass that overrides either keeps its own: each is looked at alone).
            cls = type(self)
            if cls.get_simultaneous is Arena.get_simultaneous:
                vars(self)["get_simultaneous"] = front.get_simultaneous
            if cls.try_get_simultaneous is Arena.try_get_simultaneous:
                vars(self)["try_get_simultaneous"] = front.try_get_simultaneous
        return front

    def get_simultaneous(self, *specs: tuple[Any, Any]) -> list[Any]:
        """Views in :attr:`framework` for several ``(shape, dtype)`` requests, valid until
        the next request on the same slot; see :meth:`Front.get_simultaneous`.

        The first request makes the default front; from then on ``ws.get_simultaneous``
        is that front's own method (bound on the arena once), as ``ws.try_get_simultaneous``
        is.

        Raises
        ------
        ArenaLockedError, ArenaClosedError, SpecError, DTypeError
            Locked and too small, closed, or a malformed request.
        """
        return self._default().get_simultaneous(*specs)

    def try_get_simultaneous(self, *specs: tuple[Any, Any]) -> list[Any] | None:
        """Like :meth:`get_simultaneous`, but ``None`` where it raises ArenaLockedError
        (locked, too small); unlocked, it grows and raises what growth raises (OOM too)."""
        return self._default().try_get_simultaneous(*specs)

    def scope(self) -> Scope[Any]:
        """A ``with`` block whose requests stay valid until it exits, in :attr:`framework`;
        see :meth:`Front.scope` and docs/planning.md."""
        return self._default().scope()

    def step(self, key: Hashable) -> Step[Any]:
        """One run of the step ``key``, in :attr:`framework`: recorded on the first run,
        placed by a plan from the second; see :meth:`Front.step` and docs/planning.md."""
        return self._default().step(key)

    def plan_steps(self, time_limit: float | None = None) -> dict[Any, int]:
        """Plan every step recorded but not planned yet, in every slot, and size each slot
        to what its plans need, larger or smaller (unlocked, where no capture used the
        buffer and nothing is open on the slot); returns step key -> planned bytes (the
        largest over slots).

        ``time_limit`` (seconds, default None) is passed to :func:`arena.plan_offsets` for
        each step planned: an exact search seeded with the heuristics' plan, never
        larger. Each key may take up to that long, and the arena's lock is held
        meanwhile, so use it at warm-up or offline, not between hot steps.
        """
        return plan_table_steps(self._table, check_time_limit(time_limit))

    def get_persistent(
        self, key: Any, shape: tuple[int, ...], dtype: Any, zero_init: bool = False
    ) -> Any:
        """A buffer that keeps its contents across calls; see :meth:`Front.get_persistent`."""
        return self._default().get_persistent(key, shape, dtype, zero_init)

    def get_persistent_resource(self, key: Any, factory: Callable[[], T]) -> T:
        """Any object built once per key and slot by ``factory()``, then returned as is;
        a new key while locked raises ArenaLockedError."""
        store = self._selector.select().store(PersistentStore)
        return store.resource(key, factory)  # type: ignore[no-any-return]

    def reserve(self, *specs: tuple[Any, Any], lane: int | None = None) -> int:
        """Size slots so that this request fits in each of them; returns its bytes.

        Parameters
        ----------
        *specs : tuple of (shape, dtype)
            The worst-case request.
        lane : int, optional
            Size only this lane's slots (every micro-batch); default every slot.

        Raises
        ------
        ArenaLockedError, SpecError, DTypeError
            A slot must grow while locked; a malformed spec (a byte count names
            :meth:`reserve_bytes`).
        """
        count = specs[0] if len(specs) == 1 else None
        # A byte count (an int, a NumPy integer: numbers.Integral) is reserve_bytes' job.
        if isinstance(count, Integral) and not isinstance(count, bool):
            raise SpecError(
                f"reserve() takes (shape, dtype) specs, got the int {specs[0]}; for a size "
                f"in bytes call reserve_bytes({specs[0]}), for a request write e.g. "
                "reserve(((4, 128), 'float32'))"
            )
        layout = compute_layout(specs, self.alignment)
        self.reserve_bytes(layout.total, lane=lane)
        return layout.total

    def reserve_bytes(self, nbytes: int, *, lane: int | None = None) -> int:
        """Size slots (every one, or one lane's) to hold at least ``nbytes``; returns it.

        Raises
        ------
        ArenaLockedError, ConfigError, SpecError
            A slot must grow while locked; ``nbytes`` not an int >= 0, or past 2**63 - 1.
        """
        self._table.reserve(nbytes, lane)
        return nbytes

    def current_slot(self) -> tuple[int, int]:
        """``(ubatch, lane)`` of the slot the calling thread and context use.

        Raises
        ------
        ArenaClosedError
            The arena is closed.
        """
        self._governor.check_open()
        slot = self._selector.select()
        return slot.ubatch, slot.lane

    def bind_ubatch(self, ubatch: int) -> None:
        """Bind the calling thread to a micro-batch slot (default 0). ``ConfigError`` on an
        arena built with ``ubatch_resolver`` (it picks every request's micro-batch)."""
        self._selector.bind_ubatch(ubatch)

    def ubatch(self, ubatch: int) -> AbstractContextManager[None]:
        """Bind the calling thread to ``ubatch`` inside a ``with`` block, then restore;
        ``ConfigError`` on entering, with ``ubatch_resolver`` (as :meth:`bind_ubatch`)."""
        return self._selector.ubatch(ubatch)

    def lane(self, lane: int) -> AbstractContextManager[None]:
        """Use ``lane`` inside a ``with`` block (context-local: threads and tasks apart);
        ``ConfigError`` on entering, on an arena built with ``lane_resolver``."""
        return self._selector.lane(lane)

    def lock(self, *, growth: str | None = None, group: Any = None) -> None:
        """Freeze sizes, then refuse growth; releases nothing, and after it returns nothing
        allocates until :meth:`unlock`.

        Per lane, every micro-batch's scratch is brought to the largest (smaller buffers
        retired), and gets each persistent buffer, library workspace and step plan a
        sibling has; steps not planned yet are planned (docs/overview.md, "Growth and
        lock"). Persistent resources are not built for siblings. ``growth="in_place"``
        (``source="virtual"``): growth commits in place instead (docs/memory.md).
        ``group``: :meth:`sync` over it first (docs/distributed.md). A locked arena is left
        as it is (no size changes; steps recorded since are planned), as in vLLM.
        Returns None, as vLLM's ``lock_workspace()``: for a block that is locked and then
        restored, use ``with ws.locked():`` (``with ws.lock():`` locks, then fails with
        Python's TypeError on None, leaving the arena locked).
        """
        in_place = in_place_mode(self._governor, growth)
        if group is not None:
            sync_table(self._table, group)
        self._table.lock(in_place)

    def sleep(self, level: int = 1) -> None:
        """Release the memory, keep every address (``source="virtual"``; level 1 keeps
        persistent buffers and library workspaces, 2 nothing); see docs/memory.md."""
        self._table.sleep(check_level(level))

    def wake(self, *, poison: bool = False) -> None:
        """Commit the memory again at the same addresses, bring back what :meth:`sleep`
        kept (``poison``: discarded bytes read ``0xA5``); failed, it stays asleep."""
        self._table.wake(check_flag("poison", poison))

    @property
    def is_asleep(self) -> StateFlag:
        """Whether the arena sleeps; also callable, like :attr:`is_locked`."""
        governor = self._governor
        return StateFlag(lambda: bool(governor.asleep))

    def sync(self, group: Any = None) -> SyncReport:
        """A collective before :meth:`lock`: every rank of ``group`` leaves with the ranks'
        largest sizes and every key; see :func:`arena.distributed.sync_table`."""
        return sync_table(self._table, group)

    def unlock(self) -> None:
        """Allow growth again (for a new warm-up, e.g. after elastic re-sharding); an
        unlocked arena is left as it is (listeners still hear "unlock"), as in vLLM."""
        self._table.unlock()

    @property
    def locked(self: _A) -> StateSwitch[_A]:
        """``with ws.locked():`` locks inside the block and restores the previous state
        after. Not a state: ``if ws.locked:`` raises TypeError (use :attr:`is_locked`)."""
        return StateSwitch("locked", self, True, self._table)

    @property
    def unlocked(self: _A) -> StateSwitch[_A]:
        """``with ws.unlocked():`` unlocks inside the block (re-warm-up) and locks again
        after if it was locked. ``if ws.unlocked:`` raises TypeError."""
        return StateSwitch("unlocked", self, False, self._table)

    def triton_allocator(self, *, lane: int | None = None) -> TritonAllocator:
        """Triton's allocator over this arena (``ws.triton_allocator().install()``): called
        as ``(size, alignment, stream)``, it returns a ``torch.uint8`` tensor from one block
        per slot and stream (the same size, the same pointer); see :class:`TritonAllocator`.

        Parameters
        ----------
        lane : int, optional
            Serve this lane's slots; default the lane of the caller's context at each call.

        Raises
        ------
        FrameworkUnavailableError, SlotError
            Without torch, or for a lane out of range.
        """
        return TritonAllocator(self._table, self._selector, lane)

    def get_library_workspace(
        self, key: Any, nbytes: int, *, on_grow: OnGrow = None, zero_init: bool = False
    ) -> Any:
        """A ``uint8`` view of at least ``nbytes`` that a library holds across calls (the
        same key and size, the same memory); a larger ``nbytes`` while unlocked grows it
        and calls ``on_grow(new_view)`` (FlashInfer: ``reset_workspace_buffer``);
        ``zero_init=True`` zeroes it on first use and after every growth. See
        :meth:`arena.kernels.library.LibraryWorkspaces.get` and docs/kernel-libraries.md.

        Raises
        ------
        ArenaLockedError, GraphCaptureError, ArenaOutOfMemoryError
            To create or grow it while locked or capturing, or past memory or the cap.
        SpecError
            A bad size, or one that rounds up past the 2**63 - 1 bytes a buffer can
            address (naming the largest size the arena's alignment allows).
        """
        return self._workspaces.get(key, nbytes, on_grow, zero_init)

    def planned_bytes(self) -> int:
        """Bytes the arena will hold after :meth:`lock`, over every slot (scratch, retired,
        persistent, library workspaces, Triton): subtract it before sizing a KV cache."""
        return planned_bytes(self._table)

    def memory_stats(self) -> dict[str, int]:
        """A flat dict under ``torch.cuda.memory_stats()`` key names plus ``arena.*`` keys,
        agreeing with :meth:`memory_snapshot` by torch's rules (:mod:`arena.kernels.memstats`)."""
        return memstats.memory_stats(self._table)

    def reset_peak_memory_stats(self) -> None:
        """Set the ``.peak`` figures of :meth:`memory_stats` to their current values."""
        memstats.reset_peaks(self._governor, self._table.slots)

    def reset_accumulated_memory_stats(self) -> None:
        """Zero the accumulated figures of :meth:`memory_stats` (``*.allocated``, ``num_*``)."""
        memstats.reset_accumulated(self._governor)

    def add_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Call ``listener(event)`` after every resize, lock, unlock and close.

        Listeners run on the slow paths only, with no lock held (they may use the arena);
        an exception in a listener propagates to the call that caused the event, after
        the event's change is complete.
        """
        self._table.add_listener(listener)

    def remove_listener(self, listener: Callable[[ArenaEvent], None]) -> None:
        """Stop calling ``listener``; a listener never added is ignored."""
        self._table.remove_listener(listener)

    def stats(self) -> ArenaStats:
        """A snapshot of capacities, growths, allocations and per-call-site peaks."""
        return arena_stats(self._table, self._log.snapshot()[0] if self._log is not None else {})

    def memory_snapshot(self) -> dict[str, Any]:
        """The arena's memory in the format of ``torch.cuda.memory._snapshot()``: a segment
        per block the arena holds (each slot's last unlocked request's views listed in its
        scratch block), and a trace of allocations and frees, for ``torch.cuda._memory_viz``
        and https://pytorch.org/memory_viz (``docs/sizing.md``)."""
        return table_snapshot(self._table, self._log.snapshot()[1] if self._log is not None else {})

    def save_profile(self) -> bool:
        """Merge what was recorded so far into the profile file now (:meth:`lock`,
        :meth:`close` and exit do it too); whether it was written (a failure warns)."""
        return self._recorder.save() if self._recorder is not None else False

    def release_retired(self, *, include_captured: bool = False) -> int:
        """Release retired scratch buffers; returns the bytes given back. Buffers a CUDA
        graph capture read are kept until :meth:`close` unless ``include_captured=True``
        (only once every graph captured on them is destroyed); views stay valid."""
        return self._table.release_retired(check_flag("include_captured", include_captured))

    def close(self) -> None:
        """Release every buffer; views made before stay valid (they own their memory).
        Every block is released even if one release raises; the first error propagates.
        An arena garbage collected unclosed is closed then (its fronts stop serving)."""
        self._table.close()  # before the finalizer goes: an interrupted close is finished then
        self._closer.detach()

    def __enter__(self: _A) -> _A:
        """The arena itself; closed on exit.

        Raises
        ------
        ArenaClosedError
            If the arena is closed already (as ``with`` a closed file raises): its block
            could request nothing.
        """
        self._governor.check_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return describe_arena(self, self._table, self._framework)
