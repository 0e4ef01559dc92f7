"""Steps and scopes under a capture probe (every CUDA arena has one): the probe is asked
per request, and only a request it answers True for (a CUDA graph being captured) takes
the capture bookkeeping; every other locked request stays on the hit, compiled or in
Python, as a plain request's does (issue probe48: a probe sent every locked step request
through ``served()`` in Python and kept no scope memo at all)."""

from __future__ import annotations

import random
import sys
from typing import Any

import pytest

from arena import Arena
from arena.planning.scopes import Scope
from arena.planning.steps import Step
from arena.slots.slot import Slot
from arena.views.builder import ViewBuilder
from tests.conftest import need_compiled_hit
from tests.counting import counting
from tests.refcounts import assert_counts_flat

F32 = "float32"
A = ((4, 16), F32)
B = ((64,), F32)
C = ((8,), "int32")


class Probe:
    """A capture probe that counts its calls and answers from ``plan`` (an answer, or an
    exception to raise, per call; ``default`` once the plan is spent)."""

    def __init__(self, default: bool = False) -> None:
        self.calls = 0
        self.default = default
        self.plan: list[bool | BaseException] = []

    def __call__(self) -> bool:
        self.calls += 1
        if self.plan:
            answer = self.plan.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        return self.default


def _front(ws: Arena, framework: str) -> tuple[Any, Any]:
    """The front and its float32 dtype."""
    if framework == "torch":
        torch = pytest.importorskip("torch")
        return ws.torch, torch.float32
    return ws.numpy, F32


def _warm(ws: Arena, front: Any, specs: tuple[Any, ...]) -> None:
    """Record, plan and remember a step "k" of one request per spec, and remember a
    scope of the same requests; then lock."""
    for _ in range(3):
        with front.step("k") as st:
            for spec in specs:
                st.get_simultaneous(spec)
    ws.lock()
    for _ in range(2):  # the first locked sighting of each scope request: remembered
        with front.scope() as s:
            for spec in specs:
                s.get_simultaneous(spec)
        with front.step("k") as st:
            for spec in specs:
                st.get_simultaneous(spec)


def _region(ws: Arena, kind: str) -> Any:
    """A new run of the step "k", or a new scope, of the numpy front."""
    return ws.step("k") if kind == "step" else ws.scope()


def _python_paths(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Count the Python paths a region's request can take past its hit."""
    return {
        "step checked": counting(monkeypatch, Step, "_checked"),
        "scope checked": counting(monkeypatch, Scope, "_checked"),
        "place": counting(monkeypatch, ViewBuilder, "place"),
        "served": counting(monkeypatch, ViewBuilder, "served"),
        "step python": counting(monkeypatch, Step, "_python_get"),
        "scope python": counting(monkeypatch, Scope, "_python_get"),
    }


# ------------------------------------------------------------------ a probe answering False


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_a_probe_answering_false_leaves_locked_step_and_scope_requests_on_the_hit(
    hit_path: str, framework: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = Probe()
    with Arena("cpu", framework=framework, capture_probe=probe) as ws:
        front, dtype = _front(ws, framework)
        specs = (((4, 16), dtype), ((64,), dtype))
        _warm(ws, front, specs)
        paths = _python_paths(monkeypatch)
        probe.calls = 0
        calls = ws.stats().calls
        for _ in range(3):
            with front.step("k") as st:
                for spec in specs:
                    st.get_simultaneous(spec)
            with front.scope() as s:
                for spec in specs:
                    s.get_simultaneous(spec)
        assert ws.stats().calls == calls + 12  # every request counted once
        assert probe.calls == 12  # asked once per request, as a plain request's hit asks
        # No request left the hit: no placement, no bookkeeping in Python.
        assert paths["step checked"] == paths["scope checked"] == [0]
        assert paths["place"] == paths["served"] == [0]
        if hit_path == "compiled":  # served in C
            assert paths["step python"] == paths["scope python"] == [0]


def test_a_probe_answering_false_costs_a_scope_no_memo(hit_path: str) -> None:
    """The scope's requests are remembered with a probe as without one: the checked path
    keeps them for the next scope's hit (slip: ``memo=None`` under a probe)."""
    with Arena("cpu", framework="numpy", capture_probe=Probe()) as ws:
        ws.reserve_bytes(1 << 12)
        ws.lock()
        with ws.scope() as s:
            s.get_simultaneous(A)
            slot = s.slot
            assert slot is not None
            assert list(slot.buffer.prepared["numpy/scope"]) == [(0, (A,))]


# ------------------------------------------------------------------ a capture starting mid-run


def _captured_state(slot: Slot) -> tuple[bool, int]:
    return (slot.buffer.captured, slot.governor.captures)


@pytest.mark.parametrize("kind", ["step", "scope"])
def test_a_capture_starting_inside_a_locked_region_marks_that_request_s_buffer(
    hit_path: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = Probe()
    specs = (A, B, C)
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        _warm(ws, ws.numpy, specs)
        served = counting(monkeypatch, ViewBuilder, "served")
        with _region(ws, kind) as r:  # the hit's views before the capture
            expected = [r.get_simultaneous(spec)[0].ctypes.data for spec in specs]
        probe.calls = served[0] = 0
        calls = ws.stats().calls
        with _region(ws, kind) as r:
            slot = r.slot
            assert slot is not None
            got = [r.get_simultaneous(A)[0].ctypes.data]
            assert _captured_state(slot) == (False, 0) and served == [0]
            probe.plan = [True]  # the capture starts: the next request is captured
            got.append(r.get_simultaneous(B)[0].ctypes.data)
            assert _captured_state(slot) == (True, 1)  # marked, once
            assert served == [1]  # the bookkeeping of that request only
            got.append(r.get_simultaneous(C)[0].ctypes.data)
            assert served == [1]
        assert got == expected  # the same places as the hit's
        assert probe.calls == 3  # asked once per request, the captured one too
        assert ws.stats().calls == calls + 3  # each counted once
        if kind == "step":
            with ws.step("k") as st:  # the run ended as a replay does: the next one hits
                st.get_simultaneous(A)
                assert st.request == 1


@pytest.mark.parametrize("kind", ["step", "scope"])
def test_a_capture_mark_a_growth_raced_places_the_request_anew(
    hit_path: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the buffer was replaced before the mark (``mark_captured`` False), the request
    goes to the checked path, which serves it again from the current buffer and marks
    that: counted once."""
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        _warm(ws, ws.numpy, (A, B))
        real = Slot.mark_captured
        refused = [0]

        def mark_once_refused(self: Slot, buffer: Any) -> bool:
            if not refused[0]:
                refused[0] += 1
                return False
            return real(self, buffer)

        monkeypatch.setattr(Slot, "mark_captured", mark_once_refused)
        checked = counting(monkeypatch, Step if kind == "step" else Scope, "_checked")
        calls = ws.stats().calls
        with _region(ws, kind) as r:
            slot = r.slot
            assert slot is not None
            r.get_simultaneous(A)
            probe.default = True
            (view,) = r.get_simultaneous(B)
            probe.default = False
            assert refused == [1] and checked == [1]  # refused, then placed anew
            assert _captured_state(slot) == (True, 1)  # the current buffer, marked
            assert view.shape == (64,)
        assert ws.stats().calls == calls + 2


# ------------------------------------------------------------------ a probe that raises


@pytest.mark.parametrize("kind", ["step", "scope"])
@pytest.mark.parametrize("error", [RuntimeError("probe failed"), KeyboardInterrupt()])
def test_a_probe_raising_mid_replay_propagates_and_leaves_the_arena_usable(
    hit_path: str, kind: str, error: BaseException
) -> None:
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        _warm(ws, ws.numpy, (A, B))
        with _region(ws, kind) as r:
            expected = [r.get_simultaneous(spec)[0].ctypes.data for spec in (A, B)]
        calls = ws.stats().calls
        with _region(ws, kind) as r:
            slot = r.slot
            assert slot is not None
            r.get_simultaneous(A)
            top, live = slot.stack.top, slot.stack.live
            probe.plan = [error]
            with pytest.raises(type(error)) as raised:
                r.get_simultaneous(B)
            assert raised.value is error  # the probe's own exception, unchanged
            # Nothing of the request was installed: not counted, not handed out.
            assert ws.stats().calls == calls + 1
            assert (slot.stack.top, slot.stack.live) == (top, live)
            if kind == "step":
                assert r.request == 1
            # The same request again, the probe answering: served as before.
            assert r.get_simultaneous(B)[0].ctypes.data == expected[1]
        assert ws.stats().calls == calls + 2
        probe.plan = [error]
        with pytest.raises(type(error)), _region(ws, kind) as r:
            r.get_simultaneous(A)  # raised from the probe, the region exits
        assert slot.stack.regions == [] and (slot.stack.top, slot.stack.live) == (0, 0)
        probe.calls = 0
        with _region(ws, kind) as r:
            got = [r.get_simultaneous(spec)[0].ctypes.data for spec in (A, B)]
        assert got == expected and probe.calls == 2
        assert ws.stats().calls == calls + 4


# ------------------------------------------------------------------ differential


def _program(seed: int, path: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A seeded run of locked steps and scopes under a probe answering at random: per
    request what it was handed, the slot's figures, the capture marks and the probe's
    calls; per step its request count at the end."""
    from arena.views import hit

    monkeypatch.setattr(hit, "HIT_PATH", path)
    rng = random.Random(seed)
    answers = random.Random(seed + 1)
    probe = Probe()
    seen: list[Any] = []

    def note(what: str, views: list[Any], slot: Slot) -> None:
        seen.append(
            (
                what,
                # Offsets, not addresses: the two runs' arenas need not get one address.
                [(v.ctypes.data - slot.buffer.allocation.ptr, v.shape, v.dtype.str) for v in views],
                slot.stack.top,
                slot.stack.live,
                slot.calls,
                slot.buffer.captured,
                slot.governor.captures,
                probe.calls,
            )
        )

    pool = [A, B, C, ((2, 3), F32)]
    try:
        with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
            ws.reserve_bytes(1 << 16)
            steps = {key: [rng.choice(pool) for _ in range(rng.randint(1, 4))] for key in "ab"}
            for _ in range(3):  # record and plan each key, outside any region
                for key, specs in steps.items():
                    with ws.step(key) as st:
                        for spec in specs:
                            st.get_simultaneous(spec)
            ws.lock()
            scope_specs = [rng.choice(pool) for _ in range(3)]
            for _ in range(40):
                probe.default = answers.random() < 0.3
                kind = rng.choice(["a", "b", "scope"])
                if kind == "scope":
                    with ws.scope() as s:
                        slot = s.slot
                        assert slot is not None
                        for spec in scope_specs[: rng.randint(1, 3)]:
                            probe.default = answers.random() < 0.3
                            note("scope", s.get_simultaneous(spec), slot)
                else:
                    with ws.step(kind) as st:
                        slot = st.slot
                        assert slot is not None
                        for spec in steps[kind]:
                            probe.default = answers.random() < 0.3
                            note(kind, st.get_simultaneous(spec), slot)
                        seen.append(("end", st.request))
            seen.append(("stats", ws.stats().calls))
    finally:
        monkeypatch.undo()
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_the_compiled_and_python_hits_agree_under_a_probe_toggling_at_random(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_compiled_hit()
    python = _program(seed, "python", monkeypatch)
    compiled = _program(seed, "compiled", monkeypatch)
    assert compiled == python
    assert python[-1][0] == "stats"
    assert any(row[6] for row in python[:-1] if row[0] != "end")  # a capture was marked


# ------------------------------------------------------------------ reference counts


@pytest.mark.parametrize("kind", ["step", "scope"])
@pytest.mark.parametrize("answer", ["false", "true", "raises"])
def test_the_compiled_hits_under_a_probe_keep_reference_counts_flat(kind: str, answer: str) -> None:
    need_compiled_hit()

    armed = [False]  # warm-up asks the probe too (a first run during a capture)

    def probe() -> bool:
        if armed[0] and answer == "raises":
            raise RuntimeError("probe failed")
        return armed[0] and answer == "true"

    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        _warm(ws, ws.numpy, (A,))
        with _region(ws, kind) as r:
            (view,) = r.get_simultaneous(A)
            slot = r.slot
            assert slot is not None
        armed[0] = True
        buffer = slot.buffer
        # The remembered view (each fresh view's base), the request, the probe, the slot.
        watched = (probe, A, A[0], F32, view.base, buffer, buffer.prepared, slot)
        del view

        def hits() -> None:
            for _ in range(2000):
                with _region(ws, kind) as r:
                    try:
                        r.get_simultaneous(A)
                    except RuntimeError:
                        pass

        assert_counts_flat(watched, hits, f"{kind}, the probe {answer}")


# ------------------------------------------------------------------ Round 18b (mutation)


@pytest.mark.parametrize("kind", ["step", "scope"])
def test_a_captured_request_hands_fresh_views_as_the_hit_does(hit_path: str, kind: str) -> None:
    """A request the probe answers True for gets fresh views of the remembered ones, a new
    object per run, as the hit's requests do: a view the caller reshapes in place in one
    run does not come back reshaped in the next (slip: the captured step request handed
    out the run's kept views, the remembered ones)."""
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        _warm(ws, ws.numpy, (A, B))
        probe.default = True  # a capture under way: every request is captured
        handed = []
        for run in range(2):
            with _region(ws, kind) as r:
                first, second = r.get_simultaneous(A)[0], r.get_simultaneous(B)[0]
                handed.append((first, second))
                if run == 0:
                    first.shape = (64,)  # the caller's own view: reshaped in place
                slot = r.slot
                assert slot is not None and slot.buffer.captured
        (a1, b1), (a2, b2) = handed
        assert a1 is not a2 and b1 is not b2
        assert a2.shape == (4, 16)  # the remembered view kept its shape
        assert a1.ctypes.data == a2.ctypes.data and b1.ctypes.data == b2.ctypes.data


@pytest.mark.parametrize("kind", ["step", "scope"])
def test_a_captured_request_holds_no_reference_to_the_views_it_hands_out(
    hit_path: str, kind: str
) -> None:
    """A captured request's run keeps the remembered views, as the hit's does, not the
    fresh ones it handed out: a view the caller drops is freed at once (slip: the captured
    step request kept the fresh views in the run)."""
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        _warm(ws, ws.numpy, (A,))
        counts = []
        for answer in (False, True):
            probe.default = answer
            with _region(ws, kind) as r:
                (view,) = r.get_simultaneous(A)
                counts.append(sys.getrefcount(view))
                del view
        assert counts[1] == counts[0]


@pytest.mark.parametrize("kind", ["step", "scope"])
def test_a_request_captured_after_an_unlock_inside_its_region_is_noted_with_its_specs(
    hit_path: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A region entered locked and unlocked inside: a request the probe answers True for
    is marked captured and noted in the request log with its specs, served on the hit's
    views without the checked path (slips: the specs noted as None, and memory_snapshot
    failed on them; the scope's mark given the wrong buffer, placed anew)."""
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        _warm(ws, ws.numpy, (A,))
        with _region(ws, kind) as r:
            expected = r.get_simultaneous(A)[0].ctypes.data
        checked = counting(monkeypatch, Step if kind == "step" else Scope, "_checked")
        with _region(ws, kind) as r:
            slot = r.slot
            assert slot is not None
            ws.unlock()
            probe.default = True
            (view,) = r.get_simultaneous(A)  # noted: this line
            probe.default = False
            line = sys._getframe().f_lineno - 2
            assert view.ctypes.data == expected and checked == [0]
            assert _captured_state(slot) == (True, 1)
            (segment,) = ws.memory_snapshot()["segments"]
            (block,) = segment["blocks"]
            assert block["frames"][0]["line"] == line
            assert block["arena_views"] == [{"offset": 0, "size": 256, "requested_size": 256}]
        site = f"test_probe_hits.py:{line}:{sys._getframe().f_code.co_name}"
        assert ws.stats().call_sites[site] == 256


@pytest.mark.parametrize("setting", ["poison", "debug"])
def test_a_captured_step_request_with_poisoning_or_debug_mode_is_released_by_its_view(
    hit_path: str, setting: str
) -> None:
    """With poisoning or in debug mode a replay keeps the views it handed out (no lean
    run): a captured request's view is released by the caller and the run ends as the
    hit's does (slip: the captured request kept None for its views)."""
    probe = Probe()
    options = {setting: True}
    with Arena("cpu", framework="numpy", capture_probe=probe, **options) as ws:
        _warm(ws, ws.numpy, (A, B))
        for answer in (False, True):
            probe.default = answer
            with ws.step("k") as st:
                first = st.get_simultaneous(A)[0]
                st.release(first)
                (second,) = st.get_simultaneous(B)
                assert st.request == 2
        assert second.shape == (64,)
        with ws.step("k") as st:
            st.get_simultaneous(A)
            slot = st.slot
            assert slot is not None and slot.buffer.captured


@pytest.mark.parametrize("kind", ["step", "scope"])
def test_a_captured_request_counts_as_used_in_the_sweep_of_remembered_requests(
    hit_path: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remembered requests are swept as a CLOCK (arena.views.prepared.remember): one the
    hit served since the last sweep gets a second chance, and so does one served while
    captured (slip: the captured request left its entry unused, and the sweep dropped
    it). Three requests of 256 bytes at one place, two remembered at a time."""
    probe = Probe()
    x, y, z = ((64,), F32), ((4, 16), F32), ((2, 32), F32)
    with Arena("cpu", framework="numpy", capture_probe=probe, max_cached_layouts=2) as ws:
        _warm(ws, ws.numpy, (x,))

        def run(spec: Any) -> None:
            with _region(ws, kind) as r:
                r.get_simultaneous(spec)

        run(x)
        run(y)  # remembered: x and y
        probe.default = True
        run(x)  # x served captured: used
        probe.default = False
        run(z)  # the sweep: x kept, y dropped
        checked = counting(monkeypatch, Step if kind == "step" else Scope, "_checked")
        run(x)
        assert checked == [0]  # still remembered: the hit's
        run(y)
        assert checked == [1]  # dropped: placed again


def test_a_locked_replay_under_a_probe_answering_false_does_no_bookkeeping(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python hit of a locked replay reads one flag: under a probe answering False no
    request calls the replay's bookkeeping (arena.planning.scopes.served), which would
    only say there is none to do (slip: the locked replay watched, as before probe48)."""
    from arena.planning import steps

    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        _warm(ws, ws.numpy, (A, B))
        bookkeeping = counting(monkeypatch, steps, "served")
        for _ in range(2):
            with ws.step("k") as st:
                st.get_simultaneous(A)
                st.get_simultaneous(B)
        assert bookkeeping == [0] and probe.calls > 0


def test_an_unlocked_replay_without_a_request_log_does_no_bookkeeping(
    hit_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unlocked, the replay watches only where a request log listens: without one
    (``track_call_sites=False``) and under a probe answering False no request calls the
    replay's bookkeeping (slip: a replay watched where the log is None or the arena
    unlocked)."""
    from arena.planning import steps

    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe, track_call_sites=False) as ws:
        for _ in range(3):  # record and plan
            with ws.step("k") as st:
                st.get_simultaneous(A)
                st.get_simultaneous(B)
        bookkeeping = counting(monkeypatch, steps, "served")
        for _ in range(2):
            with ws.step("k") as st:
                st.get_simultaneous(A)
                st.get_simultaneous(B)
                assert st.replay
        assert bookkeeping == [0] and probe.calls > 0


def test_the_scopes_of_two_numpy_fronts_remember_their_views_apart(hit_path: str) -> None:
    """A cached and an uncached NumPy front keep their scopes' views under keys of their
    own: the uncached front's scope never hands out the cached front's shared view, which
    its caller may have changed in place (slip: every front's scopes remembered under
    one key)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 12)
        ws.lock()
        cached, plain = ws.front("numpy", cached=True), ws.front("numpy", cached=False)
        for _ in range(2):
            with cached.scope() as s:
                (shared,) = s.get_simultaneous(A)
        shared.shape = (64,)  # the cached front's own object, changed in place
        for _ in range(2):
            with plain.scope() as s:
                (view,) = s.get_simultaneous(A)
                assert view is not shared and view.shape == (4, 16)


def test_a_step_nested_in_an_empty_scope_inside_a_step_is_planned_right_above_it() -> None:
    """An inner step inside a scope that holds nothing, inside an outer step: the outer
    plan nests the inner run right at the outer step's end, and the slot is sized for
    the two requests, no more (Round 18b, a survivor of the draw: the nest lifted by one
    byte, and the slot grew 256 bytes more)."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(5):
            with ws.step("outer") as outer:
                outer.get_simultaneous(A)
                with ws.scope(), ws.step("inner") as inner:
                    inner.get_simultaneous(C)
        (slot,) = ws.stats().slots
        assert (slot.capacity, slot.high_water, slot.growths) == (512, 512, 2)


def test_closing_the_innermost_of_three_regions_keeps_what_the_two_others_hold(
    hit_path: str,
) -> None:
    """A scope closed inside two open regions leaves the stack holding what both of them
    hold, a sum (Round 18b, a survivor of the draw: close_region kept only the last
    region's bytes)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 12)
        with ws.scope() as outer:
            outer.get_simultaneous(A)
            with ws.scope() as middle:
                middle.get_simultaneous(B)
                with ws.scope() as inner:
                    inner.get_simultaneous(C)
                    slot = inner.slot
                    assert slot is not None and slot.stack.live == 768
                assert (slot.stack.top, slot.stack.live) == (512, 512)
            assert (slot.stack.top, slot.stack.live) == (256, 256)


def test_a_scope_request_whose_probe_opens_a_step_is_not_counted_above_that_step(
    hit_path: str,
) -> None:
    """A capture probe whose own code opens a step on the slot (between a scope's views
    and their mark): the scope's captured request counts with the plain requests, below
    that step, which opened above the scope (Round 18b, a survivor of the draw: the step
    innermost on the whole stack was told, and counted the scope's bytes above it)."""
    steps: list[Any] = []

    def probe() -> bool:
        if not armed:
            return False
        step = ws.step("k")
        step.__enter__()  # the probe's code opens a step: above the scope
        steps.append(step)
        return True

    armed = False
    large = ((1024,), F32)  # reaches past the end of the step's plan (256 bytes)
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        ws.reserve_bytes(1 << 13)
        for _ in range(3):
            with ws.step("k") as st:
                st.get_simultaneous(A)
        ws.lock()
        for _ in range(2):  # remembered for the scope's hit
            with ws.scope() as s:
                s.get_simultaneous(large)
        with ws.scope() as s:
            armed = True
            s.get_simultaneous(large)  # the step opens at the views' place
            armed = False
            (step,) = steps
            assert step.above == 0
            step.__exit__(None, None, None)
