"""The compiled and the pure-Python hit paths, driven by the same random stream, hand out
the same views and raise the same errors (issue 27 item 7).

One seeded program of plain requests, ``try_get_simultaneous``, scopes, steps, torch and
NumPy fronts, two micro-batches, lock and unlock, and odd dimensions (valid integer-likes
and invalid ones) runs once per path on a fresh arena; every outcome is recorded as each
view's offset from its slot's buffer, shape, strides and dtype, or the error's type and
message, and the two records must be equal.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.front import CompiledFront
from arena.views import hit
from tests.conftest import need_compiled_hit

SHAPES: list[tuple[Any, ...]] = [(4, 8), (16,), (), (3, 5, 2), (0, 7), (1, 64)]
DTYPES = ["float32", "int32", "uint8"]


def _odd(rng: random.Random, dim: int) -> Any:
    """A stand-in for ``dim``: mostly one that hashes and compares like it (so the request
    finds a remembered one and only the exact-int test tells them apart), else invalid."""
    torch = pytest.importorskip("torch")
    alike = [float(dim), np.int64(dim), torch.tensor(dim), np.array(dim)]
    if dim in (0, 1):
        alike += [bool(dim), np.bool_(dim)]
    invalid = [-1, torch.tensor([2]), np.array([2]), "4", None, 2**70, 2.5]
    return rng.choice(alike) if rng.random() < 0.7 else rng.choice(invalid)


def _spec(rng: random.Random) -> tuple[Any, str]:
    shape: Any = rng.choice(SHAPES)
    if shape and rng.random() < 0.25:
        dims = list(shape)
        axis = rng.randrange(len(dims))
        dims[axis] = _odd(rng, dims[axis])
        shape = tuple(dims)
    return shape, rng.choice(DTYPES)


def _program(seed: int, length: int) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    ops: list[tuple[Any, ...]] = []
    for _ in range(length):
        kind = rng.choices(["get", "try", "scope", "step", "lock", "unlock"], [10, 3, 2, 3, 1, 1])[
            0
        ]
        front = rng.choice(["numpy", "torch"])
        ubatch = rng.randrange(2)
        specs = [tuple(_spec(rng) for _ in range(rng.randint(1, 3))) for _ in range(2)]
        ops.append((kind, front, ubatch, rng.choice(["s0", "s1"]), specs))
    return ops


def _describe(a: Arena, front: Any, views: Any) -> Any:
    if views is None:
        return None
    allocation = front._select().buffer.allocation  # None: only zero-size views so far
    base = allocation.ptr if allocation is not None else 0
    out = []
    for v in views:
        strides = tuple(v.stride()) if hasattr(v, "stride") and callable(v.stride) else v.strides
        # A zero-size view has no bytes: frameworks report any address for it.
        offset = front.data_ptr(v) - base if 0 not in tuple(v.shape) else None
        out.append((offset, tuple(v.shape), tuple(strides), str(v.dtype)))
    return out


def _attempt(call: Callable[[], Any]) -> Any:
    try:
        return ("ok", call())
    except Exception as error:  # the outcome compared between paths
        return ("error", type(error).__name__, str(error))


def _run(path: str, ops: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(hit, "HIT_PATH", path)
    record: list[Any] = []
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        fronts = {"numpy": a.numpy, "torch": a.torch}
        for front in fronts.values():  # the path under test serves these fronts' hits
            assert (type(front) is CompiledFront) == (path == "compiled")
        for kind, name, ubatch, key, specs in ops:
            front = fronts[name]
            if kind == "lock":
                record.append(_attempt(a.lock))
                continue
            if kind == "unlock":
                record.append(_attempt(a.unlock))
                continue
            with a.ubatch(ubatch):

                def one(serve: Callable[..., Any], spec: tuple[Any, ...]) -> Any:
                    outcome = _attempt(lambda: serve(*spec))
                    if outcome[0] == "ok":
                        return ("ok", _describe(a, front, outcome[1]))  # noqa: B023
                    return outcome

                if kind == "get":
                    record.append(one(front.get_simultaneous, specs[0]))
                elif kind == "try":
                    record.append(one(front.try_get_simultaneous, specs[0]))
                else:
                    opened = front.scope() if kind == "scope" else front.step(key)

                    def inside(opened: Any = opened, specs: Any = specs) -> list[Any]:
                        with opened as region:
                            return [one(region.get_simultaneous, s) for s in specs]

                    record.append(_attempt(inside))
        record.append(("stats", a.stats().live_bytes, [s.capacity for s in a.stats().slots]))
    return record


@pytest.mark.parametrize("seed", range(8))
def test_both_hit_paths_agree_on_a_random_stream(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    need_compiled_hit()
    ops = _program(seed, 300)
    python = _run("python", ops, monkeypatch)
    compiled = _run("compiled", ops, monkeypatch)
    assert len(python) == len(compiled)
    for index, (p, c) in enumerate(zip(python, compiled, strict=True)):
        assert p == c, f"seed {seed}, op {index} {ops[index] if index < len(ops) else ''}"
    kinds = {outcome[0] for outcome in python}
    assert {"ok", "error"} <= kinds  # the stream reached both outcomes


def _nested_program(seed: int, length: int) -> list[tuple[Any, ...]]:
    """Scopes and steps nested in each other (the stream above opens one at a time),
    requests in the innermost, a step's releases, plain requests inside them, locked
    for the most part (unlocked, the request log takes every scope request to Python):
    a few region trees repeated, so replays and remembered scope requests hit."""
    rng = random.Random(seed)
    shapes = [(4, 8), (16,), (3, 5, 2), (0, 7), (1, 64), (100,), (33,)]

    def specs() -> tuple[Any, ...]:
        return tuple((rng.choice(shapes), rng.choice(DTYPES)) for _ in range(rng.randint(1, 3)))

    def tree(depth: int) -> list[tuple[Any, ...]]:
        ops: list[tuple[Any, ...]] = [(rng.choice(["scope", "step"]), rng.choice("ab"))]
        for _ in range(rng.randint(1, 5)):
            r = rng.random()
            if r < 0.2 and depth < 3:
                ops += tree(depth + 1)
            elif r < 0.35:
                ops.append(("release", rng.random()))
            elif r < 0.4:
                ops.append(("get", specs()))
            else:
                ops.append(("request", specs()))
        return [*ops, ("close",)] if rng.random() < 0.97 else ops  # some left open

    trees = [tree(0) for _ in range(4)]
    ops: list[tuple[Any, ...]] = []
    while len(ops) < length:
        r = rng.random()
        ops += [("lock",)] if r < 0.05 or (len(ops) > length // 3 and r < 0.3) else []
        ops += [("unlock",)] if 0.05 <= r < 0.065 else []
        ops += [("close_all",)] if 0.065 <= r < 0.08 else rng.choice(trees)
    return ops


def _run_nested(path: str, ops: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(hit, "HIT_PATH", path)
    record: list[Any] = []
    with Arena("cpu", framework="numpy") as a:
        front = a.numpy
        stack = front._select().stack
        opened: list[tuple[Any, Any, list[Any]]] = []  # (block, region, its views)
        for op in ops:
            kind = op[0]
            if kind in ("lock", "unlock"):
                record.append(_attempt(getattr(a, kind)))
            elif kind in ("scope", "step") and len(opened) < 6:
                block = front.scope() if kind == "scope" else front.step(op[1])
                outcome = _attempt(block.__enter__)
                record.append(outcome[0] if outcome[0] == "ok" else outcome)
                if outcome[0] == "ok":
                    opened.append((block, outcome[1], []))
            elif kind in ("request", "get") and (opened or kind == "get"):
                region, views = (opened[-1][1:]) if kind == "request" else (front, [])
                outcome = _attempt(lambda: region.get_simultaneous(*op[1]))  # noqa: B023
                if outcome[0] == "ok":
                    views += outcome[1]
                    outcome = ("ok", _describe(a, front, outcome[1]))
                record.append(outcome)
            elif kind == "release":
                # The innermost step's view, with scopes or steps open inside it or not.
                steps = [(r, v) for _, r, v in opened if hasattr(r, "release") and v]
                if steps:
                    step, views = steps[-1]
                    view = views.pop(int(op[1] * len(views)))
                    record.append(_attempt(lambda: step.release(view)))  # noqa: B023
            elif kind in ("close", "close_all"):
                while opened:
                    block = opened.pop()[0]
                    record.append(_attempt(lambda: block.__exit__(None, None, None)))  # noqa: B023
                    if kind == "close":
                        break
            held = sum(region.held for region in stack.regions)
            assert stack.live == held, f"{path}: the stack's live bytes, after {op}"
            record.append(("live", held, a.stats().live_bytes))
        while opened:
            opened.pop()[0].__exit__(None, None, None)
    return record


@pytest.mark.parametrize("seed", range(6))
def test_both_hit_paths_agree_on_nested_scopes_and_steps(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_compiled_hit()
    ops = _nested_program(seed, 150)
    records = []
    for path in ("python", "compiled"):
        with warnings.catch_warnings(record=True) as caught:  # a step entered at two heights
            warnings.simplefilter("always")
            record = _run_nested(path, ops, monkeypatch)
        records.append((record, [str(w.message) for w in caught]))
    python, compiled = records
    assert python == compiled
    outcomes = {entry if isinstance(entry, str) else entry[0] for entry in python[0]}
    assert {"ok", "live"} <= outcomes
