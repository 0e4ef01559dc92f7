"""Plant round 47 on the compiled Planner's serve of a miss (``plan_serve`` in
``arena/views/_hit.c``): a request larger than the slot's largest plain request
(``Slot.plain_high``) goes to the Python path, which raises that figure. A Planner that
served it anyway (it fits the buffer and the high-water mark a step's recording raised)
left ``plain_high`` behind; planning the step then fitted the slot to the step's plan,
tighter than its first-fit recording, below that request, and after ``lock()`` the
request was refused (``ArenaLockedError``) though warm-up had served it.

The Planner serves an unlocked miss only where no request log is kept
(``track_call_sites=False``), on a NumPy front that already remembers its share of
requests."""

from __future__ import annotations

from arena import Arena

UNIT = 1 << 16  # float32 elements: 256 KiB


def test_a_plain_request_the_planner_served_survives_the_step_plan_s_fit() -> None:
    large = ((5 * UNIT,), "float32")
    with Arena("cpu", framework="numpy", track_call_sites=False) as ws:
        with ws.step("k") as st:  # first fit: 2, 1, then 3 above them: 6 units
            (a,) = st.get_simultaneous(((2 * UNIT,), "float32"))
            st.get_simultaneous(((UNIT,), "float32"))
            st.release(a)
            st.get_simultaneous(((3 * UNIT,), "float32"))  # planned: 4 units in all
        for n in range(1, 80):  # remembered requests: the Planner serves the next miss
            for _ in range(2):
                ws.numpy.get_simultaneous(((n, 8), "float32"))
        ws.numpy.get_simultaneous(large)  # never seen: 5 units, within the 6 held
        ws.plan_steps()  # fits the slot to the plan and the largest plain request
        ws.lock()
        (view,) = ws.numpy.get_simultaneous(large)
        assert view.nbytes == 20 * UNIT
        assert ws.stats().allocations_while_locked == 0
