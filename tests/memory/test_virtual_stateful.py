"""A Hypothesis state machine over the fixed-address host source: requests that grow,
lock (plain and in place), unlock, sleep at both levels, wake (with and without poison),
persistent buffers and steps, checking every live view's bytes against a model of the
slot's memory by address, and that the slot's base address never moves."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from arena import Arena, ArenaAsleepError, ArenaLockedError, ArenaWarning
from arena.base.poison import PATTERN_BYTE

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="source='virtual' on the host is Linux's"
)

RESERVE = 1 << 20
KEYS = 3


def _ptr(view: np.ndarray) -> int:
    return int(view.ctypes.data)


class VirtualMachine(RuleBasedStateMachine):
    """The model: the slot's bytes by offset from its base, each persistent buffer's
    bytes, the lock and sleep states."""

    def __init__(self) -> None:
        super().__init__()
        self.arena = Arena("cpu", source="virtual", max_bytes=RESERVE, framework="numpy")
        self.memory = np.zeros(RESERVE, np.uint8)  # the slot's bytes, by offset
        self.base: int | None = None
        self.views: list[tuple[np.ndarray, int]] = []  # (view, offset from the base)
        self.persistent: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.locked = ""  # "", "plain" or "in_place"
        self.asleep = 0
        self.counter = 0

    def _capacity(self) -> int:
        return self.arena.stats().slots[0].capacity

    def _take(self, view: np.ndarray) -> None:
        """Check the new view is inside the slot's range, then write a fresh pattern."""
        if self.base is None:
            self.base = _ptr(view)
        offset = _ptr(view) - self.base
        assert offset >= 0 and offset + view.nbytes <= RESERVE
        self.counter += 1
        pattern = (np.arange(view.nbytes) * 7 + self.counter).astype(np.uint8)
        view[:] = pattern
        self.memory[offset : offset + view.nbytes] = pattern
        self.views.append((view, offset))
        del self.views[:-40]  # check the latest views (all stay valid; this bounds time)

    @rule(n=st.integers(1, 200_000))
    def request(self, n: int) -> None:
        if self.asleep:
            with pytest.raises(ArenaAsleepError):
                self.arena.numpy.get_simultaneous(((n,), "uint8"))
            return
        if self.locked == "plain" and n > self._capacity():
            with pytest.raises(ArenaLockedError):
                self.arena.numpy.get_simultaneous(((n,), "uint8"))
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ArenaWarning)  # in-place growth warns
            (view,) = self.arena.numpy.get_simultaneous(((n,), "uint8"))
        self._take(view)

    @precondition(lambda self: not self.asleep and not self.locked)
    @rule(sizes=st.lists(st.integers(1, 50_000), min_size=1, max_size=3), key=st.integers(0, 1))
    def step(self, sizes: list[int], key: int) -> None:
        with self.arena.step(key):
            for size in sizes:
                (view,) = self.arena.numpy.get_simultaneous(((size,), "uint8"))
                self._take(view)

    @rule(key=st.integers(0, KEYS - 1))
    def persistent(self, key: int) -> None:
        shape = (1000 * (key + 1),)
        if self.asleep:
            with pytest.raises(ArenaAsleepError):
                self.arena.numpy.get_persistent(key, shape, "uint8")
            return
        if self.locked and key not in self.persistent:
            with pytest.raises(ArenaLockedError):
                self.arena.numpy.get_persistent(key, shape, "uint8")
            return
        view = self.arena.numpy.get_persistent(key, shape, "uint8")
        if key in self.persistent:
            old, expected = self.persistent[key]
            assert _ptr(old) == _ptr(view)
            assert np.array_equal(view, expected)
        self.counter += 1
        view[:] = self.counter % 256
        self.persistent[key] = (view, view.copy())

    @rule(in_place=st.booleans())
    def lock(self, in_place: bool) -> None:
        if self.asleep:
            return
        self.arena.lock(growth="in_place" if in_place else None)
        self.locked = "in_place" if in_place else "plain"

    @rule()
    def unlock(self) -> None:
        self.arena.unlock()
        self.locked = ""

    @rule(level=st.sampled_from([1, 2]))
    def sleep(self, level: int) -> None:
        self.arena.sleep(level=level)
        if not self.asleep:
            self.asleep = level

    @rule(poison=st.booleans())
    def wake(self, poison: bool) -> None:
        self.arena.wake(poison=poison)
        if not self.asleep:
            return
        # Scratch is discarded: fresh zero pages, or the sentinel where poisoned (each
        # committed page; the model checks the views, which lie inside them).
        self.memory[:] = PATTERN_BYTE if poison else 0
        if self.asleep == 2:
            self.persistent = {
                k: (view, np.full_like(view, PATTERN_BYTE if poison else 0))
                for k, (view, _) in self.persistent.items()
            }
        self.asleep = 0

    @invariant()
    def views_hold_their_bytes(self) -> None:
        assert bool(self.arena.is_asleep) == bool(self.asleep)
        if self.asleep:
            return  # touching a view now would fault: that is the documented limit
        for view, offset in self.views:
            assert np.array_equal(view, self.memory[offset : offset + view.nbytes])
        for view, expected in self.persistent.values():
            assert np.array_equal(view, expected)
        stats = self.arena.memory_stats()
        assert stats["arena.retired_bytes"] == 0  # nothing retired, ever
        assert stats["arena.resident_bytes"] == stats["reserved_bytes.all.current"]

    def teardown(self) -> None:
        self.arena.close()


VirtualMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestVirtualMachine = VirtualMachine.TestCase
