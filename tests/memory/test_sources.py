from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import arena
from arena import Arena, ArenaError, ArenaOutOfMemoryError, ConfigError, HostSource, MemorySource
from tests.sources import FailingSource, RecordingSource

F32 = "float32"


def test_host_source_is_page_aligned_and_exact() -> None:
    source = HostSource()
    assert isinstance(source, MemorySource)
    for nbytes in (1, 255, 4096, 10_000):
        block = source.allocate(nbytes)
        assert block.ptr % 4096 == 0
        # The address is the owner's own (read through a ctypes view of its buffer).
        assert block.ptr == block.owner.__array_interface__["data"][0]
        assert block.nbytes == block.owner.nbytes == nbytes
        assert block.owner.dtype == np.uint8


def test_a_host_block_is_the_frozen_dataclass_its_fields_build() -> None:
    # HostSource.allocate builds its Allocation without the generated __init__ (issue 32
    # item 4): the object must be the one Allocation(...) builds from the same fields.
    block = HostSource().allocate(1000)
    assert type(block) is arena.Allocation
    assert [f.name for f in dataclasses.fields(block)] == ["ptr", "nbytes", "owner", "device"]
    built = arena.Allocation(block.ptr, block.nbytes, block.owner, block.device)
    assert block == built and built == block
    assert repr(block) == repr(built)
    assert dataclasses.astuple(block)[:2] == (block.ptr, 1000)
    assert block.device is arena.memory.devices.CPU
    assert dataclasses.replace(block, nbytes=10) == arena.Allocation(
        block.ptr, 10, block.owner, block.device
    )
    assert not hasattr(block, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        block.nbytes = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del block.ptr  # type: ignore[misc]
    # The owner is exactly the block: a view of a larger array, starting at ptr.
    assert block.owner.base is not None
    assert block.owner.base.nbytes == 1000 + arena.memory.sources.HOST_ALIGNMENT


def test_growth_releases_before_allocating_and_close_releases_all() -> None:
    source = RecordingSource()
    a = Arena(source=source, ubatches=2, framework="numpy")
    a.get_simultaneous(((256,), F32))
    a.get_simultaneous(((512,), F32))
    a.get_persistent("kv", (64,), F32)
    with a.ubatch(1):
        a.get_simultaneous(((8,), F32))
    a.close()
    assert source.events == [
        ("allocate", 1024),
        ("release", 1024),  # the old buffer goes back first ...
        ("allocate", 2048),  # ... then the new one is asked for
        ("allocate", 256),  # persistent buffer: a block of its own
        ("allocate", 2048),  # ubatch 1 grows to its sibling's size at its own call
        ("release", 2048),
        ("release", 256),
        ("release", 2048),
    ]
    assert source.live == {}


def test_lock_allocates_only_for_unsized_siblings() -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=2, framework="numpy") as a:
        a.get_simultaneous(((1000,), F32))
        a.lock()
        a.unlock()
        a.lock()
    assert source.allocations() == [4096, 4096]


def test_failing_source_raises_memory_error_naming_bytes_and_stays_consistent() -> None:
    source = FailingSource(limit=1 << 16)
    a = Arena(source=source, framework="numpy")
    a.get_simultaneous(((1000,), F32))
    with pytest.raises(ArenaOutOfMemoryError) as info:
        a.get_simultaneous(((1 << 20,), F32))
    assert isinstance(info.value, MemoryError) and isinstance(info.value, ArenaError)
    assert "4194304 bytes" in str(info.value) and "4.00 MB" in str(info.value)
    assert "(ubatch 0, lane 0)" in str(info.value)
    # a later smaller request works, and nothing leaks
    (v,) = a.get_simultaneous(((2000,), F32))
    v[:] = 1
    assert a.stats().slots[0].capacity == 8192
    a.close()
    assert source.live == {}
    assert ("refuse", 4194304) in source.events


def test_failing_persistent_allocation_leaves_no_entry() -> None:
    source = FailingSource(limit=1024)
    with Arena(source=source, framework="numpy") as a:
        with pytest.raises(ArenaOutOfMemoryError, match="persistent buffer 'big'"):
            a.get_persistent("big", (1 << 20,), F32)
        assert a.stats().slots[0].persistent_keys == 0
        assert a.get_persistent("big", (16,), F32).shape == (16,)


def test_lock_that_runs_out_of_memory_stays_unlocked() -> None:
    source = FailingSource(limit=1 << 20)
    with Arena(source=source, ubatches=2, framework="numpy") as a:
        a.get_simultaneous(((1 << 18,), F32))  # exactly 1 MiB: fits
        source.limit = 1 << 10  # now the sibling cannot be sized
        with pytest.raises(ArenaOutOfMemoryError):
            a.lock()
        assert not a.is_locked


def test_live_views_keep_old_buffer_alive_during_growth() -> None:
    source = RecordingSource()
    a = Arena(source=source, framework="numpy")
    (view,) = a.get_simultaneous(((1024,), F32))
    view[:] = 9
    a.get_simultaneous(((1 << 16,), F32))
    assert ("release", 4096) in source.events  # released by the arena ...
    assert (view == 9).all()  # ... yet still readable: the view owns it
    a.close()


def test_source_and_device_must_agree() -> None:
    with pytest.raises(ConfigError, match="disagrees"):
        Arena("cuda:0", source=RecordingSource())
    with pytest.raises(ConfigError, match="allocate"):
        Arena(source=object())  # type: ignore[arg-type]


def test_alloc_context_wraps_every_allocation() -> None:
    from contextlib import contextmanager

    entered: list[str] = []
    source = RecordingSource()

    @contextmanager
    def pool():  # type: ignore[no-untyped-def]
        entered.append("enter")
        source.events.append(("context", 0))
        yield
        entered.append("exit")

    with Arena(source=source, alloc_context=pool, framework="numpy") as a:
        a.get_simultaneous(((100,), F32))
        a.get_persistent("kv", (4,), F32)
    assert entered == ["enter", "exit"] * 2
    assert source.events[:2] == [("context", 0), ("allocate", 512)]


@pytest.mark.parametrize("growth", ["exact", "pow2", 10_000])
def test_lock_sizes_siblings_to_exactly_the_largest_capacity(growth: str | int) -> None:
    source = RecordingSource()
    with Arena(source=source, ubatches=2, growth=growth, framework="numpy") as a:
        a.get_simultaneous(((1000,), F32))
        events: list[object] = []
        a.add_listener(events.append)
        a.lock()
        first, second = (s.capacity for s in a.stats().slots)
        assert first == second
        assert source.allocations() == [first, first]  # the policy is not applied twice
        assert [e.kind for e in events] == ["resize", "lock"]  # type: ignore[attr-defined]


def test_cuda_out_of_memory_errors_become_memory_errors() -> None:
    from arena.memory.cuda import _out_of_memory_as_memory_error

    class CUDARuntimeError(RuntimeError):  # the shape of CuPy's runtime error
        status = 2

    class OutOfMemoryError(RuntimeError):  # the shape of torch.OutOfMemoryError
        pass

    for error in (CUDARuntimeError("cudaErrorMemoryAllocation"), OutOfMemoryError("CUDA OOM")):
        with pytest.raises(MemoryError) as info, _out_of_memory_as_memory_error():
            raise error
        assert info.value.__cause__ is error
    with pytest.raises(ValueError), _out_of_memory_as_memory_error():
        raise ValueError("not memory")


def test_a_source_returning_too_few_bytes_is_refused_and_given_back() -> None:
    class ShortSource(RecordingSource):
        def allocate(self, nbytes: int) -> arena.Allocation:
            return super().allocate(max(1, nbytes // 2))

    source = ShortSource()
    with Arena(source=source, framework="numpy") as a:
        with pytest.raises(ArenaError, match=r"returned 2048 bytes .* needs 4096"):
            a.get_simultaneous(((1024,), F32))
        stats = a.stats()
        assert stats.allocations == stats.frees + stats.live_blocks and source.live == {}
