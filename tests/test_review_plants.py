"""Gaps a planted-bug review found in the fixed-address sources, sync, library workspaces,
the scope hit and per-arena profiles: each test fails on one realistic slip in the code
(named in its docstring) and passes on the real code."""

from __future__ import annotations

import enum
import gc
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from arena import Allocation, Arena, ArenaAsleepError, ArenaError, ArenaLockedError
from arena.memory import virtual
from arena.memory.cudadriver import BindingsDriver
from arena.memory.ledger import Ledger
from arena.observe import profilepaths
from arena.planning.books import books_of
from tests.fakecupy import with_arrays
from tests.kernels.test_library_zero_init import DirtySource
from tests.memory.test_cuda_fakes import _load_cupy_front, fake_cupy
from tests.memory.test_virtual_cuda import GRANULARITY, RecordingDriver, _source
from tests.sources import RecordingSource, check_books
from tests.threadgroup import RankGroup, ThreadRanks

F32 = "float32"


# --------------------------------------------------------------------------- cudavm
@pytest.fixture
def cupy(monkeypatch: pytest.MonkeyPatch) -> Any:
    module = with_arrays(fake_cupy())
    _load_cupy_front(monkeypatch, module)
    return module


class _FailingAccess(RecordingDriver):
    """``cuMemSetAccess`` fails once."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_access = False

    def set_access(self, ptr: int, size: int, device: int) -> None:
        if self.fail_access:
            self.fail_access = False
            raise ArenaError("CUDA_ERROR_INVALID_VALUE (fake)")
        super().set_access(ptr, size, device)


def test_a_failed_set_access_releases_the_chunk_it_created(cupy: Any) -> None:
    """Plant: ``_map`` unmaps but does not release the handle when set-access fails."""
    driver = _FailingAccess()
    source = _source(driver, cupy)
    block = source.reserve(GRANULARITY)
    driver.fail_access = True
    with pytest.raises(ArenaError, match="fake"):
        source.commit(block, 3 * GRANULARITY)
    assert {h for _, h in driver.mapped.values()} == driver.handles  # nothing leaked
    block = source.commit(block, 3 * GRANULARITY)  # and it can grow afterwards
    source.release(block)
    del block
    gc.collect()
    assert driver.mapped == {} and driver.handles == set() and driver.ranges == {}


class _FailingDriverRelease(RecordingDriver):
    """``cuMemRelease`` fails once."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_release = False

    def release(self, handle: int) -> None:
        if self.fail_release:
            self.fail_release = False
            raise ArenaError("CUDA_ERROR_INVALID_VALUE (fake)")
        super().release(handle)


def test_the_finalizer_releases_a_handle_a_failed_evict_left_unmapped(cupy: Any) -> None:
    """Plant: the range's finalizer forgets the handles unmapped but not released."""
    driver = _FailingDriverRelease()
    source = _source(driver, cupy)
    block = source.reserve(GRANULARITY)
    driver.fail_release = True
    with pytest.raises(ArenaError, match="fake"):
        source.evict(block)
    assert driver.mapped == {} and len(driver.handles) == 1  # unmapped, still held
    source.release(block)  # never restored nor evicted again: the finalizer is the last
    del block
    gc.collect()
    assert driver.handles == set() and driver.ranges == {}


# --------------------------------------------------------------------------- ledger
def test_an_interrupt_as_an_in_place_growth_returns_leaves_the_slot_holding_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plant: ``Ledger.commit`` notes the handed block under the count before its own, so
    ``handed_since`` misses it and the slot keeps the old size over the grown block."""
    commit = Ledger.commit

    def interrupted(self: Ledger, allocation: Any, nbytes: int, what: str) -> Any:
        commit(self, allocation, nbytes, what)
        raise KeyboardInterrupt  # as commit returns: the caller never sees the block

    with Arena("cpu", framework="numpy", source="virtual", max_bytes=1 << 24) as ws:
        ws.get_simultaneous(((16,), F32))
        monkeypatch.setattr(Ledger, "commit", interrupted)
        with pytest.raises(KeyboardInterrupt):
            ws.get_simultaneous(((1 << 18,), F32))
        monkeypatch.undo()
        check_books(ws)
        assert ws.stats().slots[0].capacity >= 1 << 20


# --------------------------------------------------------------------------- sync
def test_a_locked_arena_refuses_a_step_recorded_larger_past_its_first_size() -> None:
    """Plant: the locked check compares only a step's first figure, so a later request
    another rank recorded larger is not refused (its plan would change while locked)."""
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        with Arena("cpu", framework="numpy") as ws:
            ws.reserve_bytes(1 << 20)  # room for anything: only the step's figures differ
            for _ in range(2):
                with ws.step("s") as st:
                    st.get_simultaneous(((256,), F32))
                    st.get_simultaneous(((256 * (rank + 1),), F32))
            if rank == 0:
                ws.lock()
            return ws.sync(group).after

    small, large = ranks.run(body)
    assert isinstance(small, ArenaLockedError), small
    assert "step 's'" in str(small) or "'s'" in str(small)
    assert large == (1 << 20,)


# --------------------------------------------------------------------------- library
def test_a_workspace_made_with_zero_init_is_zeroed_when_a_call_without_it_grows_it() -> None:
    """Plant: the grown block takes only the calling site's ``zero_init``, so a growth
    through a call without it copies the old bytes over dirty memory."""
    with Arena("cpu", framework="numpy", source=DirtySource()) as ws:
        first = ws.get_library_workspace("fi", 4096, zero_init=True)
        first[:] = 7
        grown = ws.get_library_workspace("fi", 8192)
        assert grown.nbytes == 8192 and not grown.any()


# --------------------------------------------------------------------------- scope hit
def test_a_scope_hit_inside_a_locked_replay_tells_the_step_its_reach_every_time(
    hit_path: str,
) -> None:
    """Plant: the compiled scope hit drops its 'no step open below' check, serving the
    request without telling the replay what it holds above its plan."""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 20)
        for _ in range(3):
            with ws.step("A") as st:
                st.get_simultaneous(((64,), F32))
                with ws.scope() as s:
                    s.get_simultaneous(((1024,), F32))
        ws.lock()
        seen = []
        for _ in range(3):  # the first checked and remembered, the others hits
            with ws.step("A") as st:
                st.get_simultaneous(((64,), F32))
                with ws.scope() as s:
                    s.get_simultaneous(((1024,), F32))
                seen.append(st.above)
        assert seen == [4096] * 3


# --------------------------------------------------------------------------- profiles
class _Owner:
    """Stands in for an arena: something a weak reference can name."""


def test_two_threads_claiming_one_profile_name_at_once_get_different_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plant: ``claim_profile_path`` checks and claims without its lock; two arenas
    created at once in two threads record into one file."""
    first_in, second_in = threading.Event(), threading.Event()
    holds = profilepaths._holds_another

    def gated(path: Path, key: Any) -> bool:
        if not first_in.is_set():
            first_in.set()
            second_in.wait(0.5)  # the other thread gets in only without the lock
        else:
            second_in.set()
        return holds(path, key)

    monkeypatch.setattr(profilepaths, "_holds_another", gated)
    key = ("cpu", 1, 1, 256, None)
    owners = [_Owner(), _Owner()]  # held weakly by the claims
    got: list[Path] = []

    def claim(owner: _Owner) -> None:
        got.append(profilepaths.claim_profile_path(str(tmp_path / "p.json"), key, owner))

    threads = [threading.Thread(target=claim, args=(o,)) for o in owners]
    threads[0].start()
    assert first_in.wait(5)
    threads[1].start()
    for t in threads:
        t.join(5)
    assert len(got) == 2 and got[0] != got[1], got


class _CountingGroup:
    """A rank's group that counts the bytes handed to each collective."""

    def __init__(self, inner: RankGroup) -> None:
        self.inner = inner
        self.payload = 0
        self.calls = 0

    def all_reduce_max(self, values: list[int]) -> list[int]:
        self.payload += 8 * len(values)
        self.calls += 1
        return self.inner.all_reduce_max(values)

    def all_gather(self, data: bytes) -> list[bytes]:
        self.payload += len(data)
        self.calls += 1
        return self.inner.all_gather(data)


def test_the_sync_report_counts_the_gathered_bytes_of_differing_schemas() -> None:
    """Plant: ``all_gather``'s bytes are left out of ``payload_bytes``."""
    ranks = ThreadRanks(2)

    def body(rank: int, group: RankGroup) -> Any:
        counting = _CountingGroup(group)
        with Arena("cpu", framework="numpy") as ws:
            ws.get_persistent(("state", rank), (8,), F32)  # the schemas differ
            report = ws.sync(counting)
        return report, counting.payload, counting.calls

    for report, payload, calls in ranks.run(body):
        assert report.schemas == 2 and calls == report.collectives == 4
        assert report.payload_bytes == payload


# --------------------------------------------------------------------------- cudadriver
class _CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2


class _FakeBindings:
    """Stands in for ``cuda.bindings.driver``: ``cuMemAddressReserve`` answers
    ``(status, 0x10000)``."""

    def __init__(self) -> None:
        self.status = _CUresult.CUDA_SUCCESS

    def cuInit(self, flags: int) -> tuple[_CUresult]:
        return (_CUresult.CUDA_SUCCESS,)

    def cuMemAddressReserve(
        self, size: int, alignment: int, addr: int, flags: int
    ) -> tuple[_CUresult, int]:
        return (self.status, 0x10000)


def test_the_bindings_driver_maps_out_of_memory_to_memory_error_and_others_to_arena_error() -> None:
    """Plant: the cuda-python driver raises ArenaError for CUDA_ERROR_OUT_OF_MEMORY too, so
    growth and wake would not report out of memory (nor count it)."""
    bindings = _FakeBindings()
    driver = BindingsDriver(bindings)
    assert driver.address_reserve(1 << 20, 1 << 16) == 0x10000
    bindings.status = _CUresult.CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(MemoryError, match="cuMemAddressReserve"):
        driver.address_reserve(1 << 20, 1 << 16)
    bindings.status = _CUresult.CUDA_ERROR_INVALID_VALUE
    with pytest.raises(ArenaError, match="cuMemAddressReserve") as info:
        driver.address_reserve(1 << 20, 1 << 16)
    assert not isinstance(info.value, MemoryError)


# --------------------------------------------------------------------------- virtual host
def test_a_limited_address_space_halves_the_reservation_but_never_below_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plant: the halving loop drops its ``max(need, ...)`` floor, so a reservation halved
    past the request ends smaller than the block it must hold."""
    limit = 5 << 20
    made = virtual._Range

    def limited(size: int, protect: Any) -> Any:
        if size > limit:  # as under ulimit -v: larger ranges cannot be had
            raise MemoryError(f"cannot reserve {size} bytes of address space (fake limit)")
        return made(size, protect)

    monkeypatch.setattr(virtual, "_Range", limited)
    source = virtual.VirtualHostSource(reserve=64 << 20)
    block = source.reserve(limit)
    assert source.reserved(block) == limit
    block.owner[-1] = 1  # committed to its last byte
    source.release(block)


# --------------------------------------------------------------------------- step release
def _released_then_more(ws: Arena, last: int) -> Any:
    """A step whose first view is released before the second request; its book."""
    with ws.step("s") as st:
        (a,) = st.get_simultaneous(((256,), F32))
        st.release(a)
        st.get_simultaneous(((256,), F32))
        st.get_simultaneous(((last,), F32))
        slot = st.slot
    assert slot is not None
    return books_of(slot)["s"]


def test_a_replay_that_diverges_after_a_hit_release_records_the_fresh_runs_lifetimes(
    hit_path: str,
) -> None:
    """Plant: the compiled release notes the released block's last use one request late,
    so the replay that diverges records it overlapping the next request."""
    with Arena("cpu", framework="numpy") as fresh:
        record = _released_then_more(fresh, 4096)
        expected = (list(record.firsts), list(record.lasts), list(record.sizes))
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 20)
        for _ in range(3):  # recorded, then replays (their releases take the hit)
            _released_then_more(ws, 256)
        book = _released_then_more(ws, 4096)  # diverges at its last request
        assert (list(book.firsts), list(book.lasts), list(book.sizes)) == expected


# --------------------------------------------------------------------------- Triton asleep
def test_a_triton_block_is_not_served_while_asleep_even_within_its_size() -> None:
    """Plant: the Triton allocator's own asleep check is dropped; a size its stream's block
    already covers is then served over memory sleep() released."""
    pytest.importorskip("torch")
    with Arena("cpu", framework="numpy", source="virtual", max_bytes=1 << 24) as ws:
        allocate = ws.triton_allocator()
        allocate(4096, 16, 7)  # the stream's block
        ws.sleep(level=2)
        with pytest.raises(ArenaAsleepError, match="Triton"):
            allocate(1024, 16, 7)  # fits the block: no growth would ask
        ws.wake()
        assert allocate(1024, 16, 7).numel() == 1024


# --------------------------------------------------------------------------- ledger close
@dataclass
class _FailingRelease(RecordingSource):
    """Its ``release`` raises once, when armed."""

    armed: bool = False

    def release(self, allocation: Allocation) -> None:
        if self.armed:
            self.armed = False
            raise ArenaError("release failed (fake)")
        super().release(allocation)


def test_close_reports_a_failed_release_after_releasing_every_other_block() -> None:
    """Plant: ``Ledger.release_each`` keeps releasing past a failure but never raises it,
    so close() reports success over a block the source did not take back."""
    source = _FailingRelease()
    ws = Arena("cpu", framework="numpy", source=source)
    ws.get_simultaneous(((100,), F32))
    ws.get_persistent("kv", (10,), F32)
    ws.get_library_workspace("lib", 512)
    assert len(source.live) == 3
    source.armed = True
    with pytest.raises(ArenaError, match="fake"):
        ws.close()
    assert ws.is_closed and len(source.live) <= 1  # the others went back
