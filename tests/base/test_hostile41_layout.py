"""Hostile review (hostile41) of the newcomer hints in arena/base/layout.py: a dimension
given as text."""

from __future__ import annotations

import pytest

from arena import Arena
from arena.errors import SpecError


@pytest.mark.parametrize("digits", [4301, 5000])
def test_a_dimension_of_decimal_text_too_long_for_int_is_a_spec_error(digits: int) -> None:
    """A dimension of numeric text gets the hint "use N", made with int(text): text past
    Python's int-from-str limit (4300 digits) raised that ValueError out of the request
    instead of the SpecError every other bad dimension gets (and no hint is then given)."""
    with Arena("cpu", framework="numpy") as ws:
        with pytest.raises(SpecError, match=r"dimension 0 must be an int, got str '9{10}"):
            ws.get_simultaneous((("9" * digits,), "float32"))
        with pytest.raises(SpecError, match=r"got str '4'; use 4$"):
            ws.get_simultaneous((("4",), "float32"))  # the hint still given where it fits


@pytest.mark.parametrize(
    ("dim", "shown"),
    [
        ("99999999999999999999", "str '99999999999999999999'"),
        (" 9223372036854775808", "str ' 9223372036854775808'"),
        (1e300, "float 1e+300"),
        (-4.0, "float -4.0"),
        (2.0**63, "float 9.223372036854776e+18"),
    ],
)
def test_the_use_hint_names_only_a_size_that_works(dim: object, shown: str) -> None:
    """ "use N" is advice: followed, it must work. A whole float or numeric text past
    MAX_BYTES, or a negative one, was told to "use" a value that is refused in turn."""
    with Arena("cpu", framework="numpy") as ws:
        with pytest.raises(SpecError) as info:
            ws.get_simultaneous(((dim,), "float32"))
        assert str(info.value) == f"spec #0: dimension 0 must be an int, got {shown}"


@pytest.mark.parametrize(
    ("dim", "use"), [(" 64 ", 64), ("9223372036854775807", 2**63 - 1), (8.0, 8)]
)
def test_the_use_hint_followed_works(dim: object, use: int) -> None:
    with Arena("cpu", framework="numpy") as ws:
        with pytest.raises(SpecError, match=f"; use {use}$"):
            ws.get_simultaneous(((dim,), "uint8"))
        if use < 1 << 20:
            (view,) = ws.get_simultaneous(((use,), "uint8"))
            assert view.shape == (use,)
