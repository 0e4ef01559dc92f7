"""Plants of branch plant43 (2026-12-03) that the suite did not catch, in the slots
layer: each test names the bug it kills (docs/plants/plant43.md)."""

from __future__ import annotations

import pytest

from arena import Arena, ArenaOutOfMemoryError
from tests.sources import RecordingSource, check_books

MB = 1 << 20


def test_a_locked_block_past_the_cap_raises_and_leaves_the_arena_unlocked() -> None:
    """Kills: StateSwitch._put swallowing lock()'s ArenaOutOfMemoryError (as it swallows
    ArenaClosedError): ``with ws.locked():`` would run its body unlocked, silently."""
    source = RecordingSource()
    with Arena(source=source, framework="numpy", ubatches=2, max_bytes=3 * MB) as a:
        with a.ubatch(0):  # ubatch 1 never ran: lock() would give it 2 MB too
            a.get_simultaneous(((2 * MB,), "uint8"))
        ran = []
        with pytest.raises(ArenaOutOfMemoryError, match=r"lock\(\)'s sizing"), a.locked():
            ran.append(a.is_locked)
        assert ran == [] and not a.is_locked
        with a.unlocked():  # the block is usable after: nothing stayed active
            assert not a.is_locked
        check_books(a, source)
