"""What Round 17a of the mutation tests found the suite let through in ``arena/slots/slot.py``
and ``arena/slots/table.py`` (issue 26 item 12); each test names the mutants it kills
(mutmut's numbers on the round's sources commit)."""

from __future__ import annotations

from arena import Arena

F32 = "float32"


def test_a_growth_in_place_on_a_fixed_address_source_is_counted() -> None:
    # Slot._grow #39 (`self._commit(capacity, count=None)`): a growth committed in place
    # (source='virtual') was not counted, so stats() showed 0 growths for a slot that grew
    # twice (and a locked refusal would say it was "never sized during warm-up").
    with Arena("cpu", framework="numpy", source="virtual", profile=False) as a:
        a.get_simultaneous(((100,), F32))
        a.get_simultaneous(((1 << 20,), F32))
        assert a.stats().slots[0].growths == 2


def _record_a_wasteful_step(a: Arena) -> None:
    # The recording's first-fit order wastes bytes that the plan does not need.
    with a.step("s") as st:
        (x,) = st.get_simultaneous(((100,), F32))
        (y,) = st.get_simultaneous(((1000,), F32))
        st.release(x)
        st.get_simultaneous(((200,), F32))
        st.release(y)
        st.get_simultaneous(((1000,), F32))


def test_planning_leaves_a_buffer_that_a_capture_used_at_its_size() -> None:
    # Slot.fit #4 (`governor.locked and self.buffer.captured or ...`): plan_steps() on an
    # unlocked arena replaced a buffer a CUDA graph capture had read (its pointers baked
    # into the graph) by a smaller one, where it must leave it until lock() or close().
    capturing = [False]
    with Arena("cpu", framework="numpy", profile=False, capture_probe=lambda: capturing[0]) as a:
        _record_a_wasteful_step(a)
        recorded = a.stats().slots[0].capacity
        capturing[0] = True
        a.get_simultaneous(((10,), F32))  # served from the buffer: the capture reads it
        capturing[0] = False
        planned = a.plan_steps()["s"]
        assert planned < recorded
        assert a.stats().slots[0].capacity == recorded


def test_locking_again_gives_a_later_lanes_sibling_the_plan_its_micro_batch_recorded() -> None:
    # SlotTable.lock #31 (`break` for `continue` where the arena is locked already): a
    # second lock() planned only lane 0's new steps, so micro-batch 1 of lane 1 got no
    # copy of the step micro-batch 0 recorded there while locked, and its first run under
    # a CUDA graph capture was refused as a step never run.
    capturing = [False]
    with Arena(
        "cpu",
        framework="numpy",
        profile=False,
        ubatches=2,
        lanes=2,
        capture_probe=lambda: capturing[0],
    ) as a:
        for ubatch in (0, 1):
            with a.ubatch(ubatch), a.lane(1):
                a.get_simultaneous(((1 << 14,), F32))  # room for the step while locked
        a.lock()
        with a.ubatch(0), a.lane(1):
            _record_a_wasteful_step(a)  # recorded while locked, in lane 1 only
        a.lock()  # again: plans the new step and copies it to the lane's siblings
        capturing[0] = True
        with a.ubatch(1), a.lane(1):
            _record_a_wasteful_step(a)  # replays the copy: no GraphCaptureError
        capturing[0] = False
