"""A step run's checks: whether a replayed request follows the plan, why not, and why
``release()`` refuses a view (see :mod:`arena.planning.steps`)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from arena.errors import ArenaError

__all__ = ["divergence", "fits", "refused_release"]


def fits(book: Any, r: int, sizes: list[int], released: set[int]) -> bool:
    """Whether request ``r`` of a replay of ``book``'s plan (a
    :class:`~arena.planning.records.StepBook`), views of ``sizes`` bytes, fits the plan:
    as many views, none larger, and every block whose planned life ended before it is in
    ``released`` (one kept past its planned last use would share bytes with it)."""
    if r >= len(book.counts) or book.counts[r] != len(sizes):
        return False
    # Loops, not any() over a generator: one left suspended is closed when collected,
    # and an interrupt landing there would be printed and lost.
    first = book.starts[r]
    for k, size in enumerate(sizes):
        if size > book.sizes[first + k]:
            return False
    return released.issuperset(book.expiring[r])


def divergence(book: Any, r: int, sizes: list[int]) -> str:
    """Why request ``r`` of a replay, whose views need ``sizes`` bytes, does not follow
    the plan of ``book`` (a :class:`~arena.planning.records.StepBook`)."""
    if r >= len(book.counts):
        return f"the plan has {len(book.counts)} requests"
    if book.counts[r] != len(sizes):
        return f"the plan's request {r} has {book.counts[r]} views, this one {len(sizes)}"
    if any(s > book.sizes[book.starts[r] + k] for k, s in enumerate(sizes)):
        planned = book.sizes[book.starts[r] : book.starts[r] + len(sizes)]
        return f"its views need {sizes} bytes, the plan holds {planned}"
    return "a view is kept past its planned last use (release it earlier)"


def refused_release(key: Hashable, view: Any, twice: bool, ended: bool) -> ArenaError:
    """The error for a view ``release()`` refuses in a run of step ``key``: given twice in
    one call, released already (``ended``), or never handed out by this run (a list, a
    slice, another array)."""
    what = "released twice in this call" if twice else "released already"
    what = what if twice or ended else "not handed out by this run"
    if isinstance(view, (list, tuple)):
        fix = "; pass the views as separate arguments: release(*views)"
    elif not (twice or ended):
        fix = "; release the view itself, not a slice or an array made from it"
    else:
        fix = ""
    shape = getattr(view, "shape", None)
    got = type(view).__name__ + ("" if shape is None else f" of shape {shape}")
    return ArenaError(
        f"release() takes views this run of step {key!r} handed out and has not "
        f"released yet; got {got} ({what}); nothing was released{fix}"
    )
