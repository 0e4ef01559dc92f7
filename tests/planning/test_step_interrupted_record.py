"""A replayed request interrupted once its record is written, before it is counted, is
recorded once when asked again (``StepRun.hand`` drops what the interrupt left)."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena
from arena.planning.runs import StepRun
from arena.views import hit

F32 = "float32"


def test_a_request_interrupted_after_its_record_is_recorded_once_when_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An interrupt after the replay's hit recorded request 0 (``StepRun.hand``) but before
    it counted it: the request asked again is recorded in its place, so the next
    request's view is still known by its witness and released. Slip: the record the
    interrupt left stayed, every later request's witnesses moved one request down, and
    release() of request 1's view was refused ("not handed out by this run")."""
    monkeypatch.setattr(hit, "HIT_PATH", "python")  # the compiled hit never calls hand()
    original = StepRun.hand
    interrupts: list[int] = []

    def interrupted_once(self: StepRun, *args: Any) -> None:
        original(self, *args)
        if not interrupts:
            interrupts.append(1)
            raise KeyboardInterrupt("after the record, before the count")

    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # a recording, then replays
            with ws.step("again") as st:
                (a,) = st.get_simultaneous(((8,), F32))
                (b,) = st.get_simultaneous(((16,), F32))
                st.release(a)
                st.release(b)
        monkeypatch.setattr(StepRun, "hand", interrupted_once)
        with ws.step("again") as st:
            assert st.replay
            with pytest.raises(KeyboardInterrupt):
                st.get_simultaneous(((8,), F32))
            (a,) = st.get_simultaneous(((8,), F32))
            (b,) = st.get_simultaneous(((16,), F32))
            st.release(b)
            st.release(a)
            assert st.run.released == {0, 1}
        assert interrupts == [1]
