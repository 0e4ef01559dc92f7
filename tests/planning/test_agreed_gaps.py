"""Mutation gaps of arena.planning.agreed (issue 26 item 12): behaviour no other test pinned
down, each test written against a mutant that survived."""

from __future__ import annotations

from typing import Any

from arena import Arena
from tests.threadgroup import RankGroup, ThreadRanks


def test_a_step_only_another_rank_recorded_is_planned_alike_on_every_rank() -> None:
    # agreed.py agreed_book #22, #25: a rank without its own book of the key (after is
    # None) read the version of None.
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            if rank == 1:
                for _ in range(2):
                    with ws.step("s") as st:
                        st.get_simultaneous(((256,), "float32"))
                        st.get_simultaneous(((128,), "float32"))
            else:
                ws.get_simultaneous(((64,), "float32"))
            ws.sync(group)
            ws.lock()
            with ws.step("s") as st:
                views = [st.get_simultaneous(((n,), "float32"))[0] for n in (256, 128)]
            assert ws.stats().allocations_while_locked == 0
            return [ws.numpy.data_ptr(v) - ws.numpy.data_ptr(views[0]) for v in views]

    first, second = ranks.run(body)
    assert first == second
