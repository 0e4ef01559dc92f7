"""Gaps a planted-bug review (plant33) found in the slots' stores and the slot table:
each test fails on one realistic slip in the code (named in its docstring) and passes on
the real code."""

from __future__ import annotations

import pytest

from arena import Arena, ArenaLockedError, ArenaOutOfMemoryError
from arena.memory.virtual import PAGE
from tests.sources import RecordingSource, check_books


def test_planned_bytes_counts_a_shared_empty_persistent_buffer_at_the_alignment() -> None:
    """lock() gives ubatch 1 the empty persistent buffer of ubatch 0, at least one
    alignment unit: planned_bytes() counts it so (slip: the lane's additions counted the
    layout's total, 0, not ``max(total, alignment)``), and the cap checks it before any
    allocation."""
    source = RecordingSource()
    with Arena(source=source, framework="numpy", ubatches=2) as a:
        with a.ubatch(0):
            a.get_persistent("empty", (0,), "uint8")
        planned = a.planned_bytes()
        a.lock()
        assert a.stats().live_bytes == planned == sum(source.live.values())
        check_books(a, source)
    source = RecordingSource()
    with Arena(source=source, framework="numpy", ubatches=2, max_bytes=256) as a:
        with a.ubatch(0):
            a.get_persistent("empty", (0,), "uint8")
        before = list(source.events)
        with pytest.raises(ArenaOutOfMemoryError, match=r"lock\(\)'s sizing"):
            a.lock()
        assert source.events == before and not a.is_locked
        check_books(a, source)


def _two_sizes(a: Arena) -> None:
    with a.ubatch(1):  # first: its sibling's growth comes after (pending, not installed)
        a.numpy.get_simultaneous(((PAGE,), "uint8"))
    with a.ubatch(0):
        a.numpy.get_simultaneous(((4 * PAGE,), "uint8"))


def test_planned_bytes_on_a_fixed_address_source_counts_only_the_bytes_committed() -> None:
    """On a fixed-address source lock() grows a smaller buffer of a lane in place: it
    commits only the difference, and planned_bytes() and the cap's check count that
    (slip: the lane's whole target counted for each smaller slot, as on a moving source,
    refusing a lock() that fits the cap)."""
    with Arena("cpu", source="virtual", framework="numpy", ubatches=2, max_bytes="64MiB") as a:
        _two_sizes(a)
        assert a.stats().live_bytes == 5 * PAGE
        planned = a.planned_bytes()
        a.lock()
        assert a.stats().live_bytes == planned == 8 * PAGE
        check_books(a)
    with Arena("cpu", source="virtual", framework="numpy", ubatches=2, max_bytes=8 * PAGE) as a:
        _two_sizes(a)
        a.lock()  # exactly the cap: 4 pages each
        assert a.stats().live_bytes == 8 * PAGE
        check_books(a)


def test_a_new_persistent_key_refused_on_another_lane_names_no_owner_of_that_lane() -> None:
    """lock() shares a persistent buffer within a lane only: a key another lane created is
    new on this one, and the error says to create it during warm-up, naming no slot of
    another lane as its owner (slip: a store's siblings taken from every lane)."""
    with Arena("cpu", framework="numpy", ubatches=2, lanes=2) as a:
        with a.lane(0):
            a.get_persistent("kv", (64,), "float32")
        a.lock()
        with a.lane(1), pytest.raises(ArenaLockedError) as caught:
            a.get_persistent("kv", (64,), "float32")
        message = str(caught.value)
        assert "create persistent buffers during warm-up, before lock()" in message
        assert "lane 0" not in message
        with a.ubatch(1), a.lane(0):  # the same lane: shared by lock(), found
            a.get_persistent("kv", (64,), "float32")
