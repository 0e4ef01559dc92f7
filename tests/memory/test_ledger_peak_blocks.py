"""The ledger's peak block count includes the block just counted live."""

from __future__ import annotations

from arena import Arena


def test_the_peak_block_count_counts_the_block_just_allocated() -> None:
    """A first request's block makes the peak one block, and a growth (one visit to the
    ledger: the old block released before the new one is taken) keeps it at one. Slip:
    the peak was taken before the new block was stored, one block short (what
    ``memory_stats()``'s ``segment`` peak reports)."""
    with Arena("cpu", framework="numpy") as a:
        ledger = a._table.governor.ledger
        a.get_simultaneous(((4096,), "uint8"))
        assert ledger.live_blocks == ledger.peak_blocks == 1
        a.get_simultaneous(((1 << 20,), "uint8"))
        assert ledger.live_blocks == ledger.peak_blocks == 1
        assert ledger.allocations == 2
