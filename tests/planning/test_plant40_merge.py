"""merged_plan against bugs planted in it (2026-12-03, docs/testing.md 'Planted,
2026-12-03'): a key's books are merged only while none of them runs, the first included."""

from __future__ import annotations

import pytest

import arena
from arena.planning.books import books_of
from arena.planning.plan import merged_plan

F = "float32"


def _run(ws: arena.Arena, sizes: list[int]) -> None:
    with ws.step("k") as st:
        for n in sizes:
            st.get_simultaneous(((n,), F))


@pytest.mark.parametrize("running", [0, 1])
def test_no_merge_while_any_book_of_the_key_runs(running: int) -> None:
    """Two micro-batches' books of one key, planned with different sizes: merged while
    none runs, never while one does, whichever it is. Fails with the running check
    reading the books after the first only (planted)."""
    ws = arena.Arena("cpu", framework="numpy", ubatches=2, profile=False)
    try:
        for ub, sizes in ((0, [100, 100]), (1, [1500, 1500])):
            with ws.ubatch(ub):
                _run(ws, sizes)
                _run(ws, sizes)  # planned
        books = [books_of(slot)["k"] for slot in ws._table.slots]
        alignment = ws._governor.alignment
        assert merged_plan(books, alignment) is not None
        books[running].running = True
        try:
            assert merged_plan(books, alignment) is None
        finally:
            books[running].running = False
    finally:
        ws.close()
