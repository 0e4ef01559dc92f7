"""A request made from inside ``alloc_context`` while the same slot grows.

The slot's growth installs an empty buffer, then asks the ledger for the new block inside
``alloc_context``. A request the hook made on the same slot there saw the empty buffer and
grew the slot itself; the outer growth then installed its own block over the inner one,
which stayed allocated, held by nothing of the slot, until ``close()`` (the arena's live
bytes were 81920 where its slot held 16384). Such a request is refused, naming the hook,
and the slot's books stay whole."""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from arena import Arena, ArenaError
from tests.gates import moving_only
from tests.sources import RecordingSource, check_books

F32 = "float32"


def test_a_request_inside_alloc_context_during_the_slots_growth_is_refused() -> None:
    source = RecordingSource()
    inner: list[BaseException] = []
    armed = [False]

    @contextmanager
    def hook() -> Iterator[None]:
        if armed[0]:
            armed[0] = False
            try:
                ws.get_simultaneous(((1 << 14,), F32))
            except ArenaError as error:
                inner.append(error)
        yield

    ws = Arena("cpu", framework="numpy", alloc_context=hook, source=source)
    with ws:
        ws.get_simultaneous(((16,), F32))
        armed[0] = True
        (view,) = ws.get_simultaneous(((1 << 12,), F32))  # the outer growth goes on
        assert view.shape == (1 << 12,)
        assert len(inner) == 1
        assert "alloc_context" in str(inner[0]) and "growing" in str(inner[0])
        assert "asked to grow to 65536 bytes" in str(inner[0])  # the inner request's size
        check_books(ws, source)
        assert ws.stats().live_bytes == ws.stats().slots[0].capacity == 1 << 14
        # The slot grows again as usual afterwards.
        ws.get_simultaneous(((1 << 14,), F32))
        check_books(ws, source)


def test_a_request_on_another_slot_inside_alloc_context_is_served() -> None:
    """Only the growing slot refuses: another slot's growth inside the hook is served."""
    source = RecordingSource()
    served: list[object] = []
    armed = [False]

    @contextmanager
    def hook() -> Iterator[None]:
        if armed[0]:
            armed[0] = False
            with ws.ubatch(1):
                served.append(ws.get_simultaneous(((1 << 10,), F32))[0].shape)
        yield

    ws = Arena("cpu", framework="numpy", ubatches=2, alloc_context=hook, source=source)
    with ws:
        armed[0] = True
        ws.get_simultaneous(((1 << 12,), F32))
        assert served == [(1 << 10,)]
        check_books(ws, source)


def test_a_request_inside_the_sources_commit_during_an_in_place_growth_is_refused() -> None:
    """Round 20: the same on a fixed-address source, whose growth commits in place (the old
    buffer stays installed while the source commits): a request the source makes on the
    slot there is refused, and the slot keeps the one committed block."""
    from arena.memory.virtual import VirtualHostSource

    inner: list[BaseException] = []
    armed = [False]

    class RequestingSource(VirtualHostSource):
        def commit(self, allocation: Any, nbytes: int) -> Any:
            if armed[0]:
                armed[0] = False
                try:
                    ws.get_simultaneous(((1 << 14,), F32))
                except ArenaError as error:
                    inner.append(error)
            return super().commit(allocation, nbytes)

    ws = Arena("cpu", framework="numpy", source=RequestingSource(reserve=64 << 20))
    with ws:
        ws.get_simultaneous(((16,), F32))
        armed[0] = True
        (view,) = ws.get_simultaneous(((1 << 12,), F32))  # the outer growth goes on
        assert view.shape == (1 << 12,)
        assert len(inner) == 1
        assert "asked to grow to 65536 bytes while it is growing" in str(inner[0])
        assert ws.stats().live_bytes == ws.stats().slots[0].capacity == 1 << 14
        ws.get_simultaneous(((1 << 14,), F32))  # and grows again as usual
        assert ws.stats().live_bytes == ws.stats().slots[0].capacity == 1 << 16


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@moving_only(
    "a moving growth's placeholder; an in-place growth commits at the same address "
    "without alloc_context, so the hook this test waits in is never entered"
)
def test_a_growth_a_fork_left_unfinished_is_replaced_by_the_childs_own() -> None:
    """Round 20: a fork while another thread's growth waits in ``alloc_context`` leaves the
    child that growth's placeholder installed, and no thread to finish it; the child's own
    request on the slot grows it (the refusal is for a growth inside the same thread's)."""
    entered, release = threading.Event(), threading.Event()
    armed = [False]

    @contextmanager
    def hook() -> Iterator[None]:
        if armed[0] and threading.current_thread().name == "grower":
            armed[0] = False
            entered.set()
            release.wait(30)
        yield

    ws = Arena("cpu", framework="numpy", alloc_context=hook)
    with ws:
        ws.get_simultaneous(((16,), F32))
        armed[0] = True
        grower = threading.Thread(
            target=lambda: ws.get_simultaneous(((1 << 12,), F32)), name="grower"
        )
        grower.start()
        assert entered.wait(30)
        with warnings.catch_warnings():
            # Python 3.12+ (and JAX, where another test loaded it) warn that forking a
            # multi-threaded process may deadlock; the child takes no lock the grower holds.
            warnings.simplefilter("ignore")
            pid = os.fork()
        if pid == 0:  # the child: its own growth of the slot
            code = 1
            try:
                (view,) = ws.get_simultaneous(((1 << 13,), F32))
                code = 0 if view.shape == (1 << 13,) else 2
            finally:
                os._exit(code)
        release.set()
        grower.join(30)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert ws.get_simultaneous(((1 << 12,), F32))[0].shape == (1 << 12,)
