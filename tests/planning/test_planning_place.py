"""The compiled placement (arena/planning/_place.c) against the Python one (issue 31).

``plan_offsets`` places blocks with the optional extension ``arena.planning._place`` where
it was built and the sizes fit in int64, else with the Python/NumPy paths of
``arena.planning.offsets``. The two must give the same plans, offset for offset: here on
random block sets of every density (both ways of finding the co-live blocks), alignments
from 16 to 2**30, sizes on either side of an alignment unit, zero-byte blocks, uses up to
2**63 - 1 and many blocks at one offset; and whatever PYTHONHASHSEED is.
"""

from __future__ import annotations

import importlib.util
import os
import random
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

from arena.base.layout import MAX_BYTES
from arena.environment import flag_from_env
from arena.planning import OffsetPlan, offsets, plan_offsets

Block = tuple[int, int, int]
REQUIRE_COMPILED = flag_from_env("ARENA_REQUIRE_COMPILED")


@pytest.fixture
def compiled() -> Any:
    """The compiled module (skips where it is not in use: not built, or
    ``ARENA_PURE_PYTHON=1``; fails instead under ``ARENA_REQUIRE_COMPILED=1``)."""
    if offsets.compiled is None:
        reason = f"the compiled placement is not in use here: {offsets.WHY_PYTHON}"
        if REQUIRE_COMPILED and offsets.WHY_PYTHON != "ARENA_PURE_PYTHON is set":
            pytest.fail(f"ARENA_REQUIRE_COMPILED=1 but {reason}")
        pytest.skip(reason)
    return offsets.compiled


def _both(
    blocks: list[Block], monkeypatch: pytest.MonkeyPatch, module: Any, **kwargs: Any
) -> tuple[OffsetPlan, OffsetPlan]:
    """The plan with the compiled placement, then with the Python one."""
    with monkeypatch.context() as patch:
        patch.setattr(offsets, "compiled", module)
        fast = plan_offsets(blocks, **kwargs)
    with monkeypatch.context() as patch:
        patch.setattr(offsets, "compiled", None)
        slow = plan_offsets(blocks, **kwargs)
    return fast, slow


def _random_set(rng: random.Random, alignment: int) -> list[Block]:
    """Blocks of one of several shapes: short or long lives, sizes just around a unit of
    ``alignment`` or spread wide, some of zero bytes, uses near 2**63 - 1 or small."""
    n = rng.choice([1, 2, 5, 20, 60, 150])
    horizon = rng.choice([1, 3, n, 4 * n])
    span = rng.choice([0, 1, 5, max(1, horizon // 2), horizon])
    base = rng.choice([0, 0, MAX_BYTES - 2 * (horizon + span) - 1])
    unit = rng.choice([1, 2, 3])
    blocks = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.05:
            size = 0
        elif kind < 0.5:  # either side of a multiple of the alignment
            size = max(0, unit * alignment * rng.randint(1, 4) + rng.choice([-1, 0, 1]))
        else:
            size = rng.randint(1, 64 * alignment)
        first = base + rng.randint(0, horizon)
        blocks.append((size, first, first + rng.randint(0, span)))
    return blocks


@pytest.mark.parametrize("path", ["graph", "scan"])
def test_compiled_and_python_placement_give_the_same_plans(
    path: str, compiled: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every field of every plan, on 300 random sets per way of finding co-live blocks
    (``scan`` forces the scan of the placed blocks at any size, ``graph`` the conflict
    graph where it is small)."""
    if path == "scan":
        monkeypatch.setattr(offsets, "SPARSE_PAIRS", 0)
    rng = random.Random(31 if path == "graph" else 131)
    differ = 0
    for _ in range(300):
        alignment = rng.choice([16, 256, 1024, 2**30])
        blocks = _random_set(rng, alignment)
        fast, slow = _both(blocks, monkeypatch, compiled, alignment=alignment)
        assert fast == slow, (alignment, blocks)
        differ += fast.strategy != "size" or fast.moves > 0
    assert differ >= 10, differ  # the other orders and the search moves ran too


@pytest.mark.parametrize("path", ["graph", "scan"])
def test_compiled_and_python_placement_agree_in_any_order(
    path: str, compiled: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One placement in a random order, offset for offset, many blocks sharing offsets
    (all sizes one unit, blocks live at one index, so the scan's chunks split)."""
    if path == "scan":
        monkeypatch.setattr(offsets, "SPARSE_PAIRS", 0)
    rng = random.Random(7)
    for n in (1, 3, 50, 700, 2000):
        size = [256 * rng.choice([1, 1, 2, 7]) for _ in range(n)]
        first = [rng.randint(0, n // 4) for _ in range(n)]
        last = [f + rng.choice([0, 0, 1, n // 8]) for f in first]
        order = list(range(n))
        rng.shuffle(order)
        monkeypatch.setattr(offsets, "compiled", compiled)
        fast = offsets._Placer(size, first, last, np.int64)
        assert fast.compiled is compiled
        monkeypatch.setattr(offsets, "compiled", None)
        slow = offsets._Placer(size, first, last, np.int64)
        assert fast.sparse == slow.sparse
        if n >= 50:
            assert fast.sparse == (path == "graph" and n < 700)
        assert fast.cost == slow.cost
        assert fast.place(order) == slow.place(order), n


def test_sizes_past_int64_are_placed_in_python(
    compiled: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the aligned sizes sum past 2**63 - 1 the Python path places them, exactly."""
    blocks = [(2**62, 0, 1), (2**62, 1, 2), (2**62, 2, 3), (2**61, 0, 3)]
    fast, slow = _both(blocks, monkeypatch, compiled)
    assert fast == slow
    assert fast.total_bytes == 2**62 + 2**62 + 2**61
    monkeypatch.setattr(offsets, "compiled", compiled)
    assert offsets._Placer([2**62] * 3, [0] * 3, [0] * 3, object).compiled is None


def test_compiled_placement_refuses_bad_input(compiled: Any) -> None:
    def arrays(n: int) -> tuple[np.ndarray, ...]:
        return (
            np.arange(n, dtype=np.int64),
            np.full(n, 256, dtype=np.int64),
            np.zeros(n, dtype=np.int32),
            np.zeros(n, dtype=np.int32),
            np.zeros(n, dtype=np.int64),
        )

    order, size, first, last, out = arrays(3)
    assert compiled.place(order, size, first, last, out) == 768
    assert out.tolist() == [0, 256, 512]
    with pytest.raises(ValueError, match="one length"):
        compiled.place(order, size[:2], first, last, out)
    with pytest.raises(ValueError, match="4-byte signed integers"):
        compiled.place(order, size, first.astype(np.int64), last, out)
    with pytest.raises(ValueError, match="8-byte signed integers, got format 'd'"):
        compiled.place(order, size.astype(np.float64), first, last, out)
    with pytest.raises(ValueError, match="8-byte signed integers"):
        compiled.place(order.astype(np.uint64), size, first, last, out)
    with pytest.raises(ValueError, match="8-byte signed integers, got format 'B'"):
        compiled.place(order, bytes(24), first, last, out)
    with pytest.raises(ValueError, match=r"size\[1\] must be > 0"):
        compiled.place(order, np.array([256, 0, 256]), first, last, out)
    with pytest.raises(OverflowError, match="past 2\\*\\*63"):
        compiled.place(order, np.full(3, 2**62, dtype=np.int64), first, last, out)
    with pytest.raises(ValueError, match=r"order\[2\] = 0"):
        compiled.place(np.array([0, 1, 0]), size, first, last, out)
    with pytest.raises(ValueError, match=r"order\[0\] = 3"):
        compiled.place(np.array([3]), size, first, last, out)
    with pytest.raises(ValueError, match="first \\(1\\) must be <= last \\(0\\)"):
        compiled.place(order, size, np.array([0, 1, 0], dtype=np.int32), last, out)
    with pytest.raises(ValueError, match=r"first\[0\] must be >= 0"):
        compiled.place(order, size, np.array([-1, 0, 0], dtype=np.int32), last, out)
    readonly = out.copy()
    readonly.setflags(write=False)
    with pytest.raises((TypeError, BufferError, ValueError)):
        compiled.place(order, size, first, last, readonly)
    with pytest.raises(TypeError):
        compiled.place(order, size, first, last)
    # The conflict graph: each block's co-live blocks flat[bounds[i]:bounds[i + 1]].
    bounds, flat = np.array([0, 1, 2, 2], dtype=np.int64), np.array([1, 0], dtype=np.int64)
    assert compiled.place_graph(order, size, bounds, flat, out) == 512
    assert out.tolist() == [0, 256, 0]
    with pytest.raises(ValueError, match="bounds n \\+ 1"):
        compiled.place_graph(order, size, bounds[:3], flat, out)
    with pytest.raises(ValueError, match="past flat"):
        compiled.place_graph(order, size, np.array([0, 1, 3, 3]), flat, out)
    with pytest.raises(ValueError, match=r"flat\[1\] = 5"):
        compiled.place_graph(order, size, bounds, np.array([1, 5]), out)
    with pytest.raises(ValueError, match=r"order\[1\] = 0"):
        compiled.place_graph(np.array([0, 0]), size, bounds, flat, out)


def test_compiled_placement_keeps_refcounts_flat(compiled: Any) -> None:
    """Its arguments are borrowed and released: their reference counts do not move, on
    success or on a refused call."""
    n = 50
    args = (
        np.arange(n, dtype=np.int64),
        np.full(n, 256, dtype=np.int64),
        np.arange(n, dtype=np.int32),
        np.arange(n, dtype=np.int32) + 2,
        np.zeros(n, dtype=np.int64),
    )
    before = [sys.getrefcount(a) for a in args]
    for _ in range(100):
        compiled.place(*args)
        with pytest.raises(ValueError):
            compiled.place(args[0], args[1][:3], *args[2:])
    assert [sys.getrefcount(a) for a in args] == before


_DIGEST = """
import hashlib, random
from arena.planning import plan_offsets, offsets
rng = random.Random(5)
parts = [offsets.PLACE_PATH]
for n, span in ((300, 3), (300, 150), (3000, 1000)):
    blocks = [(rng.randint(1, 1 << 20), f, f + rng.randint(0, span))
              for f in (rng.randrange(n) for _ in range(n))]
    plan = plan_offsets(blocks)
    parts.append(repr((plan.offsets, plan.total_bytes, plan.strategy, plan.moves)))
print(parts[0], hashlib.sha256("|".join(parts[1:]).encode()).hexdigest())
"""


def test_plans_do_not_depend_on_hash_seeds_or_the_path() -> None:
    """The same plans under two PYTHONHASHSEEDs, and with ``ARENA_PURE_PYTHON=1`` (the
    Python placement) as without (the compiled one, where it is built)."""
    env = {k: v for k, v in os.environ.items() if k != "ARENA_PURE_PYTHON"}
    outputs = [
        subprocess.run(
            [sys.executable, "-c", _DIGEST],
            env={**env, "PYTHONHASHSEED": seed, **extra},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for seed, extra in (("1", {}), ("2", {}), ("3", {"ARENA_PURE_PYTHON": "1"}))
    ]
    assert outputs[0] == outputs[1]
    assert outputs[2][0] == "python"
    assert outputs[2][1] == outputs[0][1]
    if REQUIRE_COMPILED:
        assert offsets.compiled is not None or offsets.WHY_PYTHON == "ARENA_PURE_PYTHON is set"
    exists = importlib.util.find_spec("arena.planning._place") is not None
    assert outputs[0][0] == ("compiled" if exists else "python")


def test_compiled_placement_releases_the_gil(compiled: Any) -> None:
    """While one thread places, another runs Python: it sees the offsets half written,
    which it could never do if the placement held the GIL (the writes all happen inside
    the one call). A few tries, in case the scheduler never runs the watcher meanwhile."""
    n = 40_000  # all live at once: about n**2 / 2 comparisons, a fraction of a second
    args = (
        np.arange(n, dtype=np.int64),
        np.full(n, 256, dtype=np.int64),
        np.zeros(n, dtype=np.int32),
        np.zeros(n, dtype=np.int32),
    )
    for _ in range(5):
        out = np.full(n, -1, dtype=np.int64)
        worker = threading.Thread(target=compiled.place, args=(*args, out))
        worker.start()
        halfway = False
        while worker.is_alive() and not halfway:
            placed = int(np.count_nonzero(out >= 0))
            halfway = 0 < placed < n
        worker.join()
        assert out.tolist() == [256 * i for i in range(n)]
        if halfway:
            return
    pytest.fail("no placement was seen half done: the GIL seems held during the call")
