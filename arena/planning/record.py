"""The record phase of steps: a key's first run places each request in the lowest gap
and books its blocks; the run's end makes the record the plan is made from (see
:mod:`arena.planning.steps` for when a run records).

A recording run keeps in its :class:`~arena.planning.runs.StepRun` each block's size,
first request and offset, and, while the block is live, its place. A request's views lie
side by side in the lowest gap that holds them all, over what is live at that moment (first
fit), so warm-up does not grow the slot to the sum of its requests. The record is kept
only for a run that ended normally with every request booked: the caller marks the run
``broken`` while a request is booked, and an interrupted run is no record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arena.planning.records import StepBook
from arena.planning.runs import StepRun

__all__ = ["book_request", "end_recording", "lowest_gap"]


def lowest_gap(run: StepRun, sizes: Sequence[int]) -> tuple[range, list[int]]:
    """Where a recording ``run`` puts a request whose views need ``sizes`` bytes: their
    blocks (numbered on from the run's last) and their offsets from the step's start, side
    by side in the lowest gap that holds them all. One search per request, not one per
    view (a request of n views stays O(n))."""
    offset = run.first_fit(sum(sizes))
    offsets = []
    for size in sizes:
        offsets.append(offset)
        offset += size
    return range(len(run.sizes), len(run.sizes) + len(sizes)), offsets


def book_request(
    run: StepRun,
    request: int,
    views: Sequence[Any],
    *,
    blocks: range,
    offsets: list[int],
    sizes: list[int],
) -> int:
    """Book request number ``request`` of a recording ``run``, once its ``views`` are
    placed (a refused request is no block): each view's block is live at its offset until
    released. Returns the bytes the request added."""
    run.book(views, blocks, offsets, sizes)
    run.add(request, offsets, sizes)
    return sum(sizes)


def end_recording(run: StepRun, book: StepBook, start: int, requests: int) -> None:
    """A recording ``run`` that started at byte ``start`` ended normally after
    ``requests`` requests: the blocks still live last until its last request, and the run
    becomes ``book``'s record (see :meth:`StepBook.record`)."""
    for block in run.live:
        run.lasts[block] = max(requests - 1, run.firsts[block])
    book.record(run, start)
