"""Planted bugs the suite let through in arena.distributed (branch plant36): each test
names the bug it kills, was seen to fail with that bug planted, and passes on the code."""

from __future__ import annotations

from arena import Arena


class _OneRank:
    """A group of one rank: both collectives answer this rank's own values."""

    def all_reduce_max(self, values: list[int]) -> list[int]:
        return list(values)

    def all_gather(self, data: bytes) -> list[bytes]:
        return [data]


class _OneRankWithBarrier(_OneRank):
    """The same, with the barrier ``sync()`` calls first where a group has one (a torch
    group on gloo: a monitored barrier)."""

    def __init__(self) -> None:
        self.entered = 0

    def enter(self) -> None:
        self.entered += 1


def test_sync_reports_the_barrier_among_its_collectives() -> None:
    # Plant DS2: SyncReport.collectives left out the barrier that a group's enter() runs.
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((1024,), "float32"))
        plain = ws.sync(_OneRank())
        group = _OneRankWithBarrier()
        barred = ws.sync(group)
        assert group.entered == 1
        assert plain.collectives >= 1
        assert barred.collectives == plain.collectives + 1
