"""Profile files against bugs planted by hand (branch plant41, docs/testing.md
'Planted, 2026-12-03 (plant41)'): the world size a merge keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arena import Arena
from arena.observe.profilefile import merge_profiles, read_profile
from arena.observe.profilesteps import step_problem
from tests.profiles import profile_data


def _profile(world: int | None) -> dict[str, Any]:
    """A one-run profile of one 4096-byte slot, of ``world`` ranks (None: no world field)."""
    worlds = {} if world is None else {"world": world}
    return profile_data({"peak": 4096, "capacity": 4096}, growth="exact", **worlds)


@pytest.mark.parametrize(
    ("old", "new", "merged"),
    [(4, 2, 4), (2, 4, 4), (4, None, 4), (None, 4, 4), (3, 3, 3)],
)
def test_a_merge_keeps_the_largest_world_size_either_run_saw(
    old: int | None, new: int | None, merged: int
) -> None:
    """A profile's world size is the most ranks any run saw, whichever run came last
    (runs of fewer ranks, one rank alone say, merge into one file). Plant killed:
    merge_profiles keeping the newer run's world (``worlds[-1]``) rather than the
    largest (a 2-rank run merged into a 4-rank profile said world 2)."""
    assert merge_profiles(_profile(old), _profile(new))["world"] == merged


def test_a_stored_step_with_several_bad_items_names_the_first() -> None:
    """A stored step's list with several items out of range is named by its first bad
    item (the one a reader meets first). Plant killed: the list that replaced next()
    over a generator read from its other end (``bad[-1]``), naming '#2 ... -2'."""
    entry = {
        "key": "k",
        "counts": [1, 1, 1],
        "sizes": [-1, 256, -2],
        "lasts": [0, 1, 2],
        "offsets": [0, 256, 512],
        "total": 768,
        "base": 0,
        "above": 0,
        "recorded_at": 0,
        "top_level": True,
    }
    assert step_problem(entry, 256, 2**63 - 1) == (
        "'sizes' #0 must be an int from 0 to 2**63 - 1, found -1"
    )


def test_a_call_site_whose_largest_layout_has_an_empty_view_is_stored_and_read(
    tmp_path: Path,
) -> None:
    """A zero dimension is a valid one (an empty batch): a profile whose call site's
    largest layout holds an empty view is written, read back and kept whole. Plant
    killed: the profile check's dimension test that replaced all() over a generator
    asking ``d > 0`` (the arena's own profile failed its check when written)."""
    path = tmp_path / "profile.json"
    with Arena("cpu", framework="numpy", profile=path) as ws:
        ws.numpy.get_simultaneous(((0, 4), "float32"), ((64,), "float32"))
    profile = read_profile(path)
    (site,) = profile["sites"]
    assert [[[0, 4], "float32"], [[64], "float32"]] in [lay["views"] for lay in site["layouts"]]
