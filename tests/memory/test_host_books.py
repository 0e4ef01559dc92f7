"""The compiled growth of a host ledger (``compiled_replace()``: ``HostBooks.replace``,
arena/memory/_host.c), then ``Ledger.replace`` where it declines, as a slot's growth calls
them, against its pure-Python mirror (``Ledger.replace`` over ``Ledger._take``): the same
books, the same trace, the same errors, flat reference counts; and ``ARENA_PURE_PYTHON=1``
runs the mirror."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import pytest

from arena import Arena
from arena.environment import flag_from_env
from arena.errors import ArenaOutOfMemoryError
from arena.memory.ledger import Ledger, compiled_replace
from arena.memory.sources import Allocation, HostSource
from arena.slots import slot as slots
from tests.conftest import check_pure_python_switch
from tests.refcounts import assert_counts_flat

REQUIRE_COMPILED = flag_from_env("ARENA_REQUIRE_COMPILED")
WHAT = "the scratch buffer of slot (ubatch 0, lane 0)"


def _books() -> Any:
    """The compiled ``replace``; the test skips where it is not in use."""
    books = compiled_replace()
    if books is None:
        reason = "the compiled host allocation is not in use here"
        if REQUIRE_COMPILED and os.environ.get("ARENA_PURE_PYTHON") != "1":
            pytest.fail(f"ARENA_REQUIRE_COMPILED=1 but {reason}")
        pytest.skip(reason)
    return books


def _state(ledger: Ledger, held: list[Allocation], block: Allocation | None) -> dict[str, Any]:
    """Everything the books say, addresses and times left out (they differ per run)."""
    handed = ledger._handed
    return {
        "counts": (ledger.allocations, ledger.frees, ledger.live_blocks, ledger.ooms),
        "bytes": (ledger.live_bytes, ledger.allocated_total, ledger.freed_total),
        "peaks": (ledger.peak_bytes, ledger.peak_blocks),
        "types": tuple(type(v) for v in (ledger.live_bytes, ledger.peak_bytes)),
        "handed": None if handed is None else (handed[0], handed[1] is block),
        "live": [a is block for a in ledger.blocks()],
        "held": len(held),
        "trace": [
            (action, nbytes, what, type(ptr), type(when))
            for action, ptr, nbytes, what, when in ledger.trace
        ],
        "last traced": None if block is None else ledger.trace[-1][1] == block.ptr,
        "block": None if block is None else (type(block), block.nbytes, block.owner.nbytes),
    }


def _grow(ledger: Ledger, held: list[Allocation], nbytes: int, compiled: bool) -> Allocation:
    """A slot's growth's call: the compiled replace, then Ledger.replace where it declines
    (``compiled`` False: Ledger.replace alone, the mirror)."""
    block = compiled_replace()(ledger, held, nbytes, WHAT) if compiled else None
    return ledger.replace(held, nbytes, WHAT) if block is None else block


def _growths(steps: list[tuple[int, str]], compiled: bool) -> list[dict[str, Any]]:
    """A ledger over a HostSource grown along ``steps`` (bytes, how), its state after each.

    How: ``"held"`` the last block handed in ``held``; ``"none"`` nothing held; ``"foreign"``
    a block the ledger never counted in ``held``; ``"kept"`` the last block still counted
    but another block handed since (``_handed`` not it)."""
    ledger = Ledger(HostSource())
    last: Allocation | None = None
    states = []
    for nbytes, how in steps:
        if how == "held":
            held = [] if last is None else [last]
        elif how == "foreign":
            held = [HostSource().allocate(64)]
        elif how == "kept":
            ledger.allocate(32, "another block")
            held = [] if last is None else [last]
        else:
            held = []
        last = None
        block = _grow(ledger, held, nbytes, compiled)
        last = block
        states.append(_state(ledger, held, block))
    return states


STEPS = [
    (256, "held"),
    (4096, "held"),
    (10_000, "held"),
    (100, "none"),
    (5000, "foreign"),
    (7000, "kept"),
    (1 << 20, "held"),
    (3, "held"),
]


def test_the_compiled_growth_keeps_the_books_the_python_one_keeps() -> None:
    _books()
    assert _growths(STEPS, compiled=True) == _growths(STEPS, compiled=False)


def test_a_slots_growth_takes_it() -> None:
    books = _books()
    calls = []

    def counted(*args: Any) -> Any:
        calls.append(args[2])
        return books(*args)

    kept = slots._REPLACE[:]
    slots._REPLACE[:] = [counted]
    try:
        with Arena("cpu", framework="numpy", source=HostSource()) as arena:
            arena.get_simultaneous(((10,), "float32"))
            arena.get_simultaneous(((1000,), "float32"))
            stats = arena.stats()
    finally:
        slots._REPLACE[:] = kept
    assert calls == [256, 4096]
    assert (stats.allocations, stats.frees) == (2, 1)


def test_it_declines_what_it_does_not_know_with_nothing_done() -> None:
    books = _books()
    ledger = Ledger(HostSource())
    block = ledger.allocate(100, WHAT)
    before = _state(ledger, [block], block)

    class Other(Ledger):
        __slots__ = ()

    other = Other(HostSource())

    class OtherSource(HostSource):
        pass

    observed = Ledger(HostSource(), observer=lambda *event: None)
    in_context = Ledger(HostSource(), alloc_context=contextlib.nullcontext)
    subclassed = Ledger(OtherSource())
    for args in (
        (observed, [], 10, WHAT),  # an observer: Ledger.replace calls it
        (in_context, [], 10, WHAT),  # an allocation context
        (subclassed, [], 10, WHAT),  # a HostSource's subclass may allocate otherwise
    ):
        assert books(*args) is None
        assert args[0].allocations == 0
    for args in (
        (other, [block], 10, WHAT),  # not the Ledger class itself
        (ledger, (block,), 10, WHAT),  # not a list
        (ledger, [block, block], 10, WHAT),  # more than one block
        (ledger, ["not a block"], 10, WHAT),
        (ledger, [block], 10.0, WHAT),  # not an int
        (ledger, [block], True, WHAT),
        (ledger, [block], 0, WHAT),
        (ledger, [block], -5, WHAT),
        (ledger, [block], 1 << 70, WHAT),  # past Py_ssize_t
    ):
        held = args[1]
        shown = list(held)  # type: ignore[call-overload]
        assert books(*args) is None
        assert list(held) == shown  # type: ignore[call-overload]  # nothing released
        assert _state(ledger, [block], block) == before
    assert other.allocations == 0
    with pytest.raises(TypeError, match="takes 4 arguments"):
        books(ledger, [block], 10)


def _refused(use_compiled: bool) -> tuple[str, dict[str, Any]]:
    """A growth NumPy refuses (more bytes than it indexes): the error and the books."""
    ledger = Ledger(HostSource())
    block = ledger.replace([], 100, WHAT)
    held = [block]
    with pytest.raises(ArenaOutOfMemoryError) as error:
        _grow(ledger, held, sys.maxsize - 100, use_compiled)
    del block
    return str(error.value), _state(ledger, held, None)


def test_a_refused_growth_raises_and_counts_as_the_python_one_does() -> None:
    _books()
    message, state = _refused(use_compiled=True)
    assert (message, state) == _refused(use_compiled=False)
    assert state["counts"] == (1, 1, 0, 1)  # the old block went back first
    assert "could not allocate" in message


def test_reference_counts_stay_flat() -> None:
    books = _books()
    ledger = Ledger(HostSource())
    block = ledger.replace([], 4096, WHAT)
    for _ in range(3000):  # the trace full (TRACE_LIMIT events): it keeps its events' refs
        block = books(ledger, [block], 4096, WHAT)
    watched = (WHAT, HostSource, Allocation, Ledger, 4096)

    def replacements() -> None:
        nonlocal block
        for _ in range(20_000):
            block = books(ledger, [block], 4096, WHAT)

    assert_counts_flat(watched, replacements)
    # The ledger holds the block once in its books and once as the last handed out.
    assert sys.getrefcount(block) == 4  # block, _live, _handed, the call's argument
    assert ledger.allocations in (23_001, 43_001) and ledger.live_blocks == 1


def test_the_ledgers_own_objects_keep_their_reference_counts() -> None:
    # planted49: books_release without its Py_DECREF of the trace it read (a reference to
    # the ledger's trace deque kept per block released) passed tests/memory: the count
    # test above watches the arguments and types, not the ledger's own objects.
    books = _books()
    ledger = Ledger(HostSource())
    block = ledger.replace([], 4096, WHAT)
    for _ in range(3000):  # the trace full, as above
        block = books(ledger, [block], 4096, WHAT)
    watched = (ledger, ledger.trace)

    def replacements() -> None:
        nonlocal block
        for _ in range(20_000):
            block = books(ledger, [block], 4096, WHAT)

    assert_counts_flat(watched, replacements)


def test_an_arena_grows_through_it() -> None:
    _books()
    with Arena("cpu", framework="numpy", source=HostSource()) as arena:
        small = arena.get_simultaneous(((10,), "float32"))[0]
        small[:] = 1.0
        views = arena.get_simultaneous(((1000,), "float32"), ((3, 5), "int8"))
        views[0][:] = 2.0
        stats = arena.stats()
        assert (stats.allocations, stats.frees) == (2, 1)
        assert small.tolist() == [1.0] * 10  # the outgrown buffer lives on for its views
        assert views[0].sum() == 2000.0


def test_arena_pure_python_runs_the_python_growth() -> None:
    code = (
        "from arena.memory import ledger, sources; print(ledger.compiled_replace() is None, "
        "sources.WHY_PYTHON or '-')"
    )
    check_pure_python_switch(code, "arena.memory._host", compiled="False", python="True")
