"""Hostile review, round 5: lifetime planning (steps, scopes, lanes) and the kernel-library
workspaces, through the public API only. Each test shows one finding."""

from __future__ import annotations

import warnings
from typing import Any

from arena import Arena

F32 = "float32"


def _ptrs(*views: Any) -> list[int]:
    return [int(v.ctypes.data) for v in views]


def test_lock_merging_an_outer_plan_does_not_warn_about_the_nested_step() -> None:
    """lock() merges the lane's plans of "outer" (micro-batch 1 saw a smaller view, so its
    merged plan is larger and "inner", nested in it, now starts higher). The first locked
    run of micro-batch 1 then warns that "inner" starts at another height than its plan and
    tells the user to enter it at the same stack height, though the user did and no CUDA
    graph was captured: lock() moved it."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:

        def program(n: int) -> None:
            with ws.step("outer") as outer:
                outer.get_simultaneous(((n,), F32))
                with ws.step("inner") as inner:
                    inner.get_simultaneous(((64,), F32))

        for ubatch, n in ((0, 100), (0, 100), (1, 50), (1, 50)):
            with ws.ubatch(ubatch):
                program(n)
        ws.lock()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for ubatch, n in ((0, 100), (1, 50)):
                with ws.ubatch(ubatch):
                    program(n)


def test_a_planned_step_keeps_its_pointers_when_a_sibling_micro_batch_records() -> None:
    """docs/planning.md: when a key is planned the slot is sized up front and "the planned
    runs then never grow it, so their pointers repeat from the first". Micro-batch 0 plans
    the step on its second run (the slot shrinks to the plan); micro-batch 1 then records
    the same program by first fit, grows to the first-fit size and marks micro-batch 0 to
    grow to match: micro-batch 0's next planned run grows, and its step's pointers move
    (and both slots end at the first-fit size, not the plan)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:

        def program() -> list[Any]:
            ws.get_simultaneous(((100,), F32))
            with ws.step("k") as st:
                a, b = st.get_simultaneous(((64,), F32), ((300,), F32))
                st.release(a)
                (c,) = st.get_simultaneous(((100,), F32))
                return [a, b, c]

        program()
        # Micro-batch 0's key is planned: its pointers from here. The views are kept, so
        # a new buffer cannot come back at the old address by chance.
        planned = program()
        with ws.ubatch(1):
            program()  # records (first fit): larger than the plan
            program()
        assert _ptrs(*program()) == _ptrs(*planned)


def test_a_key_planned_by_another_keys_replay_inside_a_scope_is_sized_up_front() -> None:
    """Step "b" runs twice inside a scope: its second run plans every recorded key of the
    slot, "a" included, but cannot size the slot (a scope is open). "a" then enters its
    first planned run already planned, so nothing sizes the slot for it: the run grows
    the slot halfway (its scope sits above the plan's end, higher than its first fit), and
    the views it made before the growth are not where its next runs put them."""
    with Arena("cpu", framework="numpy") as ws:

        def program() -> list[Any]:
            with ws.step("a") as st:
                (w,) = st.get_simultaneous(((64,), F32))
                with ws.scope() as s:
                    (v,) = s.get_simultaneous(((3000,), F32))
                (x,) = st.get_simultaneous(((64,), F32))
            with ws.scope():
                for _ in range(2):
                    with ws.step("b"):
                        pass
            return [w, v, x]

        program()  # records "a"; "b"'s second run plans "a" too
        first_planned = program()  # kept: a new buffer cannot reuse its address
        assert _ptrs(*program()) == _ptrs(*first_planned)


def test_lock_gives_a_micro_batch_that_ran_a_smaller_library_workspace_the_lanes_size() -> None:
    """lock() gives a micro-batch that never asked for a library workspace the lane's
    largest size ("lock() gives it the workspace too"), and brings every scratch buffer of
    a lane to the largest; but a micro-batch that asked for a smaller size during warm-up
    keeps it, so after lock() it cannot serve what its sibling (or a micro-batch that
    never ran) serves: ArenaLockedError."""
    with Arena("cpu", framework="numpy", ubatches=3) as ws:
        ws.get_library_workspace("flashinfer", 256 << 10)
        with ws.ubatch(1):
            ws.get_library_workspace("flashinfer", 64 << 10)
        ws.lock()
        with ws.ubatch(2):  # never ran: gets the lane's size
            assert ws.get_library_workspace("flashinfer", 256 << 10).nbytes == 256 << 10
        with ws.ubatch(1):
            assert ws.get_library_workspace("flashinfer", 256 << 10).nbytes == 256 << 10


def test_lock_sizes_the_lane_for_a_nested_step_plan_it_merged() -> None:
    """Two micro-batches run "inner" inside "outer" with the same requests and lifetimes
    but the large view in another place (x large on micro-batch 0, y on 1). lock() merges
    "inner" to the largest size of each view, a plan larger than either micro-batch's own,
    but sizes the lane with "outer"'s reach measured over each micro-batch's own "inner":
    after lock() both micro-batches raise ArenaLockedError on the very program they warmed
    up (planned_bytes() predicted the same too-small size)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:

        def program(nx: int, ny: int) -> None:
            with ws.step("outer") as outer:
                outer.get_simultaneous(((64,), F32))
                with ws.step("inner") as inner:
                    inner.get_simultaneous(((nx,), F32))
                    inner.get_simultaneous(((ny,), F32))

        shapes = {0: (1000, 16), 1: (16, 1000)}
        for ubatch in (0, 0, 1, 1):
            with ws.ubatch(ubatch):
                program(*shapes[ubatch])
        ws.lock()
        for ubatch in (0, 1):
            with ws.ubatch(ubatch):
                program(*shapes[ubatch])


class _Probe:
    def __init__(self) -> None:
        self.capturing = False

    def __call__(self) -> bool:
        return self.capturing


def test_capturing_a_micro_batch_after_every_micro_batch_warmed_up_twice() -> None:
    """docs/planning.md: "run every step twice eagerly (record, then plan) before
    capturing". Both micro-batches run the same program twice, one after the other; then
    micro-batch 0 is captured. Micro-batch 1's recording run grew it past micro-batch 0's
    planned size and marked micro-batch 0 to grow to match; micro-batch 1 then shrank to
    its plan, but the mark stayed, and the capture's first plain request tried to grow:
    GraphCaptureError."""
    probe = _Probe()
    with Arena("cpu", framework="numpy", ubatches=2, capture_probe=probe) as ws:

        def program() -> None:
            ws.get_simultaneous(((100,), F32))
            with ws.step("k") as st:
                a, _ = st.get_simultaneous(((64,), F32), ((300,), F32))
                st.release(a)
                st.get_simultaneous(((100,), F32))

        for ubatch in (0, 0, 1, 1):
            with ws.ubatch(ubatch):
                program()
        probe.capturing = True
        try:
            program()  # micro-batch 0, captured
        finally:
            probe.capturing = False
