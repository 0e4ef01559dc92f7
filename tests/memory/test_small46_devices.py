"""A negative ordinal spelled as text is refused as the int is (issue 26 item 12, small46).

``parse_device("cuda:-1")`` said "cannot understand device 'cuda:-1' (str); use 'cpu',
'cuda', ..." while ``parse_device(-1)`` said "CUDA device ordinal must be >= 0, got -1;
use e.g. 0": the text form now gets the specific message, naming the text and the fix.
``Arena("gpu")`` on a machine without a usable GPU said "cuda:0 is not available", not
naming "gpu": tests/test_small46_messages.py.
"""

from __future__ import annotations

import sys

import pytest

import arena
from arena import DeviceError
from arena.errors import ArenaError
from arena.memory.devices import parse_device


@pytest.mark.parametrize("text", ["cuda:-1", "gpu:-2", " CUDA:-3 ", "cuda:-0"])
def test_a_negative_ordinal_in_text_is_refused_as_a_negative_int_is(text: str) -> None:
    with pytest.raises(DeviceError) as caught:
        parse_device(text)
    assert str(caught.value) == f"CUDA device ordinal must be >= 0, got {text!r}; use e.g. 0"
    assert isinstance(caught.value, ArenaError) and isinstance(caught.value, ValueError)


def test_the_text_and_the_int_get_the_same_message_but_for_the_value() -> None:
    with pytest.raises(DeviceError) as text:
        parse_device("cuda:-1")
    with pytest.raises(DeviceError) as number:
        parse_device(-1)
    assert str(text.value).replace("'cuda:-1'", "-1") == str(number.value)


def test_an_arena_on_a_negative_ordinal_in_text_names_it() -> None:
    with pytest.raises(DeviceError, match=r"^CUDA device ordinal must be >= 0, got 'cuda:-1'"):
        arena.Arena("cuda:-1")


@pytest.mark.parametrize("text", ["cuda:--1", "cuda:-", "cuda:-x", "cuda-1", "cpu:-1"])
def test_other_text_keeps_the_general_message(text: str) -> None:
    with pytest.raises(DeviceError, match=r"^cannot understand device "):
        parse_device(text)


def test_a_negative_ordinal_of_more_digits_than_int_reads_is_not_repeated() -> None:
    digits = "9" * (sys.get_int_max_str_digits() + 1)
    with pytest.raises(DeviceError) as caught:
        parse_device("cuda:-" + digits)
    message = str(caught.value)
    assert message.startswith("cannot understand device 'cuda:-9999")
    assert f"its ordinal has {len(digits)} digits, more than int() reads" in message
    assert digits not in message


def test_text_ordinals_at_and_above_zero_still_parse() -> None:
    assert parse_device("cuda:0") == arena.Device("cuda", 0)
    assert parse_device("gpu:3") == arena.Device("cuda", 3)
