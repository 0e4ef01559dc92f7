"""One run of a step key: the blocks it made, numbered in request order, the views it
handed out and released, and the steps run inside it. A recording run and a replay keep
their run here alike (see :mod:`arena.planning.records` for what a slot keeps of a key's
runs, and :mod:`arena.planning.steps` for how runs record and replay)."""

from __future__ import annotations

import struct
from collections.abc import Hashable, Sequence
from types import MappingProxyType
from typing import Any, cast

from arena.errors import ArenaError
from arena.views.aliases import origin_of

__all__ = ["POINTER", "Nest", "StepRun", "lean", "merge_nests", "refused_release", "same_view"]

#: A view's address as a replay stores it (:attr:`StepRun.ids`): a native pointer.
POINTER = struct.Struct("P")

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

    A recording run keeps each block's size, first use, offset and whether it is live,
    and holds its live views (by id) and the ones released. A replay keeps only what it
    handed out and what was released (its places are the plan's): its recording fields
    are shared empties that cannot be written, until it starts recording, when it first
    adopts its plan's record of what it did.

    A replay holds no view it handed out where it need not (see :attr:`handed`): a view
    the caller drops is freed at once, as a plain request's is. It knows each view by its
    address (:attr:`ids`) and by the view it is a fresh view of (its witness), and
    ``release(view)`` takes the newest record at ``view``'s address whose witness is
    ``view`` or has ``view``'s place, layout and type (:meth:`find`): an object at the
    address of a view that died is refused unless it is a view of the same bytes with
    the same layout as the one handed out for that block, made after it died (from a
    view outside the run: this run's live views never share a block's bytes).
    """

    __slots__ = (
        "broken",
        "counts",
        "ended",
        "firsts",
        "handed",
        "held",
        "ids",
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
        #: Recording: the bytes of the live blocks (what the step holds), counted as
        #: they are booked and released, each with its block's store.
        self.held = 0
        #: Recording: id(view) -> (block, view) while live (the view kept: its id stays
        #: unique).
        self.views: dict[int, tuple[int, Any]] = {}
        #: Replay: per request its witnesses, a list per request: per view the view handed
        #: out, or (a lean request: :func:`lean`) the remembered view it is a fresh view of.
        self.handed: list[list[Any]] = []
        #: Replay: the address of every view handed out (native pointers), block k's the
        #: k-th (a replay's requests come in order, each its plan's blocks): room for the
        #: plan's every block is made at its first request.
        self.ids = bytearray()
        #: Replay: blocks released so far.
        self.released: set[int] = set()
        #: Recording: id(view) -> view of the views released so far (kept: their ids stay
        #: unique).
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
            self.live, self.held = live, 0

    def book(
        self,
        views: Sequence[Any],
        blocks: Sequence[int],
        offsets: Sequence[int],
        sizes: Sequence[int],
    ) -> None:
        """A recording request's ``views`` are placed: each view's block is live at its
        offset until released. A block and its bytes are counted by plain stores with no
        call between them (a signal's handler runs at a call), so :attr:`held` is the
        bytes of :attr:`live` whatever interrupts the booking; a block booked again (by a
        request after one an interrupt stopped before :meth:`add`) replaces its bytes."""
        live = self.live
        for view, block, offset, size in zip(views, blocks, offsets, sizes, strict=True):
            key = id(view)
            gone = live[block][1] if block in live else 0
            live[block] = (offset, size)
            self.held += size - gone
            self.views[key] = (block, view)

    def end_block(
        self, block: int, handed: Any, given: Any, recorded: bool
    ) -> tuple[int, int] | None:
        """``release()`` ends ``block`` (:meth:`claim` found it): the view ``handed`` out
        for it (``given``: what stands for it) ends, a recording's view (``recorded``)
        among the live views, a replay's among the released blocks, and a block the run
        counts live leaves its live blocks and its bytes :attr:`held`. The ids are taken
        first, then plain stores with no call among them (a signal's handler runs at a
        call): all of it or none. Returns the block's (offset, size) where it was live."""
        handed_id, given_id = id(handed), id(given)
        live = self.live
        placed = live.get(block)  # a call before the stores
        if recorded:
            del self.views[handed_id]
            self.ended[handed_id] = handed
            self.ended[given_id] = given
        else:
            self.released |= {block}  # an operator, not add(): no call
        if placed is not None:
            del live[block]
            self.held -= placed[1]
        return placed

    def add(self, request: int, offsets: list[int], sizes: list[int]) -> None:
        """Record one request's blocks (numbered from ``len(self.sizes)``)."""
        self.counts.append(len(sizes))
        self.sizes.extend(sizes)
        self.offsets.extend(offsets)
        self.firsts.extend([request] * len(sizes))

    def hand(
        self, request: int, starts: Sequence[int], witnesses: list[Any], made: list[Any]
    ) -> None:
        """Record request number ``request`` of a replay of a plan whose requests start at
        blocks ``starts``: the ``made`` views it hands out, known by ``witnesses``. What
        an interrupt left of an earlier call (a request recorded but not counted) is
        dropped first; the addresses are stored at the request's blocks (room for every
        block of the plan made at the first), then the witnesses, each in one call."""
        size, ids, handed = POINTER.size, self.ids, self.handed
        if len(handed) != request:
            del handed[request:]
        if len(ids) < starts[-1] * size:
            ids.extend(bytes(starts[-1] * size - len(ids)))
        first = starts[request] * size
        ids[first : first + len(made) * size] = b"".join([POINTER.pack(id(v)) for v in made])
        handed.append(witnesses)

    def handed_blocks(self) -> int:
        """How many views the replay handed out (its blocks 0 to that, less one)."""
        return min(sum(map(len, self.handed)), len(self.ids) // POINTER.size)

    def find(self, view: Any) -> tuple[int, Any] | None:
        """The block a replayed request handed ``view`` out for and its witness: the newest
        record at ``view``'s address, if its witness is ``view`` or a view of the same
        bytes with the same layout (:func:`same_view`); else None."""
        size, ids = POINTER.size, self.ids
        key, end = POINTER.pack(id(view)), self.handed_blocks() * size
        while True:
            at = ids.rfind(key, 0, end)
            if at < 0:
                return None
            if at % size == 0:
                break
            end = at + size - 1  # not at an entry's start: an aligned one ends before
        block = at // size
        first = 0
        for witnesses in self.handed:
            if block < first + len(witnesses):
                witness = witnesses[block - first]
                break
            first += len(witnesses)
        else:  # pragma: no cover (handed_blocks() bounds the search)
            return None
        if witness is view or same_view(view, witness):
            return block, witness
        return None

    def live_witnesses(self) -> list[Any]:
        """The views a replay handed out for its blocks not released (their witnesses: the
        views themselves where it keeps them, as in debug mode), then the live views of a
        recording."""
        released, out, block = self.released, [], 0
        for witnesses in self.handed:
            for witness in witnesses:
                if block not in released:
                    out.append(witness)
                block += 1
        return out + [view for _, view in self.views.values()]

    def live_extent(self, plan: Any) -> tuple[int, int, tuple[int, ...]]:
        """The end of the run's highest live view from its start, their bytes (at
        ``plan``'s places when it replays one) and their blocks: where a step opened right
        inside starts, and what it starts above."""
        if plan is not None and plan.offsets is not None:
            released = self.released
            blocks = [b for b in range(self.handed_blocks()) if b not in released]
            live = [(plan.offsets[b], plan.sizes[b]) for b in blocks]
        else:
            blocks = sorted(self.live)
            live = [self.live[b] for b in blocks]
        height = max((o + s for o, s in live), default=0)
        return height, sum(s for _, s in live), tuple(blocks)

    def adopt(self, book: Any, requests: int) -> None:
        """A replay that stops following its plan after ``requests`` requests: those
        requests' blocks are recorded as planned (their planned sizes, at least theirs),
        and the ones not released are live at their planned offsets. Its records of the
        views it handed out stay (:meth:`claim` finds them)."""
        assert book.offsets is not None
        blocks = book.starts[requests]
        handed = min(self.handed_blocks(), blocks)
        live = {
            block: (book.offsets[block], book.sizes[block])
            for block in range(handed)
            if block not in self.released
        }
        held = 0
        for _, size in live.values():  # a loop, no generator frame to land in
            held += size
        offsets = list(book.offsets[:blocks])
        # Made first, installed in one assignment: an interrupt finds the run as it was
        # or adopted, its live blocks and their bytes in step.
        self.counts, self.sizes, self.firsts, self.offsets, self.live, self.held = (
            book.counts[:requests],
            book.sizes[:blocks],
            book.firsts[:blocks],
            offsets,
            live,
            held,
        )

    def holder(self, view: Any) -> tuple[int, Any, bool] | None:
        """The block ``view`` was handed out for, the view handed out (or its witness) and
        whether the block was released already; None where this run did not hand it out."""
        found = self.views.get(id(view))
        if found is not None:  # a recording's live view (kept: its id is its own)
            return found[0], found[1], False
        if id(view) in self.ended and self.ended[id(view)] is view:
            return -1, view, True  # a recording's view released already
        replayed = self.find(view)
        if replayed is None:
            return None
        return replayed[0], replayed[1], replayed[0] in self.released

    def claim(self, views: Sequence[Any], key: Hashable) -> dict[int, tuple[Any, Any]]:
        """The blocks ``release(*views)`` ends, each with the view handed out for it (or
        its witness) and the view given (what a front's ``write_into`` returned stands for
        the view it was written through). Nothing changes: every view is checked before
        any is released.

        Raises
        ------
        ArenaError
            A view this run (of step ``key``) did not hand out, released already, or
            given twice.
        """
        blocks: dict[int, tuple[Any, Any]] = {}  # block -> (the view handed out, given)
        for view in views:
            found = self.holder(view)
            if found is None:  # the view a write_into result was written through
                target = origin_of(view)
                found = None if target is view else self.holder(target)
            if found is None or found[2] or found[0] in blocks:
                twice = found is not None and not found[2]
                raise refused_release(key, view, twice, found is not None and found[2])
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


def _is_ndarray(view: Any) -> bool:
    kind = type(view)
    return kind.__name__ == "ndarray" and kind.__module__ == "numpy"


def _is_tensor(view: Any) -> bool:
    kind = type(view)
    return kind.__name__ == "Tensor" and kind.__module__ == "torch"


def lean(quick: bool, fresh_view: Any, witnesses: list[Any]) -> bool:
    """Whether a replay's request keeps only its remembered views (``witnesses``) and the
    addresses of the fresh views it hands out, not the fresh views (a view the caller
    drops is freed at once): a quick replay (no poisoning, no debug mode) of a front that
    makes fresh views (``fresh_view`` a callable), of NumPy arrays or torch tensors
    (exact ``numpy.ndarray`` or ``torch.Tensor``: what release() compares cheaply, in C
    too, with :func:`same_view`). The compiled hit decides the same
    (``arena/planning/_region_hit.c``)."""
    return (
        quick
        and fresh_view is not None
        and fresh_view is not False
        and bool(witnesses)
        and (_is_ndarray(witnesses[0]) or _is_tensor(witnesses[0]))
    )


def same_view(view: Any, witness: Any) -> bool:
    """Whether ``view`` stands for a fresh view of ``witness`` (a replay's remembered
    view): an exact NumPy array (torch tensor) of the witness's type whose data starts
    where the witness's does. Its shape, strides, dtype and writeability are not compared:
    the caller may have changed them in place on the very view it was handed
    (``view.shape = ...``, ``view.flags.writeable = False``; ``view.resize_(...)``,
    ``view.requires_grad_()``), and an array starting at a live block's first byte can
    only stand for that block (the run's live blocks never share bytes). A torch tensor
    the caller pointed at other memory in place (``set_``, ``as_strided_`` to another
    offset) no longer starts there: it is refused, as an array made from the view is."""
    if type(view) is not type(witness):
        return False
    if _is_ndarray(view):
        return bool(view.__array_interface__["data"][0] == witness.__array_interface__["data"][0])
    if _is_tensor(view):
        return bool(view.data_ptr() == witness.data_ptr())
    return False
