"""The usual replay (locked, nothing open on the slot, at its plan's height) enters and
exits by lean paths (``Step._replay_locked``, ``Step._end_replay``), with the outcome of
the checked ones: the same pointers, the same slot and book state after every run. Where
the compiled hit path is in use, a step's ``__init__`` and the lean enter and exit are
compiled (``arena/planning/_region_hit.c``): the same fields, pointers and state as in Python, and
everything else handed to Python (a mutex another thread holds, an interrupt in a key's
``__hash__``)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from arena import Arena
from arena.planning import region_hit, steps
from arena.planning.books import books_of
from arena.planning.records import StepBook
from arena.planning.runs import StepRun
from arena.planning.steps import Step
from arena.views import hit
from tests.gates import behind_the_mutex
from tests.refcounts import assert_counts_flat

F32 = "float32"


def _program(ws: Arena, log: list[Any]) -> Any:
    """Replays of two keys, releases, a step run inside another, a scope inside a step,
    and a step entered inside a scope (the checked paths); returns the slot."""
    with ws.step("a") as st:
        slot = st.slot
        x, y = st.get_simultaneous(((64,), F32), ((32,), F32))
        st.release(x)
        with ws.step("inner") as inner:
            (z,) = inner.get_simultaneous(((16,), F32))
            log.append(ws.numpy.data_ptr(z))
        with ws.scope() as sc:
            (w,) = sc.get_simultaneous(((8,), F32))
            log.append(ws.numpy.data_ptr(w))
        (v,) = st.get_simultaneous(((48,), F32))
        log.append([ws.numpy.data_ptr(t) for t in (x, y, v)])
    with ws.step("b") as st:
        (u,) = st.get_simultaneous(((128,), F32))
        log.append(ws.numpy.data_ptr(u))
    with ws.scope() as sc:
        sc.get_simultaneous(((8,), F32))
        with ws.step("c") as st:
            (u,) = st.get_simultaneous(((128,), F32))
            log.append(ws.numpy.data_ptr(u))
    return slot


def _offsets(value: Any, origin: int) -> Any:
    """``value``'s pointers (ints, nested in lists) as offsets from ``origin``."""
    if isinstance(value, list):
        return [_offsets(item, origin) for item in value]
    return value - origin


def _state(slot: Any) -> Any:
    books = {
        key: tuple((name, getattr(book, name)) for name in StepBook.__slots__ if name != "found")
        for key, book in books_of(slot).items()
    }
    return (
        slot.stack.top,
        slot.stack.live,
        slot.load,
        slot.detour,
        slot.calls,
        slot.stack.regions,
        books,
    )


def _run(
    lean: bool, monkeypatch: pytest.MonkeyPatch, path: str = "python"
) -> tuple[list[Any], list[int]]:
    """The program's pointers and state per run, the Python lean enters and exits taken
    (``lean``: the lean paths, else the checked ones in their place), on hit ``path``."""
    monkeypatch.setattr(hit, "HIT_PATH", path)
    taken = [0, 0]
    replay, end = Step._replay_locked, Step._end_replay

    def enter(self: Step[Any], slot: Any, book: Any) -> Any:
        taken[0] += 1
        return replay(self, slot, book) if lean else Step._enter_checked(self, slot, book)

    def leave(self: Step[Any], slot: Any, run: Any, book: Any) -> None:
        taken[1] += 1
        if lean:
            end(self, slot, run, book)
        else:
            Step._exit_checked(self, slot, run, book, None)

    monkeypatch.setattr(Step, "_replay_locked", enter)
    monkeypatch.setattr(Step, "_end_replay", leave)
    log: list[Any] = []
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        origin = ws.numpy.data_ptr(ws.numpy.get_simultaneous(((1,), F32))[0])
        for run in range(5):
            if run == 3:
                ws.lock()
            ptrs: list[Any] = []
            slot = _program(ws, ptrs)
            # Offsets from the block's first view: two arenas' blocks lie at addresses of
            # their own (a repr with only the origin itself replaced compared the others).
            log.append((run, _offsets(ptrs, origin), _state(slot)))
    monkeypatch.undo()
    return log, taken


def test_the_lean_replay_paths_leave_what_the_checked_ones_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lean, taken = _run(True, monkeypatch)
    checked, _ = _run(False, monkeypatch)
    assert lean == checked
    # Entered lean: "a" and "b" of the two locked runs (not "inner", nor "c" in a
    # scope); ended lean: theirs, and those of the two unlocked replays before lock().
    assert taken == [4, 8]


def _compiled() -> None:
    if hit.compiled is None or region_hit.compiled is None:
        pytest.skip("the compiled hit path is not in use here")


def test_the_compiled_enter_and_exit_leave_what_the_python_ones_leave(
    monkeypatch: pytest.MonkeyPatch, rlock: str
) -> None:
    compiled, taken = _run(True, monkeypatch, "compiled")
    python, python_taken = _run(True, monkeypatch, "python")
    assert compiled == python
    assert python_taken == [4, 8]
    # Compiled: every lean enter ("a" and "b" locked); every lean exit but those of "a",
    # a step run inside it (the Python one merges what ran inside).
    assert taken == [0, 4]


def _norm(value: Any) -> Any:
    """A step's field, comparable across arenas: runs by their fields, views by shape,
    dicts by their values (their keys may be ids), objects by their type."""
    if value is steps._ENDED:
        return "ENDED"
    if isinstance(value, StepRun):
        return ("run", [(name, _norm(getattr(value, name))) for name in StepRun.__slots__])
    if isinstance(value, np.ndarray):
        return ("array", value.shape, value.dtype.str)
    if isinstance(value, dict):
        return ("dict", sorted(repr(_norm(v)) for v in value.values()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_norm(v) for v in value])
    if isinstance(value, set):
        return ("set", sorted(value))
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return type(value).__name__


def _fields(step: Step[Any]) -> list[tuple[str, Any]]:
    names = [*Step.__slots__, *region_hit.PyStepHitBase.__slots__]
    return [(name, _norm(getattr(step, name))) for name in names]


def _stages(path: str, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A locked step's fields made, entered, after a request and a release, and exited;
    then entered again (the same object), and its slot and book."""
    monkeypatch.setattr(hit, "HIT_PATH", path)
    found: list[Any] = []
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            with ws.step("k") as st:
                x, _ = st.get_simultaneous(((64,), F32), ((16,), F32))
                st.release(x)
        ws.lock()
        st = ws.step("k")
        assert type(st) is (steps.CompiledStep if path == "compiled" else Step)
        found.append(_fields(st))
        with st:
            found.append(_fields(st))
            x, _ = st.get_simultaneous(((64,), F32), ((16,), F32))
            st.release(x)
            found.append(_fields(st))
        found.append(_fields(st))
        with st:  # the same object again
            found.append(_fields(st))
        found.append((_fields(st), _state(ws.numpy._select())))
    monkeypatch.undo()
    return found


def test_the_compiled_init_enter_and_exit_set_every_field_python_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _compiled()
    assert _stages("compiled", monkeypatch) == _stages("python", monkeypatch)


def test_the_compiled_init_refuses_what_python_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    _compiled()
    monkeypatch.setattr(hit, "HIT_PATH", "compiled")
    with Arena("cpu", framework="numpy") as ws:
        for key in (float("nan"), [1], ("a", [2])):
            with pytest.raises(Exception) as caught:
                ws.step(key)
            assert type(caught.value).__name__ == "SpecError"
        step = steps.CompiledStep(
            ws.numpy._builder,
            ws.numpy._select,
            ("a", 1),
            alignment=64,
            poison=False,
            debug=False,  # no fresh_view: Python's __init__ and its default
        )
        assert step._fresh_view is False and step.key == ("a", 1)


class _Key:
    """A step key whose ``__hash__`` and ``__eq__`` raise KeyboardInterrupt at the
    ``armed``-th call of either (counted in ``calls``)."""

    calls = 0
    armed = 0

    def _tick(self) -> None:
        _Key.calls += 1
        if _Key.calls == _Key.armed:
            raise KeyboardInterrupt("key")

    def __hash__(self) -> int:
        self._tick()
        return 7

    def __eq__(self, other: object) -> bool:
        self._tick()
        return isinstance(other, _Key)


def test_an_interrupt_in_a_keys_hash_or_eq_leaves_no_step_open(hit_path: str) -> None:
    """A KeyboardInterrupt at every call of a key's ``__hash__`` and ``__eq__`` made by
    ``ws.step(key)`` and its locked replay's enter comes out as itself; the step is not
    entered (the compiled enter looks the key up before it installs anything), and the
    next run hands out the same pointers."""
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):
            with ws.step(_Key()) as st:
                st.get_simultaneous(((64,), F32))
        ws.lock()
        slot = ws.numpy._select()
        with ws.step(_Key()) as st:
            (view,) = st.get_simultaneous(((64,), F32))
            expected = ws.numpy.data_ptr(view)
        _Key.calls = 0
        with ws.step(_Key()):
            pass
        points = _Key.calls
        assert points >= 3  # init (hash, eq), the book's lookup, the views' lookup
        for armed in range(1, points + 1):
            _Key.calls, _Key.armed = 0, armed
            with pytest.raises(KeyboardInterrupt, match="key"), ws.step(_Key()):
                pass
            _Key.armed = 0
            assert slot.stack.regions == [] and (slot.stack.top, slot.stack.live) == (0, 0)
            assert not any(book.running for book in books_of(slot).values())
            with ws.step(_Key()) as st:
                (view,) = st.get_simultaneous(((64,), F32))
                assert ws.numpy.data_ptr(view) == expected
                assert slot.stack.regions == [st]


def _behind_the_mutex(front: Any, stage: str) -> None:
    """Another thread holds the governor's mutex while this one enters (``stage``
    "enter") or exits a locked replay: nothing changes until it leaves."""
    step = front.step("k")
    behind_the_mutex(front._select(), step, stage)
    if stage == "enter":
        step.__exit__(None, None, None)


@pytest.fixture(params=["read", "called"])
def rlock(request: pytest.FixtureRequest) -> Iterator[str]:
    """The compiled enter and exit read the governor's RLock directly (where its layout
    checks out), or take and give it back by its methods."""
    _compiled()
    read = steps._bind_compiled(read_rlocks=request.param == "read")
    if request.param == "read" and not read:
        pytest.skip("RLocks are not read directly here")
    # Told not to read them, it takes them by their methods (steps.py _bind_compiled #40:
    # read_rlocks not passed on, so both params read them directly).
    assert request.param == "read" or not read
    try:
        yield request.param
    finally:
        steps._bind_compiled()


def test_the_compiled_enter_and_exit_wait_for_a_mutex_another_thread_holds(rlock: str) -> None:
    with Arena("cpu", framework="numpy") as ws:
        front = ws.numpy
        assert type(front.step("k")) is steps.CompiledStep
        for _ in range(3):
            with front.step("k"):
                pass
        ws.lock()
        _behind_the_mutex(front, "enter")
        _behind_the_mutex(front, "exit")
        slot = front._select()
        assert slot.stack.regions == [] and (slot.stack.top, slot.stack.live) == (0, 0)


def test_the_compiled_init_enter_and_exit_keep_reference_counts_flat() -> None:
    _compiled()
    with Arena("cpu", framework="numpy") as ws:
        front = ws.numpy
        spec = ((64,), np.dtype("float32"))
        key = ("layer", 3)
        for _ in range(3):
            with front.step(key) as st:
                (x,) = st.get_simultaneous(spec)
                st.release(x)
        ws.lock()
        slot = front._select()
        book = books_of(slot)[key]
        step = front.step
        with step(key) as st:
            (x,) = st.get_simultaneous(spec)
            caches = st._caches
        del st, x
        watched = (
            key, spec, slot, book, slot.buffer, slot.governor, slot.governor.mutex,
            front._builder, steps._ENDED, book.expiring, caches, steps.CompiledStep,
            book.starts, next(iter(caches[0].values())).views, steps._ENDED.ids,
        )  # fmt: skip

        def runs() -> None:
            for _ in range(1_000_000):
                with step(key):
                    pass
            for _ in range(100_000):
                with step(key) as st:
                    (x,) = st.get_simultaneous(spec)
                    st.release(x)

        assert_counts_flat(watched, runs)
        tracemalloc.start()
        try:
            for _ in range(1000):
                with step(key):
                    pass
            start = tracemalloc.get_traced_memory()[0]
            for _ in range(100_000):
                with step(key):
                    pass
            assert tracemalloc.get_traced_memory()[0] - start < 4096
        finally:
            tracemalloc.stop()


def test_a_replays_run_makes_no_recording_fields(hit_path: str) -> None:
    """A replay's run shares read-only empties for the fields only a recording writes
    (counts, sizes, firsts, offsets, live); a recording run, and a replay that diverges
    into recording, has its own, and records as before."""
    recording = ("counts", "sizes", "firsts", "offsets", "live")
    spec = ((64,), F32)
    with Arena("cpu", framework="numpy") as ws:
        for _ in range(3):  # record, plan, replay
            with ws.step("k") as st:
                (x,) = st.get_simultaneous(spec)
                st.release(x)
                st.get_simultaneous(spec)
        with ws.step("diverging") as st:
            st.get_simultaneous(spec)
            assert isinstance(st.run.live, dict) and len(st.run.sizes) == 1
        for _ in range(2):
            with ws.step("diverging") as st:
                st.get_simultaneous(spec)
        with ws.step("diverging") as st:  # a replay, unlocked: a second request records
            st.get_simultaneous(spec)
            assert st.replay and st.run.live == {} and len(st.run.sizes) == 0
            st.get_simultaneous(((16,), F32))
            assert not st.replay and isinstance(st.run.live, dict)
            assert len(st.run.live) == 2 and st.run.counts == [1, 1]
        ws.lock()
        runs = []
        for _ in range(2):
            with ws.step("k") as st:
                (x,) = st.get_simultaneous(spec)
                st.release(x)
                st.get_simultaneous(spec)
                runs.append(st.run)
        a, b = runs
        assert a is not b
        for name in recording:
            assert getattr(a, name) is getattr(b, name)
            assert len(getattr(a, name)) == 0
        with pytest.raises((AttributeError, TypeError)):
            a.live[0] = (0, 64)
        with pytest.raises(AttributeError):
            a.counts.append(1)  # type: ignore[attr-defined]


def test_bind_steps_documents_the_types_it_takes() -> None:
    """``bind_steps``'s docstring lists the types its refusal lists (``StepBooks`` went
    missing from the docstring when the step books moved to ``planning/books.py``)."""
    _compiled()
    bind_steps = region_hit.compiled.bind_steps
    with pytest.raises(TypeError) as refused:
        bind_steps(*([object] * 8), None, (), (), ())  # no Step type: refused, named
    said = str(refused.value).split("(", 1)[1].split(", the ended run")[0]
    documented = bind_steps.__doc__.split("(", 1)[1].split(", ended run")[0]
    assert said.startswith("Step, StepRun, StepBook, StepBooks, placer type")
    assert documented == said
