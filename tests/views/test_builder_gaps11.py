"""Gaps in the view builder's tests that mutation Round 11 found (mutants of
``arena/views/builder.py`` that survived the ``plans`` group's tests), each test failing
with its mutant planted."""

from __future__ import annotations

import pytest

from arena import Arena, ArenaLockedError

F32 = "float32"


def test_a_request_refused_while_locked_is_not_counted_and_not_uncounted() -> None:
    """A locked arena refuses a request larger than its slot: the slot's count of served
    calls stays where it was (Round 11: ``ViewBuilder.miss`` #235 took one off the count
    of a refused request, which ``ensure`` never counted)."""
    with Arena("cpu", framework="numpy") as ws:
        ws.numpy.get_simultaneous(((64,), F32))
        ws.lock()
        before = ws.stats().calls
        with pytest.raises(ArenaLockedError):
            ws.numpy.get_simultaneous(((1 << 16,), F32))
        assert ws.stats().calls == before
        ws.numpy.get_simultaneous(((64,), F32))
        assert ws.stats().calls == before + 1
