"""Gaps a planted-bug review (plant33) found in steps' and scopes' replay paths: each
test fails on one realistic slip in the code (named in its docstring) and passes on the
real code."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena, SlotError
from arena.views.builder import ViewBuilder
from tests.gates import intrude

F32 = "float32"


def test_debug_mode_holds_the_slot_through_a_locked_replay_of_a_step() -> None:
    """Debug mode: a locked replay of a planned step holds its slot like any step, so
    another thread's request on it is named (slip: the lean replay enter, which skips
    ``slot.enter()``, taken in debug mode too)."""
    with Arena("cpu", framework="numpy", debug=True) as ws:
        for _ in range(2):  # record, then plan
            with ws.step("layer") as s:
                s.get_simultaneous(((64,), F32))
        ws.lock()
        for _ in range(2):
            with ws.step("layer") as s:
                s.get_simultaneous(((64,), F32))
                errors = intrude(ws)
                assert len(errors) == 1 and isinstance(errors[0], SlotError)
                assert "intruder" in str(errors[0])
            assert intrude(ws) == []  # the step closed: the slot is free again


def test_a_locked_replay_on_a_micro_batch_that_never_ran_the_step_raises_its_load() -> None:
    """lock() gives ubatch 1 the plan ubatch 0 recorded; its first locked replay holds the
    plan's LOAD, and the slot's ``load`` (``stats()``, ``capacity / load``) says so
    (slip: the lean replay enter leaving out ``note_load``)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        for _ in range(2):  # record, then plan, on ubatch 0 only
            with ws.ubatch(0), ws.step("layer") as s:
                s.get_simultaneous(((1000,), F32))
        ws.lock()
        assert ws.stats().slots[1].load == 0
        with ws.ubatch(1), ws.step("layer") as s:
            s.get_simultaneous(((1000,), F32))
        stats = ws.stats().slots
        assert stats[1].load == stats[0].load > 0


def test_a_scope_request_served_by_the_hit_survives_the_sweep_of_a_full_cache(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remembered scope request the hit serves is marked used, so the sweep of a full
    cache gives it a second chance and it keeps being served while cold requests come and
    go (slip: the compiled scope hit not setting the entry's ``used``: the hot request is
    swept as the oldest and built again)."""
    placed = [0]
    original = ViewBuilder.place

    def counted(*args: Any, **kwargs: Any) -> Any:
        placed[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(ViewBuilder, "place", counted)
    with Arena("cpu", framework="numpy", max_cached_layouts=8) as ws:
        ws.reserve_bytes(1 << 20)
        ws.lock()

        def one(n: int) -> None:
            with ws.scope() as s:
                s.get_simultaneous(((n,), F32))

        one(64)  # remembered
        one(64)  # served by the hit: used
        for cold in range(1, 40):
            placed[0] = 0
            one(64 + cold)  # new: placed, remembered, sweeping a full cache
            assert placed[0] == 1
            placed[0] = 0
            one(64)
            assert placed[0] == 0, f"the hot request was swept after {cold} cold ones"


def test_a_scope_request_first_remembered_inside_a_step_counts_in_plain_high_outside(
    hit_path: str,
) -> None:
    """A scope request remembered inside a locked step's replay counts above the step;
    the same request at the same top outside every step counts in the slot's
    ``plain_high`` (what planning never shrinks the slot below), on both hit paths (slip:
    the compiled scope hit serving it without checking ``plain_high`` covers its reach)."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(2):  # record, then plan
            with ws.step("layer"), ws.scope() as s:
                s.get_simultaneous(((1000,), F32))
        ws.lock()
        for _ in range(2):  # locked replays: the scope's request is remembered
            with ws.step("layer"), ws.scope() as s:
                s.get_simultaneous(((1000,), F32))
        slot = ws._table.slots[0]
        assert slot.plain_high == 0
        for _ in range(3):  # the same request at the same top, no step open
            with ws.scope() as s:
                s.get_simultaneous(((1000,), F32))
        assert slot.plain_high == 4096
