"""Mutants of the planning modules left by Round 14g's mutation sample (issue 26 item
12), each test seen to fail with its mutant planted by hand and to pass restored."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from arena import Arena, ArenaError
from arena.planning.books import StepBooks, books_of, step_books


def test_step_books_are_the_slots_store_registered_under_their_own_type() -> None:
    # books.py step_books #1 (slot.store(None)): the distributed state read the store
    # registered under None, which no feature registers; only tests/distributed reached it.
    books, other = StepBooks(), object()
    stores: dict[Any, Any] = {StepBooks: books, None: other}
    slot = cast(Any, SimpleNamespace(store=lambda kind: stores[kind]))
    assert step_books(slot) is books
    assert books_of(slot) is books.by_key


def test_a_replays_first_released_block_stays_released_after_a_second() -> None:
    # runs.py StepRun.end_block #9 (released = {block} for |=): a replay forgot every
    # block released before the last, so the first view could be released again
    # without an error. The blocks end through end_block's replay branch where
    # the view given is not the one handed out: jax's write_into returns a new array.
    jnp = pytest.importorskip("jax.numpy")
    with Arena("cpu", framework="jax") as ws:
        for _ in range(3):  # record, plan, replay
            with ws.step("s") as st:
                a, b = st.get_simultaneous(((8,), "float32"), ((8,), "float32"))
                st.release(ws.jax.write_into(a, jnp.ones(8, "float32")))
                st.release(ws.jax.write_into(b, jnp.ones(8, "float32")))
                with pytest.raises(ArenaError, match="released already"):
                    st.release(a)
