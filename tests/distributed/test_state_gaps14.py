"""Round 14d (issue 26 item 12): tests that kill mutants the suite let through in
``arena/distributed/state.py`` (thread ranks: tests/threadgroup.py)."""

from __future__ import annotations

from typing import Any

from arena import Arena, ArenaLockedError
from tests.threadgroup import RankGroup, ThreadRanks


def test_a_locked_rank_outgrown_by_a_step_elsewhere_names_the_capacity_it_needs() -> None:
    # The other rank's slot grew in a step, past its largest plain request: the refusal
    # names the capacity the maxima need, not the largest plain request.
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            if rank == 0:
                ws.get_simultaneous(((1000,), "float32"))
                ws.lock()
                return ws.sync(group)
            for _ in range(2):
                with ws.step("s") as st:
                    st.get_simultaneous(((3000,), "float32"))
            capacity = ws.stats().slots[0].capacity
            ws.sync(group)
            return capacity

    refused, capacity = ranks.run(body)
    assert isinstance(refused, ArenaLockedError)
    assert capacity > 3000 * 4
    assert (refused.required, refused.current, refused.slot) == (capacity, 4096, (0, 0))


def test_steps_whose_ranks_disagree_on_each_blocks_size_grow_every_slot_to_fit_both() -> None:
    # The same step structure, each rank's large block another one: the largest sizes
    # need more than either rank's slot holds, so the step's own plan grows the slot.
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        sizes = (1024, 64) if rank == 0 else (64, 1024)
        events: list[Any] = []
        with Arena("cpu", framework="numpy") as ws:
            for _ in range(2):
                with ws.step("s") as st:
                    st.get_simultaneous(((sizes[0],), "float32"), ((sizes[1],), "float32"))
            before = ws.stats().slots[0].capacity
            ws.add_listener(events.append)
            report = ws.sync(group)
            ws.lock()
            with ws.step("s") as st:  # both large blocks at once fit, locked
                st.get_simultaneous(((1024,), "float32"), ((1024,), "float32"))
            grown = [(e.old_bytes, e.new_bytes) for e in events if e.kind == "resize"]
            return before, report.after, report.not_taken, grown

    (before0, after0, left0, grown0), (before1, after1, left1, grown1) = ranks.run(body)
    assert before0 == before1 < 2 * 4096 <= after0[0] == after1[0]
    assert left0 == left1 == ()
    assert grown0 == [(before0, after0[0])] and grown1 == [(before1, after1[0])]


class _ListLike:
    """A hashable key whose repr reads back (``ast.literal_eval``) as an unhashable list."""

    def __repr__(self) -> str:
        return "[1, 2]"


def test_a_key_whose_repr_reads_back_unhashable_is_not_taken_where_it_is_missing() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            if rank == 0:
                ws.get_persistent(_ListLike(), (10,), "float32")
            return ws.sync(group).not_taken

    kept, missing = ranks.run(body)
    assert kept == ()
    assert len(missing) == 1 and "[1, 2]" in missing[0]


def test_a_persistent_buffer_taken_from_another_rank_is_laid_out_at_the_arenas_alignment() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        # Below the layouts' default alignment (256): laid out at 256, the buffer would be
        # 256 bytes, not 48.
        with Arena("cpu", framework="numpy", alignment=16) as ws:
            if rank == 0:
                ws.get_persistent("kv", (10,), "float32")
            ws.sync(group)
            return ws.stats().slots[0].persistent_bytes

    made, taken = ranks.run(body)
    assert made == taken == 48
