"""Triton's allocator over arena memory: ``ws.triton_allocator().install()``.

Triton kernels that need global scratch (TMA descriptors made on the device, some
persistent and split-K kernels) call the allocator installed with ``triton.set_allocator``
as ``alloc_fn(size, alignment, stream)`` before each launch and use the returned object's
``data_ptr()``. vLLM installs ``torch.empty(size, dtype=torch.int8)``: a fresh block per
launch, from torch's caching allocator.

:class:`TritonAllocator` serves them from the arena instead:

* one growable block per (slot, stream), of its own (never inside the slot's scratch
  buffer, never overlapping a persistent buffer or a library workspace);
* every size the stream's block covers gets the block's first ``alignment``-aligned byte:
  the same size always returns the same pointer, so a CUDA graph captured with it reads
  the same address at replay. Kernels on one stream run one after another, so they can
  share the block; different streams never share bytes, since each has its own block;
* a larger size grows the stream's block under the arena's rules: refused while locked
  (:class:`~arena.ArenaLockedError`) or capturing (:class:`~arena.GraphCaptureError`),
  both naming Triton and the MB, and capped by ``max_bytes``. The old block is retired
  if a capture used it, else released in stream order (after the stream's work on it);
* the tensor is a ``torch.uint8`` tensor on the arena's device (a CPU tensor on a host
  arena), cached per (size, alignment): the hit is a dictionary look-up and a slot
  selection (plus the capture probe on CUDA arenas).

Growth of the block holds the old and the new block for a moment (kilobytes to a few MB).

Triton keeps its allocator in a :class:`contextvars.ContextVar`
(``triton.runtime._allocation._allocator``): ``triton.set_allocator`` sets it in the
calling context only, and a thread started later begins with an empty context, where a
kernel that needs global scratch fails at its first launch. :meth:`TritonAllocator.install`
sets it in the current context and reaches other threads three ways:

* every thread started (through :mod:`threading`) after the call: threading's profile hook
  runs once at the start of each new thread, installs the allocator there and hands the
  thread over to the hook that was set before (none, usually);
* each thread the first time it binds a micro-batch (``ws.bind_ubatch``, ``ws.ubatch``) or
  selects a slot in Python (arenas with a ``ubatch_resolver``, such as vLLM's drop-in, or
  several lanes);
* a thread none of these reached (started before ``install()``, never bound) gets, at its
  first launch that needs scratch, Triton's error with the arena's fix appended: call
  ``install()`` in that thread, or bind it to its micro-batch.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.util
import sys
import threading
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

from arena.base.dtypes import resolve_dtype
from arena.base.layout import (
    MAX_ALIGNMENT,
    MAX_BYTES,
    Layout,
    ViewLayout,
    exact_int,
    int_not_bool,
    past_address_range,
    round_up,
)
from arena.config import load_adapter
from arena.errors import ArenaError, FrameworkUnavailableError, NotInitializedError, SpecError
from arena.slots.selector import SlotSelector, check_index
from arena.slots.slot import Slot
from arena.slots.table import SlotTable
from arena.slots.workspaces import TRITON, Workspace, WorkspaceStore
from arena.uncopyable import refuse_copies

__all__ = ["TritonAllocator"]

#: The least base alignment of a block (the memory source's contract).
_BASE_ALIGNMENT = 256
#: Tensors cached per block: sizes a stream's kernels ask for (a handful in practice).
_MAX_TENSORS = 64
_UINT8 = resolve_dtype("uint8")


class TritonAllocator:
    """A callable with Triton's allocator signature over one arena's slots.

    Obtain one with :meth:`arena.Arena.triton_allocator`. Calling it as
    ``allocator(size, alignment, stream)`` returns a ``torch.uint8`` tensor of ``size``
    bytes whose ``data_ptr()`` is a multiple of ``alignment``.
    """

    __slots__ = ("__weakref__", "_adapter", "_select", "_selector", "_table")
    __reduce_ex__ = __copy__ = __deepcopy__ = refuse_copies("a Triton allocator")

    def __init__(self, table: SlotTable, selector: SlotSelector, lane: int | None) -> None:
        if importlib.util.find_spec("torch") is None:
            raise FrameworkUnavailableError(
                "the Triton allocator returns torch tensors and needs torch, which is not "
                "installed: pip install torch (Triton depends on it anyway)"
            )
        self._table = table
        self._selector = selector
        self._adapter = load_adapter("torch", table.governor.device)
        self._select: Callable[[], Slot]
        if lane is None:
            self._select = selector.select
        else:
            index = check_index("lane", lane, selector.lanes)
            self._select = functools.partial(selector.select_in_lane, index)

    def install(self) -> None:
        """Make this Triton's allocator for every thread that uses the arena.

        Sets it in the current context (``triton.set_allocator(self)``), then in each
        thread started after this call, and in each thread the first time it binds a
        micro-batch or selects a slot in Python (see the module's docstring). A thread
        none of these reached gets Triton's error at its first launch that needs scratch,
        with this fix appended. Installing again (this allocator or another arena's) makes
        the latest one the allocator of threads started from then on.

        Raises
        ------
        FrameworkUnavailableError
            Triton is not installed.
        """
        module = _triton_allocation()
        module.set_allocator(self)
        # The selector keeps the allocator (so a short-lived installing context cannot
        # take it away); the process-wide thread-start hook only names it weakly.
        self._selector.on_join(functools.partial(_install, self))
        _ThreadStarts.watch(weakref.ref(self))
        _explain_missing(module)

    @property
    def installed(self) -> bool:
        """Whether this is Triton's allocator in the calling context (False without Triton)."""
        module = sys.modules.get("triton.runtime._allocation")
        return module is not None and module._allocator.get() is self

    def __call__(self, size: int, alignment: int, stream: Any) -> Any:
        """A ``torch.uint8`` tensor of ``size`` bytes aligned to ``alignment`` for ``stream``.

        Parameters
        ----------
        size : int
            Bytes (>= 0).
        alignment : int
            A power of two from 1 to 2**30.
        stream : int or None
            The stream handle Triton launches on.

        Raises
        ------
        ArenaLockedError
            The stream's block would grow (or a new stream needs one) while locked.
        GraphCaptureError
            The same, while a CUDA graph is being captured.
        ArenaOutOfMemoryError
            Out of memory, or past the arena's ``max_bytes``.
        SpecError
            For a bad size, alignment or stream.
        """
        if not exact_int(size) or not exact_int(alignment):
            _check_ints(size, alignment)
        if size < 0 or size > MAX_BYTES or alignment < 1 or alignment & (alignment - 1):
            _check_ints(size, alignment)
        if alignment > MAX_ALIGNMENT:
            _check_ints(size, alignment)
        if stream is not None and (not exact_int(stream) or not 0 <= stream < 1 << 63):
            raise SpecError(
                f"stream must be the stream's handle as an int in [0, 2**63) (what Triton "
                f"passes) or None, got {type(stream).__name__} {stream!r}"
            )
        self._table.governor.check_awake(f"a Triton block of {size} bytes")
        slot = self._select()
        store = slot.store(WorkspaceStore)
        for _ in range(4):
            entry = store.triton.get(stream)
            if entry is not None:
                offset = -entry.allocation.ptr % alignment
                if offset + size <= entry.nbytes:
                    if entry.lent:  # lock() made it for this stream: never lend it now
                        store.claim(entry)
                    tensor = entry.views.get((size, alignment))
                    if tensor is None:
                        tensor = self._tensor(entry, offset, size, alignment)
                    probe = self._table.governor.capture_probe
                    if probe is None or not probe() or store.mark_captured(entry):
                        return tensor
                    continue  # replaced meanwhile: serve from the new block
            self._grow(slot, store, stream, size, alignment)
        raise ArenaError(
            f"the Triton block for stream {stream!r} in slot {slot.describe()} cannot serve "
            f"{size} bytes aligned to {alignment} after growing; the memory source returned "
            "a block misaligned for its contract (>= 256 bytes). This is a bug in the source"
        )

    def _grow(
        self, slot: Slot, store: WorkspaceStore, stream: Any, size: int, alignment: int
    ) -> None:
        governor = self._table.governor
        need = max(size, 1) + max(0, alignment - _BASE_ALIGNMENT)
        target = max(round_up(need, governor.alignment), store.triton_hint)
        if target > MAX_BYTES:  # not an allocation that failed: no buffer can hold it
            raise past_address_range(
                f"a Triton block for {size} bytes aligned to {alignment} rounds up to",
                target,
                "ask Triton for less (its kernel's scratch size is past any device)",
            )
        entry, old, grew = store.grow(TRITON, stream, need, target, copy=False)
        if grew:
            before = 0 if old is None else old.nbytes
            self._table.announce_block(
                slot, "triton", entry.describe(), old=before, new=entry.nbytes, key=stream
            )

    def _tensor(self, entry: Workspace, offset: int, size: int, alignment: int) -> Any:
        """The tensor over ``size`` bytes at ``offset`` of the block, cached."""
        views = entry.views
        whole = views.get("wrapped")
        if whole is None:
            whole = views["wrapped"] = self._adapter.wrap(entry.allocation)
        view = ViewLayout((size,), _UINT8, offset, size, (1,))
        tensor = self._adapter.typed_views(whole, Layout((view,), offset + size, 1))[0]
        if len(views) > _MAX_TENSORS:
            views.clear()
            views["wrapped"] = whole
        views[(size, alignment)] = tensor
        return tensor

    def __repr__(self) -> str:
        return f"<arena Triton allocator on {self._table.governor.device}>"


def _triton_allocation() -> ModuleType:
    """``triton.runtime._allocation``, where Triton keeps its allocator.

    Raises
    ------
    FrameworkUnavailableError
        Triton is not installed.
    """
    try:
        return importlib.import_module("triton.runtime._allocation")
    except ImportError as exc:
        raise FrameworkUnavailableError(
            f"install() sets Triton's allocator, but Triton cannot be imported ({exc}): pip "
            "install triton, or call the allocator yourself"
        ) from exc


def _install(allocator: TritonAllocator | None) -> None:
    """Set ``allocator`` as Triton's in the calling context, unless it is gone or its
    arena closed (the thread then keeps Triton's default)."""
    module = sys.modules.get("triton.runtime._allocation")
    if allocator is None or module is None or allocator._table.governor.closed:
        return
    module.set_allocator(allocator)


class _ThreadStarts:
    """Installs the latest installed allocator in every thread started after it, through
    :func:`threading.setprofile`: the hook runs once, at the new thread's first event, in
    the context the thread's ``run()`` uses, then gives the thread the profile hook that was
    set before it (None, usually) and lets it see that event too."""

    latest: weakref.ref[TritonAllocator] | None = None
    previous: Any = None

    @classmethod
    def watch(cls, ref: weakref.ref[TritonAllocator]) -> None:
        cls.latest = ref
        current = threading.getprofile()
        if current is not _thread_start:
            cls.previous = current
            threading.setprofile(_thread_start)


def _thread_start(frame: Any, event: str, arg: Any) -> Any:
    previous = _ThreadStarts.previous
    sys.setprofile(previous)
    ref = _ThreadStarts.latest
    if ref is not None:
        _install(ref())
    return None if previous is None else previous(frame, event, arg)


def _explain_missing(module: ModuleType) -> None:
    """Make Triton's "no allocator was set" error, raised in a thread the allocator did not
    reach, say how to fix it with the arena. Triton's default is one ``NullAllocator``
    object (the context variable's default); it keeps its class's behaviour and type for
    ``isinstance`` checks, through a subclass that only adds the fix to the message."""
    default = contextvars.Context().run(module._allocator.get)
    base = type(default)
    if getattr(base, "arena_fix", False) or not callable(default):
        return

    def explained(self: Any, size: int, alignment: int, stream: Any) -> Any:
        try:
            return base.__call__(self, size, alignment, stream)
        except RuntimeError as exc:
            raise NotInitializedError(
                f"{exc} This thread has no arena allocator: it was started before "
                "ws.triton_allocator().install() and has not bound a micro-batch since. Call "
                "ws.triton_allocator().install() in this thread, or bind it to its "
                "micro-batch first (ws.bind_ubatch(i))"
            ) from exc

    attributes = {"__call__": explained, "arena_fix": True, "__module__": base.__module__}
    try:
        default.__class__ = type(base.__name__, (base,), attributes)
    except TypeError:  # a default whose class cannot be swapped keeps Triton's message
        return


def _check_ints(size: Any, alignment: Any) -> None:
    """Raise the :class:`SpecError` for a bad ``size`` or ``alignment``."""
    if not int_not_bool(size) or not 0 <= size <= MAX_BYTES:
        raise SpecError(f"size must be an int from 0 to {MAX_BYTES} bytes, got {size!r}")
    if (
        not int_not_bool(alignment)
        or not 1 <= alignment <= MAX_ALIGNMENT
        or alignment & (alignment - 1)
    ):
        raise SpecError(
            f"alignment must be an int power of two from 1 to {MAX_ALIGNMENT}, got {alignment!r}"
        )
