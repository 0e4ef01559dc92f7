"""improve() asks no decision twice that hit its node limit (issue 31).

A decision depends only on its capacity, preorder and node limit, so one that hit its
node limit hits it again when asked again. A round that moved a bound runs again under the
same node limit and probes the proven bound first: it used to decide the bound again under
every preorder and hit the limit again (on Inception v3's training step at batch 1, half
of the CPU time of a 10 s search). The repeats are left out; the outcomes stay those of
the decisions asked.
"""

from __future__ import annotations

import time
from typing import ClassVar

import pytest

from arena.planning import search

_FOUND, _ABORT, _TIME = 0, 2, 3


class _Stub:
    """A decider whose decisions hit the node limit below ``easy`` units of capacity (so
    at the proven bound) and find a plan at ``easy`` and above: every round that finds one
    runs again under the same limit. After 300 decisions it answers as the clock would."""

    easy = 130
    asked: ClassVar[list[tuple[int, int, int]]] = []

    def __init__(self, size: list[int], first: list[int], last: list[int]) -> None:
        self.size = size

    def decide(
        self, capacity: int, which: int, node_limit: int, deadline: float
    ) -> tuple[int, list[int], int]:
        if len(self.asked) == 300 or time.perf_counter() > deadline:
            return _TIME, [], 0  # the clock, after a few hundred decisions
        self.asked.append((capacity, which, node_limit))
        if capacity < self.easy:
            return _ABORT, [], node_limit
        return _FOUND, [capacity - s for s in self.size], 1


def test_a_decision_that_hit_its_node_limit_is_not_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search, "compiled", None)
    monkeypatch.setattr(search, "_PythonDecider", _Stub)
    _Stub.asked = []
    size, first, last = [10, 20], [0, 0], [1, 1]
    out = search.improve(size, first, last, [0, 10 + 1000], lower=100, time_limit=60)
    assert out.total == _Stub.easy and out.limit_reached and not out.optimal
    asked = _Stub.asked
    assert (100, 0, 128) in asked  # the bound, probed under the first limit
    assert len(asked) == len(set(asked))
    # Each round still probed what it had not asked: the bound under each new limit.
    limits = sorted({a[2] for a in asked})
    assert len(limits) >= 3
    assert all((100, which, limit) in asked for limit in limits[:-1] for which in range(3))
