"""The compiled step and scope hits compare a request with the one their memo noted
through a copy of it in a few machine words (``Signature`` in ``arena/planning/_region_hit.c``: the
dtype object and up to four dimensions below 2**32 of a one-view request), and the scope
hit takes the noted entry without probing its cache while the cache is unchanged. Both
are shortcuts to the same outcome: the compiled hit must serve exactly what the Python
path serves, for requests that differ from the noted one only in a dimension's value,
that have no signature (five dimensions, a dimension past 2**32, two views), or whose
dimension is an int subclass, and it must still take the hit for the repeats.
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from arena import Arena, ArenaLockedError
from arena.planning.scopes import Scope
from arena.planning.steps import Step
from arena.views import hit
from tests.counting import counting

F32 = "float32"


class Size(int):
    """An int subclass: equal to a plain int, never a plain request (the Python path)."""


#: Requests that share a dtype (and mostly a dimension count) with the first.
POOL: list[tuple[Any, ...]] = [
    (((4, 8), F32),),
    (((4, 9), F32),),  # one dimension's value differs
    (((8, 4), F32),),
    (((4, 8), "float16"),),  # another dtype
    (((2, 2, 2, 2, 2), F32),),  # five dimensions: no signature
    (((1 << 33, 0), F32),),  # a dimension past 2**32 (no bytes): no signature
    (((4, 8), F32), ((3,), "int32")),  # two views: no signature
    (((4, Size(8)), F32),),  # an int subclass: never a plain request
]


def _described(ws: Arena, views: list[Any], start: int) -> list[tuple[Any, ...]]:
    return [(ws.numpy.data_ptr(v) - start, v.shape, v.strides, v.dtype) for v in views]


def _program(seed: int) -> tuple[list[list[int]], list[tuple[int, list[int]]]]:
    """Runs to warm up (each a few requests) and the locked program: per run the warmed-up
    run whose step key it uses (its own, or another one's: a divergence) and its requests."""
    rng = random.Random(seed)
    warm = [[rng.randrange(len(POOL)) for _ in range(rng.randrange(1, 4))] for _ in range(4)]
    program = []
    for _ in range(12):
        key = rng.randrange(len(warm))
        run = warm[key] if rng.random() < 0.5 else warm[rng.randrange(len(warm))]
        program.append((key, run))
    return warm, program


def _play(ws: Arena, kind: str, key: int, run: list[int]) -> list[Any]:
    out: list[Any] = []
    try:
        with ws.numpy.step(f"memo {key}") if kind == "step" else ws.numpy.scope() as region:
            for index in run:
                views = region.get_simultaneous(*POOL[index])
                slot = region.slot
                assert slot is not None
                out.append(_described(ws, views, slot.buffer.allocation.ptr))
    except Exception as error:  # compared between the paths (the call site aside: the
        # counting wrapper of the compiled run is a frame of its own)
        out.append((type(error).__name__, re.sub(r"from '[^']*'", "from", str(error))))
    return out


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("kind", ["step", "scope"])
def test_compiled_and_pure_hits_agree_on_requests_near_the_noted_one(
    kind: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")
    warm, program = _program(seed)
    owner = Step if kind == "step" else Scope
    results = {}
    for path in ("compiled", "python"):
        monkeypatch.setattr(hit, "HIT_PATH", path)
        with Arena("cpu", framework="numpy") as ws:
            ws.reserve_bytes(1 << 16)
            for key, run in enumerate(warm):
                for _ in range(3):  # record, plan, replay
                    _play(ws, kind, key, run)
            ws.lock()
            python = counting(monkeypatch, owner, "_python_get")
            played = [_play(ws, kind, key, run) for _ in range(2) for key, run in program]
        results[path] = (played, python[0])
        monkeypatch.undo()
    assert results["compiled"][0] == results["python"][0]
    # The compiled hit served repeats itself (its memo's shortcut in use).
    requests = 2 * sum(len(run) for _, run in program)
    assert results["compiled"][1] < requests


def test_a_scope_request_one_dimension_off_the_noted_one_gets_views_of_its_own() -> None:
    """(4, 8), (4, 9) and (8, 4) remembered at the same top share a memo slot (its hash
    reads the first dimension, the dimension count and the dtype): each locked request
    gets views of its own shape, on the hit path in use."""
    shapes = [(4, 8), (4, 9), (8, 4)]
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        for shape in shapes * 3:
            with ws.numpy.scope() as s:
                s.get_simultaneous((shape, F32))
        ws.lock()
        for shape in [(4, 8)] * 3 + [(4, 9), (4, 8), (8, 4), (4, 8), (4, 9), (4, 9)]:
            with ws.numpy.scope() as s:
                (view,) = s.get_simultaneous((shape, F32))
            assert view.shape == shape


def test_a_step_request_one_dimension_off_the_noted_one_is_never_served_its_views() -> None:
    """A locked step whose request 0 was (4, 8) in its plan (served so, and noted by the
    compiled hit's memo): (8, 4) and (4, 8, 1) there get views of their own shape over the
    plan's bytes, and (4, 100), larger, diverges; never the (4, 8) views."""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        for _ in range(3):
            with ws.numpy.step("off") as st:
                st.get_simultaneous(((4, 8), F32))
        ws.lock()
        for shape in [(4, 8)] * 3 + [(8, 4), (4, 8), (4, 8, 1), (4, 8)]:
            with ws.numpy.step("off") as st:
                (view,) = st.get_simultaneous((shape, F32))
            assert view.shape == shape
        with pytest.raises(ArenaLockedError, match="diverges"), ws.numpy.step("off") as st:
            st.get_simultaneous(((4, 100), F32))
