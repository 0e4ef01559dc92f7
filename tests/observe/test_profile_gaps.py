"""Mutation gaps of the profile modules (issue 26 item 12): behaviour of
``arena.observe.profile``, ``profilefile``, ``profileschema`` and ``profilepaths`` that no
other test pinned down, each test written against a mutant that survived."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from arena.observe import profilefile
from arena.observe.profilefile import (
    LIMIT,
    ProfileError,
    check_profile,
    describe_key,
    merge_profiles,
    salvage_profile,
    write_atomically,
)


def _profile(**slot: Any) -> dict[str, Any]:
    """A valid one-slot profile; ``slot`` adds or replaces the slot's fields."""
    return check_profile(
        {
            "format": "arena-profile",
            "version": 1,
            "device": "cpu",
            "ubatches": 1,
            "lanes": 1,
            "alignment": 256,
            "runs": 1,
            "ranks": [0],
            "slots": [{"ubatch": 0, "lane": 0, "peak": 512, "capacity": 512, "growths": 1, **slot}],
            "sites": [],
            "timeline": [],
        }
    )


def _step(key: str | int, recorded_at: int) -> dict[str, Any]:
    """A valid stored step plan of ``key``: one block of 256 bytes."""
    return {
        "key": key,
        "counts": [1],
        "sizes": [256],
        "lasts": [0],
        "offsets": [0],
        "total": 256,
        "base": 0,
        "above": 0,
        "top_level": True,
        "recorded_at": recorded_at,
    }


# ------------------------------------------------------------------ profilefile.py
def test_a_merged_load_is_zero_when_neither_run_had_one() -> None:
    # merge_profiles #43: an older profile without "load" counted as a load of 1.
    old = _profile()
    assert "load" not in old["slots"][0]
    merged = merge_profiles(old, _profile(load=0))
    assert merged["slots"][0]["load"] == 0
    assert merge_profiles(_profile(load=0), _profile())["slots"][0]["load"] == 0
    assert merge_profiles(old, _profile(load=300))["slots"][0]["load"] == 300


def test_the_step_plans_of_a_run_that_planned_none_there_are_kept_on_merge() -> None:
    # merge_profiles #92 to #94, #113, #115: a newer run without step plans in a slot
    # dropped (or failed on) the plans an older run stored there; the docstring says
    # keys only the older run planned stay.
    forward = _step("forward", recorded_at=1)
    backward = _step(7, recorded_at=1)
    merged = merge_profiles(_profile(steps=[forward, backward]), _profile())
    assert merged["slots"][0]["steps"] == [forward, backward]
    # and the newer run's plan of a key wins over the older's, the older's other keys stay
    newer = _step("forward", recorded_at=2)
    merged = merge_profiles(_profile(steps=[forward, backward]), _profile(steps=[newer]))
    assert merged["slots"][0]["steps"] == [newer, backward]
    # neither planned: the merged slot has no step list at all
    assert "steps" not in merge_profiles(_profile(), _profile())["slots"][0]


def test_a_failed_write_whose_temporary_file_is_gone_raises_its_own_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # write_atomically #34: with the clean-up's suppress(None), removing a temporary file
    # that is already gone raised TypeError over the write's own error.
    target = tmp_path / "profile.json"

    def failing_dump(profile: Any, handle: Any, **kwargs: Any) -> None:
        for temporary in tmp_path.glob(".profile.json.*.tmp"):
            temporary.unlink()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(profilefile.json, "dump", failing_dump)
    with pytest.raises(OSError, match="No space left on device") as caught:
        write_atomically(target, _profile())
    assert type(caught.value) is OSError
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ profileschema.py
def test_describe_key_names_the_arena_only_when_it_has_a_name() -> None:
    # describe_key #2 to #6, #8, #9.
    plain = "device cuda, 2 ubatches, 1 lanes, alignment 256"
    assert describe_key(("cuda", 2, 1, 256, None)) == plain
    assert describe_key(("cuda", 2, 1, 256)) == plain
    assert describe_key(("cuda", 2, 1, 256, "draft")) == plain + ", name 'draft'"
    assert describe_key(("cuda", 2, 1, 256, "")) == plain + ", name ''"


def test_a_workspace_entry_that_is_not_an_object_is_named_by_its_index() -> None:
    # _check_workspace #3: the message said "None must be an object".
    profile = _profile()
    profile["workspaces"] = [{"ubatch": 0, "lane": 0, "kind": "triton", "key": None, "bytes": 1}, 5]
    with pytest.raises(ProfileError) as caught:
        check_profile(profile)
    assert str(caught.value) == "workspace #1 must be an object, found 5"


def test_a_timeline_entry_that_is_not_an_object_is_dropped_with_its_index() -> None:
    # salvage_profile #126: the note said "None must be an object".
    profile = _profile()
    profile["timeline"] = ["grow"]
    repaired, notes = salvage_profile(profile)
    assert repaired["timeline"] == []
    assert notes == ["timeline entry #0 must be an object, found 'grow': dropped"]


@pytest.mark.parametrize("world", [0, -1, True, "2", 2.0, LIMIT + 1])
def test_salvage_drops_a_world_that_is_not_a_count_and_says_so(world: Any) -> None:
    # salvage_profile #211, #212, #214, #225 to #229.
    profile = {**_profile(), "world": world}
    with pytest.raises(ProfileError):
        check_profile(copy.deepcopy(profile))
    repaired, notes = salvage_profile(profile)
    assert "world" not in repaired
    assert notes == [f'"world" {world!r} is not a count: dropped']
    assert profile["world"] == world  # the data itself is not modified


@pytest.mark.parametrize("world", [1, 2, LIMIT])
def test_salvage_keeps_every_world_the_reader_accepts(world: int) -> None:
    # salvage_profile #224: a world of 2**63 - 1 was dropped.
    repaired, notes = salvage_profile({**_profile(), "world": world})
    assert repaired["world"] == world and notes == []
    assert json.loads(json.dumps(repaired)) == repaired
