"""Mutation round 13c (issue 26 item 12): the planning layer's sampled survivors.

``Step``'s binding to the compiled region hits (``_bind_compiled``) runs once, at import,
and only where ``arena.planning._region_hit`` is built: mutmut's runs, on the pure-Python
path, never reach it. The test here calls it again with the extension stood in for, so
it runs on any build and on both hit paths.
"""

from __future__ import annotations

from threading import RLock
from types import SimpleNamespace
from typing import Any

import pytest

from arena import Arena
from arena.planning import steps
from arena.planning.books import StepBooks
from arena.planning.records import StepBook
from arena.planning.runs import StepRun
from arena.slots.governor import Governor
from arena.slots.slot import Slot
from arena.views.builder import ViewBuilder

F32 = "float32"


def test_the_compiled_steps_are_bound_to_two_steps_made_from_seven_marks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[Any, ...]] = []

    def bind_steps(*args: Any) -> int:
        calls.append(args)
        return 1

    monkeypatch.setattr(steps, "compiled", SimpleNamespace(bind_steps=bind_steps))
    assert steps._bind_compiled(read_rlocks=False) is True
    assert len(calls) == 1
    args = calls[0]
    kinds = (StepBook, ViewBuilder, type(RLock()), Slot, Governor)
    assert args[:8] == (steps.Step, StepRun, *kinds[:1], StepBooks, *kinds[1:])
    assert args[8] is steps._ENDED
    runs, made, marks, read_rlocks = args[9:]
    assert read_rlocks is False
    assert len(runs) == 2 and all(type(run) is StepRun for run in runs)
    assert runs[0] is not runs[1]
    assert len(marks) == 7
    placer, select, key, alignment, poison, debug, fresh = marks
    assert len(made) == 2 and made[0] is not made[1]
    for step in made:  # each argument lands in its own field: the C side finds them so
        assert type(step) is steps.Step
        assert step._placer is placer
        assert step._select is select
        assert step.key is key
        assert step._alignment is alignment
        assert step._poison is poison
        assert step._debug is debug
        assert step._fresh_view is fresh


def test_an_interrupt_while_a_replay_turns_to_recording_leaves_no_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replayed request that leaves the plan (a larger view) turns the run into a
    recording; an interrupt before the switch is stored (here in ``StepRun.adopt``),
    caught inside the step, and the step exited normally: the run is broken, no record
    (``book.ran`` not called, its run count unchanged). Slip (``_diverge`` #15, the
    run not marked broken first): the half-switched run counted as a finished replay."""
    interrupts: list[int] = []

    def interrupted(self: StepRun, *args: Any) -> None:
        interrupts.append(1)
        raise KeyboardInterrupt("before the run adopted the plan's blocks")

    with Arena("cpu", framework="numpy") as ws:
        for _ in range(2):  # a recording, then a replay
            with ws.step("leaves") as st:
                st.get_simultaneous(((8,), F32))
                st.get_simultaneous(((16,), F32))
        book = st._book
        assert book is not None
        runs = book.runs
        monkeypatch.setattr(StepRun, "adopt", interrupted)
        with ws.step("leaves") as st:
            assert st.replay
            st.get_simultaneous(((8,), F32))
            with pytest.raises(KeyboardInterrupt):
                st.get_simultaneous(((4096,), F32))  # larger than planned: diverges
        assert interrupts == [1]
        assert book.runs == runs
