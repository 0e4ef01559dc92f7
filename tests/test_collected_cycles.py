"""An arena dropped without close() inside a reference cycle (a listener, an on_grow callback
or a persistent resource that refers to it) still gives every block back to its source
when the cycle collector takes it."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import pytest

from arena import Arena
from tests.sources import RecordingSource


def _listener(ws: Arena) -> None:
    ws.add_listener(lambda event: ws)


def _on_grow(ws: Arena) -> None:
    ws.get_library_workspace("lib", 4096, on_grow=lambda view: ws)


def _resource(ws: Arena) -> None:
    ws.get_persistent_resource("handle", lambda: [ws])


def _none(ws: Arena) -> None:
    pass


@pytest.mark.parametrize("cycle", [_none, _listener, _on_grow, _resource])
def test_an_arena_collected_in_a_cycle_releases_every_block(
    cycle: Callable[[Arena], None],
) -> None:
    source = RecordingSource()
    ws: Any = Arena("cpu", ubatches=2, framework="numpy", source=source)
    cycle(ws)
    ws.get_simultaneous(((1024,), "float32"))
    ws.get_persistent("weights", (64,), "float32")
    ws.reserve_bytes(1 << 14)
    assert source.live
    gc.collect()
    gc.disable()  # the cycle is collected below, by this call, not at a random moment
    try:
        del ws
        gc.collect()
    finally:
        gc.enable()
    assert source.live == {}
    released = sorted(n for kind, n in source.events if kind == "release")
    assert released == sorted(source.allocations())
