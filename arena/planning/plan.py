"""The plan phase of steps: from a key's record to offsets, and from offsets to a slot's
size (see :mod:`arena.planning.steps` for when it runs).

As TensorFlow Lite's arena planner calculates offsets from lifetimes and then commits a
size, a key's plan is made in two steps here. :func:`make_plan` gives each recorded block
an offset (:func:`~arena.planning.plan_offsets` over the blocks' sizes and lifetimes, or
the recording run's own first fit where that is smaller) and the book takes the plan in
one step. The slot is then sized for every planned key of it (:func:`fit_to_plans`), once,
before the planned runs, so that those runs never grow it.

A step run inside another starts above the outer step's plan, so a plan must cover what
its nested steps reach (:func:`cover_nested`). At ``lock()`` the micro-batches of a lane
get one plan per key where their records match (:func:`share_plans`, through the lock
hook :class:`StepPlanHook`), and what a merged nested plan adds lifts the steps around it
(:func:`lift_outer_steps`): when ``lock()`` gives a slot the lane's merged plan of a
nested key, larger than the slot's own, everything above that nested step moves up by the
difference, and so does what the steps it runs inside hold above their end. Each
top-level key then reserves the most any slot measured plus what that slot's nested keys
add: the largest over steps run one after another inside a step, the sum down a chain of
steps run one inside the other (as each book last saw it: ``inside``, the key of the step
its nested runs ran in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arena.planning.books import StepBooks, books_of
from arena.planning.offsets import plan_offsets
from arena.planning.records import StepBook
from arena.slots.hooks import LockHook
from arena.slots.slot import Resize, Slot
from arena.slots.table import SlotTable

__all__ = [
    "StepPlanHook",
    "cover_nested",
    "fit_to_plans",
    "lift_outer_steps",
    "make_plan",
    "merged_plan",
    "plan_figures",
    "plan_for_run",
    "plan_slot_steps",
    "plan_table_steps",
    "planned_need",
    "share_plans",
]


# ------------------------------------------------------------------ one key: offsets
def make_plan(book: StepBook, alignment: int, time_limit: float | None = None) -> None:
    """Plan the blocks ``book`` recorded (the run's own first-fit placement kept when it
    is smaller), searching up to ``time_limit`` seconds (see :func:`plan_offsets`).
    Built in locals, installed by :meth:`StepBook.set_plan` in one step: an interrupt
    leaves the book planned entirely or not at all."""
    sizes, found = book.sizes, book.found
    blocks = list(zip(sizes, book.firsts, book.lasts, strict=True))
    plan = plan_offsets(blocks, alignment=alignment, time_limit=time_limit)
    offsets, total = list(plan.offsets), plan.total_bytes
    if found is not None:
        extent = max((o + s for o, s in zip(found, sizes, strict=True)), default=0)
        if extent < total:
            offsets, total = list(found), extent
    starts = [0]
    for count in book.counts:
        starts.append(starts[-1] + count)
    ends: dict[int, list[int]] = {}
    for block, last in enumerate(book.lasts):
        ends.setdefault(last, []).append(block)
    expiring = [tuple(ends.get(r - 1, ())) for r in range(len(book.counts))]
    book.set_plan(offsets, total, plan.lower_bound, starts, expiring)


# ------------------------------------------------------------ one slot: nested steps
def cover_nested(steps: dict[Any, StepBook]) -> None:
    """Raise the ``above`` of each planned book of one slot's ``steps`` (key -> book) to
    what the steps run inside it need when it replays its plan. One run right inside
    starts at the end of the outer views live under it when it started, where the plan
    puts them (maybe higher than the run that recorded them did); one in a scope starts
    its lift above the plan's end. Each reaches its own plan plus what it holds above (not
    planned: what its recorded run reached). Inner keys first; a key seen inside itself
    counts once."""
    done: set[Any] = set()

    def cover(key: Any, path: frozenset[Any]) -> None:
        book = steps.get(key)
        if key in done or book is None or not book.planned:
            return
        done.add(key)
        above = book.above
        for _, inner_key, place, recorded in list(book.nests):
            inner = steps.get(inner_key)
            reached = recorded
            if inner_key not in path and inner is not None and inner.planned:
                cover(inner_key, path | {inner_key})
                reached = inner.total + inner.above
            start = place if isinstance(place, int) else _live_extent(book, place) - book.total
            above = max(above, start + reached)
        book.above = above

    for key in list(steps):
        cover(key, frozenset([key]))


def _live_extent(book: StepBook, blocks: tuple[int, ...]) -> int:
    """The end of the highest of ``blocks`` (the ones a run held under a step it ran right
    inside) in ``book``'s plan. Not every block the plan may have live at that request: a
    block released just before the inner step has its last use at the request before,
    as one released just after it does, and counting it would put the inner step above
    bytes its runs never used."""
    offsets, sizes = book.offsets, book.sizes
    assert offsets is not None
    return max((offsets[b] + sizes[b] for b in blocks), default=0)


# ------------------------------------------------------------------ one slot: its size
def plan_for_run(slot: Slot, book: StepBook, alignment: int) -> list[Resize]:
    """Plan ``book`` as a run of its key starts on ``slot`` (its second run, or a key
    whose step run inside recorded anew: ``stale``); returns the resize to announce, if
    any. With nothing open on the slot, every recorded key of it is planned and the slot
    sized (:func:`fit_to_plans`); under an open scope or step only this key is planned
    (the others are sized at their own first planned run)."""
    if not slot.stack.regions:
        return fit_to_plans(slot, alignment)
    with slot.governor.mutex:  # as fit_to_plans: lock() may merge the key's plan meanwhile
        if not book.planned and book.runs:
            make_plan(book, alignment)
            cover_nested(books_of(slot))
    return []


def fit_to_plans(slot: Slot, alignment: int) -> list[Resize]:
    """Plan every recorded key of ``slot`` and size the slot to what its planned steps
    and its other requests need (larger or smaller), where the arena allows it (unlocked,
    not capturing, its buffer never captured, nothing open on it). Returns the resize to
    announce, if any.

    Sized up front, before the planned runs: a step run inside another replays above the
    outer step's plan, higher than its recording ran, and growing during that run would
    move the pointers the next runs repeat.

    Under the arena's mutex, as :func:`share_plans` (``lock()``) and ``plan_steps()``
    plan: a plan made from a book's sizes while another thread gave it a lane's merged
    plan would be installed over the merged sizes (views of the next replay overlapping).
    """
    with slot.governor.mutex:
        plan_slot_steps(slot, alignment)
        books = books_of(slot)
        need = max([slot.plain_high, *(b.reach for b in list(books.values()) if b.planned)])
        resize = slot.fit(max(need, slot.stack.top))
        for book in list(books.values()):
            book.stale = False  # sized (or the slot may not change now)
    return [] if resize is None else [resize]


def planned_need(slot: Slot) -> int:
    """What ``slot`` needs once its steps are planned: its largest request outside every
    step, or the furthest a planned step reaches (its start plus its plan), whichever is
    larger; 0 while no step of the slot has a plan (its capacity is then what it needs)."""
    reach = [book.reach for book in list(books_of(slot).values()) if book.planned]
    return max(slot.plain_high, *reach) if reach else 0


def plan_slot_steps(slot: Slot, alignment: int, time_limit: float | None = None) -> int:
    """Plan every recorded key of ``slot`` not planned yet (each searching up to
    ``time_limit`` seconds); returns the bytes the slot's planned steps need (their start
    plus their plan, at the most)."""
    books = books_of(slot)
    for book in list(books.values()):
        if not book.planned and book.runs:
            make_plan(book, alignment, time_limit)
    cover_nested(books)
    return max((book.reach for book in list(books.values()) if book.planned), default=0)


# ------------------------------------------------------------ one lane: shared plans
def share_plans(
    lane: Sequence[dict[Any, StepBook]],
    alignment: int,
    *,
    merge: bool = True,
    frozen: Sequence[bool] = (),
) -> int:
    """Make the slots of one lane (``lane``: each slot's ``steps``) replay one plan per
    step key after ``lock()``; returns the bytes the lane's planned steps need (see
    :attr:`StepBook.reach`).

    Keys not planned yet are planned. Keys whose books record the same requests and
    lifetimes on every slot that ran them are merged (each block at its largest size,
    planned again): any micro-batch then replays any run a sibling saw. A slot that
    never ran a key (or whose runs were all interrupted) gets a copy of the plan. Keys
    recorded differently, or running now, keep each slot's own plan, and so does every
    slot whose buffer a CUDA graph captured (``frozen[i]``: the graph replays its
    pointers) and every slot when ``merge`` is False (the arena is locked: nothing may
    grow).
    """
    for steps in lane:
        for book in list(steps.values()):
            if not book.planned and book.runs:
                make_plan(book, alignment)
        cover_nested(steps)
    merges: dict[Any, tuple[list[StepBook], StepBook | None]] = {}
    for key in {key: None for steps in lane for key in list(steps)}:
        planned = [steps[key] for steps in lane if key in steps and steps[key].planned]
        if planned:
            merged = merged_plan(planned, alignment) if merge and len(planned) > 1 else None
            merges[key] = (planned, merged)
    lift_outer_steps(lane, merges, frozen)
    for key, (planned, merged) in merges.items():
        for index, steps in enumerate(lane):
            found = steps.get(key)
            if found is None or not (found.planned or found.runs or found.running):
                steps[key] = (merged or planned[0]).copy()
            elif (
                merged is not None and found.planned and not (index < len(frozen) and frozen[index])
            ):
                found.take_plan(merged)
    return max(
        (book.reach for steps in lane for book in list(steps.values()) if book.planned),
        default=0,
    )


def merged_plan(books: list[StepBook], alignment: int) -> StepBook | None:
    """One plan for ``books`` (one key, sibling slots): None when they differ in requests
    or lifetimes, are the same already, or one of them is running."""
    first = books[0]
    # Lists and loops, not any() or all() over a generator: one they leave suspended is
    # closed when collected, and an interrupt landing in that close is lost.
    if [book for book in books if book.running]:
        return None
    shapes = [(b.counts, b.firsts, b.lasts) for b in books]
    if [shape for shape in shapes if shape != shapes[0]]:
        return None
    sizes = [max(column) for column in zip(*[b.sizes for b in books], strict=True)]
    if not [b for b in books if b.sizes != sizes or b.offsets != first.offsets]:
        return None
    merged = first.copy()
    merged.sizes, merged.found = sizes, None
    merged.version = max(b.version for b in books)
    make_plan(merged, alignment)  # a new version: remembered views of the old plans go
    merged.base = max(b.base for b in books)
    merged.above = max(b.above for b in books)
    merged.top_level = bool([b for b in books if b.top_level])
    return merged


def lift_outer_steps(
    lane: Sequence[dict[Any, StepBook]],
    merges: dict[Any, tuple[list[StepBook], StepBook | None]],
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
        outer = [(i, s[key]) for i, s in enumerate(lane) if [b for b in planned if s.get(key) is b]]
        tops = [(i, book) for i, book in outer if book.top_level]
        above = max((book.above + lifts[i].get(key, 0) for i, book in tops), default=0)
        for i, book in tops:
            if free[i]:
                book.above = max(book.above, above)
        if merged is not None and merged.top_level:
            merged.above = max(merged.above, above)


def _slot_lifts(
    steps: dict[Any, StepBook], merges: dict[Any, tuple[list[StepBook], StepBook | None]]
) -> dict[Any, int]:
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


class StepPlanHook(LockHook):
    """Step plans' part in ``lock()`` (a :class:`~arena.slots.hooks.LockHook` the facade
    registers with every slot table): each lane replays one plan per step key, and its
    slots hold what the lane's planned steps need. At registration it gives every slot
    its step books (:class:`~arena.planning.books.StepBooks`)."""

    __slots__ = ()

    def attach(self, slots: Sequence[Slot]) -> None:
        """Give each of ``slots`` a store of step books of its own."""
        for slot in slots:
            slot.attach(StepBooks())

    def lane_need(self, group: Sequence[Slot], alignment: int, *, merge: bool) -> int:
        """Plan the lane's steps not planned yet and share the plans (see
        :func:`share_plans`); the bytes they need."""
        return share_plans(
            [books_of(s) for s in group],
            alignment,
            merge=merge,
            frozen=[s.buffer.captured for s in group],
        )

    def lane_estimate(self, group: Sequence[Slot], alignment: int) -> int:
        """What :func:`share_plans` would return for the lane ``group``, without planning
        anything: it runs on copies of the slots' books."""
        lane = [{k: b.copy(running=True) for k, b in list(books_of(s).items())} for s in group]
        return share_plans(lane, alignment, frozen=[s.buffer.captured for s in group])

    def lock_warnings(self, group: Sequence[Slot]) -> list[str]:
        """One warning per planned step of a slot whose buffer a CUDA graph captured that
        a sibling's plan outgrows: ``lock()`` keeps such plans as they are."""
        warnings = []
        lane = [books_of(s) for s in group]
        for slot in group:
            if not slot.buffer.captured:
                continue
            for key, book in list(books_of(slot).items()):
                totals = [b[key].total for b in lane if key in b and b[key].planned]
                largest = max(totals, default=0)
                if book.planned and largest > book.total:
                    warnings.append(
                        f"lock() left step {key!r} of slot {slot.describe()} on its own plan "
                        f"({book.total} bytes; a sibling micro-batch's needs {largest}): a "
                        "CUDA graph captured its buffer, so its plan may not move, and a run "
                        "of the sibling's sizes there raises ArenaLockedError. Warm every "
                        "micro-batch of a lane up to the same sizes before capturing"
                    )
        return warnings


# ------------------------------------------------------------- readers of a slot table
def plan_table_steps(table: SlotTable, time_limit: float | None = None) -> dict[Any, int]:
    """Plan every recorded step of ``table``'s slots not planned yet (each searching up
    to ``time_limit`` seconds) and size slots to their plans where allowed; see
    :meth:`arena.Arena.plan_steps`."""
    governor = table.governor
    planned: dict[Any, int] = {}
    resizes: list[Resize] = []
    try:
        for slot in table.slots:
            with governor.mutex:
                governor.check_open()
                governor.check_awake("plan_steps()")  # sizing commits memory
                plan_slot_steps(slot, governor.alignment, time_limit)
                for key, book in list(books_of(slot).items()):
                    if book.planned:
                        planned[key] = max(planned.get(key, 0), book.total)
            resizes.extend(fit_to_plans(slot, governor.alignment))
    finally:
        table.announce("resize", resizes)
    return planned


def plan_figures(table: SlotTable) -> tuple[tuple[int, int], ...]:
    """Per slot of ``table``, ubatch-major: ``(LOAD, planned need)``. LOAD is the most
    bytes the slot's requests held live at once; the planned need is what the slot needs
    once its steps are planned (0 while none is: its capacity is then what it needs)."""
    with table.governor.mutex:
        return tuple((s.load, planned_need(s)) for s in table.slots)
