"""What a lane's merged step plans add above its top-level steps (for
:func:`~arena.planning.records.share_plans`).

A step run inside another starts above the outer step's plan, and each step measures what
its runs hold above its end (``above``) over its slot's own plans. When ``lock()`` gives a
slot the lane's merged plan of a nested key, larger than the slot's own, everything above
that nested step moves up by the difference, and so does what the steps it runs inside
hold above their end. Each top-level key then reserves the most any slot measured plus
what that slot's nested keys add: the largest over steps run one after another inside a
step, the sum down a chain of steps run one inside the other (as each book last saw it:
``inside``, the key of the step its nested runs ran in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["cover_nested", "lift_outer_steps"]


def lift_outer_steps(
    lane: Sequence[dict[Any, Any]],
    merges: dict[Any, tuple[list[Any], Any]],
    frozen: Sequence[bool],
) -> None:
    """Raise the ``above`` of every top-level book of ``lane`` (each slot's step books by
    key) and of the merged books in ``merges`` (key -> (the planned books, the merged book
    or None)) by what the merged plans of their nested keys add, before the slots take
    them. Slots with ``frozen[i]`` keep their own plans: nothing moves there."""
    free = [not (i < len(frozen) and frozen[i]) for i in range(len(lane))]
    lifts = [_slot_lifts(steps, merges) if free[i] else {} for i, steps in enumerate(lane)]
    if not any(lifts):
        return
    for key, (planned, merged) in merges.items():
        outer = [(i, s[key]) for i, s in enumerate(lane) if any(s.get(key) is b for b in planned)]
        tops = [(i, book) for i, book in outer if book.top_level]
        above = max((book.above + lifts[i].get(key, 0) for i, book in tops), default=0)
        for i, book in tops:
            if free[i]:
                book.above = max(book.above, above)
        if merged is not None and merged.top_level:
            merged.above = max(merged.above, above)


def _slot_lifts(steps: dict[Any, Any], merges: dict[Any, tuple[list[Any], Any]]) -> dict[Any, int]:
    """Per key of one slot: how far the merged plans of the keys run inside it (at any
    depth) lift what it holds above its end; keys lifted by nothing are left out."""
    growth: dict[Any, int] = {}
    children: dict[Any, list[Any]] = {}
    for key, book in list(steps.items()):
        merged = merges.get(key, ((), None))[1]
        if merged is not None and book.planned:
            growth[key] = max(0, merged.total - book.total)
        if book.inside is not None:
            children.setdefault(book.inside[0], []).append(key)
    lifts: dict[Any, int] = {}

    def lift(key: Any, path: frozenset[Any]) -> int:
        if key not in lifts:  # a key seen inside itself (runs nested both ways) counts once
            inner = [c for c in children.get(key, ()) if c not in path]
            lifts[key] = max((growth.get(c, 0) + lift(c, path | {c}) for c in inner), default=0)
        return lifts[key]

    return {key: lift(key, frozenset([key])) for key in list(steps) if lift(key, frozenset([key]))}


def cover_nested(steps: dict[Any, Any]) -> None:
    """Raise the ``above`` of each planned book of one slot's ``steps`` (key -> book) to
    what the steps run inside it need when it replays its plan. One run right inside
    starts at the end of the outer plan's views live at that request (the plan may put
    them higher than the run that recorded them did); one in a scope starts its lift
    above the plan's end. Each reaches its own plan plus what it holds above (not
    planned: what its recorded run reached). Inner keys first; a key seen inside itself
    counts once."""
    done: set[Any] = set()

    def cover(key: Any, path: frozenset[Any]) -> None:
        book = steps.get(key)
        if key in done or book is None or not book.planned:
            return
        done.add(key)
        above = book.above
        for r, inner_key, lift, recorded in list(book.nests):
            inner = steps.get(inner_key)
            reached = recorded
            if inner_key not in path and inner is not None and inner.planned:
                cover(inner_key, path | {inner_key})
                reached = inner.total + inner.above
            start = _live_extent(book, r) - book.total if lift is None else lift
            above = max(above, start + reached)
        book.above = above

    for key in list(steps):
        cover(key, frozenset([key]))


def _live_extent(book: Any, r: int) -> int:
    """The end of the highest block of ``book``'s plan that may be live after its first
    ``r`` requests (made before them, not released before the last of them)."""
    offsets, sizes, firsts, lasts = book.offsets, book.sizes, book.firsts, book.lasts
    return max(
        (offsets[b] + sizes[b] for b in range(len(sizes)) if firsts[b] < r and lasts[b] >= r - 1),
        default=0,
    )
