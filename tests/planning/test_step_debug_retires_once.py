"""Debug mode retires each view a step handed out once: at its release, or at the end of
the run where it is still live."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from arena.adapters.numpy import NumpyAdapter

from arena import Arena

F32 = "float32"


def _recording_retires(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Debug mode's retirements recorded instead of done: per run (the caller appends a
    list before each), the ids of the views retired, in order."""
    retired: list[list[int]] = []

    def record(self: NumpyAdapter, views: Sequence[Any]) -> None:
        retired[-1].extend(id(v) for v in views)

    monkeypatch.setattr(NumpyAdapter, "retire_views", record)
    return retired


def test_debug_mode_retires_each_view_once_at_its_release_or_the_end(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that releases one view and keeps the other: debug mode retires the released
    one at its release and the live one at the run's end, each once, on the recording
    and on every replay. Slip: ``StepRun.live_witnesses`` counted a replay's released
    blocks as live, so the end retired the released views a second time."""
    retired = _recording_retires(monkeypatch)
    with Arena("cpu", framework="numpy", debug=True) as ws:
        for _ in range(4):
            retired.append([])
            with ws.step("retires") as st:
                (a,) = st.get_simultaneous(((8,), F32))
                (b,) = st.get_simultaneous(((16,), F32))
                st.release(a)
                assert retired[-1] == [id(a)]
            assert sorted(retired[-1]) == sorted([id(a), id(b)])
            del a, b


def test_debug_mode_retires_at_the_end_every_view_still_live_there(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three views, the last released: the run's end retires the first two, live there,
    and not the released one again, on the recording and on every replay (a replay
    counts its blocks in request order, one per view handed out)."""
    retired = _recording_retires(monkeypatch)
    with Arena("cpu", framework="numpy", debug=True) as ws:
        for _ in range(4):
            retired.append([])
            with ws.step("retires") as st:
                a, b = st.get_simultaneous(((8,), F32), ((16,), F32))
                (c,) = st.get_simultaneous(((8,), F32))
                st.release(c)
                assert retired[-1] == [id(c)]
            assert sorted(retired[-1]) == sorted([id(a), id(b), id(c)])
            del a, b, c
