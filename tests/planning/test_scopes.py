"""Scopes: views live until their scope exits, scopes nest, exited bytes are reused, plain
requests live above the open scopes, and the slot is sized to the stack's peak."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaError, ArenaLockedError
from tests.gates import Probe, intrude, moving_only
from tests.sources import RecordingSource

F32 = "float32"


def ptr(ws: Arena, view: Any) -> int:
    return ws.numpy.data_ptr(view)


def test_scope_views_live_until_the_scope_exits_and_nest() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 20)  # no growth: every pointer is in one buffer
        with ws.scope() as outer:
            (a,) = outer.get_simultaneous(((1000,), F32))
            a[:] = 1
            (p,) = ws.get_simultaneous(((10,), F32))  # plain: above the stack
            assert ptr(ws, p) >= ptr(ws, a) + a.nbytes
            with ws.scope() as inner:
                (b,) = inner.get_simultaneous(((500,), F32))
                b[:] = 2
                assert ptr(ws, b) >= ptr(ws, a) + a.nbytes  # above the outer scope
                (q,) = ws.get_simultaneous(((10,), F32))
                q[:] = 9
                assert ptr(ws, q) >= ptr(ws, b) + b.nbytes
            inner_start = ptr(ws, b)
            (c,) = outer.get_simultaneous(((200,), F32))  # the inner scope's bytes again
            assert ptr(ws, c) == inner_start
            c[:] = 3
            assert np.all(a == 1)
        with ws.scope() as again:  # the outer scope's bytes are the next request's
            (d,) = again.get_simultaneous(((8,), F32))
            assert ptr(ws, d) == ptr(ws, a)


def test_capacity_is_the_stack_peak_and_lock_refuses_more_naming_the_call_site() -> None:
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(2):
            with ws.scope() as s:
                s.get_simultaneous(((1024,), F32))  # 4096 bytes
                with ws.scope() as t:
                    t.get_simultaneous(((512,), F32))  # + 2048
                ws.get_simultaneous(((256,), F32))  # + 1024 above the outer scope
        stats = ws.stats().slots[0]
        assert stats.capacity == 4096 + 2048
        assert stats.load == 4096 + 2048
        ws.lock()
        with ws.scope() as s:
            s.get_simultaneous(((1024,), F32))
            with ws.scope() as t:
                t.get_simultaneous(((512,), F32))  # fits: no allocation
            with pytest.raises(ArenaLockedError) as info:
                s.get_simultaneous(((4096,), F32))
        message = str(info.value)
        assert "test_scopes.py" in message and "scope request" in message
        assert "4096 bytes of the open scopes and steps" in message


def test_scope_views_survive_growth_and_stay_in_bounds() -> None:
    source = RecordingSource()
    with Arena(source=source, framework="numpy") as ws, ws.scope() as s:
        (a,) = s.get_simultaneous(((100,), F32))
        a[:] = 5
        (b,) = s.get_simultaneous(((100_000,), F32))  # grows: a stays in the old buffer
        b[:] = 6
        assert np.all(a == 5) and np.all(b == 6)
        growths = ws.stats().slots[0].growths
        (c,) = s.get_simultaneous(((10,), F32))
        c[:] = 7
        assert np.all(a == 5) and np.all(b == 6) and np.all(c == 7)
        if ws.stats().slots[0].growths == growths:  # b's buffer (else a new one): above b
            assert ptr(ws, c) >= ptr(ws, b) + b.nbytes


def test_each_slot_has_its_own_stack() -> None:
    with Arena("cpu", framework="numpy", ubatches=2) as ws:
        ws.reserve_bytes(1 << 16)
        seen: dict[int, int] = {}
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def micro_batch(ubatch: int) -> None:
            try:
                with ws.ubatch(ubatch), ws.scope() as s:
                    (x,) = s.get_simultaneous(((1000,), F32))
                    x[:] = ubatch
                    barrier.wait(10)
                    seen[ubatch] = ptr(ws, x)
                    barrier.wait(10)
                    assert np.all(x == ubatch)
            except BaseException as exc:
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=micro_batch, args=(u,)) for u in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert abs(seen[0] - seen[1]) >= 4000  # two buffers, not one stack


def test_a_closed_scope_refuses_requests_and_cannot_reopen() -> None:
    with Arena("cpu", framework="numpy") as ws:
        scope = ws.scope()
        with pytest.raises(ArenaError, match="not open"):
            scope.get_simultaneous(((4,), F32))
        with scope, pytest.raises(ArenaError, match="already open"):
            scope.__enter__()
        with pytest.raises(ArenaError, match="not open"):
            scope.get_simultaneous(((4,), F32))


def test_poisoning_fills_an_exited_scopes_bytes() -> None:
    with Arena("cpu", framework="numpy", poison=True) as ws:
        ws.reserve_bytes(1 << 16)
        with ws.scope() as s:
            (kept,) = s.get_simultaneous(((16,), F32))
            kept[:] = 1.0
        assert np.isnan(kept).all()  # read after its scope ended: NaN, not stale values


def test_poisoning_a_plain_request_leaves_the_open_scopes_and_steps_views_alone() -> None:
    with Arena("cpu", framework="numpy", poison=True) as ws:
        ws.reserve_bytes(1 << 16)
        (earlier,) = ws.get_simultaneous(((256,), F32))  # reaches past the scope's view
        for _ in range(3):  # the step records, plans, replays
            with ws.scope() as s:
                (held,) = s.get_simultaneous(((16,), F32))
                held[:] = 1.0
                with ws.step("k") as st:
                    (stepped,) = st.get_simultaneous(((16,), F32))
                    stepped[:] = 2.0
                    (plain,) = ws.get_simultaneous(((8,), F32))
                    assert ptr(ws, plain) >= ptr(ws, stepped) + 64
                    assert (held == 1.0).all() and (stepped == 2.0).all()
                    assert np.isnan(plain).all()
        assert np.isnan(earlier[64:]).all()  # stale bytes above the scope: poisoned


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_debug_mode_catches_a_view_used_after_its_scope(framework: str) -> None:
    module = pytest.importorskip(framework)
    with Arena("cpu", framework="numpy", debug=True) as ws:
        front = ws.front(framework)
        with front.scope() as s:
            (kept,) = s.get_simultaneous(((16,), "float32"))
        if framework == "torch":
            assert kept.numel() == 0  # emptied: any use of its old shape fails
            with pytest.raises(RuntimeError):
                kept.view(4, 4)
        else:
            with pytest.raises(RuntimeError, match="deleted"):
                module.numpy.sum(kept)


def test_scope_on_every_front_and_the_arenas_default() -> None:
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch") as ws:
        with ws.scope() as s:
            (t,) = s.get_simultaneous(((4,), torch.float32))
            assert isinstance(t, torch.Tensor)
        with ws.numpy.scope() as s:
            (n,) = s.get_simultaneous(((4,), F32))
            assert isinstance(n, np.ndarray)


def test_a_plain_request_above_a_scope_is_valid_until_the_next_request() -> None:
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        (plain,) = ws.get_simultaneous(((64,), F32))
        with ws.scope() as s:
            (a,) = s.get_simultaneous(((64,), F32))
            assert ptr(ws, a) == ptr(ws, plain)  # vLLM's rule: the next request reuses it
            (above,) = ws.get_simultaneous(((64,), F32))
            (again,) = ws.get_simultaneous(((64,), F32))
            assert ptr(ws, above) == ptr(ws, again) == ptr(ws, a) + 256
        (after,) = ws.get_simultaneous(((64,), F32))  # no scope open: offset 0, remembered
        assert ptr(ws, after) == ptr(ws, a)


def test_debug_mode_names_another_thread_using_a_slot_a_scope_holds() -> None:
    from arena import SlotError

    with Arena("cpu", framework="numpy", debug=True) as ws:
        ws.reserve_bytes(1 << 16)
        with ws.scope() as s:
            s.get_simultaneous(((4,), F32))
            errors = intrude(ws)  # same slot: micro-batch 0
            assert len(errors) == 1 and isinstance(errors[0], SlotError)
            assert "intruder" in str(errors[0])
        thread = threading.Thread(target=lambda: ws.get_simultaneous(((4,), F32)))
        thread.start()  # the scope closed: the slot is free again
        thread.join(10)


@moving_only("a growth in place keeps the captured buffer where it is, retiring nothing")
def test_a_scope_request_captured_by_a_graph_keeps_its_buffer_after_the_capture(
    hit_path: str,
) -> None:
    # A scope's hit (views remembered from an earlier run) asks the capture probe and,
    # during a capture, marks the buffer the CUDA graph reads: handed out unmarked, the
    # next growth would release the buffer the graph replays.
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        with ws.scope() as s:
            s.get_simultaneous(((64,), F32))
        ws.lock()  # no request log either: the captured request below is the hit's
        with ws.scope() as s:
            s.get_simultaneous(((64,), F32))  # remembered for the hit
        probe.capturing = True
        with ws.scope() as s:
            s.get_simultaneous(((64,), F32))  # captured
        probe.capturing = False
        ws.unlock()
        assert ws.stats().slots[0].retired_buffers == 0
        ws.get_simultaneous(((1 << 20,), "uint8"))  # grows the slot
        assert ws.stats().slots[0].retired_buffers == 1  # kept for the graph, not released


# Round 10 of the mutation tests (docs/testing.md).
@pytest.mark.parametrize("kind", ["scope", "step"])
def test_debug_mode_a_refused_enter_leaves_the_other_threads_hold_and_the_region_closed(
    hit_path: str, kind: str
) -> None:
    # Another thread's scope or step on a slot a scope holds is refused (SlotError) before
    # it holds anything: its refused enter lets go of no hold (the holder's stays, so the
    # intruder's next plain request is refused too), and leaves its region closed, so the
    # same object enters once the slot is free. Letting go without naming the region
    # dropped the holder's hold; a scope left with a slot that is not None refused to
    # enter again ("already open").
    from arena import SlotError

    with Arena("cpu", framework="numpy", debug=True) as ws:
        ws.reserve_bytes(1 << 16)
        region = ws.scope() if kind == "scope" else ws.step("intruder's")
        outcome: list[BaseException | None] = []

        def intruder() -> None:
            for attempt in (region.__enter__, lambda: ws.get_simultaneous(((4,), F32))):
                try:
                    attempt()
                    outcome.append(None)
                except BaseException as error:
                    outcome.append(error)

        with ws.scope() as s:
            s.get_simultaneous(((4,), F32))
            thread = threading.Thread(target=intruder, name="intruder")
            thread.start()
            thread.join(10)
            assert len(outcome) == 2
            assert all(isinstance(error, SlotError) for error in outcome), outcome
        with region:  # the slot is free: the refused object enters
            region.get_simultaneous(((4,), F32))


def test_debug_mode_retires_a_scope_request_made_again_at_the_same_top(hit_path: str) -> None:
    # In debug mode every scope request takes the checked path, which keeps the views a
    # scope's exit retires; none is served from the views remembered for a request made
    # before at the same top. Debug mode alone (no poisoning, no probe, no log) decides
    # that: with it counted only together with poisoning, the second and third requests
    # came from the remembered views and their tensors stayed usable after the exit.
    torch = pytest.importorskip("torch")
    with Arena("cpu", framework="torch", debug=True) as ws:
        ws.reserve_bytes(1 << 16)
        ws.lock()  # no request log
        for _ in range(3):
            with ws.torch.scope() as s:
                (t,) = s.get_simultaneous(((4,), torch.float32))
                assert t.numel() == 4
            assert t.numel() == 0  # retired: an empty storage
