"""A Hypothesis state machine over scopes, steps, releases, plain requests, lock, unlock
and growth: after every step, every view still alive holds the bytes written into it
(no two live views ever share a byte), and the arena's books balance."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from arena import Arena, ArenaError, ArenaLockedError, ArenaWarning
from tests.sources import RecordingSource

SIZES = st.integers(min_value=0, max_value=3000)


class Planning(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.source = RecordingSource()
        self.ws = Arena(source=self.source, framework="numpy", alignment=64)
        #: Open regions, innermost last: [kind, context object, live views].
        self.regions: list[list[Any]] = []
        #: The last plain request's views: alive until the next request on the slot.
        self.plain: list[tuple[Any, int]] = []
        self.fill = 0

    # ------------------------------------------------------------------ helpers
    def _write(self, views: list[Any]) -> list[tuple[Any, int]]:
        written = []
        for view in views:
            self.fill = self.fill % 251 + 1
            view[...] = self.fill
            written.append((view, self.fill))
        return written

    def _requested(self) -> None:
        """Any request ends the life of the last plain request's views."""
        self.plain = []

    # ------------------------------------------------------------------ rules
    @precondition(lambda self: len(self.regions) < 4)
    @rule()
    def open_scope(self) -> None:
        scope = self.ws.scope()
        scope.__enter__()
        self.regions.append(["scope", scope, []])

    @precondition(lambda self: len(self.regions) < 4)
    @rule(key=st.sampled_from(["a", "b"]))
    def open_step(self, key: str) -> None:
        if any(kind == "step" and ctx.key == key for kind, ctx, _ in self.regions):
            return  # one run of a key at a time
        step = self.ws.step(key)
        with warnings.catch_warnings():
            # A replay at another stack height while locked warns: expected here.
            warnings.simplefilter("ignore", ArenaWarning)
            step.__enter__()
        self.regions.append(["step", step, []])

    @precondition(lambda self: bool(self.regions))
    @rule()
    def close_innermost(self) -> None:
        _, ctx, _ = self.regions.pop()
        ctx.__exit__(None, None, None)

    @precondition(lambda self: bool(self.regions))
    @rule(sizes=st.lists(SIZES, min_size=1, max_size=3))
    def request_in_region(self, sizes: list[int]) -> None:
        _, ctx, live = self.regions[-1]
        try:
            views = ctx.get_simultaneous(*[((n,), "uint8") for n in sizes])
        except ArenaLockedError:
            return
        self._requested()
        live.extend(self._write(views))

    @precondition(lambda self: len(self.regions) >= 2)
    @rule(depth=st.integers(0, 2))
    def request_in_an_outer_region_is_refused(self, depth: int) -> None:
        _, ctx, _ = self.regions[depth % (len(self.regions) - 1)]
        with pytest.raises(ArenaError, match=r"innermost|inside step"):
            ctx.get_simultaneous(((8,), "uint8"))

    @rule(sizes=st.lists(SIZES, min_size=1, max_size=3))
    def plain_request(self, sizes: list[int]) -> None:
        try:
            views = self.ws.get_simultaneous(*[((n,), "uint8") for n in sizes])
        except ArenaLockedError:
            return
        self._requested()
        self.plain = self._write(views)

    @precondition(lambda self: any(r[0] == "step" and r[2] for r in self.regions))
    @rule(pick=st.integers(0, 1000))
    def release(self, pick: int) -> None:
        steps = [r for r in self.regions if r[0] == "step" and r[2]]
        _, ctx, live = steps[pick % len(steps)]
        view, _ = live.pop(pick % len(live))
        ctx.release(view)

    @rule()
    def lock(self) -> None:
        self.ws.lock()

    @rule()
    def unlock(self) -> None:
        self.ws.unlock()

    @rule(nbytes=st.integers(0, 20000))
    def reserve(self, nbytes: int) -> None:
        try:
            self.ws.reserve_bytes(nbytes)
        except ArenaLockedError:
            pass

    @rule()
    def plan(self) -> None:
        self.ws.plan_steps()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def every_live_view_keeps_its_bytes(self) -> None:
        for _, _, live in self.regions:
            for view, value in live:
                assert np.all(view == value), "a live scope or step view was overwritten"
        for view, value in self.plain:
            assert np.all(view == value), "the last plain request's view was overwritten"

    @invariant()
    def books_balance(self) -> None:
        stats = self.ws.stats()
        assert stats.allocations == stats.frees + stats.live_blocks
        assert stats.allocations_while_locked == 0
        assert len(self.source.live) == stats.live_blocks

    def teardown(self) -> None:
        while self.regions:
            _, ctx, _ = self.regions.pop()
            ctx.__exit__(None, None, None)
        self.ws.close()
        assert self.source.live == {}


TestPlanning = Planning.TestCase
TestPlanning.settings = settings(
    max_examples=300,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
