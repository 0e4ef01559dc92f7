"""A growth in one visit to the ledger (``Ledger.replace``) whose release of the old
block fails (review35): the source's own ``MemoryError`` comes out, no OOM is counted and
no allocation failure traced, as with an ``alloc_context`` (the two calls as they are).
Slip: the fast path reported it as a refused allocation of the new size
(``ArenaOutOfMemoryError``, ``ooms`` + 1, an ``"allocate failure"`` traced) for an
allocation never attempted."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from arena import Arena
from tests.sources import FaultySource, check_books


def _grow_with_a_failing_release(**options: Any) -> tuple[BaseException, int, list[str]]:
    source = FaultySource(fail_release_at={1}, fault=MemoryError)
    with Arena("cpu", framework="numpy", source=source, **options) as a:
        a.numpy.get_simultaneous(((100,), "float32"))
        with pytest.raises(MemoryError) as info:
            a.numpy.get_simultaneous(((100_000,), "float32"))  # grows: release, allocate
        check_books(a, source)
        ledger = a._governor.ledger
        return info.value, ledger.ooms, [event[0] for event in ledger.trace]


def test_a_failed_release_in_a_growth_is_not_reported_as_a_refused_allocation() -> None:
    slow = _grow_with_a_failing_release(alloc_context=contextlib.nullcontext)
    fast = _grow_with_a_failing_release()
    assert "injected fault at release #1" in str(slow[0])
    assert (type(fast[0]), str(fast[0])) == (type(slow[0]), str(slow[0]))
    assert fast[1] == slow[1] == 0  # no OOM: no allocation was refused
    assert "allocate failure" not in fast[2]
