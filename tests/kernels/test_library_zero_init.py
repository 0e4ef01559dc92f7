"""Library workspaces, round 2: ``zero_init`` on dirtied memory (issue 30, item 2),
``on_grow`` that raises or re-enters, and NaN keys (issue 26, item 6)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import arena
from tests.sources import DirtySource


def _arena(**kwargs: Any) -> arena.Arena:
    return arena.Arena("cpu", framework="numpy", source=DirtySource(), **kwargs)


def test_dirty_source_is_dirty_without_zero_init() -> None:
    with _arena() as ws:
        assert (ws.get_library_workspace("lib", 4096) == 0xA5).all()


def test_zero_init_zeroes_first_use_and_every_growth() -> None:
    with _arena() as ws:
        told: list[Any] = []
        first = ws.get_library_workspace("fi", 4096, zero_init=True)
        assert not first.any()
        first[:] = 7
        assert (ws.get_library_workspace("fi", 4096, zero_init=True) == 7).all()  # kept
        grown = ws.get_library_workspace("fi", 8192, zero_init=True, on_grow=told.append)
        assert grown.nbytes == 8192 and not grown.any()  # zero after growth, not copied
        assert told == [grown]


def test_zero_init_reaches_the_workspaces_lock_makes_for_siblings() -> None:
    with _arena(ubatches=2) as ws:
        with ws.ubatch(0):
            ws.get_library_workspace("fi", 4096, zero_init=True)[:] = 1
        ws.lock()
        with ws.ubatch(1):
            made = ws.get_library_workspace("fi", 4096, zero_init=True)
        assert made.nbytes == 4096 and not made.any()


def test_zero_init_on_a_workspace_made_without_it_zeroes_if_never_handed_out() -> None:
    with _arena(ubatches=2) as ws:
        with ws.ubatch(0):
            ws.get_library_workspace("fi", 4096)[:] = 1  # no zero_init here
        ws.lock()
        with ws.ubatch(1):  # lock() made it dirty; its first user asks for zeros
            assert not ws.get_library_workspace("fi", 4096, zero_init=True).any()
        with ws.ubatch(0):  # already in use: its contents stay
            assert (ws.get_library_workspace("fi", 4096, zero_init=True) == 1).all()


def test_zero_init_must_be_a_bool() -> None:
    with _arena() as ws, pytest.raises(arena.ConfigError, match="zero_init"):
        ws.get_library_workspace("fi", 4096, zero_init=1)  # type: ignore[arg-type]


class Wrapper:
    """A FlashInfer stand-in whose reset fails when told to."""

    def __init__(self) -> None:
        self.buffer: Any = None
        self.fail = 0

    def reset_workspace_buffer(self, buffer: Any) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("reset failed")
        self.buffer = buffer


def test_on_grow_that_raises_is_called_again_until_it_succeeds() -> None:
    with _arena() as ws:
        wrapper = Wrapper()
        wrapper.buffer = ws.get_library_workspace(
            "fi", 4096, on_grow=wrapper.reset_workspace_buffer
        )
        wrapper.fail = 1
        with pytest.raises(RuntimeError, match="reset failed"):
            ws.get_library_workspace("fi", 8192)
        assert wrapper.buffer.nbytes == 4096  # the library still holds the old one
        again = ws.get_library_workspace("fi", 8192)  # told again now
        assert wrapper.buffer is again and again.nbytes == 8192
        calls: list[Any] = []
        wrapper.reset_workspace_buffer = calls.append  # type: ignore[method-assign]
        ws.get_library_workspace("fi", 8192, on_grow=calls.append)
        assert calls == []  # told once it succeeded: never again


def test_reentrant_on_grow_gets_and_returns_the_current_view() -> None:
    with _arena() as ws:
        seen: list[int] = []

        def on_grow(view: Any) -> None:
            seen.append(view.nbytes)
            if view.nbytes < 16384:  # the library finds it needs more: asks again inside
                ws.get_library_workspace("fi", 16384)

        ws.get_library_workspace("fi", 4096, on_grow=on_grow)
        returned = ws.get_library_workspace("fi", 8192)
        current = ws.get_library_workspace("fi", 16384)
        assert returned is current and returned.nbytes == 16384
        assert seen == [8192, 16384]


@pytest.mark.parametrize("key", [float("nan"), ("fi", float("nan")), np.float64("nan")])
def test_nan_keys_are_refused(key: Any) -> None:
    with _arena() as ws:
        with pytest.raises(arena.SpecError, match="NaN"):
            ws.get_library_workspace(key, 4096)
        with pytest.raises(arena.SpecError, match="NaN"):
            ws.get_persistent(key, (4,), "float32")
        with pytest.raises(arena.SpecError, match="NaN"):
            ws.get_persistent_resource(key, dict)
        assert ws.memory_stats()["segment.all.current"] == 0
