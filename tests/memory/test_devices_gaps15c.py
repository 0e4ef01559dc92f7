"""Round 15c (issue 26 item 12): what a fresh draw of ``arena/memory/devices.py`` (after
the NumPy integer's refusal was added) found the suite let through: the refusal of an
ordinal past int()'s digit limit names the device given and its type, after the host's
prefix as after CUDA's."""

from __future__ import annotations

import sys

import pytest

from arena.errors import DeviceError
from arena.memory.devices import parse_device


@pytest.mark.parametrize("prefix", ["cpu:", "host:", "cuda:"])
def test_an_ordinal_past_the_digit_limit_names_the_device_and_its_type(prefix: str) -> None:
    """Kills ``_ordinal`` #5 (the type named ``NoneType``) and ``parse_device`` #39 (the
    host's ordinal read as that of device ``None``: "cannot understand device 'None'...")."""
    digits = "7" * (sys.get_int_max_str_digits() + 1)
    with pytest.raises(DeviceError) as refused:
        parse_device(prefix + digits)
    shown = repr((prefix + digits)[:24])
    assert str(refused.value).startswith(f"cannot understand device {shown}... (str): its ")
    assert f"ordinal has {len(digits)} digits" in str(refused.value)
