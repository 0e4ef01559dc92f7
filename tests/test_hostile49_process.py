"""The process-wide registry under a warning raised as an error, and its one flag.

``init_arena`` for a device that has an arena warns, then closes the previous arena. Where
warnings are errors (``-W error``, pytest's ``filterwarnings = error``), the warning
raised before the close: the previous arena left the registry but was never closed, and
its memory stayed held with nothing in the registry to reset. ``reset_arena`` took any
object as ``all_devices`` by its truth: ``all_devices="no"`` closed every arena.
"""

from __future__ import annotations

import pytest

import arena
from arena import ArenaWarning, ConfigError


def test_a_replaced_arena_is_closed_where_the_warning_is_an_error() -> None:
    previous = arena.init_arena("cpu", framework="numpy")
    previous.get_simultaneous(((1024,), "float32"))
    with pytest.raises(ArenaWarning, match=r"init_arena\('cpu'\) called again"):
        arena.init_arena("cpu", framework="numpy")
    assert previous.is_closed  # its memory went back, as the warning says
    assert previous.stats().live_bytes == 0
    replacement = arena.current_arena("cpu")
    assert replacement is not previous and not replacement.is_closed


@pytest.mark.parametrize("flag", ["no", "False", 0, 1, None])
def test_reset_arena_takes_a_bool_for_all_devices(flag: object) -> None:
    made = arena.init_arena("cpu", framework="numpy")
    with pytest.raises(ConfigError, match=r"all_devices must be True or False.*pass all_devices="):
        arena.reset_arena(all_devices=flag)  # type: ignore[arg-type]
    assert not made.is_closed
    assert arena.current_arena("cpu") is made


def test_reset_arena_all_devices_still_closes_every_arena() -> None:
    made = arena.init_arena("cpu", framework="numpy")
    arena.reset_arena(all_devices=True)
    assert made.is_closed
    assert not arena.is_arena_initialized("cpu")
    arena.reset_arena(all_devices=False)  # the default: the default device's, none here
