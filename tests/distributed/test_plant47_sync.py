"""Plant round 47 on ``sync()``'s maxima (:func:`arena.distributed.state.apply_maxima`):
every rank takes the largest plain request any rank made (``Slot.note_plain``), not the
largest capacity alone. A rank that took the capacity but not the request had its slot
fitted back down to its own steps' plans by ``plan_steps()`` after ``sync()``, and
after ``lock()`` the request the other rank had warmed up was refused there."""

from __future__ import annotations

from typing import Any

from arena import Arena
from tests.threadgroup import RankGroup, ThreadRanks

MIB = 1 << 20


def test_a_step_planned_after_sync_keeps_the_other_ranks_largest_request() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            if rank == 0:
                ws.get_simultaneous(((MIB,), "uint8"))  # only rank 0 saw the large request
            with ws.step("s") as st:  # recorded on both ranks
                st.get_simultaneous(((256,), "float32"))
            ws.sync(group)
            ws.plan_steps()  # fits every slot to its steps' plans and its plain requests
            ws.lock()
            (view,) = ws.get_simultaneous(((MIB,), "uint8"))  # no growth: both ranks hold it
            return view.nbytes, ws.stats().slots[0].capacity >= MIB

    assert ranks.run(body) == [(MIB, True), (MIB, True)]
