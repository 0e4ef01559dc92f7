"""Torch-format memory snapshots and the RMM-schema event log."""

from __future__ import annotations

import csv
import pickle
from pathlib import Path

import pytest

import arena


def test_memory_snapshot_renders_through_torch_memory_viz(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from torch.cuda import _memory_viz as viz

    with arena.Arena("cpu", ubatches=2, framework="numpy") as ws:
        ws.get_simultaneous(((100,), "float32"))
        ws.get_simultaneous(((5000,), "float32"))  # grows: the old buffer is freed
        ws.get_simultaneous(((10,), "float32"), ((3000,), "float32"), ((7,), "int8"))
        ws.get_persistent("cache", (32,), "float16")
        ws.lock()  # sizes ubatch 1 (it never asked) and gives it its persistent buffer
        snapshot = ws.memory_snapshot()
    segments = snapshot["segments"]
    assert len(segments) == 4  # two slot buffers and a persistent buffer per micro-batch
    scratch = segments[0]
    # One block over what requests used (the 20000-byte request, padded: all of it), as
    # memory_stats() counts it (issue 30, item 4); the last request's views listed in it.
    assert [b["state"] for b in scratch["blocks"]] == ["active_allocated"]
    views = scratch["blocks"][0]["arena_views"]
    assert [v["requested_size"] for v in views] == [40, 12000, 7]
    assert [v["offset"] for v in views] == [0, 256, 12288]
    assert scratch["blocks"][0]["frames"][0]["name"].startswith("test_memory_snapshot")
    assert sum(b["size"] for b in scratch["blocks"]) == scratch["total_size"]
    actions = [e["action"] for e in snapshot["device_traces"][0]]
    assert actions == [
        "segment_alloc",
        "segment_free",
        "segment_alloc",
        "segment_alloc",
        "segment_alloc",
        "segment_alloc",
    ]
    # ubatch 0's 20224 bytes used, two 256-byte persistent blocks; ubatch 1's scratch unused
    assert "total_allocated: 19.9KiB" in viz.segsum(snapshot)
    assert "segment_alloc" not in viz.trace(snapshot)  # rendered as cudaMalloc(...)
    assert "cudaMalloc" in viz.trace(snapshot)
    lines = viz.segments(snapshot, format_flamegraph=lambda text: text)
    assert "active_allocated" in lines and "test_memory_snapshot" in lines
    assert viz.memory(snapshot, format_flamegraph=lambda text: text)
    for page in (viz.segment_plot(snapshot), viz.trace_plot(snapshot)):
        assert page.startswith("\n<!DOCTYPE html>") and "snapshot.pickle" in page
    assert pickle.loads(pickle.dumps(snapshot)) == snapshot


def test_event_log_writes_rmm_csv(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    with arena.Arena("cpu", framework="numpy", event_log=path) as ws:
        ws.get_simultaneous(((100,), "float32"))
        ws.get_simultaneous(((1000,), "float32"))
        stats = ws.stats()
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    assert path.read_text().splitlines()[0] == "Thread,Time,Action,Pointer,Size,Stream"
    assert [(r["Action"], int(r["Size"])) for r in rows] == [
        ("allocate", 512),
        ("free", 512),
        ("allocate", 4096),
        ("free", 4096),
    ]
    assert stats.allocations == 2 and rows[0]["Pointer"].startswith("0x")
    assert rows[0]["Pointer"] == rows[1]["Pointer"] and rows[0]["Stream"] == "0"
    hours, minutes, seconds, micros = rows[0]["Time"].split(":")
    assert len(micros) == 6 and int(hours) < 24 and int(minutes) < 60 and int(seconds) < 61


def test_event_log_failure_warns_and_the_arena_works(tmp_path: Path) -> None:
    path = tmp_path / "no" / "e.csv"
    with pytest.warns(arena.ArenaWarning, match="cannot write the arena event log") as seen:
        ws = arena.Arena("cpu", framework="numpy", event_log=path)
    assert str(path) in str(seen[0].message)  # names the file it could not write
    with ws:
        ws.get_simultaneous(((100,), "float32"))
        assert ws.stats().allocations == 1


def test_the_trace_is_the_ledgers_own_and_no_event_log_means_no_observer() -> None:
    # Issue 27 item 4: an allocation calls no observer unless a log file is written; the
    # snapshot's device trace is what the ledger keeps, the most recent TRACE_LIMIT events.
    from arena.memory.ledger import TRACE_LIMIT

    # The moving source: its growth frees the old block (the fixed-address one keeps it).
    with arena.Arena("cpu", framework="numpy", source="host") as ws:
        ledger = ws._table.governor.ledger
        assert ledger.observer is None
        ws.get_simultaneous(((100,), "float32"))
        ws.get_simultaneous(((5000,), "float32"))  # grows: the old buffer is freed
        trace = ws.memory_snapshot()["device_traces"][0]
        assert [(e["action"], e["size"]) for e in trace] == [
            ("segment_alloc", 512),
            ("segment_free", 512),
            ("segment_alloc", 20224),
        ]
        assert trace[0]["frames"][0]["name"] == "the scratch buffer of slot (ubatch 0, lane 0)"
        assert trace[1]["frames"] == [] and trace[2]["time_us"] >= trace[0]["time_us"]
        for n in range(TRACE_LIMIT):  # every event of the ledger's, the oldest let go
            ledger.release(ledger.allocate(256, f"block {n}"))
        trace = ws.memory_snapshot()["device_traces"][0]
        assert len(trace) == TRACE_LIMIT
        assert trace[-1]["action"] == "segment_free"
        assert trace[-2]["frames"][0]["name"] == f"block {TRACE_LIMIT - 1}"
    with arena.Arena("cpu", framework="numpy", event_log=None) as ws:
        assert ws._table.governor.ledger.observer is None
