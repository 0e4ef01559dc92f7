"""Hostile review, round 4: lifetime planning (scopes, steps, plans merged by lock()).

Each test is one finding and fails on the code it was written against (main at 2ea69aa);
none is marked xfail. They use the public API only.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from arena import Arena, ArenaError

F32 = "float32"
KIB = ((256,), F32)  # one KiB


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


def test_a_stale_alias_of_a_released_view_does_not_release_the_view_now_at_its_bytes() -> None:
    """release() takes "a new array over a view's bytes with its shape and dtype" for the
    view. After the view is released and a later request of the same shape takes its
    bytes, releasing the old alias (JAX: the array write_into returned) releases that
    later, live view: the next request is handed the same bytes while it is in use."""
    with Arena("cpu", framework="numpy") as ws, ws.step("layer") as st:
        (h,) = st.get_simultaneous(KIB)
        alias = h[:]  # what write_into returns on JAX: another array over h's bytes
        st.release(h)
        (z,) = st.get_simultaneous(KIB)  # first fit: h's bytes
        assert ws.numpy.data_ptr(z) == ws.numpy.data_ptr(h)
        with pytest.raises(ArenaError, match="released already"):
            st.release(alias)  # h's life ended already; z is live and was never released
        (w,) = st.get_simultaneous(KIB)
        assert ws.numpy.data_ptr(w) != ws.numpy.data_ptr(z)  # two live views, one KiB


def test_lock_after_one_warm_up_run_sizes_a_plain_request_made_inside_a_nested_step() -> None:
    """lock() plans keys still recording and sizes the slot to their reach. A plain
    request inside a nested step lands, in a replay, above the inner step's whole plan,
    not above where the inner step's first fit had reached when the request came: the
    recorded estimate is short and the first locked run raises ArenaLockedError."""
    with Arena("cpu", framework="numpy") as ws:

        def run() -> None:
            with ws.step("outer") as outer:
                outer.get_simultaneous(KIB)
                with ws.step("inner") as inner:
                    inner.get_simultaneous(KIB)
                    ws.get_simultaneous(KIB)  # plain scratch, dead at the next request
                    inner.get_simultaneous(KIB)
                outer.get_simultaneous(KIB)

        run()  # one eager run: lock() plans both keys
        planned = ws.planned_bytes()
        ws.lock()
        assert ws.memory_stats()["reserved_bytes.all.current"] == planned
        with warnings.catch_warnings():
            # the nested step's start warning is its own finding (below)
            warnings.filterwarnings("ignore", message="step 'inner' starts at byte")
            run()  # ArenaLockedError: 5120 bytes needed, lock() sized 4096


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


def test_a_nested_step_replayed_after_lock_at_its_usual_height_does_not_warn() -> None:
    """A step nested in a step starts, in every replay, at the outer plan's end; its
    recording run started lower (where the outer's first fit had reached). The height
    check compares with the recording run's start, so every locked run of the nested
    step warns "Enter the step at the same stack height" though its pointers repeat;
    under warnings-as-errors every locked run raises."""
    with Arena("cpu", framework="numpy") as ws:

        def run() -> list[int]:
            with ws.step("outer") as outer:
                (a,) = outer.get_simultaneous(KIB)
                with ws.step("inner") as inner:
                    (b,) = inner.get_simultaneous(KIB)
                (c,) = outer.get_simultaneous(KIB)
                return [ws.numpy.data_ptr(v) for v in (a, b, c)]

        for _ in range(3):  # record, plan, replay: the slot is at its planned size
            warmed = run()
        ws.lock()
        assert run() == warmed  # the same pointers ... and an ArenaWarning, raised here


def test_release_by_a_write_into_result_survives_a_deleted_sibling_view() -> None:
    """A JAX view given away (deleted, or donated to a jitted function) makes release()
    of another view's write_into result raise JAX's own error: the address match reads
    every live view's pointer, the deleted one's too."""
    jnp = pytest.importorskip("jax.numpy")
    with Arena("cpu", framework="jax") as ws, ws.jax.step("layer") as st:
        first, second = st.get_simultaneous(((64,), F32), ((64,), F32))
        first.delete()  # donated
        written = ws.jax.write_into(second, jnp.ones(64, jnp.float32))
        st.release(written)  # JaxRuntimeError: UnsafeBufferPointer on a deleted buffer
        (again,) = st.get_simultaneous(((64,), F32))
        assert ws.jax.data_ptr(again) == ws.jax.data_ptr(written)


def test_a_step_request_under_a_nested_step_names_the_nested_step() -> None:
    """An outer step's request while a step opened inside it is open is refused, but the
    message blames "a scope opened inside step 'outer'" and suggests requesting "through
    the scope": there is no scope, and the inner step cannot take the outer's request."""
    with Arena("cpu", framework="numpy") as ws, ws.step("outer") as outer:
        outer.get_simultaneous(KIB)
        with ws.step("inner"):
            with pytest.raises(ArenaError) as info:
                outer.get_simultaneous(KIB)
            assert "'inner'" in str(info.value)
