"""The one books check (tests/sources.py ``check_books``) counts every kind of block."""

from __future__ import annotations

import pytest

from arena import Arena
from tests.sources import RecordingSource, check_books


def _old_gates_check(a: Arena) -> None:
    """tests/gates.py's check before issue 27 (kept here only to show what it missed)."""
    stats = a.stats()
    assert stats.allocations == stats.frees + stats.live_blocks
    held = sum(s.capacity + s.retired_bytes + s.persistent_bytes for s in stats.slots)
    assert stats.live_bytes == held


def test_books_balance_with_every_kind_of_block() -> None:
    source = RecordingSource()
    with Arena("cpu", framework="numpy", source=source) as a:
        a.get_simultaneous(((100,), "float32"))
        a.numpy.get_persistent("p", (8,), "float32")
        a.get_library_workspace("lib", 4096)
        a.get_simultaneous(((100_000,), "float32"))  # grows: the old buffer is released
        check_books(a, source)
        with pytest.raises(AssertionError):
            _old_gates_check(a)  # it could not even run beside a library workspace


def test_a_leaked_library_workspace_is_caught() -> None:
    """Planted: the ledger books the workspace's block as released while the slot still
    holds it and the source never got it back. From the arena's own books (no source, as
    tests/interrupts.py checks), the old gates.py check saw nothing wrong."""
    source = RecordingSource()
    with Arena("cpu", framework="numpy", source=source) as a:
        a.get_simultaneous(((100,), "float32"))
        a.get_library_workspace("lib", 4096)
        check_books(a, source)
        ledger = a._governor.ledger
        (block,) = [b for b in ledger.blocks() if b.nbytes == 4096]
        keep = source.release
        source.release = lambda allocation: None  # type: ignore[method-assign]
        try:
            ledger.release(block)
        finally:
            source.release = keep  # type: ignore[method-assign]
        _old_gates_check(a)  # missed
        with pytest.raises(AssertionError, match="live 512 bytes, held 4608"):
            check_books(a)
        with pytest.raises(AssertionError):
            check_books(a, source)
        ledger.release_live()  # let the arena close
