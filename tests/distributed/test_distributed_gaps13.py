"""Mutation round 13b (issue 26 item 12): what ``ws.sync`` reports about the group and
the exchange (``arena/distributed/sync.py``, ``wire.py``), on ranks as threads of this
process (tests/threadgroup.py), whose calls are recorded: the report names each rank
and the world where the group says them as ints, counts every byte this rank handed the
collectives (the schema gather included) and times the sync.
"""

from __future__ import annotations

import json
from typing import Any

from arena import Arena
from arena.distributed.wire import encode_entry
from tests.threadgroup import RankGroup, ThreadRanks


def _handed(calls: list[tuple[str, int]]) -> int:
    """Bytes handed to the collectives: 8 per int reduced, the bytes gathered."""
    return sum(8 * n if name == "all_reduce_max" else n for name, n in calls)


def test_the_report_names_rank_and_world_and_counts_every_byte_handed_over() -> None:
    ranks = ThreadRanks(3)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            ws.get_simultaneous(((256 * (rank + 1),), "float32"))
            if rank == 1:
                ws.get_library_workspace("only-rank-1", 4096)  # the schemas differ
            return ws.sync(group)

    reports = ranks.run(body)
    assert [(r.rank, r.world) for r in reports] == [(0, 3), (1, 3), (2, 3)]
    for rank, report in enumerate(reports):
        calls = ranks.calls[rank]
        assert [name for name, _ in calls] == [
            "all_reduce_max",  # the probe
            "all_gather",  # the probes' heads: the schemas differ
            "all_reduce_max",  # the distinct schemas
            "all_reduce_max",  # the values
        ]
        assert report.payload_bytes == _handed(calls)
        assert report.collectives == 4 and report.schemas == 2
        assert type(report.seconds) is float and report.seconds >= 0.0


def test_identical_ranks_count_the_probe_and_the_values_alone() -> None:
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            ws.get_simultaneous(((256,), "float32"))
            return ws.sync(group)

    reports = ranks.run(body)
    for rank, report in enumerate(reports):
        assert [name for name, _ in ranks.calls[rank]] == ["all_reduce_max"] * 2
        assert report.payload_bytes == _handed(ranks.calls[rank]) > 56  # the probe's 7 ints
        assert (report.rank, report.world) == (rank, 2)


class _Alone:
    """A one-rank group whose ``rank`` and ``world`` are given (any objects)."""

    def __init__(self, rank: Any, world: Any) -> None:
        self.rank = rank
        self.world = world

    def all_reduce_max(self, values: list[int]) -> list[int]:
        return list(values)

    def all_gather(self, data: bytes) -> list[bytes]:
        return [data]


def test_a_rank_or_world_that_is_not_an_int_is_reported_as_none() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((64,), "float32"))
        assert (ws.sync(_Alone(0, 1)).rank, ws.sync(_Alone(0, 1)).world) == (0, 1)
        report = ws.sync(_Alone(True, "one"))  # a bool is no rank number
        assert (report.rank, report.world) == (None, None)
        report = ws.sync(_Alone(2, 4.0))
        assert (report.rank, report.world) == (2, None)


def test_an_entrys_canonical_text_is_compact_ascii_json() -> None:
    """The same bytes on every rank whatever its locale or terminal: no spaces, and
    anything outside ASCII (a key's repr may hold any printable character) escaped."""
    entry = ["workspace", 0, repr("café"), [1, 2], {"k": True}]
    text = encode_entry(entry)
    assert text == '["workspace",0,"\'caf\\u00e9\'",[1,2],{"k":true}]'
    assert text.isascii() and json.loads(text) == entry
