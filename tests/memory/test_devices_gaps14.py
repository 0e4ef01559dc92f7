"""What Round 14i's fresh draw of ``arena/memory/devices.py`` (after ``parse_device``'s
last change) found the suite let through (issue 26 item 12): each refusal names what it
refused, and only a ``cuda:`` or ``gpu:`` prefix makes an ordinal a CUDA device."""

from __future__ import annotations

import sys

import pytest

from arena.errors import DeviceError
from arena.memory.devices import parse_device


def test_a_bool_device_is_refused_naming_the_bool() -> None:
    """Kills ``parse_device`` #1 (the bool's refusal without its message)."""
    with pytest.raises(DeviceError) as refused:
        parse_device(True)
    assert str(refused.value).startswith("cannot understand device True (bool); use 'cpu'")


@pytest.mark.parametrize("text", ["tpu:12", "xla:13", "abcde7"])
def test_an_ordinal_after_another_prefix_is_no_cuda_device(text: str) -> None:
    """Kills ``parse_device`` #61 (``and`` made ``or``: any text whose characters past
    the prefix's length are decimal read as a CUDA ordinal)."""
    with pytest.raises(DeviceError, match=rf"^cannot understand device {text!r} \(str\)"):
        parse_device(text)


def test_an_ordinal_past_the_digit_limit_names_the_device_given() -> None:
    """Kills ``parse_device`` #70 (the refusal naming ``None`` for the device)."""
    digits = "7" * (sys.get_int_max_str_digits() + 1)
    with pytest.raises(DeviceError) as refused:
        parse_device("gpu:" + digits)
    assert str(refused.value).startswith("cannot understand device 'gpu:77777777777777777777'...")
