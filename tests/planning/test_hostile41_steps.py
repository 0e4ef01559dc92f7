"""Hostile review (hostile41): what a step says when two threads run it on one slot."""

from __future__ import annotations

import threading

import pytest

from arena import Arena, ArenaError


def test_a_step_running_on_another_thread_names_the_slot_per_thread_fix() -> None:
    """Two threads that bind no micro-batch share slot 0; the second to enter step 's'
    was told only to give "the inner step a key of its own": there is no inner step, and
    two keys on one slot from two threads interleave their regions (docs/overview.md,
    Threads and safety: give each concurrently running thread its own slot)."""
    with Arena("cpu", framework="numpy") as ws:
        inside, done = threading.Event(), threading.Event()

        def first() -> None:
            with ws.step("s") as step:
                step.get_simultaneous(((64,), "float32"))
                inside.set()
                done.wait()

        thread = threading.Thread(target=first)
        thread.start()
        try:
            inside.wait()
            fix = r"give each thread its own slot: with ws\.ubatch"
            with pytest.raises(ArenaError, match=fix), ws.step("s"):
                pass
        finally:
            done.set()
            thread.join()
