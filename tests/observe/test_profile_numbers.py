"""The numbers that size the next start, held to exact values: per-slot and per-call-site
peaks that never go down, the layouts kept (largest first, across runs), the capacity
timeline and which run's timeline a merge keeps, run and rank counts, and the slot
figures of ``stats()`` (high-water marks, persistent keys and bytes, growths). A wrong
number here is an under-sized restart: an ``ArenaLockedError`` in production."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from arena import Arena, compute_layout
from arena.observe.profilefile import (
    LIMIT,
    MAX_LAYOUTS,
    largest_layouts,
    merge_profiles,
    read_profile,
)
from tests.gates import moving_only
from tests.sources import FaultySource

F32 = "float32"


def _total(*specs: Any) -> int:
    return compute_layout(specs).total


def _site_small(ws: Arena, n: int) -> None:
    ws.get_simultaneous(((n,), F32))


def _site_large(ws: Arena, n: int) -> None:
    ws.get_simultaneous(((n, 4), F32), ((n,), "int8"))


# ---------------------------------------------------------------------- recording
def test_each_slot_records_its_own_peak_which_never_goes_down(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    sizes = {(0, 0): 3000, (0, 1): 700, (1, 0): 5000, (1, 1): 10}
    with Arena("cpu", ubatches=2, lanes=2, framework="numpy", profile=path) as ws:
        for (ubatch, lane), n in sizes.items():
            with ws.ubatch(ubatch), ws.lane(lane):
                _site_small(ws, n)
                _site_small(ws, n // 2)  # smaller afterwards: the peak stays
                _site_small(ws, 1)
        ws.lock()
    slots = read_profile(path)["slots"]
    assert [(s["ubatch"], s["lane"]) for s in slots] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [s["peak"] for s in slots] == [_total(((n,), F32)) for n in sizes.values()]


def test_each_call_site_records_its_own_peak_per_slot(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", ubatches=2, framework="numpy", profile=path) as ws:
        for n in (100, 900, 300):
            _site_small(ws, n)
            _site_large(ws, n // 3)
        with ws.ubatch(1):
            _site_small(ws, 50)
        ws.lock()
    recorded = read_profile(path)["sites"]
    sites = {(s["site"].rsplit(":", 1)[-1], s["ubatch"], s["lane"]): s for s in recorded}
    assert set(sites) == {("_site_small", 0, 0), ("_site_large", 0, 0), ("_site_small", 1, 0)}
    assert sites[("_site_small", 0, 0)]["peak"] == _total(((900,), F32))
    assert sites[("_site_large", 0, 0)]["peak"] == _total(((300, 4), F32), ((300,), "int8"))
    assert sites[("_site_small", 1, 0)]["peak"] == _total(((50,), F32))


def test_a_layout_records_its_total_padding_and_views_exactly(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", framework="numpy", profile=path) as ws:
        _site_large(ws, 10)
        ws.lock()
    (site,) = read_profile(path)["sites"]
    (layout,) = site["layouts"]
    assert layout == {
        "total": 256 + 256,
        "padding": (256 - 160) + (256 - 10),
        "views": [[[10, 4], "float32"], [[10], "int8"]],
    }


@pytest.mark.parametrize("order", ["ascending", "descending", "mixed", "largest first"])
def test_the_largest_layouts_are_kept_whatever_the_order_they_came_in(
    tmp_path: Path, order: str
) -> None:
    path = tmp_path / "p.json"
    sizes = list(range(1, 21))
    if order == "descending":
        sizes.reverse()
    elif order == "mixed":
        sizes = sizes[::2] + sizes[1::2][::-1]
    elif order == "largest first":  # the one inserted first is not the smallest
        sizes = [20, *range(1, 20)]
    with Arena("cpu", framework="numpy", profile=path) as ws:
        for n in sizes:
            _site_small(ws, n * 100)
            _site_small(ws, n * 100)  # again: no duplicate
        ws.lock()
    (site,) = read_profile(path)["sites"]
    kept = [lay["views"][0][0][0] for lay in site["layouts"]]
    assert kept == [n * 100 for n in range(20, 20 - MAX_LAYOUTS, -1)]
    assert site["peak"] == _total(((2000,), F32))


def test_fewer_layouts_than_the_limit_are_all_kept_largest_first(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", framework="numpy", profile=path) as ws:
        for n in (300, 100, 200, 100):
            _site_small(ws, n)
        ws.lock()
    (site,) = read_profile(path)["sites"]
    assert [lay["views"] for lay in site["layouts"]] == [
        [[[300], F32]],
        [[[200], F32]],
        [[[100], F32]],
    ]


def test_the_timeline_lists_every_resize_with_its_slot_sizes_and_kind(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", ubatches=2, lanes=2, framework="numpy", profile=path) as ws:
        _site_small(ws, 1000)  # slot (0, 0): 0 -> 4096
        with ws.lane(1):
            _site_small(ws, 10)  # slot (0, 1): 0 -> 256
        _site_small(ws, 5000)  # slot (0, 0): 4096 -> 20224
        ws.lock()  # sizes (1, 0) and (1, 1) to their lanes' largest
    profile = read_profile(path)
    events = [(e["ubatch"], e["lane"], e["old"], e["new"], e["kind"]) for e in profile["timeline"]]
    assert events == [
        (0, 0, 0, 4096, "grow"),
        (0, 1, 0, 256, "grow"),
        (0, 0, 4096, 20224, "grow"),
        (1, 0, 0, 20224, "grow"),
        (1, 1, 0, 256, "grow"),
    ]
    times = [e["t"] for e in profile["timeline"]]
    assert times == sorted(times) and times[0] >= 0
    slots = profile["slots"]
    assert [s["capacity"] for s in slots] == [20224, 256, 20224, 256]
    assert [s["growths"] for s in slots] == [2, 1, 1, 1]


def test_a_presized_start_records_presize_events_and_counts_no_growth(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", ubatches=2, framework="numpy", profile=path) as ws:
        _site_small(ws, 1000)
        ws.lock()
    with Arena("cpu", ubatches=2, framework="numpy", profile=path) as ws:
        assert [s.capacity for s in ws.stats().slots] == [4096, 4096]
        ws.lock()
    profile = read_profile(path)
    assert profile["runs"] == 2
    # The second run raised nothing: the timeline stays the first run's warm-up.
    assert [(e["ubatch"], e["kind"]) for e in profile["timeline"]] == [(0, "grow"), (1, "grow")]
    assert [s["capacity"] for s in profile["slots"]] == [4096, 4096]


def test_a_slot_that_lost_its_buffer_keeps_its_recorded_capacity(tmp_path: Path) -> None:
    """A growth whose restore fails leaves the slot empty; it grows again, smaller. The
    profile keeps the capacity the run reached, not the last one."""
    path = tmp_path / "p.json"
    source = FaultySource(fail_at={2, 3})  # the growth and the restore of the old size
    with Arena(source=source, framework="numpy", profile=path) as ws:
        _site_small(ws, 5000)  # 20224 bytes
        with pytest.raises(MemoryError):
            _site_small(ws, 50_000)
        assert ws.stats().slots[0].capacity == 0
        _site_small(ws, 10)  # grows again: 0 -> 256
        ws.lock()
    (slot,) = read_profile(path)["slots"]
    # The refused request is no peak: it was never served.
    assert (slot["capacity"], slot["growths"], slot["peak"]) == (20224, 2, 20224)


def test_a_run_counts_once_however_often_it_saves(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    ws = Arena("cpu", framework="numpy", profile=path)
    _site_small(ws, 10)
    ws.lock()
    ws.unlock()
    _site_small(ws, 20)
    assert ws.save_profile()
    ws.close()
    assert read_profile(path)["runs"] == 1


# ---------------------------------------------------------------------- merging
def _profile(
    peaks: list[int], capacities: list[int], timeline: list[int], sites: list[Any] | None = None
) -> dict[str, Any]:
    return {
        "format": "arena-profile",
        "version": 1,
        "device": "cpu",
        "ubatches": len(peaks),
        "lanes": 1,
        "alignment": 256,
        "growth": "exact",
        "runs": 1,
        "ranks": [0],
        "slots": [
            {"ubatch": i, "lane": 0, "peak": p, "capacity": c, "growths": i + 1}
            for i, (p, c) in enumerate(zip(peaks, capacities, strict=True))
        ],
        "sites": sites or [],
        "timeline": [
            {"t": 0.0, "ubatch": 0, "lane": 0, "old": 0, "new": n, "caller": "x", "kind": "grow"}
            for n in timeline
        ],
    }


def test_a_merge_keeps_the_maximum_of_every_slot_figure() -> None:
    old = _profile([100, 900], [256, 1024], [256])
    new = _profile([500, 200], [512, 512], [512])
    new["slots"][1]["growths"] = 7
    merged = merge_profiles(old, new)
    assert [s["peak"] for s in merged["slots"]] == [500, 900]
    assert [s["capacity"] for s in merged["slots"]] == [512, 1024]
    assert [s["growths"] for s in merged["slots"]] == [1, 7]


@pytest.mark.parametrize(
    ("new_peaks", "new_capacities", "kept"),
    [
        ([100, 100], [256, 256], "old"),  # the same run again: nothing raised
        ([50, 10], [0, 0], "old"),  # smaller everywhere
        ([101, 10], [0, 0], "new"),  # one peak raised
        ([10, 10], [0, 257], "new"),  # one capacity raised
    ],
)
def test_a_merge_keeps_the_timeline_of_the_run_that_last_raised_a_size(
    new_peaks: list[int], new_capacities: list[int], kept: str
) -> None:
    old = _profile([100, 100], [256, 256], [256])
    new = _profile(new_peaks, new_capacities, [512, 1024])
    merged = merge_profiles(old, new)
    expected = old if kept == "old" else new
    assert merged["timeline"] == expected["timeline"]


def test_a_merge_onto_an_empty_timeline_takes_the_new_one() -> None:
    old = _profile([100], [256], [])
    new = _profile([10], [0], [512])
    assert merge_profiles(old, new)["timeline"] == new["timeline"]


def _layout(n: int) -> dict[str, Any]:
    total = _total(((n,), F32))
    return {"total": total, "padding": total - 4 * n, "views": [[[n], F32]]}


def _site(name: str, peak: int, sizes: list[int], ubatch: int = 0) -> dict[str, Any]:
    return {
        "site": name,
        "ubatch": ubatch,
        "lane": 0,
        "peak": peak,
        "layouts": [_layout(n) for n in sizes],
    }


def test_a_merge_keeps_the_layouts_of_both_runs_below_the_limit() -> None:
    old = _profile([0], [0], [], [_site("a.py:1:f", 4096, [1000, 10])])
    new = _profile([0], [0], [], [_site("a.py:1:f", 2048, [500, 10, 300])])
    (site,) = merge_profiles(old, new)["sites"]
    assert site["peak"] == 4096
    assert [lay["views"][0][0][0] for lay in site["layouts"]] == [1000, 500, 300, 10]


def test_a_merge_keeps_the_largest_layouts_of_both_runs_past_the_limit() -> None:
    odd, even = [64 * k for k in range(1, 17, 2)], [64 * k for k in range(2, 17, 2)]
    old = _profile([0], [0], [], [_site("a.py:1:f", 1, odd)])
    new = _profile([0], [0], [], [_site("a.py:1:f", 1, even)])
    (site,) = merge_profiles(old, new)["sites"]
    kept = [lay["views"][0][0][0] for lay in site["layouts"]]
    assert kept == [64 * k for k in range(16, 8, -1)]


def test_a_merge_keeps_sites_apart_by_site_ubatch_and_lane_in_order() -> None:
    old = _profile(
        [0, 0],
        [0, 0],
        [],
        [_site("a.py:1:f", 100, [1]), _site("a.py:1:f", 300, [2], ubatch=1)],
    )
    new = _profile(
        [0, 0],
        [0, 0],
        [],
        [_site("b.py:2:g", 200, [3]), _site("a.py:1:f", 50, [4], ubatch=1)],
    )
    merged = merge_profiles(old, new)["sites"]
    assert [(s["site"], s["ubatch"], s["peak"]) for s in merged] == [
        ("b.py:2:g", 0, 200),
        ("a.py:1:f", 0, 100),
        ("a.py:1:f", 1, 300),
    ]


def test_a_merge_adds_runs_saturating_and_unites_ranks() -> None:
    old = _profile([0], [0], [])
    new = _profile([0], [0], [])
    old["runs"], new["runs"] = 3, 4
    old["ranks"], new["ranks"] = [2, 0], [1, 2]
    merged = merge_profiles(old, new)
    assert merged["runs"] == 7 and merged["ranks"] == [0, 1, 2]
    old["runs"] = LIMIT - 1
    assert merge_profiles(old, new)["runs"] == LIMIT
    old["runs"] = LIMIT - 4
    assert merge_profiles(old, new)["runs"] == LIMIT


def test_a_merge_does_not_change_its_inputs() -> None:
    old = _profile([100], [256], [256], [_site("a.py:1:f", 100, [1])])
    new = _profile([200], [512], [512], [_site("a.py:1:f", 200, [2])])
    before = copy.deepcopy((old, new))
    merge_profiles(old, new)
    assert (old, new) == before


def test_largest_layouts_are_distinct_and_ties_broken_by_their_views() -> None:
    layouts = [_layout(10), _layout(20), _layout(10), _layout(30)]
    assert [lay["views"][0][0][0] for lay in largest_layouts(layouts)] == [10, 20, 30]
    many = [_layout(n) for n in range(1, 40)]
    assert len(largest_layouts(many)) == MAX_LAYOUTS
    assert largest_layouts(list(reversed(many))) == largest_layouts(many)


# ---------------------------------------------------------------------- stats
def test_persistent_keys_count_buffers_and_resources_and_bytes_only_buffers() -> None:
    with Arena("cpu", ubatches=2, framework="numpy") as ws:
        ws.get_persistent("a", (100,), F32)
        ws.get_persistent("b", (10,), "int8")
        ws.get_persistent_resource("r", dict)
        ws.get_persistent_resource("s", list)
        ws.get_persistent("a", (100,), F32)  # the same key again: not counted twice
        with ws.ubatch(1):
            ws.get_persistent_resource("r", dict)
        slots = ws.stats().slots
        assert [s.persistent_keys for s in slots] == [4, 1]
        assert [s.persistent_bytes for s in slots] == [512 + 256, 0]
        ws.lock()  # siblings get the buffers (not the resources)
        slots = ws.stats().slots
        assert [s.persistent_keys for s in slots] == [4, 3]
        assert [s.persistent_bytes for s in slots] == [768, 768]


def test_slot_figures_count_growths_calls_and_a_high_water_mark_that_never_goes_down() -> None:
    with Arena("cpu", ubatches=2, framework="numpy") as ws:
        for n in (10, 1000, 100, 5000, 7):
            ws.get_simultaneous(((n,), F32))
        ws.reserve_bytes(1 << 16)  # grows every slot; a reservation is not a request
        slots = ws.stats().slots
        assert [s.high_water for s in slots] == [20224, 0]
        assert [s.growths for s in slots] == [4, 1]
        assert [s.calls for s in slots] == [5, 0]
        assert [s.capacity for s in slots] == [1 << 16, 1 << 16]
        ws.lock()
        ws.get_simultaneous(((3,), F32))
        ws.unlock()
        ws.get_simultaneous(((4,), F32))
        assert ws.stats().slots[0].high_water == 20224
        assert ws.stats().growths == 5 and ws.stats().calls == 7


@moving_only("lock() grows in place and retires nothing")
def test_retired_figures_count_what_lock_kept() -> None:
    with Arena("cpu", ubatches=3, framework="numpy") as ws:
        for ubatch, n in ((1, 10), (2, 100)):
            with ws.ubatch(ubatch):
                ws.get_simultaneous(((n,), F32))
        ws.get_simultaneous(((10_000,), F32))
        ws.lock()
        slots = ws.stats().slots
        assert [(s.retired_buffers, s.retired_bytes) for s in slots] == [(0, 0), (1, 256), (1, 512)]
        assert ws.stats().reserved_bytes == 3 * 40192 + 256 + 512
        assert ws.release_retired() == 768


# ---------------------------------------------------------------------- recorder details
def test_a_slot_that_never_ran_records_zeros(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", lanes=2, framework="numpy", profile=path) as ws:
        _site_small(ws, 100)
        ws.lock()
    slots = read_profile(path)["slots"]
    assert [(s["peak"], s["capacity"], s["growths"]) for s in slots] == [
        (512, 512, 1),
        (0, 0, 0),
    ]


def test_a_resize_is_recorded_for_its_own_slot(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", ubatches=2, lanes=2, framework="numpy", profile=path) as ws:
        with ws.lane(1):
            _site_small(ws, 10)  # slot (0, 1) only
        assert ws.save_profile()
        slots = read_profile(path)["slots"]
        assert [s["capacity"] for s in slots] == [0, 256, 0, 0]
        assert [s["peak"] for s in slots] == [0, 256, 0, 0]


def _list_shaped(ws: Arena, n: int) -> None:
    ws.get_simultaneous(([n], F32))  # a list shape: the request is unhashable


def test_layouts_are_recorded_at_the_arenas_alignment_and_for_list_shapes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", alignment=64, framework="numpy", profile=path) as ws:
        for n in (10, 20, 10):
            _list_shaped(ws, n)
        ws.lock()
    (site,) = read_profile(path)["sites"]
    assert [(lay["total"], lay["views"]) for lay in site["layouts"]] == [
        (128, [[[20], F32]]),
        (64, [[[10], F32]]),
    ]


def test_the_smallest_layout_by_bytes_is_the_one_dropped(tmp_path: Path) -> None:
    """Kept layouts are keyed by their request: the one dropped is the smallest in bytes,
    not the one whose request sorts first."""
    path = tmp_path / "p.json"
    shapes = [(1, 1024)] + [(k, 64) for k in range(2, 10)]  # (1, 1024) sorts first: 4 KiB
    with Arena("cpu", framework="numpy", profile=path) as ws:
        for shape in shapes:
            ws.get_simultaneous((shape, F32))
        ws.lock()
    (site,) = read_profile(path)["sites"]
    kept = [tuple(lay["views"][0][0]) for lay in site["layouts"]]
    assert kept == [(1, 1024), *[(k, 64) for k in range(9, 2, -1)]]  # (2, 64) dropped


def test_the_timeline_keeps_the_first_resizes_up_to_its_limit(tmp_path: Path) -> None:
    from arena.observe.profilefile import MAX_TIMELINE

    path = tmp_path / "p.json"
    with Arena("cpu", framework="numpy", profile=path) as ws:
        for n in range(1, MAX_TIMELINE + 21):
            ws.get_simultaneous(((64 * n,), F32))  # each one grows by 256 bytes
        ws.lock()
    profile = read_profile(path)
    timeline = profile["timeline"]
    assert len(timeline) == MAX_TIMELINE
    assert [e["new"] for e in timeline[:3]] == [256, 512, 768]
    assert profile["slots"][0]["growths"] == MAX_TIMELINE + 20


def test_timeline_times_are_seconds_since_the_arena_started(tmp_path: Path) -> None:
    import time

    path = tmp_path / "p.json"
    started = time.monotonic()
    with Arena("cpu", framework="numpy", profile=path) as ws:
        _site_small(ws, 10)
        _site_small(ws, 1000)
        ws.lock()
    elapsed = time.monotonic() - started
    times = [e["t"] for e in read_profile(path)["timeline"]]
    assert len(times) == 2
    for t in times:
        assert isinstance(t, float) and 0 <= t <= elapsed and round(t, 6) == t


def test_a_dropped_arena_saves_what_it_recorded(tmp_path: Path) -> None:
    import gc

    busy = tmp_path / "busy.json"
    a = Arena("cpu", framework="numpy", profile=busy)
    _site_small(a, 10)
    del a
    gc.collect()
    assert read_profile(busy)["slots"][0]["peak"] == 256


def test_a_merge_raises_a_sites_peak_when_the_new_run_asked_more() -> None:
    old = _profile([0], [0], [], [_site("a.py:1:f", 1024, [256])])
    new = _profile([0], [0], [], [_site("a.py:1:f", 4096, [1024])])
    (site,) = merge_profiles(old, new)["sites"]
    assert site["peak"] == 4096


def test_a_merge_keeps_the_largest_load_and_planned_need_of_either_run() -> None:
    old = _profile([1000, 1000], [4096, 4096], [])
    new = _profile([2000, 500], [2048, 8192], [])
    old["slots"][0]["load"] = 3000
    new["slots"][1]["load"] = 700
    merged = merge_profiles(old, new)["slots"]
    assert [s["load"] for s in merged] == [3000, 700]
    assert [s["planned"] for s in merged] == [0, 0]  # neither run planned
    new["slots"][0]["planned"] = 1500  # one run planned slot 0: the larger need of both
    old["slots"][1]["planned"] = 9000
    merged = merge_profiles(old, new)["slots"]
    assert [s["planned"] for s in merged] == [4096, 9000]


def test_a_merge_keeps_each_workspace_once_at_its_largest() -> None:
    def workspace(ubatch: int, kind: str, key: str, nbytes: int) -> dict[str, Any]:
        return {"ubatch": ubatch, "lane": 0, "kind": kind, "key": key, "bytes": nbytes}

    old = _profile([0, 0], [0, 0], [])
    new = _profile([0, 0], [0, 0], [])
    old["workspaces"] = [workspace(0, "cublas", "h", 4096), workspace(1, "cublas", "h", 100)]
    new["workspaces"] = [workspace(0, "cublas", "h", 1024), workspace(0, "cudnn", "h", 512)]
    merged = merge_profiles(old, new)["workspaces"]
    assert sorted((w["ubatch"], w["kind"], w["bytes"]) for w in merged) == [
        (0, "cublas", 4096),
        (0, "cudnn", 512),
        (1, "cublas", 100),
    ]
    assert "workspaces" not in new or len(new["workspaces"]) == 2  # inputs unchanged


# ---------------------------------------------------------------------- the file written
def test_the_file_records_the_growth_policy_and_when_it_was_updated(tmp_path: Path) -> None:
    import re
    import time

    path = tmp_path / "p.json"
    before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with Arena("cpu", growth="pow2", framework="numpy", profile=path) as ws:
        _site_small(ws, 10)
        ws.lock()
    after = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    profile = read_profile(path)
    assert profile["growth"] == "pow2"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", profile["updated"])
    assert before <= profile["updated"] <= after


def test_writing_into_a_damaged_profile_says_what_was_repaired(tmp_path: Path) -> None:
    import json

    from arena.observe.profilefile import write_merged

    path = tmp_path / "p.json"
    run = _profile([256], [256], [256])
    damaged = _profile([512], [512], [512])
    damaged["growth"] = 5
    path.write_text(json.dumps(damaged))
    note = write_merged(path, run)
    assert note == 'it was repaired first: "growth" 5 is not a string: dropped'
    assert read_profile(path)["slots"][0]["peak"] == 512
    assert write_merged(path, run) is None  # a valid file: merged, nothing to say


def test_a_directory_in_place_of_the_profile_is_named_and_left_alone(tmp_path: Path) -> None:
    from arena.observe.profilefile import ProfileError, write_merged

    folder = tmp_path / "p.json"
    folder.mkdir()
    with pytest.raises(ProfileError) as info:
        write_merged(folder, _profile([256], [256], []))
    assert str(info.value) == "it is a directory, not a regular file"
    assert folder.is_dir() and list(folder.iterdir()) == []


def test_warnings_about_a_profile_name_its_file(tmp_path: Path) -> None:
    import warnings

    from arena import ArenaWarning

    path = tmp_path / "p.json"
    path.write_text("[1, 2]")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ws = Arena("cpu", framework="numpy", profile=path)
        _site_small(ws, 10)
        ws.lock()
        ws.close()
    messages = [str(w.message) for w in caught if issubclass(w.category, ArenaWarning)]
    assert len(messages) == 1  # warned once, not again at every save
    assert messages[0].startswith(f"arena profile {str(path)!r} is ignored and left as it is: ")
    later = tmp_path / "later.json"  # no file at the start; another one appears there
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ws = Arena("cpu", framework="numpy", profile=later)
        _site_small(ws, 10)
        later.write_text("[1, 2]")
        ws.lock()
        ws.close()
    messages = [str(w.message) for w in caught if issubclass(w.category, ArenaWarning)]
    assert len(messages) == 1
    assert messages[0].startswith(
        f"arena profile {str(later)!r} is left as it is and this run is not saved: "
    )
    assert later.read_text() == "[1, 2]"
