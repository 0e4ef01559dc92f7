"""A step's enter planning its slot while lock() in another thread merges the lane's plans
(review 39).

A step's second run plans every recorded key of its slot at its enter; ``lock()`` plans
the lane's keys and gives the micro-batches one merged plan per key. The enter planned
outside the arena's mutex, so lock() could merge a key between the enter's reading of its
block sizes and the enter's installing offsets for them: the book kept the merged sizes
with offsets planned for the old ones, and its replays handed out overlapping views (a
stress of three micro-batch threads running steps against a fourth locking and unlocking
saw it about once in 100 rounds of 0.5 s). The enter now plans under the mutex.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import arena
import arena.planning.plan as plan_module
from arena.slots.table import SlotTable

F = "float32"
TIMEOUT = 10


def _run(ws: arena.Arena, key: str, sizes: list[int]) -> list[bool]:
    """One run of the step ``key``: each view filled with its number, then checked."""
    with ws.step(key) as st:
        views = [st.get_simultaneous(((n,), F))[0] for n in sizes]
        for i, view in enumerate(views):
            view[...] = i + 1
        return [bool((view == i + 1).all()) for i, view in enumerate(views)]


def _waits_in(thread: threading.Thread, function: Callable[..., Any]) -> bool:
    """Whether ``thread``'s innermost Python frame runs ``function`` (blocked there, when
    it stays so)."""
    frame = sys._current_frames().get(thread.ident or -1)
    return frame is not None and frame.f_code is function.__code__


def test_lock_merging_a_plan_while_a_step_enter_plans_the_slot_leaves_no_stale_offsets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step's second run plans every recorded key of its slot at its enter; lock() in
    another thread plans and merges the lane's keys. The enter read key "b"'s sizes,
    lock() then gave "b" the lane's merged plan (micro-batch 1's larger blocks), and the
    enter installed offsets for the old sizes over it: "b"'s next run, locked, handed out
    two live views 512 bytes apart, 6000 bytes each."""
    ws = arena.Arena("cpu", framework="numpy", ubatches=2, profile=False)
    with ws.ubatch(1):
        assert _run(ws, "b", [1500, 1500]) == [True, True]
        assert _run(ws, "b", [1500, 1500]) == [True, True]  # planned: 6144 B blocks
    with ws.ubatch(0):
        assert _run(ws, "b", [100, 100]) == [True, True]  # recorded: 512 B blocks
        assert _run(ws, "a", [100]) == [True]  # recorded

    entering, go = threading.Event(), threading.Event()
    real_plan_offsets = plan_module.plan_offsets

    def plan_offsets(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "worker" and not entering.is_set():
            entering.set()  # the enter read "b"'s sizes: hold it here
            assert go.wait(TIMEOUT)
        return real_plan_offsets(*args, **kwargs)

    monkeypatch.setattr(plan_module, "plan_offsets", plan_offsets)
    results: list[Any] = []

    def worker() -> None:
        with ws.ubatch(0):
            results.append(_run(ws, "a", [100]))  # its enter plans "b" and "a"

    step_thread = threading.Thread(target=worker, name="worker")
    step_thread.start()
    assert entering.wait(TIMEOUT)
    locker = threading.Thread(target=ws.lock, name="locker")
    locker.start()
    deadline = time.monotonic() + TIMEOUT
    waiting = 0
    while locker.is_alive() and waiting < 20 and time.monotonic() < deadline:
        # lock() waits for the enter's planning (the fix), or merges meanwhile.
        waiting = waiting + 1 if _waits_in(locker, SlotTable.lock) else 0
        time.sleep(0.005)
    go.set()
    step_thread.join(TIMEOUT)
    locker.join(TIMEOUT)
    assert results == [[True]] and ws.is_locked
    with ws.ubatch(0):
        for _ in range(2):  # locked replays of micro-batch 1's warm-up sizes
            assert _run(ws, "b", [1500, 1500]) == [True, True]
    ws.close()


def _held_elsewhere(mutex: Any) -> bool:
    """Whether another thread holds ``mutex`` (this one cannot take it at once)."""
    taken: list[bool] = []

    def probe() -> None:
        got = mutex.acquire(blocking=False)
        taken.append(got)
        if got:
            mutex.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(TIMEOUT)
    return taken == [False]


@pytest.mark.parametrize("inside", ["scope", "step"])
def test_a_step_enter_inside_a_scope_or_step_plans_its_key_under_the_mutex(
    monkeypatch: pytest.MonkeyPatch, inside: str
) -> None:
    """Under an open scope or step, a step's second run plans only its own key
    (plan_for_run's second branch, not fit_to_plans): that plan, too, is made under the
    arena's mutex, as lock() merges plans under it (the enter read the key's sizes, lock()
    merged them, the enter installed offsets for the old sizes). Fails with the branch's
    ``with slot.governor.mutex`` left out (planted, 2026-12-03)."""
    ws = arena.Arena("cpu", framework="numpy", profile=False)
    held: list[bool] = []
    real_make_plan = plan_module.make_plan

    def make_plan(book: Any, alignment: int) -> Any:
        held.append(_held_elsewhere(ws._governor.mutex))
        return real_make_plan(book, alignment)

    monkeypatch.setattr(plan_module, "make_plan", make_plan)
    outer = ws.scope() if inside == "scope" else ws.step("outer")
    with outer:
        for _ in range(3):  # records, plans at its enter, replays
            assert _run(ws, "inner", [100, 300]) == [True, True]
    assert held and all(held)
    ws.close()
