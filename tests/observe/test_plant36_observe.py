"""Planted bugs the suite let through in arena.observe (branch plant36): each test names
the bug it kills, was seen to fail with that bug planted, and passes on the code."""

from __future__ import annotations

from arena import Arena


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
