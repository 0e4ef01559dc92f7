"""Review round 38 (planning): steps and scopes attacked as a hostile user would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

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
