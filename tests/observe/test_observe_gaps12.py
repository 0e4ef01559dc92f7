"""Round 12b (issue 26 item 12): tests that kill mutants the suite let through in
``arena/observe/stats.py``, ``snapshot.py`` and ``report.py``."""

from __future__ import annotations

from pathlib import Path

from arena import Arena
from arena.memory.virtual import VirtualHostSource
from arena.observe.profilefile import read_profile
from arena.observe.report import analyse, format_analysis
from tests.gates import Probe


def test_stats_name_the_device_and_count_cached_layouts_and_address_space() -> None:
    with Arena("cpu", framework="numpy", source="host") as a:  # a moving source: its bytes
        for _ in range(3):
            a.get_simultaneous(((100,), "float32"))
            a.get_simultaneous(((50,), "float32"), ((7,), "int8"))
        stats = a.stats()
        assert stats.device == "cpu"
        assert stats.cached_layouts == 2  # the two structures asked for
        assert stats.address_bytes == stats.live_bytes > 0  # host blocks: their bytes
    reserve = 1 << 20
    with Arena("cpu", framework="numpy", source=VirtualHostSource(reserve=reserve)) as a:
        a.get_simultaneous(((100,), "float32"))
        stats = a.stats()
        # A fixed-address source's block reserves its whole range, more than it holds.
        assert stats.address_bytes == reserve > stats.live_bytes


def test_a_snapshots_segments_name_what_they_hold_and_the_trace_is_on_stream_0() -> None:
    probe = Probe()
    with Arena("cpu", framework="numpy", source="host", capture_probe=probe) as a:
        a.get_simultaneous(((256,), "uint8"))
        probe.capturing = True
        a.get_simultaneous(((256,), "uint8"))  # a capture marks the buffer
        probe.capturing = False
        a.get_simultaneous(((1 << 16,), "uint8"))  # grows: the captured buffer is kept
        assert a.stats().slots[0].retired_bytes > 0
        snapshot = a.memory_snapshot()
    segments = snapshot["segments"]
    names = [s["frames"][0]["name"] for s in segments]
    assert names == [
        "slot (ubatch 0, lane 0) scratch",
        "slot (ubatch 0, lane 0) retired",
    ]
    for segment in segments:
        assert isinstance(segment["address"], int)
        assert segment["address"] == segment["blocks"][0]["address"]
    trace = snapshot["device_traces"][0]
    assert trace and all(entry["stream"] == 0 for entry in trace)


def test_the_reports_tables_head_their_columns_in_their_units(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    with Arena("cpu", framework="numpy", profile=path) as a:
        a.get_simultaneous(((100,), "float32"))
    lines = format_analysis(analyse(read_profile(path))).splitlines()
    # Padding is counted in bytes (B), the other columns in MB: the heading says which.
    assert "slot      capacity  own peak  growths  padding B  unused  siblings  sized by" in lines
    assert "slot          peak   share  growths  layouts  padding B  site" in lines
