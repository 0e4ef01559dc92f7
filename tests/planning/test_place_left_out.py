"""What a time limit pays for first in ``plan_offsets``: the placement orders the work
budget left out (``arena.planning.offsets._place_left_out``), on a fake placer and a fake
clock so that the time each placement takes is exact."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from arena.planning import offsets


@dataclass
class _Attempt:
    score: tuple[int, int]


class _Clock:
    """``time.perf_counter`` that moves only when a placement runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _Placer:
    """Places an order (a one-item list naming it) at its score, taking one second."""

    def __init__(self, scores: dict[str, int], clock: _Clock) -> None:
        self.scores, self.clock, self.orders = scores, clock, []

    def place(self, order: list[str]) -> _Attempt:
        (name,) = order
        self.orders.append(name)
        self.clock.now += 1.0
        return _Attempt((self.scores[name], 0))


def _run(
    scores: dict[str, int],
    *,
    best: int = 100,
    lower: int = 10,
    limit: float = 100.0,
    per_placement: float = 1.0,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, str, list[str], dict[str, Any]]:
    clock = _Clock()
    monkeypatch.setattr(offsets, "time", clock)
    placer = _Placer(scores, clock)
    placed: dict[str, Any] = {}
    found, name = offsets._place_left_out(
        placer,  # type: ignore[arg-type]
        _Attempt((best, 0)),
        "size",
        list(scores),
        lambda order: [order],
        lower=lower,
        limit=limit,
        per_placement=per_placement,
        placed=placed,
    )
    return found, name, placer.orders, placed


def test_every_left_out_order_is_placed_and_the_smallest_plan_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found, name, orders, placed = _run(
        {"area": 90, "lifetime": 70, "first": 80}, monkeypatch=monkeypatch
    )
    assert orders == ["area", "lifetime", "first"]  # in the order given
    assert name == "lifetime" and found.score == (70, 0)
    assert set(placed) == {"area", "lifetime", "first"}
    assert placed["first"].score == (80, 0)


def test_a_tie_keeps_the_plan_found_first(monkeypatch: pytest.MonkeyPatch) -> None:
    found, name, _, _ = _run({"area": 100, "lifetime": 100}, monkeypatch=monkeypatch)
    assert name == "size" and found.score == (100, 0)
    found, name, _, _ = _run({"area": 60, "lifetime": 60}, monkeypatch=monkeypatch)
    assert name == "area"


def test_no_order_is_placed_once_a_plan_is_at_the_lower_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, name, orders, placed = _run(
        {"area": 10, "lifetime": 5, "first": 5}, lower=10, monkeypatch=monkeypatch
    )
    assert orders == ["area"] and name == "area" and list(placed) == ["area"]
    _, _, orders, _ = _run({"area": 50}, best=10, lower=10, monkeypatch=monkeypatch)
    assert orders == []  # the plan given is at the bound already


@pytest.mark.parametrize(
    ("limit", "count"),
    [(0.0, 0), (0.99, 0), (1.0, 1), (2.0, 2), (2.5, 2), (3.0, 3), (50.0, 3)],
)
def test_an_order_is_placed_only_while_the_limit_allows_one_more_placement(
    limit: float, count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each placement takes one second and is expected to: the next one starts while the
    time spent plus one placement stays within the limit (at exactly the limit too)."""
    _, _, orders, placed = _run(
        {"area": 90, "lifetime": 80, "first": 70}, limit=limit, monkeypatch=monkeypatch
    )
    assert orders == ["area", "lifetime", "first"][:count]
    assert len(placed) == count


def test_the_expected_cost_of_a_placement_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 3 seconds and placements expected to take 2 (they take 1), the second starts
    at 1 s (1 + 2 <= 3), the third would end past the limit (2 + 2 > 3)."""
    _, _, orders, _ = _run(
        {"area": 90, "lifetime": 80, "first": 70},
        limit=3.0,
        per_placement=2.0,
        monkeypatch=monkeypatch,
    )
    assert orders == ["area", "lifetime"]
