"""Hostile round 46 on the compiled step and scope hits' lookups (arena/planning/
_region_hit.c): a request's dtype objects are hashed and compared there where the memo
does not know the request (a step request index that saw two requests, a scope request
the shared scope memo has not noted), and a dtype may run Python code to do it (JAX's
scalar types, ``jnp.float32``: a metaclass with ``__hash__`` and ``__eq__``), where a
signal's handler can raise ``KeyboardInterrupt``. Round 45 let such an interrupt out of
the plain hit (tests/views/test_hostile45_hash_interrupts.py), whose test of steps and
scopes ran unlocked: a request log is kept then, and the Python path serves every step
and scope request. Locked, the compiled step and scope hits cleared every error of their
lookups ("a miss, or an unhashable dtype: the Python path explains") and the Python path
served the request without meeting the interrupt again (its next hash call does not
raise): Ctrl-C was lost. The pure-Python path lets it out, and so do the compiled hits
now; an ordinary error is still the Python path's to explain."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from arena import Arena


def _dtype(error: type[BaseException] = KeyboardInterrupt) -> Any:
    """A fresh dtype class like JAX's scalar types (numpy reads its ``dtype``), whose
    metaclass's ``__hash__`` and ``__eq__`` are Python code that raises ``error`` at the
    ``at``-th of their calls (never for ``at`` 0), counting them in ``calls``."""

    class Meta(type):
        calls = 0
        at = 0

        def _count(cls) -> None:
            Meta.calls += 1
            if Meta.calls == Meta.at:
                raise error(f"call {Meta.at}")

        def __hash__(cls) -> int:
            cls._count()
            return hash("hostile46 float32")

        def __eq__(cls, other: object) -> bool:
            cls._count()
            return cls is other

    class Float32(metaclass=Meta):
        dtype = np.dtype("float32")

    return Float32


def _step(ws: Arena, dt: Any, i: int) -> None:
    """A step whose first request index sees two requests in turn."""
    with ws.step("s") as st:
        (a,) = st.get_simultaneous(((4 + i % 2,), dt))
        st.release(a)
        st.get_simultaneous(((2,), dt))


def _scope(ws: Arena, dt: Any, i: int) -> None:
    """A scope whose second request takes one of three shapes in turn."""
    with ws.scope() as scope:
        scope.get_simultaneous(((4,), dt))
        scope.get_simultaneous(((2 + i % 3,), dt), ((3,), dt))


Program = Callable[[Arena, Any, int], None]


def _locked(program: Program, dt: Any, warm: int) -> Arena:
    """An arena that ran ``program`` ``warm`` times, then locked (no request log: the
    compiled step and scope hits serve)."""
    ws = Arena("cpu", framework="numpy")
    for i in range(warm):
        program(ws, dt, i)
    ws.lock()
    return ws


@pytest.mark.parametrize("program", [_step, _scope], ids=["step", "scope"])
@pytest.mark.parametrize("warm", [2, 3, 4])
def test_an_interrupt_in_a_dtypes_hash_comes_out_of_a_locked_request(
    program: Program, warm: int
) -> None:
    """At every call into the dtype's Python code during the locked run after ``warm``
    runs, the interrupt comes out (the call made is the one that raised: none after
    it), and the program runs again after."""
    dt = _dtype()
    meta: Any = type(dt)
    ws = _locked(program, dt, warm)
    meta.calls = 0
    program(ws, dt, warm)
    calls = meta.calls
    ws.close()
    assert calls > 0
    for at in range(1, calls + 1):
        dt = _dtype()
        meta = type(dt)
        ws = _locked(program, dt, warm)
        meta.calls, meta.at = 0, at
        try:
            with pytest.raises(KeyboardInterrupt, match=f"call {at}$"):
                program(ws, dt, warm)
            assert meta.calls == at
        finally:
            meta.at = 0
        program(ws, dt, warm + 1)
        ws.close()


@pytest.mark.parametrize("program", [_step, _scope], ids=["step", "scope"])
def test_an_ordinary_error_in_a_dtypes_hash_is_the_python_paths(program: Program) -> None:
    """An Exception raised there is still cleared by the compiled hit: the Python path
    looks up again and serves the request (its own call does not raise)."""
    dt = _dtype(LookupError)
    meta: Any = type(dt)
    ws = _locked(program, dt, 3)
    meta.calls = 0
    program(ws, dt, 3)
    calls = meta.calls
    ws.close()
    for at in range(1, calls + 1):
        dt = _dtype(LookupError)
        meta = type(dt)
        ws = _locked(program, dt, 3)
        meta.calls, meta.at = 0, at
        try:
            try:
                program(ws, dt, 3)
            except LookupError:
                pass  # raised in the Python path's own code: its to explain
        finally:
            meta.at = 0
        program(ws, dt, 4)
        ws.close()
