"""A scope's repeated request is served from views remembered for the front's scopes at the
slot's top, compiled or in Python, with the same views the checked path builds
(issue 32 item 2)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaError, SpecError
from arena.planning.scopes import Scope
from arena.views import hit
from arena.views.builder import ViewBuilder
from tests.counting import counting
from tests.refcounts import assert_counts_flat

F32 = "float32"


def _describe(ws: Arena, framework: str, views: list[Any]) -> list[tuple[Any, ...]]:
    front = ws.front(framework)
    if framework == "torch":
        return [(front.data_ptr(v), tuple(v.shape), v.stride(), v.dtype) for v in views]
    return [(front.data_ptr(v), v.shape, v.strides, v.dtype) for v in views]


def _block(ws: Arena, framework: str) -> list[list[tuple[Any, ...]]]:
    """A block of two nested scopes, three requests."""
    front = ws.front(framework)
    dtype: Any = F32
    if framework == "torch":
        import torch

        dtype = torch.float32
    with front.scope() as outer:
        a = outer.get_simultaneous(((8, 64), dtype))
        b = outer.get_simultaneous(((8, 256), dtype), ((3, 5), "int32"))
        with front.scope() as inner:
            c = inner.get_simultaneous(((8, 64), dtype))
        return [_describe(ws, framework, views) for views in (a, b, c)]


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_repeated_scope_requests_take_the_hit_with_the_checked_path_s_views(
    hit_path: str, framework: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if framework == "torch":
        pytest.importorskip("torch")
    placed = counting(monkeypatch, ViewBuilder, "place")
    python = counting(monkeypatch, Scope, "_python_get")
    with Arena("cpu", framework=framework) as ws:
        ws.reserve_bytes(1 << 20)  # one buffer: the checked run's pointers stay valid
        _block(ws, framework)  # unlocked: the request log's bookkeeping, nothing kept
        ws.lock()
        placed[0] = 0
        checked = _block(ws, framework)
        assert placed[0] == 3  # the first locked sighting: the checked path, remembered
        placed[0] = python[0] = 0
        calls = ws.stats().calls
        for _ in range(3):
            assert _block(ws, framework) == checked  # pointers, shapes, strides, dtypes
        assert placed[0] == 0  # every repeated request took the hit
        assert ws.stats().calls == calls + 9  # and was counted
        if hit_path == "compiled":
            assert python[0] == 0  # served in C


def test_a_hit_accounts_like_the_checked_path(hit_path: str) -> None:
    """The slot's top, live bytes and the scope's end and held bytes after a hit are those
    the checked path leaves."""
    seen = []
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        for _ in range(2):
            with ws.scope() as s:
                s.get_simultaneous(((100,), F32))
                s.get_simultaneous(((7,), "int8"), ((3,), F32))
                slot = s.slot
                assert slot is not None
                seen.append((slot.stack.top, slot.stack.live, s.base, s.end, s.held))
            assert (slot.stack.top, slot.stack.live) == (0, 0)
    assert seen[0] == seen[1]


def test_the_same_request_at_the_same_top_from_other_counts_accounts_for_each(
    hit_path: str,
) -> None:
    """Scope A makes two requests from the slot's bottom; scope B, inside an outer scope
    holding the first request's bytes, makes the second at the same top with nothing
    held yet. The compiled hit reuses the last bookkeeping of a request only from the same
    counts: each run, hit or not, leaves the counts the first (checked) run left."""
    first, second = ((64,), F32), ((16,), F32)
    seen: list[tuple[int, ...]] = []
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        ws.lock()
        for _ in range(4):
            counts = []
            with ws.scope() as a:
                a.get_simultaneous(first)
                a.get_simultaneous(second)
                slot = a.slot
                assert slot is not None
                counts += [slot.stack.top, slot.stack.live, a.base, a.end, a.held]
            with ws.scope() as outer:
                outer.get_simultaneous(first)
                with ws.scope() as b:
                    b.get_simultaneous(second)  # the same top as a's second request
                    counts += [slot.stack.top, slot.stack.live, b.base, b.end, b.held]
                counts += [slot.stack.top, slot.stack.live, outer.end, outer.held]
            seen.append(tuple(counts))
    assert seen[1:] == seen[:1] * 3
    a_top, a_live, a_base, a_end, a_held, b_top, b_live, b_base, b_end, b_held = seen[0][:10]
    assert (a_top, a_live, a_base, a_end) == (b_top, b_live, 0, b_end)
    assert b_base == a_end - b_held > 0 and a_held == a_end  # the same top, other counts


def test_the_live_bytes_count_the_scopes_below_where_the_held_bytes_are_the_end(
    hit_path: str,
) -> None:
    """A scope at the slot's bottom holds its views' bytes up to its end; the compiled hit
    then installs the request's end as its held and live bytes where both are it. An outer
    scope whose held figure says it holds bytes (written here: no request makes that state)
    counts in the live bytes all the same, as RegionStack.settle counts them."""
    request = ((16,), F32)
    seen = []
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        with ws.scope() as big:
            big.get_simultaneous(((4096,), F32))  # LOAD covers what follows
        ws.lock()
        for _ in range(4):
            with ws.scope() as outer, ws.scope() as inner:
                outer.held = 64  # a figure no request made: counted below the inner scope
                inner.get_simultaneous(request)
                slot = inner.slot
                assert slot is not None
                seen.append((slot.stack.top, slot.stack.live, inner.end, inner.held))
                outer.held = 0
    assert seen[1:] == seen[:1] * 3
    top, live, end, held = seen[0]
    assert top == end == held > 0 and live == held + 64


def test_a_hit_is_refused_where_the_checked_path_must_run(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new top, a float dimension, a grown buffer and an outer scope's request while an
    inner one is open all take the checked path."""
    placed = counting(monkeypatch, ViewBuilder, "place")
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 12)
        ws.lock()  # unlocked, the request log's bookkeeping takes every request
        with ws.scope() as s:
            s.get_simultaneous(((16,), F32))
        with ws.scope() as s:
            placed[0] = 0
            s.get_simultaneous(((16,), F32))
            assert placed[0] == 0
            with pytest.raises(SpecError):
                s.get_simultaneous(((16.0,), F32))
            s.get_simultaneous(((16,), F32))  # at a new top: checked, then remembered
            assert placed[0] == 1
            with ws.scope(), pytest.raises(ArenaError, match="innermost"):
                s.get_simultaneous(((16,), F32))
        ws.unlock()
        ws.reserve_bytes(1 << 20)  # a new buffer: nothing remembered over it
        ws.lock()
        placed[0] = 0
        for _ in range(2):
            with ws.scope() as s:
                s.get_simultaneous(((16,), F32))
        assert placed[0] == 1


def test_a_scope_inside_a_step_keeps_telling_the_step_its_reach(hit_path: str) -> None:
    """With a step open below, the hit still raises the step's reach (Python serves it)."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(4):
            with ws.step("layer") as st:
                (x,) = st.get_simultaneous(((64,), F32))
                with ws.scope() as s:
                    s.get_simultaneous(((1024,), F32))
                (y,) = st.get_simultaneous(((64,), F32))
                assert ws.numpy.data_ptr(y) != ws.numpy.data_ptr(x)
        ws.lock()
        with ws.step("layer") as st:
            st.get_simultaneous(((64,), F32))
            with ws.scope() as s:
                s.get_simultaneous(((1024,), F32))
            st.get_simultaneous(((64,), F32))


def test_the_compiled_scope_hit_keeps_reference_counts_flat() -> None:
    if hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")
    specs = (((8, 64), F32), ((5,), "int32"))
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        ws.lock()
        with ws.scope() as s:
            s.get_simultaneous(*specs)  # checked, remembered
        with ws.scope() as s:
            slot = s.slot
            assert slot is not None
            buffer = slot.buffer
            cache = buffer.prepared["numpy/scope"]  # the numpy front's scopes
            entry = cache[0, specs]
            watched = (specs, specs[0], F32, buffer, cache, entry, entry.views, entry.required)
            top = slot.stack.top

            def hits() -> None:
                for _ in range(20_000):
                    s.get_simultaneous(*specs)
                    slot.stack.top = s.end = top  # the same top again: a hit every time
                    s.held = 0
                    slot.stack.live = 0

            assert_counts_flat(watched, hits)


# ------------------------------------------------------------------ differential

_POOL: list[Any] = [
    (((16,), F32),),
    (((8, 64), F32), ((3,), "int32")),
    (((8, 64), np.float32),),
    (((8, 64), np.dtype(np.float32)),),
    (((4, 4, 4), "float16"), ((1,), "int8"), ((0,), F32)),
    # The plain requests above, the others below.
    (((16.0,), F32),),  # a float dimension: refused
    (((True, 4), F32),),  # a bool dimension: refused
    (([16], F32),),  # list shape: served, never remembered
    (((-1,), F32),),  # negative: refused
    (((1 << 20,), F32),),  # grows while warming up, refused once locked
]


_PLAIN = 5


def _program(rng: random.Random) -> list[Any]:
    ops: list[Any] = []
    depth = 0
    for _ in range(rng.randrange(4, 16)):
        roll = rng.random()
        if roll < 0.25 and depth < 3:
            ops.append("open")
            depth += 1
        elif roll < 0.4 and depth:
            ops.append("close")
            depth -= 1
        elif depth:
            ops.append(rng.randrange(len(_POOL)))
    return ops + ["close"] * depth


def _play(ws: Arena, ops: list[Any]) -> list[Any]:
    out: list[Any] = []
    stack: list[Any] = []
    for op in ops:
        if op == "open":
            stack.append(ws.numpy.scope())
            stack[-1].__enter__()
        elif op == "close":
            stack.pop().__exit__(None, None, None)
        else:
            try:
                views = stack[-1].get_simultaneous(*_POOL[op])
                start = stack[-1].slot.buffer.allocation.ptr  # growth moves buffers
            except Exception as error:  # compared between the paths
                out.append((type(error).__name__, str(error)))
            else:
                out.append(
                    [(ws.numpy.data_ptr(v) - start, v.shape, v.strides, v.dtype) for v in views]
                )
    slot = ws.stats().slots[0]
    out.append((slot.calls, slot.capacity, slot.load))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_compiled_and_pure_scopes_agree_on_random_programs(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")
    ops = _program(random.Random(seed))
    results = {}
    for path in ("compiled", "python"):
        monkeypatch.setattr(hit, "HIT_PATH", path)
        python = counting(monkeypatch, Scope, "_python_get")
        with Arena("cpu", framework="numpy") as ws:
            played = [_play(ws, ops) for _ in range(2)]
            ws.lock()
            played += [_play(ws, ops) for _ in range(2)]
        results[path] = (played, python[0])
        monkeypatch.undo()
    assert results["compiled"][0] == results["python"][0]
    requests = sum(1 for op in ops if isinstance(op, int))
    plain = sum(1 for op in ops if isinstance(op, int) and op < _PLAIN)
    # The second locked run's plain requests, remembered by the first, are served in C.
    assert results["compiled"][1] <= 4 * requests - plain
