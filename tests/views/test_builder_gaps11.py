"""Gaps in the view builder's tests that mutation Round 11 found (mutants of
``arena/views/builder.py`` that survived the ``plans`` group's tests), each test failing
with its mutant planted."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import pytest

from arena import Arena, ArenaLockedError
from tests.counting import counting
from tests.gates import TIMEOUT, Probe, moving_only

F32 = "float32"


def test_a_request_refused_while_locked_is_not_counted_and_not_uncounted() -> None:
    """A locked arena refuses a request larger than its slot: the slot's count of served
    calls stays where it was (Round 11: ``ViewBuilder.miss`` #235 took one off the count
    of a refused request, which ``ensure`` never counted)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.numpy.get_simultaneous(((64,), F32))
        ws.lock()
        before = ws.stats().calls
        with pytest.raises(ArenaLockedError):
            ws.numpy.get_simultaneous(((1 << 16,), F32))
        assert ws.stats().calls == before
        ws.numpy.get_simultaneous(((64,), F32))
        assert ws.stats().calls == before + 1


class RaceProbe:
    """A capture probe that says "capturing" to one thread alone (CUDA's capture status
    is a stream's), and, asked by ``ViewBuilder.served`` once armed, first lets another
    thread run ``intrude``: the race between a request's views and its capture mark."""

    def __init__(self, intrude: Callable[[], object]) -> None:
        self.thread: threading.Thread | None = None
        self.armed = False
        self.intrude = intrude
        self.errors: list[BaseException] = []

    def __call__(self) -> bool:
        if threading.current_thread() is not self.thread:
            return False
        # "in": mutmut's copy of ``served`` has a longer name (served__mutmut_orig).
        if self.armed and "served" in sys._getframe(1).f_code.co_name:
            self.armed = False
            other = threading.Thread(target=self._intrude)
            other.start()
            other.join(TIMEOUT)
        return True

    def _intrude(self) -> None:
        try:
            self.intrude()
        except BaseException as exc:
            self.errors.append(exc)


def test_a_zero_byte_first_request_while_capturing_is_served_and_marked() -> None:
    """A zero-byte request on a slot never sized, while a graph is captured, takes the
    general path and marks the slot's buffer captured (Round 11: ``ViewBuilder.miss``
    #268 marked ``None``, failed, and served it again the same way, for ever)."""
    probe = Probe()
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        probe.capturing = True
        views = ws.numpy.get_simultaneous(((0,), F32))
        assert views[0].shape == (0,)
        assert ws.stats().calls == 1


@moving_only("the race needs a growth that replaces the buffer")
def test_a_scope_request_served_again_after_a_capture_race_keeps_its_specs() -> None:
    """Another thread grows the slot between a captured scope request's views and their
    capture mark: the request is served again from the new buffer, and the request log
    keeps its specs (Round 11: ``ViewBuilder.miss`` #291 served it again with specs
    ``None``, which the log kept and ``memory_snapshot()`` could not lay out)."""
    box: list[Arena] = []
    probe = RaceProbe(lambda: box[0].numpy.get_simultaneous(((1 << 16,), F32)))
    with Arena("cpu", framework="numpy", capture_probe=probe) as ws:
        box.append(ws)
        ws.numpy.get_simultaneous(((256,), F32))
        probe.thread = threading.current_thread()
        with ws.numpy.scope() as scope:
            probe.armed = True
            views = scope.get_simultaneous(((16,), F32))
            assert not probe.armed, "the race did not happen"
            assert probe.errors == []
            assert ws.stats().slots[0].capacity == 1 << 18  # grown by the other thread
            assert views[0].shape == (16,)
            (segment,) = ws.memory_snapshot()["segments"]
            sizes = [v["requested_size"] for b in segment["blocks"] for v in b["arena_views"]]
            assert sizes == [64]


def test_a_first_sighting_on_a_reserved_buffer_is_planned_at_its_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A NumPy front places a structure's first sighting from the request and plans it at
    the second, also on a buffer ``reserve()`` made, which holds no import of the buffer
    yet (Round 11: ``ViewBuilder.miss`` #68 gave the compiled planner no import of the
    buffer, which left the request to Python's plan, made at the first sighting)."""
    from arena.views import builder

    made = counting(monkeypatch, builder, "make_plan")  # plans made, as one count
    specs = (((4,), F32), ((4, 4), "int32"))
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve(((1 << 16,), F32))
        first = ws.numpy.get_simultaneous(*specs)
        assert made == [0]
        assert [v.shape for v in first] == [(4,), (4, 4)]
        ws.numpy.get_simultaneous(*specs)
        assert made == [1]  # planned at the second sighting


def test_a_request_with_list_shapes_leaves_a_full_cache_of_layouts_alone() -> None:
    """A request with list shapes (unhashable) is never remembered, so it sweeps nothing
    out of a full cache of remembered layouts (Round 11: ``ViewBuilder.deliver`` #19
    admitted it where the layouts seen once were not empty, the only case the lookup of
    an unhashable key raises: ``remember`` swept the cache to make room for an entry it
    then could not insert)."""
    with Arena("cpu", framework="numpy", max_cached_layouts=8) as ws:
        ws.reserve(((1 << 14,), F32))
        for n in range(1, 9):
            for _ in range(2):  # remembered at the second sighting
                ws.numpy.get_simultaneous(((n,), F32))
        assert ws.stats().cached_layouts == 8
        ws.numpy.get_simultaneous(((100,), F32))  # seen once: not remembered yet
        for _ in range(2):
            views = ws.numpy.get_simultaneous(([4], F32), ([2, 2], "int32"))
            assert [v.shape for v in views] == [(4,), (2, 2)]
        assert ws.stats().cached_layouts == 8


def test_a_poisoning_fronts_locked_replays_hand_out_fresh_views() -> None:
    """A poisoning NumPy front hands out new views on every replay of a planned step, also
    where the compiled replay hit serves it (locked: no request log to tell) (Round 11:
    ``ViewBuilder.__init__`` #41, ``fresh_view = None`` with poisoning, made that hit hand
    out the remembered views themselves, the same objects every replay)."""
    with Arena("cpu", framework="numpy", poison=True) as ws:
        kept = []
        for run in range(5):
            if run == 1:
                ws.plan_steps()
                ws.lock()
            with ws.numpy.step("s") as step:
                kept.append(step.get_simultaneous(((4,), F32), ((8,), F32)))
        assert len({id(views[0]) for views in kept}) == len(kept)
