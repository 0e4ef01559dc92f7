"""Planted bugs the suite let through in arena.observe (branch plant36): each test names
the bug it kills, was seen to fail with that bug planted, and passes on the code."""

from __future__ import annotations

from pathlib import Path

from arena import Arena
from arena.observe.profilefile import read_profile
from arena.observe.report import analyse


def test_stats_table_shows_capacity_and_load_in_the_same_unit() -> None:
    # Plant S2: ArenaStats.table() printed LOAD in bytes under its "LOAD MB" header.
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((1 << 18,), "float32"))  # 1 MiB
        stats = ws.stats()
        slot = stats.slots[0]
        assert slot.capacity == slot.load == 1 << 20
        row = stats.table().splitlines()[2].split()
        assert row[:4] == ["ubatch", "0", "lane", "0"]
        capacity_mb, load_mb, ratio = row[4:7]
        assert capacity_mb == load_mb == "1.00"
        assert ratio == "1.00"


def test_report_counts_a_lanes_duplicated_bytes_beyond_its_largest_buffer(
    tmp_path: Path,
) -> None:
    # Plant R2: the report's lane summary subtracted the smallest micro-batch buffer from
    # the lane's total instead of the largest: what the siblings duplicate is everything
    # beyond the one buffer the lane needs.
    path = tmp_path / "p.json"
    with Arena("cpu", framework="numpy", ubatches=3, profile=path) as ws:
        # Smallest first: a micro-batch that grows after a larger sibling is brought to
        # the sibling's size, so the lane's buffers differ only in this order.
        with ws.ubatch(1):
            ws.get_simultaneous(((1024,), "float32"))
        with ws.ubatch(2):
            ws.get_simultaneous(((2048,), "float32"))
        ws.get_simultaneous(((4096,), "float32"))
        ws.save_profile()
    (lane,) = analyse(read_profile(path))["lanes_summary"]
    assert lane["ubatches"] == 3
    assert lane["total"] == 16384 + 4096 + 8192
    assert lane["duplicated"] == 4096 + 8192


def test_a_retired_library_workspace_is_an_inactive_block_of_the_snapshot() -> None:
    # Plant SN2: memory_snapshot() showed a library workspace retired by growth (kept
    # because a CUDA graph captured it) as active_allocated, so memory_stats counted it
    # in allocated_bytes as if a library still used it.
    capturing = [False]
    with Arena("cpu", framework="numpy", capture_probe=lambda: capturing[0]) as ws:
        ws.get_library_workspace("fi", 4096)
        capturing[0] = True
        ws.get_library_workspace("fi", 4096)  # read by the capture: kept when replaced
        capturing[0] = False
        ws.get_library_workspace("fi", 8192)
        states = {
            segment["total_size"]: [block["state"] for block in segment["blocks"]]
            for segment in ws.memory_snapshot()["segments"]
        }
        assert states == {8192: ["active_allocated"], 4096: ["inactive"]}
        assert ws.memory_stats()["allocated_bytes.all.current"] == 8192
