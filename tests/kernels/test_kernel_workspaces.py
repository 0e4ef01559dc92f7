"""Library workspaces (``get_library_workspace``) and Triton's allocator
(``triton_allocator``): same memory for the same key or size, growth that copies and tells
the library, the capture rule, lock, faults at every allocation, threads, profiles."""

from __future__ import annotations

import importlib.util
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import arena
from arena import (
    Arena,
    ArenaClosedError,
    ArenaEvent,
    ArenaLockedError,
    ArenaOutOfMemoryError,
    ConfigError,
    FrameworkUnavailableError,
    GraphCaptureError,
    SlotError,
    SpecError,
)
from arena.slots import workspaces as workspaces_module
from tests.gates import Gate, Probe
from tests.sources import FaultySource, RecordingSource, check_books
from tests.tma import tma_copy_kernel

MB = 1 << 20
TIMEOUT = 10


def span(view: Any) -> range:
    """The addresses a NumPy or torch view covers."""
    if isinstance(view, np.ndarray):
        start = view.__array_interface__["data"][0]
        return range(start, start + view.nbytes)
    start = view.data_ptr()
    return range(start, start + view.numel() * view.element_size())


def disjoint(*views: Any) -> bool:
    spans = sorted((span(v) for v in views), key=lambda r: r.start)
    return all(a.stop <= b.start for a, b in itertools.pairwise(spans))


# ====================================================================== library workspaces
def test_same_key_and_size_return_the_same_memory() -> None:
    with Arena("cpu", framework="numpy") as a:
        first = a.get_library_workspace("flashinfer", 1000)
        assert first.dtype == np.uint8 and first.ndim == 1 and first.nbytes >= 1000
        assert a.get_library_workspace("flashinfer", 1000) is first
        assert a.get_library_workspace("flashinfer", 10) is first  # smaller: the same
        other = a.get_library_workspace("cublas", 1000)
        assert disjoint(first, other)


def test_workspaces_never_overlap_scratch_or_persistent() -> None:
    with Arena("cpu", framework="numpy") as a:
        (scratch,) = a.get_simultaneous(((4096,), "uint8"))
        persistent = a.get_persistent("kv", (4096,), "uint8")
        workspace = a.get_library_workspace("fi", 4096)
        (grown,) = a.get_simultaneous(((1 << 16,), "uint8"))  # scratch growth moves scratch
        assert disjoint(scratch, persistent, workspace)
        assert disjoint(grown, persistent, workspace)
        assert a.get_library_workspace("fi", 4096) is workspace  # scratch growth: no move


def test_growth_copies_calls_on_grow_and_remembers_it() -> None:
    source = RecordingSource()
    grown: list[Any] = []
    with Arena(source=source, framework="numpy") as a:
        small = a.get_library_workspace("fi", 1024, on_grow=grown.append)
        small[:] = np.arange(1024) % 251
        assert grown == []  # creation is not growth: the caller has the view
        big = a.get_library_workspace("fi", 4 * 1024)
        assert grown == [big]  # the on_grow given earlier is kept for the key
        assert (big[:1024] == np.arange(1024) % 251).all()
        assert a.get_library_workspace("fi", 4 * 1024) is big
        # The old view keeps its memory alive though the arena released the block.
        assert source.events.count(("release", 1024)) == 1
        assert (small == np.arange(1024) % 251).all()
        replaced: list[Any] = []
        bigger = a.get_library_workspace("fi", 8 * 1024, on_grow=replaced.append)
        assert replaced == [bigger] and grown == [big]  # the newest on_grow replaces it
        check_books(a, source)


def test_torch_framework_gives_uint8_tensors() -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch") as a:
        view = a.get_library_workspace("fi", 3000)
        assert view.dtype == torch.uint8 and view.device.type == "cpu" and view.numel() >= 3000
        assert view.data_ptr() % 256 == 0


def test_a_workspace_served_during_a_capture_is_retired_when_it_grows() -> None:
    probe = Probe()
    source = RecordingSource()
    with Arena(source=source, framework="numpy", capture_probe=probe) as a:
        a.get_library_workspace("fi", 1024)
        probe.capturing = True
        a.get_library_workspace("fi", 1024)  # handed out inside a capture
        probe.capturing = False
        a.get_library_workspace("fi", 4096)
        assert ("release", 1024) not in source.events
        assert a.stats().slots[0].retired_bytes == 1024
        assert a.release_retired() == 0  # captured: kept
        assert a.release_retired(include_captured=True) == 1024
        check_books(a, source)


def test_any_capture_seen_while_a_workspace_is_current_retires_it() -> None:
    """A library uses its workspace inside a capture without asking the arena again; the
    arena saw the capture through a scratch request, so the old block is kept."""
    probe = Probe()
    source = RecordingSource()
    with Arena(source=source, framework="numpy", capture_probe=probe) as a:
        a.get_simultaneous(((64,), "float32"))
        a.get_library_workspace("fi", 1024)
        probe.capturing = True
        a.get_simultaneous(((64,), "float32"))
        probe.capturing = False
        a.get_library_workspace("fi", 4096)
        assert ("release", 1024) not in source.events
        assert a.stats().slots[0].retired_bytes == 1024


def test_growth_while_locked_or_capturing_is_refused_and_the_old_one_kept() -> None:
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as a:
        view = a.get_library_workspace("fi", 1024)
        probe.capturing = True
        with pytest.raises(GraphCaptureError, match=r"library workspace 'fi'.*MB"):
            a.get_library_workspace("fi", 2 * MB)
        probe.capturing = False
        a.lock()
        with pytest.raises(ArenaLockedError, match=r"library workspace 'fi' of 2\.00 MB") as err:
            a.get_library_workspace("fi", 2 * MB)
        assert err.value.key == "fi" and err.value.required == 2 * MB
        assert "test_kernel_workspaces.py" in err.value.caller
        with pytest.raises(ArenaLockedError, match="a new library workspace 'new'"):
            a.get_library_workspace("new", 16)
        assert a.get_library_workspace("fi", 1024) is view


def test_lock_gives_every_micro_batch_the_workspaces_of_its_lane() -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        with a.ubatch(0):
            a.get_library_workspace("fi", 4096)
        with a.ubatch(1):
            a.get_library_workspace("fi", 1024)
        a.lock()
        with a.ubatch(1):  # grown? no: it had its own; a sibling's size is not forced on it
            assert a.get_library_workspace("fi", 1024).nbytes == 1024
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        a.get_library_workspace("fi", 4096)
        a.lock()
        with a.ubatch(1):  # never ran during warm-up: lock() made it one
            view = a.get_library_workspace("fi", 4096)
            assert view.nbytes == 4096
        assert a.stats().slots[1].workspace_bytes == 4096


@pytest.mark.parametrize("fault", [MemoryError, KeyboardInterrupt])
def test_a_fault_at_any_allocation_keeps_the_old_workspace(fault: type[BaseException]) -> None:
    sizes = [1024, 4096, 3 * MB]
    for fail_at in range(1, len(sizes) + 1):
        source = FaultySource(fail_at={fail_at}, fault=fault)
        grown: list[Any] = []
        with Arena(source=source, framework="numpy") as a:
            view = None
            for number, size in enumerate(sizes, start=1):
                expected = ArenaOutOfMemoryError if fault is MemoryError else fault
                if number == fail_at:
                    with pytest.raises(expected):
                        a.get_library_workspace("fi", size, on_grow=grown.append)
                    if view is None:
                        assert a.stats().slots[0].workspace_keys == 0
                    else:
                        assert a.get_library_workspace("fi", 1) is view
                        assert (view[:16] == 7).all()
                    check_books(a, source)
                view = a.get_library_workspace("fi", size, on_grow=grown.append)
                view[:16] = 7
            assert len(grown) == len(sizes) - 1
            check_books(a, source)


def test_an_interrupt_during_the_copy_releases_the_new_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy") as a:
        view = a.get_library_workspace("fi", 1024)
        view[:] = 3

        def interrupted(destination: Any, origin: Any, nbytes: int) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(workspaces_module, "_copy", interrupted)
        with pytest.raises(KeyboardInterrupt):
            a.get_library_workspace("fi", 4096)
        assert source.events[-2:] == [("allocate", 4096), ("release", 4096)]
        assert a.get_library_workspace("fi", 1024) is view and (view == 3).all()
        check_books(a, source)


def test_a_fault_releasing_the_old_block_leaves_the_new_one_installed() -> None:
    source = FaultySource(fail_release_at={1}, fault=KeyboardInterrupt)
    with Arena(source=source, framework="numpy") as a:
        a.get_library_workspace("fi", 1024)
        with pytest.raises(KeyboardInterrupt):
            a.get_library_workspace("fi", 4096)
        assert a.get_library_workspace("fi", 4096).nbytes == 4096
        check_books(a, source)


def test_two_threads_growing_one_key_grow_it_once() -> None:
    gate = Gate()
    source = RecordingSource()
    out: list[Any] = []
    with Arena(source=source, framework="numpy", alloc_context=gate) as a:
        a.get_library_workspace("fi", 1024)
        gate.armed = True
        first = threading.Thread(target=lambda: out.append(a.get_library_workspace("fi", MB)))
        first.start()
        assert gate.inside.wait(TIMEOUT)
        second = threading.Thread(target=lambda: out.append(a.get_library_workspace("fi", MB)))
        second.start()
        gate.go.set()
        first.join(TIMEOUT)
        second.join(TIMEOUT)
        assert len(out) == 2 and out[0].ctypes.data == out[1].ctypes.data
        assert source.allocations() == [1024, MB]
        check_books(a, source)


def test_bad_arguments_say_what_is_wrong() -> None:
    with Arena("cpu", framework="numpy") as a:
        with pytest.raises(SpecError, match="not hashable"):
            a.get_library_workspace(["fi"], 16)
        for nbytes in (0, -1, True, 1.5, "16"):
            with pytest.raises(SpecError, match="nbytes must be an int"):
                a.get_library_workspace("fi", nbytes)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="on_grow must be callable"):
            a.get_library_workspace("fi", 16, on_grow=42)  # type: ignore[arg-type]
    with pytest.raises(ArenaClosedError):
        a.get_library_workspace("fi", 16)


def test_views_outlive_close() -> None:
    a = Arena("cpu", framework="numpy")
    view = a.get_library_workspace("fi", 4096)
    a.close()
    view[:] = 9
    assert (view == 9).all() and a.stats().live_blocks == 0


def test_stats_snapshot_and_events_show_workspaces() -> None:
    events: list[ArenaEvent] = []
    with Arena("cpu", framework="numpy", lanes=2) as a:
        a.add_listener(events.append)
        with a.lane(1):
            a.get_library_workspace("fi", 5000)
        assert a.stats().slots[1].workspace_bytes == 5120
        assert a.stats().slots[1].workspace_keys == 1
        assert "workspace MB" in a.stats().table()
        (event,) = events
        seen = (event.kind, event.slot, event.key, event.new_bytes)
        assert seen == ("workspace", (0, 1), "fi", 5120)
        segments = a.memory_snapshot()["segments"]
        names = [s["frames"][0]["name"] for s in segments]
        assert names == ["slot (ubatch 0, lane 1) library"]
        assert segments[0]["total_size"] == 5120


# ====================================================================== Triton's allocator
torch_or_skip = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="needs torch (the test extra has it)"
)


@torch_or_skip
def test_triton_allocator_has_tritons_signature_and_alignment() -> None:
    import torch

    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        for alignment in (1, 16, 128, 256, 1024, 8192):
            tensor = allocate(1000, alignment, 7)
            assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.uint8
            assert tensor.device.type == "cpu" and tensor.numel() == 1000
            assert tensor.data_ptr() % alignment == 0


@torch_or_skip
def test_the_same_size_returns_the_same_pointer_and_streams_never_share() -> None:
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        first = allocate(4096, 128, 7)
        assert allocate(4096, 128, 7) is first  # replay-safe: the very same tensor
        assert allocate(100, 128, 7).data_ptr() == first.data_ptr()  # covered: same block
        other = allocate(4096, 128, 9)
        none = allocate(4096, 128, None)
        (scratch,) = a.get_simultaneous(((4096,), "uint8"))
        persistent = a.get_persistent("p", (4096,), "uint8")
        library = a.get_library_workspace("fi", 4096)
        assert disjoint(first, other, none, scratch, persistent, library)
        assert a.stats().slots[0].triton_blocks == 3


@torch_or_skip
def test_triton_growth_follows_the_arenas_rules() -> None:
    probe = Probe()
    source = RecordingSource()
    with Arena(source=source, framework="numpy", capture_probe=probe, max_bytes=4 * MB) as a:
        allocate = a.triton_allocator()
        small = allocate(1024, 16, 7)
        big = allocate(MB, 16, 7)  # grows: allocated first, the old block released after
        assert source.events[-2:] == [("allocate", MB), ("release", 1024)]
        assert big.data_ptr() != small.data_ptr()
        probe.capturing = True
        assert allocate(MB, 16, 7) is big  # a hit during a capture: marked
        with pytest.raises(GraphCaptureError, match=r"Triton block for stream 7 of 2\.00 MB"):
            allocate(2 * MB, 16, 7)
        probe.capturing = False
        with pytest.raises(ArenaOutOfMemoryError, match=r"max_bytes=4194304.*Triton"):
            allocate(4 * MB, 16, 7)  # old + new would pass the cap
        allocate(2 * MB, 16, 7)
        assert ("release", MB) not in source.events  # served a capture: retired
        a.lock()
        with pytest.raises(ArenaLockedError, match=r"Triton scratch block for stream 7 .*3\.00 MB"):
            allocate(3 * MB, 16, 7)
        with pytest.raises(ArenaLockedError, match="a new Triton scratch block for stream 5"):
            allocate(16, 16, 5)
        check_books(a, source)


@torch_or_skip
def test_a_failed_triton_growth_keeps_the_old_block() -> None:
    for fault in (MemoryError, KeyboardInterrupt):
        source = FaultySource(fail_at={2}, fault=fault)
        with Arena(source=source, framework="numpy") as a:
            allocate = a.triton_allocator()
            first = allocate(1024, 16, 7)
            with pytest.raises(ArenaOutOfMemoryError if fault is MemoryError else fault):
                allocate(MB, 16, 7)
            assert allocate(1024, 16, 7) is first
            check_books(a, source)


@torch_or_skip
def test_triton_lane_selects_the_lane() -> None:
    with Arena("cpu", framework="numpy", lanes=2, ubatches=2) as a:
        allocate = a.triton_allocator(lane=1)
        with a.ubatch(1):
            allocate(4096, 16, 7)
        assert [s.triton_bytes for s in a.stats().slots] == [0, 0, 0, 4096]
        a.triton_allocator()(4096, 16, 7)
        assert a.stats().slots[0].triton_bytes == 4096
        with pytest.raises(SlotError, match="lane 2 is out of range"):
            a.triton_allocator(lane=2)


@torch_or_skip
def test_triton_allocator_refuses_bad_arguments() -> None:
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        for alignment in (0, 3, 96, True, 2.0, 1 << 31):
            with pytest.raises(SpecError, match="alignment must be an int power of two"):
                allocate(16, alignment, 7)
        for size in (-1, True, 1.0):
            with pytest.raises(SpecError, match="size must be an int"):
                allocate(size, 16, 7)
        with pytest.raises(SpecError, match="stream must be"):
            allocate(16, 16, "7")
        assert allocate(0, 16, 7).numel() == 0


def test_triton_allocator_without_torch_names_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    with (
        Arena("cpu", framework="numpy") as a,
        pytest.raises(FrameworkUnavailableError, match="pip install torch"),
    ):
        a.triton_allocator()


def _torch_allocator(device: str) -> Any:
    """What vLLM installs: a fresh torch block per launch (put back after a test)."""
    import torch

    return lambda size, alignment, stream: torch.empty(size, device=device, dtype=torch.int8)


def test_triton_installs_it() -> None:
    triton = pytest.importorskip("triton")
    with Arena(framework="torch") as a:
        allocator = a.triton_allocator()
        triton.set_allocator(allocator)
        try:
            assert allocator(256, 128, None).data_ptr() % 128 == 0
        finally:
            triton.set_allocator(_torch_allocator(str(a.device)))


@pytest.mark.gpu
def test_a_triton_kernel_gets_its_scratch_from_the_arena() -> None:
    """A kernel that makes TMA descriptors on the device asks the allocator for them."""
    copy = tma_copy_kernel()
    import torch
    import triton

    calls: list[tuple[int, int, Any]] = []
    with Arena("cuda:0", framework="torch") as a:
        allocator = a.triton_allocator()

        def counted(size: int, alignment: int, stream: Any) -> Any:
            calls.append((size, alignment, stream))
            return allocator(size, alignment, stream)

        triton.set_allocator(counted)
        try:
            x = torch.randn(64, 64, device="cuda:0")
            y = torch.empty_like(x)
            copy[(2, 2)](x, y, 64, 64, block_m=32, block_n=32)
            copy[(2, 2)](x, y, 64, 64, block_m=32, block_n=32)
            torch.cuda.synchronize()
            assert torch.equal(x, y)
            assert len(calls) == 2 and calls[0] == calls[1]
            assert a.stats().slots[0].triton_blocks == 1  # the second launch: no growth
        finally:
            triton.set_allocator(_torch_allocator("cuda:0"))


# ====================================================================== profiles
@torch_or_skip
def test_profiles_record_workspaces_and_presize_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    with Arena("cpu", framework="numpy", profile=path) as a:
        a.get_library_workspace("fi", 5000)
        a.get_library_workspace(("tuple", "key"), 100)  # not JSON-round-trippable: skipped
        a.triton_allocator()(3000, 16, 7)
        a.lock()
    saved = json.loads(path.read_text())
    assert sorted(map(json.dumps, saved["workspaces"])) == sorted(
        map(
            json.dumps,
            [
                {"ubatch": 0, "lane": 0, "kind": "library", "key": "fi", "bytes": 5120},
                {"ubatch": 0, "lane": 0, "kind": "triton", "key": None, "bytes": 3072},
            ],
        )
    )
    source = RecordingSource()
    with Arena(source=source, framework="numpy", profile=path) as again:
        assert source.allocations() == [5120]  # presized at construction
        again.get_library_workspace("fi", 5000)
        again.triton_allocator()(3000, 16, 99)  # another stream, sized from the profile
        again.triton_allocator()(2000, 16, 99)
        assert source.allocations() == [5120, 3072]


def test_a_profile_without_workspaces_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    with Arena("cpu", framework="numpy", profile=path) as a:
        a.get_simultaneous(((1000,), "float32"))
        a.lock()
    old = json.loads(path.read_text())
    del old["workspaces"]
    path.write_text(json.dumps(old))
    with Arena("cpu", framework="numpy", profile=path) as again:
        assert again.stats().slots[0].capacity == 4096
        again.lock()
    assert json.loads(path.read_text())["workspaces"] == []


def test_a_bad_workspace_entry_is_dropped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    with Arena("cpu", framework="numpy", profile=path) as a:
        a.get_library_workspace("fi", 5000)
        a.lock()
    data = json.loads(path.read_text())
    data["workspaces"].append({"ubatch": 0, "lane": 0, "kind": "triton", "key": 3, "bytes": 1})
    path.write_text(json.dumps(data))
    with pytest.warns(arena.ArenaWarning, match="'key' must be null for Triton"):
        again = Arena("cpu", framework="numpy", profile=path)
    assert again.stats().slots[0].workspace_bytes == 5120
    again.close()


def test_lock_gives_a_micro_batch_that_ran_a_smaller_library_workspace_the_lanes_size() -> None:
    """lock() gives a micro-batch that never asked for a library workspace the lane's
    largest size ("lock() gives it the workspace too"), and brings every scratch buffer of
    a lane to the largest; but a micro-batch that asked for a smaller size during warm-up
    keeps it (its library holds that buffer; lock() calls no on_grow), so after lock() it
    cannot serve what its sibling serves: the ArenaLockedError says why and the fix, and
    the buffer its library holds stays the one it is served."""
    with Arena("cpu", framework="numpy", ubatches=3) as ws:
        ws.get_library_workspace("flashinfer", 256 << 10)
        with ws.ubatch(1):
            held = ws.get_library_workspace("flashinfer", 64 << 10)
        ws.lock()
        with ws.ubatch(2):  # never ran: gets the lane's size
            assert ws.get_library_workspace("flashinfer", 256 << 10).nbytes == 256 << 10
        with ws.ubatch(1):
            assert ws.get_library_workspace("flashinfer", 64 << 10) is held
            with pytest.raises(ArenaLockedError) as info:
                ws.get_library_workspace("flashinfer", 256 << 10)
        assert "on every micro-batch that asks at all" in str(info.value)
        assert "one that asked for less keeps its size" in str(info.value)
