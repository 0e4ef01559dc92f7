"""Plant round 37 (planning): steps, scopes and plans on both hit paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena import Arena, ArenaWarning
from arena.observe.profilefile import read_profile
from arena.planning.books import step_books
from tests.conftest import need_compiled_hit
from tests.refcounts import assert_counts_flat

F32 = "float32"


def test_a_locked_replay_entered_off_its_plan_s_height_warns(hit_path: str) -> None:
    """A step warmed up inside a scope and replayed locked outside it starts below its
    plan's height: the enter warns, on either path (slip: the lean replay's enter taken
    without comparing the top with the height it was recorded at, no warning)."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(2):
            with ws.scope() as scope:
                scope.get_simultaneous(((256,), F32))
                with ws.step("k") as step:
                    step.get_simultaneous(((64,), F32))
        ws.lock()
        warned = pytest.warns(ArenaWarning, match=r"step 'k' starts at byte 0 .* its plan at byte")
        with warned, ws.step("k") as step:
            step.get_simultaneous(((64,), F32))


def test_a_locked_replay_counts_its_plan_s_load_not_its_extent(
    hit_path: str, tmp_path: Path
) -> None:
    """A locked replay of a plan with a hole (a stored plan, its last block moved up)
    raises LOAD to the plan's live bytes, not to the bytes the plan spans, and a plain
    request above it counts from there (slips: the lean replay's enter noting the stack's
    top, 768, for its live bytes, 512; the compiled enter setting the stack's live bytes to
    the plan's end)."""
    path = tmp_path / "profile.json"
    with Arena("cpu", framework="numpy", profile=path) as ws:
        for _ in range(2):
            with ws.step("k") as step:
                step.get_simultaneous(((64,), F32), ((64,), F32))
        ws.lock()
    data = read_profile(path)
    (entry,) = data["slots"][0]["steps"]
    assert (entry["sizes"], entry["offsets"], entry["total"]) == ([256, 256], [0, 256], 512)
    entry["offsets"][-1] += 256  # a hole of 256 bytes under the last block
    entry["total"] += 256
    data["slots"][0]["planned"] = entry["total"] + 256  # room for a plain request above
    path.write_text(json.dumps(data))
    with Arena("cpu", framework="numpy", profile=path) as ws:
        ws.lock()
        assert ws.stats().slots[0].load == 0
        with ws.step("k") as step:
            assert step.replay
            step.get_simultaneous(((64,), F32), ((64,), F32))
            assert ws.stats().slots[0].load == 512
            ws.get_simultaneous(((64,), F32))  # plain, above the step: 256 bytes more live
        assert ws.stats().slots[0].load == 768


def test_a_scope_closed_inside_a_nested_step_leaves_the_outer_step_s_end_as_top(
    hit_path: str,
) -> None:
    """A scope closed inside a step that started below its outer step's end (a block of
    the outer step released) leaves the top at the highest end still open, the outer
    step's, on either path (slip: the compiled exit taking the last region's end, the
    inner step's, for the top: a plain request then placed lower than on Python's)."""
    with Arena("cpu", framework="numpy") as ws:
        slot = ws.numpy._select()
        for _ in range(3):  # recording, planned, replayed
            with ws.step("outer") as outer:
                _, second = outer.get_simultaneous(((1024,), F32), ((1024,), F32))
                outer.release(second)
                with ws.step("inner") as inner:
                    inner.get_simultaneous(((64,), F32))
                    assert inner.base < outer.end == 8192
                    with ws.scope() as scope:
                        scope.get_simultaneous(((64,), F32))
                    assert slot.stack.top == 8192  # where a plain request goes now


def test_a_compiled_replay_keeps_the_slot_s_step_books_reference_counts_flat() -> None:
    """The compiled enter finds the key's book through the slot's stores: the store, its
    mapping and the stores' dict keep their reference counts over many replays (slip: a
    borrowed store taken as a new reference, one leaked per enter)."""
    need_compiled_hit()
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            with ws.step("k") as step:
                step.get_simultaneous(((64,), F32))
        ws.lock()
        slot = ws.numpy._select()
        store = step_books(slot)
        watched = (store, store.by_key, slot.stores)
        with ws.step("k"):
            pass

        def runs() -> None:
            for _ in range(1000):
                with ws.step("k") as step:
                    step.get_simultaneous(((64,), F32))

        assert_counts_flat(watched, runs)


def test_a_replay_ended_under_a_scope_still_open_keeps_the_scope_s_bytes(
    hit_path: str,
) -> None:
    """A locked replay that ends while a scope opened inside it is still open (closed out
    of order, after it) leaves the top at the scope's end and its bytes live, on either
    path (slip: the lean exit taken with regions above the step, the top and live bytes
    set as if nothing stayed open)."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            with ws.step("k") as step:
                step.get_simultaneous(((64,), F32))
        ws.reserve_bytes(4096)
        ws.lock()
        slot = ws.numpy._select()
        scope = ws.scope()
        with ws.step("k") as step:
            assert step.replay
            step.get_simultaneous(((64,), F32))
            scope.__enter__()
            scope.get_simultaneous(((128,), F32))
        assert slot.stack.regions == [scope]
        assert (slot.stack.top, slot.stack.live) == (scope.end, 512) == (768, 512)
        scope.__exit__(None, None, None)
        assert (slot.stack.regions, slot.stack.top, slot.stack.live) == ([], 0, 0)
