"""Configuration against bugs planted by hand (branch plant41, docs/testing.md
'Planted, 2026-12-03 (plant41)'): ``Arena.front``'s ``inference`` argument."""

from __future__ import annotations

from typing import Any

import pytest

import arena


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("value", [0, 0.0, "", []])
def test_a_falsy_inference_that_is_no_bool_is_refused(framework: str, value: Any) -> None:
    """inference must be True or False (or left out): a falsy non-bool (0, "", []) is
    refused naming the argument, as a truthy one is, on every framework. Plant killed:
    Arena.front checking ``inference`` only where it is truthy (``elif inference:`` for
    ``elif inference is not False:``), which took 0 or "" for False."""
    with (
        arena.Arena("cpu", framework="numpy") as ws,
        pytest.raises(arena.ConfigError, match="inference must be True or False"),
    ):
        ws.front(framework, inference=value)


@pytest.mark.parametrize("value", ["\u00a0", "\u3000", " \u00a0 ", "\u2003"])
def test_a_cap_of_other_spaces_alone_is_refused_not_taken_as_unset(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Only ASCII blanks leave ARENA_MAX_BYTES unset; a value of other spaces alone (a
    no-break space pasted in) is no byte count and is refused, as parse_bytes refuses
    them between digits. Plant killed: max_bytes_from_env testing blankness with
    ``str.strip()``, which strips every Unicode space (the arena ran with no cap)."""
    monkeypatch.setenv("ARENA_MAX_BYTES", value)
    with pytest.raises(arena.ConfigError, match="ARENA_MAX_BYTES must be a number of bytes"):
        arena.Arena("cpu", framework="numpy")


@pytest.mark.parametrize("value", ["", " ", " \t\n"])
def test_a_cap_of_ascii_blanks_is_unset(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """The other side of the plant above: ASCII blanks make no cap."""
    monkeypatch.setenv("ARENA_MAX_BYTES", value)
    with arena.Arena("cpu", framework="numpy") as ws:
        assert ws._table.governor.max_bytes is None


@pytest.mark.parametrize("value", ["Virtul", " PINNED ", "Host Memory"])
def test_a_refused_choice_is_named_as_it_was_set(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """ARENA_SOURCE's refusal names the value as the user set it (its case kept, only
    the surrounding spaces gone), so it can be found in their scripts. Plant killed:
    choice_from_env naming the lowered word (``value!r`` for ``raw.strip()!r``): every
    refused value of the existing tests was lower case already."""
    monkeypatch.setenv("ARENA_SOURCE", value)
    shown = repr(value.strip())
    with pytest.raises(arena.ConfigError) as info:
        arena.Arena("cpu", framework="numpy")
    assert f"ARENA_SOURCE is {shown}; set it to 'host' or 'virtual'" in str(info.value)
