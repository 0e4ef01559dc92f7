"""Compiled step and scope hits against bugs planted in them (2026-12-03, docs/testing.md
'Planted, 2026-12-03'): a request that differs from the one a memo noted only in its
dimension count or its first dimension is served its own views, and a count counted up
in place leaves the slot the one reference to it (flat reference counts)."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from arena import Arena

F32 = "float32"
NOTED = ((4, 8), F32)


def _region(ws: Arena, kind: str) -> Any:
    return ws.numpy.step("noted") if kind == "step" else ws.numpy.scope()


def _noted(ws: Arena, kind: str) -> None:
    """NOTED at request 0 of a region, recorded, planned and replayed (the memo noted)
    on a locked arena."""
    ws.reserve_bytes(1 << 16)
    for _ in range(3):
        with _region(ws, kind) as region:
            region.get_simultaneous(NOTED)
    ws.lock()
    for _ in range(4):
        with _region(ws, kind) as region:
            (view,) = region.get_simultaneous(NOTED)
            assert view.shape == (4, 8)


@pytest.mark.parametrize("kind", ["step", "scope"])
@pytest.mark.parametrize("shape", [(4, 8, 1), (4, 8, 2, 1), (5, 8), (3, 8), (1, 4, 8)])
def test_a_request_off_the_noted_one_in_rank_or_first_dimension_gets_its_own_views(
    hit_path: str, kind: str, shape: tuple[int, ...]
) -> None:
    """Fails with plain_request_is not comparing the dimension count ((4, 8, 1) served
    the noted (4, 8) views) or starting at the second dimension ((5, 8) served them)."""
    with Arena("cpu", framework="numpy") as ws:
        _noted(ws, kind)
        for _ in range(3):
            with _region(ws, kind) as region:
                (view,) = region.get_simultaneous((shape, F32))
                assert view.shape == shape
            with _region(ws, kind) as region:
                (view,) = region.get_simultaneous(NOTED)
                assert view.shape == (4, 8)


@pytest.mark.parametrize("kind", ["step", "scope"])
def test_a_count_counted_in_place_is_held_by_the_slot_alone(hit_path: str, kind: str) -> None:
    """After each hit the slot's count has one reference, the slot's: a count counted
    in place that kept the hit's own reference too (a lost decref) would leak it, and
    the next hit would make a new int. Fails with count_in_place's Py_DECREF left out."""
    with Arena("cpu", framework="numpy") as ws:
        _noted(ws, kind)
        with _region(ws, kind) as region:
            slot = region.slot
            assert slot is not None
        slot.calls = int(str(1 << 20))  # a heap int that only the slot refers to
        alone = sys.getrefcount(slot.calls)  # the slot's reference, as this call sees it
        for n in range(1, 6):
            with _region(ws, kind) as region:
                region.get_simultaneous(NOTED)
            # Read before any assert: pytest's rewritten asserts keep what they compare.
            references = sys.getrefcount(slot.calls)
            count = int(str(slot.calls))
            assert (references, count) == (alone, (1 << 20) + n)


@pytest.mark.parametrize("kind", ["step", "scope"])
def test_a_dimension_past_32_bits_is_never_taken_for_its_low_bits(hit_path: str, kind: str) -> None:
    """A noted request with a dimension past 2**32 (zero bytes) has no signature: a
    request whose dimension is that one's low 32 bits is another request. Fails with
    signature_of keeping such a dimension (truncated to 4, it served (4, 0) the noted
    (2**32 + 4, 0) view)."""
    big = (((1 << 32) + 4, 0), F32)
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        for _ in range(3):
            with _region(ws, kind) as region:
                region.get_simultaneous(big)
        ws.lock()
        for _ in range(3):
            with _region(ws, kind) as region:
                (view,) = region.get_simultaneous(big)
                assert view.shape == big[0]
            with _region(ws, kind) as region:
                (view,) = region.get_simultaneous(((4, 0), F32))
                assert view.shape == (4, 0)
