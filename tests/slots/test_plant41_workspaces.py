"""Library workspaces against bugs planted by hand (branch plant41, docs/testing.md
'Planted, 2026-12-03 (plant41)'): what lock() gives a sibling micro-batch of a
workspace asked for with ``zero_init``, and what ``planned_bytes()`` counts for the
siblings' workspaces."""

from __future__ import annotations

import arena
from tests.sources import DirtySource


def test_a_siblings_workspace_made_by_lock_stays_zero_init_for_every_later_call() -> None:
    """zero_init asked once holds for the key from then on, in the workspaces lock()
    makes for sibling micro-batches too: a sibling's first call without zero_init gets
    zeros, and so does its growth. Plant killed: share_library_workspaces making the
    siblings' workspaces without ``zero_init=key in zeroed`` (the first call without
    zero_init then handed out the source's dirty bytes)."""
    with arena.Arena("cpu", framework="numpy", ubatches=2, source=DirtySource()) as ws:
        with ws.ubatch(0):
            ws.get_library_workspace("fi", 4096, zero_init=True)[:] = 1
        ws.lock()
        with ws.ubatch(1):
            made = ws.get_library_workspace("fi", 4096)
            assert made.nbytes == 4096 and not made.any()
        with ws.unlocked(), ws.ubatch(1):
            grown = ws.get_library_workspace("fi", 8192)
            assert grown.nbytes == 8192 and not grown.any()


def test_planned_bytes_counts_a_siblings_workspace_at_the_lanes_largest_size() -> None:
    """planned_bytes() is what the arena holds after lock(): a micro-batch that never
    asked for a key gets it at the largest size any sibling holds, whichever sibling
    asked last. Plant killed: missing_library_bytes keeping the size of the last store
    it read (``sizes[key] = entry.nbytes``) rather than the largest (planned 4096 bytes
    short of what lock() then allocated)."""
    with arena.Arena("cpu", framework="numpy", ubatches=3) as ws:
        with ws.ubatch(0):
            ws.get_library_workspace("fi", 8192)
        with ws.ubatch(1):
            ws.get_library_workspace("fi", 4096)
        planned = ws.planned_bytes()
        ws.lock()
        assert ws.stats().live_bytes == planned
        with ws.ubatch(2):
            assert ws.get_library_workspace("fi", 8192).nbytes == 8192
