"""Gaps left by the mutation run of issue 26, Round 7 (replay.py, runs.py, records.py,
plan.py, scopes.py): each test was seen to fail with its mutant planted by hand in the
sources of ce13eb1 and to pass on the code. Public API wherever the behaviour shows
there."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

from arena import Arena, ArenaError, ArenaWarning
from tests.gates import Probe, moving_only, run

TIMEOUT = 30.0

SPEC = ((64,), "float32")


def _replay(ws: Arena) -> None:
    with ws.step("captured") as st:
        st.get_simultaneous(SPEC)


@moving_only("a growth in place keeps the captured buffer where it is, retiring nothing")
def test_a_locked_replay_captured_by_a_graph_keeps_its_buffer_after_unlock(
    hit_path: str,
) -> None:
    # replay.py served #2 (`placer.probe and ...`): a locked replay's hit under a capture
    # probe skipped the capture mark, so once unlocked a growth released the buffer the
    # graph replays.
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        for _ in range(2):  # record, then plan and the first replay
            _replay(ws)
        ws.lock()
        probe.capturing = True
        _replay(ws)  # the locked replay's hit, captured
        probe.capturing = False
        ws.unlock()
        assert ws.stats().slots[0].retired_buffers == 0
        ws.get_simultaneous(((1 << 20,), "uint8"))  # grows the slot
        assert ws.stats().slots[0].retired_buffers == 1


def test_a_cached_replay_locked_inside_its_step_hands_out_its_remembered_views(
    hit_path: str,
) -> None:
    # replay.py served #5 (`return False` where the watched hit needs no bookkeeping): a
    # replay entered unlocked (its hit watched for the request log) and locked before its
    # request left the hit for the checked path, which builds new view objects.
    with Arena("cpu", framework="numpy", cached_views=True) as ws:
        handed = []
        for _ in range(4):  # record, plan, then replays that remember and serve
            with ws.step("k") as st:
                handed.append(st.get_simultaneous(SPEC)[0])
        assert handed[3] is handed[2]
        with ws.step("k") as st:
            ws.lock()  # locked inside the run: the request log is no longer told
            (view,) = st.get_simultaneous(SPEC)
        assert view is handed[3]


def test_a_cached_replay_hands_out_every_requests_remembered_views(hit_path: str) -> None:
    # replay.py remembering #1, #2 (each request's views remembered in a list of their
    # own, which replaced the list of the requests before): a replay of two requests
    # never served its first request from memory.
    with Arena("cpu", framework="numpy", cached_views=True) as ws:
        runs = []
        for _ in range(5):
            with ws.step("two") as st:
                (a,) = st.get_simultaneous(((64,), "float32"))
                (b,) = st.get_simultaneous(((32,), "float32"))
                runs.append((a, b))
        assert runs[4][0] is runs[3][0] is runs[2][0]
        assert runs[4][1] is runs[3][1] is runs[2][1]


def test_a_replay_that_misses_one_request_still_serves_the_next_from_memory(
    hit_path: str,
) -> None:
    # replay.py remembering #13 (`install(buffer, None)`): a request the replay's memory
    # did not hold (a smaller view the plan fits) switched the hit off for the rest of
    # the run, so the next request, remembered, got new view objects.
    with Arena("cpu", framework="numpy", cached_views=True) as ws:
        runs = []
        for first in (64, 64, 64, 64, 48):
            with ws.step("two") as st:
                (a,) = st.get_simultaneous(((first,), "float32"))
                (b,) = st.get_simultaneous(((32,), "float32"))
                runs.append((a, b))
        assert runs[3][1] is runs[2][1]
        assert runs[4][0].shape == (48,)
        assert runs[4][1] is runs[3][1]


class _ArmedProbe:
    """A capture probe that says "capturing" to one thread only and, once armed, holds
    that thread inside its next call until released (the window between a replayed
    hit's views and their capture mark)."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.armed = False
        self.inside = threading.Event()
        self.go = threading.Event()

    def __call__(self) -> bool:
        if threading.current_thread() is not self.thread:
            return False
        if self.armed:
            self.armed = False
            self.inside.set()
            assert self.go.wait(TIMEOUT)
        return True


@moving_only("a growth in place keeps the buffer: nothing races the capture mark")
def test_a_replayed_hit_raced_by_a_growth_is_noted_once_at_its_own_size(hit_path: str) -> None:
    # replay.py served #13, #20 (no `retry`: the plain request path): a growth from
    # another thread between a captured replay's hit and its capture mark served the
    # request again as a plain request above the step (noted in the request log at 512
    # bytes) before the step placed it at its planned offset.
    probe = _ArmedProbe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        for _ in range(3):
            _replay(ws)

        def capture() -> Any:
            probe.thread = threading.current_thread()
            with ws.step("captured") as st:
                probe.armed = True
                return st.get_simultaneous(SPEC)

        before = ws.stats().calls
        thread, out = run(capture)
        try:
            assert probe.inside.wait(TIMEOUT)
            ws.get_simultaneous(((1 << 18,), "float32"))  # grows the slot in the window
        finally:
            probe.go.set()
            thread.join(TIMEOUT)
        (view,) = out[0]
        assert view.shape == (64,)
        sites = {site: peak for site, peak in ws.stats().call_sites.items() if "capture" in site}
        assert list(sites.values()) == [256]
        # Two requests served (the growing one and the raced replay's), each counted once:
        # the raced hit's count was taken back by the capture mark's retry, never made.
        assert ws.stats().calls == before + 2


def _nesting(ws: Arena, *, later: bool) -> None:
    """An outer step whose live views, where the inner step opens, end higher in its
    recording run's first fit than in its plan (``later``: 2304 and 1792 bytes)."""
    with ws.step("outer") as outer:
        (a,) = outer.get_simultaneous(((128 if later else 64,), "float32"))
        outer.get_simultaneous(((256,), "float32"))
        outer.release(a)
        if later:
            outer.get_simultaneous(((192,), "float32"))
        with ws.step("inner") as inner:
            inner.get_simultaneous(((128,), "float32"))
            with ws.step("innermost") as innermost:
                innermost.get_simultaneous(((32,), "float32"))


def test_a_restored_step_recorded_anew_and_planned_at_lock_moves_its_inner_step_quietly(
    tmp_path: Path,
) -> None:
    # records.py set_plan #2 (`version - 1`): a plan restored from a profile has version
    # 1, so the plan made after the key recorded anew got version 0, the version its
    # last replay had "settled": the first locked replay of the new plan did not count as
    # moved, and the step inside it, now lower (its outer's plan, not the recording's
    # first fit), warned that it starts away from its plan. settle #6 (`moved` False for
    # a replay settled at a new start): the inner step moved down, but the step inside
    # it was not told and warned the same.
    profile = tmp_path / "profile.json"
    with Arena("cpu", framework="numpy", profile=profile) as ws:
        for _ in range(3):
            _nesting(ws, later=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ArenaWarning)
        with Arena("cpu", framework="numpy", profile=profile) as ws:
            _nesting(ws, later=True)  # request 0 outgrows the stored plan: records anew
            ws.lock()  # plans it
            for _ in range(2):
                _nesting(ws, later=True)  # the plan's first replay, then a later one


def _pair(ws: Arena, first: int, second: int) -> None:
    with ws.step("pair") as st:
        st.get_simultaneous(((first,), "float32"), ((second,), "float32"))


def test_lock_again_plans_each_micro_batchs_new_steps_on_their_own(hit_path: str) -> None:
    # plan.py StepPlanHook.lane_need #7 (`merge` not passed on: True): lock() while locked
    # merged the micro-batches' plans of a key recorded since, each block at its largest
    # size, 8192 bytes where each slot holds 6144, so both replays were refused.
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        for ubatch in (0, 1):
            with ws.ubatch(ubatch):
                ws.get_simultaneous(((1536,), "float32"))  # 6144 bytes per slot
        ws.lock()
        sizes = {0: (1024, 256), 1: (256, 1024)}  # 5120 bytes each, 8192 merged
        for ubatch, (first, second) in sizes.items():
            with ws.ubatch(ubatch):
                for _ in range(2):  # recorded while locked, within the slot
                    _pair(ws, first, second)
        ws.lock()  # again: nothing may grow, the steps recorded since are planned
        for ubatch, (first, second) in sizes.items():
            with ws.ubatch(ubatch):
                _pair(ws, first, second)
        assert [s.capacity for s in ws.stats().slots] == [6144, 6144]


def _three_deep(ws: Arena, first: int, second: int) -> None:
    with ws.step("outer") as outer:
        outer.get_simultaneous(((256,), "float32"))
        with ws.step("middle") as middle:
            middle.get_simultaneous(((64,), "float32"))
            with ws.step("inner") as inner:
                inner.get_simultaneous(((first,), "float32"), ((second,), "float32"))


def test_lock_sizes_the_lane_for_a_merged_plan_two_steps_down(hit_path: str) -> None:
    # plan.py _slot_lifts #39 (`-` for `+`), #45 (`lift(None, ...)`): what a merged plan
    # adds two levels down (inner, in middle, in outer) was not passed up to the outer
    # step, so lock() sized the slots 5632 bytes and both locked runs were refused.
    # lift_outer_steps #20 (`is not b`): the outer books were looked for in every slot,
    # also one without the key, and lock() raised KeyError.
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        sizes = {0: (1024, 64), 1: (64, 1024)}  # the merged inner plan holds 1024 + 1024
        for ubatch, (first, second) in sizes.items():
            with ws.ubatch(ubatch):
                for _ in range(3):
                    _three_deep(ws, first, second)
        with ws.ubatch(0):  # a key one micro-batch ran: the other gets a copy of its plan
            for _ in range(2):
                _replay(ws)
        ws.lock()
        for ubatch, (first, second) in sizes.items():
            with ws.ubatch(ubatch):
                _three_deep(ws, first, second)
                _replay(ws)
        assert [s.capacity for s in ws.stats().slots] == [9472, 9472]


def _nest(ws: Arena, outer: str, inner: str) -> None:
    with ws.step(outer) as o:
        o.get_simultaneous(((64,), "float32"))
        with ws.step(inner) as i:
            i.get_simultaneous(((32,), "float32"))


def test_lock_plans_steps_run_inside_each_other_both_ways() -> None:
    # plan.py _slot_lifts #49 (`path & {c}`: the keys on the way down forgotten): keys
    # nested both ways (a in b, b in a) made lock() recurse until RecursionError.
    with Arena("cpu", framework="numpy") as ws:
        for outer, inner in (("a", "b"), ("a", "b"), ("b", "a"), ("b", "a")):
            _nest(ws, outer, inner)
        with pytest.warns(ArenaWarning, match="its plan at byte"):  # two heights each
            ws.lock()
            _nest(ws, "b", "a")
            _nest(ws, "a", "b")


def test_lock_during_a_micro_batchs_first_run_keeps_that_run_as_its_record(
    hit_path: str,
) -> None:
    # plan.py share_plans #38 (`runs and running`): lock() during micro-batch 1's first
    # run of a key gave its slot a copy of micro-batch 0's plan in place of the book the
    # run was recording into, so its next run, locked, was refused as diverging.
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        with ws.ubatch(0):
            for _ in range(2):
                with ws.step("k") as st:
                    st.get_simultaneous(((64,), "float32"))
        with ws.ubatch(1):
            with ws.step("k") as st:  # its first run, recording
                st.get_simultaneous(((512,), "float32"))
                ws.lock()
            with ws.step("k") as st:
                (view,) = st.get_simultaneous(((512,), "float32"))
        assert view.shape == (512,)


def test_a_step_inside_a_scope_replays_from_its_second_run(hit_path: str) -> None:
    # plan.py plan_for_run #7 (`book.planned and ...`): a step entered under an open scope
    # was never planned there, so every run recorded anew (new view objects each run,
    # where a cached front's replay hands out the ones it remembered).
    with Arena("cpu", framework="numpy", cached_views=True) as ws:
        handed = []
        for _ in range(4):
            with ws.scope() as scope:
                scope.get_simultaneous(((64,), "float32"))
                with ws.step("in a scope") as st:
                    handed.append(st.get_simultaneous(((32,), "float32"), ((16,), "float32")))
        assert handed[3][0] is handed[2][0]
        assert handed[3][1] is handed[2][1]


def test_a_remembered_scope_request_under_an_inner_scope_is_refused(hit_path: str) -> None:
    # scopes.py Scope.get_simultaneous #3 (`slot is not None or ...`): the scope's hit
    # served a remembered request through a scope that is not the innermost open one
    # (its views would outlive the inner scope's, above them), where the request path
    # refuses it.
    with Arena("cpu", framework="numpy") as ws:
        for locked in (False, True):  # unlocked, the request log watches every request
            if locked:
                ws.lock()
            for _ in range(2):  # locked: the request at the scope's start is remembered
                with ws.scope() as scope:
                    scope.get_simultaneous(SPEC)
        with (
            ws.scope() as outer,
            ws.scope(),
            pytest.raises(ArenaError, match="not the innermost one open"),
        ):
            outer.get_simultaneous(SPEC)


def test_each_fronts_scopes_remember_their_own_views() -> None:
    # scopes.py Scope.__init__ #9 (`memo is not None`), #10 (the memo key stored as None):
    # every front's scopes remembered their views under one key, so a NumPy scope's
    # request was served the tensors a torch scope's identical request had remembered.
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((1024,), "float32"))
        ws.lock()  # unlocked, the request log watches every scope request
        for _ in range(3):
            with ws.torch.scope() as scope:
                (tensor,) = scope.get_simultaneous(SPEC)
            with ws.scope() as scope:
                (array,) = scope.get_simultaneous(SPEC)
        assert type(tensor).__module__ == "torch"
        assert type(array).__module__ == "numpy"
