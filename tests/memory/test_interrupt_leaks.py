"""Interrupts at every point of growth and release: every block goes back to its source
exactly once, and the ledger's books match what the slots hold, whatever is interrupted.

A trace function raises ``KeyboardInterrupt`` at the n-th call or return event of the
memory, slot and event-log modules (a return event's exception replaces the value
returned: the caller never sees the block a callee just allocated), for every n the
program reaches.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from arena import Arena
from tests.interrupts import Injector
from tests.sources import RecordingSource, check_books

_TRACED = ("arena.memory.", "arena.slots.", "arena.observe.snapshot", "arena.slots.workspaces")


def _traced(frame: FrameType) -> bool:
    """The frames whose calls and returns count: the memory, slot and event-log modules."""
    return bool(frame.f_globals.get("__name__", "").startswith(_TRACED))


def _growth_program(ws: Arena) -> None:
    front = ws.numpy
    for n in (64, 1024, 4096):  # plain growth, the old block released first
        front.get_simultaneous(((n,), "float32"))
    ws.get_persistent("weights", (256,), "float32")  # a persistent block
    with ws.scope() as s:  # growth while a region is open
        s.get_simultaneous(((8192,), "float32"))
    ws.reserve_bytes(1 << 16)
    ws.release_retired()


def _lock_program(ws: Arena) -> None:
    ws.numpy.get_simultaneous(((512,), "float32"))
    ws.reserve_bytes(1 << 14, lane=None)
    ws.lock()  # sizes the sibling of the lane to match, releasing nothing
    ws.unlock()
    ws.release_retired(include_captured=True)


def _run(program: Callable[[Arena], None], at: int, tmp_log: Any) -> tuple[int, bool]:
    source = RecordingSource()
    ws = Arena("cpu", ubatches=2, framework="numpy", source=source, event_log=tmp_log)
    injector = Injector(at, counts=_traced)
    sys.settrace(injector)
    try:
        program(ws)
        ws.close()
    except KeyboardInterrupt:
        assert injector.fired
    finally:
        sys.settrace(None)
    if not ws.is_closed:
        check_books(ws, source)  # the books match what the slots hold, interrupt or not
    ws.close()  # again: whatever an interrupted close() left is released now
    allocated = source.allocations()
    released = [n for kind, n in source.events if kind == "release"]
    assert source.live == {}, f"interrupt at event {at}: blocks never released"
    assert sorted(released) == sorted(allocated), f"interrupt at event {at}"
    stats = ws.stats()
    assert stats.allocations == stats.frees == len(allocated)
    assert stats.live_bytes == 0
    return injector.count, injector.fired


def _workspace_program(ws: Arena) -> None:
    ws.get_library_workspace("lib", 4096)
    ws.get_library_workspace("lib", 16384)  # grows: the old block is released
    ws.lock()  # the sibling gets the workspace too
    ws.unlock()


@pytest.mark.parametrize("program", [_growth_program, _lock_program, _workspace_program])
def test_an_interrupt_at_every_point_of_growth_and_release_leaks_nothing(
    program: Callable[[Arena], None], tmp_path: Any
) -> None:
    total, fired = _run(program, 0, tmp_path / "events.csv")
    assert not fired and total > 50
    for at in range(1, total + 1):
        _run(program, at, tmp_path / f"events{at % 2}.csv")
