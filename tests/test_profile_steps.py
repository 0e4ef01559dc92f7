"""Profiles of runs with steps: per slot LOAD and the planned need are recorded, merged by
maximum, and presize a restarted arena to the plan rather than to the first run's size."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import arena
from arena.observe.profilefile import (
    check_profile,
    merge_profiles,
    presize_target,
    read_profile,
    salvage_profile,
)

F32 = "float32"


def forward(ws: arena.Arena, tokens: int, layers: int = 3) -> None:
    """Chained layers in one step: the first-fit placement of the recording run spans
    more than the plan made from it (checked below, so the test can tell them apart)."""
    with ws.step("forward") as st:
        (x,) = st.get_simultaneous(((tokens, 64), F32))
        for _ in range(layers):
            (xn,) = st.get_simultaneous(((tokens, 64), F32))
            q, k, v = st.get_simultaneous(
                ((tokens, 64), F32), ((tokens, 16), F32), ((tokens, 16), F32)
            )
            st.release(xn)
            (attn,) = st.get_simultaneous(((tokens, 64), F32))
            st.release(q, k, v)
            (o,) = st.get_simultaneous(((tokens, 64), F32))
            st.release(attn)
            (h,) = st.get_simultaneous(((tokens, 64), F32))
            st.release(o, x)
            gate, up = st.get_simultaneous(((tokens, 224), F32), ((tokens, 224), F32))
            (act,) = st.get_simultaneous(((tokens, 224), F32))
            st.release(gate, up)
            (down,) = st.get_simultaneous(((tokens, 64), F32))
            st.release(act)
            (x,) = st.get_simultaneous(((tokens, 64), F32))
            st.release(h, down)


def _record(path: Path, ubatches: int = 1) -> tuple[int, int, int]:
    """One engine run: record, plan, lock. Returns (first run's size, planned, LOAD)."""
    with arena.Arena("cpu", ubatches=ubatches, framework="numpy", profile=path) as ws:
        forward(ws, 100)
        first = ws.stats().slots[0].capacity
        forward(ws, 100)
        ws.lock()
        stats = ws.stats().slots[0]
        return first, stats.capacity, stats.load


def test_a_run_with_steps_presizes_the_restart_to_its_plan(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    first, planned, load = _record(path)
    assert first > planned == load  # the recording run grew past the plan
    (slot,) = read_profile(path)["slots"]
    assert slot["load"] == load and slot["planned"] == planned
    assert slot["capacity"] == slot["peak"] == first  # the largest this run held
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        presized = ws.stats()
        assert presized.allocations == 1
        assert presized.slots[0].capacity == planned  # the plan, not the first run's size
        forward(ws, 100)
        forward(ws, 100)
        ws.lock()
        assert ws.stats().slots[0].capacity == planned
    merged = read_profile(path)
    assert merged["runs"] == 2 and merged["slots"][0]["planned"] == planned


def test_plans_shared_at_lock_presize_every_micro_batch_of_the_lane(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    _, planned, _ = _record(path, ubatches=2)  # only ubatch 0 ran the step
    slots = read_profile(path)["slots"]
    assert [s["planned"] for s in slots] == [planned, planned]
    assert slots[1]["load"] == 0  # ubatch 1 served nothing
    with arena.Arena("cpu", ubatches=2, framework="numpy", profile=path) as ws:
        assert [s.capacity for s in ws.stats().slots] == [planned, planned]


def test_an_old_profile_without_load_or_planned_presizes_as_before(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    first, planned, _ = _record(path)
    old = read_profile(path)
    for slot in old["slots"]:
        del slot["load"], slot["planned"]
    path.write_text(json.dumps(check_profile(old)))
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        assert ws.stats().slots[0].capacity == first  # max(peak, capacity) as before
        forward(ws, 100)
        forward(ws, 100)
        ws.lock()
    (slot,) = read_profile(path)["slots"]
    # A run without the figures counts with what it presized to: nothing shrinks below it.
    assert slot["planned"] == first and slot["load"] == planned


def _profile(**slot: int) -> dict[str, Any]:
    entry = {"ubatch": 0, "lane": 0, "peak": 0, "capacity": 0, "growths": 1, **slot}
    return check_profile(
        {
            "format": "arena-profile",
            "version": 1,
            "device": "cpu",
            "ubatches": 1,
            "lanes": 1,
            "alignment": 256,
            "runs": 1,
            "ranks": [0],
            "slots": [entry],
            "sites": [],
            "timeline": [],
        }
    )


def test_merging_takes_the_largest_need_of_every_run() -> None:
    stepped = _profile(peak=900, capacity=900, load=500, planned=600)
    plain = _profile(peak=700, capacity=700, load=700, planned=0)
    small_plain = _profile(peak=300, capacity=300, load=300, planned=0)
    (slot,) = merge_profiles(stepped, plain)["slots"]
    assert slot["planned"] == 700 and slot["load"] == 700  # the plain run needed 700
    (slot,) = merge_profiles(plain, stepped)["slots"]
    assert slot["planned"] == 700
    (slot,) = merge_profiles(stepped, small_plain)["slots"]
    assert slot["planned"] == 600 and presize_target(slot) == 600
    (slot,) = merge_profiles(small_plain, plain)["slots"]
    assert slot["planned"] == 0 and presize_target(slot) == 700  # no plan on either side
    bigger = _profile(peak=1000, capacity=1000, load=800, planned=800)
    (slot,) = merge_profiles(stepped, bigger)["slots"]
    assert slot["planned"] == 800 and slot["load"] == 800


@pytest.mark.parametrize("value", ["many", -1, 1.5, True, None])
def test_an_invalid_planned_need_is_repaired_to_presize_from_the_capacity(value: Any) -> None:
    data = _profile(peak=900, capacity=1000, load=500, planned=600)
    broken = copy.deepcopy(data)
    broken["slots"][0]["planned"] = value
    with pytest.raises(arena.ArenaError, match="slot #0 'planned'"):
        check_profile(broken)
    repaired, notes = salvage_profile(broken)
    assert repaired["slots"][0]["planned"] == 0 and any("'planned'" in n for n in notes)
    assert presize_target(repaired["slots"][0]) == 1000
    huge = copy.deepcopy(data)
    huge["slots"][0]["load"] = 2**70
    repaired, _ = salvage_profile(huge)
    assert repaired["slots"][0]["load"] == 2**63 - 1


def test_an_arena_dropped_without_lock_or_close_saves_its_plans(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    ws = arena.Arena("cpu", framework="numpy", profile=path)
    forward(ws, 50)
    forward(ws, 50)  # planned at this run's start
    load = ws.stats().slots[0].load
    del ws  # the finalizer saves; the recorder reads the slots through a weak reference
    (slot,) = read_profile(path)["slots"]
    assert slot["planned"] == slot["load"] == load > 0


def _layer(ws: arena.Arena) -> None:
    """A step whose recording run is already as small as its plan: nothing shrinks."""
    with ws.step("layer") as st:
        st.get_simultaneous(((100, 64), F32))
        (h,) = st.get_simultaneous(((100, 256), F32))
        st.get_simultaneous(((100, 64), F32))
        st.release(h)
        st.get_simultaneous(((100, 64), F32))


def test_a_plan_made_after_the_last_save_is_saved_by_the_finalizer(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    ws = arena.Arena("cpu", framework="numpy", profile=path)
    _layer(ws)
    assert ws.save_profile()
    assert read_profile(path)["slots"][0]["planned"] == 0  # recorded, not planned yet
    size = ws.stats().slots[0].capacity
    _layer(ws)  # plans: no resize, no new request for the log, only the plan is new
    assert ws.stats().slots[0].capacity == size
    del ws
    assert read_profile(path)["slots"][0]["planned"] == size


KIB = 256  # float32 elements per KiB


def fragmenting_body(ws: arena.Arena, st: Any, inner: str | None) -> None:
    """First fit spans 5 KiB here where the plan needs 4 KiB (c cannot reuse a's hole);
    then 1 KiB above the step: a plain request, or an inner step doing the same."""
    (a,) = st.get_simultaneous(((KIB,), F32))
    st.get_simultaneous(((2 * KIB,), F32))  # b: live to the end
    st.release(a)
    st.get_simultaneous(((2 * KIB,), F32))  # c
    if inner is None:
        ws.get_simultaneous(((KIB,), F32))
    else:
        with ws.step(inner) as inside:
            fragmenting_body(ws, inside, None)


@pytest.mark.parametrize(("inner", "need"), [(None, 5), ("inner", 9)])
def test_requests_inside_a_step_count_above_its_plan_not_its_first_fit(
    tmp_path: Path, inner: str | None, need: int
) -> None:
    """A plain request (or a step) inside a recording step sits above the first fit; the
    replays put it above the plan: the slot and the profile count it there."""
    path = tmp_path / "profile.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        for _ in range(4):  # record, plan, replay
            with ws.step("outer") as st:
                fragmenting_body(ws, st, inner)
        growths = ws.stats().slots[0].growths
        with ws.step("outer") as st:
            fragmenting_body(ws, st, inner)
        assert ws.stats().slots[0].growths == growths
        ws.lock()
        if inner is None:  # planned at once: the slot shrank to the plan and what is above
            assert ws.stats().slots[0].capacity == need * 1024
    (slot,) = read_profile(path)["slots"]
    assert slot["planned"] == need * 1024
