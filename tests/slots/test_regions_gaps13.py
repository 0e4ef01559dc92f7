"""Mutation round 13b (issue 26 item 12): the calibration of the healing check, called
again.

``_calibrate`` runs once, at import (``_ORPHANED``), before mutmut picks a mutant: Round 11
planted its mutants by hand. Called again here, and compared with what ``_references``
finds for a region only a list refers to, in a loop over a copy as ``heal_regions`` runs
it, each of its mutants fails in mutmut's runs too.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from arena.slots import regions


class _Region:
    """A stand-in region (what the stack holds: any object)."""


@pytest.mark.skipif(
    sys.implementation.name != "cpython", reason="healing reads CPython's reference counts"
)
def test_calibrating_again_finds_the_count_of_a_region_only_a_stack_refers_to() -> None:
    stack: list[Any] = [_Region()]
    found = []
    for region in reversed(tuple(stack)):
        found.append(regions._references(region, stack))
    calibrated = regions._calibrate()
    assert type(calibrated) is int
    assert found == [calibrated]
    assert calibrated == regions._ORPHANED


@pytest.mark.skipif(sys.implementation.name == "cpython", reason="elsewhere than CPython only")
def test_calibrating_elsewhere_than_cpython_turns_healing_off() -> None:
    assert regions._calibrate() is None
    assert regions._ORPHANED is None
