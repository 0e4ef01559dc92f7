"""A request's locked in-place growth is announced though nobody listens (the announce
rule of ``ViewBuilder.miss``: watched, the governor's notes, or the logger at DEBUG)."""

from __future__ import annotations

import pytest

from arena import Arena, ArenaWarning
from arena.memory.virtual import PAGE


def test_a_locked_in_place_growth_warns_with_no_listener_and_no_debug_logging() -> None:
    """No listener, no debug mode and the ``arena`` logger above DEBUG: the request path
    still announces the growth it served in place while locked (the warning, once per
    call site, and the count). Slip: the rule tested only ``watched`` and the logger, so
    the governor's notes of locked growths waited, unwarned, for some later announce."""
    with Arena("cpu", source="virtual", max_bytes="64MiB", framework="numpy") as a:
        a.numpy.get_simultaneous(((PAGE,), "uint8"))
        a.lock(growth="in_place")
        with pytest.warns(ArenaWarning, match=f"needed {4 * PAGE} bytes") as caught:
            (view,) = a.numpy.get_simultaneous(((4 * PAGE,), "uint8"))
        assert len(caught) == 1
        assert view.nbytes == 4 * PAGE
        assert a.memory_stats()["arena.locked_growths"] == 1
        assert not a._table.governor.notes  # announced, not left for later
