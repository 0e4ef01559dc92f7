"""Round 14b's mutation gaps in the profiles group (``arena/observe/profile.py``): each
test fails on the mutant it names (planted by hand, seen to fail) and passes on the real
code."""

from __future__ import annotations

import json
from pathlib import Path

import arena
from arena.observe.profile import Recorder
from arena.observe.profilefile import read_profile

F32 = "float32"


def _step_keys(path: Path) -> list[str]:
    return [str(step["key"]) for step in read_profile(path)["slots"][0]["steps"]]


def test_a_step_planned_since_the_last_save_alone_is_saved_by_the_finalizer(
    tmp_path: Path,
) -> None:
    # profile.py Recorder._refresh #48 (dirty = False where a step's plan is taken): a
    # step planned since the last save, smaller than the one before (the slot's LOAD and
    # planned need unchanged), did not mark the record as changed, so the finalizer
    # (save_if_dirty) left it unsaved.
    path = tmp_path / "p.json"
    recorder = Recorder(path, ("cpu", 1, 1, 256, None), "exact")
    with arena.Arena("cpu", framework="numpy") as ws:
        recorder.watch(ws._table)
        with ws.step("big") as step:
            step.get_simultaneous(((4096,), F32))
        ws.plan_steps()
        recorder.save_if_dirty()
        assert _step_keys(path) == ["big"]
        figures = recorder.loads[:], recorder.planned[:]
        path.unlink()
        with ws.step("small") as step:
            step.get_simultaneous(((64,), F32))
        ws.plan_steps()
        recorder.save_if_dirty()
        assert (recorder.loads, recorder.planned) == figures  # the step alone changed
        assert sorted(_step_keys(path)) == ["big", "small"]


def test_a_triton_size_presized_from_a_profile_is_in_the_runs_own_record(
    tmp_path: Path,
) -> None:
    # profile.py _presize #62 (recorder.workspace(where, None, ...)): the Triton size a
    # profile presized was not recorded as this run's (a kind of None is no Triton block,
    # and its key None no library key), so a run that made no Triton block of its own
    # saved none: with the file gone meanwhile, the next start was not presized.
    path = tmp_path / "p.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.get_simultaneous(((64,), F32))
    profile = json.loads(path.read_text(encoding="utf-8"))
    profile["workspaces"] = [
        {"ubatch": 0, "lane": 0, "kind": "triton", "key": None, "bytes": 8192},
        {"ubatch": 0, "lane": 0, "kind": "library", "key": "fi", "bytes": 4096},
    ]
    path.write_text(json.dumps(profile), encoding="utf-8")
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        path.unlink()  # the next save writes this run's record alone
    saved = [(w["kind"], w["key"], w["bytes"]) for w in read_profile(path)["workspaces"]]
    assert sorted(saved, key=str) == [("library", "fi", 4096), ("triton", None, 8192)]
