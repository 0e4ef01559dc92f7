"""Steps across the micro-batches of a lane: lock() gives each key one plan (merged to
the largest sizes any micro-batch saw), copies it to micro-batches that never ran the key,
predicts it in planned_bytes(), and never moves a plan a CUDA graph captured."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import pytest

from arena import Arena, ArenaLockedError, ArenaWarning
from tests.gates import Probe, moving_only
from tests.sources import RecordingSource
from tests.stepping import F32, layer, ptrs

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
        with pytest.warns(ArenaWarning, match=r"lock\(\) left step 'decode' of slot \(ubatch 0"):
            ws.lock()  # ... and says micro-batch 0 cannot run micro-batch 1's sizes
        assert run(0, 64, 1024) == captured
        with pytest.raises(ArenaLockedError):
            run(0, 1024, 64)


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
        assert ptrs(*program()) == ptrs(*planned)


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


def test_lock_sizes_the_lane_for_nested_plans_no_larger_than_they_need() -> None:
    """With the fix above: two micro-batches of 64 and 32 tokens run a forward step with
    two layers, each running "attn" and then "mlp" inside it. lock() merges every key to
    the 64-token sizes; micro-batch 1's nested steps all grow, but "attn" and "mlp" run
    one after the other, so the lane needs what micro-batch 0 needed, no more, and each
    micro-batch replays both token counts."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:

        def program(tokens: int) -> None:
            with ws.step("forward") as forward:
                forward.get_simultaneous(((tokens, 256), F32))
                for _ in range(2):
                    with ws.step("layer") as layer:
                        layer.get_simultaneous(((tokens, 256), F32))
                        with ws.step("attn") as attn:
                            attn.get_simultaneous(((tokens, 768), F32), ((tokens, 256), F32))
                        with ws.step("mlp") as mlp:
                            (gate,) = mlp.get_simultaneous(((tokens, 2048), F32))
                            mlp.get_simultaneous(((tokens, 256), F32))
                            mlp.release(gate)

        tokens = {0: 64, 1: 32}
        for ubatch in (0, 0, 1, 1):
            with ws.ubatch(ubatch):
                program(tokens[ubatch])
        largest = ws.stats().slots[0].capacity
        ws.lock()
        assert [s.capacity for s in ws.stats().slots] == [largest, largest]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ArenaWarning)  # the first finding above
            for ubatch in (0, 1):
                with ws.ubatch(ubatch):
                    program(64)
                    program(32)


def test_a_slot_fitted_to_its_plans_takes_its_larger_siblings_size_at_once() -> None:
    """Micro-batch 1 ran a larger program, so micro-batch 0 is due to grow to match at its
    next call. Micro-batch 0's second run plans its step and sizes the slot to that plan,
    ignoring the sibling: the run's first request then grows it again, halfway through
    the planned run (two allocations; the views before the growth are elsewhere than the
    next run's)."""
    with Arena("cpu", framework="numpy", ubatches=2) as ws:

        def program(n: int) -> None:
            with ws.step("k") as st:
                ws.get_simultaneous(((1000 * n,), F32))
                st.get_simultaneous(((3000 * n,), F32))

        program(1)
        with ws.ubatch(1):
            program(2)
        growths = ws.stats().slots[0].growths
        program(1)  # planned: sized once, up front
        assert ws.stats().slots[0].growths == growths


def test_capturing_a_micro_batch_after_every_micro_batch_warmed_up_twice() -> None:
    """docs/planning.md: "run every step twice eagerly (record, then plan) before
    capturing". Both micro-batches run the same program twice, one after the other; then
    micro-batch 0 is captured. Micro-batch 1's recording run grew it past micro-batch 0's
    planned size and marked micro-batch 0 to grow to match; micro-batch 1 then shrank to
    its plan, but the mark stayed, and the capture's first plain request tried to grow:
    GraphCaptureError."""
    probe = Probe()
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


@moving_only(
    "lock() grows a captured buffer in place: nothing is replaced or retired, so no warning"
)
def test_lock_warns_when_it_replaces_the_buffer_a_captured_micro_batch_replays() -> None:
    """Micro-batch 0's step is captured; micro-batch 1 runs larger. lock() brings
    micro-batch 0 to the lane's size: its captured buffer is retired (the graph still
    reads it) and its locked replays run on a new buffer, at other pointers than the
    graph's. docs/planning.md said lock() keeps the buffer: it says this exception now,
    and lock() warns, naming the slot, the sizes and the fix."""
    probe = Probe()
    with Arena("cpu", framework="numpy", ubatches=2, capture_probe=probe) as ws:

        def program(n: int) -> list[Any]:
            with ws.step("k") as st:
                return list(st.get_simultaneous(((n,), F32)))

        for ubatch, n in ((0, 100), (0, 100), (1, 1000), (1, 1000)):
            with ws.ubatch(ubatch):
                program(n)
        probe.capturing = True
        try:
            captured = program(100)
        finally:
            probe.capturing = False
        graph_buffer = ws.stats().slots[0].capacity
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ws.lock()
        said = [str(w.message) for w in caught if issubclass(w.category, ArenaWarning)]
        assert len(said) == 2, said  # the buffer replaced, and the plan kept short
        assert said[0].startswith("lock() left step 'k' of slot (ubatch 0, lane 0)")
        assert said[1].startswith("lock() brought slot (ubatch 0, lane 0)")
        stats = ws.stats().slots[0]
        assert stats.retired_bytes == graph_buffer  # kept for the graph, not released
        assert ptrs(*program(100)) != ptrs(*captured)  # as the warning says


def test_lock_keeps_the_plans_of_micro_batches_that_planned_alike(hit_path: str) -> None:
    # Micro-batches whose plans of a key agree already need no merged plan: lock() keeps
    # their plans (the same version), so the views each replay remembered before lock()
    # are the ones served after it. A merged copy, a new version, would drop them and
    # build new views at the first locked replay.
    with Arena("cpu", framework="numpy", ubatches=2, cached_views=True) as ws:
        handed: dict[int, list[Any]] = {0: [], 1: []}

        def run(ubatch: int) -> None:
            with ws.ubatch(ubatch), ws.step("k") as step:
                handed[ubatch].append(step.get_simultaneous(KIB)[0])

        for _ in range(4):  # record, plan, then replays that remember and serve
            for ubatch in (0, 1):
                run(ubatch)
        ws.lock()
        for ubatch in (0, 1):
            run(ubatch)
            assert handed[ubatch][-1] is handed[ubatch][-2]


def test_a_captured_micro_batch_lifts_no_siblings_outer_step_at_lock() -> None:
    # Micro-batch 0's graph captured its steps, so lock() leaves its plans alone (its inner
    # step stays planned at 256 bytes) while micro-batch 1 takes the lane's merged inner
    # plan. How far that merged plan lifts an outer step counts in the slots that take it
    # only: micro-batch 1's outer step already covers its own 16 KiB inner step, and
    # sized to its plans it holds its program's peak, 4 KiB of the outer step under the
    # inner step's 16 KiB. Counted for the captured slot as well, micro-batch 1's outer
    # step was lifted by what the merged plan adds to micro-batch 0's inner step (16 KiB
    # less 256 bytes): 3840 bytes more than it needs.
    probe = Probe()
    with Arena("cpu", framework="numpy", ubatches=2, capture_probe=probe) as ws:

        def run(ubatch: int, inner_floats: int) -> None:
            with ws.ubatch(ubatch), ws.step("outer") as outer:
                outer.get_simultaneous(((1024,), F32))
                with ws.step("inner") as inner:
                    inner.get_simultaneous(((inner_floats,), F32))
                outer.get_simultaneous(((1024,), F32))

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ArenaWarning)  # lock() names the captured slot
            for _ in range(2):  # record, plan
                run(0, 64)
                run(1, 4096)
            probe.capturing = True
            run(0, 64)  # the graph of micro-batch 0
            probe.capturing = False
            ws.lock()
        ws.unlock()
        ws.plan_steps()  # each slot sized to its plans
        assert ws.stats().slots[1].capacity == 4096 + 16384


def test_a_micro_batch_given_a_plan_whose_inner_step_never_finished_plans_and_runs_it() -> None:
    # Micro-batch 0's outer step ran an inner step whose every run was interrupted (the
    # error caught inside the outer step): the outer record names the inner step, which
    # has no plan anywhere. lock() gives micro-batch 1, which never ran, the outer plan
    # only; planning that slot again covers the inner step by what it reached when it
    # ran, not by a plan or a book micro-batch 1 does not have.
    def run(ws: Arena) -> None:
        with ws.step("outer") as outer:
            outer.get_simultaneous(KIB)
            try:
                with ws.step("inner") as inner:
                    inner.get_simultaneous(((1024,), F32))
                    raise KeyError("interrupted")
            except KeyError:
                pass
            outer.get_simultaneous(KIB)

    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        with ws.ubatch(0):
            for _ in range(2):  # record, plan
                run(ws)
        ws.lock()
        ws.unlock()
        assert ws.plan_steps() == {"outer": 2048}
        with ws.ubatch(1):
            run(ws)  # the lane's outer plan, the inner step recording inside it


def test_lock_after_a_capture_passes_over_a_step_whose_only_run_was_interrupted() -> None:
    # lock() warns of each planned step of a captured slot that a sibling's plan
    # outgrows. A step whose only run was interrupted has a book and no plan on any
    # micro-batch: nothing to compare, nothing to warn of, and lock() locks.
    probe = Probe()
    with Arena("cpu", framework="numpy", ubatches=2, capture_probe=probe) as ws:
        with pytest.raises(KeyError), ws.step("k") as step:
            step.get_simultaneous(KIB)
            raise KeyError("interrupted")
        probe.capturing = True
        ws.get_simultaneous(KIB)  # a graph captures micro-batch 0's buffer
        probe.capturing = False
        with warnings.catch_warnings():
            warnings.simplefilter("error", ArenaWarning)
            ws.lock()
        assert ws.is_locked
