"""Hostile round 44 on ``parse_device``: odd device strings are a DeviceError naming the
value received, never another error, and a torch.device is named as itself."""

from __future__ import annotations

import sys

import pytest

from arena.errors import DeviceError
from arena.memory.devices import CPU, Device, parse_device


@pytest.mark.parametrize("prefix", ["cuda:", "gpu:", "cpu:", "host:"])
def test_an_ordinal_longer_than_int_reads_is_a_device_error(prefix: str) -> None:
    """Digits past ``sys.get_int_max_str_digits()`` passed ``isdecimal`` and made int()
    raise a ValueError out of parse_device (as 'cuda:²' did before isdecimal)."""
    limit = sys.get_int_max_str_digits()
    if limit == 0:
        pytest.skip("int() reads any number of digits here")
    text = prefix + "1" * (limit + 1)
    with pytest.raises(DeviceError, match=rf"{limit + 1} digits, more than int\(\) reads"):
        parse_device(text)


def test_ordinals_int_reads_still_parse() -> None:
    assert parse_device("cuda:00012") == Device("cuda", 12)
    assert parse_device(" GPU:3 ") == Device("cuda", 3)
    assert parse_device("cpu:000") == CPU


def test_a_torch_device_it_cannot_use_is_named_as_received() -> None:
    """The message named the text of the torch.device, "'meta' (str)", not the value
    received."""
    torch = pytest.importorskip("torch")
    with pytest.raises(DeviceError, match=r"device\(type='meta'\) \(device\)"):
        parse_device(torch.device("meta"))
    with pytest.raises(DeviceError, match=r"got device\(type='cpu', index=1\)"):
        parse_device(torch.device("cpu", 1))
    assert parse_device(torch.device("cuda", 2)) == Device("cuda", 2)
    assert parse_device(torch.device("cpu", 0)) == CPU
