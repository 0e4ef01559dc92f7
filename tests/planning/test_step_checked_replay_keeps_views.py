"""A replay with poisoning or debug mode keeps the views it hands out (only a quick replay
is lean: ``arena.planning.runs.lean``)."""

from __future__ import annotations

import gc
import weakref

import pytest

from arena import Arena

F32 = "float32"


@pytest.mark.parametrize("mode", ["poison", "debug"])
def test_a_checked_replay_keeps_the_views_it_hands_out(hit_path: str, mode: str) -> None:
    """Under poisoning or debug mode a replay holds each view it hands out until the step
    ends (its witness is the view itself: what debug mode retires at the end, and what
    release() compares by identity). Slip: ``lean()`` dropped its ``quick`` test, so a
    checked replay kept only the remembered views and a dropped view died at once (the
    compiled hit decides the same, ``arena/planning/_region_hit.c``, and slipped the same way)."""
    with Arena("cpu", framework="numpy", **{mode: True}) as ws:
        for run in range(4):
            if run == 3:
                ws.lock()  # the request log is not told: the compiled hit serves too
            with ws.step("kept") as st:
                (view,) = st.get_simultaneous(((16,), F32))
                if run < 3:
                    st.release(view)
                    continue
                assert st.replay
                ref = weakref.ref(view)
                del view
                gc.collect()
                assert ref() is not None  # held by the run, as in every checked run
                assert any(w is ref() for w in st.run.live_witnesses())
