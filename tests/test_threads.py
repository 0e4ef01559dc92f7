"""Several threads bound to different micro-batches hammer one arena at once."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import arena
from arena import Arena
from tests.forkchild import WAIT_FOR_CHILD

F32 = "float32"
STEPS = 300
TIMEOUT = 10


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


FORK_WHILE_HELD = (
    """
import os, signal, sys, threading, time, warnings
from contextlib import contextmanager
from arena import Arena
"""
    + WAIT_FOR_CHILD
    + """

inside, go, armed = threading.Event(), threading.Event(), [False]

@contextmanager
def gate():
    if armed[0]:
        armed[0] = False
        inside.set()
        go.wait(30)
    yield

a = Arena("cpu", framework="numpy", alloc_context=gate, debug=DEBUG, ubatches=2)
a.get_simultaneous(((16,), "float32"))
armed[0] = True

def grow():
    with a.ubatch(1):
        a.get_simultaneous(((1 << 16,), "float32"))

thread = threading.Thread(target=grow)
thread.start()
assert inside.wait(30)
with warnings.catch_warnings():
    # Python 3.12+ warns that forking a multi-threaded process may deadlock: that is
    # exactly the case under test.
    warnings.simplefilter("ignore", DeprecationWarning)
    pid = os.fork()
if pid == 0:  # the child: exit 0 only if every request completes
    code = 1
    try:
        (x,) = a.get_simultaneous(((1 << 12,), "float32"))
        x[:] = 1.0
        with a.ubatch(1):
            a.get_simultaneous(((64,), "float32"))
        a.get_persistent("p", (4,), "float32")
        a.lock()
        a.stats()
        a.close()
        # A new arena in the child registers its resets (forks._GUARD, renewed in the
        # child: Round 12a's forks.py _reset_in_child #1 left it None).
        b = Arena("cpu", framework="numpy", debug=DEBUG)
        b.get_simultaneous(((64,), "float32"))
        b.close()
        code = 0
    finally:
        os._exit(code)
go.set()
thread.join(30)
code = wait_for_child(pid, "the forked child hung on the copied mutex")
a.close()
sys.exit(code)
"""
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("debug", [False, True])
def test_fork_while_another_thread_holds_the_mutex_never_deadlocks_the_child(
    debug: bool,
) -> None:
    """A thread is held inside a growth (the arena's mutex taken) while the main thread
    forks; the child's own requests must complete, not wait forever on a copied lock. In
    a fresh interpreter: frameworks loaded by other tests (JAX) object to fork."""
    script = FORK_WHILE_HELD.replace("DEBUG", str(debug))
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_resource_factory_runs_without_holding_the_arena() -> None:
    a = Arena("cpu", framework="numpy", ubatches=2)

    def factory() -> bool:
        done = threading.Event()

        def grow_another_slot() -> None:
            with a.ubatch(1):
                a.get_simultaneous(((1024,), F32))
            done.set()

        threading.Thread(target=grow_another_slot, daemon=True).start()
        return done.wait(timeout=10)

    assert a.get_persistent_resource("k", factory) is True
    assert a.get_persistent_resource("k", factory) is True  # built once
    a.close()


# ---------------------------------------------------------------------- 7. registry
def test_registry_under_concurrent_init_reset_and_current() -> None:
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        while not stop.is_set():
            arena.reset_arena("cpu")  # so init_arena has nothing to warn about
            arena.init_arena("cpu", framework="numpy")

    def read() -> None:
        while not stop.is_set():
            try:
                arena.current_arena("cpu")
            except arena.NotInitializedError as exc:
                if "initialised: none" not in str(exc):
                    errors.append(exc)
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=churn)] + [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    threading.Event().wait(1.0)
    stop.set()
    for t in threads:
        t.join(TIMEOUT)
    assert errors == []
