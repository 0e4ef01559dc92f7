"""What a slot's region stack and a recording run count (issue 26, leftovers 3 and 4): a
recording request counts in O(1) (the run keeps its live blocks' bytes as it books and
releases them, the stack counts the regions under the innermost once after they change),
and a scope's hit counts the live bytes from the regions' own figures, so a figure an
interrupt left behind is not carried on, on both hit paths."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena
from arena.planning.runs import StepRun
from arena.planning.scopes import Scope
from arena.slots.stack import RegionStack

F32 = "float32"


def _regions_hold(ws: Arena) -> tuple[int, int]:
    """The slot's live bytes and what its open regions hold."""
    stack = ws.numpy._select().stack
    return stack.live, sum(region.held for region in stack.regions)


def _warm(ws: Arena, below: bool) -> None:
    """The scope program run, then locked and run again: its requests are remembered
    (unlocked, the request log takes every scope request to Python), so the next run's
    hit; inside an outer scope holding 512 bytes if ``below``."""
    for run in range(2):
        if run:
            ws.lock()
        if below:
            outer = ws.scope()
            outer.__enter__()
            outer.get_simultaneous(((128,), F32))
        with ws.scope() as scope:
            scope.get_simultaneous(((64,), F32))
            scope.get_simultaneous(((32,), F32))
            scope.get_simultaneous(((16,), F32))
        if below:
            outer.__exit__(None, None, None)


@pytest.mark.parametrize("below", [False, True])
def test_a_scope_hit_after_an_interrupted_settle_counts_from_the_regions(
    hit_path: str, below: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope request interrupted at its stack's settle (its own figures stored, the
    stack's not) leaves the stack's live bytes behind. The compiled scope hit added each
    hit's bytes to that figure (stack.live + total), so it stayed short of what the
    regions hold until a Python request or the close (256 bytes short here, after 2
    hits); it counts the regions under the scope and the scope's own bytes now, as the
    Python path's settle does."""
    with Arena("cpu", framework="numpy") as ws:
        _warm(ws, below)
        if below:
            outer = ws.scope()
            outer.__enter__()
            outer.get_simultaneous(((128,), F32))
        settle = RegionStack.settle
        cut: list[bool] = []

        def interrupted(stack: RegionStack, top: int, region: Any) -> None:
            if not cut:
                cut.append(True)
                raise KeyboardInterrupt("at the stack's settle")
            settle(stack, top, region)

        with ws.scope() as scope:
            with monkeypatch.context() as m:
                m.setattr(RegionStack, "settle", interrupted)
                with pytest.raises(KeyboardInterrupt):
                    scope.get_simultaneous(((48,), F32))  # never seen: the Python path
            live, held = _regions_hold(ws)
            assert live < held  # the stack's figure, left behind
            python = Scope._python_get
            missed: list[Any] = []

            def spied(s: Any, *specs: Any) -> Any:
                missed.append(specs)
                return python(s, *specs)

            with monkeypatch.context() as m:
                m.setattr(type(scope), "_python_get", spied)
                scope.get_simultaneous(((64,), F32))
                scope.get_simultaneous(((32,), F32))
            assert missed == [] or hit_path == "python"  # the compiled path: its hits
            live, held = _regions_hold(ws)
            assert live == held == (512 if below else 0) + 3 * 256  # 256-byte alignment
        if below:
            outer.__exit__(None, None, None)
        assert _regions_hold(ws) == (0, 0)


def summed_live(run: StepRun) -> int:
    """The bytes of a recording run's live blocks, summed (O(live blocks)): what its
    ``held`` counts as they come and go (a step reads ``held``, after every booking and
    release, so a block booked by a request an interrupt stopped before the step counted
    it is counted by the next). The library never sums them (it was ``StepRun.live_bytes``,
    used by these tests only)."""
    total = 0
    for _, size in run.live.values():
        total += size
    return total


def test_a_recording_run_counts_its_live_bytes_as_it_books_and_releases() -> None:
    """The run's ``held`` follows its live blocks (a step read it instead of summing
    them at every recording request), a block booked again replaces its bytes, and an
    adopted plan counts what it makes live."""
    run = StepRun()
    run.start_recording()
    views = [object(), object(), object()]
    run.book(views[:2], range(2), [0, 256], [256, 512])
    assert run.held == summed_live(run) == 768
    run.book(views[2:], range(1, 2), [256], [1024])  # block 1 again (an interrupted request)
    assert run.held == summed_live(run) == 1280
    assert run.end_block(0, views[0], views[0], recorded=True) == (0, 256)
    assert run.held == summed_live(run) == 1024 and 0 not in run.live
    assert id(views[0]) not in run.views and run.ended[id(views[0])] is views[0]
    assert run.end_block(5, views[1], views[1], recorded=False) is None  # a replay's
    assert 5 in run.released and run.held == 1024


def test_a_recording_step_holds_what_its_run_has_live(hit_path: str) -> None:
    with Arena("cpu", framework="numpy") as ws, ws.scope(), ws.step("r") as step:
        live = []
        for i in range(40):
            live.append(step.get_simultaneous(((64 + i,), F32))[0])
            if len(live) > 8:
                step.release(live.pop(0))
            assert step.held == step.run.held == summed_live(step.run)
            stack_live, held = _regions_hold(ws)
            assert stack_live == held


def test_recording_requests_and_releases_sum_no_live_blocks(hit_path: str) -> None:
    """A recording request summed its run's live blocks (``StepRun.live_bytes``, O(live
    blocks)) to set the step's count, so 8,000 recording requests took 5.2 s where they
    took 4.6 s before; the run's running count is read instead (the sum is gone from the
    library: :func:`summed_live` here), and the stack counts the scope under the step
    once, not at every request."""
    reads: list[int] = []
    with Arena("cpu", framework="numpy") as ws, ws.scope() as outer:
        outer.get_simultaneous(((64,), F32))
        slot = ws.numpy._select()
        with ws.step("r") as step:
            live = []
            for i in range(30):
                before = slot.stack.below
                live.append(step.get_simultaneous(((64 + i,), F32))[0])
                if len(live) > 4:
                    step.release(live.pop(0))
                if i:  # counted at the first request after the step opened, then kept
                    assert slot.stack.below == before == outer.held
                reads.append(slot.stack.live)
            assert reads[-1] == outer.held + step.held


def test_a_step_release_interrupted_under_an_open_scope_is_not_carried_on(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recording step's release while a scope is open inside it, interrupted at the
    stack's settle (the step's count stored, the stack's not): the scope's requests
    settled from the regions under it as counted before (``below``, the step's old
    bytes), so the stack's live bytes stayed 256 over what the regions hold at every
    one of them until the scope closed (0a7a770 summed the regions at each settle). The
    release marks the count under the innermost stale before it stores, so the scope's
    next request counts it again."""
    with Arena("cpu", framework="numpy") as ws, ws.step("s") as step:
        views = step.get_simultaneous(((64,), F32), ((64,), F32))
        with ws.scope() as inner:
            inner.get_simultaneous(((16,), F32))
            settle = RegionStack.settle
            cut: list[bool] = []

            def interrupted(stack: RegionStack, top: int, region: Any) -> None:
                if region is step and not cut:
                    cut.append(True)
                    raise KeyboardInterrupt("at the stack's settle")
                settle(stack, top, region)

            with monkeypatch.context() as m:
                m.setattr(RegionStack, "settle", interrupted)
                with pytest.raises(KeyboardInterrupt):
                    step.release(views[0])
            assert step.held == 256
            for size in (16, 17, 18):
                inner.get_simultaneous(((size,), F32))
                live, held = _regions_hold(ws)
                assert live == held == step.held + inner.held
