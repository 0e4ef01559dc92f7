"""Round 15c (issue 26 item 12): tests that kill mutants the suite let through in
``arena/distributed/state.py`` (thread ranks: tests/threadgroup.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from arena import Arena
from tests.threadgroup import RankGroup, ThreadRanks


def test_a_persistent_key_of_another_shape_or_dtype_elsewhere_is_not_taken() -> None:
    # Both ranks hold each key, with the same shape but another dtype ("kv") or the same
    # dtype but another shape ("w"): neither is taken, on either rank.
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            ws.get_persistent("kv", (10,), "float32" if rank == 0 else "float64")
            ws.get_persistent("w", (10,) if rank == 0 else (20,), "float32")
            return ws.sync(group).not_taken

    for not_taken in ranks.run(body):
        assert sorted(not_taken) == [
            "persistent 'kv' of slot (ubatch 0, lane 0)",
            "persistent 'w' of slot (ubatch 0, lane 0)",
        ]


def test_sync_emits_only_the_resize_events_of_the_slots_it_grows() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        events: list[Any] = []
        with Arena("cpu", framework="numpy") as ws:
            ws.get_simultaneous(((1000 * (rank + 1),), "float32"))
            ws.add_listener(events.append)
            ws.sync(group)
            return [(e.kind, e.slot) for e in events]

    grown, kept = ranks.run(body)
    assert grown == [("resize", (0, 0))]
    assert kept == []


def _distance(views: Sequence[np.ndarray]) -> int:
    first, second = (v.__array_interface__["data"][0] for v in views)
    return int(second - first)


def test_a_replayed_step_takes_the_agreed_plan_not_views_cached_for_its_own() -> None:
    # Rank 0 replayed its step (views cached for its plan: the second block 4096 bytes
    # below the first) in a slot already large enough for the agreed plan, so sync()
    # grows nothing and the slot keeps its buffer. The agreed plan (both blocks of 4096
    # bytes) gets a newer version than rank 0's own: its next replay lays the blocks out
    # as every rank does, never serving the views cached for the old plan.
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        sizes = (64, 1024) if rank == 0 else (1024, 64)
        with Arena("cpu", framework="numpy") as ws:
            ws.get_simultaneous(((8192,), "float32"))  # room for the agreed plan
            distances = []
            for _ in range(3):
                with ws.step("s") as st:
                    views = st.get_simultaneous(((sizes[0],), "float32"), ((sizes[1],), "float32"))
                    distances.append(_distance(views))
            report = ws.sync(group)
            with ws.step("s") as st:
                views = st.get_simultaneous(((sizes[0],), "float32"), ((sizes[1],), "float32"))
                distances.append(_distance(views))
            return report.before, report.after, distances

    (before0, after0, own0), (before1, after1, own1) = ranks.run(body)
    assert before0 == after0 == before1 == after1  # no slot grew: the buffers stayed
    assert own0[1:3] == [-4096] * 2  # rank 0's own plan, replayed (views cached)
    assert own0[3] == own1[3] == 4096  # the agreed plan, as rank 1 lays it out


def test_a_step_replaying_here_during_sync_is_not_offered_to_the_other_ranks() -> None:
    # Rank 1 replays its planned step while it syncs: the step is left out of what it
    # offers (its run is not finished), so the key is one only rank 0 had.
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            for _ in range(2):
                with ws.step("s") as st:
                    st.get_simultaneous(((256,), "float32"))
            if rank == 0:
                return ws.sync(group)
            with ws.step("s") as st:
                st.get_simultaneous(((256,), "float32"))
                return ws.sync(group)

    done, replaying = ranks.run(body)
    assert done.schemas == replaying.schemas == 2
    assert done.partial == replaying.partial == ("step 's' of slot (ubatch 0, lane 0)",)
    assert done.not_taken == ()
    assert replaying.not_taken == (
        "step 's' of slot (ubatch 0, lane 0) (a run of it is open here)",
    )
