"""A group of ranks as threads of one process, for fast tests of the sync exchange: each
rank's collectives meet at a barrier (with a timeout, so a rank that never comes ends
the others' wait with an error, as a backend's timeout does)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class ThreadRanks:
    """``world`` ranks; :meth:`group` gives rank ``r`` its group object."""

    def __init__(self, world: int, timeout: float = 10.0) -> None:
        self.world = world
        self.timeout = timeout
        self._barrier = threading.Barrier(world)
        self._slots: list[Any] = [None] * world
        self.calls: list[list[tuple[str, int]]] = [[] for _ in range(world)]

    def group(self, rank: int) -> RankGroup:
        return RankGroup(self, rank)

    def meet(self, rank: int, value: Any, combine: Callable[[list[Any]], Any]) -> Any:
        self._slots[rank] = value
        self._barrier.wait(self.timeout)  # everyone has written
        result = combine(list(self._slots))
        self._barrier.wait(self.timeout)  # everyone has read
        return result

    def run(self, body: Callable[[int, RankGroup], Any]) -> list[Any]:
        """``body(rank, group)`` on one thread per rank; each rank's result or exception."""
        results: list[Any] = [None] * self.world

        def main(rank: int) -> None:
            try:
                results[rank] = body(rank, self.group(rank))
            except BaseException as exc:  # handed back to the test
                results[rank] = exc

        threads = [threading.Thread(target=main, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.timeout * 4)
        assert not any(t.is_alive() for t in threads), "a rank hangs"
        return results


class RankGroup:
    """One rank's view of :class:`ThreadRanks`: the two collectives of a SyncGroup."""

    def __init__(self, ranks: ThreadRanks, rank: int) -> None:
        self.ranks = ranks
        self.rank = rank
        self.world = ranks.world

    def all_reduce_max(self, values: list[int]) -> list[int]:
        self.ranks.calls[self.rank].append(("all_reduce_max", len(values)))

        def combine(rows: list[list[int]]) -> list[int]:
            lengths = {len(r) for r in rows}
            assert len(lengths) == 1, f"ranks passed lists of lengths {sorted(lengths)}"
            return [max(column) for column in zip(*rows, strict=True)]

        return self.ranks.meet(self.rank, list(values), combine)  # type: ignore[no-any-return]

    def all_gather(self, data: bytes) -> list[bytes]:
        self.ranks.calls[self.rank].append(("all_gather", len(data)))
        return self.ranks.meet(self.rank, bytes(data), list)  # type: ignore[no-any-return]
