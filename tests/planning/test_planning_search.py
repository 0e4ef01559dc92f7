"""plan_offsets(time_limit=...): the exact, anytime search (MiniMalloc's branch and bound).

The optimum here comes from a brute force written independently of the search: every
aligned offset of every block below a capacity, raised until a plan fits. The search
tests run on both searches (the ``search_path`` fixture): the compiled one
(arena/planning/_search.c) and the pure-Python one.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arena import Arena
from arena.__main__ import main as arena_main
from arena.environment import flag_from_env
from arena.errors import ConfigError
from arena.observe.profilefile import read_profile
from arena.planning import plan_offsets, search
from tests.conftest import check_pure_python_switch
from tests.profiles import profile_data
from tests.tilings import Block, check_plan, tiling_by_area

ALIGN = 16
REQUIRE_COMPILED = flag_from_env("ARENA_REQUIRE_COMPILED")


def _use(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make plan_offsets run the ``path`` search ("compiled" skips where it is not in use:
    not built, or ``ARENA_PURE_PYTHON=1``; fails instead under ARENA_REQUIRE_COMPILED=1)."""
    if path == "python":
        monkeypatch.setattr(search, "compiled", None)
    elif search.compiled is None:
        reason = f"the compiled search is not in use here: {search.WHY_PYTHON}"
        if REQUIRE_COMPILED and search.WHY_PYTHON != "ARENA_PURE_PYTHON is set":
            pytest.fail(f"ARENA_REQUIRE_COMPILED=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture(params=["compiled", "python"])
def search_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test once per search: MiniMalloc's solver in C, then the Python one."""
    path: str = request.param
    _use(path, monkeypatch)
    return path


def _co_live(a: Block, b: Block) -> bool:
    return a[1] <= b[2] and b[1] <= a[2]


def _fits(blocks: Sequence[Block], units: list[int], capacity: int) -> bool:
    """Whether some offsets (in units) keep every block below ``capacity`` units."""
    n = len(blocks)
    offsets = [0] * n

    def place(i: int) -> bool:
        if i == n:
            return True
        for off in range(capacity - units[i] + 1):
            if all(
                off + units[i] <= offsets[j] or offsets[j] + units[j] <= off
                for j in range(i)
                if _co_live(blocks[i], blocks[j])
            ):
                offsets[i] = off
                if place(i + 1):
                    return True
        return False

    return place(0)


def _optimum(blocks: Sequence[Block]) -> int:
    """The least total in bytes, by trying every capacity from the largest block up."""
    units = [-(-b[0] // ALIGN) for b in blocks]
    capacity = max(units)
    while not _fits(blocks, units, capacity):
        capacity += 1
    return capacity * ALIGN


def test_search_finds_and_proves_the_optimum_on_small_instances(search_path: str) -> None:
    """Where the heuristics miss the brute-force optimum (a few in thousands of tiny sets),
    the search must reach it and say it is optimal."""
    rng = random.Random(31)
    missed = 0
    for _ in range(3000):
        n = rng.randint(4, 6)
        blocks = [
            (ALIGN * rng.randint(1, 6), f, f + rng.randint(0, 2))
            for f in (rng.randint(0, 2) for _ in range(n))
        ]
        plain = plan_offsets(blocks, alignment=ALIGN)
        if plain.optimal:
            assert plain.total_bytes == plain.lower_bound
            continue
        assert not plain.limit_reached
        missed += 1
        plan = plan_offsets(blocks, alignment=ALIGN, time_limit=30)
        check_plan(blocks, plan)
        assert plan.total_bytes == _optimum(blocks) < plain.total_bytes, blocks
        assert plan.optimal and not plan.limit_reached, blocks
    assert missed >= 3, missed


def _tiling(rng: random.Random, n: int, steps: int, height: int) -> list[Block]:
    """Blocks cut from one full rectangle of ``steps`` indices by ``height`` units: a plan
    at LOAD (``height`` units) exists by construction, as MiniMalloc's benchmarks are made."""
    return tiling_by_area(rng, n, steps, height, ALIGN)


def test_search_reaches_load_where_the_heuristics_miss(search_path: str) -> None:
    """Cut rectangles (LOAD reachable by construction) that the heuristics leave above it:
    the search must find a plan at LOAD and say it is optimal."""
    rng = random.Random(7)
    missed = 0
    for _ in range(100):
        blocks = _tiling(rng, rng.randint(16, 28), 16, 64)
        plain = plan_offsets(blocks, alignment=ALIGN)
        assert plain.lower_bound == 64 * ALIGN
        if plain.optimal:
            continue
        missed += 1
        plan = plan_offsets(blocks, alignment=ALIGN, time_limit=30)
        check_plan(blocks, plan)
        assert plan.total_bytes == plan.lower_bound and plan.optimal, blocks
    assert missed >= 10, missed


block_st = st.tuples(st.integers(0, 40 * ALIGN), st.integers(0, 12), st.integers(0, 6)).map(
    lambda t: (t[0], t[1], t[1] + t[2])
)


# The fixture's patch holds for every example; nothing else is shared between them.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(block_st, max_size=24), st.sampled_from([0.0, 0.005, 0.05]))
def test_any_limit_gives_a_valid_plan_never_worse(
    search_path: str, blocks: list[Block], limit: float
) -> None:
    plain = plan_offsets(blocks, alignment=ALIGN)
    plan = plan_offsets(blocks, alignment=ALIGN, time_limit=limit)
    check_plan(blocks, plan)
    assert plan.total_bytes <= plain.total_bytes
    assert plan.lower_bound == plain.lower_bound
    assert plan.optimal or plan.limit_reached


def _hard_instance() -> list[Block]:
    """60 blocks the heuristics leave above LOAD, too many to settle in a few ms."""
    rng = random.Random(5)
    return [
        (ALIGN * rng.randint(1, 64), f, f + rng.randint(0, 8))
        for f in (rng.randint(0, 30) for _ in range(60))
    ]


def test_a_limit_that_ends_the_search_is_reported(search_path: str) -> None:
    blocks = _hard_instance()
    plain = plan_offsets(blocks, alignment=ALIGN)
    assert plain.total_bytes > plain.lower_bound
    plan = plan_offsets(blocks, alignment=ALIGN, time_limit=0.0)
    check_plan(blocks, plan)
    assert plan.limit_reached and not plan.optimal
    assert plan.gap == pytest.approx(plan.total_bytes / plan.lower_bound - 1)


def test_without_a_limit_optimal_only_at_load() -> None:
    blocks = _hard_instance()
    plain = plan_offsets(blocks, alignment=ALIGN)
    assert not plain.optimal and not plain.limit_reached
    assert plain.proven_bound == plain.lower_bound
    at_load = plan_offsets([(1000, 0, 1), (1000, 1, 2), (1000, 2, 3)])
    assert at_load.optimal and at_load.gap == 0.0
    assert plan_offsets([]).optimal


_SCRIPT = """
import json, random, sys
sys.path.insert(0, sys.argv[1])
from test_planning_search import _tiling
from arena.planning import plan_offsets, search
assert search.SEARCH_PATH == sys.argv[2], (search.SEARCH_PATH, search.WHY_PYTHON)
rng = random.Random(3)
out = []
for _ in range(20):
    p = plan_offsets(_tiling(rng, rng.randint(16, 28), 16, 64), alignment=16, time_limit=20)
    out.append([list(p.offsets), p.optimal, p.limit_reached])
print(json.dumps(out))
"""


def test_same_plan_whatever_the_hash_seed(search_path: str) -> None:
    results = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        if search_path == "python":
            env["ARENA_PURE_PYTHON"] = "1"
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, os.path.dirname(__file__), search_path],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(done.stdout))
    assert results[0] == results[1]
    assert all(optimal and not limited for _, optimal, limited in results[0])


@pytest.mark.parametrize("limit", [-1, float("nan"), float("inf"), "10", True])
def test_bad_time_limit(limit: object) -> None:
    with pytest.raises(ConfigError, match="time_limit"):
        plan_offsets([(16, 0, 0)], time_limit=limit)  # type: ignore[arg-type]


def _record(ws: Arena, blocks: Sequence[Block], steps: int) -> None:
    """Run the step "k" once (recorded, planned by the next run or plan_steps): at each
    index, release the views whose lifetime ended, then request the ones that start (one
    float32 per 4 bytes of each block)."""
    with ws.step("k") as st:
        views: dict[int, Any] = {}
        for t in range(steps + 1):
            ended = [i for i in views if blocks[i][2] < t]
            for i in ended:
                st.release(views.pop(i))
            for i, (nbytes, first, _) in enumerate(blocks):
                if first == t:
                    (views[i],) = st.get_simultaneous(((nbytes // 4,), "float32"))


def test_plan_steps_passes_the_limit_on() -> None:
    """A step recorded from cut rectangles: planned with a limit it is never larger than
    without, and smaller on some that the heuristics leave above LOAD."""
    rng = random.Random(11)
    smaller = 0
    for _ in range(200):
        blocks = _tiling(rng, rng.randint(16, 28), 16, 64)
        if plan_offsets(blocks, alignment=ALIGN).optimal:
            continue  # the heuristics reach LOAD: nothing to gain
        totals = []
        for limit in (None, 5.0):
            with Arena("cpu", framework="numpy", alignment=ALIGN) as ws:
                _record(ws, blocks, 16)
                totals.append(ws.plan_steps(time_limit=limit)["k"])
        assert totals[1] <= totals[0]
        smaller += totals[1] < totals[0]
        if smaller >= 2:
            break
    assert smaller >= 2


def test_plan_steps_checks_the_limit() -> None:
    with Arena("cpu", framework="numpy") as ws, pytest.raises(ConfigError, match="time_limit"):
        ws.plan_steps(time_limit=-1)


def _missed_tiling(seed: int) -> list[Block]:
    """A cut rectangle whose recorded step is planned above LOAD without a limit."""
    rng = random.Random(seed)
    while True:
        blocks = _tiling(rng, rng.randint(16, 28), 16, 64)
        if plan_offsets(blocks, alignment=ALIGN).optimal:
            continue
        with Arena("cpu", framework="numpy", alignment=ALIGN) as ws:
            _record(ws, blocks, 16)
            if ws.plan_steps()["k"] > 64 * ALIGN:
                return blocks


def test_python_m_arena_plan_rewrites_a_profiles_step_plans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Offline re-planning shrinks a stored plan, and a restart presizes to it and replays
    the step in it without growing."""
    path = tmp_path / "profile.json"
    blocks = _missed_tiling(11)
    with Arena("cpu", framework="numpy", alignment=ALIGN, profile=path) as ws:
        _record(ws, blocks, 16)
        before = ws.plan_steps()["k"]
        _record(ws, blocks, 16)
        ws.lock()
    assert before > 64 * ALIGN
    assert arena_main(["plan", str(path), "--time-limit", "5"]) == 0
    out = capsys.readouterr().out
    assert f"slot 0 step 'k': {before} -> {64 * ALIGN} bytes (optimal)" in out
    (slot,) = read_profile(path)["slots"]
    (entry,) = slot["steps"]
    assert entry["total"] == slot["planned"] == 64 * ALIGN
    with Arena("cpu", framework="numpy", alignment=ALIGN, profile=path) as ws:
        assert ws.stats().slots[0].capacity == 64 * ALIGN
        _record(ws, blocks, 16)
        _record(ws, blocks, 16)
        assert ws.stats().slots[0].capacity == 64 * ALIGN  # replayed within the new plan
    assert arena_main(["plan", str(path), "--time-limit", "5"]) == 0  # nothing to gain
    assert "-> 1024 bytes (optimal)" in capsys.readouterr().out


def test_python_m_arena_plan_refuses_a_missing_file_and_a_bad_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "none.json"
    assert arena_main(["plan", str(path)]) == 1
    assert f"no profile at {str(path)!r}: run the engine with Arena(profile=PATH)" in (
        capsys.readouterr().err
    )
    for bad in ("-1", "nan", "inf"):
        assert arena_main(["plan", str(path), "--time-limit", bad]) == 2
        err = capsys.readouterr().err
        assert "--time-limit must be a finite number of seconds, 0 or more" in err, bad
    path.write_text("not json")
    assert arena_main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{str(path)!r} is not a usable profile: it is not valid JSON" in err
    assert "Record a new one with Arena(profile=PATH)" in err
    path.write_text(json.dumps(profile_data()))
    assert arena_main(["plan", str(path)]) == 0
    assert "no step plans in this profile: nothing to re-plan (an engine stores them" in (
        capsys.readouterr().out
    )


def test_compiled_and_python_search_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two searches on the same instances the heuristics miss: both reach the
    brute-force optimum (or LOAD, for cut rectangles), say so, and give valid plans."""
    _use("compiled", monkeypatch)  # skips where the compiled search is not in use
    rng = random.Random(2031)
    instances: list[list[Block]] = []
    while len(instances) < 8:
        n = rng.randint(4, 6)
        blocks = [
            (ALIGN * rng.randint(1, 6), f, f + rng.randint(0, 2))
            for f in (rng.randint(0, 2) for _ in range(n))
        ]
        if not plan_offsets(blocks, alignment=ALIGN).optimal:
            instances.append(blocks)
    while len(instances) < 14:
        blocks = _tiling(rng, rng.randint(16, 28), 16, 64)
        if not plan_offsets(blocks, alignment=ALIGN).optimal:
            instances.append(blocks)
    compiled = search.compiled
    for blocks in instances:
        want = _optimum(blocks) if len(blocks) <= 6 else 64 * ALIGN
        plans = []
        for module in (compiled, None):
            monkeypatch.setattr(search, "compiled", module)
            plan = plan_offsets(blocks, alignment=ALIGN, time_limit=30)
            check_plan(blocks, plan)
            assert plan.total_bytes == want and plan.optimal, (module, blocks)
            plans.append(plan)
        assert plans[0].proven_bound == plans[1].proven_bound == want


def test_arena_pure_python_forces_the_python_search() -> None:
    """ARENA_PURE_PYTHON=1 runs the Python search, as it runs the Python hit path; unset,
    the compiled search is used wherever it was built."""
    code = "from arena.planning import search; print(search.SEARCH_PATH, search.WHY_PYTHON)"
    check_pure_python_switch(code, "arena.planning._search", compiled="compiled", python="python")


def _module(monkeypatch: pytest.MonkeyPatch) -> Any:
    _use("compiled", monkeypatch)
    return search.compiled


def test_compiled_search_refuses_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    module = _module(monkeypatch)
    with pytest.raises(ValueError, match="one length"):
        module.sweep([1, 2], [0], [1])
    with pytest.raises(ValueError, match="buffer 1: needs start < end and size > 0"):
        module.sweep([1, 2], [0, 3], [1, 3])
    with pytest.raises(ValueError, match="buffer 0"):
        module.sweep([0], [0], [1])
    with pytest.raises(ValueError, match=r"sizes\[0\] must be >= 0"):
        module.sweep([-1], [0], [1])
    with pytest.raises(OverflowError):
        module.sweep([2**63], [0], [1])
    with pytest.raises(TypeError):
        module.sweep([1.5], [0], [1])
    sweep = module.sweep([1, 1], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="heuristic"):
        module.decide(sweep, 2, "WAX", 100, 1.0)
    with pytest.raises(ValueError, match="PyCapsule"):
        module.decide(object(), 2, "WAT", 100, 1.0)
    with pytest.raises(ValueError, match="one length"):
        module.sweep([1, 2], [0, 0], [1, 1], [1])
    with pytest.raises(ValueError, match=r"widths\[1\] must be > 0"):
        module.sweep([1, 2], [0, 0], [1, 1], [1, 0])
    with pytest.raises(TypeError, match="widths"):
        module.sweep([1, 2], [0, 0], [1, 1], 5)
    # The status, the offsets and the nodes visited (the root, b0 placed, b1 placed).
    assert module.decide(sweep, 2, "WAT", 100, 1.0) == (0, [0, 1], 3)
    assert module.decide(sweep, 1, "TWA", 100, 1.0) == (1, None, 1)  # proven: no plan in 1
    assert module.decide(module.sweep([], [], []), 0, "TAW", 1, 1.0) == (0, [], 0)


def test_compiled_search_stops_at_its_node_and_time_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On an instance it cannot settle at once, the compiled search says which limit
    stopped it: the node limit (status 2) or the clock (status 3), read while it runs."""
    module = _module(monkeypatch)
    rng = random.Random(9)
    blocks = [
        (ALIGN * rng.randint(1, 64), f, f + rng.randint(0, 20))
        for f in (rng.randint(0, 60) for _ in range(200))
    ]
    sweep = module.sweep(
        [b[0] // ALIGN for b in blocks], [b[1] for b in blocks], [b[2] + 1 for b in blocks]
    )
    load = plan_offsets(blocks, alignment=ALIGN).lower_bound // ALIGN
    # At LOAD it needs more than 5,000 nodes, so a clock limit of 0 s, read every 256
    # nodes, stops it first however large its node limit.
    assert module.decide(sweep, load, "WAT", 5000, 60.0) == (2, None, 5000)
    assert module.decide(sweep, load, "WAT", 10**15, 0.0) == (3, None, 256)
    assert module.decide(sweep, load, "TAW", 10**15, 0.0) == (3, None, 256)


@pytest.mark.parametrize("heuristic", ["WAT", "TAW", "TWA", "ETW"])
def test_preorders_rank_by_real_lifetimes(search_path: str, heuristic: str) -> None:
    """Width and area are the lifetimes' real lengths, as in MiniMalloc, on both searches.
    The compiled search sweeps the ranks of the time points: here both blocks span two of
    the three sections, so ranked lengths tie (2 and 2) and block 0 would go first; really
    block 1 lives 95 steps against 10, so it is first in every preorder (their peak totals
    tie) and goes at offset 0. Ranked lengths left 5 of MiniMalloc's 11 challenging
    instances unsolved in 10 s (docs/planning.md)."""
    blocks = ([1, 1], [0, 5], [9, 99])
    status, offsets, nodes = search.decide(
        *blocks, 2, heuristic=heuristic, node_limit=100, time_limit=30
    )
    assert (status, offsets) == (0, [1, 0])
    assert nodes > 0
    with pytest.raises(ValueError, match="heuristic"):
        search.decide(*blocks, 2, heuristic="WWW", node_limit=100, time_limit=30)


def test_the_etw_preorder_ranks_by_last_use_first(search_path: str) -> None:
    """``ETW`` puts the blocks whose lives end last first, where MiniMalloc's three put the
    longer-lived ones first: blocks 0, 1 and 2 live to steps 50, 60 and 55 (51, 21 and 11
    steps; their peak totals tie), so ETW stacks 1, 2, 0 from offset 0 and the others 0,
    1, 2 (by first use, latest first, it would be 2, 1, 0)."""
    blocks = ([1, 1, 1], [0, 40, 45], [50, 60, 55])
    for heuristic, want in (
        ("ETW", [2, 0, 1]),
        ("WAT", [0, 1, 2]),
        ("TAW", [0, 1, 2]),
        ("TWA", [0, 1, 2]),
    ):
        status, offsets, _ = search.decide(
            *blocks, 3, heuristic=heuristic, node_limit=100, time_limit=30
        )
        assert (status, offsets) == (0, want), heuristic


class _Preorders:
    """A decider that finds a plan at the bound only under the ``ETW`` preorder, and
    records what it was asked."""

    def __init__(self, *blocks: object) -> None:
        self.asked: list[tuple[int, str]] = []

    def decide(
        self, capacity: int, which: int, node_limit: int, deadline: float
    ) -> tuple[int, list[int], int]:
        if time.perf_counter() > deadline:
            return 3, [], 0  # the clock, so that a round robin without ETW ends
        heuristic = search._HEURISTICS[which]
        self.asked.append((capacity, heuristic))
        if heuristic == "ETW":
            return 0, [0, 1, 2], 3
        return 2, [], node_limit  # the node limit, as MiniMalloc's three on Inception


def test_improve_asks_the_etw_preorder_after_minimalloc_s_three(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each capacity is asked under WAT, TAW, TWA, then ETW, until one decides: on
    Inception v3's training step at batch 1 only ETW finds its plan at LOAD (in one node a
    block), so the round robin must reach it."""
    deciders: list[_Preorders] = []

    def make(*args: object) -> _Preorders:
        deciders.append(_Preorders(*args))
        return deciders[-1]

    monkeypatch.setattr(search, "compiled", None)
    monkeypatch.setattr(search, "_PythonDecider", make)
    out = search.improve([1, 1, 1], [0, 0, 0], [0, 0, 0], [0, 1, 3], lower=3, time_limit=2)
    assert (out.total, out.optimal, out.limit_reached) == (3, True, False)
    (decider,) = deciders
    assert decider.asked == [(3, "WAT"), (3, "TAW"), (3, "TWA"), (3, "ETW")]


def test_improve_counts_its_nodes(search_path: str) -> None:
    """improve reports the nodes its decisions visited: none where the seed is at LOAD."""
    size, first, last = [1, 1, 2], [0, 1, 2], [1, 2, 3]
    at_load = search.improve(size, first, last, [0, 2, 0], lower=3, time_limit=30)
    assert at_load.optimal and at_load.nodes == 0
    out = search.improve(size, first, last, [0, 1, 2], lower=3, time_limit=30)  # top 4
    assert (out.total, out.optimal, out.limit_reached) == (3, True, False)
    assert out.nodes > 0
