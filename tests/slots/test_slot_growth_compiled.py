"""A slot's compiled growth for a request (``SlotGrowth.grow``, arena/slots/_growth.c, which
``Slot.ensure`` calls first) against its pure-Python mirror (``Slot.ensure`` and
``Slot._grow`` with it set aside): the same slot, buffer and books, the same errors, a
slot restored after a failure, nothing done wherever it declines, flat reference counts;
and ``ARENA_PURE_PYTHON=1`` runs the mirror."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from arena import Arena
from arena.base.layout import MAX_BYTES
from arena.environment import flag_from_env
from arena.errors import ArenaError, ArenaOutOfMemoryError
from arena.memory.ledger import Ledger
from arena.memory.sources import HostSource
from arena.memory.virtual import VirtualHostSource
from arena.slots import slot as slots
from arena.slots.governor import Governor
from arena.slots.slot import Buffer, Slot
from tests.conftest import check_pure_python_switch
from tests.gates import Probe
from tests.refcounts import assert_counts_flat
from tests.sources import check_books

REQUIRE_COMPILED = flag_from_env("ARENA_REQUIRE_COMPILED")
#: Request sizes in bytes, one growth each but the repeats (served from the buffer).
SIZES = [256, 300, 4096, 4000, 10_000, 1 << 20, 1 << 20, 3 << 20]


def _grow() -> Callable[[Slot, int], Any]:
    """The compiled growth; the test skips where it is not in use."""
    grow = slots._GROW[0] if slots._GROW else slots._compiled_growth()
    if grow is None:
        reason = "the compiled host allocation is not in use here"
        if REQUIRE_COMPILED and os.environ.get("ARENA_PURE_PYTHON") != "1":
            pytest.fail(f"ARENA_REQUIRE_COMPILED=1 but {reason}")
        pytest.skip(reason)
    return grow  # type: ignore[no-any-return]


@contextmanager
def _python_growth() -> Iterator[None]:
    """The compiled growth set aside: Slot.ensure runs in Python."""
    kept = slots._GROW[:]
    slots._GROW[:] = [None]
    try:
        yield
    finally:
        slots._GROW[:] = kept


def _buffer(buffer: Buffer) -> tuple[Any, ...]:
    """Every field of a Buffer (the allocation by kind and size)."""
    allocation = buffer.allocation
    return (
        None if allocation is None else (type(allocation), allocation.nbytes),
        buffer.capacity,
        sorted(map(str, buffer.wrappers)),  # the imports and plan sources it holds
        sorted(map(str, buffer.prepared)),
        buffer.captured,
        buffer.poisoned_end,
        [type(getattr(buffer, name)) for name in Buffer.__slots__],
    )


def _state(a: Arena, slot: Slot) -> dict[str, Any]:
    """What the slot and the ledger say, addresses and times left out."""
    ledger = a._table.governor.ledger
    return {
        "slot": (slot.calls, slot.growths, slot.high_water, slot.pending, slot.detour),
        "types": tuple(type(v) for v in (slot.calls, slot.growths, slot.high_water)),
        "buffer": _buffer(slot.buffer),
        "retired": (len(slot.retired), len(slot.outgrown)),
        "books": (ledger.allocations, ledger.frees, ledger.live_blocks, ledger.ooms),
        "bytes": (ledger.live_bytes, ledger.allocated_total, ledger.freed_total),
        "peaks": (ledger.peak_bytes, ledger.peak_blocks),
        "trace": [(action, nbytes, what) for action, _, nbytes, what, _ in ledger.trace],
        "handed": None if ledger._handed is None else ledger._handed[0],
    }


def _ensured(sizes: list[int]) -> list[tuple[Any, ...]]:
    """``Slot.ensure`` along ``sizes`` on a new arena: each result and state."""
    out = []
    with Arena("cpu", framework="numpy", source=HostSource()) as a:
        slot = a.numpy._select()
        for nbytes in sizes:
            buffer, resizes = slot.ensure(nbytes)
            assert buffer is slot.buffer
            out.append(
                (
                    [(s is slot, old, new) for s, old, new in resizes],
                    type(resizes),
                    _state(a, slot),
                )
            )
        check_books(a)
    return out


def test_the_compiled_growth_does_what_the_python_one_does() -> None:
    _grow()
    compiled_run = _ensured(SIZES)
    with _python_growth():
        assert _ensured(SIZES) == compiled_run
    assert [len(resizes) for resizes, _, _ in compiled_run] == [1, 1, 1, 0, 1, 1, 0, 1]


def test_ensure_takes_it_and_calls_no_python_growth(monkeypatch: pytest.MonkeyPatch) -> None:
    _grow()
    with Arena("cpu", framework="numpy", source=HostSource()) as a:
        a.get_simultaneous(((10,), "float32"))
        slot = a.numpy._select()
        entered: list[str] = []

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "call":
                entered.append(frame.f_code.co_name)

        sys.setprofile(profile)
        try:
            (view,) = a.get_simultaneous(((4000,), "float32"))
        finally:
            sys.setprofile(None)
        assert view.nbytes == 16_000
        assert slot.buffer.capacity == 16_128  # 16 000 rounded up to 256
        assert "_grow" not in entered and "replace" not in entered
        assert "__init__" not in entered  # no Buffer made in Python
        with _python_growth():
            entered.clear()
            sys.setprofile(profile)
            try:
                a.get_simultaneous(((8000,), "float32"))
            finally:
                sys.setprofile(None)
            assert "_grow" in entered  # the mirror, set aside the compiled growth
        check_books(a)


def _declined(a: Arena, slot: Slot, nbytes: int, what: str) -> None:
    """``grow`` returns None and changes nothing."""
    before = _state(a, slot)
    buffer = slot.buffer
    assert _grow()(slot, nbytes) is None, what
    assert slot.buffer is buffer, what
    assert _state(a, slot) == before, what


@pytest.mark.parametrize(
    "case",
    [
        "fits",
        "fits exactly",
        "zero",
        "not an int",
        "locked",
        "closed",
        "asleep",
        "pending",
        "siblings",
        "poison",
        "cap",
        "capture probe",
        "captured buffer",
        "pow2",
        "past MAX_BYTES",
        "alignment past Py_ssize_t",
        "fixed address",
        "another source",
        "observer",
        "replace set aside",
        "another C function as replace",
        "replace unbound",
    ],
)
def test_it_declines_what_it_does_not_know_with_nothing_done(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _grow()
    a = Arena("cpu", framework="numpy", **_options(case))
    try:
        a.get_simultaneous(((1000,), "float32"))
        slot = a.numpy._select()
        _declined(a, slot, _set_up(case, a, slot, monkeypatch), case)
        governor = a._table.governor
        governor.closed = False
        governor.asleep = 0
        governor.ledger.observer = None
    finally:
        a.close()


def _options(case: str) -> dict[str, Any]:
    """The arena's options for a case of the decline test."""
    options: dict[str, Any] = {"source": HostSource()}
    if case == "siblings":
        options["ubatches"] = 2
    elif case == "poison":
        options["poison"] = True
    elif case == "cap":
        options["max_bytes"] = 1 << 30
    elif case in ("capture probe", "captured buffer"):
        options["capture_probe"] = Probe()
    elif case == "pow2":
        options["growth"] = "pow2"
    elif case == "fixed address":
        options["source"] = VirtualHostSource()
    elif case == "another source":

        class Other(HostSource):
            pass

        options["source"] = Other()
    return options


def _set_up(case: str, a: Arena, slot: Slot, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The state of a case of the decline test; the request's bytes."""
    governor = a._table.governor
    nbytes: Any = 1 << 20
    if case == "fits":
        nbytes = 4000
    elif case == "fits exactly":  # another thread grew it meanwhile (planted, 2026-12-03)
        nbytes = slot.buffer.capacity
    elif case == "zero":
        nbytes = 0
    elif case == "not an int":
        nbytes = float(1 << 20)
    elif case == "locked":
        a.lock()
    elif case == "closed":
        governor.closed = True
    elif case == "asleep":
        governor.asleep = 1
    elif case == "pending":
        slot.pending = 1 << 21
    elif case == "captured buffer":
        slot.buffer.captured = True
        governor.capture_probe = None
    elif case == "past MAX_BYTES":
        nbytes = MAX_BYTES + 1
    elif case == "alignment past Py_ssize_t":
        governor.alignment = 1 << 70
    elif case == "observer":
        governor.ledger.observer = lambda *event: None
    elif case == "replace set aside":
        monkeypatch.setattr(slots, "_REPLACE", [None])
    elif case == "another C function as replace":  # the C-API's books_of says no
        monkeypatch.setattr(slots, "_REPLACE", [len])
    elif case == "replace unbound":  # HostBooks.replace of no books
        monkeypatch.setattr(slots, "_REPLACE", [type(slots._compiled_replace().__self__).replace])
    return nbytes


def test_it_declines_what_is_not_a_slot_and_checks_its_arguments() -> None:
    grow = _grow()
    assert grow(object(), 1 << 20) is None
    with pytest.raises(TypeError, match="takes 2 arguments"):
        grow(1)
    with pytest.raises(TypeError, match="knows a Buffer of 6 slots"):

        class Wider(Buffer):
            __slots__ = ("more",)

        wider: Any = Wider
        wider.__slots__ = (*Buffer.__slots__, "more")
        slots.compiled.SlotGrowth(Slot, wider, Governor, type(threading.RLock()), {}, MAX_BYTES)


def test_the_memory_layer_exports_its_replace_and_knows_no_slot() -> None:
    """Issue 27: the slot's growth is the slots layer's (arena.slots._growth); the memory
    layer's extension exports the host ledger's replace as a C-API capsule and has no
    type of the slots layer."""
    _grow()
    host = sys.modules["arena.memory._host"]
    assert type(host._C_API).__name__ == "PyCapsule"
    assert repr(host._C_API).startswith('<capsule object "arena.memory._host._C_API"')
    assert not hasattr(host, "SlotGrowth")
    assert type(slots.compiled.SlotGrowth).__name__ == "type"
    assert slots.compiled.SlotGrowth.__module__ == "arena.slots._growth"


def _refused(use_compiled: bool) -> tuple[str, dict[str, Any], int]:
    """A growth NumPy refuses (more bytes than it indexes): the error, the state after it,
    and the state after the next request."""
    with Arena("cpu", framework="numpy", source=HostSource()) as a:
        a.get_simultaneous(((1000,), "float32"))
        slot = a.numpy._select()
        if use_compiled:
            grow = _grow()
            with pytest.raises(ArenaOutOfMemoryError) as error:
                grow(slot, MAX_BYTES - 4096)
        else:
            with _python_growth(), pytest.raises(ArenaOutOfMemoryError) as error:
                slot.ensure(MAX_BYTES - 4096)
        state = _state(a, slot)
        check_books(a)
        (view,) = a.get_simultaneous(((2000,), "float32"))
        check_books(a)
        return str(error.value), state, view.nbytes


def test_a_refused_growth_restores_the_old_size_as_the_python_one_does() -> None:
    _grow()
    message, state, nbytes = _refused(use_compiled=True)
    assert (message, state, nbytes) == _refused(use_compiled=False)
    assert state["buffer"][1] == 4096  # the old capacity, in a block allocated anew
    assert state["books"] == (2, 1, 1, 1)  # the old block released, the old size again, one OOM
    assert nbytes == 8000


@pytest.mark.parametrize("fault", [KeyboardInterrupt, MemoryError, ArenaError])
def test_a_fault_after_the_old_block_went_restores_the_slot(
    fault: type[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The allocator declines (NumPy refuses), the growth calls Ledger.replace as Slot._grow
    does, and that raises: ledger.reclaim and Slot._restore run, the error is raised, the
    slot holds a buffer of its old size and the books balance."""
    grow = _grow()
    with Arena("cpu", framework="numpy", source=HostSource()) as a:
        a.get_simultaneous(((1000,), "float32"))
        slot = a.numpy._select()

        def failing(self: Ledger, held: Any, nbytes: int, what: str) -> Any:
            assert held == []  # the old block went back first
            raise fault("injected in Ledger.replace")

        monkeypatch.setattr(Ledger, "replace", failing)
        with pytest.raises(fault, match="injected"):
            grow(slot, MAX_BYTES - 4096)
        monkeypatch.undo()
        assert slot.buffer.capacity == 4096
        assert slot.buffer.allocation is not None
        assert (slot.calls, slot.growths) == (1, 1)  # the refused request not counted
        check_books(a)
        (view,) = a.get_simultaneous(((3000,), "float32"))
        assert view.nbytes == 12_000
        check_books(a)


def test_the_mutex_is_released_whatever_happens() -> None:
    grow = _grow()
    with Arena("cpu", framework="numpy", source=HostSource()) as a:
        a.get_simultaneous(((1000,), "float32"))
        slot = a.numpy._select()
        mutex = a._table.governor.mutex
        assert grow(slot, 1 << 16) is not None
        assert grow(slot, 100) is None  # declined under the mutex
        with pytest.raises(ArenaOutOfMemoryError):
            grow(slot, MAX_BYTES - 4096)
        taken = []

        def take() -> None:
            taken.append(mutex.acquire(timeout=5))
            if taken[-1]:
                mutex.release()

        worker = threading.Thread(target=take)
        worker.start()
        worker.join()
        assert taken == [True]  # free: another thread took it
        check_books(a)


def test_reference_counts_stay_flat() -> None:
    grow = _grow()
    with Arena("cpu", framework="numpy", source=HostSource()) as a:
        a.get_simultaneous(((1000,), "float32"))
        slot = a.numpy._select()
        governor = a._table.governor

        def cycle() -> int:
            with governor.mutex:
                slot._grow(256, shrinking=True)  # back to small, in Python
            buffer, _ = grow(slot, 8192)
            return buffer.capacity  # type: ignore[no-any-return]

        for _ in range(5000):  # the trace full (it keeps its events' references)
            assert cycle() == 8192
        watched = (slot, governor, governor.mutex, Slot, Buffer, Governor, slot.scratch_name)
        watched += (governor.ledger, MAX_BYTES, 8192)

        def cycles() -> None:
            for _ in range(20_000):
                cycle()

        assert_counts_flat(watched, cycles)
        buffer = slot.buffer
        assert sys.getrefcount(buffer) == 3  # buffer, the slot's, the call's argument
        check_books(a)


def test_arena_pure_python_runs_the_python_growth() -> None:
    code = (
        "from arena.slots import slot; "
        "print(slot._compiled_growth() is None, slot.WHY_PYTHON or '-')"
    )
    check_pure_python_switch(code, "arena.slots._growth", compiled="False", python="True")
