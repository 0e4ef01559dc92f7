"""Mutation gaps of arena.kernels.budget and arena.kernels.memstats (issue 26 item 12):
behaviour no other test pinned down, each test written against a mutant that survived."""

from __future__ import annotations

from arena import Arena


def test_memory_stats_small_pool_sync_and_cap_figures_are_zero_and_peaks_reset_to_them() -> None:
    # memstats.py memory_stats #46, #48, #62, #64 (the small pool's segment and reserved
    # peaks and totals), #88 (num_sync_all_streams), #136 (max_bytes without a cap);
    # reset_peaks #11 (figures the slots have none of reset to 1).
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        ws.get_simultaneous(((4096,), "float32"))
        with ws.ubatch(1):
            ws.get_simultaneous(((8192,), "float32"))
        ws.get_library_workspace("fi", 1024)
        ws.reset_peak_memory_stats()
        stats = ws.memory_stats()
        for family in ("reserved_bytes", "segment"):
            assert stats[f"{family}.all.peak"] > 0
            assert stats[f"{family}.all.allocated"] > 0
            for figure in ("current", "peak", "allocated", "freed"):
                assert stats[f"{family}.small_pool.{figure}"] == 0, (family, figure)
        assert stats["num_sync_all_streams"] == 0
        assert stats["arena.max_bytes"] == 0
        small_peaks = {k: v for k, v in stats.items() if ".small_pool.peak" in k}
        assert small_peaks and set(small_peaks.values()) == {0}


def test_resident_bytes_are_the_live_bytes_awake_and_none_asleep() -> None:
    # memstats.py memory_stats #152, #153, #154.
    with Arena("cpu", framework="numpy", source="virtual") as ws:
        ws.get_simultaneous(((4096,), "float32"))
        stats = ws.memory_stats()
        assert stats["arena.resident_bytes"] == stats["reserved_bytes.all.current"] > 0
        ws.sleep(level=1)
        assert ws.memory_stats()["arena.resident_bytes"] == 0
        ws.wake()
        assert ws.memory_stats()["arena.resident_bytes"] == stats["arena.resident_bytes"]
