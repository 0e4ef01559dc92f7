"""Ledger.replace: a slot's growth in one visit to the ledger (release, then allocate), with
the guarantees of the two calls it stands for."""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pytest

from arena import Allocation
from arena.errors import ArenaOutOfMemoryError
from arena.memory.ledger import Ledger
from tests.sources import FailingSource, RecordingSource


def balanced(ledger: Ledger, source: RecordingSource) -> None:
    """The ledger's counters agree, and the source holds exactly the blocks it counts."""
    assert ledger.allocations == ledger.frees + ledger.live_blocks
    assert sorted(source.live) == sorted(a.ptr for a in ledger.blocks())
    assert ledger.live_bytes == sum(a.nbytes for a in ledger.blocks())


@dataclass
class WatchingSource(RecordingSource):
    """Records, at each allocation, whether the memory of ``watched`` is still alive."""

    watched: list[weakref.ref[Any]] = field(default_factory=list)
    alive_at_allocation: list[bool] = field(default_factory=list)

    def allocate(self, nbytes: int) -> Allocation:
        self.alive_at_allocation.append(any(ref() is not None for ref in self.watched))
        return super().allocate(nbytes)


def test_replace_releases_the_held_block_before_it_allocates_the_new_one() -> None:
    """The caller's list is emptied as the block is counted freed, so the old memory is
    gone (no frame holds it) when the source is asked for the new block: the peak is the
    new size (slip: the ledger kept the block in a local across the allocation)."""
    source = WatchingSource()
    ledger = Ledger(source)
    old = ledger.allocate(4096, "old")
    source.watched.append(weakref.ref(old.owner))
    held = [old]
    del old
    new = ledger.replace(held, 8192, "new")
    assert held == []
    assert source.alive_at_allocation == [False, False]
    assert source.events == [("allocate", 4096), ("release", 4096), ("allocate", 8192)]
    assert [(action, n) for action, _, n, _, _ in ledger.trace] == [
        ("allocate", 4096),
        ("free", 4096),
        ("allocate", 8192),
    ]
    assert ledger.holds(new) and ledger.frees == 1
    balanced(ledger, source)


@pytest.mark.parametrize("observed", [False, True])
def test_replace_with_nothing_held_or_an_observer_is_release_then_allocate(
    observed: bool,
) -> None:
    events: list[tuple[str, int]] = []
    source = RecordingSource()

    def observer(action: str, ptr: int, nbytes: int, what: str) -> None:
        events.append((action, nbytes))

    ledger = Ledger(source, observer=observer if observed else None)
    first = ledger.replace([], 1024, "first")
    held = [first]
    del first
    second = ledger.replace(held, 2048, "second")
    assert held == [] and ledger.holds(second)
    assert events == ([("allocate", 1024), ("free", 1024), ("allocate", 2048)] if observed else [])
    balanced(ledger, source)


def test_a_refused_replacement_releases_the_old_block_and_names_the_request() -> None:
    source = FailingSource(limit=4096)
    ledger = Ledger(source)
    held = [ledger.allocate(4096, "old")]
    with pytest.raises(ArenaOutOfMemoryError, match=r"could not allocate 8192 bytes .* for new"):
        ledger.replace(held, 8192, "new")
    assert held == [] and ledger.ooms == 1 and ledger.live_blocks == 0
    assert ledger.trace[-1][:3] == ("allocate failure", 0, 8192)
    balanced(ledger, source)


def _calls_in(function: Callable[[], Allocation], at: int) -> tuple[Allocation | None, bool]:
    """Run ``function`` raising KeyboardInterrupt at the ``at``-th call or return event of
    the package's memory layer (the ledger's, the host source's): (events seen, whether it
    fired). A fake source's own frames are left alone (a source that fails midway through
    a release is release()'s documented case: the block counted freed either way). Returns
    what ``function`` returned (None when interrupted) and whether the interrupt fired."""
    seen = 0
    fired = False
    files = (
        os.path.join("arena", "memory", "ledger.py"),
        os.path.join("arena", "memory", "sources.py"),
    )

    def tick(frame: Any, event: str, arg: Any) -> Any:
        nonlocal seen, fired
        if event in ("call", "return") and frame.f_code.co_filename.endswith(files):
            seen += 1
            if seen == at:
                fired = True
                raise KeyboardInterrupt(f"injected at event {at}")
        return local

    def local(frame: Any, event: str, arg: Any) -> Any:
        return tick(frame, event, arg) if event == "return" else local

    result = None
    sys.settrace(tick)
    try:
        result = function()
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return result, fired


def test_an_interrupt_anywhere_in_a_replacement_leaves_the_books_true() -> None:
    """Wherever an interrupt lands, the counters balance, the source holds exactly the
    counted blocks, and a block still in the caller's list is still counted live (the
    caller's again); one gone from it was released (slip: the list emptied before the
    block was counted freed, or the block counted freed and never given back)."""
    at = 1
    while True:
        source = RecordingSource()
        ledger = Ledger(source)
        block = ledger.allocate(4096, "old")
        held = [block]
        del block
        mark = ledger.allocations
        new, fired = _calls_in(partial(ledger.replace, held, 8192, "new"), at)
        got = [] if new is None else [new]
        if not got:
            ledger.reclaim(mark)  # what a caller's except clause does (Slot._grow)
        if held:
            assert ledger.holds(held[0]), at
        assert all(ledger.holds(a) for a in got), at
        assert ledger.live_blocks == len(held) + len(got), at
        balanced(ledger, source)
        if not fired:
            break
        at += 1
    assert at > 5  # the injector reached every event of the path


def test_the_old_memory_is_a_plain_array_until_replaced() -> None:
    """The fixture's premise: a host block's memory lives as long as its array."""
    array = np.empty(16, np.uint8)
    ref = weakref.ref(array)
    del array
    assert ref() is None
