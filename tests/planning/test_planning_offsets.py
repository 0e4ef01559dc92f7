"""The offset planner: valid plans, close to the lower bound, never worse than greedy by size.

The references here are written independently of ``arena.planning.offsets``: a plain
O(n**2) greedy by size as Pisarchyk & Lee (2020) state it, a brute-force optimum over
every placement order, and a per-index sum for the lower bound.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arena.errors import ConfigError, SpecError
from arena.planning import STRATEGIES, OffsetPlan, plan_offsets
from arena.planning import offsets as planner

Block = tuple[int, int, int]


def _aligned(nbytes: int, alignment: int) -> int:
    return -(-nbytes // alignment) * alignment


def _co_live(a: Block, b: Block) -> bool:
    return a[1] <= b[2] and b[1] <= a[2]


def _load(blocks: Sequence[Block], alignment: int = 256) -> int:
    """The lower bound, naively: the largest per-index sum of aligned sizes."""
    if not blocks:
        return 0
    return max(
        sum(_aligned(b, alignment) for b, f, la in blocks if f <= t <= la)
        for t in range(max(la for _, _, la in blocks) + 1)
    )


def _greedy_by_size(blocks: Sequence[Block], alignment: int = 256) -> tuple[list[int], int]:
    """Pisarchyk & Lee's greedy by size for offsets, written plainly.

    Largest block first (ties: earlier first use, then input order). Each block walks the
    placed blocks that share an index with it, by offset; the smallest gap between them
    that fits wins, else the block goes above the highest of them.
    """
    sizes = [_aligned(b[0], alignment) for b in blocks]
    return _greedy(blocks, lambda i: (-sizes[i], blocks[i][1]), alignment)


def _greedy(
    blocks: Sequence[Block], key: Callable[[int], tuple[int, ...]], alignment: int = 256
) -> tuple[list[int], int]:
    """The placement rule of :func:`_greedy_by_size` in the order ``key`` sorts the blocks
    (input order breaks the remaining ties)."""
    sizes = [_aligned(b[0], alignment) for b in blocks]
    order = sorted(range(len(blocks)), key=lambda i: (*key(i), i))
    offsets = [0] * len(blocks)
    placed: list[int] = []
    for i in order:
        if sizes[i] == 0:
            continue
        best, best_gap, prev = None, None, 0
        for j in sorted(placed, key=lambda j: offsets[j]):
            if not _co_live(blocks[i], blocks[j]):
                continue
            gap = offsets[j] - prev
            if gap >= sizes[i] and (best_gap is None or gap < best_gap):
                best, best_gap = prev, gap
            prev = max(prev, offsets[j] + sizes[j])
        offsets[i] = prev if best is None else best
        placed.append(i)
    return offsets, max((offsets[i] + sizes[i] for i in range(len(blocks))), default=0)


def _optimum(blocks: Sequence[Block], alignment: int = 256) -> int:
    """The smallest total of any valid plan, by brute force.

    First fit (each block at the lowest offset free of the co-live blocks placed before
    it) over every order. Some order reaches the optimum: take an optimal plan and place
    its blocks by ascending offset; by induction each lands at or below its optimal offset,
    because every co-live block placed before it ends at or below that offset.
    """
    sizes = [_aligned(b[0], alignment) for b in blocks]
    live = [i for i in range(len(blocks)) if sizes[i]]
    best = sum(sizes)
    for order in itertools.permutations(live):
        offsets: dict[int, int] = {}
        for i in order:
            near = [j for j in offsets if _co_live(blocks[i], blocks[j])]
            for off in sorted({0, *(offsets[j] + sizes[j] for j in near)}):
                end = off + sizes[i]
                if all(end <= offsets[j] or offsets[j] + sizes[j] <= off for j in near):
                    offsets[i] = off
                    break
        best = min(best, max((offsets[i] + sizes[i] for i in order), default=0))
    return best


def _check(blocks: Sequence[Block], plan: OffsetPlan, alignment: int = 256) -> None:
    """Every property a plan must have, checked pair by pair."""
    n = len(blocks)
    assert len(plan.offsets) == len(plan.sizes) == n
    assert plan.alignment == alignment
    for i, (nbytes, _, _) in enumerate(blocks):
        assert plan.sizes[i] == _aligned(nbytes, alignment)
        assert plan.offsets[i] % alignment == 0
        if nbytes == 0:
            assert plan.offsets[i] == 0
    ends = [o + s for o, s in zip(plan.offsets, plan.sizes, strict=True)]
    assert plan.total_bytes == max(ends, default=0)
    for i, j in itertools.combinations(range(n), 2):
        if plan.sizes[i] and plan.sizes[j] and _co_live(blocks[i], blocks[j]):
            assert ends[i] <= plan.offsets[j] or ends[j] <= plan.offsets[i], (i, j)
    assert plan.total_bytes >= plan.lower_bound


def _check_by_index(blocks: Sequence[Block], plan: OffsetPlan) -> None:
    """The no-overlap check for many blocks: at every first use, the live blocks sorted by
    offset must not overlap (two co-live blocks are both live at the later first use)."""
    sizes, offsets = plan.sizes, plan.offsets
    assert all(o % plan.alignment == 0 for o in offsets)
    assert plan.total_bytes == max((o + s for o, s in zip(offsets, sizes, strict=True)), default=0)
    starting: dict[int, list[int]] = {}
    for i, (_, f, _) in enumerate(blocks):
        if sizes[i]:
            starting.setdefault(f, []).append(i)
    live: set[int] = set()
    for t in sorted(starting):
        live = {i for i in live if blocks[i][2] >= t} | set(starting[t])
        spans = sorted((offsets[i], offsets[i] + sizes[i]) for i in live)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start, t


def _random_blocks(n: int, rng: random.Random, horizon: int, span: int) -> list[Block]:
    out = []
    for _ in range(n):
        first = rng.randrange(horizon)
        out.append(
            (rng.randrange(1, 1 << 20), first, min(horizon - 1, first + rng.randrange(span)))
        )
    return out


def _transformer(tokens: int, layers: int) -> list[Block]:
    """A chain of decoder layers in bf16 (hidden 4096, intermediate 14336, 8 KV heads).

    Per layer (10 steps): the residual stream enters from the previous layer and lives to
    the layer's end, across attention and MLP, where the next layer's stream starts;
    norm, q/k/v, attention output, o_proj, the post-attention sum, norm, gate/up,
    activation and down projection live only as long as they are used.
    """
    h, i, kv = tokens * 4096 * 2, tokens * 14336 * 2, tokens * 1024 * 2
    blocks: list[Block] = []
    enter = 0
    for layer in range(layers):
        b = layer * 10
        blocks.append((h, enter, b + 9))  # residual stream
        blocks += [(h, b, b + 1), (h, b + 1, b + 2), (kv, b + 1, b + 2), (kv, b + 1, b + 2)]
        blocks += [(h, b + 2, b + 3), (h, b + 3, b + 4), (h, b + 4, b + 9)]
        blocks += [(h, b + 5, b + 6), (i, b + 6, b + 7), (i, b + 6, b + 7)]
        blocks += [(i, b + 7, b + 8), (h, b + 8, b + 9)]
        enter = b + 9
    blocks.append((h, enter, enter + 1))  # the last layer's output
    return blocks


# ---------------------------------------------------------------------------------------
# Known cases


def test_no_blocks() -> None:
    plan = plan_offsets([])
    assert (plan.offsets, plan.sizes, plan.total_bytes, plan.lower_bound) == ((), (), 0, 0)
    assert plan.ratio == 1.0
    assert plan.strategy == "none"


def test_zero_byte_blocks_take_no_room() -> None:
    plan = plan_offsets([(0, 0, 5), (100, 1, 2), (0, 2, 2)])
    assert plan.offsets == (0, 0, 0)
    assert plan.sizes == (0, 256, 0)
    assert plan.total_bytes == plan.lower_bound == 256
    zero = plan_offsets([(0, 0, 1), (0, 1, 1)])
    assert (zero.total_bytes, zero.lower_bound, zero.ratio, zero.strategy) == (0, 0, 1.0, "none")


def test_chain_reuses_bytes_of_dead_blocks() -> None:
    plan = plan_offsets([(1000, 0, 1), (1000, 1, 2), (1000, 2, 3)])
    assert plan.offsets == (0, 1024, 0)
    assert (plan.total_bytes, plan.lower_bound, plan.ratio) == (2048, 2048, 1.0)


def test_all_live_together_stack() -> None:
    blocks = [(256 * k, 0, 3) for k in (1, 4, 2, 3)]
    plan = plan_offsets(blocks)
    _check(blocks, plan)
    assert plan.total_bytes == plan.lower_bound == 256 * 10


def test_disjoint_lifetimes_share_offset_zero() -> None:
    plan = plan_offsets([(300, t, t) for t in range(5)])
    assert plan.offsets == (0,) * 5
    assert plan.total_bytes == plan.lower_bound == 512


def test_alignment_rounds_every_size_and_offset() -> None:
    blocks = [(1, 0, 1), (17, 0, 1), (4097, 1, 2)]
    for alignment in (16, 256, 4096):
        plan = plan_offsets(blocks, alignment=alignment)
        _check(blocks, plan, alignment)
        assert plan.lower_bound == _load(blocks, alignment)


def test_greedy_by_size_misses_an_optimum_the_planner_finds() -> None:
    # A (1 unit, indices 0-1), B (2, index 0), C (2, indices 2-3), D (1, indices 1-3).
    # Greedy by size puts B and C (never live together) at 0 and A above B at 2; D, live
    # with A and with C, then finds no hole below A's top: 4 units. B at 0, A at 2, D at
    # 0 and C at 1 reaches the lower bound, 3 units (A and B at index 0).
    u = 256
    blocks = [(u, 0, 1), (2 * u, 0, 0), (2 * u, 2, 3), (u, 1, 3)]
    assert _greedy_by_size(blocks) == ([2 * u, 0, 0, 3 * u], 4 * u)
    assert _optimum(blocks) == _load(blocks) == 3 * u
    plan = plan_offsets(blocks)
    _check(blocks, plan)
    assert plan.total_bytes == plan.lower_bound == 3 * u


def test_search_moves_a_block_to_an_earlier_position() -> None:
    # One layer: residual (0-4), norm (0-1), qkv (1-2), attention (2-3), o_proj (3-4) and
    # logits (4-5). No order tried reaches the bound, nor does moving a block to the front
    # of the best; moving the o_proj output earlier, not first, does.
    blocks = [(8192, 0, 4), (8192, 0, 1), (24576, 1, 2), (8192, 2, 3), (8192, 3, 4), (30000, 4, 5)]
    assert _optimum(blocks) == _load(blocks) == 46592
    plan = plan_offsets(blocks)
    _check(blocks, plan)
    assert plan.total_bytes == 46592
    assert plan.moves >= 1


def test_plan_is_frozen_and_reports_its_strategy() -> None:
    plan = plan_offsets([(512, 0, 1), (256, 1, 2)])
    assert plan.strategy in STRATEGIES
    assert plan.moves >= 0
    with pytest.raises(AttributeError):
        plan.total_bytes = 0  # type: ignore[misc]


def test_numpy_integers_are_accepted() -> None:
    blocks = [(np.int64(1000), np.int32(0), np.uint8(2)), (np.uint64(10), 1, np.int16(3))]
    plan = plan_offsets(blocks)
    assert plan.offsets == (0, 1024)
    assert all(type(v) is int for v in (*plan.offsets, *plan.sizes, plan.total_bytes))


def test_sizes_past_int64_stay_exact() -> None:
    big = 2**63 - 1
    blocks = [(big, 0, 1), (big, 1, 2), (5, 0, 0)]
    plan = plan_offsets(blocks)
    _check(blocks, plan)
    assert plan.sizes == (2**63, 2**63, 256)
    assert plan.lower_bound == 2**64
    assert plan.total_bytes == 2**64


@pytest.mark.parametrize("path", ["sparse", "dense", "past int64"])
def test_sizes_a_float_cannot_hold_stay_exact(path: str) -> None:
    """Sizes whose low bits a float64 drops (2**57 + 16: floats are 32 apart there), on the
    int64 paths (few co-live pairs: sparse; many: dense) and past int64 (object arrays):
    every offset, the total and the lower bound are exact ints."""
    odd = 2**57 + 16
    if path == "sparse":
        blocks = [(odd, 0, 1), (odd + 32, 1, 2), (16, 0, 2), (odd + 64, 2, 3)]
    elif path == "dense":  # 83 blocks live together: past SPARSE_PAIRS pairs a block
        blocks = [(odd, 0, 9)] * 3 + [(16 * (k + 1), 0, 9) for k in range(80)]
    else:
        blocks = [(2**62 + 16, 0, 0), (2**62 + 48, 0, 1), (2**62 + 80, 1, 1), (odd, 0, 1)]
    firsts, lasts = np.array([b[1] for b in blocks]), np.array([b[2] for b in blocks])
    dense = planner._neighbours(firsts, lasts, planner.SPARSE_PAIRS * len(blocks))[0] is None
    assert dense == (path == "dense")
    plan = plan_offsets(blocks, alignment=16)
    assert all(type(o) is int for o in plan.offsets)
    assert type(plan.total_bytes) is int and type(plan.lower_bound) is int
    _check_by_index(blocks, plan)
    assert plan.lower_bound == _load(blocks, 16)
    assert plan.total_bytes == plan.lower_bound  # one order reaches the bound here


# ---------------------------------------------------------------------------------------
# Quality


def test_small_instances_against_brute_force() -> None:
    """Up to 6 blocks: the planner is optimal on most instances and within 4/3 on all."""
    rng = random.Random(2024)
    hits = worse = 0
    for _ in range(300):
        n = rng.randint(1, 6)
        blocks = [
            (256 * rng.randint(1, 8), f, f + rng.randint(0, 3))
            for f in (rng.randint(0, 4) for _ in range(n))
        ]
        plan = plan_offsets(blocks)
        _check(blocks, plan)
        best = _optimum(blocks)
        assert plan.lower_bound <= best <= plan.total_bytes <= best * 4 / 3, blocks
        hits += plan.total_bytes == best
        worse += plan.total_bytes > _greedy_by_size(blocks)[1]
    assert worse == 0
    # All 300 are optimal today (greedy by size alone: 292); a little slack for changes.
    assert hits >= 0.98 * 300, hits


@pytest.mark.parametrize("tokens", [1, 7, 128, 1000, 4096])
@pytest.mark.parametrize("layers", [4, 9])
def test_transformer_layers_within_five_percent_of_the_bound(tokens: int, layers: int) -> None:
    blocks = _transformer(tokens, layers)
    plan = plan_offsets(blocks)
    _check(blocks, plan)
    assert plan.lower_bound == _load(blocks)
    assert plan.total_bytes <= 1.05 * plan.lower_bound, (plan.ratio, plan.strategy)


def _documented_orders(blocks: Sequence[Block]) -> dict[str, Callable[[int], tuple[int, ...]]]:
    """The five orders docs/planning.md lists, as sort keys written from its table."""
    size = [_aligned(b[0], 256) for b in blocks]
    first = [b[1] for b in blocks]
    last = [b[2] for b in blocks]
    live = [
        sum(s for s, (_, f, la) in zip(size, blocks, strict=True) if f <= t <= la)
        for t in range(max(last) + 1)
    ]
    peak = [max(live[f : la + 1]) for _, f, la in blocks]
    return {
        "size": lambda i: (-size[i], first[i]),
        "peak": lambda i: (-peak[i], -size[i], first[i]),
        "area": lambda i: (-size[i] * (last[i] - first[i] + 1), -size[i], first[i]),
        "lifetime": lambda i: (first[i] - last[i], -size[i], first[i]),
        "first": lambda i: (first[i], -size[i]),
    }


def test_plans_are_never_worse_than_any_documented_order() -> None:
    """Within the work budget every order of docs/planning.md's table is tried and the
    best kept: the plan is never worse than any of them placed by the plain rule, and each
    order is the only best one on some instance (so each one counts)."""
    rng = random.Random(11)
    only_best: dict[str, int] = dict.fromkeys(STRATEGIES, 0)
    for _ in range(400):
        n = rng.randint(4, 24)
        blocks = _random_blocks(n, rng, horizon=max(4, n // 2), span=rng.randint(1, 6))
        plan = plan_offsets(blocks)
        totals = {name: _greedy(blocks, key)[1] for name, key in _documented_orders(blocks).items()}
        assert plan.total_bytes <= min(totals.values()), (blocks, totals, plan.total_bytes)
        best = min(totals.values())
        winners = [name for name, total in totals.items() if total == best]
        if len(winners) == 1:
            only_best[winners[0]] += 1
    assert set(only_best) == set(_documented_orders([(1, 0, 0)]))
    assert all(only_best.values()), only_best


def test_random_sets_never_worse_than_greedy_by_size() -> None:
    rng = random.Random(7)
    for n in (10, 40, 150):
        for _ in range(6):
            blocks = _random_blocks(n, rng, horizon=max(4, n // 2), span=max(2, n // 8))
            plan = plan_offsets(blocks)
            _check(blocks, plan)
            assert plan.total_bytes <= _greedy_by_size(blocks)[1]


# ---------------------------------------------------------------------------------------
# Properties

blocks_st = st.lists(
    st.tuples(st.integers(0, 5000), st.integers(0, 12), st.integers(0, 6)).map(
        lambda t: (t[0], t[1], t[1] + t[2])
    ),
    max_size=14,
)


@settings(max_examples=300, deadline=None)
@given(blocks_st, st.sampled_from([16, 256, 1024]))
def test_plans_are_valid_bounded_and_beat_greedy_by_size(
    blocks: list[Block], alignment: int
) -> None:
    plan = plan_offsets(blocks, alignment=alignment)
    _check(blocks, plan, alignment)
    assert plan.lower_bound == _load(blocks, alignment)
    assert plan.total_bytes <= _greedy_by_size(blocks, alignment)[1]


@settings(max_examples=200, deadline=None)
@given(blocks_st.filter(bool), st.randoms(use_true_random=False))
def test_both_placement_paths_are_greedy_best_fit(blocks: list[Block], rng: random.Random) -> None:
    """In greedy-by-size order both paths place exactly like the reference; in any order
    they agree with each other."""
    kept = [b for b in blocks if b[0]]
    if not kept:
        return
    size = [_aligned(b[0], 256) for b in kept]
    first = [b[1] for b in kept]
    last = [b[2] for b in kept]
    firsts, lasts = np.array(first), np.array(last)
    neighbours, _ = planner._neighbours(firsts, lasts, len(kept) ** 2)
    assert neighbours is not None
    by_size = sorted(range(len(kept)), key=lambda i: (-size[i], first[i], i))
    ref_offsets, ref_total = _greedy_by_size(kept)
    sparse = planner._place_sparse(by_size, size, neighbours)
    dense = planner._place_dense(by_size, size, first, last, np.int64)
    assert sparse == dense == (ref_offsets, ref_total)
    shuffled = list(range(len(kept)))
    rng.shuffle(shuffled)
    assert planner._place_sparse(shuffled, size, neighbours) == planner._place_dense(
        shuffled, size, first, last, np.int64
    )


@settings(max_examples=200, deadline=None)
@given(blocks_st.filter(bool))
def test_peaks_are_the_largest_live_total_in_each_lifetime(blocks: list[Block]) -> None:
    """The key of the "peak" order, the lower bound and the busiest step (the first first
    use where the live total is the lower bound), against per-index sums."""
    size = np.array([_aligned(b[0], 256) for b in blocks], dtype=np.int64)
    first = np.array([b[1] for b in blocks])
    last = np.array([b[2] for b in blocks])
    peak, lower, busiest = planner._peaks(size, first, last)
    live = [
        sum(int(s) for s, (_, f, la) in zip(size, blocks, strict=True) if f <= t <= la)
        for t in range(int(last.max()) + 1)
    ]
    assert lower == max(live)
    assert busiest == min(f for _, f, _ in blocks if live[f] == lower)
    assert peak.tolist() == [max(live[f : la + 1]) for _, f, la in blocks]


def test_dense_path_plans_are_valid() -> None:
    """Many blocks sharing indices take the NumPy path (and its budget)."""
    rng = random.Random(3)
    blocks = _random_blocks(400, rng, horizon=20, span=20)
    firsts = np.array([b[1] for b in blocks])
    lasts = np.array([b[2] for b in blocks])
    assert planner._neighbours(firsts, lasts, planner.SPARSE_PAIRS * 400)[0] is None
    plan = plan_offsets(blocks)
    _check_by_index(blocks, plan)
    assert plan.lower_bound == _load(blocks)
    assert plan.total_bytes <= _greedy_by_size(blocks)[1]


def test_ten_thousand_blocks() -> None:
    rng = random.Random(10_000)
    blocks = _random_blocks(10_000, rng, horizon=10_000, span=20)
    plan = plan_offsets(blocks)
    _check_by_index(blocks, plan)
    assert plan.lower_bound <= plan.total_bytes <= 1.5 * plan.lower_bound


# ---------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ((1.5, 0, 1), ["block 1", "nbytes", "1.5", "float"]),
        ((True, 0, 1), ["block 1", "nbytes", "True", "bool"]),
        ((np.bool_(True), 0, 1), ["block 1", "nbytes", "True", "bool"]),
        ((np.float64(8), 0, 1), ["block 1", "nbytes", "8.0"]),
        ((-1, 0, 1), ["block 1", "nbytes", "-1", ">= 0"]),
        ((2**63, 0, 1), ["block 1", "nbytes", str(2**63), "2**63 - 1"]),
        ((8, "0", 1), ["block 1", "first", "'0'", "str"]),
        ((8, -2, 1), ["block 1", "first", "-2"]),
        ((8, 0, None), ["block 1", "last", "None"]),
        ((8, 5, 2), ["block 1", "first (5)", "last (2)", "(8, 2, 5)"]),
        ((8, 0), ["block 1", "(8, 0)", "2 items", "(nbytes, first, last)"]),
        ((8, 0, 1, 2), ["block 1", "4 items"]),
        (8, ["block 1", "8", "int", "(nbytes, first, last)"]),
        ("abc", ["block 1", "'abc'", "(nbytes, first, last)"]),
        ({"a": 1, "b": 2, "c": 3}, ["block 1", "dict"]),
        ({1, 2, 3}, ["block 1", "set", "(nbytes, first, last)"]),
    ],
)
def test_bad_blocks_name_the_block_and_value(block: object, words: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        plan_offsets([(64, 0, 0), block])  # type: ignore[list-item]
    message = str(info.value)
    for word in words:
        assert word in message, (word, message)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("blocks", [5, None, "abc", {"a": (1, 0, 0)}])
def test_blocks_must_be_a_sequence(blocks: object) -> None:
    with pytest.raises(SpecError, match="sequence of \\(nbytes, first, last\\)"):
        plan_offsets(blocks)  # type: ignore[arg-type]


@pytest.mark.parametrize("alignment", [0, 100, 8, True, 2.0, 2**31])
def test_bad_alignment(alignment: object) -> None:
    with pytest.raises(ConfigError, match="alignment"):
        plan_offsets([(8, 0, 0)], alignment=alignment)  # type: ignore[arg-type]
