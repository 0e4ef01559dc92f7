"""Gaps a planted-bug review (plant33) found in the ledger: each test fails on one
realistic slip in the code (named in its docstring) and passes on the real code."""

from __future__ import annotations

from arena import Arena
from arena.memory.virtual import PAGE


def test_the_trace_of_a_growth_in_place_frees_the_old_size_then_allocates_the_new() -> None:
    """A fixed-address source grows its block in place: the ledger counts the old block
    freed and the new one allocated, and its trace (the snapshot's device trace) says so,
    so that replaying the trace gives the live bytes (slip: the commit path appended only
    the new allocation to the trace)."""
    with Arena("cpu", source="virtual", max_bytes="64MiB", framework="numpy") as a:
        a.numpy.get_simultaneous(((PAGE,), "uint8"))
        a.numpy.get_simultaneous(((4 * PAGE,), "uint8"))  # grows in place
        ledger = a._table.governor.ledger
        events = [(action, nbytes) for action, _, nbytes, _, _ in ledger.trace]
        assert events == [("allocate", PAGE), ("free", PAGE), ("allocate", 4 * PAGE)]
        live = sum(n if act == "allocate" else -n for act, n in events)
        assert live == ledger.live_bytes
        trace = a.memory_snapshot()["device_traces"][0]
        assert [e["action"] for e in trace] == ["segment_alloc", "segment_free", "segment_alloc"]
