"""Plants of branch plant43 (2026-12-03) in the observe layer that the suite did not
catch: each test names the bug it kills (docs/plants/plant43.md)."""

from __future__ import annotations

from arena import Arena

MB = 1 << 20


def test_reserved_bytes_counts_every_kind_of_block_of_every_slot() -> None:
    """Kills: ArenaStats.reserved_bytes leaving out a slot's library workspace bytes (the
    sum of capacity, retired, persistent, workspace and Triton bytes)."""
    with Arena("cpu", framework="numpy") as a:
        a.get_simultaneous(((MB,), "uint8"))
        a.get_library_workspace("fi", MB // 2)
        stats = a.stats()
        (slot,) = stats.slots
        assert slot.workspace_bytes >= MB // 2
        assert stats.reserved_bytes == (
            slot.capacity
            + slot.retired_bytes
            + slot.persistent_bytes
            + slot.workspace_bytes
            + slot.triton_bytes
        )
        assert stats.reserved_bytes >= MB + MB // 2
