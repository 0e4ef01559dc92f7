"""What Round 14i's draw of ``arena/observe/profileschema.py`` found the suite let
through (issue 26 item 12): the reasons a malformed profile is refused with must name
the field as the file spells it. The validation tests match a word of the reason, which a
mangled field name (``'XX"runs"XX'``) or a lost one (``None``) still contains."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from arena.observe.profilefile import ProfileError, check_profile
from tests.observe.test_profile_validation import _valid


def _refusal(profile: dict[str, Any]) -> str:
    with pytest.raises(ProfileError) as caught:
        check_profile(profile)
    return str(caught.value)


def test_a_runs_count_that_is_not_an_int_is_named_as_the_file_spells_it() -> None:
    """Kills ``_check_head`` #69 (the field's name mangled in the reason)."""
    profile = _valid()
    profile["runs"] = "1"
    assert _refusal(profile) == "\"runs\" must be an int from 0 to 2**63 - 1, found '1'"


def test_sites_that_are_not_a_list_are_named_as_the_file_spells_them() -> None:
    """Kills ``check_profile`` #54 (the field's name mangled in the reason)."""
    profile = _valid()
    profile["sites"] = {"x": 1}
    assert _refusal(profile) == "\"sites\" must be a list, found {'x': 1}"


def test_a_timeline_entry_past_the_last_lane_names_its_entry_and_field() -> None:
    """Kills ``_check_event`` #52 (the entry and field lost from the reason)."""
    profile = _valid()
    event = copy.deepcopy(profile["timeline"][0])
    profile["timeline"] = [event, {**event, "lane": 1}]
    assert _refusal(profile) == (
        "timeline entry #1 'lane' is 1, but the profile has 1 lanes (0 to 0)"
    )
