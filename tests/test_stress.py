"""Eight threads at once: requests on their own slots with varying sizes, writers checking
their bytes, and threads that lock, unlock, close and reset underneath them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import arena
from arena import Arena, ArenaClosedError, ArenaLockedError
from tests.sources import RecordingSource

F32 = "float32"
SECONDS = 2.0
#: How long a run may go on past SECONDS until every thread has done what the test counts
#: (a view served, an arena closed under a request). On a loaded 2-core machine a thread
#: can go two seconds without a turn at an unlocked arena (CI saw a requester serve
#: nothing); waiting for it costs nothing where it had one, and a run that stays short of
#: it still fails, after this long.
PATIENCE = 60.0


class LockWatchingSource(RecordingSource):
    """Records every allocation made while its arena is locked (there must be none)."""

    def __init__(self) -> None:
        super().__init__()
        self.arena: Arena | None = None
        self.while_locked: list[int] = []

    def allocate(self, nbytes: int) -> arena.Allocation:
        if self.arena is not None and self.arena.is_locked:
            self.while_locked.append(nbytes)
        return super().allocate(nbytes)


def run_for(
    seconds: float,
    stop: threading.Event,
    enough: Callable[[], bool],
    requester: Any,
    *others: Any,
) -> None:
    """Six ``requester(i)`` threads and one thread per other target, stopped after
    ``seconds`` once ``enough()`` holds (or :data:`PATIENCE` seconds later, when it never
    does: the caller's assertions then fail)."""
    threads = [threading.Thread(target=requester, args=(i,)) for i in range(6)]
    threads += [threading.Thread(target=other) for other in others]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    give_up = time.monotonic() + PATIENCE
    while not enough() and time.monotonic() < give_up:
        time.sleep(0.01)
    stop.set()
    for thread in threads:
        thread.join(10)


def test_eight_threads_with_lock_unlock_and_growth_underneath() -> None:
    source = LockWatchingSource()
    a = Arena(source=source, ubatches=4, lanes=2, framework="numpy")
    source.arena = a
    stop = threading.Event()
    errors: list[str] = []
    served = [0] * 6

    def requester(index: int) -> None:
        a.bind_ubatch(index % 4)
        rng = np.random.default_rng(index)
        while not stop.is_set():
            rows = int(rng.integers(1, 4096))
            try:
                with a.lane(index // 4):
                    x, y = a.get_simultaneous(((rows, 4), F32), ((rows,), "int32"))
            except ArenaLockedError:
                continue
            mark = index * 100_000 + served[index] % 100_000
            x[...] = mark
            y[...] = -mark
            if x.base.nbytes < x.nbytes or not (x == mark).all() or not (y == -mark).all():
                errors.append(f"thread {index}: bytes overwritten or view out of bounds")
            served[index] += 1

    def toggler() -> None:
        while not stop.is_set():
            a.lock()
            time.sleep(0.001)
            a.unlock()

    def sharer() -> None:  # every thread that binds nothing shares slot (0, 0): allowed
        while not stop.is_set():
            try:
                (v,) = a.get_simultaneous(((int(time.time_ns() % 5000) + 1,), F32))
            except ArenaLockedError:
                continue
            if v.base.nbytes < v.nbytes:
                errors.append("shared slot: view past its buffer")

    run_for(SECONDS, stop, lambda: all(served), requester, toggler, sharer)
    assert errors == []
    assert source.while_locked == []
    stats = a.stats()
    assert stats.allocations_while_locked == 0
    assert stats.allocations == stats.frees + stats.live_blocks
    assert all(count > 0 for count in served)
    a.close()
    assert source.live == {}


def test_requests_racing_close_and_reset_get_views_or_closed_errors() -> None:
    stop = threading.Event()
    errors: list[str] = []
    arenas: list[Arena] = []
    counts = {"views": 0, "closed": 0}

    def requester(index: int) -> None:
        while not stop.is_set():
            try:
                current = arena.current_arena("cpu")
                with current.ubatch(index):
                    (v,) = current.get_simultaneous(((1 + index * 997 % 8192,), F32))
            except (ArenaClosedError, arena.NotInitializedError):
                counts["closed"] += 1
                continue
            v[...] = index
            if v.base.nbytes < v.nbytes or not (v == index).all():
                errors.append(f"thread {index}: bad view")
            counts["views"] += 1

    def resetter() -> None:
        while not stop.is_set():
            arenas.append(arena.init_arena("cpu", framework="numpy", ubatches=6))
            time.sleep(0.0005)
            arena.reset_arena("cpu")

    def closer() -> None:  # closes whatever arena is current, racing the resetter
        while not stop.is_set():
            try:
                arena.current_arena("cpu").close()
            except arena.NotInitializedError:
                pass
            time.sleep(0.0003)

    def enough() -> bool:
        return counts["views"] > 0 and counts["closed"] > 0

    run_for(SECONDS, stop, enough, requester, resetter, closer)
    arena.reset_arena(all_devices=True)
    assert errors == []
    assert counts["views"] > 0 and counts["closed"] > 0
    for closed in arenas:  # nothing allocated on a closed arena outlives its close()
        stats = closed.stats()
        assert closed.is_closed and stats.live_blocks == 0
        assert stats.allocations == stats.frees
