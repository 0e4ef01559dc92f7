"""The usual replay (locked, nothing open on the slot, at its plan's height) enters and
exits by lean paths (``Step._replay_locked``, ``Step._end_replay``), with the outcome of
the checked ones: the same pointers, the same slot and book state after every run."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena
from arena.planning.records import StepBook
from arena.planning.steps import Step

F32 = "float32"


def _program(ws: Arena, log: list[Any]) -> Any:
    """Replays of two keys, releases, a step run inside another, a scope inside a step,
    and a step entered inside a scope (the checked paths); returns the slot."""
    with ws.step("a") as st:
        slot = st.slot
        x, y = st.get_simultaneous(((64,), F32), ((32,), F32))
        st.release(x)
        with ws.step("inner") as inner:
            (z,) = inner.get_simultaneous(((16,), F32))
            log.append(ws.numpy.data_ptr(z))
        with ws.scope() as sc:
            (w,) = sc.get_simultaneous(((8,), F32))
            log.append(ws.numpy.data_ptr(w))
        (v,) = st.get_simultaneous(((48,), F32))
        log.append([ws.numpy.data_ptr(t) for t in (x, y, v)])
    with ws.step("b") as st:
        (u,) = st.get_simultaneous(((128,), F32))
        log.append(ws.numpy.data_ptr(u))
    with ws.scope() as sc:
        sc.get_simultaneous(((8,), F32))
        with ws.step("c") as st:
            (u,) = st.get_simultaneous(((128,), F32))
            log.append(ws.numpy.data_ptr(u))
    return slot


def _state(slot: Any) -> Any:
    books = {
        key: tuple((name, getattr(book, name)) for name in StepBook.__slots__ if name != "found")
        for key, book in slot.steps.items()
    }
    return (slot.top, slot.live, slot.load, slot.detour, slot.calls, slot.regions, books)


def _run(lean: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[int]]:
    taken = [0, 0]
    replay, end = Step._replay_locked, Step._end_replay

    def enter(self: Step[Any], slot: Any, book: Any) -> Any:
        taken[0] += 1
        return replay(self, slot, book) if lean else Step._enter_checked(self, slot, book)

    def leave(self: Step[Any], slot: Any, run: Any, book: Any) -> None:
        taken[1] += 1
        if lean:
            end(self, slot, run, book)
        else:
            Step._exit_checked(self, slot, run, book, None)

    monkeypatch.setattr(Step, "_replay_locked", enter)
    monkeypatch.setattr(Step, "_end_replay", leave)
    log: list[Any] = []
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        origin = ws.numpy.data_ptr(ws.numpy.get_simultaneous(((1,), F32))[0])
        for run in range(5):
            if run == 3:
                ws.lock()
            ptrs: list[Any] = []
            slot = _program(ws, ptrs)
            log.append((run, repr(ptrs).replace(str(origin), "0"), _state(slot)))
    monkeypatch.undo()
    return log, taken


def test_the_lean_replay_paths_leave_what_the_checked_ones_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lean, taken = _run(True, monkeypatch)
    checked, _ = _run(False, monkeypatch)
    assert lean == checked
    # Entered lean: "a" and "b" of the two locked runs (not "inner", nor "c" in a
    # scope); ended lean: theirs, and those of the two unlocked replays before lock().
    assert taken == [4, 8]
