"""Round 12b (issue 26 item 12): tests that kill mutants the suite let through in
``arena/distributed/state.py`` (thread ranks: tests/threadgroup.py)."""

from __future__ import annotations

from typing import Any

from arena import Arena
from tests.threadgroup import RankGroup, ThreadRanks


def test_plain_requests_alone_size_every_ranks_slot_to_the_largest() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            ws.get_simultaneous(((1000 * (rank + 1),), "float32"))
            report = ws.sync(group)
            return report.before, report.after, ws.stats().slots[0].capacity

    small, large = ranks.run(body)
    assert small[0] == (4096,) and large[0] == (8192,)
    assert small[1:] == large[1:] == ((8192,), 8192)


def test_a_step_whose_run_is_open_here_is_not_taken_and_says_why() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            if rank == 0:
                for _ in range(2):
                    with ws.step("s") as st:
                        st.get_simultaneous(((256,), "float32"))
                        st.get_simultaneous(((256,), "float32"))
                return ws.sync(group).not_taken
            with ws.step("s") as st:  # its first run, recording, open during sync()
                st.get_simultaneous(((256,), "float32"))
                return ws.sync(group).not_taken

    done, open_here = ranks.run(body)
    assert done == ()
    assert open_here == ("step 's' of slot (ubatch 0, lane 0) (a run of it is open here)",)
