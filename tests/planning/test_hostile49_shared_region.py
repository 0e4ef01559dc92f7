"""One step (or scope) object entered by two threads at once: the second enter must
raise, as entering a running step raises.

The enter checks that the object is not running, then picks the caller's slot, which
calls the arena's ``ubatch_resolver``: user code, where another thread may run. A thread
held there while another entered the same object on its own slot went on and entered it
too: the object then stood for the first thread's run, the second thread's region stayed
open on its slot for good, and the key never ran there again ("step 'k' is already
running on slot (ubatch 1, lane 0)")."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from arena import Arena, ArenaError
from tests.gates import TIMEOUT
from tests.sources import check_books

F32 = "float32"


@pytest.mark.parametrize("kind", ["step", "scope"])
def test_a_second_enter_held_in_the_resolver_raises(kind: str, hit_path: str) -> None:
    held, go = threading.Event(), threading.Event()
    first_out = threading.Event()
    armed = [True]

    def resolver() -> int:
        name = threading.current_thread().name
        if name == "first" and armed[0]:
            armed[0] = False
            held.set()
            assert go.wait(TIMEOUT)
        return 1 if name == "other" else 0

    ws = Arena("cpu", framework="numpy", ubatches=2, ubatch_resolver=resolver)
    shared: Any = ws.step("k") if kind == "step" else ws.scope()
    seen: dict[str, str] = {}

    def first() -> None:
        try:
            with shared as region:
                region.get_simultaneous(((64,), F32))
                seen["first"] = "entered"
        except ArenaError as error:
            seen["first"] = str(error)
        first_out.set()

    def other() -> None:
        with shared as region:
            region.get_simultaneous(((64,), F32))
            go.set()  # the first thread goes on while this run is open
            first_out.wait(TIMEOUT)
            seen["other"] = "entered"

    threads = [threading.Thread(target=first, name="first")]
    threads[0].start()
    assert held.wait(TIMEOUT)
    threads.append(threading.Thread(target=other, name="other"))
    threads[1].start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert seen["other"] == "entered"
    refused = {  # the whole message (Round 20: scopes.py's _enter_on #3, #4)
        "step": "step 'k' is already running; make a new ws.step()",
        "scope": "this scope is already open; make a new one with ws.scope()",
    }
    assert seen["first"] == refused[kind]
    with ws:
        for index in (0, 1):
            slot = ws._table.slots[index]
            assert slot.stack.regions == [] and slot.stack.top == 0
        check_books(ws)
        for name in ("first", "other"):  # the key runs again on both slots
            threading.current_thread().name, before = name, threading.current_thread().name
            try:
                with ws.step("k") as step:
                    step.get_simultaneous(((64,), F32))
            finally:
                threading.current_thread().name = before
