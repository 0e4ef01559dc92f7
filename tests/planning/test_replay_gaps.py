"""Gaps a planted-bug review (plant33) found in steps' and scopes' replay paths: each
test fails on one realistic slip in the code (named in its docstring) and passes on the
real code."""

from __future__ import annotations

import threading

from arena import Arena, SlotError

F32 = "float32"


def _intrude(ws: Arena) -> list[BaseException]:
    errors: list[BaseException] = []

    def intruder() -> None:
        try:
            ws.get_simultaneous(((4,), F32))  # same slot: micro-batch 0
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=intruder, name="intruder")
    thread.start()
    thread.join(10)
    return errors


def test_debug_mode_holds_the_slot_through_a_locked_replay_of_a_step() -> None:
    """Debug mode: a locked replay of a planned step holds its slot like any step, so
    another thread's request on it is named (slip: the lean replay enter, which skips
    ``slot.enter()``, taken in debug mode too)."""
    with Arena("cpu", framework="numpy", debug=True) as ws:
        for _ in range(2):  # record, then plan
            with ws.step("layer") as s:
                s.get_simultaneous(((64,), F32))
        ws.lock()
        for _ in range(2):
            with ws.step("layer") as s:
                s.get_simultaneous(((64,), F32))
                errors = _intrude(ws)
                assert len(errors) == 1 and isinstance(errors[0], SlotError)
                assert "intruder" in str(errors[0])
            assert _intrude(ws) == []  # the step closed: the slot is free again


def test_a_locked_replay_on_a_micro_batch_that_never_ran_the_step_raises_its_load() -> None:
    """lock() gives ubatch 1 the plan ubatch 0 recorded; its first locked replay holds the
    plan's LOAD, and the slot's ``load`` (``stats()``, ``capacity / load``) says so
    (slip: the lean replay enter leaving out ``note_load``)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        for _ in range(2):  # record, then plan, on ubatch 0 only
            with ws.ubatch(0), ws.step("layer") as s:
                s.get_simultaneous(((1000,), F32))
        ws.lock()
        assert ws.stats().slots[1].load == 0
        with ws.ubatch(1), ws.step("layer") as s:
            s.get_simultaneous(((1000,), F32))
        stats = ws.stats().slots
        assert stats[1].load == stats[0].load > 0
