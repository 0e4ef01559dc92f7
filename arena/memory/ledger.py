"""The ledger: an arena's memory source, with every block it handed out accounted for.

The ledger wraps a :class:`~arena.memory.sources.MemorySource` (composition, as RMM's resources
wrap one another). It is the only object that calls the source, so its counters are the
truth the arena reports: ``allocations == frees + live_blocks`` holds after any failure,
including a ``KeyboardInterrupt`` raised by the source, by ``alloc_context`` or by its exit.

Stream-ordered release: a source that provides ``stream_events()`` (the pool, torch and
RMM sources on CUDA) gets a released block back only once the GPU work queued on it has
completed. The ledger records one event per stream that may use the block (see
:mod:`arena.memory.deferred`), keeps the block pending, and hands it to the source at a
later allocation, release or :meth:`Ledger.flush` whose event query says done: the host
never waits for the whole device.
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from arena.base.events import format_mb
from arena.errors import ArenaError, ArenaOutOfMemoryError
from arena.memory.deferred import PendingReleases, StreamEvents
from arena.memory.devices import Device
from arena.memory.sources import Allocation, HostSource, MemorySource, compiled, host_allocator

__all__ = ["TRACE_LIMIT", "Ledger", "compiled_replace", "oom_hint"]

#: The most recent events a ledger keeps in :attr:`Ledger.trace`.
TRACE_LIMIT = 4096


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
        (``"free"``): the CSV event log, where one is asked for (see
        :mod:`arena.observe.snapshot`). It must not raise.

    Attributes
    ----------
    trace : deque
        The recent events, oldest first, as ``(action, ptr, nbytes, what, time)``
        (``time.time()``), at most :data:`TRACE_LIMIT`: the device trace of
        ``memory_snapshot()``. Kept by the ledger itself, so an allocation calls no
        observer unless a log file is written.

    Notes
    -----
    Not thread-safe by itself: the arena calls it with its mutex held.
    """

    __slots__ = (
        "_alloc_context",
        "_handed",
        "_live",
        "allocated_total",
        "allocations",
        "freed_total",
        "frees",
        "live_bytes",
        "observer",
        "ooms",
        "peak_blocks",
        "peak_bytes",
        "pending",
        "source",
        "trace",
    )

    def __init__(
        self,
        source: MemorySource,
        alloc_context: Callable[[], AbstractContextManager[Any]] | None = None,
        observer: Callable[[str, int, int, str], None] | None = None,
    ) -> None:
        self.source = source
        self._alloc_context = alloc_context
        self._live: dict[int, Allocation] = {}
        # The last block handed out, with its number: an interrupt after allocate() counted
        # it but before the caller holds it (even as allocate() returns) leaves it here for
        # reclaim() to release.
        self._handed: tuple[int, Allocation] | None = None
        self.allocations = 0
        self.frees = 0
        #: Bytes of the blocks handed out and not yet released.
        self.live_bytes = 0
        #: Bytes of every block handed out, and of every block released, since creation.
        self.allocated_total = self.freed_total = 0
        #: Highest ``live_bytes`` and ``live_blocks`` since creation or :meth:`reset_peaks`.
        self.peak_bytes = 0
        self.peak_blocks = 0
        #: ArenaOutOfMemoryError raised for this ledger (the source's or the arena's cap).
        self.ooms = 0
        self.observer = observer
        self.trace: deque[tuple[str, int, int, str, float]] = deque(maxlen=TRACE_LIMIT)
        factory = getattr(source, "stream_events", None)
        events: StreamEvents | None = factory() if callable(factory) else None
        #: Released blocks waiting for their streams (None: the source releases at once).
        self.pending = None if events is None else PendingReleases(events, source.release)

    @property
    def device(self) -> Device:
        """The source's device."""
        return self.source.device

    @property
    def live_blocks(self) -> int:
        """Blocks handed out and not yet released."""
        return len(self._live)

    def owns(self, ptr: int) -> bool:
        """Whether ``ptr`` lies in a block this ledger handed out and holds."""
        # A loop, not any() over a generator: one any() leaves suspended is closed when
        # collected, and an interrupt landing in that close is printed and lost.
        for a in list(self._live.values()):  # noqa: SIM110 - see above
            if a.ptr <= ptr < a.ptr + a.nbytes:
                return True
        return False

    @property
    def pending_bytes(self) -> int:
        """Bytes released by the arena whose streams have not finished with them yet."""
        return 0 if self.pending is None else self.pending.nbytes

    def reset_peaks(self) -> None:
        """Set the peaks to the current figures."""
        self.peak_bytes = self.live_bytes
        self.peak_blocks = len(self._live)

    def allocate(self, nbytes: int, what: str, *, grow: bool = False) -> Allocation:
        """A block of ``nbytes`` from the source, counted as live.

        Parameters
        ----------
        nbytes : int
            Bytes wanted (>= 1).
        what : str
            What the block is for, for the error message.
        grow : bool
            Reserve room to grow in place (a fixed-address source's ``reserve``).

        Raises
        ------
        ArenaOutOfMemoryError
            The source raised ``MemoryError``; the message names the bytes, the purpose,
            the device, the source and what to do.
        """
        if self.pending is not None:
            self.pending.collect()  # blocks whose streams are done go back first
        factory = self._alloc_context
        allocation: Allocation | None = None
        try:
            # Without alloc_context no context at all: even a shared nullcontext cost its
            # two Python calls on every growth (issue 32 item 4).
            if factory is None:
                allocation = self._take(nbytes, what, grow)
                if self.observer is not None:
                    self.observer("allocate", allocation.ptr, nbytes, what)
            else:
                with factory():
                    allocation = self._take(nbytes, what, grow)
                    if self.observer is not None:
                        self.observer("allocate", allocation.ptr, nbytes, what)
        except MemoryError as exc:
            if allocation is not None:  # the context's exit failed after the source gave it
                self.release(allocation)
                self.ooms += 1
                raise self._refused(nbytes, what, exc, traced=False) from exc
            raise self._refused(nbytes, what, exc) from exc
        except BaseException:
            # Whatever failed (the context's exit, an interrupt), nothing stays half-counted
            # and the block goes back to the source, counted yet or not.
            if allocation is not None:
                if self._live.get(id(allocation)) is allocation:
                    self.release(allocation)
                else:
                    self.source.release(allocation)
            raise
        return allocation

    def replace(self, held: list[Allocation], nbytes: int, what: str) -> Allocation:
        """Release the block in ``held`` (if any), then allocate ``nbytes`` for ``what``:
        a slot's growth in one visit to the ledger.

        ``held`` is a list of at most one block, the caller's only reference to it: the
        ledger empties it once the block is counted freed, so no frame holds the old
        memory while the new block is allocated (the peak is the new size, never old +
        new). A block still in ``held`` after a failure was not released (an interrupt
        came first): it is still counted live and the caller's again. The guarantees are
        :meth:`release`'s then :meth:`allocate`'s, in that order.

        Raises
        ------
        ArenaOutOfMemoryError
            As :meth:`allocate`; the old block is released either way.
        """
        if self.pending is not None or self._alloc_context is not None or self.observer is not None:
            # Stream-ordered sources, a context or an observer: the two calls as they are.
            if held:
                self.release(held[0])
                held.clear()
            return self.allocate(nbytes, what)
        asked: list[bool] = []  # filled once the source is asked for the new block
        try:
            return self._take(nbytes, what, False, held, asked)
        except MemoryError as exc:
            if not asked:  # the source's release failed: its own error, as release() lets out
                raise
            raise self._refused(nbytes, what, exc) from exc

    def _take(
        self,
        nbytes: int,
        what: str,
        grow: bool,
        held: list[Allocation] | None = None,
        asked: list[bool] | None = None,
    ) -> Allocation:
        """A block of ``nbytes`` from the source for ``what``, counted as live and traced
        (:meth:`allocate` without the context, the observer and the error handling); the
        block in ``held`` released to the source first, written out as :meth:`release`
        writes it for a ledger without pending releases nor observer (:meth:`replace`: a
        growth calls back into no file it left, tests/views/test_request_path.py).

        A block never counted goes back to the source here, whatever fails (a short block,
        an interrupt); an interrupt after the count, before the caller holds the block,
        leaves it to :meth:`reclaim`, as one arriving while :meth:`allocate` returns does.
        ``asked`` gets an item once the old block is released and the source is asked for
        the new one (:meth:`replace` tells a failed release from a refused allocation)."""
        source: Any = self.source
        if held:
            block = held[0]
            key = id(block)
            live = self._live
            if live.get(key) is block:
                # Uncounted by plain stores, as in release(): counted live or freed (no
                # local holds the record of the last block handed out: it may be this).
                del live[key]
                if self._handed is not None and self._handed[1] is block:
                    self._handed = None
                self.frees += 1
                self.live_bytes -= block.nbytes
                self.freed_total += block.nbytes
                try:
                    held.clear()
                    self.trace.append(("free", block.ptr, block.nbytes, "", time.time()))
                finally:  # counted freed: the source gets it back, even if interrupted
                    source.release(block)
            held.clear()
            del block  # the old memory goes before the new is asked for
        if asked is not None:
            asked.append(True)
        allocation: Allocation = source.reserve(nbytes) if grow else source.allocate(nbytes)
        try:
            if allocation.nbytes < nbytes:
                raise ArenaError(
                    f"the memory source {source!r} returned {allocation.nbytes} bytes for "
                    f"{what}, which needs {nbytes}; a source must return at least the bytes "
                    "asked for (this is a bug in the source)"
                )
            key = id(allocation)
        except BaseException:
            source.release(allocation)
            raise
        live = self._live
        # Counted by plain stores with no call between them: a signal's handler runs at a
        # call, so an interrupt finds the block counted or not at all.
        live[key] = allocation
        self.allocations += 1
        self._handed = (self.allocations, allocation)
        self.live_bytes += allocation.nbytes
        self.allocated_total += allocation.nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self.peak_blocks = max(self.peak_blocks, len(live))
        self.trace.append(("allocate", allocation.ptr, nbytes, what, time.time()))
        return allocation

    def _refused(
        self, nbytes: int, what: str, exc: MemoryError, *, traced: bool = True
    ) -> ArenaOutOfMemoryError:
        """The error for a refused allocation of ``nbytes``, counted (``ooms``) and, where
        ``traced``, logged as an ``"allocate failure"``."""
        if traced:
            self.ooms += 1
            self.trace.append(("allocate failure", 0, nbytes, what, time.time()))
            if self.observer is not None:
                self.observer("allocate failure", 0, nbytes, what)
        return ArenaOutOfMemoryError(
            f"could not allocate {nbytes} bytes ({format_mb(nbytes)}) for {what} on "
            f"{self.device} from {self.source!r}: {exc}; free memory elsewhere, request "
            "less, or presize with reserve() earlier" + oom_hint(self.device)
        )

    def reserve(self, nbytes: int, what: str) -> Allocation:
        """A growable block of ``nbytes`` from a fixed-address source (its ``reserve``),
        counted as live like :meth:`allocate`.

        Raises
        ------
        ArenaOutOfMemoryError
            As :meth:`allocate`.
        """
        return self.allocate(nbytes, what, grow=True)

    def commit(self, allocation: Allocation, nbytes: int, what: str) -> Allocation:
        """``allocation`` grown to ``nbytes`` at the same address by a fixed-address
        source (its ``commit``). The ledger counts it as the old block freed and the new
        one allocated, so ``allocations == frees + live_blocks`` still holds and the peak
        is the new size, never old + new.

        Raises
        ------
        ArenaOutOfMemoryError
            The source raised ``MemoryError``; the old block stays live and valid.
        """
        source: Any = self.source
        try:
            grown: Allocation = source.commit(allocation, nbytes)
        except MemoryError as exc:
            self.ooms += 1
            self.trace.append(("allocate failure", 0, nbytes, what, time.time()))
            if self.observer is not None:
                self.observer("allocate failure", 0, nbytes, what)
            raise ArenaOutOfMemoryError(
                f"could not commit {nbytes} bytes ({format_mb(nbytes)}) for {what} on "
                f"{self.device} at {allocation.ptr:#x} from {self.source!r}: {exc}; the "
                "block keeps its old size. Free memory elsewhere, request less, or give the "
                "arena a larger max_bytes (the reserved range)" + oom_hint(self.device)
            ) from exc
        # Installed by plain stores, no call between them (an interrupt lands before or
        # after, never inside); the observer hears of it afterwards.
        live = self._live
        old_key, new_key = id(allocation), id(grown)
        replaced = live.get(old_key) is allocation
        if replaced:
            del live[old_key]
            self.frees += 1
            self.live_bytes -= allocation.nbytes
            self.freed_total += allocation.nbytes
        live[new_key] = grown
        self.allocations += 1
        self._handed = (self.allocations, grown)
        self.live_bytes += grown.nbytes
        self.allocated_total += grown.nbytes
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self.peak_blocks = max(self.peak_blocks, len(live))
        trace = self.trace
        if replaced:
            trace.append(("free", allocation.ptr, allocation.nbytes, "", time.time()))
        trace.append(("allocate", grown.ptr, nbytes, what, time.time()))
        if self.observer is not None:
            try:
                if replaced:
                    self.observer("free", allocation.ptr, allocation.nbytes, "")
            finally:
                self.observer("allocate", grown.ptr, nbytes, what)
        return grown

    def blocks(self) -> list[Allocation]:
        """Every block handed out and not yet released."""
        return list(self._live.values())

    def settle(self, streams: Sequence[int] = ()) -> None:
        """Wait for the work queued on the arena's memory before it is unmapped: the
        events of every pending release, events recorded now on the current streams
        (and ``streams``) where the source is stream-ordered, then the source's own
        ``settle`` where it has one."""
        pending = self.pending
        if pending is not None:
            events = pending.events
            for event in [events.record(s) for s in events.streams(streams)]:
                events.wait(event)
            pending.flush()
        settle = getattr(self.source, "settle", None)
        if callable(settle):
            settle()

    def release(self, allocation: Allocation, streams: Sequence[int] = ()) -> None:
        """Give ``allocation`` back to the source.

        It is counted as freed before the source is called, so an exception from the
        source (an interrupt included) leaves the counters true: the arena has dropped the
        block either way, and its memory returns once no view references it.

        Parameters
        ----------
        allocation : Allocation
            A block this ledger handed out (anything else is ignored).
        streams : sequence of int
            Raw handles of streams known to have used the block (a Triton block's stream),
            besides the calling thread's current streams; used by stream-ordered sources.
        """
        live = self._live
        key = id(allocation)
        if live.get(key) is not allocation:
            return
        handed = self._handed
        # Uncounted by plain stores with no call between them (a signal's handler runs at
        # a call): an interrupt finds the block counted live or counted freed, never half.
        del live[key]
        if handed is not None and handed[1] is allocation:
            self._handed = None  # holding it would keep a released block's memory alive
        self.frees += 1
        self.live_bytes -= allocation.nbytes
        self.freed_total += allocation.nbytes
        try:
            self.trace.append(("free", allocation.ptr, allocation.nbytes, "", time.time()))
            if self.observer is not None:
                self.observer("free", allocation.ptr, allocation.nbytes, "")
        finally:  # counted freed: the source gets it back, even if the observer is interrupted
            if self.pending is not None:
                self.pending.hold(allocation, streams)
            else:
                self.source.release(allocation)

    def holds(self, allocation: Allocation) -> bool:
        """Whether ``allocation`` is a block of this ledger not yet released."""
        return self._live.get(id(allocation)) is allocation

    def reclaim(self, mark: int) -> None:
        """Release the block :meth:`allocate` handed out after ``mark`` (the value of
        :attr:`allocations` read before the call) if the caller never installed it.

        For a caller's ``except`` clause around an allocation and the one store that
        installs the block: an interrupt anywhere in between (even as :meth:`allocate`
        returns, when the caller never sees the block) would leave it counted live and
        held by nobody.
        """
        handed = self._handed
        if handed is not None and handed[0] > mark:
            self._handed = None
            self.release(handed[1])

    def handed_since(self, mark: int) -> Allocation | None:
        """The block :meth:`allocate`, :meth:`reserve` or :meth:`commit` handed out after
        ``mark`` (the value of :attr:`allocations` read before the call), if any: for a
        caller's ``except`` clause when an interrupt may have come as the call returned.
        A committed block is the caller's old one grown in place, so it is installed, not
        released (see :meth:`reclaim` for a new block)."""
        handed = self._handed
        if handed is not None and handed[0] > mark:
            return handed[1]
        return None

    def release_each(self, blocks: list[Allocation]) -> None:
        """Release every block of ``blocks``, even if releasing one raises (an interrupt
        included).

        Raises
        ------
        BaseException
            The first error a release raised, after every block was attempted.
        """
        first: BaseException | None = None
        for allocation in blocks:
            try:
                self.release(allocation)
            except BaseException as exc:  # keep releasing: an interrupt must not leak the rest
                if first is None:
                    first = exc
        if first is not None:
            raise first

    def release_live(self) -> int:
        """Release every block still counted live; for :meth:`~arena.Arena.close` and the
        arena's collection, after the holders gave theirs back (none is left unless an
        interrupt split a holder's change). Returns how many were released.

        Raises
        ------
        BaseException
            The first error a release raised, after every block was released.
        """
        blocks = list(self._live.values())
        self.release_each(blocks)
        return len(blocks)

    def leftovers(self) -> Callable[[], None]:
        """A callable that releases every block still live, holding the blocks, the
        source and the pending releases but not the ledger (nor its ``alloc_context``,
        which may refer to the arena): for the finalizer of an arena collected inside a
        reference cycle, where the ledger is garbage with it."""
        return partial(_release_leftovers, self._live, self.source, self.pending)

    def flush(self) -> None:
        """Wait for the events of every pending release (each on its own streams, never
        the whole device) and give the blocks back; for :meth:`~arena.Arena.close`."""
        if self.pending is not None:
            self.pending.flush()


def _release_leftovers(
    live: dict[int, Allocation], source: MemorySource, pending: PendingReleases | None
) -> None:
    """Give every block of ``live`` back to ``source`` (through ``pending`` where its
    streams may still use it); the first error propagates after all were released."""
    if not live and (pending is None or not pending.nbytes):
        return  # closed already, or nothing was ever allocated: no device call at all
    first: BaseException | None = None
    for allocation in list(live.values()):
        if live.pop(id(allocation), None) is None:
            continue
        try:
            if pending is not None:
                pending.hold(allocation, ())
            else:
                source.release(allocation)
        except BaseException as exc:  # keep releasing: one failure must not leak the rest
            if first is None:
                first = exc
    if pending is not None and pending.nbytes:
        pending.flush()
    if first is not None:
        raise first


def compiled_replace() -> Any:
    """The compiled growth of a host ledger, ``replace(ledger, held, nbytes, what)``
    (``HostBooks.replace``, arena/memory/_host.c), or None where the compiled host
    allocation is not in use (NumPy imported on first need).

    It does what :meth:`Ledger.replace` does for a ledger over a
    :class:`~arena.memory.sources.HostSource` with no pending releases, context or
    observer, in one call and with the same books and trace (:meth:`Ledger.replace` and
    :meth:`Ledger._take` are its mirror); it returns None where the caller is to call
    :meth:`Ledger.replace` with the same ``held`` (another ledger: nothing done; the
    allocation refused: the old block released, ``held`` emptied). A slot's growth calls
    it first (issue 32 item 4: three Python frames less on a never-seen request); the slot
    keeps the one it made (arena/slots/slot.py), so this makes a new one per call."""
    allocator = host_allocator()
    if allocator is None or compiled is None:
        return None
    return compiled.HostBooks(Ledger, allocator, time.time, HostSource).replace


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
