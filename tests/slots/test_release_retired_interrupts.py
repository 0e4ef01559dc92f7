"""An interrupt anywhere in ``release_retired()`` leaves the books balanced (review 39).

``release_retired()`` took each slot's retired buffers out of the slot, then released
them all. An interrupt after a slot gave its retired buffers up and before the release
(at the call or return of a store's ``take_retired``) lost them: the ledger still counted
them live, no slot held them, so ``stats()`` disagreed with what the slots hold and no
later ``release_retired()`` could find them; only ``close()`` gave them back.
"""

from __future__ import annotations

import sys
from types import FrameType

from arena import Arena
from tests.interrupts import Injector
from tests.sources import RecordingSource, check_books

_TRACED = ("arena.memory.", "arena.slots.")


def _traced(frame: FrameType) -> bool:
    return bool(frame.f_globals.get("__name__", "").startswith(_TRACED))


def _arena() -> tuple[Arena, RecordingSource]:
    """Two micro-batches, the smaller one's buffer retired by lock(), each with a
    persistent buffer and a library workspace (stores that take_retired asks too)."""
    source = RecordingSource()
    ws = Arena("cpu", ubatches=2, framework="numpy", source=source, profile=False)
    for ubatch, n in ((1, 1000), (0, 4096)):  # 1 first: lock() grows it
        with ws.ubatch(ubatch):
            ws.numpy.get_simultaneous(((n,), "float32"))
            ws.numpy.get_persistent("p", (16,), "float32")
            ws.get_library_workspace("lib", 512)
    ws.lock()  # micro-batch 1's 4 KB buffer is retired, not released
    assert sum(s.retired_bytes for s in ws.stats().slots) > 0
    return ws, source


def _count() -> int:
    ws, _ = _arena()
    injector = Injector(0, counts=_traced)
    sys.settrace(injector)
    try:
        ws.release_retired(include_captured=True)
    finally:
        sys.settrace(None)
    ws.close()
    return injector.count


def test_an_interrupted_release_retired_keeps_the_books_and_frees_what_it_took() -> None:
    points = _count()
    assert points > 10
    damaged = []
    for at in range(1, points + 1):
        ws, source = _arena()
        injector = Injector(at, counts=_traced)
        sys.settrace(injector)
        try:
            ws.release_retired(include_captured=True)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert injector.fired
        try:
            check_books(ws, source)
        except AssertionError as error:
            damaged.append(f"{injector.where}: {error}")
        ws.release_retired(include_captured=True)  # what is left retired goes now
        assert sum(s.retired_bytes for s in ws.stats().slots) == 0
        check_books(ws, source)
        ws.close()
        assert source.live == {}
    assert not damaged, damaged
