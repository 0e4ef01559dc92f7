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
from arena.planning.books import books_of
from arena.planning.records import StepBook
from tests.profiles import profile_data

F32 = "float32"


def forward(ws: arena.Arena, tokens: int, layers: int = 3, seen: list[Any] | None = None) -> None:
    """Chained layers in one step: the first-fit placement of the recording run spans
    more than the plan made from it (checked below, so the test can tell them apart).
    ``seen`` collects every view handed out, in request order."""
    with ws.step("forward") as step:
        st: Any = step if seen is None else _Seen(step, seen)
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


class _Seen:
    """A step that keeps every view it hands out."""

    def __init__(self, step: Any, seen: list[Any]) -> None:
        self.step, self.seen = step, seen

    def get_simultaneous(self, *specs: Any) -> list[Any]:
        views: list[Any] = self.step.get_simultaneous(*specs)
        self.seen.extend(views)
        return views

    def release(self, *views: Any) -> None:
        self.step.release(*views)


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
    return check_profile(profile_data(slot))


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


# ------------------------------------------------------------- stored plans of steps
def _offsets(ws: arena.Arena, views: list[Any]) -> list[int]:
    """Each view's byte offset in its slot's buffer."""
    low = min(v.ctypes.data for v in views)
    (segment,) = [
        s
        for s in ws.memory_snapshot()["segments"]
        if s["address"] <= low < s["address"] + s["total_size"]
    ]
    offsets = [v.ctypes.data - segment["address"] for v in views]
    assert all(o + v.nbytes <= segment["total_size"] for o, v in zip(offsets, views, strict=True))
    return offsets


def _stored(path: Path, slot: int = 0) -> list[dict[str, Any]]:
    return read_profile(path)["slots"][slot]["steps"]  # type: ignore[no-any-return]


def test_a_restart_locked_at_once_replays_the_stored_plan_from_its_first_run(
    tmp_path: Path,
) -> None:
    """The production pattern: presize from the profile, lock, serve. The first run of
    the step under lock must not record (its first fit needs more than the presize)."""
    path = tmp_path / "profile.json"
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        forward(ws, 100)
        first = ws.stats().slots[0].capacity
        forward(ws, 100)
        ws.lock()
        seen: list[Any] = []
        forward(ws, 100, seen=seen)
        planned = _offsets(ws, seen)
        size = ws.stats().slots[0].capacity
    assert first > size  # a recording run under the restart's lock would not fit
    (entry,) = _stored(path)
    assert entry["key"] == "forward" and entry["total"] <= size and entry["recorded_at"] == 0
    assert planned == entry["offsets"]  # the replays' views sit at the planned offsets
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        presized = ws.stats()
        ws.lock()
        again: list[Any] = []
        forward(ws, 100, seen=again)  # no ArenaLockedError, no warning of another height
        forward(ws, 50)  # smaller token counts fit the plan too
        after = ws.stats()
        assert _offsets(ws, again) == planned
    assert presized.slots[0].capacity == size
    assert after.allocations == presized.allocations == 1
    assert after.slots[0].growths == presized.slots[0].growths
    assert after.allocations_while_locked == 0
    assert _stored(path) == [entry]  # the restart saved the same plan


@pytest.mark.parametrize("tokens", [1, 37, 100])
def test_a_stored_book_rebuilds_the_plan_it_was_made_from(tokens: int) -> None:
    with arena.Arena("cpu", framework="numpy") as ws:
        forward(ws, tokens)
        forward(ws, tokens)
        book = books_of(ws._table.slots[0])["forward"]
        entry = json.loads(json.dumps(book.to_profile()))
    assert "firsts" not in entry and "load" not in entry  # derived, not stored
    again = StepBook.from_profile(entry)
    for name in ("counts", "sizes", "firsts", "lasts", "offsets", "starts", "expiring"):
        assert getattr(again, name) == getattr(book, name), name
    for name in ("total", "load", "base", "above", "top_level", "recorded_at"):
        assert getattr(again, name) == getattr(book, name), name
    assert again.planned and again.reach == book.reach
    with pytest.raises(ValueError, match="without a plan"):
        StepBook().to_profile()


def test_a_micro_batch_that_never_ran_the_step_replays_the_lane_plan_after_restart(
    tmp_path: Path,
) -> None:
    path = tmp_path / "profile.json"
    _, planned, _ = _record(path, ubatches=2)  # only ubatch 0 ran; lock() shared its plan
    assert _stored(path, 1) == _stored(path, 0)
    with arena.Arena("cpu", ubatches=2, framework="numpy", profile=path) as ws:
        ws.lock()
        with ws.ubatch(1):
            forward(ws, 100)
        forward(ws, 100)
        assert [s.capacity for s in ws.stats().slots] == [planned, planned]
        assert ws.stats().allocations_while_locked == 0


def test_a_restored_plan_records_again_when_a_run_diverges(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    _record(path)
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.lock()
        with pytest.raises(arena.ArenaLockedError, match=r"'forward' request 0 .* diverges"):
            forward(ws, 200)
        ws.unlock()
        forward(ws, 200)  # unlocked: records, and the next run plans
        forward(ws, 200)
        ws.lock()
        forward(ws, 200)
    (entry,) = _stored(path)  # the newer, larger plan replaced the stored one
    assert entry["sizes"][0] == 200 * 64 * 4


def test_a_stored_plan_keeps_its_start_in_the_slot(tmp_path: Path) -> None:
    """A step entered above a scope: its restored plan knows where it was recorded, so a
    replay at that height does not warn, and one at another height does."""
    path = tmp_path / "profile.json"

    def run(ws: arena.Arena, held: bool) -> None:
        with ws.scope() as scope:
            if held:
                scope.get_simultaneous(((1024,), F32))
            forward(ws, 20)

    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        run(ws, True)
        run(ws, True)
        ws.lock()
    (entry,) = _stored(path)
    assert entry["recorded_at"] == entry["base"] == 4096
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        ws.lock()
        run(ws, True)  # no warning: the height the plan was recorded at
        with pytest.warns(arena.ArenaWarning, match="starts at byte 0 .* its plan at byte 4096"):
            run(ws, False)


def test_only_str_and_int_step_keys_are_stored_each_with_its_type(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"

    def steps(ws: arena.Arena) -> None:
        for key in ("7", 7, ("layer", 0), True):
            with ws.step(key) as st:
                st.get_simultaneous(((64 + len(str(key)),), F32))

    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        steps(ws)
        steps(ws)
        ws.lock()
    keys = [entry["key"] for entry in _stored(path)]
    assert keys == ["7", 7]  # a tuple and a bool are skipped, "7" and 7 kept apart
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        replays = {}
        for key in ("7", 7, ("layer", 0)):
            with ws.step(key) as st:
                replays[key] = st.replay
                st.get_simultaneous(((64 + len(str(key)),), F32))
    assert replays == {"7": True, 7: True, ("layer", 0): False}


def test_an_old_profile_without_steps_presizes_and_its_steps_record_again(
    tmp_path: Path,
) -> None:
    path = tmp_path / "profile.json"
    _, planned, _ = _record(path)
    old = read_profile(path)
    for slot in old["slots"]:
        del slot["steps"]
    path.write_text(json.dumps(check_profile(old)))
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        assert ws.stats().slots[0].capacity == planned
        with ws.step("forward") as st:
            assert not st.replay  # nothing to replay: it records, as before stored plans
        forward(ws, 100)
        forward(ws, 100)
        ws.lock()
        assert ws.stats().slots[0].capacity == planned
    assert [e["key"] for e in _stored(path)] == ["forward"]


def test_a_stored_plan_reaching_past_its_presized_slot_is_not_restored(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    _record(path)
    data = read_profile(path)
    (entry,) = data["slots"][0]["steps"]
    data["slots"][0]["planned"] = 4096  # smaller than the plan: hand-edited
    path.write_text(json.dumps(data))
    reach = entry["base"] + entry["total"] + entry["above"]
    with pytest.warns(
        arena.ArenaWarning,
        match=rf"1 step plan\(s\) reach past their slot \(step 'forward' of slot \(0, 0\) "
        rf"needs {reach} bytes, the slot holds 4096\); those steps record again",
    ):
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    with ws, ws.step("forward") as st:
        assert not st.replay


def _entry(**changes: Any) -> dict[str, Any]:
    """A valid stored plan: block 0 lives through requests 0-1, 1 and 2 share request 1."""
    entry = {
        "key": "k",
        "counts": [1, 2],
        "sizes": [256, 512, 256],
        "lasts": [1, 1, 1],
        "offsets": [0, 256, 768],
        "total": 1024,
        "base": 0,
        "above": 0,
        "top_level": True,
        "recorded_at": 0,
    }
    return {**entry, **changes}


BAD_STEPS = [
    (
        _entry(sizes=[256, 512]),
        "'sizes' must list one item per block (3: the sum of 'counts'), found 2",
    ),
    (
        _entry(offsets=[0, 0, 768]),
        "blocks #0 and #1 are live at request 1 and share bytes (0..256 and 0..512)",
    ),
    (_entry(offsets=[0, 256, 1024]), "block #2 ends at byte 1280, past 'total' 1024"),
    (_entry(lasts=[1, 0, 1]), "'lasts' #1 is 0, before request 1 that makes the block"),
    (_entry(lasts=[2, 1, 1]), "'lasts' #0 is 2, past the step's last request (1)"),
    (_entry(sizes=[256, 500, 256]), "'sizes' #1 is 500, not a multiple of the alignment 256"),
    (
        _entry(offsets=[0, 256, 2**63]),
        "'offsets' #2 must be an int from 0 to 2**63 - 1, found 9223372036854775808",
    ),
    (_entry(counts=[1, -2]), "'counts' #1 must be an int from 0 to 2**63 - 1, found -2"),
    (_entry(key=["k"]), "'key' must be a string or an int, found ['k']"),
    (_entry(key=True), "'key' must be a string or an int, found True"),
    (_entry(top_level=1), "'top_level' must be true or false, found 1"),
    (_entry(total="1024"), "'total' must be an int from 0 to 2**63 - 1, found '1024'"),
    (_entry(above=2**63 - 1), "'base' + 'total' + 'above' must be at most 2**63 - 1"),
    (_entry(offsets=None), "'offsets' must be a list, found None"),
    ([1, 2], "must be an object, found [1, 2]"),
]


@pytest.mark.parametrize(("bad", "problem"), BAD_STEPS)
def test_a_damaged_stored_plan_is_refused_and_repaired_by_dropping_it(
    bad: Any, problem: str
) -> None:
    good = _entry(key=5)
    data = _profile(peak=1024, capacity=1024)
    data["slots"][0]["steps"] = [good, bad]
    with pytest.raises(arena.ArenaError) as refused:
        check_profile(copy.deepcopy(data))
    assert str(refused.value) == f"slot #0 step #1 {problem}"
    repaired, notes = salvage_profile(data)
    assert notes == [f"slot #0 step #1 {problem}: dropped"]
    assert repaired["slots"][0]["steps"] == [good]  # the valid plan stays


def test_a_repeated_key_or_a_steps_field_that_is_no_list_is_repaired() -> None:
    data = _profile(peak=1024, capacity=1024)
    data["slots"][0]["steps"] = [_entry(key=5), _entry(key="5"), _entry(key=5, total=2048)]
    with pytest.raises(arena.ArenaError, match="slot #0 step #2 repeats the key 5"):
        check_profile(copy.deepcopy(data))
    repaired, notes = salvage_profile(data)
    assert notes == ["slot #0 step #2 repeats the key 5 of an earlier step: dropped"]
    assert repaired["slots"][0]["steps"] == [_entry(key=5), _entry(key="5")]
    data["slots"][0]["steps"] = {"k": 1}
    repaired, notes = salvage_profile(data)
    assert notes == ["slot #0 'steps' must be a list, found {'k': 1}: dropped"]
    assert repaired["slots"][0]["steps"] == []


def test_an_arena_repairs_a_damaged_plan_and_records_that_step_again(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    _record(path)
    data = read_profile(path)
    (entry,) = data["slots"][0]["steps"]
    entry["offsets"] = [0] * len(entry["offsets"])  # every block on top of the others
    path.write_text(json.dumps(data))
    with pytest.warns(arena.ArenaWarning, match=r"slot #0 step #0 blocks #0 and #1 .*: dropped"):
        ws = arena.Arena("cpu", framework="numpy", profile=path)
    with ws:
        forward(ws, 100)  # records: the plan that would alias views is gone
        forward(ws, 100)
        ws.lock()
    (saved,) = _stored(path)
    assert saved["offsets"] != entry["offsets"]


def test_merging_keeps_the_newer_plan_of_a_key_and_the_older_keys() -> None:
    old = _profile(peak=1024, capacity=1024)
    new = copy.deepcopy(old)
    old["slots"][0]["steps"] = [_entry(key="a"), _entry(key="b")]
    newer_a = _entry(key="a", offsets=[0, 256, 0], lasts=[0, 1, 1], total=768)
    new["slots"][0]["steps"] = [newer_a, _entry(key=3)]
    merged = check_profile(merge_profiles(old, new))
    assert merged["slots"][0]["steps"] == [newer_a, _entry(key="b"), _entry(key=3)]
    assert "steps" not in merge_profiles(_profile(), _profile())["slots"][0]  # old stays old


def test_a_step_run_only_inside_another_is_stored_as_not_top_level(tmp_path: Path) -> None:
    """A step that only ever ran inside another never started at the top level: its
    stored plan says so with false (a bool, as the reader requires), and a restart
    restores it with the outer step's."""
    path = tmp_path / "profile.json"

    def run(ws: arena.Arena) -> None:
        with ws.step("outer") as outer:
            outer.get_simultaneous(((256,), F32))
            with ws.step("inner") as inner:
                inner.get_simultaneous(((256,), F32))

    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        for _ in range(3):
            run(ws)
    stored = {entry["key"]: entry for entry in _stored(path)}
    assert stored["outer"]["top_level"] is True and stored["inner"]["top_level"] is False
    with arena.Arena("cpu", framework="numpy", profile=path) as ws:
        assert sorted(books_of(ws._table.slots[0])) == ["inner", "outer"]
        assert books_of(ws._table.slots[0])["inner"].planned
