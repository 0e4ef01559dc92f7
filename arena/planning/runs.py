"""One run of a step key: the blocks it made, numbered in request order, the views it
handed out and released, and the steps run inside it. A recording run and a replay keep
their run here alike (see :mod:`arena.planning.records` for what a slot keeps of a key's
runs, and :mod:`arena.planning.steps` for how runs record and replay)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from types import MappingProxyType
from typing import Any, cast

from arena.errors import ArenaError
from arena.views.aliases import origin_of

__all__ = ["Nest", "StepRun", "merge_nests", "refused_release"]

#: A step run inside another: (requests before it, its key, its place, bytes it reached).
#: The place is an int (lifted that many bytes above the outer plan's end: in a scope) or
#: the outer run's blocks live when it started right inside (it starts at their end).
Nest = tuple[int, Any, "int | tuple[int, ...]", int]


def merge_nests(*lists: Sequence[Nest]) -> list[Nest]:
    """The steps run inside a record (see
    :attr:`arena.planning.records.StepBook.nests`), one per request index, key and place
    (the largest reach)."""
    most: dict[tuple[int, Any, int | tuple[int, ...]], int] = {}
    for nests in lists:
        for r, key, lift, reached in nests:
            most[r, key, lift] = max(most.get((r, key, lift), 0), reached)
    return [(r, key, lift, reached) for (r, key, lift), reached in most.items()]


#: A replay's recording fields (counts, sizes, firsts, offsets; live): shared empties that
#: cannot be written (an append or a store raises), so a replay makes none of its own; a
#: run that records gets its own (:meth:`StepRun.start_recording`, :meth:`StepRun.adopt`).
_NO_BLOCKS: tuple[int, ...] = ()
_NO_LIVE: MappingProxyType[int, tuple[int, int]] = MappingProxyType({})


class StepRun:
    """The blocks of one run, numbered in request order (a replay numbers them as its
    plan does).

    A recording run keeps each block's size, first use, offset and whether it is live. A
    replay keeps only what it handed out and what was released (its places are the
    plan's): its recording fields are shared empties that cannot be written, until it
    starts recording, when it first adopts its plan's record of what it did.
    """

    __slots__ = (
        "broken",
        "counts",
        "ended",
        "firsts",
        "handed",
        "indexed",
        "lasts",
        "live",
        "nests",
        "offsets",
        "released",
        "sizes",
        "views",
    )

    def __init__(self) -> None:
        # Recording: per request its block count; per block its size, first request and
        # offset (a replay's: the shared empties until start_recording() or adopt()).
        self.counts: list[int] = cast("list[int]", _NO_BLOCKS)
        self.sizes: list[int] = cast("list[int]", _NO_BLOCKS)
        self.firsts: list[int] = cast("list[int]", _NO_BLOCKS)
        self.offsets: list[int] = cast("list[int]", _NO_BLOCKS)
        #: Block -> the last request it was live for (set at release and at the end).
        self.lasts: dict[int, int] = {}
        #: Recording: block -> (offset, size) while live.
        self.live: dict[int, tuple[int, int]] = cast("dict[int, tuple[int, int]]", _NO_LIVE)
        #: id(view) -> (block, view) while live (the view kept: its id stays unique).
        self.views: dict[int, tuple[int, Any]] = {}
        #: Replay: per request its blocks and then its views (one flat list, two entries
        #: a request: no pair to build per request), indexed into :attr:`views` when
        #: needed.
        self.handed: list[Any] = []
        self.indexed = 0
        #: Replay: blocks released so far.
        self.released: set[int] = set()
        #: id(view) -> view of the views released so far (kept: their ids stay unique).
        self.ended: dict[int, Any] = {}
        #: Steps run inside this run (see :attr:`arena.planning.records.StepBook.nests`).
        self.nests: list[Nest] = []
        #: An interrupt stopped the bookkeeping of a request halfway: no record.
        self.broken = False

    def start_recording(self) -> None:
        """Give a run that records from its first request its own recording fields (a
        run that has them keeps them). Each is made before any is installed, and each
        install is one store: an interrupt leaves every field usable."""
        if self.live is _NO_LIVE:
            counts: list[int] = []
            sizes: list[int] = []
            firsts: list[int] = []
            offsets: list[int] = []
            live: dict[int, tuple[int, int]] = {}
            self.counts, self.sizes, self.firsts, self.offsets = counts, sizes, firsts, offsets
            self.live = live

    def add(self, request: int, offsets: list[int], sizes: list[int]) -> None:
        """Record one request's blocks (numbered from ``len(self.sizes)``)."""
        self.counts.append(len(sizes))
        self.sizes.extend(sizes)
        self.offsets.extend(offsets)
        self.firsts.extend([request] * len(sizes))

    def index(self) -> None:
        """Index a replay's handed-out views by identity (for release and the end); the
        views of blocks released already (by the compiled release, which does not index)
        are not live."""
        views, handed, released = self.views, self.handed, self.released
        for index in range(self.indexed, len(handed) - 1, 2):
            blocks, made = handed[index], handed[index + 1]
            for block, view in zip(blocks, made, strict=True):
                if block not in released:
                    views[id(view)] = (block, view)
        self.indexed = len(handed)

    def live_extent(self, plan: Any) -> tuple[int, int, tuple[int, ...]]:
        """The end of the run's highest live view from its start, their bytes (at
        ``plan``'s places when it replays one) and their blocks: where a step opened right
        inside starts, and what it starts above."""
        self.index()
        if plan is not None and plan.offsets is not None:
            blocks = sorted(b for b, _ in self.views.values())
            live = [(plan.offsets[b], plan.sizes[b]) for b in blocks]
        else:
            blocks = sorted(self.live)
            live = [self.live[b] for b in blocks]
        height = max((o + s for o, s in live), default=0)
        return height, sum(s for _, s in live), tuple(blocks)

    def adopt(self, book: Any, requests: int) -> None:
        """A replay that stops following its plan after ``requests`` requests: those
        requests' blocks are recorded as planned (their planned sizes, at least theirs),
        and the ones not released are live at their planned offsets."""
        assert book.offsets is not None
        self.index()
        blocks = book.starts[requests]
        self.counts = book.counts[:requests]
        self.sizes = book.sizes[:blocks]
        self.firsts = book.firsts[:blocks]
        self.offsets = list(book.offsets[:blocks])
        self.live = {
            block: (book.offsets[block], book.sizes[block])
            for block, _ in self.views.values()
            if block not in self.released
        }
        self.handed, self.indexed = [], 0

    def claim(self, views: Sequence[Any], key: Hashable) -> dict[int, tuple[Any, Any]]:
        """The blocks ``release(*views)`` ends, each with the view handed out for it and
        the view given (what a front's ``write_into`` returned stands for the view it was
        written through). Nothing changes: every view is checked before any is released.

        Raises
        ------
        ArenaError
            A view this run (of step ``key``) did not hand out, released already, or
            given twice.
        """
        by_view = self.views
        blocks: dict[int, tuple[Any, Any]] = {}  # block -> (the view handed out, given)
        for view in views:
            found = by_view.get(id(view))
            target = view
            if found is None:  # a live view's id is its own
                target = origin_of(view)  # the view a write_into result was written through
                found = by_view.get(id(target))
            if found is None or found[0] in blocks:
                raise refused_release(key, view, found is not None, id(target) in self.ended)
            blocks[found[0]] = (found[1], view)
        return blocks

    def first_fit(self, size: int) -> int:
        """The lowest offset where ``size`` bytes overlap no live block."""
        offset = 0
        for start, length in sorted(self.live.values()):
            if offset + size <= start:
                break
            offset = max(offset, start + length)
        return offset


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
