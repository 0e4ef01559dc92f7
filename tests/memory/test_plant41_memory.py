"""The memory layer against bugs planted by hand (branch plant41, docs/testing.md
'Planted, 2026-12-03 (plant41)'): which addresses a ledger owns."""

from __future__ import annotations

from arena import Arena


def test_a_ledger_owns_a_blocks_bytes_and_not_the_byte_past_its_end() -> None:
    """Ledger.owns(ptr) is whether ptr lies in a block the ledger holds: its first and
    last bytes, not the byte past its end (where the next block may start) nor the one
    before it. Plant killed: the loop that replaced any() testing ``ptr <= a.ptr +
    a.nbytes`` (the byte past the end was owned)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.numpy.get_simultaneous(((1000,), "float32"))
        ledger = ws._table.governor.ledger
        block = ws._table.slots[0].buffer.allocation
        start, end = block.ptr, block.ptr + block.nbytes
        assert ledger.owns(start) and ledger.owns(end - 1)
        assert not ledger.owns(end) and not ledger.owns(start - 1)
