"""``StreamHandle`` (what ``cupy.cuda.Stream.from_external`` reads on CuPy 14, and what
docs/jax.md tells a kernel to wrap ``ctx.stream`` in) takes a stream's address as an
integer: ``int()`` turned a float 3.9 into stream 3, the string "7" into stream 7 and
True into the legacy default stream (1); an address outside ``[0, 2**63)`` passed, and
CuPy failed only when an event was recorded (OverflowError, or a CUDA error for -1)."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

from arena import ConfigError
from arena.memory.deferred import StreamHandle, cupy_external_stream


@pytest.mark.parametrize(
    "handle",
    [0, 1, 2, 0x7F00_0000_1000, np.int64(0x7F00), np.uint64(0x7F00), np.intp(5), (1 << 63) - 1],
    ids=repr,
)
def test_an_integer_address_is_kept_as_an_exact_int(handle: Any) -> None:
    version, pointer = StreamHandle(handle).__cuda_stream__()
    assert (version, pointer) == (0, int(handle))
    assert type(version) is int and type(pointer) is int  # what CuPy's from_external checks


@pytest.mark.parametrize(
    "handle",
    [3.9, "7", True, np.float64(2.0), None, -1, 1 << 63, (1 << 64) - 1, np.uint64((1 << 64) - 1)],
    ids=repr,
)
def test_anything_else_is_refused_naming_it(handle: Any) -> None:
    with pytest.raises(ConfigError, match=r"StreamHandle needs a CUDA stream's address") as info:
        StreamHandle(handle)
    assert repr(handle) in str(info.value)


def test_cupy_13s_external_stream_is_given_the_checked_int() -> None:
    built: list[Any] = []
    cuda = types.SimpleNamespace(Stream=object, ExternalStream=built.append)
    cupy_external_stream(cuda, np.int64(0x7F00))
    assert built == [0x7F00] and type(built[0]) is int
    with pytest.raises(ConfigError):
        cupy_external_stream(cuda, 2.5)  # type: ignore[arg-type]
    assert built == [0x7F00]
