"""Planted bugs the suite let through in :mod:`arena.front` and :mod:`arena.core` (branch
plant36): each test names the bug it kills, was seen to fail with that bug planted, and
passes on the code."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from arena import Arena, DTypeError


class _BufferBacked:
    """An object of the array interface whose bytes are behind the buffer protocol:
    ``data`` is None (NumPy's array interface allows it)."""

    __array_interface__: ClassVar[dict[str, Any]] = {
        "shape": (2,),
        "typestr": "<f4",
        "version": 3,
        "data": None,
    }


def test_data_ptr_names_the_front_for_an_array_interface_without_an_address() -> None:
    # Plant F4: Front.data_ptr caught only AttributeError; an object whose adapter look-up
    # raised TypeError (an array interface with data None) escaped as the raw
    # "'NoneType' object is not subscriptable" instead of the DTypeError naming the front.
    with Arena("cpu", framework="numpy") as ws:
        with pytest.raises(DTypeError, match="the numpy front takes numpy arrays"):
            ws.numpy.data_ptr(_BufferBacked())
        (view,) = ws.get_simultaneous(((2,), "float32"))
        with pytest.raises(DTypeError, match="the numpy front takes numpy arrays"):
            ws.numpy.write_into(_BufferBacked(), view)
