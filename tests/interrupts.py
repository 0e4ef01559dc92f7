"""Interrupts in step and scope bookkeeping: a KeyboardInterrupt raised at one chosen
function entry or return in arena's code (a ``sys.settrace`` injector), or by a real
SIGALRM at a random moment, then checks that the arena is still usable.

Used by tests/planning/test_step_interrupts.py and by hand for the long counts:
``python -m tests.interrupts points`` (every entry and return of every phase) and
``python -m tests.interrupts signals 1000`` (random real-signal rounds); the same for
``with ws.locked():`` and ``ws.unlocked()`` blocks: ``python -m tests.interrupts switch``
and ``python -m tests.interrupts switch-signals 1000``.
"""

from __future__ import annotations

import gc
import os
import random
import signal
import sys
import time
import warnings
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

import arena
from arena import Arena, ArenaWarning
from arena.planning.books import books_of
from tests.sources import check_books

F32 = "float32"
ARENA_DIR = os.path.dirname(arena.__file__) + os.sep
#: Runs before the interrupted one: record, plan at entry, replay, replay locked.
PHASES = (0, 1, 2, 3)


def program(ws: Arena) -> None:
    """Steps and scopes nested in one another, releases, plain requests inside them."""
    with ws.step("outer") as outer:
        a, _ = outer.get_simultaneous(((64,), F32), ((256,), F32))
        with ws.scope() as scope:
            scope.get_simultaneous(((128,), F32))
            ws.get_simultaneous(((32,), F32))  # a plain request above the open regions
        outer.release(a)
        with ws.step("inner") as inner:
            (c,) = inner.get_simultaneous(((512,), F32))
            inner.release(c)
            inner.get_simultaneous(((100,), F32))
            with ws.scope() as deep:
                deep.get_simultaneous(((40,), F32))
        outer.get_simultaneous(((64,), F32))
    with ws.scope() as scope:
        scope.get_simultaneous(((300,), F32))
        with ws.step("scoped") as scoped:
            scoped.get_simultaneous(((50,), F32))


def in_arena(frame: FrameType) -> bool:
    """Whether ``frame`` runs arena's own Python code (the default frames an
    :class:`Injector` counts)."""
    return frame.f_code.co_filename.startswith(ARENA_DIR)


class Injector:
    """A ``sys.settrace`` function that counts the calls into and returns from the frames
    ``counts`` picks (default: arena's Python code) and raises KeyboardInterrupt at the
    ``at``-th (never when ``at`` is 0). The one injector of the suite's interrupt tests."""

    def __init__(self, at: int = 0, counts: Callable[[FrameType], bool] = in_arena) -> None:
        self.at = at
        self.counts = counts
        self.count = 0
        self.fired = False
        self.where = ""  # the event it fired at: "return of Slot.account"
        self.growing = False  # the interrupt landed inside a slot's growth

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call" or not self.counts(frame):
            return None
        frame.f_trace_lines = False
        self._tick(frame, event)
        return self._local

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return":
            self._tick(frame, event)
        return self._local

    def _tick(self, frame: FrameType, event: str) -> None:
        self.count += 1
        if self.count == self.at:
            self.fired = True
            self.where = f"{event} of {frame.f_code.co_qualname}"
            self.growing = in_growth(frame)
            raise KeyboardInterrupt(f"injected at arena event {self.at} ({self.where})")


#: Where a slot's buffer is replaced and the ledger allocates and releases: an interrupt
#: there is issue 26's item 3 (leaks on interrupted growth), fixed and tested apart.
GROWTH = frozenset({"_grow", "_restore", "_install", "fit", "ensure", "size_for_lock"})


def in_growth(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside a slot's growth (see :data:`GROWTH`)."""
    while frame is not None:
        name, path = frame.f_code.co_name, frame.f_code.co_filename
        if path.startswith(ARENA_DIR + "memory" + os.sep) or (
            name in GROWTH and path.endswith(os.path.join("slots", "slot.py"))
        ):
            return True
        frame = frame.f_back
    return False


def fresh(phase: int) -> Arena:
    """An arena that ran ``program`` ``min(phase, 3)`` times (locked for phase 3)."""
    ws = Arena("cpu", framework="numpy")
    for _ in range(min(phase, 3)):
        program(ws)
    if phase >= 3:
        ws.lock()
    return ws


def damage(ws: Arena, locked: bool) -> str:
    """What is wrong with ``ws`` after an interrupted run ('' when nothing): the program
    must run again (locked: without growing), settle (no growth halfway), then run
    locked; books must balance and no region may stay open."""
    try:
        for _ in range(3):
            program(ws)
        growths = ws.stats().slots[0].growths
        program(ws)
        if ws.stats().slots[0].growths != growths:
            return "the settled program grew the slot"
        if not locked:
            ws.lock()
        program(ws)
    except Exception as error:  # what broke is the finding
        return f"{type(error).__name__}: {error}"
    slot = ws.numpy._select()
    if slot.stack.regions or slot.stack.live or slot.stack.top:
        return (
            f"regions left open: {slot.stack.regions}, live {slot.stack.live}, top {slot.stack.top}"
        )
    running = [key for key, book in books_of(slot).items() if book.running]
    if running:
        return f"steps left running: {running}"
    try:
        check_books(ws)
    except AssertionError as error:
        return f"books: {error}"
    return ""


def lost_interrupts(
    run: Callable[[Any], object], setup: Callable[[], Any] = lambda: None
) -> list[str]:
    """Interrupt ``run(setup())`` at each of its entry and return events in arena's code
    in turn (``setup`` runs untraced each time); the events whose KeyboardInterrupt did
    not come out of ``run``: lost, e.g. raised inside the close of a generator that
    any(), all() or next() left suspended, which Python prints as "Exception ignored"
    (those say so), or turned into another error. ``run`` handles the errors it expects."""
    counter = Injector()
    state = setup()
    sys.settrace(counter)
    try:
        run(state)
    finally:
        sys.settrace(None)
    lost = []
    for at in range(1, counter.count + 1):
        state = setup()
        shot = Injector(at)
        raised = False
        ignored: list[str] = []
        hook = sys.unraisablehook
        sys.unraisablehook = lambda unraisable, seen=ignored: seen.append(
            repr(unraisable.exc_value)
        )
        sys.settrace(shot)
        try:
            run(state)
        except KeyboardInterrupt:
            raised = True
        except Exception:  # another error came out instead: the interrupt was lost
            pass
        finally:
            sys.settrace(None)
            sys.unraisablehook = hook
        if shot.fired and not raised:
            lost.append(shot.where + (f" (Exception ignored: {ignored[0]})" if ignored else ""))
    return lost


def count_points(phase: int) -> int:
    """Calls and returns in arena's code during the interrupted run of ``phase``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ArenaWarning)
        ws = fresh(phase)
        injector = Injector()
        sys.settrace(injector)
        try:
            program(ws)
        finally:
            sys.settrace(None)
        ws.close()
    return injector.count


def inject(phase: int, at: int) -> str:
    """Interrupt the run of ``phase`` at event ``at``; '' or what was damaged."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ArenaWarning)
        ws = fresh(phase)
        injector = Injector(at)
        raised = ""  # only its name and text: its traceback would keep the frames alive
        sys.settrace(injector)
        try:
            program(ws)
        except BaseException as error:  # which one came out is checked
            raised = f"{type(error).__name__}({error})"
        finally:
            sys.settrace(None)
        try:
            if injector.fired != raised.startswith("KeyboardInterrupt"):
                found = f"the interrupt came out as {raised or 'nothing'}"
            else:
                found = damage(ws, phase >= 3)
            return f"{found} (in a growth)" if found and injector.growing else found
        finally:
            ws.close()


def sweep(
    points: Callable[[int, int], bool] = lambda phase, at: True, *, growth: bool = True
) -> list[str]:
    """Interrupt at every chosen (phase, event); the damaged points, described (those
    inside a slot's growth only with ``growth``)."""
    program(Arena("cpu", framework="numpy"))  # process-wide memos: counts stay the same
    damaged = []
    for phase in PHASES:
        for at in range(1, count_points(phase) + 1):
            if points(phase, at):
                found = inject(phase, at)
                if found and (growth or not found.endswith("(in a growth)")):
                    damaged.append(f"phase {phase} event {at}: {found}")
    return damaged


#: How many timed runs give the span a real signal's timer is drawn from (their median).
SPAN_RUNS = 5


def typical_span(start: Callable[[], Arena], run: Callable[[Arena], None]) -> float:
    """The median time of :data:`SPAN_RUNS` runs of ``run`` on ``start()``'s arenas.

    The timers of the signal rounds are drawn from 0 to this span. One timed run was the
    span before: on a loaded machine a run preempted while timed came out many times too
    long, most timers then fired after their runs had ended, and a round test saw too few
    interrupts land (124 to 238 of 250 over four runs with two busy loops beside it). The
    median of a few runs is the run's own length.
    """
    spans = []
    for _ in range(SPAN_RUNS):
        ws = start()
        began = time.perf_counter()
        run(ws)
        spans.append(time.perf_counter() - began)
        ws.close()
    return sorted(spans)[len(spans) // 2]


class _Alarm:
    """A SIGALRM handler that raises KeyboardInterrupt once, while armed."""

    def __init__(self) -> None:
        self.armed = False
        self.growing = False  # it landed inside a slot's growth

    def __call__(self, signum: int, frame: Any) -> None:
        if self.armed:
            self.armed = False
            self.growing = in_growth(frame)
            raise KeyboardInterrupt("SIGALRM")


def signal_rounds(rounds: int, seed: int = 0, *, growth: bool = True) -> tuple[int, int, list[str]]:
    """``rounds`` runs of ``program``, each on a fresh arena at a random phase, with a
    real SIGALRM raising KeyboardInterrupt at a random moment of it. Returns (rounds the
    interrupt landed in, rounds damaged, what was damaged); rounds whose interrupt landed
    inside a slot's growth count only with ``growth``."""
    rng = random.Random(seed)
    alarm = _Alarm()
    previous = signal.signal(signal.SIGALRM, alarm)
    landed, damaged = 0, []
    # Other code's GC callbacks (Hypothesis times collections with one) are off for the
    # rounds: an interrupt landing inside one is swallowed there as "unraisable", which
    # says nothing of arena and fails the run under filterwarnings=error.
    callbacks = gc.callbacks[:]
    gc.callbacks.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ArenaWarning)
            spans = {  # how long one run of each phase takes
                phase: typical_span(partial(fresh, phase), program) for phase in PHASES
            }
            for _ in range(rounds):
                phase = rng.choice(PHASES)
                ws = fresh(phase)
                raised = ""  # only its name and text (its traceback keeps frames alive)
                alarm.growing = False
                try:
                    try:
                        alarm.armed = True
                        signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, spans[phase]))
                        program(ws)
                    finally:
                        alarm.armed = False
                        signal.setitimer(signal.ITIMER_REAL, 0)
                except BaseException as error:  # which one is checked
                    raised = f"{type(error).__name__}({error})"
                found = ""
                if raised:
                    landed += 1
                    if not raised.startswith("KeyboardInterrupt"):
                        found = f"the interrupt came out as {raised}"
                found = found or damage(ws, phase >= 3)
                ws.close()
                if found and alarm.growing:
                    found = f"{found} (in a growth)" if growth else ""
                if found:
                    damaged.append(f"phase {phase}: {found}")
    finally:
        signal.signal(signal.SIGALRM, previous)
        gc.callbacks[:] = callbacks
    return landed, len(damaged), damaged


#: The lock state blocks a switch sweep runs: (which block, whether the arena is locked
#: before it). ``ws.locked()`` on an unlocked arena unlocks at its exit, ``ws.unlocked()``
#: on a locked one locks again (a whole ``lock()``).
SWITCHES = (("locked", False), ("unlocked", True), ("locked", True), ("unlocked", False))

#: The tracer's own event: an exception raised at the return of the block's ``__enter__``
#: leaves the ``with`` statement without its exit (the block restores once dropped),
#: where a real signal cannot land (the statement calls the enter from C and runs no
#: check before the block's body).
ENTER_RETURN = "return of _Switched.__enter__"


def switch_arena(locked: bool) -> Arena:
    """An arena that served :func:`switch_block`'s largest request, locked or not."""
    ws = Arena("cpu", framework="numpy")
    ws.get_simultaneous(((4,), F32), ((4,), F32))
    if locked:
        ws.lock()
    return ws


def switch_block(ws: Arena, which: str) -> None:
    """One ``with ws.locked():`` (or ``ws.unlocked()``) block with requests inside."""
    with getattr(ws, which)():
        ws.get_simultaneous(((8,), F32))
        ws.get_simultaneous(((4,), F32), ((4,), F32))


def switch_points() -> tuple[int, list[str], list[str]]:
    """Interrupt each switch block of :data:`SWITCHES` at every entry and return in
    arena's code in turn. Returns (points, the points after which the state the block
    found was not back when the interrupt reached the caller's ``except``, those where it
    was not back once the interrupt and its traceback were dropped)."""
    total, caught, dropped = 0, [], []
    for which, locked in SWITCHES:
        counter = Injector()
        ws = switch_arena(locked)
        sys.settrace(counter)
        try:
            switch_block(ws, which)
        finally:
            sys.settrace(None)
        ws.close()
        total += counter.count
        for at in range(1, counter.count + 1):
            ws = switch_arena(locked)
            shot = Injector(at)
            state = "not raised"
            sys.settrace(shot)
            try:
                switch_block(ws, which)
            except KeyboardInterrupt:
                state = "kept" if bool(ws.is_locked) == locked else "changed"
            finally:
                sys.settrace(None)
            where = f"ws.{which}() on a {'locked' if locked else 'unlocked'} arena: {shot.where}"
            if shot.fired and state != "kept":
                caught.append(f"{where} ({state})")
            if bool(ws.is_locked) != locked:
                dropped.append(where)
            ws.close()
    return total, caught, dropped


def switch_signal_rounds(rounds: int, seed: int = 0) -> tuple[int, list[str], list[str]]:
    """``rounds`` switch blocks (of :data:`SWITCHES` in turn, each on a fresh arena) with
    a real SIGALRM raising KeyboardInterrupt at a random moment of the block. Returns
    (rounds the interrupt landed in, those whose state was not back in the caller's
    ``except``, those where it was not back once the interrupt was dropped)."""
    rng = random.Random(seed)
    alarm = _Alarm()
    previous = signal.signal(signal.SIGALRM, alarm)
    callbacks = gc.callbacks[:]  # as in signal_rounds: no other code's GC callbacks
    gc.callbacks.clear()
    landed, caught, dropped = 0, [], []
    try:
        spans = {
            (which, locked): typical_span(
                partial(switch_arena, locked), partial(switch_block, which=which)
            )
            for which, locked in SWITCHES
        }
        for n in range(rounds):
            which, locked = SWITCHES[n % len(SWITCHES)]
            ws = switch_arena(locked)
            state = ""
            try:
                try:
                    alarm.armed = True
                    signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, spans[which, locked]))
                    switch_block(ws, which)
                finally:
                    alarm.armed = False
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                state = "kept" if bool(ws.is_locked) == locked else "changed"
            where = f"round {n}: ws.{which}() on a {'locked' if locked else 'unlocked'} arena"
            if state:
                landed += 1
                if state != "kept":
                    caught.append(where)
            if bool(ws.is_locked) != locked:
                dropped.append(where)
            ws.close()
    finally:
        signal.signal(signal.SIGALRM, previous)
        gc.callbacks[:] = callbacks
    return landed, caught, dropped


def main(argv: list[str]) -> None:
    """``points`` or ``signals [rounds]``: print the counts and the damage found."""
    if argv[:1] == ["points"]:
        total = sum(count_points(phase) for phase in PHASES)
        damaged = sweep()
        grown = sum(1 for line in damaged if line.endswith("(in a growth)"))
        print(f"{len(damaged)} of {total} entry/return points damaged ({grown} in a growth)")
        for line in damaged[:40]:
            print(" ", line)
    elif argv[:1] == ["switch"]:
        total, caught, dropped = switch_points()
        print(
            f"switch blocks: {len(caught)} of {total} entry/return points left the state "
            f"switched in the caller's except, {len(dropped)} once the interrupt was dropped"
        )
        for line in (caught + dropped)[:40]:
            print(" ", line)
    elif argv[:1] == ["switch-signals"]:
        rounds = int(argv[1]) if len(argv) > 1 else 1000
        landed, caught, dropped = switch_signal_rounds(rounds, int(argv[2]) if len(argv) > 2 else 0)
        print(
            f"switch blocks: {len(caught)} of {rounds} rounds ({landed} interrupted) left the "
            f"state switched in the caller's except, {len(dropped)} once it was dropped"
        )
        for line in (caught + dropped)[:40]:
            print(" ", line)
    else:
        rounds = int(argv[1]) if len(argv) > 1 else 1000
        landed, count, damaged = signal_rounds(rounds, seed=int(argv[2]) if len(argv) > 2 else 0)
        grown = sum(1 for line in damaged if line.endswith("(in a growth)"))
        print(f"{count} of {rounds} rounds damaged ({landed} interrupted, {grown} in a growth)")
        for line in damaged[:40]:
            print(" ", line)


if __name__ == "__main__":
    main(sys.argv[1:])
