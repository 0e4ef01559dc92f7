"""Review round 38 (planning): steps and scopes attacked as a hostile user would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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
