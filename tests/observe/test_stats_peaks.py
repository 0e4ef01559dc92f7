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
