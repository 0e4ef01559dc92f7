"""Planted bugs the suite let through in :mod:`arena.config` (branch plant36): each test
names the bug it kills, was seen to fail with that bug planted, and passes on the code."""

from __future__ import annotations

import pytest

from arena import Arena, ConfigError
from arena.config import MAX_SLOTS


def test_exactly_max_slots_slots_are_accepted_and_one_more_is_refused() -> None:
    # Plant CF1: the slot count check compared with >= and refused an arena of exactly
    # MAX_SLOTS slots (64 micro-batches of 64 lanes), which the message says it holds.
    assert MAX_SLOTS == 64 * 64
    with Arena("cpu", framework="numpy", ubatches=64, lanes=64) as ws:
        assert len(ws.stats().slots) == MAX_SLOTS
    with pytest.raises(ConfigError, match=str(MAX_SLOTS)):
        Arena("cpu", framework="numpy", ubatches=MAX_SLOTS + 1)
