"""Gaps in the tests of slot selection and sleep (``arena/slots/selector.py``,
``arena/slots/sleep.py``), found by Round 14c of mutation testing (``scripts/mutation
parts``, docs/testing.md): each test names the mutants it kills."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import pytest

from arena import Arena, ArenaOutOfMemoryError, SlotError
from arena.slots.selector import SlotSelector


class _Binding(threading.local):
    ubatch = 0


def test_a_lane_resolver_answer_one_past_the_last_lane_is_a_slot_error() -> None:
    """``_select`` #32 (``lane <= lanes``: the lane one past the last taken, which is the
    next micro-batch's first slot, served without a word)."""
    a = Arena("cpu", framework="numpy", ubatches=2, lanes=2, lane_resolver=lambda: 2)
    with pytest.raises(SlotError) as caught:
        a.get_simultaneous(((4,), "uint8"))
    assert str(caught.value) == (
        "lane_resolver returned 2, but this arena has 2 lane slot(s) (0..1); "
        "construct the arena with lanes=3 or more"
    )
    a.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            3,
            "ubatch_resolver returned 3, but this arena has 2 ubatch slot(s) (0..1); "
            "construct the arena with ubatches=4 or more",
        ),
        (-1, "ubatch_resolver returned -1; ubatch indices start at 0"),
        (
            "0",
            "ubatch_resolver returned '0' (str), not an integer; return the ubatch index as "
            "an int in 0..1",
        ),
    ],
)
def test_a_fixed_lanes_resolver_answer_refused_names_the_ubatch_resolver(
    answer: Any, message: str
) -> None:
    """``select_in_lane`` #15, #21 (the refusal of a ubatch resolver's answer, for a
    caller with a lane of its own, Triton's allocator with ``lane=``, worded for a
    resolver named ``None`` or ``XXubatchXX``)."""
    selector = SlotSelector(
        [f"slot {i}" for i in range(4)],  # type: ignore[misc]
        lanes=2,
        ubatch_resolver=lambda: answer,
        lane_resolver=None,
        name="test_lane",
        binding=_Binding,
    )
    with pytest.raises(SlotError) as caught:
        selector.select_in_lane(1)
    assert str(caught.value) == message


def test_a_fixed_lanes_resolver_answer_in_range_selects_that_ubatchs_slot() -> None:
    """The slot ``select_in_lane`` picks for a resolver's answer, a NumPy integer
    included (taken as its int)."""
    answers = iter([1, np.int64(0)])
    selector = SlotSelector(
        [f"slot {i}" for i in range(4)],  # type: ignore[misc]
        lanes=2,
        ubatch_resolver=lambda: next(answers),
        lane_resolver=None,
        name="test_lane",
        binding=_Binding,
    )
    assert selector.select_in_lane(1) == "slot 3"
    assert selector.select_in_lane(0) == "slot 0"


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="source='virtual' on the host is Linux's"
)
def test_each_failed_wake_counts_one_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """``wake_up`` #25 (``ooms = 1`` for ``+= 1``: a second failed wake left the count at
    one)."""
    from arena.memory.virtual import VirtualHostSource

    a = Arena("cpu", source="virtual", max_bytes="16MiB", framework="numpy")
    weights = a.numpy.get_persistent("w", (4096,), "uint8")
    weights[:] = 7
    a.sleep()

    def failing(self: VirtualHostSource, allocation: Any) -> None:
        raise MemoryError("injected")

    monkeypatch.setattr(VirtualHostSource, "restore", failing)
    for failed in (1, 2, 3):
        with pytest.raises(ArenaOutOfMemoryError, match="stays asleep"):
            a.wake()
        assert a.is_asleep
        assert a.memory_stats()["num_ooms"] == failed
    monkeypatch.undo()
    a.wake()
    assert not a.is_asleep
    assert (weights == 7).all()
    assert a.memory_stats()["num_ooms"] == 3
    a.close()
