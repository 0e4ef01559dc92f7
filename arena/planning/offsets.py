r"""Offset planning: give blocks with known lifetimes byte offsets in one shared buffer.

A *block* is ``(nbytes, first, last)``: it needs ``nbytes`` bytes from index ``first`` to
index ``last`` inclusive (indices are steps of a program: layers, kernels, operators). Two
blocks whose lifetimes share an index must not share bytes; blocks that are never live at
the same time may reuse them. :func:`plan_offsets` chooses an aligned offset for every
block so that the buffer, ``total_bytes``, is as small as it can make it.

This is dynamic storage allocation, NP-hard in general, so the planner runs greedy
heuristics, keeps the best and then improves it by a local search.

Placement. A heuristic is an *order* of the blocks. They are placed one at a time in that
order, each in the best-fitting hole among the already placed blocks that are live at the
same time as it (Pisarchyk & Lee, 2020, "Efficient Memory Management for Deep Neural Net
Inference", arXiv:2001.03288, "Greedy by Size for Offset Calculation"): walking those
blocks by offset, every hole between them large enough for the block is a candidate and
the smallest wins (the lowest on ties); when none fits, the block goes just above them.

Orders, tried in this sequence (an earlier one wins ties):

``"size"``
    Size descending, then first use ascending, then input order: greedy by size, as
    TensorFlow Lite's ``GREEDY_BY_SIZE`` strategy and its arena planner. Always tried.
``"peak"``
    The largest total live size over the block's lifetime descending, then size: the
    order of Pisarchyk & Lee's "Greedy by Breadth" (blocks of the busiest step first).
    Always tried, at every size (unless greedy by size reached the lower bound).
``"area"``
    Size times lifetime length descending, then size: the spatial-temporal area that
    XLA's heap simulator (``GlobalDecreasingSizeBestFitHeap``) can sort by.
``"lifetime"``
    Lifetime length descending, then size: XLA's temporal order.
``"first"``
    First use ascending, then size descending: a sweep in program order.

Under a time limit, one more order (:data:`LIMIT_STRATEGIES`):

``"sides"``
    The blocks live at the busiest step first, stacked from 0 up: those that die sooner
    after the step than they were born before it, by last use ascending, then the others
    by first use ascending; then the rest in the peak order. After the step the lowest
    die first and before it the highest start last, so the bytes left free are runs, not
    scattered holes (idealloc's S_1: LOAD in one placement, where greedy by size is
    1.0158 above it).

As TensorFlow Lite's ``GREEDY_BEST`` does, the smallest total wins. Then a local search
moves one block earlier in the winning order and places again, keeping the change when
the total drops, or stays the same with fewer blocks reaching it. The blocks moved are
those that reach the top, then the blocks live at the same time as them, highest first;
each goes to the front first, then to every other earlier position. The search stops at a
local optimum. Chained transformer layers need it: greedy by size puts every layer's MLP
blocks at the bottom, so the residual streams of neighbouring layers, live together, stack
above them; moving one first lets alternate layers flip.

Cost. With ``n`` blocks and ``p`` co-live pairs, a placement reads each block's co-live
blocks from the conflict graph when ``p <= SPARSE_PAIRS * n``, otherwise it scans the
placed blocks, kept sorted by offset, for them. Where the optional extension
``arena.planning._place`` (``_place.c``) was built, both run compiled, without the GIL;
elsewhere, with ``ARENA_PURE_PYTHON=1``, or where the sizes sum past ``2**63 - 1``, the
graph walk runs in Python and the scan in NumPy (:data:`PLACE_PATH` says which). All
give the same plan. The work of one placement is estimated as the Python paths cost on a
slow core (about ``n + p/2`` microseconds for the graph, ``20 n + p/32`` for the scan),
whichever runs, so the plan does not depend on it. Greedy by size and the peak order
always run (unless greedy by size reached the lower bound); the other orders and the
search moves run while these estimates, summed, fit in :data:`WORK_BUDGET`. Compiled,
10\ :sup:`4` blocks take 0.1 s CPU, 10\ :sup:`5` with about 10\ :sup:`4` live with each
7.4 to 7.7 s on a loaded 2-core machine (docs/planning.md). Planning stops as soon as a
plan reaches the lower bound, since none can beat it.

Guarantees
----------
- Blocks whose lifetimes share an index never share a byte. Blocks of zero bytes take no
  room (offset 0, size 0), so they never overlap anything.
- Every offset is a multiple of ``alignment`` and every block occupies its size rounded
  up to ``alignment``, so the blocks above it stay aligned.
- ``total_bytes >= lower_bound``, the largest total of aligned sizes live at any single
  index, which any valid plan must hold at once.
- ``total_bytes`` is never more than greedy by size's (with the tie-breaks above): that
  order always runs, and only a plan with a smaller total, or the same total with fewer
  blocks reaching it, replaces the best.
- The plan depends only on the input (the budget counts estimated work, not time).

Sizes are exact Python ints throughout: when the aligned sizes sum past ``2**63 - 1`` the
arrays hold Python objects, slower but never overflowing.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from arena.base.extensions import load_extension
from arena.base.layout import DEFAULT_ALIGNMENT, MAX_BYTES, bool_like, check_alignment, round_up
from arena.errors import ConfigError, SpecError
from arena.planning import search
from arena.planning.search import improve

__all__ = [
    "LIMIT_STRATEGIES",
    "PLACE_PATH",
    "SPARSE_PAIRS",
    "STRATEGIES",
    "WORK_BUDGET",
    "OffsetPlan",
    "check_time_limit",
    "plan_offsets",
]

#: Names of the block orders tried, in order of preference on ties.
STRATEGIES = ("size", "peak", "area", "lifetime", "first")
#: Orders placed only under a time limit, before those the work budget left out. The
#: ``"sides"`` order (:func:`_sides`) takes idealloc's S_1 (28,526 blocks) from 1.0158
#: of LOAD to LOAD in one placement; on most other traces it does worse than the orders
#: above, so without a limit it is not placed and the plans stay as they were.
LIMIT_STRATEGIES = ("sides",)
#: Estimated work (about a microsecond a unit of the Python paths on a slow core) that
#: orders and search moves after the first two may use; greedy by size and the peak order
#: always run.
WORK_BUDGET = 250_000
#: Up to this many co-live pairs per block, placement walks the conflict graph; above, it
#: scans the placed blocks (compiled, or in Python and NumPy). All give the same plan.
SPARSE_PAIRS = 32

#: The compiled placement (arena/planning/_place.c), or None where it is not in use; and why.
compiled, WHY_PYTHON = load_extension("arena.planning._place")

#: ``"compiled"`` or ``"python"``: the placement :func:`plan_offsets` runs (the compiled one
#: only where the sizes fit in int64; both give the same plan).
PLACE_PATH = "compiled" if compiled is not None else "python"


@dataclass(frozen=True, slots=True)
class OffsetPlan:
    """Where each block lives in one shared buffer.

    Attributes
    ----------
    offsets : tuple of int
        One byte offset per block, in input order, each a multiple of ``alignment``
        (0 for zero-byte blocks).
    sizes : tuple of int
        Each block's ``nbytes`` rounded up to ``alignment``: the bytes it occupies.
    total_bytes : int
        Bytes the buffer needs: the highest ``offset + size`` (0 for no blocks).
    lower_bound : int
        The largest sum of ``sizes`` over the blocks live at any one index: no valid plan
        needs fewer bytes.
    alignment : int
        The alignment the offsets and sizes are multiples of.
    strategy : str
        The order the plan started from (one of :data:`STRATEGIES`, or of
        :data:`LIMIT_STRATEGIES` under a time limit), or ``"none"`` when no block needs
        bytes.
    moves : int
        How many local-search moves improved on that order's plan.
    optimal : bool
        Whether ``total_bytes`` is proven the least any valid plan needs: it equals
        ``lower_bound``, or a search under ``time_limit`` ruled out every smaller total.
    limit_reached : bool
        Whether the ``time_limit`` ended the search before it proved the plan optimal
        (always False without a limit).
    proven_bound : int
        The largest total proven necessary: ``lower_bound``, or more where a search ruled
        smaller totals out (equal to ``total_bytes`` when ``optimal``).
    """

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    total_bytes: int
    lower_bound: int
    alignment: int
    strategy: str
    moves: int = 0
    optimal: bool = False
    limit_reached: bool = False
    proven_bound: int = 0

    @property
    def ratio(self) -> float:
        """``total_bytes / lower_bound``: 1.0 is optimal (and is returned when both are 0)."""
        if self.lower_bound == 0:
            return 1.0
        return self.total_bytes / self.lower_bound

    @property
    def gap(self) -> float:
        """``total_bytes / lower_bound - 1``: the plan's excess over LOAD (0.0 at LOAD)."""
        return self.ratio - 1.0


def _index(value: Any, i: int, name: str, fix: str) -> int:
    """``value`` as a non-negative int up to ``2**63 - 1``, or a SpecError naming block ``i``."""
    if isinstance(value, (bool, np.bool_)):
        raise SpecError(f"block {i}: {name} must be an int, got {value!r} (a bool); {fix}")
    try:
        number = operator.index(value)
    except TypeError:
        raise SpecError(
            f"block {i}: {name} must be an int, got {value!r} ({type(value).__name__}); {fix}"
        ) from None
    if number < 0:
        raise SpecError(f"block {i}: {name} must be >= 0, got {number}; {fix}")
    if number > MAX_BYTES:
        raise SpecError(f"block {i}: {name} must be at most 2**63 - 1, got {number}; {fix}")
    return number


def _validate(blocks: Iterable[Any]) -> tuple[list[int], list[int], list[int]]:
    if isinstance(blocks, (str, bytes, Mapping)):
        raise SpecError(
            f"blocks must be a sequence of (nbytes, first, last) tuples, got "
            f"{type(blocks).__name__}; pass e.g. [(4096, 0, 2), (1024, 1, 3)]"
        )
    try:
        items = list(blocks)
    except TypeError:
        raise SpecError(
            f"blocks must be a sequence of (nbytes, first, last) tuples, got "
            f"{blocks!r} ({type(blocks).__name__}); pass e.g. [(4096, 0, 2), (1024, 1, 3)]"
        ) from None
    nbytes: list[int] = []
    firsts: list[int] = []
    lasts: list[int] = []
    for i, block in enumerate(items):
        try:  # a 0-d array or tensor has __len__ but no length
            length = None if isinstance(block, (str, bytes, Mapping, AbstractSet)) else len(block)
        except TypeError:
            length = None
        if length is None:
            raise SpecError(
                f"block {i}: must be a (nbytes, first, last) tuple, got {block!r} "
                f"({type(block).__name__}); pass e.g. (4096, 0, 2)"
            )
        if length != 3:
            raise SpecError(
                f"block {i}: must be a (nbytes, first, last) tuple, got {block!r} with "
                f"{length} items; pass e.g. (4096, 0, 2)"
            )
        size, first, last = block
        nbytes.append(_index(size, i, "nbytes", "pass the block's size in bytes"))
        f = _index(first, i, "first", "pass the index of the block's first use")
        last_ = _index(last, i, "last", "pass the index of the block's last use")
        if f > last_:
            raise SpecError(
                f"block {i}: first ({f}) must be <= last ({last_}); the lifetime is the "
                f"inclusive index range first..last, e.g. ({nbytes[-1]}, {last_}, {f})"
            )
        firsts.append(f)
        lasts.append(last_)
    return nbytes, firsts, lasts


def _peaks(size: np.ndarray, first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Per block, the largest live total over its lifetime; the largest overall (LOAD);
    and the first index where the live total is LOAD (the busiest step).

    The live total only rises at some block's first use, so its maxima over any index
    range that starts at a first use are found among the distinct first uses.
    """
    by_first = np.argsort(first, kind="stable")
    by_last = np.argsort(last, kind="stable")
    fs = first[by_first]
    ls = last[by_last]
    zero = np.zeros(1, dtype=size.dtype)
    started = np.concatenate((zero, np.cumsum(size[by_first])))
    ended = np.concatenate((zero, np.cumsum(size[by_last])))
    starts = np.unique(fs)
    # live(s) = sizes with first <= s, minus sizes with last < s.
    live = started[np.searchsorted(fs, starts, "right")] - ended[np.searchsorted(ls, starts)]
    # Sparse table of range maxima over the distinct first uses.
    table = [live]
    width = 1
    while 2 * width <= len(live):
        prev = table[-1]
        table.append(np.maximum(prev[:-width], prev[width:]))
        width *= 2
    lo = np.searchsorted(starts, first)
    hi = np.searchsorted(starts, last, "right") - 1
    level = np.zeros(len(lo), dtype=np.int64)
    span = hi - lo + 1
    for j in range(1, len(table)):
        level[span >= (1 << j)] = j
    peak = np.empty(len(lo), dtype=size.dtype)
    for j, row in enumerate(table):
        sel = level == j
        if sel.any():
            peak[sel] = np.maximum(row[lo[sel]], row[hi[sel] - (1 << j) + 1])
    return peak, int(live.max()), int(starts[int(np.argmax(live))])


def _graph(
    first: np.ndarray, last: np.ndarray, limit: int
) -> tuple[tuple[np.ndarray, np.ndarray] | None, int]:
    """The conflict graph's edge count and, up to ``limit`` edges, the graph: ``flat`` and
    ``bounds`` (int64), block ``i``'s co-live blocks ``flat[bounds[i]:bounds[i + 1]]``.

    In first-use order, the blocks after ``i`` that conflict with it are exactly the run
    of those whose first use is at most ``last[i]``, so the edges come as ranges and are
    counted before any is built.
    """
    n = len(first)
    by_first = np.argsort(first, kind="stable")
    lo = np.arange(1, n + 1)
    counts = np.maximum(np.searchsorted(first[by_first], last[by_first], "right") - lo, 0)
    edges = int(counts.sum())
    if edges > limit:
        return None, edges
    starts = np.cumsum(counts) - counts
    a = np.repeat(by_first, counts)
    b = by_first[np.arange(edges) - np.repeat(starts - lo, counts)]
    src = np.concatenate((a, b))
    by_src = np.argsort(src, kind="stable")
    bounds = np.searchsorted(src[by_src], np.arange(n + 1)).astype(np.int64)
    flat = np.concatenate((b, a))[by_src].astype(np.int64)
    return (flat, bounds), edges


def _neighbours(
    first: np.ndarray, last: np.ndarray, limit: int
) -> tuple[list[list[int]] | None, int]:
    """The conflict graph's edge count and its adjacency lists (None past ``limit`` edges)."""
    graph, edges = _graph(first, last, limit)
    if graph is None:
        return None, edges
    flat, bounds = graph[0].tolist(), graph[1].tolist()
    return [flat[bounds[i] : bounds[i + 1]] for i in range(len(first))], edges


def _place_sparse(
    order: Sequence[int], size: Sequence[int], neighbours: Sequence[Sequence[int]]
) -> tuple[list[int], int]:
    """Best fit in ``order`` using the conflict graph: fast when blocks have few conflicts.

    Returns the offsets (in block order) and the total. Gives the same plan as
    :func:`_place_dense`.
    """
    offsets = [-1] * len(size)
    ends = [0] * len(size)
    total = 0
    for i in order:
        s = size[i]
        best = -1
        best_hole = 0
        top = 0
        # Placed neighbours by offset; two at one offset give the same holes in any order.
        below = sorted([(offsets[j], ends[j]) for j in neighbours[i] if offsets[j] >= 0])
        for off, end in below:
            hole = off - top
            if hole >= s and (best < 0 or hole < best_hole):
                best, best_hole = top, hole
            top = max(top, end)
        off = top if best < 0 else best
        offsets[i] = off
        ends[i] = off + s
        total = max(total, off + s)
    return offsets, total


def _place_dense(
    order: Sequence[int],
    size: Sequence[int],
    first: Sequence[int],
    last: Sequence[int],
    dtype: Any,
) -> tuple[list[int], int]:
    """Best fit in ``order`` with vectorised scans: fast when blocks have many conflicts.

    ``size`` must be aligned and positive. Placed blocks are kept in the rows of
    ``placed`` (first, last, offset, end), sorted by offset, so the co-live ones come out
    of one mask already in offset order. Returns the offsets (in block order) and the total.
    """
    n = len(order)
    placed = np.empty((4, n), dtype=dtype)
    offsets = [0] * len(size)
    total = 0
    for k, i in enumerate(order):
        s, f, la = size[i], first[i], last[i]
        off = 0
        if k:
            live = placed[0, :k] <= la
            live &= placed[1, :k] >= f
            lows = placed[2, :k][live]
            if lows.size:
                top = np.maximum.accumulate(placed[3, :k][live])
                # Hole j lies between the highest end below co-live block j and its offset.
                lows[1:] -= top[:-1]
                fits = np.flatnonzero(lows >= s)
                if fits.size:
                    j = int(fits[np.argmin(lows[fits])])
                    off = 0 if j == 0 else int(top[j - 1])
                else:
                    off = int(top[-1])
            pos = int(np.searchsorted(placed[2, :k], off, "right"))
            if pos < k:
                placed[:, pos + 1 : k + 1] = placed[:, pos:k]
        else:
            pos = 0
        placed[:, pos] = (f, la, off, off + s)
        offsets[i] = off
        total = max(total, off + s)
    return offsets, total


def _order(
    name: str,
    size: list[int],
    first: list[int],
    last: list[int],
    peak: list[int],
    *,
    busiest: int = 0,
) -> list[int]:
    """The block indices in strategy ``name``'s order (input order breaks remaining ties);
    ``busiest`` is the step the ``"sides"`` order stacks its blocks at."""
    if name == "sides":
        return _sides(size, first, last, peak, busiest)
    keys: dict[str, Callable[[int], tuple[int, ...]]] = {
        "size": lambda i: (-size[i], first[i]),
        "peak": lambda i: (-peak[i], -size[i], first[i]),
        "area": lambda i: (-size[i] * (last[i] - first[i] + 1), -size[i], first[i]),
        "lifetime": lambda i: (first[i] - last[i], -size[i], first[i]),
        "first": lambda i: (first[i], -size[i]),
    }
    # sorted() is stable, so input order breaks the remaining ties.
    return sorted(range(len(size)), key=keys[name])


def _sides(
    size: list[int], first: list[int], last: list[int], peak: list[int], busiest: int
) -> list[int]:
    """The ``"sides"`` order: the blocks live at step ``busiest`` first, then the others in
    the peak order.

    The blocks live at ``busiest`` are all live together, so they are placed one on the
    other, from 0 up, in this order: first those that live on for fewer steps after
    ``busiest`` than they lived before it, by last use ascending, then the others by first
    use ascending. After the step the lowest die first, so the bytes they free form one
    run from 0 up; before it the highest start last, so the bytes not yet taken form one
    run below the top. Other blocks find those runs whole instead of scattered holes.
    """
    at, low, high, rest = busiest, [], [], []
    for i in range(len(size)):
        if not first[i] <= at <= last[i]:
            rest.append(i)
        elif last[i] - at < at - first[i]:
            low.append(i)
        else:
            high.append(i)
    low.sort(key=lambda i: (last[i], -size[i], first[i]))
    high.sort(key=lambda i: (first[i], -size[i], -last[i]))
    rest.sort(key=lambda i: (-peak[i], -size[i], first[i]))
    return low + high + rest


class _Attempt(NamedTuple):
    """One placement: its score (total, then how many blocks reach it), order and offsets."""

    score: tuple[int, int]
    order: list[int]
    offsets: list[int]


class _Placer:
    """Places non-empty blocks in given orders by the cheaper of the two paths."""

    def __init__(self, size: list[int], first: list[int], last: list[int], dtype: Any) -> None:
        self.size, self.first, self.last, self.dtype = size, first, last, dtype
        n = len(size)
        self.first_arr = np.array(first, dtype=np.int64)
        self.last_arr = np.array(last, dtype=np.int64)
        # The compiled placement where it is in use and the sizes fit in int64; it needs
        # no adjacency lists, only their count (the cost estimate, so the plan, is the same).
        # (Uses are ranked in int32 for the scan: at most 2n distinct.)
        self.compiled = compiled if dtype is np.int64 and n < 2**30 else None
        self.neighbours: list[list[int]] | None = None
        self.graph: tuple[np.ndarray, np.ndarray] | None = None
        if self.compiled is not None:
            self.size_arr = np.array(size, dtype=np.int64)
            self.graph, pairs = _graph(self.first_arr, self.last_arr, SPARSE_PAIRS * n)
        else:
            self.neighbours, pairs = _neighbours(self.first_arr, self.last_arr, SPARSE_PAIRS * n)
        #: Whether the placement walks the conflict graph (else it scans the placed blocks).
        self.sparse = pairs <= SPARSE_PAIRS * n
        #: Estimated work of one placement (see the module docstring).
        self.cost = n + pairs // 2 if self.sparse else 20 * n + pairs // 32
        if self.compiled is not None and not self.sparse:
            # Ranks of the uses keep their order, so which blocks are co-live, in int32.
            uses = np.concatenate((self.first_arr, self.last_arr))
            ranks = np.unique(uses, return_inverse=True)[1].reshape(-1).astype(np.int32)
            self.rank_first, self.rank_last = ranks[:n].copy(), ranks[n:].copy()

    def place(self, order: list[int]) -> _Attempt:
        if self.compiled is not None:
            out = np.zeros(len(self.size), dtype=np.int64)
            order_arr = np.array(order, dtype=np.int64)
            if self.graph is not None:
                flat, bounds = self.graph
                total = self.compiled.place_graph(order_arr, self.size_arr, bounds, flat, out)
            else:
                total = self.compiled.place(
                    order_arr, self.size_arr, self.rank_first, self.rank_last, out
                )
            offsets = out.tolist()
        elif self.neighbours is not None:
            offsets, total = _place_sparse(order, self.size, self.neighbours)
        else:
            offsets, total = _place_dense(order, self.size, self.first, self.last, self.dtype)
        reach = sum(1 for off, s in zip(offsets, self.size, strict=True) if off + s == total)
        return _Attempt((total, reach), order, offsets)

    def candidates(self, best: _Attempt) -> list[int]:
        """Blocks worth moving earlier: those reaching the total (in order), then the blocks
        live at the same time as them, highest end first."""
        size, offsets, total = self.size, best.offsets, best.score[0]
        tops = [i for i in best.order if offsets[i] + size[i] == total]
        seen = set(tops)
        near: list[int] = []
        for t in tops:
            live = (self.first_arr <= self.last[t]) & (self.last_arr >= self.first[t])
            for j in np.flatnonzero(live).tolist():
                if j not in seen:
                    seen.add(j)
                    near.append(j)
        near.sort(key=lambda j: -(offsets[j] + size[j]))
        return tops + near


class _Moves:
    """Orders one move away from ``order``: each candidate moved to the front, then each
    candidate moved to every other earlier position.

    An iterator object, not a generator: the searches stop at the first move that helps
    and drop the rest, and a generator dropped half-way is closed when collected, where
    an interrupt that lands is printed as "Exception ignored" and lost (planning went on).
    Dropping this one runs no code.
    """

    __slots__ = ("at", "block", "candidates", "end", "fronts", "order", "pos", "rest")

    def __init__(self, order: list[int], candidates: list[int]) -> None:
        self.order, self.candidates = order, candidates
        self.fronts = True  # still moving candidates to the front
        self.at = 0  # the candidate moved now
        self.block, self.rest, self.pos, self.end = -1, order, 1, 0

    def __iter__(self) -> _Moves:
        return self

    def __next__(self) -> list[int]:
        order, candidates = self.order, self.candidates
        if self.fronts:
            while self.at < len(candidates):
                block = candidates[self.at]
                self.at += 1
                if block != order[0]:
                    return [block, *[i for i in order if i != block]]
            self.fronts, self.at, self.pos, self.end = False, 0, 1, 0
        while True:
            if self.pos < self.end:
                pos, rest = self.pos, self.rest
                self.pos += 1
                return [*rest[:pos], self.block, *rest[pos:]]
            if self.at >= len(candidates):
                raise StopIteration
            block = candidates[self.at]
            self.at += 1
            self.block, self.pos, self.end = block, 1, order.index(block)
            self.rest = [i for i in order if i != block]


def plan_offsets(
    blocks: Iterable[tuple[int, int, int]],
    *,
    alignment: int = DEFAULT_ALIGNMENT,
    time_limit: float | None = None,
) -> OffsetPlan:
    """Give each block an aligned byte offset so that co-live blocks never overlap.

    Parameters
    ----------
    blocks : sequence of (nbytes, first, last)
        ``nbytes`` the block's size in bytes; ``first`` and ``last`` the inclusive indices
        of its first and last use, ``0 <= first <= last``. All three are ints (NumPy ints
        too, not bools or floats) up to ``2**63 - 1``. Blocks of zero bytes get offset 0
        and take no room.
    alignment : int, optional
        Power of two from 16 to 2**30 (default 256): every offset is a multiple of it and
        every size is rounded up to it.
    time_limit : float, optional
        Seconds for an exact, anytime search after the heuristics (MiniMalloc's
        canonical-solution branch and bound, :mod:`arena.planning.search`), seeded with
        their plan: the best plan found within the limit is returned, never larger than the
        plan without a limit, with ``optimal`` set when the search proved it and
        ``limit_reached`` when the limit ended it first. ``None`` (default) runs the
        heuristics alone, deterministic in the input. Under a limit the plan depends on how
        far the search got in that time, so on the machine's speed and load, not on hash
        seeds. First the limit pays for the orders of :data:`LIMIT_STRATEGIES` and those
        the work budget left out (large instances), while it allows one more placement.
        Instances past :data:`~arena.planning.search.MAX_SEARCH_BLOCKS` non-empty blocks
        are not searched: the limit pays for the local search instead, past the work
        budget, from the plan of every order placed in turn (``limit_reached`` when the
        clock ended it).

    Returns
    -------
    OffsetPlan
        Offsets in input order, the aligned sizes, the buffer size ``total_bytes``, the
        ``lower_bound`` no plan can beat, the ``strategy`` that won, and whether the plan
        is proven ``optimal``.

    Raises
    ------
    SpecError
        A block is not a 3-item sequence, or one of its values is not an int, is negative,
        past ``2**63 - 1``, or has ``first > last``; the message names the block.
    ConfigError
        ``alignment`` is not a power of two from 16 to 2**30, or ``time_limit`` is not a
        non-negative finite number of seconds.

    Examples
    --------
    >>> plan = plan_offsets([(1000, 0, 1), (1000, 1, 2), (1000, 2, 3)])
    >>> plan.offsets, plan.total_bytes, plan.lower_bound
    ((0, 1024, 0), 2048, 2048)
    """
    alignment = check_alignment(alignment)
    limit = check_time_limit(time_limit)
    nbytes, first_all, last_all = _validate(blocks)
    sizes = [round_up(b, alignment) for b in nbytes]
    keep = [i for i, s in enumerate(sizes) if s]
    if not keep:
        return OffsetPlan((0,) * len(sizes), tuple(sizes), 0, 0, alignment, "none", 0, True)
    # From here on blocks are numbered among the non-empty ones.
    size = [sizes[i] for i in keep]
    first = [first_all[i] for i in keep]
    last = [last_all[i] for i in keep]
    # Object arrays hold exact Python ints where int64 sums could overflow.
    dtype: Any = np.int64 if sum(size) <= MAX_BYTES else object
    placer = _Placer(size, first, last, dtype)
    peak_arr, lower, busiest = _peaks(
        np.array(size, dtype=dtype), placer.first_arr, placer.last_arr
    )
    peak = [int(p) for p in peak_arr.tolist()]

    def order_of(strategy: str) -> list[int]:
        return _order(strategy, size, first, last, peak, busiest=busiest)

    started = time.perf_counter()
    best = placer.place(order_of("size"))
    per_placement = time.perf_counter() - started  # what one more placement costs, about
    placed = {"size": best}
    best, name, spent, left_out = _place_strategies(placer, best, order_of, lower, placed)
    if limit is not None and best.score[0] > lower:
        # What a time limit pays for first: the orders placed under a limit only, then
        # those the work budget left out.
        started = time.perf_counter()
        best, name = _place_left_out(
            placer,
            best,
            name,
            (*LIMIT_STRATEGIES, *left_out),
            order_of,
            lower=lower,
            limit=limit,
            per_placement=per_placement,
            placed=placed,
        )
        limit = max(0.0, limit - (time.perf_counter() - started))
    best, moves, at_local_optimum = _local_search(placer, best, lower, spent)
    climbed_to_the_limit = False
    if limit is not None and best.score[0] > lower and len(size) > search.MAX_SEARCH_BLOCKS:
        # Too large to search: the limit pays for the local search past the work budget,
        # from every order placed.
        climbers = [_Climber(name, best, moves, at_local_optimum)]
        climbers += [
            _Climber(other, attempt, 0, False) for other, attempt in placed.items() if other != name
        ]
        best, name, moves, climbed_to_the_limit = _climb(
            placer,
            climbers,
            lower=lower,
            deadline=time.perf_counter() + limit,
            per_placement=per_placement,
        )
    found, total = best.offsets, best.score[0]
    optimal, limited, proven = total == lower, climbed_to_the_limit, lower
    if limit is not None and not optimal and dtype is np.int64:
        units = [s // alignment for s in size]
        out = improve(
            units,
            first,
            last,
            [o // alignment for o in found],
            lower=lower // alignment,
            time_limit=limit,
        )
        if out.total * alignment < total:
            found, total = [o * alignment for o in out.offsets], out.total * alignment
        optimal, limited = out.optimal, limited or out.limit_reached
        proven = max(lower, out.proven_lower * alignment)
    offsets = [0] * len(sizes)
    for i, off in zip(keep, found, strict=True):
        offsets[i] = off
    return OffsetPlan(
        tuple(offsets),
        tuple(sizes),
        total,
        lower,
        alignment,
        name,
        moves,
        optimal,
        limited,
        total if optimal else proven,
    )


def _local_search(
    placer: _Placer, best: _Attempt, lower: int, spent: int
) -> tuple[_Attempt, int, bool]:
    """The local search from ``best`` within what the work budget has left after
    ``spent``: the plan, the moves that improved it, and whether it ended at a local
    optimum (no move helps) rather than at the budget or at ``lower``."""
    moves = 0
    while best.score[0] > lower and spent + placer.cost <= WORK_BUDGET:
        for order in _Moves(best.order, placer.candidates(best)):
            if spent + placer.cost > WORK_BUDGET:
                break
            spent += placer.cost
            tried = placer.place(order)
            if tried.score < best.score:
                best = tried
                moves += 1
                break
        else:
            return best, moves, True  # no move helps: a local optimum
    return best, moves, False


def _place_strategies(
    placer: _Placer,
    best: Any,
    order_of: Callable[[str], list[int]],
    lower: int,
    placed: dict[str, _Attempt],
) -> tuple[Any, str, int, tuple[str, ...]]:
    """``best`` (greedy by size, placed) or a better plan of the other orders of
    :data:`STRATEGIES` placed within the work budget: the plan, its order's name, the work
    spent, and the orders the budget left out. Each order's plan goes into ``placed``."""
    name, spent = "size", 0
    for index, other in enumerate(STRATEGIES[1:], start=1):
        # The peak order is placed at every size, past the budget too: one more placement
        # that reaches LOAD on large traces greedy by size leaves above it.
        always = other == "peak"
        if best.score[0] == lower:
            break
        if not always and spent + placer.cost > WORK_BUDGET:
            return best, name, spent, STRATEGIES[index:]
        spent += placer.cost
        tried = placer.place(order_of(other))
        placed[other] = tried
        if tried.score < best.score:
            best, name = tried, other
    return best, name, spent, ()


def _place_left_out(
    placer: _Placer,
    best: Any,
    name: str,
    left_out: Sequence[str],
    order_of: Callable[[str], list[int]],
    *,
    lower: int,
    limit: float,
    per_placement: float,
    placed: dict[str, _Attempt],
) -> tuple[Any, str]:
    """The better of ``best`` and the orders in ``left_out`` (those the work budget left
    out, in :data:`STRATEGIES`' order) placed while ``limit`` seconds allow one more
    placement (``per_placement`` seconds, about); each order's plan goes into ``placed``."""
    started = time.perf_counter()
    for other in left_out:
        if best.score[0] == lower or time.perf_counter() - started + per_placement > limit:
            break
        tried = placer.place(order_of(other))
        placed[other] = tried
        if tried.score < best.score:
            best, name = tried, other
    return best, name


@dataclass(slots=True)
class _Climber:
    """One local search of :func:`_climb`: the order it started from, its plan, the moves
    that improved it, the moves left to try, and whether none is left (a local optimum)."""

    name: str
    plan: _Attempt
    moves: int
    done: bool
    tries: Iterator[list[int]] | None = None


def _climb(
    placer: _Placer,
    climbers: list[_Climber],
    *,
    lower: int,
    deadline: float,
    per_placement: float,
) -> tuple[_Attempt, str, int, bool]:
    """The local search past the work budget until ``deadline`` (``time.perf_counter()``),
    from several plans in turn: the best plan found, its order's name and moves, and
    whether the clock (not a plan at ``lower`` or every climber at a local optimum) ended
    it.

    ``climbers[0]`` holds the best plan so far. The climbers take rounds, best plan first,
    each round allowing each one twice the tries of the round before (1, 2, 4, ...), so
    that no one start holds the time: on idealloc's S_1 the local search from greedy by
    size stalls at 1.0158 of LOAD while the one from the first-use order goes below 1.004
    within ten tries. A try places one order (one move, as the budgeted local search
    makes them); a climber keeps the move when its plan's score drops, and starts its next
    tries from it. A try starts only while the deadline allows one more placement (the
    longest one so far, ``per_placement`` seconds at first).
    """
    winner = climbers[0]
    climbers = sorted(climbers, key=lambda c: c.plan.score)  # stable: climbers[0] on ties
    allowed = 1
    while True:
        active = False
        for climber in climbers:
            if climber.done:
                continue
            for _ in range(allowed):
                if time.perf_counter() + per_placement > deadline:
                    return winner.plan, winner.name, winner.moves, True
                if climber.tries is None:
                    climber.tries = _Moves(climber.plan.order, placer.candidates(climber.plan))
                order = next(climber.tries, None)
                if order is None:
                    climber.done = True
                    break
                started = time.perf_counter()
                tried = placer.place(order)
                per_placement = max(per_placement, time.perf_counter() - started)
                if tried.score < climber.plan.score:
                    climber.plan, climber.tries = tried, None
                    climber.moves += 1
                    if tried.score < winner.plan.score:
                        winner = climber
                    if tried.score[0] == lower:
                        return winner.plan, winner.name, winner.moves, False
            active = active or not climber.done
        if not active:
            return winner.plan, winner.name, winner.moves, False
        allowed *= 2


def check_time_limit(time_limit: object) -> float | None:
    """``time_limit`` as float seconds, or a ConfigError naming the value and the fix."""
    if time_limit is None:
        return None
    if bool_like(time_limit) or not isinstance(time_limit, (int, float)):
        raise ConfigError(
            f"time_limit must be a number of seconds or None, got {time_limit!r} "
            f"({type(time_limit).__name__}); pass e.g. time_limit=10"
        )
    value = float(time_limit)
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"time_limit must be a finite number of seconds >= 0, got {time_limit!r}; "
            f"pass e.g. time_limit=10, or None for the heuristics alone"
        )
    return value
