"""Step books agreed across ranks: one rank's record as a structure and sizes, and the
book every rank builds from the ranks' largest sizes (see :mod:`arena.distributed`).

A step's *structure* is what must match for two records to merge (views per request,
each block's last request, whether a run started at the top level); its *figures* are
what merges by maximum (each block's size, the highest start, the bytes needed above).
Every rank plans the same figures with the same structure, so every rank's plan, and
with it the layout of every pointer the step hands out, is the same.
"""

from __future__ import annotations

from typing import Any

from arena.planning.plan import make_plan
from arena.planning.records import StepBook

__all__ = ["agreed_book", "step_figures", "step_structure"]


def step_structure(book: StepBook) -> list[Any]:
    """``[counts, lasts, top_level]`` of a book that ran or has a plan."""
    return [list(book.counts), list(book.lasts), bool(book.top_level)]


def step_figures(book: StepBook) -> list[int]:
    """``[*sizes, base, above, recorded_at]``: what merges by maximum."""
    return [*book.sizes, book.base, book.above, book.recorded_at]


def agreed_book(
    structure: list[Any], figures: list[int], alignment: int, after: StepBook | None
) -> StepBook:
    """A planned book of ``structure`` and the ranks' largest ``figures``; ``after`` is
    the slot's own book of the key (the new plan gets a later version than its, so views
    cached for its plan are never served for this one)."""
    counts, lasts, top_level = structure
    book = StepBook()
    book.counts = [int(c) for c in counts]
    book.lasts = [int(last) for last in lasts]
    book.firsts = [r for r, count in enumerate(book.counts) for _ in range(count)]
    blocks = len(book.firsts)
    book.sizes = [int(s) for s in figures[:blocks]]
    book.base, book.above, book.recorded_at = (int(v) for v in figures[blocks : blocks + 3])
    book.above_runs = 1  # counts as measured: later replays only raise it
    book.top_level = bool(top_level)
    book.version = 0 if after is None else after.version
    make_plan(book, alignment)  # the first fit of one rank's run is not every rank's
    return book
