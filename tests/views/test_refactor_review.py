"""What issue 27's one miss path must keep from the path it replaced (found by review).

A request the arena refuses after :meth:`~arena.slots.slot.Slot.ensure` gave it a buffer
(a resize listener that raises or closes the arena, the first import of a buffer during
a CUDA graph capture) was never counted: not in ``calls``, not in LOAD, not in the
largest plain request. Since ensure() counts the request it serves, the miss path has to
take that back when the request goes on to be refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from arena import Arena, ArenaClosedError, ArenaEvent, GraphCaptureError

F32 = "float32"


def _figures(ws: Arena) -> tuple[int, int, int, int]:
    """calls (stats and memory_stats), the slot's LOAD and its largest plain request."""
    stats = ws.stats()
    slot = ws.numpy._select()
    return stats.calls, ws.memory_stats()["arena.calls"], stats.slots[0].load, slot.plain_high


def _raising(ws: Arena) -> Callable[[ArenaEvent], None]:
    def listener(event: ArenaEvent) -> None:
        if event.kind == "resize":
            raise RuntimeError("a listener that refuses the resize")

    return listener


def _closing(ws: Arena) -> Callable[[ArenaEvent], None]:
    def listener(event: ArenaEvent) -> None:
        if event.kind == "resize":
            ws.close()

    return listener


@pytest.mark.parametrize(
    ("make", "error"), [(_raising, RuntimeError), (_closing, ArenaClosedError)]
)
def test_a_request_a_resize_listener_refuses_is_not_counted(
    hit_path: str, make: Callable[[Arena], Callable[[ArenaEvent], None]], error: type
) -> None:
    """On 8e69a31: calls 2 (the refused request counted) and LOAD and plain_high of the
    refused request's 400,128 bytes; on eefede3: 1, and the warm-up's 256."""
    ws = Arena("cpu", framework="numpy")
    ws.get_simultaneous(((4,), F32))
    before = _figures(ws)
    assert before[:2] == (1, 1)
    ws.add_listener(make(ws))
    with pytest.raises(error):
        ws.get_simultaneous(((100_000,), F32))  # grows the slot: the listener hears it
    assert _figures(ws) == before
    ws.close()


def _scope_request(ws: Arena) -> Any:
    with ws.scope() as scope:
        return scope.get_simultaneous(((16,), F32))


def _general_request(ws: Arena) -> Any:
    # No views: no plan serves it, the general path places it at offset 0.
    return ws.get_simultaneous()


@pytest.mark.parametrize("request_", [_scope_request, _general_request])
def test_a_request_refused_during_a_capture_is_not_counted(
    hit_path: str, request_: Callable[[Arena], Any]
) -> None:
    """A buffer no view was made of yet (reserved) cannot be imported during a capture:
    the request is refused with GraphCaptureError and leaves the figures as they were
    (on 8e69a31 it was counted)."""
    capturing = [False]
    ws = Arena("cpu", framework="numpy", capture_probe=lambda: capturing[0])
    ws.reserve(((1024,), F32))
    before = _figures(ws)
    capturing[0] = True
    with pytest.raises(GraphCaptureError, match="first numpy view"):
        request_(ws)
    capturing[0] = False
    assert _figures(ws) == before
    request_(ws)  # served once the capture is over, and counted once
    assert _figures(ws)[:2] == (1, 1)
    ws.close()
