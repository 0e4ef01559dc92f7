"""Hostile round 45 on :func:`arena.memory.devices.parse_device`: a NumPy integer (a rank
read from an array, say) is refused, since an ordinal is a Python int, but the refusal
said only "use ... an int ordinal", which such a value looks like; it now says that it
must be a Python int and gives the ordinal to pass."""

from __future__ import annotations

import numpy as np
import pytest

from arena.errors import DeviceError
from arena.memory.devices import parse_device


@pytest.mark.parametrize("value", [np.int64(1), np.uint8(3), np.int32(0)])
def test_a_numpy_integer_is_refused_naming_the_int_to_pass(value: object) -> None:
    ordinal = int(value)  # type: ignore[call-overload]
    with pytest.raises(DeviceError) as caught:
        parse_device(value)
    text = str(caught.value)
    assert repr(value) in text and type(value).__name__ in text
    assert "must be a Python int" in text and f"int() of it ({ordinal})" in text
    assert f"'cuda:{ordinal}'" in text


@pytest.mark.parametrize("value", [True, np.bool_(False), np.int64(-1), 1.0])
def test_no_ordinal_is_offered_for_a_bool_a_negative_or_a_float(value: object) -> None:
    with pytest.raises(DeviceError, match="use 'cpu', 'cuda', 'cuda:N', an int ordinal"):
        parse_device(value)
