"""What one slot keeps of one step key (:class:`StepBook`): the blocks its runs
recorded, their plan, and the plan's form in a profile.

A block is one view of one request, numbered in request order; it lives from the request
that made it to the last request before its release (or the step's end). The book is the
record the three phases of a step pass along (:mod:`arena.planning.steps`): a recording
run fills it (:mod:`arena.planning.record`), the plan phase gives its blocks offsets
(:mod:`arena.planning.plan`), and a replay reads them (:mod:`arena.planning.replay`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arena.base.layout import int_not_bool
from arena.planning.runs import Nest, StepRun, merge_nests

__all__ = [
    "StepBook",
    "StepRun",
    "restore_plans",
    "storable_key",
    "stored_plans",
]


def storable_key(key: Any) -> bool:
    """Whether a step key survives JSON as itself: a str or an int, not a bool."""
    return isinstance(key, str) or int_not_bool(key)


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
    recorded_at : int
        Where the recorded run started: replays that start elsewhere get other pointers.
    version : int
        Bumped at every new plan (cached views of an older plan are never served).
    """

    __slots__ = (
        "above",
        "above_runs",
        "base",
        "counts",
        "expiring",
        "firsts",
        "found",
        "inside",
        "lasts",
        "load",
        "nests",
        "offsets",
        "recorded_at",
        "running",
        "runs",
        "settled",
        "sizes",
        "stale",
        "starts",
        "top_level",
        "total",
        "version",
        "warned",
    )

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.sizes: list[int] = []
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.found: list[int] | None = None  # first-fit offsets of the last record
        #: Steps run inside its runs: (requests before, key, place, bytes from the step's
        #: start to the most it reached). Place: the blocks live under it (right inside:
        #: it starts at their planned end), or an int: that many bytes above the plan's
        #: end (in a scope).
        self.nests: list[Nest] = []
        self.offsets: list[int] | None = None
        self.starts: list[int] = [0]
        #: Per request: the blocks whose planned life ended before it (must be released).
        self.expiring: list[tuple[int, ...]] = []
        self.total = 0
        self.load = 0
        self.runs = 0
        self.base = 0
        #: Bytes the key's runs needed above their end (plain requests, scopes and steps
        #: inside them): from its replays once it has some, else from its recording run.
        self.above = 0
        self.above_runs = 0
        #: Whether a run of the key started with no other step running on the slot (a
        #: step only ever nested counts in the reach of the step it runs in).
        self.top_level = False
        self.inside: tuple[Any] | None = None  # (key,) of the step a nested run last ran in
        self.recorded_at = 0
        self.warned = False  # a replay at another start was warned of
        self.running = False  # a run of this key is open on this slot
        self.version = 0
        self.settled = 0  # the plan version the last finished replay ran
        #: A step run inside this one recorded anew: its next top-level run plans and
        #: sizes the slot first (the run inside it would otherwise grow it halfway).
        self.stale = False

    def copy(self, *, running: bool = False) -> StepBook:
        """An independent copy (a sibling slot's book: same record, same plan); marked
        running only with ``running`` (a copy that stands for this book)."""
        twin = StepBook()
        for name in StepBook.__slots__:
            value = getattr(self, name)
            if isinstance(value, list):
                value = list(value)
            setattr(twin, name, value)
        twin.running = running and self.running
        return twin

    def take_plan(self, other: StepBook) -> None:
        """Replay ``other``'s record and plan from now on (a lane's merged plan); this
        slot's own counters (runs, warnings) stay. Copied first, installed in one step
        (no call between the stores, where an interrupt could land)."""
        counts, sizes, firsts = list(other.counts), list(other.sizes), list(other.firsts)
        lasts, starts, nests = list(other.lasts), list(other.starts), list(other.nests)
        found = None if other.found is None else list(other.found)
        offsets = None if other.offsets is None else list(other.offsets)
        expiring = list(other.expiring)
        self.counts, self.sizes, self.firsts, self.lasts = counts, sizes, firsts, lasts
        self.found, self.starts, self.nests, self.expiring = found, starts, nests, expiring
        self.total, self.load, self.version = other.total, other.load, other.version
        self.base, self.above, self.top_level = other.base, other.above, other.top_level
        self.offsets = offsets

    @property
    def planned(self) -> bool:
        """Whether the key has a plan."""
        return self.offsets is not None

    def record(self, run: StepRun, start: int) -> None:
        """Keep ``run`` (started at byte ``start`` of the slot) as the key's record: sizes
        merge with the record's by maximum when the run has the same structure and
        lifetimes, else the run replaces it. Built first, installed in one step."""
        lasts = [run.lasts[block] for block in range(len(run.sizes))]
        same = run.counts == self.counts and run.firsts == self.firsts and lasts == self.lasts
        if same:
            counts, firsts = self.counts, self.firsts
            sizes = [max(a, b) for a, b in zip(self.sizes, run.sizes, strict=True)]
            found = None
            nests = merge_nests(self.nests, run.nests)  # both runs' steps, as the sizes merge
        else:
            counts, sizes, firsts = list(run.counts), list(run.sizes), list(run.firsts)
            found = list(run.offsets)
            nests = merge_nests([], run.nests)
        self.offsets, self.total = None, 0  # no plan until make_plan()
        self.counts, self.sizes, self.firsts, self.lasts = counts, sizes, firsts, lasts
        self.found, self.nests, self.recorded_at = found, nests, start

    def ran(
        self, start: int, above: int, *, nested: Any, replay: bool, nests: Sequence[Nest] = ()
    ) -> None:
        """Count a finished run that started at byte ``start`` and needed ``above`` bytes
        above its end, inside the step ``nested`` (None: no step below it), with
        ``nests`` the steps run inside it."""
        inside, top_level, base = self.inside, self.top_level, self.base
        if nested is not None:
            inside = (nested.key,)
        else:
            top_level, base = True, max(base, start)
        settled, merged = self.settled, self.nests
        if replay:
            settled = self.version
            if nests:  # this program's steps inside too (the record's plan serves it)
                merged = merge_nests(merged, nests)
        # A recording's reach above is an estimate until the key replays (0 runs).
        above_runs = self.above_runs + 1 if replay else 0
        if replay and self.above_runs:
            above = max(self.above, above)
        runs = self.runs + 1
        # Installed in one step: no call between the stores.
        self.inside, self.top_level, self.base, self.settled = inside, top_level, base, settled
        self.nests, self.above, self.above_runs, self.runs = merged, above, above_runs, runs

    def settle(self, base: int, free: bool) -> bool:
        """A replay starts at byte ``base``; ``free`` (warm-up, or inside a step whose plan
        or start is new) makes that the plan's height. Returns whether what runs inside
        this replay starts at a new height (a plan not replayed yet, or a new start)."""
        moved = self.settled != self.version
        if free and base != self.recorded_at:
            self.recorded_at, moved = base, True
        return moved

    @property
    def reach(self) -> int:
        """The bytes of its slot the planned key needs: its start plus its plan plus what
        its runs need above it; 0 for a key that only runs inside another step."""
        return self.base + self.total + self.above if self.top_level else 0

    def set_plan(
        self,
        offsets: list[int],
        total: int,
        load: int,
        starts: list[int],
        expiring: list[tuple[int, ...]],
    ) -> None:
        """Take a plan of the recorded blocks (made by
        :func:`~arena.planning.plan.make_plan`): each block's ``offsets``, the bytes it
        spans (``total``), its LOAD, each request's first block (``starts``) and the blocks
        whose life ends before each request (``expiring``). A new version: views
        remembered for an older plan are never served for this one. Installed in one step
        (no call between the stores)."""
        version = self.version + 1
        self.starts, self.expiring, self.total, self.load = starts, expiring, total, load
        self.version, self.offsets = version, offsets

    def to_profile(self) -> dict[str, Any]:
        """The record and plan a replay needs, JSON-ready (see
        :mod:`arena.observe.profilesteps` for the fields). The first request of each block
        and the plan's LOAD follow from the rest and are not stored.

        Raises
        ------
        ValueError
            The key has no plan (a key still recording has nothing to replay).
        """
        offsets = self.offsets
        if offsets is None:
            raise ValueError("a step book without a plan has no profile entry")
        return {
            "counts": list(self.counts),
            "sizes": list(self.sizes),
            "lasts": list(self.lasts),
            "offsets": list(offsets),
            "total": self.total,
            "base": self.base,
            "above": self.above,
            "top_level": self.top_level,
            "recorded_at": self.recorded_at,
        }

    @classmethod
    def from_profile(cls, entry: dict[str, Any]) -> StepBook:
        """A planned book from :meth:`to_profile`'s dict (one that passed
        :func:`~arena.observe.profilesteps.step_problem`): it replays the stored plan from
        its first run, as a book planned in this process does. ``above`` counts as measured
        by a replay: later replays only raise it."""
        book = cls()
        book.counts = [int(count) for count in entry["counts"]]
        book.sizes = [int(size) for size in entry["sizes"]]
        book.lasts = [int(last) for last in entry["lasts"]]
        book.firsts = [r for r, count in enumerate(book.counts) for _ in range(count)]
        book.offsets = [int(offset) for offset in entry["offsets"]]
        book.total, book.base = int(entry["total"]), int(entry["base"])
        book.above, book.above_runs = int(entry["above"]), 1
        book.top_level = bool(entry["top_level"])
        book.recorded_at = int(entry["recorded_at"])
        book.starts = [0]
        for count in book.counts:
            book.starts.append(book.starts[-1] + count)
        ends: dict[int, list[int]] = {}
        change = [0] * (len(book.counts) + 1)  # live bytes: + at a block's first, - after
        for block, (first, last, size) in enumerate(
            zip(book.firsts, book.lasts, book.sizes, strict=True)
        ):
            ends.setdefault(last, []).append(block)
            change[first] += size
            change[last + 1] -= size
        book.expiring = [tuple(ends.get(r - 1, ())) for r in range(len(book.counts))]
        live = 0
        for delta in change:  # the plan's LOAD: what plan_offsets calls its lower bound
            live += delta
            book.load = max(book.load, live)
        book.version = 1
        return book


def stored_plans(steps: dict[Any, StepBook]) -> list[dict[str, Any]]:
    """A profile's entries for one slot's ``steps``: each planned key that is a str or an
    int, as :meth:`StepBook.to_profile` with its ``key``. Other keys are skipped (JSON
    would not give them back as themselves)."""
    entries = []
    for key, book in list(steps.items()):
        if storable_key(key) and book.planned:
            try:
                entries.append({"key": key, **book.to_profile()})
            except ValueError:  # a run on another thread is recording it again
                continue
    return entries


def restore_plans(
    steps: dict[Any, StepBook], entries: list[dict[str, Any]], capacity: int
) -> list[tuple[Any, int]]:
    """Put the plans of a profile's checked ``entries`` into one slot's ``steps`` (keys the
    slot has a book for stay as they are), where the slot's ``capacity`` holds them.
    Returns ``(key, bytes)`` for each plan refused: it reaches past the capacity."""
    refused = []
    for entry in entries:
        key = entry["key"]
        if key in steps:  # the slot's own book (or one equal to it: 1 == True) stays
            continue
        book = StepBook.from_profile(entry)
        need = max(book.reach, book.total)
        if need > capacity:
            refused.append((key, need))
        else:
            steps[key] = book
    return refused
