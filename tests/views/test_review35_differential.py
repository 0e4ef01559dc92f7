"""review35: the pure-Python first request (a growing placement remembered from its second
sighting) and the compiled path, on the same random streams of plain requests of new and
repeated structures that grow the slot, lock and unlock, on cached and uncached fronts,
poisoning or not: the same offsets, shapes, strides, dtypes, capacities, errors, the same
sharing of view objects between requests, and (poisoning) the same bytes."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.views import hit
from tests.conftest import need_compiled_hit

DTYPES = ["float32", "int32", "uint8", "float64"]


def _program(seed: int, length: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    pool: list[tuple[Any, ...]] = []  # structures and requests seen: repeated often
    ops: list[tuple[Any, ...]] = []
    scale = 1
    for _ in range(length):
        kind = rng.choices(["get", "try", "lock", "unlock"], [20, 3, 1, 1])[0]
        if pool and rng.random() < 0.5:
            specs = rng.choice(pool)
        else:
            if rng.random() < 0.3 and scale < 256:
                scale *= 2  # requests that outgrow the slot (at most ~1.5 MB a view)
            count = rng.randint(1, 3)
            specs = tuple(
                (
                    (
                        rng.randint(1, 6) * scale,
                        *(rng.randint(1, 6) for _ in range(rng.randint(0, 2))),
                    ),
                    rng.choice(DTYPES),
                )
                for _ in range(count)
            )
            if rng.random() < 0.2:  # the same structure, other sizes
                specs = tuple(((s[0][0] + 1, *s[0][1:]), s[1]) for s in specs)
            pool.append(specs)
        ops.append((kind, rng.choice(["numpy", "torch"]), rng.randrange(2), specs))
    return ops


def _attempt(call: Callable[[], Any]) -> Any:
    try:
        return ("ok", call())
    except Exception as error:
        return ("error", type(error).__name__, str(error))


def _run(path: str, ops: list[Any], cached: bool, poison: bool, mp: pytest.MonkeyPatch) -> Any:
    mp.setattr(hit, "HIT_PATH", path)
    record: list[Any] = []
    seen: dict[int, int] = {}  # id of a view object handed out -> the op that first did
    keep: list[Any] = []  # every view handed out stays alive: ids stay unique
    with Arena("cpu", framework="numpy", ubatches=2, poison=poison) as a:
        fronts = {n: a.front(n, cached=cached) for n in ("numpy", "torch")}
        for index, (kind, name, ubatch, specs) in enumerate(ops):
            if kind in ("lock", "unlock"):
                record.append(_attempt(getattr(a, kind)))
                continue
            front = fronts[name]
            with a.ubatch(ubatch):
                serve = front.get_simultaneous if kind == "get" else front.try_get_simultaneous
                outcome = _attempt(lambda: serve(*specs))  # noqa: B023
                block = front._select().buffer.allocation
            if outcome[0] == "ok" and outcome[1] is not None:
                views = outcome[1]
                base = 0 if block is None else block.ptr
                described = []
                for v in views:
                    arr = v.numpy() if hasattr(v, "numpy") else v
                    strides = tuple(v.stride()) if name == "torch" else v.strides
                    same = seen.setdefault(id(v), index)
                    content = bytes(np.ascontiguousarray(arr).view(np.uint8)) if poison else b""
                    described.append(
                        (
                            front.data_ptr(v) - base,
                            tuple(v.shape),
                            strides,
                            str(v.dtype),
                            same,
                            content,
                        )
                    )
                    keep.append(v)
                outcome = ("ok", described)
            record.append(outcome)
            stats = a.stats()
            record.append(("slots", [(s.capacity, s.growths) for s in stats.slots]))
    return record


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("poison", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_pure_and_compiled_first_requests_agree(
    seed: int, cached: bool, poison: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    need_compiled_hit()
    ops = _program(seed, 200)
    python = _run("python", ops, cached, poison, monkeypatch)
    compiled = _run("compiled", ops, cached, poison, monkeypatch)
    for index, (p, c) in enumerate(zip(python, compiled, strict=True)):
        assert p == c, f"seed {seed}, record {index}: op {ops[index // 2]}"
