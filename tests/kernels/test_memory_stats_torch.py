"""``memory_stats()`` against ``memory_snapshot()`` by torch's own consistency rules, over
random sequences of operations (issue 30, item 4), and peaks that do not depend on when
they are read (issue 26, item 7)."""

from __future__ import annotations

import collections
import importlib.util

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arena

HAS_TORCH = importlib.util.find_spec("torch") is not None


def check_consistency(ws: arena.Arena) -> None:
    """torch's ``TestCuda._check_memory_stat_consistency`` (test/test_cuda.py), with the
    arena's snapshot and stats in place of ``torch.cuda``'s."""
    snapshot = ws.memory_snapshot()["segments"]
    expected: dict[str, int] = collections.defaultdict(int)
    for segment in snapshot:
        expandable = segment["is_expandable"]
        pool_str = segment["segment_type"] + "_pool"
        if not expandable:
            expected["segment.all.current"] += 1
            expected["segment." + pool_str + ".current"] += 1
        expected["allocated_bytes.all.current"] += segment["allocated_size"]
        expected["allocated_bytes." + pool_str + ".current"] += segment["allocated_size"]
        expected["reserved_bytes.all.current"] += segment["total_size"]
        expected["reserved_bytes." + pool_str + ".current"] += segment["total_size"]
        expected["active_bytes.all.current"] += segment["active_size"]
        expected["active_bytes." + pool_str + ".current"] += segment["active_size"]
        expected["requested_bytes.all.current"] += segment["requested_size"]
        expected["requested_bytes." + pool_str + ".current"] += segment["requested_size"]
        sum_requested = 0
        is_split = len(segment["blocks"]) > 1
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                expected["allocation.all.current"] += 1
                expected["allocation." + pool_str + ".current"] += 1
            if block["state"].startswith("active_"):
                sum_requested += block["requested_size"]
                expected["active.all.current"] += 1
                expected["active." + pool_str + ".current"] += 1
            if block["state"] == "inactive" and is_split and not expandable:
                expected["inactive_split.all.current"] += 1
                expected["inactive_split." + pool_str + ".current"] += 1
                expected["inactive_split_bytes.all.current"] += block["size"]
                expected["inactive_split_bytes." + pool_str + ".current"] += block["size"]
        assert sum_requested == segment["requested_size"]
    stats = ws.memory_stats()
    for key, value in expected.items():
        assert stats[key] == value, (key, stats[key], value)
    for key, value in stats.items():  # a key the snapshot has nothing for is 0
        if key.endswith(".current") and key not in expected:
            assert value == 0, key
        if key.endswith(".peak"):
            assert value >= stats[key.replace(".peak", ".current")], key


def test_a_persistent_buffer_counts_its_block_in_both() -> None:
    """The issue's case: stats counted the view's bytes, the snapshot the 256-byte block."""
    with arena.Arena("cpu", framework="numpy") as ws:
        for key in range(32):
            ws.get_persistent(key, (57,), "float32")  # 228 bytes in a 256-byte block
        check_consistency(ws)
        stats = ws.memory_stats()
        assert stats["allocated_bytes.all.current"] == 32 * 256
        assert stats["requested_bytes.all.current"] == 32 * 228


def test_every_kind_of_block_agrees() -> None:
    capturing = [False]
    with arena.Arena(
        "cpu", framework="numpy", ubatches=2, capture_probe=lambda: capturing[0]
    ) as ws:
        ws.get_simultaneous(((1000,), "float32"))
        ws.get_simultaneous(((100,), "float32"))  # the largest stays what is used
        ws.get_persistent("p", (100,), "float16")
        ws.get_library_workspace("fi", 1000)
        capturing[0] = True
        ws.get_library_workspace("fi", 1000)  # handed out during a capture
        capturing[0] = False
        ws.get_library_workspace("fi", 5000)  # grows: the captured block is retired
        if HAS_TORCH:
            ws.triton_allocator()(3000, 128, 7)
        ws.lock()  # ubatch 1's scratch, persistent buffer and workspace
        ws.unlock()
        ws.get_simultaneous(((4000,), "float32"))  # ubatch 0 grows past ubatch 1
        check_consistency(ws)
        stats = ws.memory_stats()
        assert stats["inactive_split.all.current"] == 0
        with ws.ubatch(1):
            ws.get_simultaneous(((10,), "float32"))  # uses part of its buffer
        check_consistency(ws)
        assert ws.memory_stats()["inactive_split.all.current"] == 1
        assert ws.stats().slots[0].retired_buffers == 1  # the captured workspace
    check_consistency(ws)
    stats = ws.memory_stats()
    assert stats["allocated_bytes.all.current"] == 0 and stats["allocated_bytes.all.peak"] > 0


def test_reset_accumulated_memory_stats_zeroes_the_history_only() -> None:
    with arena.Arena("cpu", framework="numpy", max_bytes=1 << 20) as ws:
        ws.get_simultaneous(((1000,), "float32"))
        ws.get_simultaneous(((2000,), "float32"))
        with pytest.raises(arena.ArenaOutOfMemoryError):
            ws.get_simultaneous(((1 << 20,), "float32"))
        before = ws.memory_stats()
        assert before["num_device_alloc"] == 2 and before["num_device_free"] == 1
        assert before["segment.all.allocated"] == 2 and before["segment.all.freed"] == 1
        assert before["reserved_bytes.all.allocated"] == 4096 + 8192
        assert before["reserved_bytes.all.freed"] == 4096
        assert before["num_ooms"] == 1
        ws.reset_accumulated_memory_stats()
        after = ws.memory_stats()
        for key in ("num_device_alloc", "num_device_free", "num_ooms"):
            assert after[key] == 0, key
        for key in ("segment.all.allocated", "reserved_bytes.all.freed"):
            assert after[key] == 0, key
        for key in ("reserved_bytes.all.current", "reserved_bytes.all.peak"):
            assert after[key] == before[key], key  # current and peaks untouched
        ws.get_simultaneous(((3000,), "float32"))
        grown = ws.memory_stats()
        assert grown["reserved_bytes.all.allocated"] == 12032
        assert grown["reserved_bytes.all.freed"] == 8192
        assert grown["num_device_alloc"] == grown["segment.large_pool.allocated"] == 1


# A random program: (operation, argument) pairs.
OPERATION = st.one_of(
    st.tuples(st.just("request"), st.integers(1, 5000)),
    st.tuples(st.just("request1"), st.integers(1, 5000)),
    st.tuples(st.just("persistent"), st.integers(0, 3)),
    st.tuples(st.just("workspace"), st.integers(1, 9000)),
    st.tuples(st.just("captured_workspace"), st.just(0)),
    st.tuples(st.just("triton"), st.integers(0, 9000)),
    st.tuples(st.just("step"), st.integers(1, 3000)),
    st.tuples(st.just("lock"), st.just(0)),
    st.tuples(st.just("release_retired"), st.just(0)),
    st.tuples(st.just("plan"), st.just(0)),
    st.tuples(st.just("reset_peaks"), st.just(0)),
)


def _run(program: list[tuple[str, int]], observe: bool) -> dict[str, int]:
    capturing = [False]
    ws = arena.Arena("cpu", framework="numpy", ubatches=2, capture_probe=lambda: capturing[0])
    with ws:
        for operation, value in program:
            try:
                if operation == "request":
                    ws.get_simultaneous(((value,), "uint8"))
                elif operation == "request1":
                    with ws.ubatch(1):
                        ws.get_simultaneous(((value,), "uint8"), ((value // 3,), "float32"))
                elif operation == "persistent":
                    ws.get_persistent(value, (value * 100 + 1,), "float16")
                elif operation == "workspace":
                    ws.get_library_workspace("cap" if value % 2 else "fi", value)
                elif operation == "captured_workspace":  # a capture reads it: kept on growth
                    capturing[0] = True
                    try:
                        ws.get_library_workspace("cap", 1)
                    finally:
                        capturing[0] = False
                elif operation == "triton" and HAS_TORCH:
                    ws.triton_allocator()(value, 64, 3)
                elif operation == "step":
                    with ws.step("s") as step:
                        (a,) = step.get_simultaneous(((value,), "uint8"))
                        step.get_simultaneous(((256,), "uint8"))
                        step.release(a)
                        step.get_simultaneous(((2 * value,), "uint8"))
                elif operation == "lock":
                    if ws.is_locked:
                        ws.unlock()
                    else:
                        ws.lock()
                elif operation == "release_retired":
                    ws.release_retired(include_captured=True)
                elif operation == "plan":
                    ws.plan_steps()
                elif operation == "reset_peaks":
                    ws.reset_peak_memory_stats()
            except (arena.ArenaLockedError, arena.GraphCaptureError):
                pass
            if observe:
                check_consistency(ws)
        check_consistency(ws)
        stats = ws.memory_stats()
    closed = ws.memory_stats()
    check_consistency(ws)
    assert closed["reserved_bytes.all.current"] == closed["allocated_bytes.all.current"] == 0
    return {k: v for k, v in stats.items() if k.endswith(".peak")}


@settings(max_examples=40, deadline=None)
@given(st.lists(OPERATION, max_size=14))
def test_torchs_consistency_rules_hold_over_random_programs(
    program: list[tuple[str, int]],
) -> None:
    watched = _run(program, observe=True)
    unwatched = _run(program, observe=False)
    assert watched == unwatched  # no peak depends on when memory_stats() was read
