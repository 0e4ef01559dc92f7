"""Plant round 47 on slot selection for one lane (:meth:`SlotSelector.select_in_lane`, what
``ws.triton_allocator(lane=k)`` selects with): a ubatch resolver's answer is checked there
as in :meth:`SlotSelector._select` (a plain request's), and one past the last ubatch is the
same :class:`SlotError` naming the resolver and the fix. Checked with ``<=``, that answer
indexed past the slots and came out as a bare ``IndexError``."""

from __future__ import annotations

import pytest

from arena import Arena, SlotError


def test_a_ubatch_resolver_answer_one_past_the_last_is_a_slot_error_for_a_lane() -> None:
    pytest.importorskip("torch")
    message = (
        "ubatch_resolver returned 2, but this arena has 2 ubatch slot(s) (0..1); "
        "construct the arena with ubatches=3 or more"
    )
    with Arena("cpu", framework="torch", ubatches=2, lanes=2, ubatch_resolver=lambda: 2) as ws:
        with pytest.raises(SlotError) as plain:
            ws.get_simultaneous(((4,), "uint8"))
        assert str(plain.value) == message
        allocate = ws.triton_allocator(lane=1)
        with pytest.raises(SlotError) as lane:
            allocate(64, 16, None)
        assert str(lane.value) == message
