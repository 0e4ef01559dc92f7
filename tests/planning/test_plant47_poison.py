"""Plant round 47 on the compiled step enter (``enter_replay`` in
``arena/planning/_region_hit.c``, taken by a replay on a locked arena): a step of a
poisoning arena (``poison=True``) is no quick replay, so its release and exit run the
Python path, which poisons the bytes released and the run's bytes at its end. An enter
that set the step quick without the poison term let the compiled release and exit serve
locked replays: nothing was poisoned there, and reading stale scratch after ``lock()``
went unnoticed (poisoning's whole point)."""

from __future__ import annotations

import numpy as np

from arena import Arena


def test_a_locked_replay_poisons_what_it_releases_and_its_run_at_exit() -> None:
    spec = ((16,), "float32")
    with Arena("cpu", framework="numpy", poison=True) as ws:

        def run() -> tuple[np.ndarray, np.ndarray]:
            with ws.step("k") as st:
                (released,) = st.get_simultaneous(spec)
                released[...] = 1.0
                st.release(released)
                after_release = released.copy()
                (kept,) = st.get_simultaneous(spec)
                kept[...] = 2.0
            return after_release, kept

        for _ in range(3):  # record, plan, replay
            run()
        ws.lock()
        for _ in range(2):  # locked replays: the compiled enter where it is built
            after_release, kept = run()
            assert np.isnan(after_release).all()  # poisoned as it was released
            assert np.isnan(kept).all()  # the run's bytes poisoned at its exit
