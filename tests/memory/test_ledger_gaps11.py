"""Gaps in the ledger tests that mutation Round 11 found (mutants of
``arena/memory/ledger.py`` that survived every test of the ``ledger`` group), each test
failing with its mutant planted: the event log and the trace of an in-place commit, the
error a collected arena's leftover release raises."""

from __future__ import annotations

import contextlib
import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arena import Arena, ArenaOutOfMemoryError
from arena.memory.ledger import Ledger
from arena.memory.sources import Allocation
from arena.memory.virtual import PAGE, VirtualHostSource
from tests.sources import FaultySource


class _RefusingCommit(VirtualHostSource):
    """A fixed-address source whose in-place commits are refused once ``refuse`` is set."""

    refuse = False

    def commit(self, allocation: Allocation, nbytes: int) -> Allocation:
        if self.refuse:
            raise MemoryError(f"no {nbytes} bytes")
        return super().commit(allocation, nbytes)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("context", [False, True])
def test_an_in_place_commit_logs_the_old_block_freed_and_the_grown_one_allocated(
    tmp_path: Path, context: bool
) -> None:
    """The event log of a fixed-address growth, with and without ``alloc_context``: the
    block reserved, then the old size freed and the new size allocated at the same
    address (Round 11: ``Ledger.commit`` #72 logged the free at no address, ``allocate``
    #34 the allocation inside ``alloc_context`` with no size)."""
    path = tmp_path / "events.csv"
    entered: list[int] = []

    @contextlib.contextmanager
    def counted() -> Iterator[None]:
        entered.append(1)
        yield

    options: dict[str, Any] = {"alloc_context": counted} if context else {}
    with Arena(
        "cpu", source="virtual", max_bytes="16MiB", framework="numpy", event_log=path, **options
    ) as ws:
        ws.numpy.get_simultaneous(((PAGE,), "uint8"))
        ws.numpy.get_simultaneous(((4 * PAGE,), "uint8"))  # committed in place
        rows = _rows(path)
    assert [(r["Action"], int(r["Size"])) for r in rows[:3]] == [
        ("allocate", PAGE),
        ("free", PAGE),
        ("allocate", 4 * PAGE),
    ]
    assert rows[0]["Pointer"].startswith("0x")
    assert rows[1]["Pointer"] == rows[0]["Pointer"] == rows[2]["Pointer"]
    assert bool(entered) == context


def test_a_refused_commit_is_traced_as_an_oom_of_its_size() -> None:
    """A commit the source refuses: the ledger's trace (the snapshot's device trace)
    holds an ``oom`` of the size asked (Round 11: ``Ledger.commit`` #10 traced nothing
    readable, and the snapshot failed)."""
    source = _RefusingCommit(reserve=1 << 24)
    with Arena("cpu", source=source, framework="numpy") as ws:
        ws.numpy.get_simultaneous(((PAGE,), "uint8"))
        source.refuse = True
        with pytest.raises(ArenaOutOfMemoryError, match="could not commit"):
            ws.numpy.get_simultaneous(((4 * PAGE,), "uint8"))
        trace = ws.memory_snapshot()["device_traces"][0]
        assert [(e["action"], e["size"]) for e in trace][-1] == ("oom", 4 * PAGE)


def test_a_collected_arenas_leftover_release_raises_the_first_error_after_all() -> None:
    """The finalizer of an arena collected in a cycle (``Ledger.leftovers``) releases
    every block and raises the first release's error (Round 11: ``_release_leftovers``
    #21 swallowed it)."""
    source = FaultySource(fail_release_at={1})
    ledger = Ledger(source)
    ledger.allocate(256, "first")
    ledger.allocate(512, "second")
    release = ledger.leftovers()
    with pytest.raises(MemoryError, match="injected fault at release #1"):
        release()
    assert source.live == {} and source.release_calls == 2
