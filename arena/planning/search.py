"""Exact, anytime offset search: MiniMalloc's canonical-solution branch and bound.

:func:`~arena.planning.plan_offsets` calls :func:`improve` when given a ``time_limit``. The
search follows Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated
Machine Learning" (ASPLOS 2023). Where the optional extension ``arena.planning._search``
was built, each decision runs MiniMalloc's own solver ported to C (``_search.c``, from
google/minimalloc, Apache-2.0; it adds MiniMalloc's dynamic decomposition into independent
sub-problems); elsewhere, or with ``ARENA_PURE_PYTHON=1``, the Python search below, written
anew from the paper's ideas, runs (:data:`SEARCH_PATH` says which). Both share these rules:

- *Canonical solutions.* Any valid plan can be pushed down until every block rests on a
  block it is live with (or on 0) and then listed by offset. So the search places blocks in
  non-decreasing offset order, each at its *minimum offset* (the highest top among the
  placed blocks live with it); ties by offset are taken in a fixed preorder only.
- *Dominance.* A block whose minimum offset is at or above the lowest top any unplaced
  block could reach would leave a gap that block fills: it is not tried at this node.
- *Section inference.* Time is cut into *sections* where the live set is constant. In each,
  the unplaced blocks live there must still fit above the section's floor (the highest top
  placed there, and at least the current offset): floor + their sizes must not pass the
  capacity.
- *Hatless pruning.* When a block with no unplaced block live with it fails, no other
  choice at that node can succeed.
- *Round robin.* Four static preorders (by peak total, area, width in MiniMalloc's
  ``WAT``, ``TAW``, ``TWA`` combinations, width and area from the lifetimes' real lengths,
  as MiniMalloc's; and ``ETW``, by last use first, not MiniMalloc's) run in turn under a
  node limit that doubles, so no one unlucky order holds the search.

Each search is a decision: does a plan within ``capacity`` exist? :func:`improve` probes the
proven lower bound, then a ladder of capacities below the best plan so far (``hi - 4**k``,
the lowest first, up to one unit below it), each round under a node limit, doubled after
a round that moved neither end (a round that did runs again under the same limit, without
the decisions that hit that limit already: asked again, they would hit it again); a plan
found lowers the upper end, a search that ends without one raises the lower end, and the
two meeting proves the best plan optimal.
Why this rather than a constraint solver: it needs nothing beyond NumPy (OR-Tools CP-SAT
is a large optional binary), and the paper reports it solving instances a CP and an ILP
formulation cannot; it was not compared against CP-SAT here.

Sizes are counted in units of the alignment, so capacities step by one unit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple, Protocol

import numpy as np

from arena.base.extensions import load_extension

__all__ = [
    "MAX_SEARCH_BLOCKS",
    "SEARCH_PATH",
    "WHY_PYTHON",
    "Outcome",
    "compiled",
    "decide",
    "improve",
]

#: Past this many non-empty blocks the search is not run (its per-node cost is linear in
#: the blocks left): the plan without a limit is returned, ``optimal`` only if at LOAD.
MAX_SEARCH_BLOCKS = 5_000

_FOUND, _NONE, _ABORT, _TIME = 0, 1, 2, 3
_INT64_MAX = 2**63 - 1
#: The static preorders: MiniMalloc's three of width (W), area (A) and peak total (T), in
#: turn, descending; and ``ETW``, the last use (E, latest first), then T and W. On the
#: training step of Inception v3 at batch 1 (1,128 blocks, 162 parameter gradients born
#: one by one and live to the end) ``ETW`` finds a plan at LOAD in 1,128 nodes, one per
#: block, where MiniMalloc's three find none in 20,000 nodes each, and 180 s of the
#: search with them ended 1.00018 above LOAD (docs/planning.md).
_HEURISTICS = ("WAT", "TAW", "TWA", "ETW")


#: The compiled search (arena/planning/_search.c), or None where it is not in use; and why.
compiled, WHY_PYTHON = load_extension("arena.planning._search")

#: ``"compiled"`` or ``"python"``: the search :func:`improve` runs.
SEARCH_PATH = "compiled" if compiled is not None else "python"


class Outcome(NamedTuple):
    """What :func:`improve` found: offsets (units), their top, how it ended, and the search
    nodes it visited (all decisions together)."""

    offsets: list[int]
    total: int
    optimal: bool
    limit_reached: bool
    proven_lower: int
    nodes: int


class _Problem:
    """Sections, overlaps and preorders of one instance (sizes in alignment units)."""

    def __init__(self, size: Sequence[int], first: Sequence[int], last: Sequence[int]) -> None:
        n = len(size)
        self.n = n
        self.size = list(size)
        points = sorted({*first, *(x + 1 for x in last)})
        where = {p: k for k, p in enumerate(points)}
        self.lo = [where[f] for f in first]
        self.hi = [where[x + 1] for x in last]
        sections = len(points) - 1
        total = np.zeros(sections + 1, dtype=np.int64)
        for s, lo, hi in zip(self.size, self.lo, self.hi, strict=True):
            total[lo] += s
            total[hi] -= s
        self.total0 = np.cumsum(total)[:sections]
        order = sorted(range(n), key=lambda i: (self.lo[i], i))
        neigh: list[list[int]] = [[] for _ in range(n)]
        for a, i in enumerate(order):
            for j in order[a + 1 :]:
                if self.lo[j] >= self.hi[i]:
                    break
                neigh[i].append(j)
                neigh[j].append(i)
        self.neighbours = neigh
        # members[s, j]: block j is live in section s (for the unplaced blocks' floors).
        sec = np.arange(sections)[:, None]
        self.members = (sec >= np.array(self.lo)[None, :]) & (sec < np.array(self.hi)[None, :])
        peak = [int(np.max(self.total0[lo:hi])) for lo, hi in zip(self.lo, self.hi, strict=True)]
        width = [last[i] - first[i] + 1 for i in range(n)]
        area = [self.size[i] * width[i] for i in range(n)]
        keys = {"T": peak, "A": area, "W": width, "E": list(last)}
        self.preorders: list[list[int]] = []
        for name in _HEURISTICS:
            ranked = sorted(range(n), key=lambda i: (*(-keys[c][i] for c in name), i))
            rank = [0] * n
            for r, i in enumerate(ranked):
                rank[i] = r
            self.preorders.append(rank)


_Undo = tuple[int, list[tuple[int, int]], np.ndarray, bool]


class _Decision:
    """One depth-first search for a plan within ``capacity`` under one preorder."""

    def __init__(self, prob: _Problem, capacity: int, pre: list[int]) -> None:
        n = prob.n
        self.prob, self.capacity, self.pre = prob, capacity, pre
        self.off = [-1] * n
        self.minoff = [0] * n
        self.floor = np.zeros(len(prob.total0), dtype=np.int64)
        self.total = prob.total0.copy()
        self.free = np.ones(n, dtype=bool)
        self.unplaced = list(range(n))

    def expand(self, last_off: int, last_pre: int) -> list[int]:
        """The blocks worth placing next: canonical order kept, dominated ones left out."""
        minoff, size, pre = self.minoff, self.prob.size, self.pre
        min_h = min(minoff[j] + size[j] for j in self.unplaced)
        cands = [
            j
            for j in self.unplaced
            if minoff[j] < min_h
            and (minoff[j] > last_off or (minoff[j] == last_off and pre[j] > last_pre))
        ]
        cands.sort(key=lambda j: (minoff[j], pre[j]))
        return cands

    def place(self, j: int) -> tuple[_Undo, bool]:
        """Put ``j`` at its minimum offset; the undo record and whether the node is viable."""
        prob, minoff, off = self.prob, self.minoff, self.off
        lo, hi = prob.lo[j], prob.hi[j]
        m = minoff[j]
        top = m + prob.size[j]
        off[j] = m
        self.unplaced.remove(j)
        self.free[j] = False
        changes: list[tuple[int, int]] = []
        hatless = True
        for k in prob.neighbours[j]:
            if off[k] < 0:
                hatless = False
                if minoff[k] < top:
                    changes.append((k, minoff[k]))
                    minoff[k] = top
        old = self.floor[lo:hi].copy()
        self.floor[lo:hi] = top
        self.total[lo:hi] -= prob.size[j]
        rec = (j, changes, old, hatless)
        cap = self.capacity
        if top > cap or bool((np.maximum(self.floor, m) + self.total > cap).any()):
            return rec, False
        if changes and self.unplaced:
            # Unallocated floor: nothing unplaced in a section goes below the lowest
            # minimum offset among the unplaced blocks live there.
            big = np.iinfo(np.int64).max // 4
            mins = np.array(minoff, dtype=np.int64)
            low = np.where(prob.members & self.free, mins, big).min(axis=1)
            if bool(((low < big) & (low + self.total > cap)).any()):
                return rec, False
        return rec, True

    def undo(self, rec: _Undo) -> None:
        j, changes, old, _ = rec
        prob = self.prob
        for k, m in reversed(changes):
            self.minoff[k] = m
        self.floor[prob.lo[j] : prob.hi[j]] = old
        self.total[prob.lo[j] : prob.hi[j]] += prob.size[j]
        self.off[j] = -1
        self.free[j] = True
        self.unplaced.append(j)

    def run(self, node_limit: int, deadline: float) -> tuple[int, list[int], int]:
        """The status, the offsets when found, and the nodes visited."""
        if int(np.max(self.prob.total0)) > self.capacity:
            return _NONE, [], 0
        # A frame: candidates, the next one's index, and the undo record of the one placed.
        stack: list[tuple[list[int], list[int], list[_Undo | None]]] = [
            (self.expand(-1, -1), [0], [None])
        ]
        nodes = 0
        while stack:
            cands, nxt, applied = stack[-1]
            rec = applied[0]
            if rec is not None:
                applied[0] = None
                self.undo(rec)
                if rec[3]:  # nothing rests on it: every other choice here fails as well
                    stack.pop()
                    continue
            if nxt[0] >= len(cands):
                stack.pop()
                continue
            j = cands[nxt[0]]
            nxt[0] += 1
            nodes += 1
            if nodes > node_limit:
                return _ABORT, [], node_limit
            if not nodes & 63 and time.perf_counter() > deadline:
                return _TIME, [], nodes
            rec, viable = self.place(j)
            applied[0] = rec
            if not viable:
                continue
            if not self.unplaced:
                return _FOUND, list(self.off), nodes
            stack.append((self.expand(self.off[j], self.pre[j]), [0], [None]))
        return _NONE, [], nodes


class _Decider(Protocol):
    def decide(
        self, capacity: int, which: int, node_limit: int, deadline: float
    ) -> tuple[int, list[int], int]:
        """Under preorder ``which``: the status, the offsets when found, the nodes visited."""


class _PythonDecider:
    """Decisions by :class:`_Decision`, in Python."""

    def __init__(self, size: Sequence[int], first: Sequence[int], last: Sequence[int]) -> None:
        self.prob = _Problem(size, first, last)

    def decide(
        self, capacity: int, which: int, node_limit: int, deadline: float
    ) -> tuple[int, list[int], int]:
        pre = self.prob.preorders[which]
        return _Decision(self.prob, capacity, pre).run(node_limit, deadline)


class _CompiledDecider:
    """Decisions by the compiled search, MiniMalloc's solver with its dynamic decomposition."""

    def __init__(
        self,
        module: ModuleType,
        size: Sequence[int],
        first: Sequence[int],
        last: Sequence[int],
    ) -> None:
        # Lifetimes half-open, on the ranks of the points where one starts or ends (so
        # last + 1 never leaves int64); the preorders' widths are the real lengths, as
        # MiniMalloc's (ranked ones reorder W and A, and left 5 of its 11 challenging
        # instances unsolved in 10 s where real ones decide all 11 within 1.7 s).
        points = sorted({*first, *(x + 1 for x in last)})
        rank = {p: k for k, p in enumerate(points)}
        widths = [min(x - f + 1, _INT64_MAX) for f, x in zip(first, last, strict=True)]
        self.module = module
        self.sweep = module.sweep(
            list(size), [rank[f] for f in first], [rank[x + 1] for x in last], widths
        )

    def decide(
        self, capacity: int, which: int, node_limit: int, deadline: float
    ) -> tuple[int, list[int], int]:
        seconds = deadline - time.perf_counter()
        if seconds <= 0:
            return _TIME, [], 0
        status, offsets, nodes = self.module.decide(
            self.sweep, capacity, _HEURISTICS[which], node_limit, seconds
        )
        return int(status), [] if offsets is None else list(offsets), int(nodes)


def _targets(lo: int, hi: int) -> list[int]:
    """The capacities one round probes, in order: the proven bound (a plan there is
    optimal), then a ladder below the best plan, ``hi - 4**k`` from the lowest up to
    ``hi - 1``.

    Whether a capacity is quick to decide varies from one unit to the next (on
    MiniMalloc's challenging D, round robin finds plans within 1018, 1022 and 1024 units in
    under 12,000 nodes and within 1020 none in 93,000), so a ladder of probes under one node
    limit finds a plan where probing one unit below the best stalls on a hard capacity;
    the lowest first, as a plan found there skips the rest.
    """
    ladder = []
    step = 1
    while hi - step > lo:
        ladder.append(hi - step)
        step *= 4
    return [lo, *reversed(ladder)]


def decide(
    size: Sequence[int],
    first: Sequence[int],
    last: Sequence[int],
    capacity: int,
    *,
    heuristic: str = "WAT",
    node_limit: int,
    time_limit: float,
) -> tuple[int, list[int], int]:
    """One decision of the search in use: a plan within ``capacity`` under one preorder.

    ``size`` in units (all positive), lifetimes ``first..last`` inclusive, ``heuristic``
    one of the preorders (``"WAT"``, ``"TAW"``, ``"TWA"``, ``"ETW"``). Returns the status
    (0 found, 1 none exists, 2 node limit, 3 time limit), the offsets when found, and
    the nodes visited. :func:`improve` runs these; this is for tests and benchmarks.
    """
    if heuristic not in _HEURISTICS:
        raise ValueError(f"heuristic must be one of {_HEURISTICS}, got {heuristic!r}")
    decider: _Decider = (
        _PythonDecider(size, first, last)
        if compiled is None
        else _CompiledDecider(compiled, size, first, last)
    )
    deadline = time.perf_counter() + max(time_limit, 0.0)
    return decider.decide(capacity, _HEURISTICS.index(heuristic), node_limit, deadline)


def improve(
    size: Sequence[int],
    first: Sequence[int],
    last: Sequence[int],
    seed: Sequence[int],
    *,
    lower: int,
    time_limit: float,
) -> Outcome:
    """The best plan found within ``time_limit`` seconds, starting from ``seed``.

    ``size`` in alignment units (all positive), ``seed`` a valid plan's offsets in units,
    ``lower`` the LOAD in units. Returns the offsets, their top, whether the top is proven
    optimal, whether the time limit (not a proof) ended the search, and the proven lower
    bound. Runs the compiled search where :data:`compiled` is set, else the Python one.
    """
    deadline = time.perf_counter() + max(time_limit, 0.0)
    best = list(seed)
    hi = max(o + s for o, s in zip(best, size, strict=True))
    lo = lower
    if hi <= lo:
        return Outcome(best, hi, True, False, lo, 0)
    if len(size) > MAX_SEARCH_BLOCKS:
        return Outcome(best, hi, False, False, lo, 0)
    decider: _Decider = (
        _PythonDecider(size, first, last)
        if compiled is None
        else _CompiledDecider(compiled, size, first, last)
    )
    node_limit = max(len(size), 64)
    nodes = 0
    timed_out = False
    progress = False
    # Decisions that hit their node limit: one depends only on its capacity, preorder and
    # node limit, so asked again it would hit it again. A round that moved a bound runs
    # again under the same limit, and probes the bound again: skipping what it would
    # only repeat leaves the outcomes as they were and the time to the new probes.
    aborted: set[tuple[int, int, int]] = set()
    while lo < hi and not timed_out:
        if not progress:  # a round that moved a bound runs again under the same limit
            node_limit *= 2
        progress = False
        for target in _targets(lo, hi):
            if target < lo or target >= hi:  # a plan found this round lowered hi
                continue
            for which in range(len(_HEURISTICS)):
                if (target, which, node_limit) in aborted:
                    continue
                status, offsets, used = decider.decide(target, which, node_limit, deadline)
                nodes += used
                if status == _ABORT:
                    aborted.add((target, which, node_limit))
                if status == _FOUND:
                    best = offsets
                    hi = max(o + s for o, s in zip(best, size, strict=True))
                    progress = True
                    break
                if status == _NONE:  # searched exhaustively: nothing within target
                    lo = target + 1
                    progress = True
                    break
                if status == _TIME:
                    timed_out = True
                    break
            if timed_out or lo >= hi:
                break
    return Outcome(best, hi, lo >= hi, timed_out and lo < hi, lo, nodes)
