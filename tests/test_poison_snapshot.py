"""Poisoning, torch-format memory snapshots and the RMM-schema event log."""

from __future__ import annotations

import csv
import pickle
from pathlib import Path

import numpy as np
import pytest

import arena
from arena.views.poison import NAN_BYTE, NAN_BYTE_FNUZ, PATTERN_BYTE, sentinel


@pytest.mark.parametrize("cached", [False, True])
def test_poison_makes_a_stale_numpy_view_read_nan(cached: bool) -> None:
    with arena.Arena("cpu", framework="numpy", poison=True, cached_views=cached) as ws:
        old, counts = ws.get_simultaneous(((64,), "float32"), ((8,), "int32"))
        old[...] = 1.0
        counts[...] = 7
        ws.get_simultaneous(((64,), "float32"), ((8,), "int32"))  # the next request
        assert np.isnan(old).all()
        assert (counts.view(np.uint8) == PATTERN_BYTE).all()


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_poison_covers_views_a_plan_builds_for_new_sizes(framework: str) -> None:
    if framework == "torch":
        pytest.importorskip("torch")
    with arena.Arena("cpu", framework="numpy", poison=True) as ws:
        front = ws.front(framework)
        ws.reserve_bytes(1 << 16)
        front.get_simultaneous(((8, 4), "float32"))  # the structure's plan now exists
        for rows in (3, 5, 5, 9):  # first sightings (handed out as built) and a repeat
            (view,) = front.get_simultaneous(((rows, 4), "float32"))
            assert np.isnan(np.asarray(view)).all(), rows


def test_without_poison_a_stale_view_keeps_its_bytes() -> None:
    with arena.Arena("cpu", framework="numpy") as ws:
        (old,) = ws.get_simultaneous(((64,), "float32"))
        old[...] = 1.0
        ws.get_simultaneous(((64,), "float32"))
        assert (old == 1.0).all()


def test_poison_from_the_environment_and_locked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_POISON", "1")
    with arena.Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((64,), "float32"))
        ws.lock()
        (view,) = ws.get_simultaneous(((64,), "float32"))  # a locked hit is poisoned too
        assert np.isnan(view).all()


def test_poison_torch_views() -> None:
    torch = pytest.importorskip("torch")
    with arena.Arena("cpu", framework="torch", poison=True) as ws:
        half, ints = ws.get_simultaneous(((4, 4), torch.bfloat16), ((3,), torch.int64))
        assert torch.isnan(half).all()
        assert ints.view(torch.uint8).eq(PATTERN_BYTE).all()
        (scalar,) = ws.get_simultaneous(((), torch.float32))
        assert torch.isnan(scalar)


def test_poison_jax_views() -> None:
    pytest.importorskip("jax")
    with arena.Arena("cpu", framework="numpy", poison=True) as ws:
        (view,) = ws.jax.get_simultaneous(((16,), "float32"))
        assert np.isnan(np.asarray(view)).all()


def test_sentinel_bytes_are_a_nan_for_every_floating_dtype() -> None:
    assert sentinel("float32") == sentinel("bfloat16") == sentinel("complex64") == NAN_BYTE
    assert sentinel("float8_e4m3fnuz") == sentinel("float8_e5m2fnuz") == NAN_BYTE_FNUZ
    assert sentinel("float4_e2m1fn_x2") == sentinel("int8") == sentinel("bool") == PATTERN_BYTE
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for name in (
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
    ):
        dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
        value = np.full(dtype.itemsize, sentinel(name), np.uint8).view(dtype)
        assert np.isnan(value.astype(np.float32)).all(), name


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
    assert [b["state"] for b in scratch["blocks"]] == ["active_allocated"] * 3 + ["inactive"]
    assert [b["requested_size"] for b in scratch["blocks"][:3]] == [40, 12000, 7]
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
    assert "total_allocated: 11.9KiB" in viz.segsum(snapshot)  # + ubatch 1's 256-byte block
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
