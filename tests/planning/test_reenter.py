"""A scope or step object entered again after it exited: each entry is a new block (a
scope) or a new run of its key (a step), as ``ws.scope()`` or ``ws.step(key)`` made anew
would be, on both hit paths and in debug mode (docs/planning.md: only entering one while
it is open is misuse)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaError

F32 = "float32"


def _state(slot: Any) -> Any:
    return (slot.stack.top, slot.stack.live, slot.load, len(slot.stack.regions))


def _program(ws: Arena, reuse: bool) -> list[Any]:
    """Scopes and steps entered three times each: the same objects, or new ones."""
    front = ws.numpy
    slot = front._select()
    seen: list[Any] = []
    # Offsets from the slot's block: two arenas' blocks lie at addresses of their own.
    base = slot.buffer.allocation.ptr

    def at(view: Any) -> int:
        return front.data_ptr(view) - base

    scope, step = front.scope(), front.step("k")
    for _ in range(3):
        if not reuse:
            scope, step = front.scope(), front.step("k")
        with front.scope() as outer:
            (keep,) = outer.get_simultaneous(((32,), F32))
            with scope as s:
                assert s is scope
                a, b = s.get_simultaneous(((64,), F32), ((8,), "int8"))
                seen.append((at(a), at(b), _state(slot)))
            seen.append(_state(slot))
        with step as st:
            assert st is step
            (x,) = st.get_simultaneous(((128,), F32))
            (y,) = st.get_simultaneous(((16,), F32))
            st.release(x)
            (z,) = st.get_simultaneous(((16,), F32))
            seen.append(([at(v) for v in (x, y, z)], _state(slot), st.replay))
        seen.append(_state(slot))
        del keep
    assert (slot.stack.top, slot.stack.live, slot.stack.regions) == (0, 0, [])
    return seen


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_a_scope_or_step_entered_again_acts_as_a_new_one(hit_path: str, debug: bool) -> None:
    runs = []
    for reuse in (False, True):
        with Arena("cpu", framework="numpy", debug=debug) as ws:
            ws.reserve_bytes(1 << 14)
            first = _program(ws, reuse)
            ws.lock()
            runs.append((first, _program(ws, reuse), ws.stats().slots[0].growths))
    assert runs[0] == runs[1]


def test_both_hit_paths_agree_on_entering_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from arena.views import hit
    from tests.conftest import need_compiled_hit

    need_compiled_hit()
    out = []
    for path in ("compiled", "python"):
        monkeypatch.setattr(hit, "HIT_PATH", path)
        with Arena("cpu", framework="numpy") as ws:
            ws.reserve_bytes(1 << 14)
            base = ws.numpy.data_ptr(ws.get_simultaneous(((1,), F32))[0])
            seen = _program(ws, reuse=True)
            out.append([_relative(item, base) for item in seen])
    assert out[0] == out[1]


def _relative(item: Any, base: int) -> Any:
    if isinstance(item, tuple) and item and isinstance(item[0], list):
        return ([p - base for p in item[0]], *item[1:])
    if isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], int):
        return (item[0] - base, item[1] - base, item[2])
    return item


def test_entering_while_open_is_still_refused_on_both_hit_paths(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        scope = ws.scope()
        with scope, pytest.raises(ArenaError, match="already open; make a new one"):
            scope.__enter__()
        with scope:  # and after the refusal, entered again once it exited
            (v,) = scope.get_simultaneous(((4,), F32))
            v[...] = 1.0
            assert np.all(v == 1.0)
        step = ws.step("s")
        with step, pytest.raises(ArenaError, match="already running; make a new"):
            step.__enter__()
        with step:
            step.get_simultaneous(((4,), F32))
