"""Sleep and wake on a fixed-address source: release the memory, keep every address.

``sleep(level)`` follows vLLM's levels. Level 1 discards scratch (plain requests, scopes,
steps, Triton blocks, retired buffers) and copies persistent buffers and library
workspaces to host memory (pinned on CUDA); level 2 discards everything. The memory of
every block is then released through the source's ``evict``; the address ranges stay
reserved. ``wake()`` commits every block again at the same addresses (``restore``) and
writes the copies back, so views, step plans and captured CUDA graphs stay valid.

Each step is built in locals and installed in one step: a sleep that fails (a copy out of
memory, an interrupt) leaves the arena awake with its memory; a wake that fails gives
back what it had committed and leaves the arena asleep with the copies kept, to be tried
again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from arena.base.events import caller_info, format_mb
from arena.base.layout import exact_int
from arena.base.poison import PATTERN_BYTE
from arena.errors import ArenaError, ArenaOutOfMemoryError, ConfigError
from arena.memory.sources import Allocation
from arena.slots.governor import Governor
from arena.slots.slot import Slot

__all__ = ["Sleeper", "check_level", "fall_asleep", "in_place_mode", "wake_for_close", "wake_up"]


@dataclass(slots=True)
class Sleeper:
    """What a sleeping arena keeps: the blocks whose memory was released, and the host
    copies of those whose contents come back on wake."""

    level: int
    evicted: list[Allocation] = field(default_factory=list)
    copies: dict[int, Any] = field(default_factory=dict)  # id(allocation) -> host copy
    #: Blocks whose contents are discarded (poisoned by wake(poison=True)).
    discarded: list[Allocation] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Bytes released."""
        return sum(a.nbytes for a in self.evicted)


def check_level(level: Any) -> int:
    """``level`` if it is 1 or 2; otherwise :class:`ConfigError`."""
    if not exact_int(level) or level not in (1, 2):
        raise ConfigError(
            f"sleep(level=...) must be 1 (keep persistent buffers and library workspaces, "
            f"copied to host memory) or 2 (discard everything), got {level!r}"
        )
    return int(level)


def in_place_mode(governor: Governor, growth: Any) -> bool:
    """Whether ``lock(growth=growth)`` grows in place (``"in_place"``) or refuses (None).

    Raises
    ------
    ConfigError
        For another value, or ``"in_place"`` on a source whose addresses move.
    """
    if growth is None:
        return False
    if growth != "in_place":
        raise ConfigError(f"lock(growth=...) takes 'in_place' (or nothing), got {growth!r}")
    if not governor.fixed_address:
        raise ConfigError(
            f"lock(growth='in_place') needs a fixed-address source, and "
            f"{governor.ledger.source!r} moves addresses on growth (views and CUDA graphs "
            "would keep the old ones). Construct the arena with source='virtual', or call "
            "lock() to refuse growth"
        )
    return True


def fall_asleep(governor: Governor, slots: Sequence[Slot], level: int) -> Sleeper:
    """Release the memory of every block of ``slots`` and mark the arena asleep (its
    slots' buffers renewed); the mutex is held by the caller. A failure (an interrupt
    included) leaves the arena awake, every block committed and the kept bytes (level 1)
    written back; the discarded ones may read zero.

    Raises
    ------
    ArenaError
        On a source whose addresses move, or with a scope or step open.
    GraphCaptureError
        While a CUDA graph is being captured.
    ArenaOutOfMemoryError
        When the host copies cannot be had (the arena stays awake).
    """
    source: Any = governor.ledger.source
    if not governor.fixed_address:
        raise ArenaError(
            f"sleep() needs a fixed-address memory source, and {source!r} moves addresses "
            "(its memory cannot be released while views and CUDA graphs keep pointing at "
            "it). Construct the arena with source='virtual'"
        )
    governor.check_not_capturing("sleep()")
    open_regions = [s for s in slots if s.stack.regions]
    if open_regions:
        slot = open_regions[0]
        raise ArenaError(
            f"sleep() from '{caller_info()}' with {len(slot.stack.regions)} scope(s) or step(s) "
            f"open on slot {slot.describe()}: their views would fault. Close every "
            "'with ws.scope()' and 'with ws.step(...)' block first"
        )
    sleeper = Sleeper(level)
    kept: list[Allocation] = []
    discarded: list[Allocation] = []
    for slot in slots:
        keep, scratch = slot.blocks()
        (discarded if level == 2 else kept).extend(keep)
        discarded.extend(scratch)
    sleeper.discarded = discarded
    # Marked asleep before anything is copied or released, so that no request arriving
    # now is served over memory about to be released (the buffers renewed: no prepared
    # view left for the hit path; the checked path waits for the mutex, then refuses);
    # on any failure (an interrupt included) everything goes back as it was, the kept
    # bytes written back from their copies.
    try:
        governor.fall_asleep(level, sleeper)
        for slot in slots:
            slot.renew_buffer()
        try:
            for allocation in kept:
                sleeper.copies[id(allocation)] = source.offload(allocation)
        except MemoryError as exc:
            raise ArenaOutOfMemoryError(
                f"sleep(level=1) could not copy the {format_mb(sum(a.nbytes for a in kept))} "
                f"of persistent buffers and library workspaces to host memory: {exc}; the "
                "arena stays awake. Free host memory, or sleep(level=2) to discard them"
            ) from exc
        governor.ledger.settle()  # the streams that used the memory finish before unmapping
        for allocation in (*kept, *discarded):
            # Listed before the call: a release the interrupt split is committed again too.
            sleeper.evicted.append(allocation)
            source.evict(allocation)
    except BaseException:
        _restore_all(source, sleeper.evicted)
        _upload_all(source, sleeper)
        governor.awaken()
        for slot in slots:
            slot.renew_buffer()
        raise
    return sleeper


def wake_up(governor: Governor, slots: Sequence[Slot], sleeper: Sleeper, poison: bool) -> None:
    """Commit every evicted block again at its addresses, write back the copies and mark
    the arena awake (its slots' buffers renewed); the mutex is held by the caller. On any
    failure (an interrupt included) what was committed is released again and the arena
    stays asleep, its copies kept, to be woken later.

    Raises
    ------
    GraphCaptureError
        While a CUDA graph is being captured (mapping cannot be captured).
    ArenaOutOfMemoryError
        When the memory cannot be committed.
    """
    governor.check_not_capturing("wake()")
    source: Any = governor.ledger.source
    restored: list[Allocation] = []
    try:
        for allocation in sleeper.evicted:
            # Listed before the call: a commit the interrupt split is released again too.
            restored.append(allocation)
            try:
                source.restore(allocation)
            except MemoryError:
                restored.pop()  # nothing committed (the protocol's promise)
                raise
        _upload_all(source, sleeper)
        if poison:
            for allocation in sleeper.discarded:
                source.fill(allocation, PATTERN_BYTE)
        governor.awaken()
        for slot in slots:
            slot.renew_buffer()
    except BaseException as exc:
        _evict_all(source, restored)
        governor.fall_asleep(sleeper.level, sleeper)
        for slot in slots:
            slot.renew_buffer()
        if not isinstance(exc, MemoryError):
            raise
        governor.ledger.ooms += 1
        raise ArenaOutOfMemoryError(
            f"wake() could not commit {format_mb(sleeper.nbytes)} ({sleeper.nbytes} bytes) "
            f"on {governor.device} again: {exc}. The arena stays asleep with nothing lost "
            "(the host copies are kept); free memory and call wake() again"
        ) from exc


def wake_for_close(governor: Governor) -> None:
    """For close() while asleep: commit every released block again (contents dropped,
    the host copies with them), so that views still held read committed memory, as
    close() promises, instead of faulting; the mutex is held by the caller. On the host
    this costs no memory until a view touches it. A block that cannot be committed
    (CUDA out of memory) stays released: a view of it faults."""
    sleeper = governor.sleeper
    if not isinstance(sleeper, Sleeper):
        return
    source: Any = governor.ledger.source
    for allocation in sleeper.evicted:
        with contextlib.suppress(MemoryError):
            source.restore(allocation)
    governor.awaken()


def _restore_all(source: Any, blocks: list[Allocation]) -> None:
    for allocation in blocks:
        source.restore(allocation)


def _upload_all(source: Any, sleeper: Sleeper) -> None:
    for allocation in sleeper.evicted:
        copy = sleeper.copies.get(id(allocation))
        if copy is not None:
            source.upload(allocation, copy)


def _evict_all(source: Any, blocks: list[Allocation]) -> None:
    for allocation in blocks:
        source.evict(allocation)
