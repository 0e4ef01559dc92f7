"""A replay releases the very view it handed out, whatever the caller changed in place
(review34)."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena, ArenaError
from tests.inplace import set_shape

F32 = "float32"


def _make_read_only(view: Any) -> None:
    view.flags.writeable = False


def _reshape_in_place(view: Any) -> None:
    set_shape(view, (2, 8))


@pytest.mark.parametrize("change", [_make_read_only, _reshape_in_place])
def test_a_replay_releases_the_view_it_handed_out_after_the_caller_changed_its_flags_or_shape(
    hit_path: str, change: Any
) -> None:
    """The object a replay handed out is the view, whatever the caller did to it in place
    (made it read-only, as a caller guarding its input does, or gave it another shape):
    release() of that very object is accepted on every run, as it is on the recording
    and the first replay (and was on every run before replays stopped keeping their
    NumPy views). Slip: a lean replay (the third run on) compared it with the remembered
    view's layout and writeability and refused it: "not handed out by this run"."""
    outcomes = []
    with Arena("cpu", framework="numpy") as ws:
        for run in range(5):
            if run == 4:
                ws.lock()
            with ws.step("changed") as st:
                (view,) = st.get_simultaneous(((16,), F32))
                change(view)
                try:
                    st.release(view)
                    outcomes.append("released")
                except ArenaError as exc:
                    outcomes.append(f"run {run}: {exc}")
    assert outcomes == ["released"] * 5
