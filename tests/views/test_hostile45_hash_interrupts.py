"""Hostile round 45 on the compiled hits' lookups: a request's dtype objects are hashed
and compared there, and some run Python code to do it (JAX's scalar types, ``jnp.float32``:
``_ScalarMeta.__hash__`` and ``__eq__``), where a signal's handler can raise
``KeyboardInterrupt``. The compiled plain hit cleared every error of its lookup ("a miss,
or an unhashable dtype: the Python path explains") and the Python path served the request
without meeting the interrupt again: Ctrl-C was lost. The pure-Python path lets it out,
and so do the compiled hits now (an ordinary error is still the Python path's to
explain)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from arena import Arena

jnp = pytest.importorskip("jax.numpy")

#: The file of JAX's scalar types, whose __hash__ and __eq__ are Python code.
SCALAR_TYPES = "scalar_types.py"


class _Shot:
    """A ``sys.settrace`` function raising KeyboardInterrupt at the ``at``-th call of a
    function of JAX's scalar types (never for ``at`` 0), counting them."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.endswith(SCALAR_TYPES):
            self.calls += 1
            if self.calls == self.at:
                raise KeyboardInterrupt(f"in {frame.f_code.co_name}, call {self.at}")


def _plain(ws: Arena) -> None:
    ws.get_simultaneous(((4,), jnp.float32), ((2,), jnp.float16))


def _step(ws: Arena) -> None:
    with ws.step("s") as st:
        (a,) = st.get_simultaneous(((4,), jnp.float32))
        st.release(a)
        st.get_simultaneous(((2,), jnp.float16))


def _scope(ws: Arena) -> None:
    with ws.scope() as scope:
        scope.get_simultaneous(((4,), jnp.float32))
        scope.get_simultaneous(((2,), jnp.float16), ((3,), jnp.float32))


def _warmed(program: Callable[[Arena], None], warm: int) -> Arena:
    ws = Arena("cpu", framework="numpy")
    for _ in range(warm):
        program(ws)
    return ws


def _traced(program: Callable[[Arena], None], ws: Arena, shot: _Shot) -> None:
    sys.settrace(shot)
    try:
        program(ws)
    finally:
        sys.settrace(None)


def _run(program: Callable[[Arena], None], warm: int, at: int) -> tuple[Arena, _Shot]:
    ws = _warmed(program, warm)
    shot = _Shot(at)
    _traced(program, ws, shot)
    return ws, shot


@pytest.mark.parametrize("program", [_plain, _step, _scope], ids=["plain", "step", "scope"])
@pytest.mark.parametrize("warm", [1, 2, 3])
def test_an_interrupt_in_a_dtypes_hash_comes_out_of_the_request(
    program: Callable[[Arena], None], warm: int
) -> None:
    """At every call into a JAX scalar type's Python code during the request after
    ``warm`` runs (hits of every kind), the interrupt comes out, and the request is
    served again after."""
    ws, counter = _run(program, warm, 0)
    ws.close()
    for at in range(1, counter.calls + 1):
        ws = _warmed(program, warm)
        with pytest.raises(KeyboardInterrupt, match=f"call {at}$"):
            _traced(program, ws, _Shot(at))
        program(ws)
        ws.close()
