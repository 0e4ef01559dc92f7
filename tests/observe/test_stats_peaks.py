"""``memory_stats()`` peaks do not depend on observation (issue 26, item 7)."""

from __future__ import annotations

import arena


def _program(ws: arena.Arena, observe: bool) -> int:
    def step(n: int) -> None:
        with ws.step("s") as st:
            (a,) = st.get_simultaneous(((n,), "float32"))
            st.get_simultaneous(((256,), "float32"))
            st.release(a)
            st.get_simultaneous(((2 * n,), "float32"))

    step(1024)  # recorded: the slot grows to what the recording reached
    if observe:
        ws.memory_stats()
    step(1024)  # replayed: the slot shrinks to the plan
    return ws.memory_stats()["allocated_bytes.all.peak"]


def test_allocated_peak_does_not_depend_on_memory_stats_calls() -> None:
    with (
        arena.Arena("cpu", framework="numpy") as watched,
        arena.Arena("cpu", framework="numpy") as unwatched,
    ):
        seen = _program(watched, observe=True)
        unseen = _program(unwatched, observe=False)
        shrunk = unwatched.memory_stats()["allocated_bytes.all.current"]
    assert seen == unseen
    assert unseen > shrunk  # the recording's figure, not the plan's


def test_the_stats_table_shows_only_the_columns_some_slot_uses() -> None:
    # The README's first example printed 116 columns, four of them all zeros.
    with arena.Arena("cpu", framework="numpy", ubatches=2) as ws:
        ws.get_simultaneous(((1 << 18,), "float32"))
        plain = ws.stats().table().splitlines()
        heading = "slot capacity MB LOAD MB cap/LOAD growths calls"
        assert plain[0].split() == heading.split()
        assert max(len(line) for line in plain) <= 80
        with ws.ubatch(1):
            ws.get_persistent("kv", (1 << 18,), "float32")  # 1 MiB on ubatch 1 only
        ws.get_library_workspace("fi", 1 << 19)
        table = ws.stats().table().splitlines()
    assert table[0].split()[-4:] == ["persistent", "MB", "workspace", "MB"]
    assert [line.split()[-2:] for line in table[2:]] == [["0.00", "0.50"], ["1.00", "0.00"]]
    assert len({len(line) for line in table}) == 1  # every row under its heading


def test_the_stats_count_a_replayed_steps_remembered_requests(hit_path: str) -> None:
    # planted49: arena_stats flattening a step's cache list only where it is exactly a
    # list (`type(c) is list`, not isinstance) read the compiled path's StepCaches (a list
    # subclass) as one dict and failed; tests/observe caught it only through the demo's
    # run (test_profile_per_arena), which none of its asserts is about.
    with arena.Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # record, plan (remembered), replay
            with ws.step("k") as st:
                st.get_simultaneous(((64,), "float32"))
                st.get_simultaneous(((32,), "float32"), ((8,), "int8"))
        stats = ws.stats()
        assert (stats.cached_layouts, stats.cached_views) == (2, 3), hit_path
