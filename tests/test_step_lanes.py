"""Steps across the micro-batches of a lane: lock() gives each key one plan (merged to
the largest sizes any micro-batch saw), copies it to micro-batches that never ran the key,
predicts it in planned_bytes(), and never moves a plan a CUDA graph captured."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from arena import Arena
from tests.sources import RecordingSource
from tests.stepping import F32, layer

KIB = ((256,), F32)  # one KiB


def test_lock_plans_and_gives_siblings_the_plan() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy", ubatches=2) as ws:
        layer(ws, 100)  # ubatch 0 records only
        ws.lock()
        before = len(source.events)
        first = layer(ws, 100)
        with ws.ubatch(1):  # never ran: gets the plan at lock
            assert len(layer(ws, 100)) == 4
        assert layer(ws, 100) == first
        assert len(source.events) == before


def test_two_micro_batch_threads_replay_their_steps(hit_path: str) -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        for ubatch in (0, 1):
            with ws.ubatch(ubatch):
                layer(ws, 50)
                layer(ws, 50)
        ws.lock()
        errors: list[BaseException] = []
        barrier = threading.Barrier(2)

        def run(ubatch: int) -> None:
            try:
                with ws.ubatch(ubatch):
                    barrier.wait(10)
                    for _ in range(200):
                        layer(ws, 50)
            except BaseException as exc:
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=run, args=(u,)) for u in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors


def test_lock_merges_sibling_plans_so_every_ubatch_replays_what_any_saw() -> None:
    """Micro-batch 1 warmed up with more tokens than micro-batch 0: after lock() both
    replay one plan sized for the larger run (ubatch 0 diverged while locked before)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        for ubatch, tokens in ((0, 8), (1, 64)):
            with ws.ubatch(ubatch):
                layer(ws, tokens)
                layer(ws, tokens)
        planned = ws.planned_bytes()
        ws.lock()
        assert ws.memory_stats()["reserved_bytes.all.current"] == planned
        offsets = []
        for ubatch in (0, 1):
            with ws.ubatch(ubatch):
                places = layer(ws, 64)  # ubatch 0 never ran 64 tokens: no divergence
                offsets.append([p - places[0] for p in places])
                layer(ws, 8)  # the smaller run replays the same plan too
        assert offsets[0] == offsets[1]  # one plan for the lane


def test_lock_keeps_each_slots_plan_where_siblings_recorded_other_requests() -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        with ws.ubatch(0):
            layer(ws, 8)
            layer(ws, 8)
        with ws.ubatch(1):
            for _ in range(2):
                with ws.step("layer") as st:
                    st.get_simultaneous(((4096,), F32))
        ws.lock()
        with ws.ubatch(0):
            layer(ws, 8)
        with ws.ubatch(1), ws.step("layer") as st:
            st.get_simultaneous(((4096,), F32))


class Probe:
    """A capture-status probe, as tests/test_safety.py injects one."""

    def __init__(self) -> None:
        self.capturing = False

    def __call__(self) -> bool:
        return self.capturing


def test_lock_does_not_move_the_pointers_of_a_step_captured_before_it() -> None:
    """vLLM captures its graphs, then locks ("lock after all captures guarantees replay
    pointers never change"). lock() merges the lane's plans of the key and plans it again
    on the very buffer the capture read: the captured step's views swap places."""
    probe = Probe()
    with Arena("cpu", framework="numpy", ubatches=2, capture_probe=probe) as ws:
        ws.reserve_bytes(1 << 16)  # no slot grows at lock(): the buffer stays the same

        def run(ubatch: int, first: int, second: int) -> list[int]:
            with ws.ubatch(ubatch), ws.step("decode") as st:
                (x,) = st.get_simultaneous(((first,), F32))
                (y,) = st.get_simultaneous(((second,), F32))
                return [ws.numpy.data_ptr(v) for v in (x, y)]

        for _ in range(2):  # record, plan: every micro-batch warmed up eagerly twice
            run(0, 64, 1024)
            run(1, 1024, 64)
        probe.capturing = True
        captured = run(0, 64, 1024)  # the graph of micro-batch 0 reads these bytes
        probe.capturing = False
        ws.lock()
        assert run(0, 64, 1024) == captured


def test_planned_bytes_agrees_with_lock_called_while_a_step_runs() -> None:
    """planned_bytes() works on copies of the step books, and StepBook.copy() clears
    `running`: it predicts the lane merge that lock() then refuses for a running key
    (and a max_bytes cap checks the same wrong figure)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:

        def run(ubatch: int, first: int, second: int, inside: Any = None) -> None:
            with ws.ubatch(ubatch), ws.step("decode") as st:
                st.get_simultaneous(((first,), F32))
                st.get_simultaneous(((second,), F32))
                if inside is not None:
                    inside()

        for _ in range(2):
            run(0, 64, 1024)
            run(1, 1024, 64)
        figures: dict[str, int] = {}

        def lock_now() -> None:
            figures["planned"] = ws.planned_bytes()
            ws.lock()
            figures["held"] = ws.memory_stats()["reserved_bytes.all.current"]

        run(0, 64, 1024, inside=lock_now)
        assert figures["planned"] == figures["held"]  # 25088 predicted, 8704 held


def test_a_micro_batch_whose_only_warm_up_run_was_interrupted_gets_the_lanes_plan() -> None:
    """lock() gives a micro-batch that never ran a key a copy of the lane's plan, so its
    first locked run may be captured. A micro-batch whose one run of the key raised ("a run
    interrupted by an exception is not recorded") keeps an empty book instead: lock()
    skips it and its first captured run raises GraphCaptureError."""
    probe = Probe()
    with Arena("cpu", framework="numpy", ubatches=2, capture_probe=probe) as ws:

        def run(ubatch: int, fail: bool = False) -> None:
            with ws.ubatch(ubatch), ws.step("decode") as st:
                st.get_simultaneous(((64,), F32))
                if fail:
                    raise KeyError("a bad batch")
                st.get_simultaneous(((1024,), F32))

        run(0)
        run(0)
        with pytest.raises(KeyError):
            run(1, fail=True)
        ws.lock()
        with ws.ubatch(1):
            ws.get_simultaneous(KIB)  # the slot's first NumPy view, eagerly
        probe.capturing = True
        run(1)  # GraphCaptureError: "runs for the first time while a CUDA graph is ..."
