from __future__ import annotations

import logging

import numpy as np
import pytest

import arena
from arena import Arena, ArenaClosedError, ArenaLockedError, PersistentMismatchError, SlotError
from tests.inplace import set_shape
from tests.sources import RecordingSource

F32 = "float32"


def test_views_are_typed_aligned_and_exactly_sized(host: Arena) -> None:
    a, b, c = host.get_simultaneous(((4, 8), F32), ((3,), "int16"), ((2, 2), "float64"))
    assert (a.shape, a.dtype, b.shape, b.dtype) == ((4, 8), np.float32, (3,), np.int16)
    assert c.nbytes == 32
    base = host.numpy.data_ptr(a)
    assert base % 4096 == 0  # slot buffers are page aligned
    assert host.numpy.data_ptr(b) - base == 256
    assert host.numpy.data_ptr(c) - base == 512


def test_every_call_reuses_the_same_bytes(host: Arena) -> None:
    (first,) = host.get_simultaneous(((16,), F32))
    first[:] = 7
    (second,) = host.get_simultaneous(((16,), "int32"))
    assert host.numpy.data_ptr(first) == host.numpy.data_ptr(second)
    assert first is not second
    assert second.view(np.float32)[0] == 7


def test_repeated_request_returns_fresh_objects_over_the_same_memory(host: Arena) -> None:
    (x,) = host.get_simultaneous(((8,), F32))
    (y,) = host.get_simultaneous(((8,), F32))
    assert x is not y
    set_shape(x, (2, 4))  # metadata changes on one view must not leak into later ones
    (z,) = host.get_simultaneous(((8,), F32))
    assert z.shape == (8,)


def test_zero_size_requests_give_valid_empty_views(host: Arena) -> None:
    empty, full = host.get_simultaneous(((0, 5), F32), ((3,), F32))
    assert empty.shape == (0, 5) and empty.size == 0
    assert host.numpy.data_ptr(full) == host.numpy.data_ptr(empty)  # 0 bytes take no room
    (only_empty,) = host.get_simultaneous(((0,), "int8"))
    assert only_empty.size == 0


def test_growth_only_when_needed_and_exact_by_default() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy") as a:
        a.get_simultaneous(((100,), F32))
        a.get_simultaneous(((10,), F32))
        a.get_simultaneous(((1000,), F32))
        a.get_simultaneous(((1000,), F32))
    assert source.allocations() == [512, 4096]


@pytest.mark.parametrize(
    ("growth", "expected"),
    [("exact", 4096), ("pow2", 4096), (10_000, 10_240), ("pow2", 4096)],
)
def test_growth_granularity(growth: str | int, expected: int) -> None:
    source = RecordingSource()
    with Arena(source=source, growth=growth, framework="numpy") as a:
        a.get_simultaneous(((1000,), F32))  # 4000 bytes -> 4096 aligned
    assert source.allocations() == [expected]


def test_pow2_growth_rounds_to_power_of_two() -> None:
    source = RecordingSource()
    with Arena(source=source, growth="pow2", framework="numpy") as a:
        a.get_simultaneous(((1100,), F32))  # 4400 -> 4608 aligned -> 8192
    assert source.allocations() == [8192]


def test_lock_blocks_growth_and_names_the_caller() -> None:
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((1024,), F32))
        a.lock()
        assert a.is_locked
        a.get_simultaneous(((512,), F32))  # fits: fine
        with pytest.raises(ArenaLockedError) as info:
            a.get_simultaneous(((1 << 20,), F32))
        message = str(info.value)
        assert "test_arena.py:" in message
        assert "test_lock_blocks_growth_and_names_the_caller" in message
        assert "4.00 MB" in message and "0.00 MB" in message
        assert "(ubatch 0, lane 0)" in message
        assert "growth after lock() is refused" in message
        assert isinstance(info.value, RuntimeError)
        a.unlock()
        (big,) = a.get_simultaneous(((1 << 20,), F32))
        assert big.shape == (1 << 20,)


def test_no_allocation_of_any_kind_while_locked() -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=2, framework="numpy") as a:
        a.get_simultaneous(((4096,), F32))
        a.get_persistent("kv", (16,), F32)
        a.lock()
        before = list(source.events)
        for size in (1, 100, 4096):
            a.get_simultaneous(((size,), F32))
        assert a.try_get_simultaneous(((1 << 20,), F32)) is None
        with pytest.raises(ArenaLockedError):
            a.get_persistent("new-key", (16,), F32)
        with pytest.raises(ArenaLockedError):
            a.get_persistent_resource("new-resource", dict)
        with pytest.raises(ArenaLockedError):
            a.reserve_bytes(1 << 22)
        assert source.events == before
        assert a.stats().allocations_while_locked == 0


def test_try_get_simultaneous_returns_views_when_it_fits(host: Arena) -> None:
    host.get_simultaneous(((64,), F32))
    host.lock()
    views = host.try_get_simultaneous(((64,), F32))
    assert views is not None and views[0].shape == (64,)
    assert host.try_get_simultaneous(((65_000,), F32)) is None
    with pytest.raises(arena.SpecError):
        host.try_get_simultaneous(((-1,), F32))


def test_locked_and_unlocked_context_managers(host: Arena) -> None:
    with host.locked():
        assert host.is_locked
        with host.unlocked():
            assert not host.is_locked
            host.get_simultaneous(((10_000,), F32))
        assert host.is_locked
    assert not host.is_locked


def test_reserve_sizes_every_slot_up_front() -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=2, lanes=2, framework="numpy") as a:
        nbytes = a.reserve(((1024,), F32), ((10,), "int64"))
        assert nbytes == 4096 + 256
        assert [s.capacity for s in a.stats().slots] == [nbytes] * 4
        a.lock()
        for ub in range(2):
            for lane in range(2):
                with a.ubatch(ub), a.lane(lane):
                    a.get_simultaneous(((1024,), F32), ((10,), "int64"))
        assert source.allocations() == [nbytes] * 4


def test_slots_are_ubatch_times_lane_distinct_buffers() -> None:
    with Arena("cpu", ubatches=2, lanes=2, framework="numpy") as a:
        pointers = set()
        for ub in range(2):
            for lane in range(2):
                with a.ubatch(ub), a.lane(lane):
                    assert a.current_slot() == (ub, lane)
                    (v,) = a.get_simultaneous(((32,), F32))
                    pointers.add(a.numpy.data_ptr(v))
        assert len(pointers) == 4


def test_lane_context_restores_on_exit() -> None:
    with Arena("cpu", lanes=3, framework="numpy") as a:
        with a.lane(2):
            with a.lane(1):
                assert a.current_slot() == (0, 1)
            assert a.current_slot() == (0, 2)
        assert a.current_slot() == (0, 0)
        with pytest.raises(RuntimeError), a.lane(1):
            raise RuntimeError("boom")
        assert a.current_slot() == (0, 0)


def test_ubatch_resolver_is_consulted_per_call() -> None:
    current = [0]
    with Arena("cpu", ubatches=2, ubatch_resolver=lambda: current[0], framework="numpy") as a:
        (x,) = a.get_simultaneous(((8,), F32))
        current[0] = 1
        (y,) = a.get_simultaneous(((8,), F32))
        assert a.numpy.data_ptr(x) != a.numpy.data_ptr(y)
        current[0] = 5
        with pytest.raises(SlotError, match="returned 5"):
            a.get_simultaneous(((8,), F32))


def test_sibling_grows_at_its_own_next_call_not_before() -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=2, framework="numpy") as a:
        with a.ubatch(1):
            (sibling_view,) = a.get_simultaneous(((64,), F32))
            sibling_view[:] = 42
        a.get_simultaneous(((100_000,), F32))  # ubatch 0 grows
        # ubatch 1's live view is untouched: its buffer was not replaced by another thread
        assert a.stats().slots[1].capacity == 256
        assert (sibling_view == 42).all()
        with a.ubatch(1):
            a.get_simultaneous(((8,), F32))  # its next call, even a small one, grows it
        assert a.stats().slots[1].capacity == a.stats().slots[0].capacity


def test_lock_sizes_siblings_that_never_ran() -> None:
    with Arena("cpu", ubatches=3, lanes=2, framework="numpy") as a:
        a.get_simultaneous(((10_000,), F32))
        with a.lane(1):
            a.get_simultaneous(((100,), F32))
        a.lock()
        caps = {(s.ubatch, s.lane): s.capacity for s in a.stats().slots}
        assert {caps[(u, 0)] for u in range(3)} == {40_192}
        assert {caps[(u, 1)] for u in range(3)} == {512}
        with a.ubatch(2):
            a.get_simultaneous(((10_000,), F32))  # fits without growth


def test_unused_slot_after_lock_says_it_was_never_sized() -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=1, lanes=2, framework="numpy") as a:
        a.get_simultaneous(((10,), F32))
        a.lock()
        with a.lane(1):
            (empty,) = a.get_simultaneous(((0, 7), F32))  # zero bytes: served, no allocation
            assert empty.shape == (0, 7)
            with pytest.raises(ArenaLockedError, match="never sized"):
                a.get_simultaneous(((1,), F32))
        assert source.allocations() == [256]


def test_zero_byte_requests_never_allocate_a_slot_buffer() -> None:
    torch = pytest.importorskip("torch")
    source = RecordingSource()
    with Arena(source=source, framework="torch") as a:
        x, y = a.get_simultaneous(((0,), torch.float32), ((4, 0), torch.bfloat16))
        assert x.numel() == 0 and y.shape == (4, 0)
        assert source.events == []
        a.get_simultaneous(((8,), torch.float32))  # the first real request grows the slot
        assert source.allocations() == [256]


def test_views_keep_old_memory_alive_after_growth_and_close() -> None:
    a = Arena("cpu", framework="numpy")
    (small,) = a.get_simultaneous(((16,), F32))
    small[:] = np.arange(16)
    a.get_simultaneous(((1 << 16,), F32))  # the slot moves to a new buffer
    persistent = a.get_persistent("p", (4,), F32)
    persistent[:] = 3
    a.close()
    import gc

    gc.collect()
    assert small.tolist() == list(range(16))  # old memory is still owned by the view
    assert persistent.tolist() == [3, 3, 3, 3]


def test_closed_arena_refuses_requests_with_a_clear_error() -> None:
    a = Arena("cpu", framework="numpy")
    a.close()
    a.close()  # idempotent
    for call in (
        lambda: a.get_simultaneous(((1,), F32)),
        lambda: a.try_get_simultaneous(((1,), F32)),
        lambda: a.get_persistent("k", (1,), F32),
        a.lock,
        lambda: a.reserve_bytes(10),
    ):
        with pytest.raises(ArenaClosedError, match="closed"):
            call()
    assert a.is_closed and "closed" in repr(a)


def test_persistent_buffers_survive_scratch_calls_and_never_overlap() -> None:
    with Arena("cpu", framework="numpy") as a:
        kv = a.get_persistent("kv", (64,), F32, zero_init=True)
        assert (kv == 0).all()
        kv[:] = 5
        for size in (64, 1000, 100_000):
            (scratch,) = a.get_simultaneous(((size,), F32))
            scratch[:] = -1
            start, end = a.numpy.data_ptr(scratch), a.numpy.data_ptr(scratch) + scratch.nbytes
            assert not start <= a.numpy.data_ptr(kv) < end
        assert (kv == 5).all()
        assert a.get_persistent("kv", (64,), F32) is kv
        with pytest.raises(PersistentMismatchError, match=r"\(64,\) float32.*\(32,\) float32"):
            a.get_persistent("kv", (32,), F32)
        with pytest.raises(PersistentMismatchError, match="int32"):
            a.get_persistent("kv", (64,), "int32")
        assert isinstance(PersistentMismatchError("x"), ValueError)


def test_persistent_buffers_are_per_slot() -> None:
    with Arena("cpu", ubatches=2, framework="numpy") as a:
        x = a.get_persistent("k", (8,), F32)
        with a.ubatch(1):
            y = a.get_persistent("k", (8,), F32)
        assert a.numpy.data_ptr(x) != a.numpy.data_ptr(y)


def test_persistent_resource_is_built_once_per_key_and_slot(host: Arena) -> None:
    calls = []

    def factory() -> dict[str, int]:
        calls.append(1)
        return {"n": len(calls)}

    first = host.get_persistent_resource("plan", factory)
    assert host.get_persistent_resource("plan", factory) is first
    assert len(calls) == 1
    host.lock()
    assert host.get_persistent_resource("plan", factory) is first
    with pytest.raises(ArenaLockedError, match="warm-up"):
        host.get_persistent_resource("other", factory)


def test_stats_count_growths_allocations_calls_and_call_sites() -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=2, framework="numpy") as a:
        a.get_simultaneous(((100,), F32))
        a.get_simultaneous(((1000,), F32))
        a.lock()
        a.get_simultaneous(((10,), F32))
        stats = a.stats()
        assert stats.slots[0].growths == 2 and stats.slots[1].growths == 1
        assert stats.allocations == 3 and stats.frees == 1
        assert stats.calls == 3 and stats.locked
        assert stats.slots[0].high_water == 4096
        assert stats.reserved_bytes == 8192
        sites = {k.split(":")[0]: v for k, v in stats.call_sites.items()}
        assert sites == {"test_arena.py": 4096}
        # the locked call is not recorded: only two sites (lines) recorded while unlocked
        assert len(stats.call_sites) == 2
        assert "ubatch 1 lane 0" in stats.table()


def test_debug_logs_resize_lock_and_unlock(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="arena")
    with Arena("cpu", debug=True, framework="numpy") as a:
        a.get_simultaneous(((1 << 18,), F32))
        a.lock()
        a.unlock()
    text = caplog.text
    assert "resized slot (ubatch 0, lane 0) from 'test_arena.py:" in text
    assert "0.00 MB -> 1.00 MB" in text
    assert "locked. Current sizes (MB): [1.0]" in text
    assert "unlocked." in text


def test_debug_from_environment(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="arena")
    monkeypatch.setenv("ARENA_DEBUG", "1")
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((10,), F32))
    assert any(r.levelno == logging.INFO and "resized" in r.getMessage() for r in caplog.records)


def test_default_framework_follows_imports(host: Arena) -> None:
    assert host.framework == "numpy"
    pytest.importorskip("torch")
    with Arena("cpu") as a:  # torch is imported by now
        assert a.framework == "torch"


def test_listeners_receive_resize_lock_unlock_and_close() -> None:
    events: list[arena.ArenaEvent] = []
    a = Arena("cpu", ubatches=2, framework="numpy")
    a.add_listener(events.append)
    a.get_simultaneous(((1000,), F32))
    a.lock()
    a.unlock()
    a.remove_listener(events.append)
    a.remove_listener(events.append)  # removing twice is harmless
    a.get_simultaneous(((5000,), F32))
    a.close()
    assert [e.kind for e in events] == ["resize", "resize", "lock", "unlock"]
    first = events[0]
    assert first.slot == (0, 0) and (first.old_bytes, first.new_bytes) == (0, 4096)
    assert first.caller.startswith("test_arena.py:")
    assert events[1].slot == (1, 0)  # the sibling sized at lock
    assert events[2].sizes == (4096, 4096)
    with pytest.raises(arena.ConfigError, match="callable"):
        a.add_listener(42)  # type: ignore[arg-type]


def test_call_site_tracking_can_be_turned_off() -> None:
    with Arena("cpu", framework="numpy", track_call_sites=False) as a:
        a.get_simultaneous(((100,), F32))
        a.get_simultaneous(((100,), F32))
        assert a.stats().call_sites == {}
        assert a.stats().calls == 2


def test_lock_gives_every_micro_batch_the_persistent_buffers_a_sibling_registered() -> None:
    with Arena("cpu", framework="numpy", ubatches=2, lanes=2) as a:
        kv = a.get_persistent("kv", (8,), "float32", zero_init=True)  # ubatch 0, lane 0
        kv[:] = 5.0
        with a.lane(1):
            a.get_persistent("draft", (4,), "int32")
        a.lock()
        with a.ubatch(1):  # never ran during warm-up
            mine = a.get_persistent("kv", (8,), "float32")
            assert mine.shape == (8,) and np.all(mine == 0)  # zeroed like its sibling's
            assert a.numpy.data_ptr(mine) != a.numpy.data_ptr(kv)  # its own block
            assert a.get_persistent("kv", (8,), "float32") is mine
            with a.lane(1):
                assert a.get_persistent("draft", (4,), "int32").shape == (4,)
            with pytest.raises(ArenaLockedError):
                a.get_persistent("kv-other", (8,), "float32")
        assert np.all(kv == 5.0)
        assert a.stats().slots[2].persistent_keys == 1  # (ubatch 1, lane 0)


def test_a_resource_missing_on_a_micro_batch_after_lock_names_the_fix() -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        a.get_persistent_resource("plan", dict)
        a.lock()
        with a.ubatch(1), pytest.raises(ArenaLockedError) as info:
            a.get_persistent_resource("plan", dict)
        message = str(info.value)
        assert "(ubatch 1, lane 0)" in message and "'plan'" in message
        assert "(ubatch 0, lane 0) created it during warm-up" in message
        assert "Arena.ubatch(i)" in message


def test_lock_state_reads_the_same_as_a_property_and_as_vllms_method(host: Arena) -> None:
    assert not host.is_locked and host.is_locked() is False and host.is_locked == False  # noqa: E712
    host.lock()
    assert host.is_locked and host.is_locked() is True and host.is_locked == True  # noqa: E712
    assert repr(host.is_locked) == "True"
    with pytest.raises(TypeError, match=r"ws\.is_locked"):
        bool(host.locked)
    with pytest.raises(TypeError, match="context manager"):
        if host.unlocked:
            pass
    with host.unlocked() as same:
        assert same is host and not host.is_locked
    assert host.is_locked
    assert not host.is_closed and not host.is_closed()


def test_binding_a_slot_the_resolver_chooses_is_refused_by_name() -> None:
    """ubatch(i), bind_ubatch(i) on an arena whose ubatch_resolver picks the micro-batch
    (the vLLM drop-in's), and lane(i) with a lane_resolver, would do nothing: refused."""
    with Arena("cpu", framework="numpy", ubatches=2, lanes=2, ubatch_resolver=lambda: 1) as ws:
        with pytest.raises(arena.ConfigError, match=r"ubatch_resolver.*ubatch\(0\)"):
            ws.ubatch(0).__enter__()
        with pytest.raises(arena.ConfigError, match="ubatch_resolver"):
            ws.bind_ubatch(0)
        with ws.lane(1):  # no lane_resolver: lane() is honoured
            assert ws.current_slot() == (1, 1)
    with Arena("cpu", framework="numpy", lanes=2, lane_resolver=lambda: 1) as ws:
        with pytest.raises(arena.ConfigError, match=r"lane_resolver.*lane\(0\)"):
            ws.lane(0).__enter__()
        with ws.ubatch(0):
            assert ws.current_slot() == (0, 1)


def test_arenas_fronts_scopes_and_steps_refuse_copies_and_pickles_naming_why() -> None:
    import copy
    import pickle

    with Arena("cpu", framework="numpy") as ws:
        objects = [ws, ws.numpy, ws.front("numpy", cached=True), ws.step("k"), ws.scope()]
        for thing in objects:
            for attempt in (pickle.dumps, copy.deepcopy, copy.copy):
                with pytest.raises(TypeError, match="cannot be copied or pickled: it stands"):
                    attempt(thing)
        ws.get_simultaneous(((4,), "float32"))
    assert ws.is_closed  # no copy's close() reached it early; the with block closed it


def test_lock_twice_and_unlock_unlocked_change_nothing() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.get_simultaneous(((256,), "float32"))
        ws.lock()
        before = ws.stats()
        ws.lock()
        assert ws.is_locked and ws.stats().slots == before.slots
        ws.unlock()
        ws.unlock()
        assert not ws.is_locked
        ws.get_simultaneous(((512,), "float32"))  # grows: unlocked


def test_the_arena_serves_through_its_default_fronts_own_methods() -> None:
    """Once made, the default front serves ``ws.get_simultaneous`` and
    ``ws.try_get_simultaneous`` itself (no frame of the arena's per request), with the
    same views and errors; a subclass that overrides them keeps its own."""
    with Arena("cpu", framework="numpy") as ws:
        first = ws.get_simultaneous(((4,), "float32"))
        front = ws.front("numpy")
        assert ws.get_simultaneous == front.get_simultaneous
        assert ws.try_get_simultaneous == front.try_get_simultaneous
        again = ws.get_simultaneous(((4,), "float32"))
        assert again[0].ctypes.data == first[0].ctypes.data
        with ws.locked():
            assert ws.try_get_simultaneous(((1 << 20,), "float32")) is None
            with pytest.raises(ArenaLockedError):
                ws.get_simultaneous(((1 << 20,), "float32"))
    with pytest.raises(ArenaClosedError):
        ws.get_simultaneous(((4,), "float32"))

    class Counting(Arena):
        calls = 0

        def get_simultaneous(self, *specs: tuple[object, object]) -> list[object]:
            Counting.calls += 1
            return super().get_simultaneous(*specs)

    with Counting("cpu", framework="numpy") as counting:
        counting.get_simultaneous(((4,), "float32"))
        counting.get_simultaneous(((4,), "float32"))
    assert Counting.calls == 2
