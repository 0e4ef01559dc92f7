"""Several threads bound to different micro-batches hammer one arena at once."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from arena import Arena

STEPS = 300


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_threads_on_separate_ubatches_never_see_each_others_bytes(framework: str) -> None:
    if framework == "torch":
        pytest.importorskip("torch")
    threads_count = 4
    a = Arena("cpu", ubatches=threads_count, lanes=2, framework="numpy")
    front = a.front(framework)
    barrier = threading.Barrier(threads_count)
    errors: list[str] = []

    def worker(ubatch: int) -> None:
        a.bind_ubatch(ubatch)
        rng = np.random.default_rng(ubatch)
        barrier.wait()
        for step in range(STEPS):
            lane = step % 2
            rows = int(rng.integers(1, 64))
            with a.lane(lane):
                x, y = front.get_simultaneous(((rows, 16), "float32"), ((rows,), "int32"))
                mark = ubatch * 1000 + step
                np.asarray(x)[...] = mark
                np.asarray(y)[...] = -mark
                if a.current_slot() != (ubatch, lane):
                    errors.append(f"thread {ubatch} resolved slot {a.current_slot()}")
                # give other threads a chance to run (and grow their own slots) mid-step
                if step % 7 == 0:
                    threading.Event().wait(0)
                if not (np.asarray(x) == mark).all() or not (np.asarray(y) == -mark).all():
                    errors.append(f"thread {ubatch} step {step}: data overwritten")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stats = a.stats()
    assert stats.calls == threads_count * STEPS
    a.lock()  # every sibling sized: each lane's slots end equal
    for lane in range(2):
        assert len({s.capacity for s in a.stats().slots if s.lane == lane}) == 1
    a.close()


def test_thread_binding_is_per_thread() -> None:
    a = Arena("cpu", ubatches=2, framework="numpy")
    a.bind_ubatch(1)
    seen: list[tuple[int, int]] = []
    t = threading.Thread(target=lambda: seen.append(a.current_slot()))
    t.start()
    t.join()
    assert seen == [(0, 0)]
    assert a.current_slot() == (1, 0)
    a.bind_ubatch(0)
    a.close()
