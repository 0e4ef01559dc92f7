"""Plant round 37 (observe): a profile's stored step plans on a slot of a second
lane."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import arena
from arena.observe.profilefile import read_profile


def test_a_stored_plan_past_its_slot_names_the_slot_ubatch_first(tmp_path: Path) -> None:
    """The warning for a stored plan reaching past its presized slot names the slot as
    (ubatch, lane), as every other message does (slip: ``restore_step_plans`` naming it
    (lane, ubatch): slot (1, 0) for the step of lane 1)."""
    path = tmp_path / "profile.json"
    with arena.Arena("cpu", lanes=2, framework="numpy", profile=path) as ws:
        with ws.lane(1):
            for _ in range(2):
                with ws.step("fwd") as st:
                    st.get_simultaneous(((4096,), "float32"))
        ws.lock()
    data = read_profile(path)
    (stored,) = [s for s in data["slots"] if s["steps"]]
    assert (stored["ubatch"], stored["lane"]) == (0, 1)
    for slot in data["slots"]:
        slot["planned"] = 4096  # smaller than the plan: hand-edited
    path.write_text(json.dumps(data))
    with pytest.warns(arena.ArenaWarning, match=r"step 'fwd' of slot \(0, 1\) needs 16384"):
        ws = arena.Arena("cpu", lanes=2, framework="numpy", profile=path)
    with ws:
        pass
