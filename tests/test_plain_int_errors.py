"""A NumPy integer where a setting takes a Python int: the error says so (review 39).

``Arena(ubatches=np.int64(2))`` said "ubatches must be an int >= 1, got np.int64(2)", which
reads as a contradiction (2 is an int >= 1), and named no fix; so did ``lanes``,
``max_cached_layouts``, ``growth``, ``alignment``, ``max_bytes``, ``reserve_bytes()`` and a
library workspace's ``nbytes``. Each now says the value is no Python int and what to pass.
Dimensions take NumPy integers (tests/test_bad_input.py); settings stay plain ints.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import arena
from arena.errors import ArenaError


def _arena(**options: Any) -> arena.Arena:
    return arena.Arena("cpu", framework="numpy", profile=False, **options)


@pytest.mark.parametrize(
    ("call", "start", "shown"),
    [
        (lambda: _arena(ubatches=np.int64(2)), "ubatches must be an int >= 1, got ", "2"),
        (lambda: _arena(lanes=np.int32(3)), "lanes must be an int >= 1, got ", "3"),
        (lambda: _arena(max_cached_layouts=np.int64(5)), "max_cached_layouts must be", "5"),
        (lambda: _arena(growth=np.int64(4096)), "growth must be 'exact', 'pow2' or", "4096"),
        (lambda: _arena(alignment=np.int64(512)), "alignment must be an int power of", "512"),
        (lambda: _arena(max_bytes=np.uint64(4096)), "max_bytes must be a number of bytes", "4096"),
        (lambda: _arena().reserve_bytes(np.int64(100)), "nbytes must be an int >= 0", "100"),
        (lambda: _arena().get_library_workspace("k", np.int16(64)), "nbytes must be an int", "64"),
    ],
)
def test_a_numpy_integer_setting_is_refused_naming_the_plain_int_to_pass(
    call: Callable[[], Any], start: str, shown: str
) -> None:
    with pytest.raises(ArenaError) as caught:
        call()
    message = str(caught.value)
    assert message.startswith(start)
    assert "is not a Python int: pass int(...) of it, " + shown in message


def test_other_refused_values_keep_their_messages() -> None:
    with pytest.raises(
        arena.ConfigError,
        match=r"^ubatches must be an int >= 1, got 0; pass an int of 1 or more, e\.g\. ubatches=1$",
    ):
        _arena(ubatches=0)
    with pytest.raises(arena.ConfigError, match=r"^nbytes must be an int >= 0, got 1.5$"):
        _arena().reserve_bytes(1.5)  # type: ignore[arg-type]


def _float_fix(shown: str) -> str:
    return f" (float is not a Python int: pass int(...) of it, {shown})"


@pytest.mark.parametrize(
    ("call", "start", "fix"),
    [
        (
            lambda: _arena().reserve_bytes(1e9),
            "nbytes must be an int >= 0, got 1000000000.0",
            _float_fix("1000000000"),
        ),
        (
            lambda: _arena(max_bytes=8e9),
            "max_bytes must be a number of bytes",
            _float_fix("8000000000"),
        ),
        (lambda: _arena(ubatches=2.0), "ubatches must be an int >= 1, got 2.0", _float_fix("2")),
        (
            lambda: _arena().get_library_workspace("k", 1e6),
            "nbytes must be an int from 1",
            _float_fix("1000000"),
        ),
        # ``reserve_bytes("1GB")`` (``max_bytes`` takes such strings; byte counts do not)
        # said only "nbytes must be an int >= 0, got '1GB'" (found by a new user).
        (
            lambda: _arena().reserve_bytes("4096"),
            "nbytes must be an int >= 0, got '4096'",
            " (str is not a Python int: pass int(...) of it, 4096)",
        ),
        (
            lambda: _arena().reserve_bytes("1GB"),
            "nbytes must be an int >= 0, got '1GB'",
            " (a str: pass the number of bytes as an int, such as 1 << 30 for 1 GiB)",
        ),
        (
            lambda: _arena().get_library_workspace("k", "1MiB"),
            "nbytes must be an int from 1 to 9223372036854775807 bytes, got str '1MiB'",
            " (a str: pass the number of bytes as an int, such as 1 << 30 for 1 GiB)",
        ),
    ],
)
def test_a_whole_float_or_string_size_is_refused_naming_the_int_to_pass(
    call: Callable[[], Any], start: str, fix: str
) -> None:
    """``reserve_bytes(1e9)`` or ``max_bytes=8e9``, sizes written in scientific notation,
    said only "must be an int >= 0, got 1000000000.0" (found by a new user); a string
    size the same."""
    with pytest.raises(ArenaError) as caught:
        call()
    message = str(caught.value)
    assert message.startswith(start)
    assert fix in message
