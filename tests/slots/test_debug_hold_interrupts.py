"""Debug mode holds a slot for the thread inside a scope or step until the region closes.
An interrupt in a region's close (a KeyboardInterrupt at any call into or return from
arena's code there), then the close run again, must leave the slot free: the close once
left the slot held for good when the interrupt landed after the slot dropped the region
(the close run again found it not open and never let go)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

from arena import Arena
from tests.interrupts import Injector

F32 = "float32"


def _open(ws: Arena, kind: str) -> Any:
    region = ws.scope() if kind == "scope" else ws.step("k")
    region.__enter__()
    region.get_simultaneous(((16,), F32))
    return region


def _interrupted_exit(region: Any, at: int) -> bool:
    """``region.__exit__`` with an interrupt at arena event ``at``; whether it fired."""
    injector = Injector(at)
    sys.settrace(injector)
    try:
        region.__exit__(None, None, None)
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return injector.fired


def _free_for_another_thread(ws: Arena) -> str:
    """'' when another thread can request on the slot, else its error."""
    found: list[str] = []

    def other() -> None:
        try:
            ws.get_simultaneous(((4,), F32))
        except Exception as error:  # the finding
            found.append(f"{type(error).__name__}: {error}")

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(10)
    return found[0] if found else ""


def _points(ws_factory: Callable[[], Arena], kind: str) -> int:
    ws = ws_factory()
    region = _open(ws, kind)
    injector = Injector()
    sys.settrace(injector)
    try:
        region.__exit__(None, None, None)
    finally:
        sys.settrace(None)
    ws.close()
    return injector.count


@pytest.mark.parametrize("kind", ["scope", "step"])
@pytest.mark.parametrize("runs", [0, 1, 2], ids=["record", "plan", "replay"])
def test_an_exit_interrupted_anywhere_and_run_again_lets_the_slot_go(
    hit_path: str, kind: str, runs: int
) -> None:
    def factory() -> Arena:
        ws = Arena("cpu", framework="numpy", debug=True)
        for _ in range(runs):
            region = _open(ws, kind)
            region.__exit__(None, None, None)
        return ws

    damaged = []
    points = _points(factory, kind)
    assert points > 3
    for at in range(1, points + 1):
        ws = factory()
        slot = ws.numpy._select()
        region = _open(ws, kind)
        fired = _interrupted_exit(region, at)
        assert fired
        region.__exit__(None, None, None)  # again, as the with statement's owner would
        state = (slot.stack.regions, slot.holder.thread, slot.holder.depth)
        problem = _free_for_another_thread(ws)
        if state != ([], None, 0) or problem:
            damaged.append((at, state[1:], problem))
        ws.close()
    assert damaged == []


def test_an_interrupted_close_of_a_region_nested_in_another_keeps_the_outer_hold(
    hit_path: str,
) -> None:
    """Leaving once per region: the retried inner close does not drop the hold the
    outer scope still needs."""
    with Arena("cpu", framework="numpy", debug=True) as ws:
        slot = ws.numpy._select()
        outer = _open(ws, "scope")
        inner = _open(ws, "scope")
        counts = Injector(counts=lambda frame: frame.f_code.co_qualname == "Slot.close_region")
        # The return of Slot.close_region: the slot dropped the region, the close did not
        # go on.
        counts.at = 2
        sys.settrace(counts)
        try:
            inner.__exit__(None, None, None)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert counts.fired
        inner.__exit__(None, None, None)
        inner.__exit__(None, None, None)  # and again: nothing more
        assert (slot.holder.thread, slot.holder.depth) == (threading.current_thread(), 1)
        assert _free_for_another_thread(ws).startswith("SlotError")
        outer.__exit__(None, None, None)
        assert (slot.holder.thread, slot.holder.depth) == (None, 0)
        assert _free_for_another_thread(ws) == ""
