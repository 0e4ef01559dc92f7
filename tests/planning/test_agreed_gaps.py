"""Mutation gaps of arena.planning.agreed (issue 26 item 12): behaviour no other test pinned
down, each test written against a mutant that survived."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena import Arena
from arena.observe.profilefile import read_profile
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


def test_a_step_agreed_across_ranks_stays_a_top_level_step(tmp_path: Path) -> None:
    # agreed.py agreed_book #19, #20 and step_structure #3: the agreed plan of a step run
    # at the top level lost that (top_level None or False), so its stored plan reached 0
    # bytes and a restarted engine would not presize for it.
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        path = tmp_path / f"rank{rank}.json"
        with Arena("cpu", framework="numpy", profile=path) as ws:
            for _ in range(2):
                with ws.step("s") as st:
                    st.get_simultaneous(((256 * (rank + 1),), "float32"))
                    st.get_simultaneous(((128,), "float32"))
            ws.sync(group)
            ws.lock()
            ws.save_profile()
        (slot,) = read_profile(path)["slots"]
        (entry,) = slot["steps"]
        return entry["top_level"], entry["total"], slot["planned"]

    first, second = ranks.run(body)
    assert first == second
    top_level, total, planned = first
    assert top_level is True
    assert planned >= total >= (512 + 128) * 4


def test_views_cached_for_a_ranks_own_plan_are_not_served_for_the_agreed_one() -> None:
    # agreed.py agreed_book #23: the agreed plan took version 0 whatever the rank's own
    # book had, so make_plan gave it the version of the rank's own plan and the views a
    # replay had cached for that plan were served at its offsets, not the agreed ones.
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        sizes = (64, 512 * (rank + 1), 64)
        with Arena("cpu", framework="numpy") as ws:
            ws.reserve_bytes(1 << 16)  # no growth: the buffer, and its cached views, stay

            def run() -> list[int]:
                with ws.step("s") as st:
                    views = [st.get_simultaneous(((n,), "float32"))[0] for n in sizes]
                    st.release(views[0])
                    (last,) = st.get_simultaneous(((32,), "float32"))
                ptrs = [ws.numpy.data_ptr(v) for v in (*views, last)]
                return [p - ptrs[0] for p in ptrs]

            for _ in range(2):
                run()
            ws.plan_steps()
            own = [run(), run()]  # replays of the rank's own plan, their views cached
            ws.sync(group)
            ws.lock()
            agreed = [run(), run()]
            return own, agreed

    (own0, agreed0), (_, agreed1) = ranks.run(body)
    assert agreed0 == agreed1 and agreed0[0] == agreed0[1]
    assert own0[0] != agreed0[0]  # the agreed plan places rank 0's views elsewhere
