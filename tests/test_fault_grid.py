"""Failures crossed, not one at a time: every growth route, with the slot's buffer captured
by a CUDA graph or not, failing at the allocation, at the exit of ``alloc_context`` or at a
release, with each kind of exception. Every cell ends with the books balanced and with
``release_retired(include_captured=True)`` freeing nothing the slot still serves (freeing
it would be a use-after-free on a GPU)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from arena import Allocation, Arena, ArenaWarning
from tests.gates import Probe, live_block_of
from tests.sources import RecordingSource, check_books

F32 = "float32"
OLD = 4096  # (1000,) float32, rounded up to 256
NEW = 1 << 18  # (1 << 16,) float32

FAULTS = [MemoryError, KeyboardInterrupt, RuntimeError]
WHERE = ["allocation", "context exit", "release"]


@dataclass
class GridSource(RecordingSource):
    """A host source that raises ``fault`` once, at the next allocation or release after
    :meth:`arm` (a release takes the block back before it raises)."""

    armed: str = ""
    fault: type[BaseException] = MemoryError

    def arm(self, where: str, fault: type[BaseException]) -> None:
        self.armed, self.fault = where, fault

    def allocate(self, nbytes: int) -> Allocation:
        if self.armed == "allocation":
            self.armed = ""
            raise self.fault(f"injected at the allocation of {nbytes} bytes")
        return super().allocate(nbytes)

    def release(self, allocation: Allocation) -> None:
        super().release(allocation)
        if self.armed == "release":
            self.armed = ""
            raise self.fault(f"injected at the release of {allocation.nbytes} bytes")


class ExitFault:
    """An alloc_context whose exit raises once after :meth:`arm`, after a successful
    allocation."""

    def __init__(self) -> None:
        self.fault: type[BaseException] | None = None

    @contextmanager
    def __call__(self) -> Iterator[None]:
        yield
        fault, self.fault = self.fault, None
        if fault is not None:
            raise fault("injected at the exit of alloc_context")


def _arm(source: GridSource, context: ExitFault, where: str, fault: type[BaseException]) -> None:
    if where == "context exit":
        context.fault = fault
    else:
        source.arm(where, fault)


def _grow(a: Arena, route: str) -> None:
    if route == "request":
        a.get_simultaneous(((1 << 16,), F32))
    elif route == "reserve":
        a.reserve_bytes(NEW)
    else:  # lock() brings ubatch 1 to ubatch 0's size
        a.lock()


def _slot_ptr(a: Arena, ubatch: int) -> int:
    with a.ubatch(ubatch):
        (view,) = a.get_simultaneous(((1000,), F32))
    return a.numpy.data_ptr(view)


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("captured", [False, True], ids=["plain", "captured"])
@pytest.mark.parametrize("route", ["request", "reserve", "lock"])
def test_a_fault_anywhere_in_a_growth_leaves_true_books_and_a_served_buffer_kept(
    route: str, captured: bool, where: str, fault: type[BaseException]
) -> None:
    source = GridSource()
    context = ExitFault()
    probe = Probe()
    a = Arena(
        source=source, ubatches=2, framework="numpy", alloc_context=context, capture_probe=probe
    )
    ubatch = 1 if route == "lock" else 0  # the slot whose buffer the growth replaces
    with a.ubatch(ubatch):
        a.get_simultaneous(((1000,), F32))
        if captured:
            probe.capturing = True
            a.get_simultaneous(((1000,), F32))  # served during a capture: a graph reads it
            probe.capturing = False
    before = _slot_ptr(a, ubatch)
    if route == "lock":
        a.get_simultaneous(((1 << 16,), F32))  # ubatch 0 grows; lock() sizes ubatch 1
    _arm(source, context, where, fault)

    # A captured buffer is retired, never released, and lock() releases nothing: then the
    # growth succeeds and the armed release fault lands on release_retired() below.
    grows = where == "release" and (captured or route == "lock")
    if grows:
        if route == "lock" and captured:  # lock() says it replaced a captured buffer
            with pytest.warns(ArenaWarning, match="a CUDA graph captured its old buffer"):
                _grow(a, route)
        else:
            _grow(a, route)
        slot = a.stats().slots[ubatch]
        assert (slot.capacity, slot.retired_bytes, slot.retired_buffers) == (NEW, OLD, 1)
    else:
        with pytest.raises(fault):
            _grow(a, route)
        slot = a.stats().slots[ubatch]
        assert slot.capacity == OLD  # the old capacity came back
        assert (slot.retired_bytes, slot.retired_buffers) == (0, 0)  # not left retired
        assert not a.is_locked
        if captured and route != "lock":  # the block the graph reads is the slot's again
            assert _slot_ptr(a, ubatch) == before
    check_books(a, source)

    # After a failed lock(), a request on ubatch 1 would grow it (its sibling did): its
    # buffer is still the one it had.
    served = before if route == "lock" and not grows else _slot_ptr(a, ubatch)
    block = live_block_of(source, served)
    assert block is not None
    if grows:
        with pytest.raises(fault):
            a.release_retired(include_captured=True)
        assert live_block_of(source, before) is None  # the retired block went back
    else:
        assert a.release_retired(include_captured=True) == 0
    assert live_block_of(source, served) == block  # what the slot serves was not freed
    assert a.stats().slots[ubatch].retired_buffers == 0
    check_books(a, source)
    a.close()
    assert source.live == {}


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("where", ["allocation", "context exit"])
def test_a_fault_creating_a_persistent_buffer_leaves_no_entry_and_true_books(
    where: str, fault: type[BaseException]
) -> None:
    source = GridSource()
    context = ExitFault()
    a = Arena(source=source, framework="numpy", alloc_context=context)
    a.get_simultaneous(((1000,), F32))
    _arm(source, context, where, fault)
    with pytest.raises(fault):
        a.get_persistent("kv", (64,), F32)
    assert a.stats().slots[0].persistent_keys == 0
    assert a.stats().slots[0].persistent_bytes == 0
    check_books(a, source)
    (kv,) = [a.get_persistent("kv", (64,), F32)]  # the key can be made afterwards
    assert kv.shape == (64,)
    check_books(a, source)
    a.close()
    assert source.live == {}


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("where", WHERE)
def test_a_fault_while_the_old_size_is_restored_leaves_an_empty_slot_that_grows_again(
    where: str, fault: type[BaseException]
) -> None:
    """The growth fails and so does the allocation that restores the old size: the slot
    holds nothing, the books balance, and its next request grows it from nothing."""
    source = GridSource()
    context = ExitFault()
    a = Arena(source=source, framework="numpy", alloc_context=context)
    a.get_simultaneous(((1000,), F32))
    if where == "release":  # the old block's release fails, then the restore does too
        source.arm("release", fault)
        original = source.release

        def release_then_arm(allocation: Allocation) -> None:
            source.release = original  # type: ignore[method-assign]
            try:
                original(allocation)
            finally:
                source.arm("allocation", MemoryError)
                context.fault = None

        source.release = release_then_arm  # type: ignore[method-assign]
    else:
        calls = {"n": 0}
        inner = source.allocate

        def fail_twice(nbytes: int) -> Allocation:
            calls["n"] += 1
            if calls["n"] <= 2:
                if where == "context exit" and calls["n"] == 1:
                    context.fault = fault
                    return inner(nbytes)
                raise (fault if calls["n"] == 1 else MemoryError)("injected")
            return inner(nbytes)

        source.allocate = fail_twice  # type: ignore[method-assign]
    with pytest.raises(fault):
        a.get_simultaneous(((1 << 16,), F32))
    slot = a.stats().slots[0]
    assert (slot.capacity, slot.retired_buffers) == (0, 0)
    check_books(a, source)
    assert a.release_retired(include_captured=True) == 0
    (view,) = a.get_simultaneous(((1000,), F32))  # grows again from nothing
    assert live_block_of(source, a.numpy.data_ptr(view)) is not None
    assert a.stats().slots[0].capacity == OLD
    check_books(a, source)
    a.close()
    assert source.live == {}
