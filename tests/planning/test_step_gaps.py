"""Gaps in step planning that planted bugs survived (issue 26, item 12): each test fails
with the bug planted (seen), passes without it."""

from __future__ import annotations

import warnings

from arena import Arena, ArenaWarning
from tests.gates import Probe
from tests.sources import RecordingSource, check_books
from tests.stepping import F32, layer


def _nested(ws: Arena) -> None:
    """Three nested steps whose plan (52224 bytes) is smaller than their first fit."""
    with ws.step("k0"), ws.step("k1"), ws.step("k2") as st:
        a, _ = st.get_simultaneous(((1000,), F32), ((10000,), F32))
        st.release(a)
        st.get_simultaneous(((3000,), F32))


def test_plan_steps_does_not_move_a_buffer_a_cuda_graph_captured() -> None:
    """plan_steps() would bring the slot from its first fit (56320 bytes) to the plan's
    52224, on a new buffer; a graph captured a request on the old one and replays its
    pointers: the slot keeps it. (Planted: Slot.fit without its ``captured`` check, or
    fit_to_plans sizing every slot: the buffer moved, the old one retired.)"""
    probe = Probe()
    source = RecordingSource()
    with Arena(source=source, framework="numpy", capture_probe=probe) as ws:
        _nested(ws)
        _nested(ws)
        (view,) = ws.get_simultaneous(((16,), F32))
        probe.capturing = True
        (captured,) = ws.get_simultaneous(((16,), F32))  # the graph reads these bytes
        probe.capturing = False
        pointer = int(captured.ctypes.data)
        assert ws.stats().slots[0].capacity == 56320
        events = len(source.events)
        ws.plan_steps()
        slot = ws.stats().slots[0]
        assert (slot.capacity, slot.retired_buffers) == (56320, 0)
        (again,) = ws.get_simultaneous(((16,), F32))
        assert int(again.ctypes.data) == pointer
        assert source.events[events:] == []  # nothing allocated, nothing released
        check_books(ws, source)
        del view


def test_a_micro_batch_that_missed_warm_up_first_in_its_lane_gets_the_merged_plan() -> None:
    """Micro-batch 0 never ran "layer"; 1 ran it at 100 tokens, 2 at 200. lock() merges
    1's and 2's books into one plan of the largest sizes and copies it to 0, which comes
    first in the lane: before 1 and 2 have taken the merged plan. (Planted: the copy made
    from the first planned book instead of the merged one: micro-batch 0 replays 1's plan
    of 100 tokens and its run of 200 is refused.)"""
    with Arena("cpu", framework="numpy", ubatches=3) as ws:
        for ubatch, tokens in ((1, 100), (2, 200)):
            with ws.ubatch(ubatch):
                layer(ws, tokens)
                layer(ws, tokens)
        ws.lock()
        allocations = ws.stats().allocations
        for ubatch in (0, 1, 2):
            with ws.ubatch(ubatch):
                first = layer(ws, 200)  # a locked run refused raises ArenaLockedError
                assert layer(ws, 200) == first
        assert ws.stats().allocations == allocations


def test_a_step_run_at_two_heights_is_sized_for_the_higher() -> None:
    """ "k" runs inside a scope of 4 KiB (starting at byte 4096), then outside it (at 0):
    plan_steps() sizes the slot for its plan at the highest start it ran at, so the run
    inside the scope replays without growing, locked too. (Planted: the book's base set
    to the last start instead of the highest: the slot shrinks to 4096 and the locked run
    inside the scope is refused.)"""
    with Arena("cpu", framework="numpy") as ws, warnings.catch_warnings():
        warnings.simplefilter("ignore", ArenaWarning)  # the other height is warned of

        def program(scoped: bool) -> None:
            with ws.scope() as scope:
                if scoped:
                    scope.get_simultaneous(((1024,), F32))
                layer(ws, 16, key="k")

        program(True)
        program(False)
        program(False)
        ws.plan_steps()
        growths = ws.stats().slots[0].growths
        program(True)
        assert ws.stats().slots[0].growths == growths
        ws.lock()
        program(True)
        program(False)


def test_a_step_reentered_above_one_opened_inside_it_exits(hit_path: str) -> None:
    """Step "a" closed before step "b" opened inside it (out of order), then entered
    again above "b": each names the other as the step it runs inside. "b"'s recording
    exit walks to the outermost such step, and ends (it looped forever on the cycle); both
    then close, leaving the slot empty. A hang is stopped by an alarm, not waited out."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise TimeoutError("a step exit looped on steps nested in each other")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(30)
    try:
        with Arena("cpu", framework="numpy") as ws, warnings.catch_warnings():
            warnings.simplefilter("ignore", ArenaWarning)
            slot = ws.numpy._select()
            a, b = ws.step("a"), ws.step("b")
            a.__enter__()
            b.__enter__()
            assert b.nested is a
            a.__exit__(None, None, None)  # out of order: "b" stays open
            a.__enter__()  # above "b", inside it
            assert a.nested is b and b.nested is a
            b.__exit__(None, None, None)
            assert slot.stack.regions == [a]
            a.__exit__(None, None, None)
            assert slot.stack.regions == [] and (slot.stack.top, slot.stack.live) == (0, 0)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
