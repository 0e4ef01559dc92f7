"""The replay phase of steps: a planned key's requests at the plan's offsets (see
:mod:`arena.planning.steps` for when a run replays).

Each request of a replay is checked against the plan (:func:`fits`): as many views as
planned, none larger, and every block whose planned life ended before it released. A
request that fits takes its blocks' planned offsets (:func:`planned_places`), and its
views are remembered per buffer, plan and request index (:func:`remembering`), so the
next replay's request is a hit. A request that does not fit diverges: locked or during a
CUDA graph capture it is refused (:func:`refuse_divergence`, naming the key, the request
index, the call site and why, from :func:`divergence`); unlocked the run records from
there on (the step adopts the plan's record of its requests so far).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from arena.base.events import caller_info
from arena.errors import ArenaLockedError, GraphCaptureError
from arena.planning.records import StepBook
from arena.planning.rows import new_caches, note_row
from arena.planning.scopes import Placer
from arena.slots.slot import Buffer, Slot

__all__ = ["divergence", "fits", "planned_places", "refuse_divergence", "remembering"]


def fits(book: StepBook, r: int, sizes: list[int], released: set[int]) -> bool:
    """Whether request ``r`` of a replay of ``book``'s plan, views of ``sizes`` bytes,
    fits the plan: as many views, none larger, and every block whose planned life ended
    before it is in ``released`` (one kept past its planned last use would share bytes
    with it)."""
    if r >= len(book.counts) or book.counts[r] != len(sizes):
        return False
    # Loops, not any() over a generator: one left suspended is closed when collected,
    # and an interrupt landing there would be printed and lost.
    first = book.starts[r]
    for k, size in enumerate(sizes):
        if size > book.sizes[first + k]:
            return False
    return released.issuperset(book.expiring[r])


def divergence(book: StepBook, r: int, sizes: list[int]) -> str:
    """Why request ``r`` of a replay, whose views need ``sizes`` bytes, does not follow
    the plan of ``book``."""
    if r >= len(book.counts):
        return f"the plan has {len(book.counts)} requests"
    if book.counts[r] != len(sizes):
        return f"the plan's request {r} has {book.counts[r]} views, this one {len(sizes)}"
    first = book.starts[r]
    if [s for k, s in enumerate(sizes) if s > book.sizes[first + k]]:
        planned = book.sizes[book.starts[r] : book.starts[r] + len(sizes)]
        return f"its views need {sizes} bytes, the plan holds {planned}"
    return "a view is kept past its planned last use (release it earlier)"


def refuse_divergence(slot: Slot, key: Hashable, book: StepBook, r: int, sizes: list[int]) -> None:
    """Request ``r`` of a replay of step ``key`` on ``slot`` does not fit ``book``'s plan:
    refused while the arena is locked or a CUDA graph is being captured (nothing may grow
    or move then); returns when the run may record from here.

    Raises
    ------
    ArenaLockedError
        The arena is locked (naming the key, the request index, the call site, the slot
        and why the request does not fit).
    GraphCaptureError
        A CUDA graph is being captured.
    """
    reason = divergence(book, r, sizes)
    caller = caller_info()
    where = f"step {key!r} request {r} from '{caller}' in slot {slot.describe()}"
    governor = slot.governor
    if governor.locked:
        raise ArenaLockedError(
            f"arena is locked but {where} diverges from the step's plan ({reason}); "
            "warm up every shape the step takes before lock() (the largest token count "
            "of each CUDA-graph bucket), or use one step key per shape",
            caller=caller,
            slot=(slot.ubatch, slot.lane),
            key=key,
        )
    if governor.capturing():
        raise GraphCaptureError(
            f"{where} diverges from the step's plan ({reason}) while a CUDA graph is "
            "being captured; run every shape the capture uses eagerly first"
        )


def planned_places(book: StepBook, r: int, count: int) -> tuple[range, list[int]]:
    """The blocks of request ``r`` of ``book``'s plan (``count`` views) and their planned
    offsets from the step's start."""
    assert book.offsets is not None
    blocks = range(book.starts[r], book.starts[r] + count)
    return blocks, [book.offsets[b] for b in blocks]


def remembering(
    placer: Placer,
    memo: tuple[Any, ...],
    *,
    requests: int,
    r: int,
    specs: Any,
    install: Callable[[Buffer, list[dict[Any, Any]]], None],
) -> Callable[[Buffer, Any], None]:
    """Where the views of request ``r`` (of ``specs``) of a replay are remembered: in the
    buffer the placement served them from, under ``memo`` (front, key, start and plan
    version), a dict per request index of the plan's ``requests`` (request ``r``'s blocks
    are its plan's, in order: the run records them by position, see
    :attr:`arena.planning.runs.StepRun.ids`), and noted in the list's row of request
    ``r`` for the compiled hit (:mod:`arena.planning.rows`). ``install(buffer, caches)``
    then tells the step where its next hit looks."""

    def store(buffer: Buffer, entry: Any) -> None:
        caches = buffer.prepared.get(memo)
        if caches is None:
            caches = buffer.prepared[memo] = new_caches(requests)
        placer.remember(caches[r], specs, entry)
        # After the dict changed: a row noted before it is stale until this one call
        # notes it again (an interrupt between the two leaves the hit reading the dict).
        note_row(caches, r)
        install(buffer, caches)

    return store
