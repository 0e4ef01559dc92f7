"""What Round 17a of the mutation tests found the suite let through in ``arena/base/layout.py``
(issue 26 item 12): ``str_bytes_fix``, the hint a string byte count gets; each test names
the mutants it kills (mutmut's numbers on the round's sources commit)."""

from __future__ import annotations

import pytest

import arena
from arena.base.layout import MAX_BYTES, str_bytes_fix


def test_a_string_of_as_many_digits_as_the_largest_byte_count_names_its_int() -> None:
    # str_bytes_fix #6 (`len(text) < len(str(MAX_BYTES))`): a string of 19 digits, as many
    # as MAX_BYTES has, got the "pass the number of bytes as an int" hint instead of its int.
    nineteen = "1" + "0" * (len(str(MAX_BYTES)) - 1)
    assert str_bytes_fix(nineteen) == (
        f" (str is not a Python int: pass int(...) of it, {int(nineteen)})"
    )
    # One digit more is past any byte count: no int is named.
    assert str_bytes_fix(nineteen + "0") == (
        " (a str: pass the number of bytes as an int, such as 1 << 30 for 1 GiB)"
    )


def test_a_string_that_is_no_number_ends_the_message_with_the_hint_alone() -> None:
    # str_bytes_fix #8 ("XX (a str: ...)XX"): the tests read the hint as a part of the
    # message, so text around it went unseen; the whole message is checked here.
    with (
        arena.Arena("cpu", framework="numpy", profile=False) as a,
        pytest.raises(arena.ConfigError) as caught,
    ):
        a.reserve_bytes("1GB")  # type: ignore[arg-type]
    assert str(caught.value) == (
        "nbytes must be an int >= 0, got '1GB' (a str: pass the number of bytes as an int, "
        "such as 1 << 30 for 1 GiB)"
    )
