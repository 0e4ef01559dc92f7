"""Plant round 47 on the cap's check of a growth (``Slot._grow``): a buffer a CUDA graph
captured is retired, not released, when its slot grows, so the check counts nothing freed
for it. A check that counted the old block freed whatever became of it let the arena grow
past ``max_bytes`` (the retired block and the new one both held)."""

from __future__ import annotations

import pytest

from arena import Arena, ArenaOutOfMemoryError
from tests.gates import moving_only

MB = 1 << 20


@moving_only("retires a captured buffer on growth; growth in place retires nothing")
def test_a_growth_that_retires_a_captured_buffer_counts_it_against_the_cap() -> None:
    probe_state = {"on": False}
    with Arena(
        "cpu", framework="numpy", max_bytes=4 * MB, capture_probe=lambda: probe_state["on"]
    ) as a:
        a.get_simultaneous(((MB,), "uint8"))
        probe_state["on"] = True
        a.get_simultaneous(((MB,), "uint8"))  # served during a capture: retired on growth
        probe_state["on"] = False
        with pytest.raises(ArenaOutOfMemoryError, match="max_bytes"):
            a.get_simultaneous(((3 * MB + MB // 2,), "uint8"))  # 1 MB retired + 3.5 MB
        assert a.memory_stats()["allocated_bytes.all.current"] <= 4 * MB
