"""Gaps that planted bugs and surviving mutants found in the suite (issue 26, item 12):
each test here fails on the bug or mutant it names and passes on the real code."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from arena import (
    Allocation,
    Arena,
    ArenaError,
    ArenaLockedError,
    ArenaOutOfMemoryError,
    ArenaWarning,
    SpecError,
)
from arena.base.dtypes import DType
from arena.base.layout import clear_layout_memo, compute_layout
from arena.observe.profilefile import MAX_LAYOUTS, check_profile, read_profile, write_merged
from tests.gates import TIMEOUT, Probe
from tests.profiles import profile_data
from tests.sources import FailingSource, RecordingSource, check_books

F32 = "float32"


# ------------------------------------------------------------------ persistent buffers
def test_a_persistent_buffer_under_key_none_is_not_every_new_keys_buffer() -> None:
    # persistent.py buffer #3: the first, unlocked look-up read the entry of key None.
    with Arena("cpu", framework="numpy") as a:
        none = a.get_persistent(None, (8,), F32)
        none[:] = 3.0
        other = a.get_persistent("other", (8,), F32, zero_init=True)
        assert a.numpy.data_ptr(other) != a.numpy.data_ptr(none)
        assert np.all(other == 0.0) and np.all(none == 3.0)
        assert a.stats().slots[0].persistent_keys == 2


def test_a_locked_buffer_request_does_not_name_a_sibling_that_has_a_resource_of_that_key() -> None:
    # persistent.py new_key_refused #6/#9/#10: a buffer's owners looked up among the
    # siblings' resources, so a resource of the same key was named as the buffer's creator.
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        a.get_persistent_resource("k", dict)
        a.lock()
        with a.ubatch(1), pytest.raises(ArenaLockedError) as info:
            a.get_persistent("k", (8,), F32)
    message = str(info.value)
    assert "new persistent buffer 'k'" in message
    assert "created it during warm-up" not in message
    assert "create persistent buffers during warm-up, before lock()" in message


class _RefusingFill(np.ndarray):
    """A block whose zeroing fails, as a device fault would."""

    def fill(self, value: Any) -> None:
        raise MemoryError("injected fault while zeroing")


@dataclass
class _ZeroingFaultSource(RecordingSource):
    """Hands out blocks whose ``fill`` raises from allocation number ``fail_at`` on."""

    fail_at: int = 0
    calls: int = 0

    def allocate(self, nbytes: int) -> Allocation:
        allocation = super().allocate(nbytes)
        self.calls += 1
        if self.calls == self.fail_at:
            owner = allocation.owner.view(_RefusingFill)
            return Allocation(allocation.ptr, allocation.nbytes, owner, allocation.device)
        return allocation


def test_a_failed_zeroing_gives_its_block_back_and_keeps_the_other_keys() -> None:
    # persistent.py create #20: the clean-up dropped the entry of key None instead of the
    # failed key's, losing a buffer whose contents the caller relies on.
    source = _ZeroingFaultSource(fail_at=2)
    a = Arena(source=source, framework="numpy")
    none = a.get_persistent(None, (8,), F32)
    none[:] = 7.0
    with pytest.raises(MemoryError, match="injected fault while zeroing"):
        a.get_persistent("x", (8,), F32, zero_init=True)
    assert a.stats().slots[0].persistent_keys == 1
    again = a.get_persistent(None, (8,), F32)
    assert a.numpy.data_ptr(again) == a.numpy.data_ptr(none) and np.all(again == 7.0)
    assert len(source.live) == 1  # the failed key's block went back
    x = a.get_persistent("x", (8,), F32, zero_init=True)  # the key can be created again
    assert np.all(x == 0.0)
    a.close()
    assert source.live == {}


# ------------------------------------------------------------------ the layout memo
class _SweepingDType(DType):
    """float32, whose hash (taken when the memo sweep drops its entry) lets another thread
    empty the memo first: the sweep then finds the entries after it gone."""

    armed = False

    def __hash__(self) -> int:
        if _SweepingDType.armed:
            _SweepingDType.armed = False
            started = threading.Event()

            def clear() -> None:
                started.set()
                clear_layout_memo()

            other = threading.Thread(target=clear)
            other.start()
            assert started.wait(TIMEOUT)
            # The memo's lock (held by this sweep) makes the other thread wait for it; it
            # would clear the memo at once without the lock. A second, not TIMEOUT: the
            # join runs out whenever the lock is there (it cost 10 s a suite run).
            other.join(1.0)
        return hash(("float32", 4))


def test_a_memo_sweep_survives_entries_another_thread_removed() -> None:
    # layout.py _compute_and_memoise #65: the sweep popped without a default and raised
    # KeyError for an entry a concurrent sweep had removed.
    clear_layout_memo()
    sweeping = _SweepingDType("float32", 4)
    try:
        first = compute_layout((((1,), sweeping),))  # the oldest entry
        # Its key is hashed again only when the sweep drops it (the memo keeps hashes).
        _SweepingDType.armed = True
        for n in range(2, 20000):
            layout = compute_layout((((n,), F32),))
            assert layout.total == 4 * n + (-4 * n) % 256
            if not _SweepingDType.armed:
                break
        assert not _SweepingDType.armed  # the sweep reached the entry
        assert first.total == 256
    finally:
        _SweepingDType.armed = False
        clear_layout_memo()


# ------------------------------------------------------------------ hits after warm-up
def _hit_front(a: Arena, framework: str, cached: bool) -> Any:
    if framework == "torch":
        pytest.importorskip("torch")
    return a.front(framework, cached=cached)


def _specs(dims: tuple[Any, ...], views: int) -> tuple[Any, ...]:
    return tuple(((dim, 4), F32) for dim in dims) + tuple(((3,), F32) for _ in range(views - 1))


BAD_DIMENSIONS = [(True, "bool"), (2.0, "use 2"), (np.True_, "bool"), (np.float64(2.0), "float64")]


@pytest.mark.parametrize("views", [2, 17])  # generated code up to 16 views, loops above
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize(("bad", "word"), BAD_DIMENSIONS, ids=["True", "2.0", "np.True_", "np2.0"])
def test_after_many_requests_of_a_structure_its_plan_refuses_bool_and_float_dimensions(
    framework: str, cached: bool, views: int, bad: Any, word: str
) -> None:
    # Planted bug: the plan's generated code (made after GENERATE_AFTER = 64 builds) or
    # its closure (structures of more than 16 views) took True as 1 and 2.0 as 2.
    with Arena("cpu", framework="numpy") as a:
        front = _hit_front(a, framework, cached)
        a.reserve_bytes(1 << 20)
        for n in range(3, 3 + 100):  # new sizes every time: the plan builds each
            front.get_simultaneous(*_specs((n,), views))
        with pytest.raises(SpecError, match=word):
            front.get_simultaneous(*_specs((bad,), views))
        with pytest.raises(SpecError, match=word):
            front.try_get_simultaneous(*_specs((bad,), views))
        (view, *_) = front.get_simultaneous(*_specs((2,), views))
        assert tuple(view.shape) == (2, 4)


@pytest.mark.parametrize("views", [2, 17])
@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize(("bad", "word"), BAD_DIMENSIONS, ids=["True", "2.0", "np.True_", "np2.0"])
def test_after_many_hits_of_one_request_an_equal_bool_or_float_dimension_is_refused(
    framework: str, cached: bool, views: int, bad: Any, word: str
) -> None:
    # Planted bug: the server of a remembered request (the hit) stopped checking that
    # each dimension is a plain int once it had served 64 times, or for more than 16 views.
    with Arena("cpu", framework="numpy") as a:
        front = _hit_front(a, framework, cached)
        plain = 1 if isinstance(bad, (bool, np.bool_)) else 2
        for _ in range(100):
            front.get_simultaneous(*_specs((plain,), views))
        asked = _specs((bad,), views)
        assert asked == _specs((plain,), views)  # the exact request's look-up finds it
        with pytest.raises(SpecError, match=word):
            front.get_simultaneous(*asked)
        with pytest.raises(SpecError, match=word):
            front.try_get_simultaneous(*asked)
        (view, *_) = front.get_simultaneous(*_specs((plain,), views))
        assert tuple(view.shape) == (plain, 4)


# ------------------------------------------------------------------ profiles
def test_a_profiles_planned_need_covers_the_largest_plain_request(tmp_path: Path) -> None:
    # Planted bug: the planned need was the furthest a planned step reaches, without the
    # largest request made outside every step; the restart was presized too small for it.
    path = tmp_path / "profile.json"
    plain = 64 * 1024
    with Arena("cpu", framework="numpy", profile=path) as ws:
        for _ in range(3):  # record, plan, replay: the step needs 4 KiB
            with ws.step("small") as st:
                st.get_simultaneous(((1024,), F32))
            ws.get_simultaneous(((plain // 4,), F32))  # outside every step
        ws.lock()
        assert ws.stats().slots[0].capacity >= plain
    (slot,) = read_profile(path)["slots"]
    assert slot["planned"] == plain
    with Arena("cpu", framework="numpy", profile=path) as ws:
        assert ws.stats().slots[0].capacity == plain  # presized to hold the plain request
        ws.lock()
        with ws.step("small") as st:
            st.get_simultaneous(((1024,), F32))
        (big,) = ws.get_simultaneous(((plain // 4,), F32))  # locked: fits, no growth
        assert big.nbytes == plain


# ------------------------------------------------------------------ Triton's allocator
@dataclass
class _OddlyAlignedSource(RecordingSource):
    """Host blocks aligned to 256 bytes (the sources' contract) and never to 512."""

    blocks: dict[int, Allocation] = field(default_factory=dict)

    def allocate(self, nbytes: int) -> Allocation:
        inner = self._inner.allocate(nbytes + 4096)  # page-aligned
        owner = inner.owner[256 : 256 + nbytes]
        allocation = Allocation(inner.ptr + 256, nbytes, owner, inner.device)
        self.events.append(("allocate", nbytes))
        self.live[allocation.ptr] = nbytes
        return allocation


@pytest.mark.parametrize("alignment", [512, 1024, 4096, 1 << 16])
def test_triton_tensors_aligned_above_the_blocks_base_alignment(alignment: int) -> None:
    # Planted bug: a block sized without room to align past its base alignment (256), or
    # the tensor placed at the block's start.
    torch = pytest.importorskip("torch")
    source = _OddlyAlignedSource()
    with Arena(source=source, framework="numpy") as a:
        allocate = a.triton_allocator()
        for size in (1000, 3000, 3000, 1000, 20000):
            tensor = allocate(size, alignment, 7)
            assert isinstance(tensor, torch.Tensor) and tensor.numel() == size
            start = tensor.data_ptr()
            assert start % alignment == 0
            assert any(  # inside one live block of the source
                ptr <= start and start + size <= ptr + nbytes for ptr, nbytes in source.live.items()
            )
            assert allocate(size, alignment, 7) is tensor  # the same pointer again
        assert a.stats().slots[0].triton_blocks == 1


def test_a_triton_capture_protects_the_library_workspace_current_then() -> None:
    # Planted bug: a capture seen by Triton's allocator marked its block only, and a
    # library workspace the graph may read was released when it grew.
    pytest.importorskip("torch")
    probe = Probe()
    source = RecordingSource()
    with Arena(source=source, framework="numpy", capture_probe=probe) as a:
        allocate = a.triton_allocator()
        allocate(512, 16, 7)
        a.get_library_workspace("fi", 1024)
        probe.capturing = True
        allocate(512, 16, 7)  # a capture, seen by the allocator only
        probe.capturing = False
        a.get_library_workspace("fi", 4096)
        assert ("release", 1024) not in source.events
        assert a.stats().slots[0].retired_bytes == 1024
        assert a.release_retired() == 0  # captured: kept
        check_books(a, source)


def test_a_smaller_triton_block_never_replaces_the_largest_in_the_profile(tmp_path: Path) -> None:
    # Planted bug: the profile kept the last Triton block's size, not the largest.
    pytest.importorskip("torch")
    path = tmp_path / "profile.json"
    with Arena("cpu", framework="numpy", profile=path) as a:
        allocate = a.triton_allocator()
        allocate(8000, 16, 7)
        allocate(1000, 16, 9)  # another stream, a smaller block, recorded last
        a.lock()
    assert read_profile(path)["workspaces"] == [
        {"ubatch": 0, "lane": 0, "kind": "triton", "key": None, "bytes": 8192}
    ]
    with Arena("cpu", framework="numpy", profile=path) as a:
        a.triton_allocator()(1000, 16, 11)  # a new stream starts at the largest size
        a.lock()
        assert a.stats().slots[0].triton_bytes == 8192
    # merged with the first run's: still the largest
    assert read_profile(path)["workspaces"][0]["bytes"] == 8192


# ------------------------------------------------------------------ presizing lanes
@pytest.mark.parametrize("ubatches", [2, 3])
def test_presizing_gives_every_micro_batch_of_a_lane_the_lanes_largest(
    tmp_path: Path, ubatches: int
) -> None:
    # Planted bug: a lane presized from one of its micro-batches' records (the first, or
    # the last) rather than the largest of them.
    path = tmp_path / "profile.json"
    # (ubatch, lane) -> KiB, in call order: each lane's largest comes last (its siblings
    # never call again to take its size), on the last micro-batch of lane 0 and on a
    # middle one of lane 1.
    need = {
        (0, 0): 4,
        (1, 0): 16 if ubatches == 2 else 8,
        (2, 0): 16,
        (0, 1): 8,
        (2, 1): 4,
        (1, 1): 32,
    }
    with Arena("cpu", framework="numpy", ubatches=ubatches, lanes=2, profile=path) as a:
        for (ub, lane), kib in need.items():
            if ub < ubatches:
                with a.ubatch(ub), a.lane(lane):
                    a.get_simultaneous(((kib * 256,), F32))
    largest = [
        max(k for (ub, ln), k in need.items() if ln == lane and ub < ubatches) for lane in (0, 1)
    ]
    source = RecordingSource()
    with Arena(source=source, framework="numpy", ubatches=ubatches, lanes=2, profile=path) as a:
        capacities = {(s.ubatch, s.lane): s.capacity for s in a.stats().slots}
        assert capacities == {
            (ub, lane): largest[lane] * 1024 for ub in range(ubatches) for lane in (0, 1)
        }
        assert sorted(source.allocations()) == sorted(
            largest[lane] * 1024 for ub in range(ubatches) for lane in (0, 1)
        )  # one allocation per slot
        a.lock()
        for ub in range(ubatches):  # locked, every micro-batch runs its lane's largest
            for lane in (0, 1):
                with a.ubatch(ub), a.lane(lane):
                    a.get_simultaneous(((largest[lane] * 256,), F32))
        assert len(source.allocations()) == 2 * ubatches


# ------------------------------------------------------------------ the vLLM drop-in
def test_the_drop_ins_reserve_sizes_only_the_current_lane() -> None:
    # Planted bug: reserve() inside use_workspace_lane(1) sized every lane's slots.
    torch = pytest.importorskip("torch")
    from arena.compat.vllm import WorkspaceManager, use_workspace_lane

    m = WorkspaceManager(torch.device("cpu"), num_ubatches=2, num_lanes=2)
    with use_workspace_lane(1):
        assert m.reserve(((1000,), torch.float32)) == 4096
    stats = m.arena.stats()
    assert {(s.ubatch, s.lane): s.capacity for s in stats.slots} == {
        (0, 0): 0,
        (1, 0): 0,
        (0, 1): 4096,
        (1, 1): 4096,
    }
    assert stats.allocations == 2  # lane 0 allocated nothing
    m.reserve(((100,), torch.float32))  # lane 0, the default
    assert [s.capacity for s in m.arena.stats().slots] == [512, 4096, 512, 4096]
    m.arena.close()


# ------------------------------------------------------------------ layout checks
class bool_:  # NumPy 1's name for its bool scalar type, which this stands for
    """A stand-in for NumPy 1's ``np.bool_`` (NumPy 2 names its type ``bool``)."""

    def __repr__(self) -> str:
        return "np.True_"


def test_numpy_1s_bool_scalar_is_refused_as_a_bool() -> None:
    # layout.py _check_dim: the 'bool_' name (NumPy 1) mutated away, the value got the
    # message for a non-int ('must be an int') instead of the one naming the bool.
    message = r"dimension 0 is a bool \(np.True_\); pass an int"
    with Arena("cpu", framework="numpy") as a, pytest.raises(SpecError, match=message):
        a.get_simultaneous(((bool_(), 4), F32))
    with pytest.raises(SpecError, match="is a bool"):
        compute_layout((((4, bool_()), F32),))


# ------------------------------------------------------------------ profile files
def _run_profile() -> dict[str, Any]:
    return check_profile(profile_data({"peak": 4096, "capacity": 4096}))


def test_a_profile_is_written_beside_itself_whatever_the_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # profilefile.py write_merged: the temporary file made in the system's temporary
    # folder (another file system: the rename is no longer atomic, or fails).
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no such folder"))
    path = tmp_path / "profile.json"
    assert write_merged(path, _run_profile()) is None
    text = path.read_text(encoding="utf-8")
    assert read_profile(path)["slots"][0]["peak"] == 4096
    # One item per line, indented by one space per level: diffable, and small.
    lines = text.splitlines()
    assert lines[0] == "{" and lines[1].startswith(' "') and lines[-1] == "}"
    assert any(line.startswith('   "ubatch": 0') for line in lines)
    assert text.endswith("}\n")
    assert [p.name for p in tmp_path.iterdir()] == ["profile.json"]


def test_a_failed_profile_write_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # profilefile.py write_merged: the temporary file's name (hidden, '.tmp') and its
    # removal when the write fails (the write's own error propagates).
    path = tmp_path / "profile.json"
    seen: list[list[str]] = []

    def full_disk(descriptor: int) -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_merged(path, _run_profile())
    ((temporary, lock, *others),) = seen  # '.' sorts first
    assert lock == "profile.json.lock" and others == []
    assert temporary.startswith(".profile.json.") and temporary.endswith(".tmp")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert not path.exists()


# ------------------------------------------------------------------ debug and poison
@pytest.mark.parametrize("option", ["debug", "poison"])
@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_locked_request_that_must_grow_raises_in_debug_and_poison_mode(
    option: str, framework: str
) -> None:
    # front.py Front._debug_request #5: the request made there with strict=None, so a
    # get_simultaneous that must grow while locked returned None instead of raising.
    with Arena("cpu", framework="numpy", **{option: True}) as a:
        front = _hit_front(a, framework, cached=False)
        front.get_simultaneous(((16,), F32))
        a.lock()
        with pytest.raises(ArenaLockedError):
            front.get_simultaneous(((1 << 20,), F32))
        assert front.try_get_simultaneous(((1 << 20,), F32)) is None
        (view,) = front.get_simultaneous(((16,), F32))
        assert tuple(view.shape) == (16,)


# ------------------------------------------------------------------ persistent: lock races
def test_a_resource_whose_factory_outlasts_lock_is_refused_naming_it() -> None:
    # persistent.py resource #15-#21: the re-check after the factory ran (lock() came
    # meanwhile): refused, with the key and "resource" in the message.
    with Arena("cpu", framework="numpy") as a:

        def slow_factory() -> dict[str, int]:
            a.lock()  # lock() returns while the factory still runs
            return {}

        with pytest.raises(ArenaLockedError) as info:
            a.get_persistent_resource("late", slow_factory)
        message = str(info.value)
        assert "asks for a new persistent resource 'late'" in message
        assert "create persistent resources during warm-up, before lock()" in message
        assert a.stats().slots[0].persistent_keys == 0


def test_a_resource_stored_first_by_another_caller_wins_even_after_lock() -> None:
    # persistent.py resource #15: the key stored meanwhile (then lock()) is returned, not
    # refused as new.
    with Arena("cpu", framework="numpy") as a:
        first: dict[str, int] = {"first": 1}

        def racing_factory() -> dict[str, int]:
            assert a.get_persistent_resource("k", lambda: first) is first
            a.lock()
            return {"second": 2}

        assert a.get_persistent_resource("k", racing_factory) is first
        assert a.get_persistent_resource("k", dict) is first


@dataclass
class _DirtySource(RecordingSource):
    """Hands out blocks full of 0xAB bytes, as reused device memory is."""

    def allocate(self, nbytes: int) -> Allocation:
        allocation = super().allocate(nbytes)
        allocation.owner.fill(0xAB)
        return allocation


@pytest.mark.parametrize("zero_init", [True, False])
def test_a_buffer_shared_at_lock_is_zeroed_like_the_one_it_copies(zero_init: bool) -> None:
    # persistent.py create #15/#18: the buffer's zero_init not kept, so lock() gave the
    # micro-batch that never ran a buffer of stale bytes.
    source = _DirtySource()
    with Arena(source=source, framework="numpy", ubatches=2) as a:
        kv = a.get_persistent("kv", (64,), "uint8", zero_init=zero_init)
        assert np.all(kv == (0 if zero_init else 0xAB))
        a.lock()
        with a.ubatch(1):
            mine = a.get_persistent("kv", (64,), "uint8", zero_init=zero_init)
        assert np.all(mine == (0 if zero_init else 0xAB))


# ------------------------------------------------------------------ slots and the table
def test_every_capture_seen_after_a_workspace_was_made_protects_it() -> None:
    # slot.py mark_captured #5/#6: the capture counter set to 1 (a second capture looks
    # like the first) or counted down (a scratch capture undoes a Triton one): a library
    # workspace the graph may read was released when it grew.
    pytest.importorskip("torch")
    for order in ("scratch twice", "triton then scratch"):
        probe = Probe()
        source = RecordingSource()
        with Arena(source=source, framework="numpy", capture_probe=probe) as a:
            allocate = a.triton_allocator()
            allocate(512, 16, 7)
            a.get_simultaneous(((64,), F32))
            probe.capturing = True
            if order == "scratch twice":
                a.get_simultaneous(((64,), F32))  # a first capture, before the workspace
            probe.capturing = False
            a.get_library_workspace("fi", 1024)
            probe.capturing = True
            if order == "triton then scratch":
                allocate(512, 16, 7)
            a.get_simultaneous(((64,), F32))  # a capture while the workspace is current
            probe.capturing = False
            a.get_library_workspace("fi", 4096)
            assert ("release", 1024) not in source.events, order
            assert a.stats().slots[0].retired_bytes == 1024, order


def test_a_profiles_library_workspace_presizes_its_own_slot(tmp_path: Path) -> None:
    # table.py presize_workspace #8: the slot index computed as ubatch * lanes - lane.
    path = tmp_path / "profile.json"
    with Arena("cpu", framework="numpy", ubatches=2, lanes=2, profile=path) as a, a.lane(1):
        a.get_library_workspace("fi", 5000)  # slot (0, 1) only: no lock() to share it
    with Arena("cpu", framework="numpy", ubatches=2, lanes=2, profile=path) as a:
        assert {(s.ubatch, s.lane): s.workspace_bytes for s in a.stats().slots} == {
            (0, 0): 0,
            (0, 1): 5120,
            (1, 0): 0,
            (1, 1): 0,
        }


def test_workspace_events_and_log_lines_say_created_then_grew(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # table.py announce_workspace: the log line's words and level, and the event's old size.
    caplog.set_level(logging.INFO, logger="arena")
    events: list[Any] = []
    with Arena("cpu", framework="numpy", debug=True) as a:
        a.add_listener(events.append)
        a.get_library_workspace("fi", 1024)
        a.get_library_workspace("fi", 4096)
    lines = [r.getMessage() for r in caplog.records if "library workspace 'fi'" in r.getMessage()]
    assert [line.split(" of slot ")[0] for line in lines] == [
        "[arena] created library workspace 'fi'",
        "[arena] grew library workspace 'fi'",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records)
    assert [(e.kind, e.slot, e.old_bytes, e.new_bytes, e.key) for e in events[:2]] == [
        ("workspace", (0, 0), 0, 1024, "fi"),
        ("workspace", (0, 0), 1024, 4096, "fi"),
    ]


def test_every_slots_refused_stored_plan_is_counted_and_the_first_named(tmp_path: Path) -> None:
    # table.py restore_step_plans #11: the refused plans of each slot replaced those of
    # the slots before it, so only the last slot's were reported.
    path = tmp_path / "profile.json"
    with Arena("cpu", framework="numpy", ubatches=2, profile=path) as ws:
        for _ in range(3):
            with ws.step("forward") as st:
                (x,) = st.get_simultaneous(((1024,), F32))
                st.get_simultaneous(((2048,), F32))
                st.release(x)
                st.get_simultaneous(((2048,), F32))
        ws.lock()
    data = read_profile(path)
    assert all(len(slot["steps"]) == 1 for slot in data["slots"])  # shared at lock()
    for slot in data["slots"]:
        slot["planned"] = slot["peak"] = slot["capacity"] = slot["load"] = 4096
    path.write_text(json.dumps(data))
    with pytest.warns(
        ArenaWarning,
        match=r"2 step plan\(s\) reach past their slot \(step 'forward' of slot \(0, 0\) ",
    ):
        ws = Arena("cpu", framework="numpy", ubatches=2, profile=path)
    ws.close()


# ------------------------------------------------------------------ profiles: call sites
def _one_site(ws: Arena, shape: tuple[int, ...]) -> None:
    ws.get_simultaneous((shape, F32))  # the one call site of the test below


def test_a_site_keeps_its_first_layouts_when_a_new_one_ties_the_smallest(tmp_path: Path) -> None:
    # profile.py Recorder.note #1/#2/#5/#7/#8: with MAX_LAYOUTS layouts of one total kept,
    # a new layout of that total is dropped at once; without the early return (or with
    # it at < instead of <=) the new one replaced the oldest.
    shapes = [(64,), (2, 32), (4, 16), (8, 8), (16, 4), (32, 2), (1, 64), (64, 1), (2, 2, 16)]
    assert len(shapes) == MAX_LAYOUTS + 1  # each 256 bytes of float32
    path = tmp_path / "profile.json"
    with Arena("cpu", framework="numpy", profile=path) as ws:
        for shape in shapes:
            _one_site(ws, shape)
        ws.lock()
    (site,) = [s for s in read_profile(path)["sites"] if "_one_site" in s["site"]]
    kept = sorted(tuple(view[0]) for layout in site["layouts"] for view in layout["views"])
    assert kept == sorted(shapes[:MAX_LAYOUTS])


# ------------------------------------------------------------------ JAX views of scopes
def test_a_jax_scope_view_that_would_be_copied_is_refused_naming_the_alignment() -> None:
    # layout.py shifted #6/#16: a nested scope's layout (moved up the buffer) lost its
    # views' byte counts (JAX's zero-copy check then let a copy through) or its alignment
    # (the message said None).
    pytest.importorskip("jax")
    with Arena("cpu", framework="numpy", alignment=16) as a:
        front = a.front("jax")
        with front.scope() as outer:
            outer.get_simultaneous(((4,), F32))
            with front.scope() as inner, pytest.raises(ArenaError) as info:
                inner.get_simultaneous(((4,), F32))  # 16 bytes up: not 64-byte aligned
    assert "this view sits at offset 16 (arena alignment 16)" in str(info.value)


# ------------------------------------------------------------------ the ledger's figures
def test_the_ledgers_peaks_and_oom_count_start_at_zero_and_follow_the_blocks() -> None:
    # ledger.py __init__ #11/#13, reset_peaks #2, allocate #25/#55: peaks that started at
    # 1, a block peak lost, and out-of-memory errors counted as one however many.
    source = FailingSource(limit=1 << 16)
    with Arena(source=source, framework="numpy") as a:
        stats = a.memory_stats()
        assert stats["reserved_bytes.all.peak"] == 0 and stats["segment.all.peak"] == 0
        assert stats["allocated_bytes.all.peak"] == 0  # governor.py __init__ #23
        a.get_simultaneous(((1024,), "uint8"))
        a.get_persistent("p", (16,), "uint8")
        stats = a.memory_stats()
        assert stats["segment.all.peak"] == 2 and stats["segment.all.current"] == 2
        assert stats["reserved_bytes.all.peak"] == 1024 + 256
        a.get_simultaneous(((4096,), "uint8"))  # growth
        a.reset_peak_memory_stats()
        stats = a.memory_stats()
        assert stats["segment.all.peak"] == 2 and stats["reserved_bytes.all.peak"] == 4096 + 256
        for _ in range(3):
            with pytest.raises(ArenaOutOfMemoryError):
                a.get_simultaneous(((1 << 20,), "uint8"))
        assert a.memory_stats()["num_ooms"] == 3


# ------------------------------------------------------------------ max_bytes
def test_the_cap_refuses_one_byte_over_and_says_what_growth_releases() -> None:
    # governor.py check_budget #1, #12-#15: a default of 1 byte freed let a request one
    # byte past the cap through; the message's "released first" part on the wrong path.
    with Arena("cpu", framework="numpy", max_bytes=1023) as a:
        with pytest.raises(ArenaOutOfMemoryError) as info:
            a.get_persistent("p", (1024,), "uint8")  # nothing is released for it
        message = str(info.value)
        assert "the arena holds 0 bytes (0.00 MB), so it would hold 1024 bytes" in message
        assert "released first" not in message
        assert a.stats().live_bytes == 0
    with Arena("cpu", framework="numpy", max_bytes=4096) as a:
        a.get_simultaneous(((1024,), "uint8"))
        with pytest.raises(ArenaOutOfMemoryError) as info:
            a.get_simultaneous(((8192,), "uint8"))  # growth: the 1 KiB block goes first
        message = str(info.value)
        assert "holds 1024 bytes (0.00 MB), of which 1024 bytes are released first, so" in message


def test_a_slot_that_served_nothing_has_no_load() -> None:
    # slot.py Slot.__init__ #20: LOAD started at 1 byte; a micro-batch that never ran
    # reported a load (and a profile recorded it).
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        assert [s.load for s in a.stats().slots] == [0, 0]
        a.get_simultaneous(((64,), F32))
        assert [s.load for s in a.stats().slots] == [256, 0]
