"""Round 14b's mutation gaps in the kernels group: each test fails on the mutant it names
(planted by hand, seen to fail) and passes on the real code."""

from __future__ import annotations

from typing import Any

import pytest

from arena import Arena
from arena.memory.ledger import Ledger
from tests.gates import Probe
from tests.sources import RecordingSource, check_books


def test_a_triton_block_is_wrapped_once_for_every_size_served_from_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # triton.py TritonAllocator._tensor #3 (views.get(None)): the block's whole tensor was
    # never found among the block's cached views, so each new size or alignment served
    # from the same block wrapped the whole block again.
    pytest.importorskip("torch")
    from arena.adapters.torch import TorchAdapter

    wrapped: list[int] = []
    original = TorchAdapter.wrap

    def wrap(adapter: TorchAdapter, allocation: Any) -> Any:
        wrapped.append(allocation.nbytes)
        return original(adapter, allocation)

    monkeypatch.setattr(TorchAdapter, "wrap", wrap)
    with Arena("cpu", framework="numpy") as a:
        allocate = a.triton_allocator()
        first = allocate(4096, 16, None)
        assert len(wrapped) == 1, wrapped
        for size, alignment in ((64, 16), (128, 1), (4096, 256), (100, 4)):
            tensor = allocate(size, alignment, None)
            assert tensor.numel() == size and tensor.data_ptr() % alignment == 0
        assert len(wrapped) == 1, wrapped  # the same block, wrapped when first served
        assert first.data_ptr() == allocate(4096, 16, None).data_ptr()


def test_a_workspace_lock_shared_with_a_sibling_is_retired_after_a_capture_it_saw() -> None:
    # workspaces.py share_library_workspaces #16 (store.grow(None, ...)): the library
    # workspace lock() gave a micro-batch that never asked for it was made of no kind, so
    # when it grew after unlock() the capture seen while it was current did not count and
    # it was released, though a CUDA graph may read it.
    probe = Probe()
    source = RecordingSource()
    with Arena(source=source, framework="numpy", ubatches=2, capture_probe=probe) as a:
        with a.ubatch(0):
            a.get_library_workspace("fi", 1024)
            a.get_simultaneous(((64,), "float32"))
        a.lock()
        with a.ubatch(1):
            assert a.get_library_workspace("fi", 1024).nbytes == 1024  # lock() made it
        probe.capturing = True
        with a.ubatch(0):
            a.get_simultaneous(((64,), "float32"))  # a capture the arena sees
        probe.capturing = False
        a.unlock()
        with a.ubatch(1):
            assert a.get_library_workspace("fi", 4096).nbytes == 4096
        assert ("release", 1024) not in source.events
        assert [s.retired_bytes for s in a.stats().slots] == [0, 1024]
        assert a.release_retired() == 0  # captured: kept
        assert a.release_retired(include_captured=True) == 1024
        check_books(a, source)


@pytest.mark.parametrize("zero_init", [True, False])
def test_a_workspace_lock_shared_with_a_sibling_grows_as_the_one_it_copies(
    zero_init: bool,
) -> None:
    # workspaces.py share_library_workspaces #27 (zero_init left out) and #29 (`not in`):
    # the workspace lock() gave a micro-batch that never asked for it lost (or gained) the
    # zero_init of the sibling's, so its growth after unlock() received the old contents
    # where it must be zero (or was zeroed where the contents must be kept).
    with Arena("cpu", framework="numpy", ubatches=2) as a:
        with a.ubatch(0):
            a.get_library_workspace("fi", 1024, zero_init=zero_init)
        a.lock()
        with a.ubatch(1):
            view = a.get_library_workspace("fi", 1024)  # lock() made it
            assert view.nbytes == 1024
            view[:] = 0xAB
        a.unlock()
        with a.ubatch(1):
            grown = a.get_library_workspace("fi", 4096)
        assert grown.nbytes == 4096
        if zero_init:
            assert not grown.any(), grown[:16]
        else:
            assert (grown[:1024] == 0xAB).all(), grown[:16]


def test_an_interrupt_before_the_old_workspace_is_released_keeps_it_retired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # workspaces.py WorkspaceStore.grow #97 (held = None): an interrupt that landed as a
    # growth let the old block go, before the ledger released it, left the block held by
    # the ledger and in no store: close() never released it.
    source = RecordingSource()
    original = Ledger.release
    interrupted: list[int] = []

    def release(ledger: Ledger, allocation: Any, streams: Any = ()) -> None:
        if allocation.nbytes == 1024 and not interrupted:
            interrupted.append(allocation.nbytes)
            raise KeyboardInterrupt  # as if it landed at the call, before anything ran
        original(ledger, allocation, streams)

    with Arena(source=source, framework="numpy") as a:
        a.get_library_workspace("fi", 1024)
        monkeypatch.setattr(Ledger, "release", release)
        with pytest.raises(KeyboardInterrupt):
            a.get_library_workspace("fi", 4096)
        assert interrupted == [1024]
        assert a.get_library_workspace("fi", 4096).nbytes == 4096  # the growth stands
        assert a.stats().slots[0].retired_bytes == 1024  # the old block kept, not lost
        check_books(a, source)
        assert a.release_retired() == 0  # kept as a captured one: until asked
        assert a.release_retired(include_captured=True) == 1024
        check_books(a, source)
    assert not source.live
