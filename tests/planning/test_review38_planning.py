"""Review round 38 (planning): steps and scopes attacked as a hostile user would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from types import FrameType
from typing import Any

import pytest

from arena import Arena, SpecError
from arena.planning.books import books_of
from tests.conftest import need_compiled_hit

#: A step recorded awake, then run again while the arena sleeps on a fixed-address source
#: with poisoning on (its replay reserves the plan's bytes: the step's end is above its
#: base with no request made, and every request is refused while asleep).
_ASLEEP_STEP = textwrap.dedent(
    """
    from arena import Arena, ArenaAsleepError
    ws = Arena("cpu", framework="numpy", poison=True, source="virtual")
    with ws.step("k") as step:
        step.get_simultaneous(((1,), "int16"), ((64,), "float32"))
    ws.sleep(1)
    with ws.step("k") as step:
        try:
            step.get_simultaneous(((3,), "float64"))
        except ArenaAsleepError:
            pass
    ws.wake()
    with ws.step("k") as step:
        step.get_simultaneous(((1,), "int16"), ((64,), "float32"))
    ws.close()
    print("survived")
    """
)


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "python"])
def test_a_poisoning_step_run_while_asleep_writes_no_released_memory(pure: bool) -> None:
    """The exit of a step run while the arena sleeps poisons nothing: its bytes are
    released (the virtual source unmapped them, and wake(poison=True) poisons the
    discarded scratch). Before, the exit poisoned the replayed plan's bytes in the
    released range and the process died of a segmentation fault, on either hit path."""
    if not pure:
        need_compiled_hit()
    env = dict(os.environ)
    env.pop("ARENA_PURE_PYTHON", None)
    if pure:
        env["ARENA_PURE_PYTHON"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _ASLEEP_STEP],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "survived" in done.stdout


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
def test_a_step_key_holding_a_nan_is_refused_before_it_gets_a_book(
    hit_path: str, nested: bool
) -> None:
    """A tuple key with a NaN inside seems equal to itself (a tuple compares its items by
    identity first), but a new NaN object never finds its book again: every run made a
    new book, recorded anew and was never planned (5 runs, 5 books; the slot's books grew
    with every call). Refused as a bare NaN key is, naming the key, and the slot keeps
    no book of it (either hit path)."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            with pytest.raises(SpecError, match=r"step key .*nan.* is not equal to itself"):
                nan = float("nan")  # a new NaN object per run, as computed keys are
                with ws.step((1, (nan,)) if nested else ("layer", nan)) as step:
                    step.get_simultaneous(((4,), "float32"))
        assert books_of(ws.numpy._select()) == {}
        with ws.step(("layer", 1.5)) as step:  # a float that is no NaN is a key like any
            step.get_simultaneous(((4,), "float32"))


def _interrupt_at_call(name: str) -> tuple[Any, list[bool]]:
    """A trace function raising KeyboardInterrupt once, at the call of arena's function
    ``name`` (``"name:return"``: at its return); and a list that holds True once it
    fired."""
    fired: list[bool] = []
    name, _, at = name.partition(":")

    def at_return(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return" and not fired:
            fired.append(True)
            raise KeyboardInterrupt(name)
        return at_return

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if event == "call" and not fired and code.co_name == name and "arena" in code.co_filename:
            if at == "return":
                return at_return
            fired.append(True)
            raise KeyboardInterrupt(name)
        return None

    return trace, fired


def _another_threads_request(ws: Arena) -> list[BaseException]:
    """What a plain request from another thread raised (nothing: an empty list)."""
    errors: list[BaseException] = []

    def other() -> None:
        try:
            ws.get_simultaneous(((4,), "float32"))
        except BaseException as error:  # which one is the finding
            errors.append(error)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    return errors


@pytest.mark.parametrize("kind", ["scope", "step"])
@pytest.mark.parametrize("where", ["open_region", "push", "enter:return"])
def test_an_enter_interrupted_before_its_region_opens_does_not_hold_the_debug_slot(
    hit_path: str, kind: str, where: str
) -> None:
    """Debug mode: an enter holds the slot for its thread, then opens its region. An
    interrupt at Slot.open_region or RegionStack.push (before the region is on the stack),
    or at the return of Slot.enter (before the enter's cleanup began), left the hold in
    place: no region to close or heal, so every later request from
    another thread raised SlotError naming the interrupted thread, for good (both hit
    paths; the enter's cleanup let go only for ArenaClosedError)."""
    with Arena("cpu", framework="numpy", debug=True) as ws:

        def run() -> None:
            with ws.scope() if kind == "scope" else ws.step("k") as region:
                region.get_simultaneous(((4,), "float32"))

        run()  # the step recorded: the next enter is its plan's
        trace, fired = _interrupt_at_call(where)
        sys.settrace(trace)
        try:
            with pytest.raises(KeyboardInterrupt):
                run()
        finally:
            sys.settrace(None)
        assert fired
        assert _another_threads_request(ws) == []
        run()  # and the interrupted thread runs again
        assert ws.numpy._select().stack.regions == []


def test_a_key_holding_a_nan_inside_a_frozenset_is_refused(hit_path: str) -> None:
    """A frozenset finds its items by identity first too: frozenset({nan}) seemed equal to
    itself, and each call with a new NaN made a new persistent buffer or step book (as a
    tuple's did). Both are refused as a NaN key is."""
    with Arena("cpu", framework="numpy") as ws:
        with pytest.raises(SpecError, match=r"persistent key .* is not equal to itself"):
            ws.get_persistent(frozenset([float("nan")]), (4,), "float32")
        refused = pytest.raises(SpecError, match=r"step key .* is not equal to itself")
        with refused, ws.step(frozenset([float("nan")])) as step:
            step.get_simultaneous(((4,), "float32"))
        assert books_of(ws.numpy._select()) == {}
        ws.get_persistent(frozenset([1.5]), (4,), "float32")  # no NaN: a key like any


@pytest.mark.parametrize("kind", ["scope", "step"])
def test_an_exit_interrupted_at_the_slots_leave_is_healed_once_its_owner_is_gone(
    hit_path: str, kind: str
) -> None:
    """Debug mode: an exit let go of the slot after the stack had dropped the region, so
    an interrupt at the call of Slot.leave kept the slot held with no region left open to
    close or heal: every later request from another thread raised SlotError, for good.
    The exit lets go first; the region, still open, is healed once nothing refers to it,
    and the healing lets go."""
    with Arena("cpu", framework="numpy", debug=True) as ws:

        def run() -> None:
            with ws.scope() if kind == "scope" else ws.step("k") as region:
                region.get_simultaneous(((4,), "float32"))

        run()  # the step recorded: the next enter is its plan's
        trace, fired = _interrupt_at_call("leave")
        sys.settrace(trace)
        try:
            with pytest.raises(KeyboardInterrupt):
                run()  # the region object dies with run's frame
        finally:
            sys.settrace(None)
        assert fired
        run()  # the next enter heals what nothing refers to any more
        assert _another_threads_request(ws) == []
        assert ws.numpy._select().stack.regions == []


def test_a_plain_request_interrupted_at_its_debug_hold_lets_go(hit_path: str) -> None:
    """Debug mode: a plain request held the slot before its try, so an interrupt at the
    return of Slot.enter kept the slot held by the interrupted thread: every later request
    from another thread raised SlotError, for good."""
    with Arena("cpu", framework="numpy", debug=True) as ws:
        ws.get_simultaneous(((4,), "float32"))
        trace, fired = _interrupt_at_call("enter:return")
        sys.settrace(trace)
        try:
            with pytest.raises(KeyboardInterrupt):
                ws.get_simultaneous(((4,), "float32"))
        finally:
            sys.settrace(None)
        assert fired
        assert _another_threads_request(ws) == []
