"""A Hypothesis state machine drives requests, reserve, lock/unlock, close, injected faults
and capture marks against a small reference model; and a fault injected at every
allocation of a warm-up, one run per allocation point."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from arena import (
    Arena,
    ArenaClosedError,
    ArenaLockedError,
    ArenaOutOfMemoryError,
    GraphCaptureError,
)
from tests.gates import Probe
from tests.sources import FaultySource

ALIGN = 256
UBATCHES = 2


def round_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class ArenaMachine(RuleBasedStateMachine):
    """The model: per-slot capacity, the locked and closed flags, captured blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.source = FaultySource(fault=MemoryError)
        self.probe = Probe()
        self.arena = Arena(
            source=self.source, ubatches=UBATCHES, framework="numpy", capture_probe=self.probe
        )
        self.capacity = [0] * UBATCHES
        self.locked = False
        self.closed = False
        self.captured: set[int] = set()  # pointers of blocks served during a capture
        self.step = 0

    def _slot_ptr(self, view: Any) -> int:
        # The first view sits at offset 0: its address is the block's.
        return int(view.__array_interface__["data"][0])

    def _fault_next(self, fault: bool) -> None:
        self.source.fail_at = {self.source.allocate_calls + 1} if fault else set()

    @rule(
        ubatch=st.integers(0, UBATCHES - 1),
        sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=3),
        fault=st.booleans(),
    )
    def request(self, ubatch: int, sizes: list[int], fault: bool) -> None:
        self._fault_next(fault)
        events = len(self.source.events)
        required = sum(round_up(4 * n) for n in sizes)
        specs = tuple(((n,), "float32") for n in sizes)
        before = self.capacity[ubatch]
        try:
            with self.arena.ubatch(ubatch):
                views = self.arena.get_simultaneous(*specs)
        except ArenaClosedError:
            assert self.closed
            return
        except ArenaLockedError:
            assert self.locked and required > before
            assert len(self.source.events) == events
            return
        except GraphCaptureError:
            assert self.probe.capturing
            return
        except ArenaOutOfMemoryError:
            assert fault and not self.locked
            assert self.arena.stats().slots[ubatch].capacity == before  # kept its old size
            return
        finally:
            self.source.fail_at = set()
        assert not self.closed
        if self.locked:
            assert len(self.source.events) == events  # nothing allocated or freed
        self.step += 1
        for index, view in enumerate(views):
            view[...] = self.step * 10 + index
            assert view.nbytes <= view.base.nbytes
        for index, view in enumerate(views):
            assert (view == self.step * 10 + index).all()  # no overlap between views
        capacity = self.arena.stats().slots[ubatch].capacity
        assert capacity >= required and capacity >= before
        self.capacity[ubatch] = capacity
        if self.probe.capturing and any(sizes):
            self.captured.add(self._slot_ptr(views[0]))

    @rule(nbytes=st.integers(0, 40_000), fault=st.booleans())
    def reserve(self, nbytes: int, fault: bool) -> None:
        self._fault_next(fault)
        try:
            self.arena.reserve_bytes(nbytes)
        except ArenaClosedError:
            assert self.closed
        except ArenaLockedError:
            assert self.locked and nbytes > min(self.capacity)
        except GraphCaptureError:
            assert self.probe.capturing
        except ArenaOutOfMemoryError:
            assert fault
        else:
            assert not self.closed
            assert all(c >= nbytes for c in self._capacities())
        finally:
            self.source.fail_at = set()
            if not self.closed:
                self.capacity = self._capacities()

    def _capacities(self) -> list[int]:
        return [s.capacity for s in self.arena.stats().slots]

    @rule(fault=st.booleans())
    def lock(self, fault: bool) -> None:
        self._fault_next(fault)
        releases = [e for e in self.source.events if e[0] == "release"]
        try:
            self.arena.lock()
        except ArenaClosedError:
            assert self.closed
        except GraphCaptureError:
            assert self.probe.capturing
        except ArenaOutOfMemoryError:
            assert fault and not self.arena.is_locked
        else:
            self.locked = True
            assert len(set(self._capacities())) == 1  # siblings sized alike
        finally:
            self.source.fail_at = set()
        assert [e for e in self.source.events if e[0] == "release"] == releases
        if not self.closed:
            self.capacity = self._capacities()

    @rule()
    def unlock(self) -> None:
        try:
            self.arena.unlock()
        except ArenaClosedError:
            assert self.closed
        else:
            self.locked = False

    @rule(capturing=st.booleans())
    def capture(self, capturing: bool) -> None:
        self.probe.capturing = capturing

    @precondition(lambda self: not self.closed)
    @rule()
    def release_retired(self) -> None:
        self.arena.release_retired()

    @rule()
    def close(self) -> None:
        self.arena.close()
        self.closed = True
        self.captured.clear()
        self.capacity = [0] * UBATCHES

    @invariant()
    def books_balance(self) -> None:
        stats = self.arena.stats()
        assert stats.allocations == stats.frees + stats.live_blocks
        assert len(self.source.live) == stats.live_blocks
        assert stats.allocations_while_locked == 0
        if self.closed:
            assert self.source.live == {}

    @invariant()
    def captured_blocks_stay_alive_until_close(self) -> None:
        assert self.captured <= set(self.source.live)


ArenaMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestArenaMachine = ArenaMachine.TestCase


def warm_up(a: Arena) -> None:
    """A small engine-like warm-up: growth on two ubatches, persistent buffers, reserve,
    a resource, then lock and a steady step."""
    for ubatch, rows in ((0, 16), (1, 64), (0, 512), (1, 8)):
        with a.ubatch(ubatch):
            x, y = a.get_simultaneous(((rows, 32), "float32"), ((rows,), "int64"))
            x[...] = 1.0
            y[...] = 2
            a.get_persistent(("kv", ubatch), (64,), "float32", zero_init=True)
    a.reserve_bytes(1 << 16)
    a.get_persistent_resource("table", dict)
    a.lock()
    with a.ubatch(1):
        a.get_simultaneous(((512, 32), "float32"))


def _allocation_points() -> int:
    source = FaultySource()
    with Arena(source=source, ubatches=2, framework="numpy") as a:
        warm_up(a)
    return source.allocate_calls


@pytest.mark.parametrize("fault", [MemoryError, KeyboardInterrupt])
def test_a_fault_at_every_allocation_of_a_warm_up(fault: type[BaseException]) -> None:
    points = _allocation_points()
    assert points >= 6
    for point in range(1, points + 1):
        source = FaultySource(fail_at={point}, fault=fault)
        a = Arena(source=source, ubatches=2, framework="numpy")
        expected = ArenaOutOfMemoryError if fault is MemoryError else fault
        with pytest.raises(expected):
            warm_up(a)
        stats = a.stats()
        assert stats.allocations == stats.frees + stats.live_blocks, point
        assert len(source.live) == stats.live_blocks, point
        for slot in stats.slots:
            assert slot.growths == 0 or slot.capacity > 0, point  # no slot left emptied
        # the arena is still usable: the same warm-up, without faults, completes
        source.fail_at = set()
        if a.is_locked:
            a.unlock()
        warm_up(a)
        (v,) = a.get_simultaneous(((512, 32), "float32"))
        v[...] = 3
        assert np.all(v == 3)
        a.close()
        assert source.live == {}, point
