"""A scope's enter and exit: where the compiled hit path is in use, the usual scope's are
compiled (``scope_enter``, ``scope_exit`` in ``arena/planning/_region_hit.c``) and leave what the
Python ones (``Scope._enter_on``, ``Scope.__exit__``) leave: the same slot state and
scope fields after every enter and exit, nested in scopes and steps, closed in and out
of order. Everything else goes to Python: debug mode, poisoning, a closed arena, a
region to heal, a scope open already, a mutex another thread holds; and the compiled
ones keep reference counts flat."""

from __future__ import annotations

import threading
import time
import tracemalloc
from typing import Any

import pytest

from arena import Arena, ArenaClosedError, ArenaError
from arena.planning import region_hit, scopes
from arena.planning.scopes import CompiledScope, Scope
from arena.views import hit
from tests.conftest import need_compiled_hit
from tests.gates import behind_the_mutex
from tests.refcounts import assert_counts_flat

F32 = "float32"


def _slot_state(slot: Any) -> Any:
    # CompiledScope and Scope, CompiledStep and Step alike
    regions = [
        (type(r).__name__.replace("Compiled", ""), getattr(r, "key", None))
        for r in slot.stack.regions
    ]
    return (
        slot.stack.top,
        slot.stack.live,
        slot.load,
        slot.plain_high,
        slot.detour,
        slot.calls,
        regions,
    )


def _scope_state(scope: Scope[Any]) -> Any:
    slot = "open" if scope.slot is not None else None
    return (slot, scope.base, scope.end, scope.held, scope._watch)


def _counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the Python enters and exits a scope takes (the compiled ones hand them the
    cases they do not handle)."""
    taken = {"enter": 0, "enter_on": 0, "exit": 0}
    methods = vars(Scope)
    enter, enter_on, leave = methods["_python_enter"], Scope._enter_on, methods["_python_exit"]

    def python_enter(self: Scope[Any]) -> Any:
        taken["enter"] += 1
        return enter(self)

    def python_enter_on(self: Scope[Any], slot: Any) -> Any:
        taken["enter_on"] += 1
        return enter_on(self, slot)

    def python_exit(self: Scope[Any], *exc_info: object) -> None:
        taken["exit"] += 1
        leave(self, *exc_info)

    monkeypatch.setattr(Scope, "_python_enter", python_enter)
    monkeypatch.setattr(Scope, "_enter_on", python_enter_on)
    monkeypatch.setattr(Scope, "_python_exit", python_exit)
    return taken


class _Other:
    """A region of a type the compiled enter and exit do not know."""

    slot: Any = None
    base = end = held = 0

    def __exit__(self, *exc_info: object) -> None:
        scopes.close_region(self)


def _program(ws: Arena, log: list[Any]) -> None:
    """Scopes nested in scopes and steps, a step in a scope, plain requests above them,
    and two scopes closed out of order; the slot and scope after every enter and exit."""
    front = ws.numpy
    slot = front._select()

    def note(what: str, scope: Scope[Any]) -> None:
        log.append((what, _slot_state(slot), _scope_state(scope)))

    with front.scope() as outer:
        note("outer entered", outer)
        outer.get_simultaneous(((64,), F32), ((16,), F32))
        with front.scope() as inner:
            note("inner entered", inner)
            inner.get_simultaneous(((32,), F32))
            front.get_simultaneous(((8,), F32))  # above the open regions
        note("inner exited", inner)
        with front.step("k") as st:
            st.get_simultaneous(((128,), F32))
            with front.scope() as deep:
                note("scope in a step entered", deep)
                deep.get_simultaneous(((40,), F32))
            note("scope in a step exited", deep)
        outer.get_simultaneous(((24,), F32))
    note("outer exited", outer)
    with front.step("s") as st:
        with front.scope() as sc:
            note("scope right in a step", sc)
            sc.get_simultaneous(((16,), F32))
        st.get_simultaneous(((16,), F32))
    first, second = front.scope(), front.scope()
    first.__enter__()
    first.get_simultaneous(((48,), F32))
    second.__enter__()
    second.get_simultaneous(((16,), F32))
    note("second entered", second)
    first.__exit__(None, None, None)  # out of order: second stays open above it
    note("first exited", first)
    second.__exit__(None, None, None)
    note("second exited", second)
    second.__exit__(None, None, None)  # again: nothing changes
    note("second exited again", second)


def _run(path: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], dict[str, int]]:
    monkeypatch.setattr(hit, "HIT_PATH", path)
    taken = _counted(monkeypatch)
    log: list[Any] = []
    with Arena("cpu", framework="numpy") as ws:
        ws.reserve_bytes(1 << 16)
        for run in range(4):
            if run == 3:
                ws.lock()
            _program(ws, log)
            log.append(("run", run))
    monkeypatch.undo()
    return log, taken


def test_the_compiled_enter_and_exit_leave_what_the_python_ones_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    need_compiled_hit()
    compiled, taken = _run("compiled", monkeypatch)
    python, python_taken = _run("python", monkeypatch)
    assert compiled == python
    # Python: every enter through _enter_on (6 scopes a run, 4 runs); the counts count.
    assert python_taken == {"enter": 0, "enter_on": 24, "exit": 0}
    # Compiled: every enter and exit of the program's scopes (none is unusual).
    assert taken == {"enter": 0, "enter_on": 0, "exit": 0}


def test_the_python_enter_and_exit_are_the_scopes_own(hit_path: str) -> None:
    """On either path, a scope's class has the enter and exit the path says."""
    with Arena("cpu", framework="numpy") as ws:
        scope = ws.scope()
        compiled = hit_path == "compiled"
        assert (type(scope) is CompiledScope) == compiled
        assert (type(scope).__enter__ is Scope.__enter__) != compiled
        methods = vars(Scope)
        assert methods["_python_enter"] is Scope.__enter__
        assert methods["_python_exit"] is Scope.__exit__


@pytest.mark.parametrize("case", ["debug", "poison", "closed", "heal", "open", "foreign"])
def test_what_the_compiled_enter_and_exit_hand_to_python(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Debug mode (the slot is held), poisoning (its exit poisons), a closed arena (the
    error), a region to heal, a scope open already (the error) and a region of another
    type on the stack go to the Python enter and exit, with their outcome."""
    need_compiled_hit()
    monkeypatch.setattr(hit, "HIT_PATH", "compiled")
    taken = _counted(monkeypatch)
    options: dict[str, Any] = {"debug": case == "debug", "poison": case == "poison"}
    ws = Arena("cpu", framework="numpy", **options)
    slot = ws.numpy._select()
    if case == "closed":
        scope = ws.scope()
        ws.close()
        with pytest.raises(ArenaClosedError):
            scope.__enter__()
        assert taken == {"enter": 0, "enter_on": 1, "exit": 0}
        return
    if case == "heal":
        ws.scope().__enter__()  # dropped: the next region heals it
        with ws.scope() as scope:
            assert slot.stack.regions == [scope]
        # Healed by the Python enter, which exits the orphan (compiled, as its own exit).
        assert taken == {"enter": 0, "enter_on": 1, "exit": 0}
    elif case == "open":
        with ws.scope() as scope, pytest.raises(ArenaError, match="already open"):
            scope.__enter__()
        assert taken == {"enter": 1, "enter_on": 0, "exit": 0}
    elif case == "foreign":
        other = _Other()
        scopes.open_region(other, slot)  # a region of another type below
        with ws.scope() as scope:
            scope.get_simultaneous(((16,), F32))
            assert slot.stack.regions == [other, scope]
        assert slot.stack.regions == [other] and slot.stack.top == 0
        assert taken == {"enter": 0, "enter_on": 1, "exit": 1}
        scopes.close_region(other)
    else:
        with ws.scope() as scope:
            (view,) = scope.get_simultaneous(((16,), F32))
            assert scope._watch
        if case == "poison":  # entered compiled (watching), exited in Python (poisoned)
            assert taken == {"enter": 0, "enter_on": 0, "exit": 1}
            assert view.view("uint32")[0] != 0
        else:
            assert taken == {"enter": 0, "enter_on": 1, "exit": 1}
    assert slot.stack.regions == [] and (slot.stack.top, slot.stack.live, slot.detour) == (0, 0, 0)
    ws.close()


def test_the_compiled_enter_and_exit_wait_for_a_mutex_another_thread_holds() -> None:
    need_compiled_hit()
    with Arena("cpu", framework="numpy") as ws:
        slot = ws.numpy._select()
        for stage in ("enter", "exit"):
            scope = ws.scope()
            behind_the_mutex(slot, scope, stage)
            if stage == "enter":
                scope.__exit__(None, None, None)
        assert slot.stack.regions == [] and (slot.stack.top, slot.stack.live) == (0, 0)


def test_the_compiled_enter_and_exit_keep_reference_counts_flat() -> None:
    need_compiled_hit()
    spec = ((64,), F32)
    with Arena("cpu", framework="numpy") as ws:
        front = ws.numpy
        for _ in range(3):
            with front.scope() as outer:
                outer.get_simultaneous(spec)
                with front.scope() as inner:
                    inner.get_simultaneous(spec)
        del outer, inner
        ws.lock()
        slot = front._select()
        watched = (
            slot, slot.governor, slot.governor.mutex, front._builder, CompiledScope,
            slot.buffer,
        )  # fmt: skip
        scope = front.scope
        outer = scope()
        outer.__enter__()

        def scopes() -> None:
            for _ in range(1_000_000):
                with scope():
                    pass
            for _ in range(100_000):
                with scope() as inner:
                    inner.get_simultaneous(spec)

        assert_counts_flat((*watched, outer), scopes)
        tracemalloc.start()
        try:
            for _ in range(1000):
                with scope():
                    pass
            start = tracemalloc.get_traced_memory()[0]
            for _ in range(100_000):
                with scope():
                    pass
            assert tracemalloc.get_traced_memory()[0] - start < 4096
        finally:
            tracemalloc.stop()
        outer.__exit__(None, None, None)
        assert slot.stack.regions == [] and (slot.stack.top, slot.stack.live) == (0, 0)


def _fields(scope: Scope[Any]) -> list[tuple[str, Any]]:
    names = [*Scope.__slots__, *region_hit.PyScopeHitBase.__slots__]
    return [(name, getattr(scope, name)) for name in names]


def test_the_compiled_init_sets_every_field_python_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every field of a new scope, the same objects (the front's placer, select and fresh
    view function, the memo key, a new empty list), compiled and in Python; a front key
    whose scopes have no memo key yet, and arguments not passed as a front passes them,
    go to the Python __init__ (which makes the key, or raises)."""
    need_compiled_hit()
    taken = [0]
    python_init = vars(Scope)["_python_init"]

    def counted(self: Scope[Any], *args: Any, **kwargs: Any) -> None:
        taken[0] += 1
        python_init(self, *args, **kwargs)

    monkeypatch.setattr(Scope, "_python_init", counted)
    for poison in (False, True):
        with Arena("cpu", framework="numpy", poison=poison) as ws:
            front = ws.numpy
            governor = front._governor
            args: tuple[Any, ...] = (front._builder, front._select)
            kwargs: dict[str, Any] = {
                "alignment": governor.alignment,
                "poison": front._poison,
                "debug": False,
            }
            front.scope()  # the front key's first scope makes its memo key (in Python)
            taken[0] = 0
            compiled = CompiledScope(*args, **kwargs)
            python: Scope[Any] = Scope(*args, **kwargs)
            assert _fields(compiled) == _fields(python)
            assert compiled._handed is not python._handed
            assert compiled._memo is python._memo  # one str per front key
            assert taken == [0]
            made = front.scope()
            assert type(made) is CompiledScope and _fields(made) == _fields(python)
            assert taken == [0]
            memo = scopes._MEMO_KEYS.pop(front._builder.key)
            assert _fields(CompiledScope(*args, **kwargs)) == _fields(python)
            assert taken == [1] and scopes._MEMO_KEYS[front._builder.key] == memo
            taken[0] = 0
            for bad_args, bad_kwargs in (
                (args, {**kwargs, "extra": 1}),
                ((*args, 64), {"poison": False, "debug": False}),
                (args, {"alignment": 64, "poison": False}),
            ):
                outcomes = []
                for kind in (CompiledScope, Scope):
                    with pytest.raises(TypeError) as caught:
                        kind(*bad_args, **bad_kwargs)
                    outcomes.append(str(caught.value).replace("_python_init", "__init__"))
                assert outcomes[0] == outcomes[1]
            assert taken == [3]
            taken[0] = 0


def test_a_bare_region_is_no_context_manager_on_either_path() -> None:
    """A :class:`~arena.planning.scopes.Region` (the base of scopes) has no enter or exit
    of its own: ``with`` refuses it and ``__exit__`` is missing as for any class without
    them, whether its base is the compiled ``ScopeHitBase`` (whose enter and exit are
    CompiledScope's) or the Python one; never an error about a ``_python_enter`` or
    ``_python_exit`` it was never meant to have."""

    class Bare:
        pass

    outcomes = []
    for kind in (Bare, scopes.Region):
        region = kind()
        with pytest.raises(TypeError) as entered, region:  # type: ignore[attr-defined]
            pass
        with pytest.raises(AttributeError) as exited:
            region.__exit__(None, None, None)  # type: ignore[attr-defined]
        outcomes.append([str(e.value).replace(kind.__name__, "X") for e in (entered, exited)])
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("kind", ["scope", "step"])
def test_an_enter_waiting_for_the_mutex_refuses_an_arena_closed_meanwhile(
    kind: str, debug: bool, hit_path: str
) -> None:
    """Another thread holds the mutex and closes the arena while a scope's (a step's) enter
    waits for it: the enter raises ArenaClosedError, as it does on an arena closed before
    it, and leaves no region on the slot (the closed check ran before the wait, and the
    region opened on the closed arena); in debug mode the slot is not left held."""
    ws = Arena("cpu", framework="numpy", debug=debug)
    slot = ws.numpy._select()
    mutex = slot.governor.mutex
    held, go = threading.Event(), threading.Event()
    outcome: list[Any] = []

    def hold() -> None:
        with mutex:
            held.set()
            go.wait(10)
            ws.close()

    def enter() -> None:
        region = ws.scope() if kind == "scope" else ws.step("k")
        try:
            region.__enter__()
            outcome.append("entered")
            region.__exit__(None, None, None)
        except ArenaClosedError:
            outcome.append("refused")

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    runner = threading.Thread(target=enter)
    runner.start()
    time.sleep(0.05)  # the enter is waiting for the mutex
    go.set()
    holder.join(10)
    runner.join(10)
    assert outcome == ["refused"]
    assert slot.stack.regions == [] and slot.detour == 0
    assert (slot.holder.thread, slot.holder.depth) == (None, 0)


def test_a_bare_region_starts_closed_and_opens_at_the_slots_top() -> None:
    """A :class:`~arena.planning.scopes.Region` made bare is closed (no slot, no bytes);
    ``open_on`` opens it at the slot's top, above what is open there, and
    :func:`~arena.planning.scopes.close_region` closes it (Round 10 of the mutation
    tests: nothing in arena makes one, scopes and steps setting these fields inline)."""
    region = scopes.Region()
    assert region.slot is None
    assert (region.base, region.end, region.held) == (0, 0, 0)
    scopes.close_region(region)  # never opened: nothing to close
    with Arena("cpu", framework="numpy") as ws, ws.scope() as s:
        s.get_simultaneous(((256,), F32))
        slot = s.slot
        assert slot is not None
        region.open_on(slot)
        assert region.slot is slot and slot.stack.regions[-1] is region
        assert (region.base, region.end, region.held) == (1024, 1024, 0)
        scopes.close_region(region)
        assert region.slot is None and slot.stack.regions[-1] is s
