"""``ARENA_*`` variables that name a choice read their value as the yes/no flags do:
without case and surrounding spaces (``ARENA_SOURCE=VIRTUAL`` was refused while
``virtual`` worked); anything else is a ConfigError naming the accepted values."""

from __future__ import annotations

import pytest

from arena import Arena, ConfigError
from arena.environment import choice_from_env, flag_from_env
from arena.memory.sources import HostSource


@pytest.mark.parametrize("value", ["VIRTUAL", "Virtual", " virtual\t", "vIrTuAl"])
def test_arena_source_virtual_in_any_case(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from arena.memory.virtual import VirtualHostSource

    monkeypatch.setenv("ARENA_SOURCE", value)
    with Arena("cpu", framework="numpy", max_bytes="1MiB") as ws:
        assert isinstance(ws.source, VirtualHostSource)


@pytest.mark.parametrize("value", ["HOST", " Host ", "", "  "])
def test_arena_source_host_in_any_case_or_blank(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ARENA_SOURCE", value)
    with Arena("cpu", framework="numpy") as ws:
        assert type(ws.source) is HostSource


@pytest.mark.parametrize("value", ["virtul", "pinned", "1", "virtual host"])
def test_arena_source_other_values_are_refused_naming_the_accepted_ones(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("ARENA_SOURCE", value)
    with pytest.raises(ConfigError, match=rf"ARENA_SOURCE is {value!r}; set it to 'host' or "):
        Arena("cpu", framework="numpy")


def test_choices_and_flags_read_a_value_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw in (" ON ", "Yes", "TRUE"):
        monkeypatch.setenv("ARENA_TEST_VALUE", raw)
        assert flag_from_env("ARENA_TEST_VALUE") is True
        assert choice_from_env("ARENA_TEST_VALUE", ("off", raw.strip().lower()), "x") == (
            raw.strip().lower()
        )
    monkeypatch.delenv("ARENA_TEST_VALUE")
    assert choice_from_env("ARENA_TEST_VALUE", ("first", "second"), "x") == "first"
