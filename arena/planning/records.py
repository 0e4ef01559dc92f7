"""What one slot knows of one step key: the blocks its runs recorded and their plan.

A block is one view of one request, numbered in request order; it lives from the request
that made it to the last request before its release (or the step's end). See
:mod:`arena.planning.steps` for how runs record and replay.
"""

from __future__ import annotations

from typing import Any

from arena.planning.offsets import plan_offsets
from arena.slots.slot import Resize, Slot

__all__ = [
    "StepBook",
    "StepRun",
    "plan_slot_steps",
    "planned_need",
    "share_plans",
    "shrink_to_plans",
]


class StepBook:
    """What one slot knows of one step key: its recorded blocks and their plan.

    A block is one view of one request. Blocks are numbered in request order.

    Attributes
    ----------
    counts : list of int
        Views per request, in request order.
    sizes, firsts, lasts : list of int
        Per block: aligned bytes (the largest seen), the request that made it, the last
        request it was live for.
    offsets : list of int or None
        Planned offset of each block from the step's start; None until planned.
    total : int
        Bytes the plan spans (0 until planned).
    load : int
        The most bytes the recorded blocks hold at once (LOAD).
    runs : int
        Completed runs.
    base : int
        The highest offset a run of this key started at in the slot.
    version : int
        Bumped at every new plan (cached views of an older plan are never served).
    """

    __slots__ = (
        "base",
        "counts",
        "expiring",
        "firsts",
        "found",
        "lasts",
        "load",
        "offsets",
        "runs",
        "sizes",
        "starts",
        "total",
        "version",
    )

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.sizes: list[int] = []
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.found: list[int] | None = None  # first-fit offsets of the last record
        self.offsets: list[int] | None = None
        self.starts: list[int] = [0]
        #: Per request: the blocks whose planned life ended before it (must be released).
        self.expiring: list[tuple[int, ...]] = []
        self.total = 0
        self.load = 0
        self.runs = 0
        self.base = 0
        self.version = 0

    def copy(self) -> StepBook:
        """An independent copy (a sibling slot's book: same record, same plan)."""
        twin = StepBook()
        for name in StepBook.__slots__:
            value = getattr(self, name)
            if isinstance(value, list):
                value = list(value)
            setattr(twin, name, value)
        return twin

    @property
    def planned(self) -> bool:
        """Whether the key has a plan."""
        return self.offsets is not None

    def record(self, run: StepRun) -> None:
        """Keep ``run`` as the key's record: sizes merge with the record's by maximum when
        the run has the same structure and lifetimes, else the run replaces it."""
        lasts = [run.lasts[block] for block in range(len(run.sizes))]
        same = run.counts == self.counts and run.firsts == self.firsts and lasts == self.lasts
        if same:
            self.sizes = [max(a, b) for a, b in zip(self.sizes, run.sizes, strict=True)]
            self.found = None
        else:
            self.counts, self.sizes = list(run.counts), list(run.sizes)
            self.firsts, self.lasts = list(run.firsts), list(lasts)
            self.found = list(run.offsets)
        self.offsets = None
        self.total = 0

    def make_plan(self, alignment: int) -> None:
        """Plan the recorded blocks (the run's own first-fit placement kept when it is no
        larger)."""
        blocks = list(zip(self.sizes, self.firsts, self.lasts, strict=True))
        plan = plan_offsets(blocks, alignment=alignment)
        offsets, total = list(plan.offsets), plan.total_bytes
        if self.found is not None:
            extent = max((o + s for o, s in zip(self.found, self.sizes, strict=True)), default=0)
            if extent < total:
                offsets, total = self.found, extent
        self.offsets, self.total, self.load = offsets, total, plan.lower_bound
        self.starts = [0]
        for count in self.counts:
            self.starts.append(self.starts[-1] + count)
        ends: dict[int, list[int]] = {}
        for block, last in enumerate(self.lasts):
            ends.setdefault(last, []).append(block)
        self.expiring = [tuple(ends.get(r - 1, ())) for r in range(len(self.counts))]
        self.version += 1


class StepRun:
    """The blocks of one run, numbered in request order (a replay numbers them as its
    plan does).

    A recording run keeps each block's size, first use, offset and whether it is live. A
    replay keeps only what it handed out and what was released (its places are the
    plan's); if it starts recording, it first adopts its plan's record of what it did.
    """

    __slots__ = (
        "counts",
        "firsts",
        "handed",
        "indexed",
        "lasts",
        "live",
        "offsets",
        "released",
        "sizes",
        "views",
    )

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.sizes: list[int] = []
        self.firsts: list[int] = []
        self.offsets: list[int] = []
        #: Block -> the last request it was live for (set at release and at the end).
        self.lasts: dict[int, int] = {}
        #: Recording: block -> (offset, size) while live.
        self.live: dict[int, tuple[int, int]] = {}
        #: id(view) -> (block, view) while live (the view kept: its id stays unique).
        self.views: dict[int, tuple[int, Any]] = {}
        #: Replay: (blocks, views) per request, indexed into :attr:`views` when needed.
        self.handed: list[tuple[tuple[int, ...], list[Any]]] = []
        self.indexed = 0
        #: Replay: blocks released so far.
        self.released: set[int] = set()

    def add(self, request: int, offsets: list[int], sizes: list[int]) -> None:
        """Record one request's blocks (numbered from ``len(self.sizes)``)."""
        self.counts.append(len(sizes))
        self.sizes.extend(sizes)
        self.offsets.extend(offsets)
        self.firsts.extend([request] * len(sizes))

    def index(self) -> None:
        """Index a replay's handed-out views by identity (for release and the end)."""
        views = self.views
        for blocks, handed in self.handed[self.indexed :]:
            for block, view in zip(blocks, handed, strict=True):
                views[id(view)] = (block, view)
        self.indexed = len(self.handed)

    def adopt(self, book: StepBook, requests: int) -> None:
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

    def first_fit(self, size: int) -> int:
        """The lowest offset where ``size`` bytes overlap no live block."""
        offset = 0
        for start, length in sorted(self.live.values()):
            if offset + size <= start:
                break
            offset = max(offset, start + length)
        return offset


def shrink_to_plans(slot: Slot) -> list[Resize]:
    """Shrink ``slot`` to what its planned steps and its other requests need, where the
    arena allows it (unlocked, not capturing, its buffer never captured). Returns the
    resize to announce, if any."""
    need = slot.plain_high
    for book in list(slot.steps.values()):
        if not book.planned:
            return []  # a key still recording needs what its record used
        need = max(need, book.base + book.total)
    resize = slot.shrink(max(need, slot.top))
    return [] if resize is None else [resize]


def planned_need(slot: Slot) -> int:
    """What ``slot`` needs once its steps are planned: its largest request outside every
    step, or the furthest a planned step reaches (its start plus its plan), whichever is
    larger; 0 while no step of the slot has a plan (its capacity is then what it needs)."""
    reach = [book.base + book.total for book in list(slot.steps.values()) if book.planned]
    return max(slot.plain_high, *reach) if reach else 0


def plan_slot_steps(slot: Slot, alignment: int) -> int:
    """Plan every recorded key of ``slot`` not planned yet; returns the bytes the slot's
    planned steps need (their start plus their plan, at the most)."""
    need = 0
    for book in list(slot.steps.values()):
        if not book.planned and book.runs:
            book.make_plan(alignment)
        if book.planned:
            need = max(need, book.base + book.total)
    return need


def share_plans(group: list[Slot]) -> None:
    """Give every slot of ``group`` (one lane) a copy of each planned step a sibling has
    and it lacks, so a micro-batch that did not run a step during warm-up replays the
    same plan after ``lock()``."""
    for slot in group:
        for key, book in list(slot.steps.items()):
            if not book.planned:
                continue
            for sibling in group:
                if key not in sibling.steps:
                    sibling.steps[key] = book.copy()
