"""Plant round 37 (memory): the compiled growth of a host ledger gives the old block back
before it asks for the new one."""

from __future__ import annotations

import tracemalloc

from arena import Arena
from tests.gates import moving_only

MIB = 1 << 20


@moving_only("a fixed-address source grows in place and frees no old block")
def test_a_host_growth_frees_the_old_block_before_allocating_the_new_one() -> None:
    """A slot growing from 32 to 64 MiB never holds both blocks: the traced peak of the
    growth stays under the two together (slip: the compiled growth allocating the new
    block first, the old one released after, 96 MiB held at once)."""
    tracemalloc.start()  # before the first block: its release is traced too
    try:
        with Arena("cpu", framework="numpy") as ws:
            ws.get_simultaneous(((32 * MIB,), "uint8"))
            tracemalloc.reset_peak()
            ws.get_simultaneous(((64 * MIB,), "uint8"))
            _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 64 * MIB <= peak < 80 * MIB, peak
