"""The shared leak check (tests/refcounts.py) fails on a leak and forgives one stray move."""

from __future__ import annotations

import pytest

from tests.refcounts import assert_counts_flat


def test_a_reference_kept_on_every_call_fails_the_check() -> None:
    watched = object()
    kept: list[object] = []

    def leaks() -> None:
        for _ in range(100):
            kept.append(watched)

    with pytest.raises(AssertionError, match="moved in two measurements running"):
        assert_counts_flat([watched], leaks, "leak")
    assert len(kept) == 200  # measured twice


def test_a_reference_dropped_on_every_call_fails_the_check() -> None:
    watched = object()
    held = [watched] * 1000

    def drops() -> None:
        for _ in range(100):
            held.pop()

    with pytest.raises(AssertionError):
        assert_counts_flat([watched], drops)


def test_one_stray_move_is_measured_again_and_forgiven() -> None:
    watched = object()
    stranger: list[object] = []

    def once() -> None:
        if not stranger:
            stranger.append(watched)  # what another thread might do, once

    assert_counts_flat([watched], once)


def test_garbage_cycles_made_by_the_calls_are_collected_before_counting() -> None:
    watched = object()

    def cycles() -> None:
        for _ in range(100):
            cell: list[object] = [watched]
            cell.append(cell)  # a cycle holding the watched object: garbage after the call

    assert_counts_flat([watched], cycles)
