"""Plant round 47 on the slots layer's compiled region close (``close_region`` in
``arena/slots/_slot.c``, ``Slot.update_detour``'s compiled form): a scope entered and
left while the arena sleeps must leave the slot's detour flag up, as the Python method
does (``pending or regions or governor.asleep``). A close that recomputed it from the
pending growth and the open regions alone dropped it, and the next plain request on the
sleeping arena was served by the compiled hit over released memory (views whose reads
fault) instead of refused with :class:`ArenaAsleepError`."""

from __future__ import annotations

import sys

import pytest

from arena import Arena
from arena.errors import ArenaAsleepError

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="source='virtual' on the host is Linux's"
)


def test_a_scope_left_while_asleep_keeps_the_plain_request_refused() -> None:
    spec = ((64,), "float32")
    with Arena("cpu", framework="numpy", source="virtual") as ws:
        for _ in range(3):  # remembered: the next one is a hit
            ws.numpy.get_simultaneous(spec)
        for _ in range(3):  # the scope's enter and exit compiled
            with ws.scope() as scope:
                scope.get_simultaneous(spec)
        ws.sleep(level=1)
        with ws.scope():
            pass
        with pytest.raises(ArenaAsleepError, match="asleep"):
            ws.numpy.get_simultaneous(spec)
        ws.wake()
        (view,) = ws.numpy.get_simultaneous(spec)
        view[...] = 1.0  # awake again: the memory is back
